// The mindformers format (launch/launch.h): a plan written as a MindSpore Transformers
// (MindFormers) v1.5.0 training YAML for LlamaForCausalLM and the msrun_launcher.sh line
// that starts it on N nodes of G NPUs; the reader is launch/mindformers_import.cpp.
//
// Every key carries a comment with its meaning and the MindFormers / MindSpore source it
// comes from. Abbreviations in those comments (all MindFormers v1.5.0 = 06e1af77, the
// extract tests/fixtures/frameworks/mindformers_keys.txt lists each key with them):
//   TPL  mindformers/tools/register/template.py (the defaults MindFormerConfig applies)
//   TR   mindformers/modules/transformer/transformer.py   LC  mindformers/models/llama/llama_config.py
//   MU   mindformers/models/utils.py (LayerSetting)       CR  mindformers/tools/check_rules.py
//   BT   mindformers/trainer/base_trainer.py              FA  mindformers/modules/flash_attention.py
//
// What v1.5.0 cannot express is refused naming the plan field (see check_expressible).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "launch/formats.h"
#include "launch/mindformers_common.h"
#include "planner/cost/plan_check.h"

namespace llmplan::launch_formats {

namespace mf = mindformers;

namespace {


// A float as PyYAML reads a float: YAML 1.1 floats need a '.', so 1e-05 would be a string.
std::string yaml_float(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", x);
  std::string s = buf;
  if (s.find('.') == std::string::npos) {
    const size_t e = s.find_first_of("eE");
    if (e == std::string::npos) s += ".0";
    else s.insert(e, ".0");
  }
  return s;
}

// The file name's stem: the model's name with anything but [A-Za-z0-9._-] replaced.
std::string file_stem(const std::string& name) {
  std::string s = name.empty() ? "model" : name;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return s;
}

// The first plan field MindFormers v1.5.0 (LlamaForCausalLM on Ascend) cannot express, as
// bad_input naming it; ok when it can express them all.
Status check_expressible(const PlanFile& f) {
  const ModelSpec& m = f.model;
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  auto refuse = [](const std::string& what) { return Status::bad_input(what); };
  if (j.moments == MomentsDtype::bf16)
    return refuse("job.moments: bf16: this export writes AdamW with float32 moments (FP32StateAdamWeightDecay) or SGD; "
                  "it does not write bf16 moment states");
  // Model.
  if (m.family != Family::llama)
    return refuse("model.family: " + std::string(to_string(m.family)) + ": " + mf::kVersion +
                  "'s LlamaForCausalLM is a Llama block (RMSNorm, SwiGLU, rotary); GPT-style blocks (LayerNorm, GELU, "
                  "learned positions) are other MindFormers model types this export does not write");
  if (m.qk_norm)
    return refuse("model.qk_norm: true: " + std::string(mf::kVersion) +
                  "'s Llama attention has no RMSNorm of q and k (mindformers/models/llama/llama_transformer.py "
                  "LLamaAttention; Qwen3's QK-norm arrives with the v1.7 'mcore' models)");
  if (m.head_width() * m.heads != m.hidden)
    return refuse("model.head_dim: " + std::to_string(m.head_width()) + " x " + std::to_string(m.heads) + " heads != hidden " +
                  std::to_string(m.hidden) + ": " + mf::kVersion +
                  "'s LlamaConfig has no head_dim; each head is hidden_size // num_heads wide "
                  "(mindformers/models/llama/llama_transformer.py L146)");
  if (m.moe.enabled() && m.moe.shared_experts > 0)
    return refuse("model.moe.shared_experts: " + std::to_string(m.moe.shared_experts) +
                  ": not written: v1.5.0 routes shared experts through LlamaFeedForwardWithMoE "
                  "(llama_transformer.py L966-973), whose expert widths this export does not map");
  if (m.moe.enabled() && m.moe.expert_ffn_hidden != m.ffn_hidden)
    return refuse("model.moe.expert_ffn_hidden: " + std::to_string(m.moe.expert_ffn_hidden) + " != ffn_hidden " +
                  std::to_string(m.ffn_hidden) + ": " + mf::kVersion +
                  "'s Llama MoE builds every expert from intermediate_size (llama_transformer.py L924-940: the "
                  "LlamaFeedForward handed to MoEV2), so the expert and dense widths are one key");
  // Job.
  if (j.fp8_linear())
    return refuse("job.fp8: " + std::string(to_string(j.fp8)) + ": " + mf::kVersion +
                  " has no FP8 training on Ascend (convert_mstype reads float16, float32, bfloat16 and int8 only: "
                  "mindformers/models/utils.py L43-57)");
  if (j.qlora())
    return refuse("job.mode: qlora: " + std::string(mf::kVersion) +
                  "'s LoRA (model_config.pet_config, mindformers/pet/pet_config.py LoraConfig) keeps the base weights "
                  "in param_init_type; it has no 4-bit NormalFloat base");
  if (j.frozen_layer_count(m.layers) > 0)
    return refuse("job.frozen_layers: " + std::to_string(j.frozen_layer_count(m.layers)) +
                  " frozen bottom layers: no MindFormers v1.5.0 key freezes whole layers of a Llama run "
                  "(pet_config's freeze_include applies to LoRA's own parameter filter)");
  if (j.precision != Precision::fp32 && j.amp == AmpLevel::O1)
    return refuse("job.amp: O1: MindFormers' Llama casts each layer to compute_dtype with param_init_type weights "
                  "(LC L152-156): float32 weights are O2, 16-bit weights O3; it has no per-operator autocast list (O1)");
  if (j.mode == TrainMode::lora)
    for (const std::string& t : j.lora.targets)
      if (mf::lora_cell(t).empty())
        return refuse("job.lora.targets: '" + t + "' names no projection of MindFormers' Llama block (wq wk wv wo w1 w2 w3)");
  // Plan.
  if (p.zero >= 3)
    return refuse("plan.zero: 3 (parameters gathered for each use and freed after it): not expressible for " +
                  std::string(mf::kVersion) +
                  " LlamaForCausalLM: MindSpore's optimizer parallel keeps the weights it all-gathers in the forward "
                  "until the backward; re-gathering them (recompute_config.parallel_optimizer_comm_recompute) is "
                  "applied by GLM2 and T5 only (mindformers/models/glm2/glm2.py L356-358), and MindSpore's "
                  "optimizer_level 'level3' has no v1.5.0 key");
  if (p.offload_optimizer)
    return refuse("plan.offload_optimizer: true: " + std::string(mf::kVersion) +
                  " has no key that keeps optimizer states and master weights in host memory; "
                  "FusedAdamWeightDecay(offload=True) only runs the update on the CPU "
                  "(mindformers/core/optim/optim.py L232-242) and leaves the float32 parameters on the device");
  if (p.pp > 1 && splits_backward(p.schedule))
    return refuse("plan.schedule: " + std::string(to_string(p.schedule)) +
                  ": parallel.pipeline_config.pipeline_scheduler is 1f1b, seqpipe or seqvpp in the MindFormers v1.5.0 configs; "
                  "none splits the backward into input and weight gradients");
  if (p.pp > 1 && p.schedule == Schedule::gpipe)
    return refuse("plan.schedule: gpipe: the MindFormers v1.5.0 configs run pipelines with parallel.pipeline_config."
                  "pipeline_scheduler '1f1b' (or seqpipe/seqvpp); GPipe is not written");
  if (p.vpp > 1 && p.schedule != Schedule::interleaved)
    return refuse("plan.schedule: " + std::string(to_string(p.schedule)) + " with vpp " + std::to_string(p.vpp) +
                  ": MindFormers runs pp_interleave_num chunks only as an interleaved pipeline (MU L146-164)");
  if (p.pp > 1 && p.grad_accum < p.pp)
    return refuse("plan.grad_accum: " + std::to_string(p.grad_accum) + " micro-batches < pp " + std::to_string(p.pp) +
                  ": MindFormers needs parallel_config.micro_batch_num >= pipeline_stage when training (TR L549)");
  if (p.activation_offload_layers > 0 && (p.recompute == Recompute::full || p.recompute == Recompute::full_k))
    return refuse("plan.activation_offload_layers: " + std::to_string(p.activation_offload_layers) + " with " +
                  to_string(p.recompute) +
                  " recompute: MindFormers' swap does not act on recomputed layers (MU L248-250 warns that they "
                  "\"do not work\"), and with swap on its recompute lists change form (CR L295-298)");
  return Status::ok();
}

// --------------------------------------------------------------- YAML writing helpers

class Writer {
 public:
  Writer() {
    out_.SetBoolFormat(YAML::CamelCase);  // True / False, as the MindFormers configs write them
    out_.SetIndent(2);
  }
  YAML::Emitter& e() { return out_; }
  template <class T>
  void kv(const char* key, const T& value, const std::string& comment) {
    out_ << YAML::Key << key << YAML::Value << value;
    if (!comment.empty()) out_ << YAML::Comment(comment);
  }
  void str(const char* key, const std::string& value, const std::string& comment) {
    out_ << YAML::Key << key << YAML::Value << YAML::SingleQuoted << value;
    if (!comment.empty()) out_ << YAML::Comment(comment);
  }
  // A float written so that PyYAML reads a float (see yaml_float).
  void num(const char* key, double value, const std::string& comment) {
    out_ << YAML::Key << key << YAML::Value << yaml_float(value);
    if (!comment.empty()) out_ << YAML::Comment(comment);
  }
  void ints(const char* key, const std::vector<int>& v, const std::string& comment) {
    out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int x : v) out_ << x;
    out_ << YAML::EndSeq;
    if (!comment.empty()) out_ << YAML::Comment(comment);
  }
  void int_rows(const char* key, const std::vector<std::vector<int>>& rows, const std::string& comment) {
    out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const std::vector<int>& r : rows) {
      out_ << YAML::Flow << YAML::BeginSeq;
      for (int x : r) out_ << x;
      out_ << YAML::EndSeq;
    }
    out_ << YAML::EndSeq;
    if (!comment.empty()) out_ << YAML::Comment(comment);
  }
  void begin(const char* key, const std::string& comment) {
    out_ << YAML::Newline << YAML::Key << key;
    if (!comment.empty()) out_ << YAML::Comment(comment);
    out_ << YAML::Value << YAML::BeginMap;
  }
  void begin_inner(const char* key, const std::string& comment) {
    out_ << YAML::Key << key;
    if (!comment.empty()) out_ << YAML::Comment(comment);
    out_ << YAML::Value << YAML::BeginMap;
  }
  void end() { out_ << YAML::EndMap; }

 private:
  YAML::Emitter out_;
};

struct Derived {
  int pp_micro_batches = 1;   // parallel_config.micro_batch_num
  int accumulation = 1;       // runner_config.gradient_accumulation_steps
  bool master_fp32 = true;    // param_init_type float32
  std::vector<int> stage_layers;  // per virtual stage
};

void write_recompute(Writer& w, const PlanFile& f, const Derived& d) {
  const ParallelPlan& p = f.plan;
  w.begin("recompute_config", "recomputation, TR L391-416 (TransformerRecomputeConfig), applied per layer by MU L387-418");
  switch (p.recompute) {
    case Recompute::full:
      w.kv("recompute", true, "plan.recompute full: every layer keeps only its input and reruns its forward in backward");
      break;
    case Recompute::full_k: {
      const std::string what = "plan.recompute full_k: the first " + std::to_string(p.recompute_layers) +
                               " layers of each model chunk recomputed whole (MU L446-485, L516-521)";
      if (p.vpp > 1) {
        std::vector<std::vector<int>> rows(static_cast<size_t>(p.vpp), std::vector<int>(static_cast<size_t>(p.pp)));
        for (int c = 0; c < p.vpp; ++c)
          for (int s = 0; s < p.pp; ++s)
            rows[static_cast<size_t>(c)][static_cast<size_t>(s)] =
                std::min(p.recompute_layers, d.stage_layers[static_cast<size_t>(c * p.pp + s)]);
        w.int_rows("recompute", rows, what + "; a row per interleave chunk, an entry per stage");
      } else {
        std::vector<int> per(static_cast<size_t>(p.pp));
        for (int s = 0; s < p.pp; ++s) per[static_cast<size_t>(s)] = std::min(p.recompute_layers, d.stage_layers[static_cast<size_t>(s)]);
        w.ints("recompute", per, what + "; an entry per pipeline stage (CR L273-278: at most pipeline_stage entries)");
      }
      break;
    }
    default: w.kv("recompute", false, "no whole-layer recompute"); break;
  }
  if (p.recompute == Recompute::selective)
    w.kv("select_recompute", true,
         "plan.recompute selective; MindFormers' default patterns recompute SwiGLU's feed_forward.mul and "
         "w1.activation.silu (MU L142), not attention scores (fused flash attention keeps none)");
  else
    w.kv("select_recompute", false, "no operator-level recompute");
  w.kv("parallel_optimizer_comm_recompute", false,
       "re-gather optimizer-parallel weights in backward: not applied by LlamaForCausalLM in v1.5.0 (ZeRO-3 is refused)");
  w.kv("mp_comm_recompute", true, "recompute model-parallel communication inside recomputed cells (TPL L322 default)");
  w.kv("recompute_slice_activation", false, "keep a recomputed layer's saved input as is (sequence-sharded when use_seq_parallel)");
  w.end();
}

void write_model(Writer& w, const PlanFile& f, const Derived& d) {
  const ModelSpec& m = f.model;
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  w.begin("model", "the network: LlamaConfig (LC L135-195) and LlamaForCausalLM");
  w.begin_inner("model_config", "from llmplan's model " + m.name);
  w.kv("type", "LlamaConfig", "MindFormers' Llama config class");
  w.kv("batch_size", p.micro_batch, "per-replica batch (LC L135; the trainer uses runner_config.batch_size)");
  w.kv("seq_length", j.seq_len, "job.seq_len: tokens per sequence");
  w.kv("hidden_size", m.hidden, "model.hidden");
  w.kv("num_layers", m.layers, "model.layers: transformer blocks");
  w.kv("num_heads", m.heads, "model.heads: query heads (head width = hidden_size / num_heads)");
  w.kv("n_kv_heads", m.kv_heads, "model.kv_heads: key/value heads (GQA; None = num_heads, LC L140)");
  w.kv("max_position_embedding", m.max_positions, "model.max_positions (None = seq_length, LlamaConfig.__init__)");
  w.kv("intermediate_size", m.ffn_hidden,
       "model.ffn_hidden: SwiGLU width, given directly rather than from multiple_of/ffn_dim_multiplier "
       "(llama_layer.py LlamaFeedForward: intermediate_size wins when set)");
  w.kv("vocab_size", m.vocab, "model.vocab");
  w.num("rms_norm_eps", 1e-5, "RMSNorm epsilon: not in llmplan's model spec; LlamaConfig's default (LC L146): check the model's config");
  w.kv("compute_dtype", mf::dtype_name(j.precision), "job.precision: the dtype of the linear layers' compute (LC L152)");
  w.kv("layernorm_compute_type", "float32", "RMSNorm in float32 (LC L153)");
  w.kv("softmax_compute_type", "float32", "softmax in float32 (LC L154)");
  w.kv("rotary_dtype", "float32", "rotary embedding in float32 (LC L155)");
  w.kv("param_init_type", d.master_fp32 ? "float32" : mf::dtype_name(j.precision),
       d.master_fp32 ? "weights kept in float32, cast to compute_dtype per layer: fp32 master weights (job.amp O2)"
                     : "weights kept in the 16-bit compute dtype, no float32 master (job.amp O3)");
  w.kv("qkv_has_bias", m.qkv_bias(), "model.attention_bias: biases on wq, wk, wv (LC L159)");
  w.kv("attn_proj_has_bias", m.o_bias(), "model.attention_bias all: a bias on wo too (llama_config.py attn_proj_has_bias)");
  w.kv("tie_word_embeddings", m.tied_embeddings, "model.tied_embeddings: LM head shares the embedding (LC L187)");
  w.kv("use_flash_attention", p.flash_attention, "plan.flash_attention: fused attention, no s x s scores kept (LC L169)");
  if (p.cp > 1)
    w.kv("use_ring_attention", p.cp_exchange == CpExchange::ring,
         p.cp_exchange == CpExchange::ring
             ? "plan.cp_exchange ring: K and V split along the sequence and passed round the ring (FA L199-211)"
             : "plan.cp_exchange all_gather: K and V gathered whole across context_parallel, queries stay split (FA L203-216)");
  if (p.vpp > 1)
    w.kv("pp_interleave_num", p.vpp,
         "plan.vpp: model chunks per pipeline stage (interleaved pipeline; needs parallel.pipeline_config."
         "pipeline_interleave, MU L146-164). Not micro_batch_interleave_num, which splits a micro-batch to overlap "
         "model-parallel communication");
  const int chunks = std::max(1, p.vpp);
  const std::vector<std::vector<int>> off = mf::offsets_for(m.layers, p.pp, chunks, d.stage_layers);
  bool all_zero = true;
  for (const auto& r : off)
    for (int x : r) all_zero &= x == 0;
  const std::string off_what = "layers per stage = num_layers // (pp * chunks) + offset, sum(offset) == num_layers % (pp * chunks) "
                               "(MU L165-170, L559-569): llmplan's " + std::string(to_string(p.pipeline_split)) + " split [" +
                               mf::join_ints(d.stage_layers) + "]";
  if (all_zero) w.kv("offset", 0, "even split: " + off_what);
  else if (chunks == 1) w.ints("offset", off[0], off_what);
  else w.int_rows("offset", off, off_what + "; a row per interleave chunk");
  if (j.mode == TrainMode::lora) {
    std::string rx;
    for (const std::string& t : j.lora.targets) rx += (rx.empty() ? ".*" : "|.*") + mf::lora_cell(t);
    w.begin_inner("pet_config", "job.mode lora: mindformers/pet/pet_config.py LoraConfig (configs/llama2/lora_llama2_7b.yaml L163-169)");
    w.kv("pet_type", "lora", "low-rank adapters beside frozen weights");
    w.kv("lora_rank", j.lora.rank, "job.lora.rank: r");
    w.num("lora_alpha", j.lora.alpha, "job.lora.alpha: the update is scaled by lora_alpha / lora_rank");
    w.num("lora_dropout", 0.0, "no dropout on the adapters' input (llmplan models none)");
    w.str("target_modules", rx, "job.lora.targets over Llama's cells: wq wk wv wo, w1 gate, w3 up, w2 down");
    w.end();
  }
  w.end();
  w.begin_inner("arch", "the model class");
  w.kv("type", "LlamaForCausalLM", "MindFormers' Llama causal LM (mindformers/models/llama/llama.py)");
  w.end();
  w.end();
}

std::string write_yaml(const PlanFile& f, const ExportOptions& opt, const Derived& d, const std::string& yaml_name) {
  const ModelSpec& m = f.model;
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  Writer w;
  YAML::Emitter& e = w.e();
  e << YAML::Comment(yaml_name + ": MindSpore Transformers (" + std::string(mf::kVersion) +
                     ") training config written by llmplan export from a plan of " + m.name + " on " + std::to_string(f.gpus) +
                     " devices (" + std::to_string(f.cluster.nodes) + " x " + std::to_string(f.cluster.gpus_per_node) +
                     "). Start it with msrun.sh beside it.");
  e << YAML::Newline << YAML::BeginMap;
  w.kv("seed", 0, "random seed (TPL L237)");
  w.str("output_dir", "./output", "checkpoints and strategy files (TPL L238)");
  w.str("run_mode", j.mode == TrainMode::pretrain ? "train" : "finetune",
        j.mode == TrainMode::pretrain ? "job.mode pretrain (TPL L239)" : "job.mode " + std::string(to_string(j.mode)) + ": fine-tune (TPL L239)");
  w.kv("use_parallel", true, "distributed run (TPL L240)");
  w.kv("micro_batch_interleave_num", 1,
       "no micro-batch split for communication overlap (TPL L278; a different feature from pp_interleave_num)");

  w.begin("trainer", "the task trainer");
  w.kv("type", "CausalLanguageModelingTrainer", "causal language modelling");
  w.str("model_name", m.name, "a label");
  w.end();

  w.begin("runner_config", "RunnerConfig (TPL L389-398)");
  w.kv("epochs", 1, "passes over the dataset (training stops at stop_step first)");
  w.kv("batch_size", p.micro_batch, "plan.micro_batch: sequences per micro-batch per data-parallel replica");
  w.kv("sink_mode", true, "data sinking (TPL L392)");
  w.kv("sink_size", 1, "steps per sink (TPL L393)");
  w.kv("gradient_accumulation_steps", d.accumulation,
       p.pp > 1 ? "not used with pipeline_stage > 1: micro_batch_num accumulates (BT L199-209)"
                : "plan.grad_accum: micro-batches per optimizer step (BT L211-219)");
  w.kv("stop_step", opt.train_steps, "steps to run, then stop (BT L984-987: TrainCallBack)");
  w.end();

  w.begin("runner_wrapper", "the train-one-step cell (TPL WrapperConfig)");
  w.kv("type", "MFTrainOneStepCell", "MindFormers' train step with gradient clipping");
  if (j.precision == Precision::fp16) {
    w.begin_inner("scale_sense", "job.precision fp16: dynamic loss scaling (the template's default, TPL WrapperConfig)");
    w.kv("type", "DynamicLossScaleUpdateCell", "loss scale that backs off on overflow");
    w.kv("loss_scale_value", 65536, "initial scale");
    w.kv("scale_factor", 2, "growth and back-off factor");
    w.kv("scale_window", 1000, "steps without overflow before growing");
    w.end();
  } else {
    w.num("scale_sense", 1.0, "job.precision " + std::string(to_string(j.precision)) + ": no loss scaling (as pretrain_llama2_70b_bf16_32p.yaml)");
  }
  w.kv("use_clip_grad", true, "clip the gradient norm");
  w.end();

  w.begin("optimizer", "the optimizer; its hyper-parameters (betas, eps, weight decay) are MindFormers' defaults: set yours");
  if (j.optimizer == Optimizer::sgd_momentum) {
    w.kv("type", "Momentum", "job.optimizer sgd_momentum: mindspore.nn.Momentum, one momentum buffer in the parameters' dtype");
    w.num("momentum", 0.9, "momentum factor (a placeholder: set yours)");
  } else if (d.master_fp32) {
    w.kv("type", "FP32StateAdamWeightDecay", "job.optimizer adamw: AdamW with float32 moments (the published Llama configs' choice)");
  } else {
    w.kv("type", "AdamWeightDecay",
         "job.optimizer adamw with job.amp O3: mindspore.nn.AdamWeightDecay, whose moments clone the parameters and so "
         "take their 16-bit dtype (mindspore/nn/optim/adam.py AdamWeightDecay.__init__)");
  }
  w.end();

  // The anchor goes on the key's line (a comment there would push it onto a line of its own).
  w.e() << YAML::Newline << YAML::Key << "train_dataset" << YAML::Value << YAML::Anchor("train_dataset") << YAML::BeginMap;
  w.begin_inner("data_loader", "the training data's reader (pre-tokenized MindRecord)");
  w.kv("type", "MindDataset", "MindRecord files");
  w.str("dataset_dir", opt.data_path, "the dataset: a placeholder unless given to llmplan export");
  w.kv("shuffle", true, "shuffle the samples");
  w.end();
  w.e() << YAML::Key << "input_columns" << YAML::Value << YAML::Flow << YAML::BeginSeq << "input_ids" << YAML::EndSeq
        << YAML::Comment("token ids; labels are the shifted inputs");
  w.kv("num_parallel_workers", 8, "reader threads");
  w.kv("python_multiprocessing", false, "no Python worker processes");
  w.kv("drop_remainder", true, "drop a last partial batch");
  w.kv("repeat", 1, "dataset repeats");
  w.kv("numa_enable", false, "no NUMA binding");
  w.kv("prefetch_size", 1, "batches prefetched");
  w.end();
  w.begin("train_dataset_task", "the dataset task");
  w.kv("type", "CausalLanguageModelDataset", "next-token prediction samples");
  w.e() << YAML::Key << "dataset_config" << YAML::Value << YAML::Alias("train_dataset");
  w.end();

  w.begin("context", "mindspore.set_context (ContextConfig, TPL L415-423)");
  w.kv("mode", 0, "0 = graph mode (mindformers/tools/utils.py L48-51)");
  w.kv("device_target", "Ascend", "Ascend NPUs");
  w.kv("max_device_memory", std::to_string(mf::max_device_memory_gb(f.cluster.gpu.memory_bytes)) + "GB",
       "device memory MindSpore may take: the " + f.cluster.gpu.name + "'s capacity less 6 GB for the runtime (58GB of 64 on Atlas 800T A2)");
  w.kv("max_call_depth", 10000, "graph call depth (TPL L420)");
  w.end();

  w.begin("parallel", "mindspore.set_auto_parallel_context (MsParallelConfig, TPL L401-412)");
  w.kv("parallel_mode", 1, "1 = semi-auto parallel: the parallel_config sizes apply (mindformers/tools/utils.py L38-46)");
  w.kv("gradients_mean", false, "semi-auto parallel's usual setting (configs/README.md)");
  w.kv("enable_alltoall", p.ep > 1, p.ep > 1 ? "plan.ep > 1: AllToAll for expert dispatch" : "no expert parallel");
  w.kv("full_batch", true, "every rank loads the whole batch; the strategy slices it (TPL L404)");
  w.str("search_mode", "sharding_propagation", "strategy propagation from the configured operators (TPL L405)");
  w.kv("enable_parallel_optimizer", p.zero >= 1,
       p.zero >= 1 ? "plan.zero " + std::to_string(p.zero) +
                         ": optimizer parallel shards the float32 weights and optimizer states over data_parallel "
                         "(MindSpore docs features/parallel/optimizer_parallel.md; configs/README.md)"
                   : "plan.zero 0: every replica keeps whole optimizer states");
  w.str("strategy_ckpt_save_file", "./ckpt_strategy.ckpt", "where the sharding strategy is saved (TPL L409)");
  if (p.zero >= 1) {
    w.begin_inner("parallel_optimizer_config", "optimizer parallel options (mindspore.set_auto_parallel_context)");
    w.kv("gradient_accumulation_shard", p.zero >= 2,
         p.zero >= 2 ? "plan.zero 2: accumulated gradients sharded over data_parallel (ReduceScatter in backward)"
                     : "plan.zero 1: accumulated gradients kept whole");
    w.kv("parallel_optimizer_threshold", 64, "parameters under 64 KB stay whole (MindSpore's default)");
    w.end();
  }
  if (p.pp > 1) {
    w.begin_inner("pipeline_config", "pipeline schedule (research/qwen2_5/finetune_qwen2.5_72B_32K.yaml L99-101 @v1.5.0)");
    w.kv("pipeline_interleave", p.vpp > 1, p.vpp > 1 ? "plan.vpp > 1: interleaved chunks (pp_interleave_num)" : "one chunk per stage");
    w.str("pipeline_scheduler", "1f1b", p.vpp > 1 ? "plan.schedule interleaved: 1F1B over the chunks" : "plan.schedule 1f1b");
    w.end();
  }
  w.end();

  w.begin("parallel_config", "the parallel plan (ParallelConfig TPL L296-313, TransformerOpParallelConfig TR L542-591)");
  w.kv("data_parallel", p.dp, "plan.dp");
  w.kv("model_parallel", p.tp, "plan.tp: tensor (operator-level) parallel");
  w.kv("context_parallel", p.cp, "plan.cp: sequence split for attention (needs use_flash_attention, CR L179-182)");
  w.kv("expert_parallel", p.ep, "plan.ep: experts split over data_parallel x context_parallel ranks (not in the device count)");
  w.kv("pipeline_stage", p.pp, "plan.pp; data_parallel x model_parallel x context_parallel x pipeline_stage = devices (CR L157-162)");
  w.kv("micro_batch_num", d.pp_micro_batches,
       p.pp > 1 ? "plan.grad_accum: pipeline micro-batches per step; global batch = batch_size x data_parallel x micro_batch_num "
                  "(BT L199-209)"
                : "no pipeline");
  w.kv("use_seq_parallel", p.sp, "plan.sp: norms and dropout split along the sequence over model_parallel");
  w.kv("vocab_emb_dp", false, "embedding and LM head split over model_parallel, as llmplan counts them (forced False with pp > 1, PC L62-65)");
  w.kv("gradient_aggregation_group", 4, "gradient fusion group size (TPL L307)");
  if (p.cp > 1)
    w.str("context_parallel_algo", "colossalai_cp", "queries split along the sequence; K/V exchange set by use_ring_attention (TR L570-571, FA L188-216)");
  w.end();

  write_recompute(w, f, d);

  if (p.activation_offload_layers > 0) {
    std::vector<int> ids;
    for (int s = 0; s < p.pp; ++s) {
      int taken = 0;
      for (int c = 0; c < std::max(1, p.vpp) && taken < p.activation_offload_layers; ++c) {
        const int v = c * p.pp + s;
        const int first = first_layer_of_virtual_stage(m.layers, p, v);
        for (int i = 0; i < d.stage_layers[static_cast<size_t>(v)] && taken < p.activation_offload_layers; ++i, ++taken) ids.push_back(first + i);
      }
    }
    std::sort(ids.begin(), ids.end());
    w.begin("swap_config", "activation swap to host (TPL L330-336, MU L316-344)");
    w.kv("swap", true, "plan.activation_offload_layers > 0");
    w.e() << YAML::Key << "layer_swap" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
    w.kv("backward_prefetch", 1, "bring a layer back one step before its backward");
    w.ints("layers", ids, "plan.activation_offload_layers " + std::to_string(p.activation_offload_layers) +
                              ": the first layers of each pipeline stage (model layer ids)");
    w.e() << YAML::EndMap << YAML::EndSeq;
    w.kv("default_prefetch", 1, "prefetch distance (TPL L335)");
    w.end();
  }

  if (m.moe.enabled()) {
    w.begin("moe_config", "mixture of experts (MoEConfig TPL L339-386)");
    w.kv("expert_num", m.moe.experts, "model.moe.experts: routed experts per layer");
    w.kv("num_experts_chosen", m.moe.experts_per_token, "model.moe.experts_per_token: top-k");
    w.num("capacity_factor", m.moe.capacity_factor, "model.moe.capacity_factor: tokens an expert buffers (<= 0: dropless)");
    w.end();
  }

  write_model(w, f, d);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

std::string write_msrun(const PlanFile& f, const ExportOptions& opt, const std::string& yaml_name) {
  const std::string entry = opt.entry_point.empty() ? "run_mindformer.py" : opt.entry_point;
  const std::string mode = f.job.mode == TrainMode::pretrain ? "train" : "finetune";
  const int nodes = f.cluster.nodes, per_node = f.cluster.gpus_per_node;
  std::ostringstream s;
  s << "#!/usr/bin/env bash\n"
    << "# Starts " << yaml_name << " (" << mf::kVersion << ") on " << f.gpus << " Ascend devices: " << nodes << " node(s) x "
    << per_node << ".\n"
    << "# Run it from the root of a MindFormers v1.5.0 checkout, once on every node, with NODE_RANK=0.." << nodes - 1
    << " and MASTER_ADDR = node 0's address.\n"
    << "# scripts/msrun_launcher.sh with 9 arguments (L102-121): \"COMMAND\" WORKER_NUM LOCAL_WORKER MASTER_ADDR MASTER_PORT\n"
    << "#   NODE_RANK LOG_DIR JOIN CLUSTER_TIME_OUT; WORKER_NUM = all devices, LOCAL_WORKER = devices on this node.\n"
    << "set -euo pipefail\n"
    << "CONFIG=${CONFIG:-$(cd \"$(dirname \"$0\")\" && pwd)/" << yaml_name << "}\n"
    << "MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}\n"
    << "NODE_RANK=${NODE_RANK:-0}\n"
    << "bash scripts/msrun_launcher.sh \"" << entry << " --config $CONFIG --run_mode " << mode << " --use_parallel True\" " << f.gpus
    << " " << per_node << " $MASTER_ADDR 8118 $NODE_RANK output/msrun_log False 300\n";
  return s.str();
}

}  // namespace

Result<ExportResult> export_mindformers(const PlanFile& f, const ExportOptions& opt) {
  if (Status st = check_expressible(f); !st) return st;
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  Derived d;
  d.pp_micro_batches = p.pp > 1 ? p.grad_accum : 1;
  d.accumulation = p.pp > 1 ? 1 : p.grad_accum;
  d.master_fp32 = j.precision == Precision::fp32 || j.amp != AmpLevel::O3;
  d.stage_layers = virtual_stage_counts(f.model.layers, p);

  const std::string yaml_name = file_stem(f.model.name) + "_llmplan.yaml";
  ExportResult r;
  r.files.push_back({yaml_name, write_yaml(f, opt, d, yaml_name), false});
  r.files.push_back({"msrun.sh", write_msrun(f, opt, yaml_name), true});
  r.notes.push_back("train_dataset.data_loader.dataset_dir is '" + opt.data_path +
                    "': point it at your MindRecord dataset (pre-tokenized; the tokenizer is not read in training)");
  r.notes.push_back("optimizer and learning-rate hyper-parameters are MindFormers' defaults (template.py OptimizerConfig, "
                    "LrScheduleConfig): set yours; rms_norm_eps is LlamaConfig's default 1e-5 and the rotary base (theta) is "
                    "left at its default 10000: llmplan's model spec holds neither, so set them from the model's config");
  if (j.precision != Precision::fp32 && d.master_fp32 && j.grads == GradConvention::deepspeed)
    r.notes.push_back("job.grads deepspeed (16-bit gradients): MindSpore's gradients take the float32 parameters' dtype, "
                      "so they are float32 (llmplan's megatron convention); an import reads them back that way");
  if (p.recompute == Recompute::selective)
    r.notes.push_back("selective recompute is select_recompute: True, which recomputes SwiGLU's activation (MindFormers' "
                      "default patterns), not attention scores");
  if (j.mode != TrainMode::pretrain)
    r.notes.push_back("run_mode finetune: set load_checkpoint (and auto_trans_ckpt for a distributed run) to the base model's weights");
  if (f.gpus % f.cluster.gpus_per_node != 0)
    r.notes.push_back("the last node holds fewer devices: give it its own LOCAL_WORKER in msrun.sh");
  r.notes.push_back("msrun.sh runs from the MindFormers checkout's root (scripts/msrun_launcher.sh); set MASTER_ADDR and NODE_RANK on each node");
  return r;
}

}  // namespace llmplan::launch_formats
