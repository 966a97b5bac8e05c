// The deepspeed format (launch/launch.h): DeepSpeed v0.16.4's ds_config.json and a launch.sh
// that runs Megatron-DeepSpeed's pretrain_gpt.py (deepspeedai/Megatron-DeepSpeed @4efb479d,
// the commit of the published config in tests/fixtures/frameworks/deepspeed_example.json)
// through the `deepspeed` launcher.
//
// Export: ds_config.json carries the batch (train_batch_size = global batch,
// train_micro_batch_size_per_gpu, gradient_accumulation_steps), ZeRO (stage, optimizer
// offload), the precision (bf16, or fp16 with dynamic loss scaling) and the activation
// checkpointing settings; launch.sh carries what ds_config cannot: tp, pp, sp, ep, the model's
// shape, the sequence length and the recompute granularity, as pretrain_gpt.py arguments.
// JSON has no comments, so launch.sh's header explains each ds_config key with its source.
//
// Import: ds_config.json alone (the model from ImportOptions::model; tp = pp = 1; dp from the
// batch keys, or the GPUs of one node when they do not fix it) or with a launch script
// beside it (an export's folder), whose launch line gives nodes, GPUs, tp, pp and the model.
//
// What DeepSpeed cannot run as planned is refused naming the plan field and the rule's source
// (see refusal()).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "launch/deepspeed_schema.h"
#include "launch/formats.h"
#include "launch/model_shape.h"
#include "launch/shell_words.h"
#include "planner/cost/plan_check.h"

namespace llmplan::launch_formats {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kConfigName = "ds_config.json";
constexpr const char* kScriptName = "launch.sh";
constexpr const char* kDefaultEntryPoint = "pretrain_gpt.py";
// Nesting deeper than any ds_config is refused before a later walk recurses (as
// planner/spec/spec_json.cpp read_json_file does).
constexpr int kMaxJsonDepth = 64;

// ---------------------------------------------------------------- schema

// deepspeed/runtime/zero/config.py (v0.16.4) DeepSpeedZeroConfig: field names, then the
// aliases of the stage-3 fields (L208-265) and the deprecated cpu_offload* fields (L174-195).
constexpr const char* kZeroKeys[] = {
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
    "allgather_partitions", "allgather_bucket_size", "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint",
    "offload_param", "offload_optimizer", "sub_group_size", "cpu_offload_param", "cpu_offload_use_pin_memory", "cpu_offload",
    "prefetch_bucket_size", "stage3_prefetch_bucket_size", "param_persistence_threshold", "stage3_param_persistence_threshold",
    "model_persistence_threshold", "stage3_model_persistence_threshold", "max_live_parameters", "stage3_max_live_parameters",
    "max_reuse_distance", "stage3_max_reuse_distance", "gather_16bit_weights_on_model_save",
    "stage3_gather_16bit_weights_on_model_save", "module_granularity_threshold", "stage3_module_granularity_threshold",
    "use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params", "stage3_gather_fp16_weights_on_model_save",
    "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients", "zero_hpz_partition_size", "zero_quantized_weights",
    "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "zeropp_loco_param", "mics_shard_size",
    "mics_hierarchical_params_gather", "memory_efficient_linear", "pipeline_loading_checkpoint", "override_module_apply",
    "log_trace_cache_warnings"};
// deepspeed/runtime/zero/offload_config.py (v0.16.4) L52-93 and L21-45.
constexpr const char* kOffloadOptimizerKeys[] = {"device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read",
                                                 "pipeline_write", "fast_init", "ratio"};
constexpr const char* kOffloadParamKeys[] = {"device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory"};

bool in(std::span<const char* const> keys, const std::string& k) {
  return std::any_of(keys.begin(), keys.end(), [&](const char* x) { return k == x; });
}

// ---------------------------------------------------------------- small helpers



std::string num(int64_t v) { return std::to_string(v); }

// ---------------------------------------------------------------- export: refusals

// The first thing in `f` DeepSpeed (with Megatron-DeepSpeed's pretrain_gpt.py) cannot run as
// planned, as bad_input naming the plan field and the rule's source; ok when it can.
Status refusal(const PlanFile& f) {
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  const ModelSpec& m = f.model;
  if (j.mode == TrainMode::lora)
    return Status::bad_input(std::string("job.mode: ") + to_string(job_mode(j)) +
                             ": ds_config.json has no LoRA keys and Megatron-DeepSpeed's pretrain_gpt.py no LoRA arguments "
                             "(megatron/arguments.py @4efb479d); LoRA under DeepSpeed lives in the user's PEFT script, which "
                             "llmplan cannot write faithfully (use --to megatron or nemo)");
  if (j.moments == MomentsDtype::bf16)
    return Status::bad_input("job.moments: bf16: DeepSpeed v0.16.4's optimizers keep fp32 moments (ds_config.json has no "
                             "moment dtype; deepspeed/runtime/constants.py); use --to megatron");
  if (j.frozen_layer_count(m.layers) > 0)
    return Status::bad_input("job.frozen_layers: Megatron-DeepSpeed's pretrain_gpt.py has no argument that freezes layers "
                             "(megatron/arguments.py @4efb479d), and ds_config.json none either");
  if (j.fp8_linear())
    return Status::bad_input(std::string("job.fp8: ") + to_string(j.fp8) +
                             ": DeepSpeed v0.16.4's config has no FP8 training keys (deepspeed/runtime/constants.py; FP8 "
                             "comes from Transformer Engine inside the model) and Megatron-DeepSpeed's pretrain_gpt.py no "
                             "--fp8 argument");
  if (p.offload_optimizer && j.optimizer != Optimizer::adamw)
    return Status::bad_input("job.optimizer: sgd with plan.offload_optimizer: ZeRO-Offload steps the optimizer on the host "
                             "with DeepSpeedCPUAdam (Megatron-DeepSpeed --cpu-optimizer, megatron/arguments.py L948); there is "
                             "no host SGD");
  if (m.qk_norm)
    return Status::bad_input("model.qk_norm: Megatron-DeepSpeed's transformer has no QK-norm (megatron/model/transformer.py "
                             "@4efb479d; megatron/arguments.py has no --qk-layernorm)");
  if (m.family == Family::llama && m.attention_bias != AttentionBias::none)
    return Status::bad_input(std::string("model.attention_bias: ") + to_string(m.attention_bias) +
                             ": Megatron-DeepSpeed has one switch for every linear layer's bias (--disable-bias-linear, "
                             "megatron/arguments.py L937): biases on the attention projections alone are not expressible");
  if (m.moe.enabled() && m.moe.shared_experts > 0)
    return Status::bad_input("model.moe.shared_experts: DeepSpeed-MoE (deepspeed/moe/layer.py, v0.16.4) has no shared experts "
                             "(Megatron-DeepSpeed's --mlp-type residual is PR-MoE, a different block)");
  if (m.moe.enabled() && m.moe.expert_ffn_hidden != m.ffn_hidden)
    return Status::bad_input("model.moe.expert_ffn_hidden: DeepSpeed-MoE's experts are copies of the layer's MLP "
                             "(--ffn-hidden-size, megatron/model/transformer.py @4efb479d): an expert width of " +
                             num(m.moe.expert_ffn_hidden) + " beside ffn_hidden " + num(m.ffn_hidden) + " is not expressible");
  if (m.moe.enabled() && p.zero == 3)
    return Status::bad_input("plan.zero: 3 on a mixture of experts: \"MoE not supported with Stage 3\" "
                             "(deepspeed/runtime/engine.py L1675, v0.16.4); use ZeRO 1 or 2");
  if (p.cp > 1)
    return Status::bad_input("plan.cp: " + num(p.cp) +
                             ": DeepSpeed has no context parallelism of llmplan's kind (a ring or all-gather of K and V "
                             "between the ranks of a sequence); DeepSpeed-Ulysses (--ds-sequence-parallel-size, "
                             "megatron/arguments.py L974) splits attention heads over ranks with all-to-alls, a different "
                             "scheme llmplan does not model");
  if (p.pp > 1 && splits_backward(p.schedule))
    return Status::bad_input(std::string("plan.schedule: ") + to_string(p.schedule) +
                             ": DeepSpeed's pipeline engine runs whole backward passes on its 1F1B TrainSchedule "
                             "(deepspeed/runtime/pipe/schedule.py, v0.16.4)");
  if (p.vpp > 1 || p.schedule == Schedule::interleaved)
    return Status::bad_input("plan.vpp: " + num(p.vpp) +
                             ": DeepSpeed's pipeline engine runs one stage per rank on its 1F1B TrainSchedule "
                             "(deepspeed/runtime/pipe/schedule.py, v0.16.4) and has no interleaved virtual stages "
                             "(Megatron-DeepSpeed's --num-layers-per-virtual-pipeline-stage works only without --deepspeed)");
  if (p.pp > 1 && p.zero >= 2)
    return Status::bad_input("plan.zero: " + num(p.zero) +
                             " with pp " + num(p.pp) + ": \"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\" "
                             "(deepspeed/runtime/pipe/engine.py L77-78, v0.16.4); use ZeRO 0-1 with pp > 1");
  if (p.pp > 1 && p.schedule == Schedule::gpipe)
    return Status::bad_input("plan.schedule: gpipe: DeepSpeed's pipeline engine runs only its 1F1B TrainSchedule "
                             "(deepspeed/runtime/pipe/schedule.py, v0.16.4)");
  if (p.pp > 1 && p.pipeline_split != PipelineSplit::even)
    return Status::bad_input(std::string("plan.pipeline_split: ") + to_string(p.pipeline_split) +
                             ": Megatron-DeepSpeed partitions GPTModelPipe by counting transformer layers only "
                             "(partition_method='type:transformer', megatron/model/gpt_model.py L463), so the embedding and "
                             "the loss never take a layer's place and no stage sizes can be given");
  if (p.pp > 1 && m.layers % p.pp != 0)
    return Status::bad_input("plan.pp: " + num(p.pp) + " does not divide the " + num(m.layers) +
                             " layers: DeepSpeed places the remaining layers by its own dynamic program "
                             "(deepspeed/runtime/utils.py partition_balanced L583, v0.16.4), not on the last stages as "
                             "llmplan's even split does");
  if (p.pp > 1 && p.recompute == Recompute::full_k)
    return Status::bad_input("plan.recompute: full_k with pp > 1: DeepSpeed's pipeline engine checkpoints every n-th layer "
                             "only (Megatron-DeepSpeed megatron/model/gpt_model.py L446-451: \"deepspeed's pipeline doesn't "
                             "support the block recompute method\"); use full, or pp 1");
  if (const int stage_layers = pp_stage_layers(m.layers, p, 0);
      p.activation_offload_layers > 0 && (p.recompute != Recompute::full || p.activation_offload_layers < stage_layers))
    return Status::bad_input("plan.activation_offload_layers: " + num(p.activation_offload_layers) +
                             ": DeepSpeed's cpu_checkpointing (deepspeed/runtime/activation_checkpointing/config.py L42-43) "
                             "moves the checkpoint of every checkpointed layer to the host, not the kept activations of the "
                             "first k layers of each stage: offload every layer of the stage (" + num(stage_layers) +
                             ") under full recompute, or none");
  if (p.zero == 0 && j.precision == Precision::bf16)
    return Status::bad_input("plan.zero: 0 with bf16: DeepSpeed v0.16.4 runs a bf16 model without ZeRO through its "
                             "BF16_Optimizer (deepspeed/runtime/engine.py L1017-1019, L1331-1348), which accumulates "
                             "gradients in fp32 and partitions the fp32 master weights and optimizer states over the "
                             "data-parallel ranks like ZeRO-1 (deepspeed/runtime/bf16_optimizer.py L127-157); plan zero 1");
  return Status::ok();
}

// ---------------------------------------------------------------- export: ds_config.json

// The activation checkpoints a stage keeps (deepspeed/runtime/activation_checkpointing/config.py
// number_checkpoints: sizes its contiguous buffers; llmplan leaves that optimization off).
int checkpointed_layers(const PlanFile& f) {
  if (f.plan.recompute == Recompute::full_k) return f.plan.recompute_layers;
  return pp_stage_layers(f.model.layers, f.plan, 0);
}

ordered_json ds_config(const PlanFile& f) {
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  ordered_json c;
  c["train_batch_size"] = j.global_batch;
  c["train_micro_batch_size_per_gpu"] = p.micro_batch;
  c["gradient_accumulation_steps"] = p.grad_accum;
  c["steps_per_print"] = 10;
  c["wall_clock_breakdown"] = false;
  c["gradient_clipping"] = 1.0;
  ordered_json z;
  z["stage"] = p.zero;
  if (p.zero >= 1) {
    z["overlap_comm"] = true;
    z["contiguous_gradients"] = true;
    z["reduce_bucket_size"] = 500000000;
    if (p.zero <= 2) z["allgather_bucket_size"] = 500000000;
    if (p.offload_optimizer) z["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
    if (p.offload_params) z["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  c["zero_optimization"] = z;
  if (j.precision == Precision::bf16) c["bf16"] = {{"enabled", true}};
  if (j.precision == Precision::fp16)
    c["fp16"] = {{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 16}, {"loss_scale_window", 1000}, {"hysteresis", 2},
                 {"min_loss_scale", 1}};
  if (p.recompute == Recompute::full || p.recompute == Recompute::full_k)
    c["activation_checkpointing"] = {{"partition_activations", false}, {"contiguous_memory_optimization", false},
                                     {"number_checkpoints", checkpointed_layers(f)}, {"cpu_checkpointing", p.activation_offload_layers > 0},
                                     {"synchronize_checkpoint_boundary", false}, {"profile", false}};
  return c;
}

// One line of launch.sh's header per ds_config key written: meaning and source.
std::vector<std::string> ds_config_comments(const ordered_json& c) {
  static const std::map<std::string, std::string> kMeaning = {
      {"train_batch_size", "sequences per optimizer step over all data-parallel ranks (constants.py L17); DeepSpeed requires "
                           "= micro * gradient_accumulation_steps * data-parallel size (config.py L931)"},
      {"train_micro_batch_size_per_gpu", "sequences per micro-batch per data-parallel rank (constants.py L93)"},
      {"gradient_accumulation_steps", "micro-batches per step; under pp > 1 the pipeline's micro-batches (constants.py L105)"},
      {"steps_per_print", "log every n steps (constants.py L79)"},
      {"wall_clock_breakdown", "per-phase timers, off (constants.py L319)"},
      {"gradient_clipping", "global gradient-norm clip (constants.py L214)"},
      {"zero_optimization.stage", "ZeRO stage: 1 optimizer states, 2 + gradients, 3 + weights sharded over data parallel "
                                  "(zero/config.py L91, ZeroStageEnum L77-83)"},
      {"zero_optimization.overlap_comm", "overlap gradient reduction with backward (zero/config.py L134)"},
      {"zero_optimization.contiguous_gradients", "copy gradients into one buffer as they are produced (zero/config.py L98)"},
      {"zero_optimization.reduce_bucket_size", "elements reduced at once (zero/config.py L109; DeepSpeed's default 5e8)"},
      {"zero_optimization.allgather_bucket_size", "elements all-gathered at once, stages 1-2 (zero/config.py L128; default 5e8)"},
      {"zero_optimization.offload_optimizer", "optimizer states and fp32 master weights in host memory, stepped by "
                                              "DeepSpeedCPUAdam (zero/config.py L160; offload_config.py L55 device cpu|nvme|none, "
                                              "L72 pin_memory)"},
      {"zero_optimization.offload_param", "stage 3: the 16-bit parameter partitions in host memory, fetched before each "
                                          "gather (zero/config.py L153; offload_config.py L21-45 device cpu|nvme|none)"},
      {"bf16.enabled", "bf16 mixed precision (constants.py L123-126); no loss scaling"},
      {"fp16.enabled", "fp16 mixed precision (constants.py L151-153)"},
      {"fp16.loss_scale", "0 = dynamic loss scaling (constants.py L157)"},
      {"fp16.initial_scale_power", "initial dynamic scale 2^16 (constants.py L164)"},
      {"fp16.loss_scale_window", "steps without overflow before the scale grows (constants.py L168)"},
      {"fp16.hysteresis", "overflows tolerated before the scale shrinks (constants.py L172)"},
      {"fp16.min_loss_scale", "floor of the dynamic scale (constants.py L180)"},
      {"activation_checkpointing.partition_activations", "split checkpoints over TP ranks: off, llmplan does not model it "
                                                         "(activation_checkpointing/config.py L27-28)"},
      {"activation_checkpointing.contiguous_memory_optimization", "checkpoints in one preallocated buffer: off (config.py L33-34)"},
      {"activation_checkpointing.number_checkpoints", "checkpointed layers per stage, sizes that buffer (config.py L30-31)"},
      {"activation_checkpointing.cpu_checkpointing", "checkpoints to host memory: the plan's activation offload of every layer (config.py L42-43)"},
      {"activation_checkpointing.synchronize_checkpoint_boundary", "CUDA sync at each checkpoint: off (config.py L36-37)"},
      {"activation_checkpointing.profile", "time each checkpoint: off (config.py L39-40)"},
  };
  std::vector<std::string> out;
  for (auto it = c.begin(); it != c.end(); ++it) {
    const bool object = it->is_object();
    std::vector<std::string> keys;
    if (object && it.key() != "zero_optimization" && it.key() != "activation_checkpointing" && it.key() != "fp16" && it.key() != "bf16")
      keys.push_back(it.key());
    else if (object)
      for (auto jt = it->begin(); jt != it->end(); ++jt) keys.push_back(it.key() + "." + jt.key());
    else
      keys.push_back(it.key());
    for (const std::string& k : keys) {
      auto m = kMeaning.find(k);
      out.push_back("#   " + k + ": " + (m == kMeaning.end() ? std::string("see deepspeed/runtime/constants.py") : m->second));
    }
  }
  return out;
}

// ---------------------------------------------------------------- export: launch.sh

struct ScriptArg {
  std::string comment;             // meaning and source
  std::vector<std::string> words;  // the option and its value
};

// pretrain_gpt.py's arguments for the plan (megatron/arguments.py @4efb479d, line numbers
// from tests/fixtures/frameworks/megatron_deepspeed_args.txt).
std::vector<ScriptArg> megatron_args(const PlanFile& f, const ExportOptions& opt, std::vector<std::string>* notes) {
  const ModelSpec& m = f.model;
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  std::vector<ScriptArg> a;
  auto add = [&](std::string comment, std::vector<std::string> words) { a.push_back({std::move(comment), std::move(words)}); };
  add("tensor-parallel ranks (L1149)", {"--tensor-model-parallel-size", num(p.tp)});
  add("pipeline stages (L1154)", {"--pipeline-model-parallel-size", num(p.pp)});
  if (p.pp == 1)
    add("no PipelineModule: DeepSpeed's plain engine, which runs ZeRO 0-3 and block recompute (L954; pretrain_gpt.py "
        "model_provider builds GPTModelPipe otherwise, and the pipeline engine refuses ZeRO-2/3: "
        "deepspeed/runtime/pipe/engine.py L77-78)",
        {"--no-pipeline-parallel"});
  if (p.sp) add("Megatron sequence parallel over the TP ranks (L972; needs CUDA_DEVICE_MAX_CONNECTIONS=1)", {"--sequence-parallel"});
  add("ZeRO stage, as in ds_config.json (L1487; pretrain_gpt.py builds the model under zero.Init when 3)", {"--zero-stage", num(p.zero)});
  add("transformer layers (L602)", {"--num-layers", num(m.layers)});
  add("model width (L616)", {"--hidden-size", num(m.hidden)});
  add("MLP inner width (L618)", {"--ffn-hidden-size", num(m.ffn_hidden)});
  add("attention heads (L621)", {"--num-attention-heads", num(m.heads)});
  add("key/value heads, grouped-query attention (L623)", {"--num-key-value-heads", num(m.kv_heads)});
  if (m.head_width() * m.heads != m.hidden) add("per-head width, not hidden/heads (L625)", {"--kv-channels", num(m.head_width())});
  add("tokens per sequence (L1278)", {"--seq-length", num(j.seq_len)});
  add("positions the model is built for (L630)", {"--max-position-embeddings", num(m.max_positions)});
  if (m.family == Family::llama) {
    add("SwiGLU MLP (L670)", {"--swiglu"});
    add("RMSNorm (L647)", {"--normalization", "rmsnorm"});
    add("rotary positions, no learned position embedding (L633; arguments.py L314-316)", {"--use-rotary-position-embeddings"});
    add("no linear biases (L937)", {"--disable-bias-linear"});
  }
  if (!m.tied_embeddings) add("separate output layer (L680)", {"--untie-embeddings-and-output-weights"});
  if (!m.dropout) {
    add("no attention dropout (L768; default 0.1)", {"--attention-dropout", "0"});
    add("no hidden dropout (L770; default 0.1)", {"--hidden-dropout", "0"});
  }
  if (m.vocab % (128 * p.tp) != 0) {
    add("keep the vocabulary unpadded (L644; the default pads it to a multiple of 128 * tp)", {"--make-vocab-size-divisible-by", "1"});
    notes->push_back("vocabulary " + num(m.vocab) + " is not a multiple of 128*tp: --make-vocab-size-divisible-by 1 keeps it as planned");
  }
  if (m.moe.enabled()) {
    add("routed experts per MoE layer (L608)", {"--num-experts", num(m.moe.experts)});
    add("experts per token (L612)", {"--topk", num(m.moe.experts_per_token)});
    add("every layer is an MoE layer (L614; default 2, every other)", {"--expert-interval", "1"});
    add("expert-parallel ranks, inside data parallel (L1159)", {"--moe-expert-parallel-size", num(p.ep)});
    add("expert capacity factor, used only when tokens are dropped (L913)",
        {"--moe-train-capacity-factor", [&] {
           std::ostringstream s;
           s << m.moe.capacity_factor;
           return s.str();
         }()});
    add("dropless routing, as the model was trained (L910)", {"--disable-moe-token-dropping"});
    if (p.zero >= 1) add("separate parameter groups for the experts, needed under ZeRO (L921)", {"--create-moe-param-group"});
  }
  add("sequences per micro-batch per data-parallel rank (L801)", {"--micro-batch-size", num(p.micro_batch)});
  add("sequences per step (L808)", {"--global-batch-size", num(j.global_batch)});
  if (j.precision == Precision::bf16) add("bf16 (L1113), as ds_config.json's bf16.enabled", {"--bf16"});
  if (j.precision == Precision::fp16) add("fp16 (L1111), as ds_config.json's fp16.enabled", {"--fp16"});
  switch (p.recompute) {
    case Recompute::none: break;
    case Recompute::selective:
      add("recompute core attention (L830 selective)", {"--recompute-granularity", "selective"});
      break;
    case Recompute::full:
      add("recompute every layer (L830 full, L842 uniform, L851 one layer per chunk; the pipeline engine takes the same as "
          "activation_checkpoint_interval, megatron/model/gpt_model.py L448-450)",
          {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"});
      add("through deepspeed.checkpointing, configured by ds_config.json's activation_checkpointing (L1524)",
          {"--deepspeed-activation-checkpointing"});
      break;
    case Recompute::full_k:
      add("recompute the first k layers of each stage (L830 full, L842 block, L851 k)",
          {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", num(p.recompute_layers)});
      add("through deepspeed.checkpointing, configured by ds_config.json's activation_checkpointing (L1524)",
          {"--deepspeed-activation-checkpointing"});
      break;
  }
  if (p.flash_attention) add("FlashAttention-2 (L930)", {"--use-flash-attn-v2"});
  add("optimizer (L940): adam is AdamW (decoupled weight decay)", {"--optimizer", j.optimizer == Optimizer::adamw ? "adam" : "sgd"});
  if (p.offload_optimizer) add("DeepSpeedCPUAdam for ZeRO-Offload (L948)", {"--cpu-optimizer"});
  if (j.mode == TrainMode::finetune) {
    add("the pretrained checkpoint to start from (L1077; placeholder)", {"--load", "/path/to/base_checkpoint"});
    add("start from its weights without its optimizer state or iteration (L1087)", {"--finetune"});
    notes->push_back("fine-tuning: replace --load /path/to/base_checkpoint in launch.sh");
  }
  add("iterations to run (L873; not part of the plan)", {"--train-iters", num(opt.train_steps)});
  add("learning rate (L1017; not part of the plan: edit)", {"--lr", "3.0e-4"});
  add("dataset prefix (L1238)", {"--data-path", opt.data_path});
  add("tokenizer (L1299 HFTokenizer, L1309 its path)", {"--tokenizer-type", "HFTokenizer", "--tokenizer-model", opt.tokenizer});
  return a;
}

std::string launch_script(const PlanFile& f, const ExportOptions& opt, const ordered_json& config, std::vector<std::string>* notes) {
  const ParallelPlan& p = f.plan;
  const int world = p.world_size();
  int nodes = f.cluster.nodes, per_node = f.cluster.gpus_per_node;
  if (nodes * per_node != world) {
    nodes = nodes_for(world, per_node);
    if (world % nodes == 0) per_node = world / nodes;
    notes->push_back("the plan uses " + num(world) + " of the cluster's " + num(f.cluster.nodes * f.cluster.gpus_per_node) +
                     " GPUs: launch.sh starts " + num(per_node) + " per node on " + num(nodes) + " nodes");
  }
  const std::string entry = opt.entry_point.empty() ? std::string(kDefaultEntryPoint) : opt.entry_point;
  std::ostringstream s;
  s << "#!/usr/bin/env bash\n"
    << "# " << f.model.name << " on " << nodes << " node(s) x " << per_node << " GPUs (" << f.cluster.gpu.name
    << "): dp " << p.dp << ", tp " << p.tp << ", pp " << p.pp << ", ZeRO-" << p.zero << ", written by llmplan export.\n"
    << "# DeepSpeed v0.16.4's launcher (deepspeed/launcher/runner.py) runs Megatron-DeepSpeed's " << entry << "\n"
    << "# (deepspeedai/Megatron-DeepSpeed @4efb479d) with ds_config.json beside this script. Run it from the\n"
    << "# Megatron-DeepSpeed checkout, or set MEGATRON_DEEPSPEED to it.";
  if (nodes > 1) s << "\n# More than one node: the launcher reads the hosts from a hostfile (-H/--hostfile, default /job/hostfile).";
  s << "\n#\n# ds_config.json (JSON has no comments; DeepSpeed v0.16.4 deepspeed/runtime/...):\n";
  for (const std::string& line : ds_config_comments(config)) s << line << "\n";
  s << "set -euo pipefail\n";
  s << "HERE=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\"\n";
  if (p.sp) s << "# Megatron-DeepSpeed refuses sequence parallel without it (megatron/arguments.py L401-406)\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  s << "\nLAUNCHER_ARGS=(\n"
    << "  # nodes (deepspeed/launcher/runner.py L86)\n  --num_nodes " << nodes << "\n"
    << "  # GPUs per node (runner.py L104)\n  --num_gpus " << per_node << "\n)\n";
  s << "\nMEGATRON_ARGS=(\n";
  for (const ScriptArg& arg : megatron_args(f, opt, notes)) {
    s << "  # " << arg.comment << "\n ";
    for (const std::string& w : arg.words) s << " " << shell::quote(w);
    s << "\n";
  }
  s << "  # DeepSpeed's engine with this folder's config (deepspeed/__init__.py L248-253)\n"
    << "  --deepspeed --deepspeed_config \"$HERE/" << kConfigName << "\"\n)\n\n";
  const bool relative = !entry.empty() && entry[0] != '/' && entry.find('/') == std::string::npos;
  s << "deepspeed \"${LAUNCHER_ARGS[@]}\" " << (relative ? "\"${MEGATRON_DEEPSPEED:-.}/" + entry + "\"" : shell::quote(entry))
    << " \"${MEGATRON_ARGS[@]}\"\n";
  return s.str();
}

// ---------------------------------------------------------------- import: ds_config.json

// What ds_config.json says, each field unset where it is silent.
struct DsConfig {
  std::optional<int64_t> train_batch, micro, grad_accum;
  bool batch_auto = false;  // some batch key is "auto" (HF Trainer fills it)
  int zero = 0;
  bool offload_optimizer = false;
  bool offload_params = false;  // zero_optimization.offload_param device cpu
  std::optional<Precision> precision;  // unset: "auto"
  bool activation_checkpointing = false;
  bool cpu_checkpointing = false;  // activation_checkpointing.cpu_checkpointing true
  std::optional<Optimizer> optimizer;
};

class DsConfigReader {
 public:
  DsConfigReader(std::string file, std::vector<std::string>* unknown, std::vector<std::string>* notes)
      : file_(std::move(file)), unknown_(unknown), notes_(notes) {}

  Result<DsConfig> read(const json& c) {
    if (!c.is_object()) return bad("top level", "a JSON object", c);
    DsConfig d;
    // Keys llmplan reads. Keys llmplan's own export writes with fixed values (logging,
    // clipping, bucket sizes, loss-scale settings) are type-checked and not listed; every
    // other key is listed in unknown_keys.
    static const std::set<std::string> kQuiet = {"steps_per_print", "wall_clock_breakdown", "gradient_clipping"};
    for (auto it = c.begin(); it != c.end(); ++it) {
      const std::string& k = it.key();
      if (k == "train_batch_size" || k == "train_micro_batch_size_per_gpu" || k == "gradient_accumulation_steps" ||
          k == "zero_optimization" || k == "fp16" || k == "bf16" || k == "bfloat16" || k == "amp" || k == "activation_checkpointing" ||
          k == "optimizer")
        continue;
      if (kQuiet.count(k)) {
        if (!it->is_number() && !it->is_boolean() && !it->is_null()) return bad(k, "a number or boolean", *it);
        continue;
      }
      unknown_->push_back(k);
    }
    for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}) {
      std::optional<int64_t> v;
      if (Status st = batch_key(c, k, &v, &d.batch_auto); !st) return st;
      (std::string(k) == "train_batch_size" ? d.train_batch : std::string(k) == "train_micro_batch_size_per_gpu" ? d.micro : d.grad_accum) = v;
    }
    if (Status st = zero(c, &d); !st) return st;
    if (Status st = precision(c, &d); !st) return st;
    if (auto a = c.find("activation_checkpointing"); a != c.end()) {
      if (!a->is_object()) return bad("activation_checkpointing", "an object", *a);
      d.activation_checkpointing = true;
      static const std::set<std::string> kKeys = {"partition_activations", "contiguous_memory_optimization", "number_checkpoints",
                                                  "synchronize_checkpoint_boundary", "profile", "cpu_checkpointing"};
      for (auto it = a->begin(); it != a->end(); ++it) {
        if (!kKeys.count(it.key())) unknown_->push_back("activation_checkpointing." + it.key());
        else if (it.key() == "cpu_checkpointing" && it->is_boolean() && it->get<bool>())
          d.cpu_checkpointing = true;
        else if (it.key() == "partition_activations" && it->is_boolean() && it->get<bool>())
          notes_->push_back("activation_checkpointing." + it.key() +
                            " is on: llmplan does not model it (the estimate keeps the checkpoints whole on the GPU)");
      }
    }
    if (auto o = c.find("optimizer"); o != c.end()) {
      if (Status st = optimizer(*o, &d); !st) return st;
    }
    return d;
  }

 private:
  Status bad(const std::string& key, const std::string& expected, const json& got) const {
    std::string text = got.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return Status::bad_input(file_ + ": field '" + key + "': expected " + expected + ", got " + text);
  }

  // A batch key: a positive integer, or "auto" (HF Trainer's; noted and left unset).
  Status batch_key(const json& c, const char* key, std::optional<int64_t>* out, bool* is_auto) {
    auto it = c.find(key);
    if (it == c.end()) return Status::ok();
    if (it->is_string() && it->get<std::string>() == "auto") {
      *is_auto = true;
      notes_->push_back(std::string(key) + " is \"auto\" (filled by the Hugging Face Trainer from its own arguments)");
      return Status::ok();
    }
    const double v = it->is_number() ? it->get<double>() : -1;
    if (!it->is_number() || v < 1 || v > 1e9 || v != std::floor(v)) return bad(key, "a positive integer or \"auto\"", *it);
    *out = static_cast<int64_t>(v);
    return Status::ok();
  }

  Status zero(const json& c, DsConfig* d) {
    auto it = c.find("zero_optimization");
    if (it == c.end()) return Status::ok();
    const json& z = *it;
    if (z.is_boolean()) {  // legacy form: true = stage 1 (zero/config.py L58)
      d->zero = z.get<bool>() ? 1 : 0;
      return Status::ok();
    }
    if (!z.is_object()) return bad("zero_optimization", "an object (or the legacy true/false)", z);
    for (auto k = z.begin(); k != z.end(); ++k) {
      if (!in(deepspeed_zero_optimization_keys(), k.key()))
        return Status::bad_input(file_ + ": field 'zero_optimization." + k.key() +
                                 "': not a DeepSpeed v0.16.4 ZeRO key (DeepSpeedZeroConfig forbids unknown keys: "
                                 "deepspeed/runtime/config_utils.py L105-113, zero/config.py L86-344)");
    }
    static const std::set<std::string> kQuiet = {"stage", "overlap_comm", "contiguous_gradients", "reduce_bucket_size",
                                                 "allgather_bucket_size", "offload_optimizer", "offload_param", "cpu_offload"};
    for (auto k = z.begin(); k != z.end(); ++k)
      if (!kQuiet.count(k.key())) unknown_->push_back("zero_optimization." + k.key());
    if (auto s = z.find("stage"); s != z.end()) {
      if (!s->is_number_integer() || s->get<int64_t>() < 0 || s->get<int64_t>() > 3) return bad("zero_optimization.stage", "0, 1, 2 or 3", *s);
      d->zero = s->get<int>();
    }
    if (auto cpu = z.find("cpu_offload"); cpu != z.end() && cpu->is_boolean() && cpu->get<bool>()) d->offload_optimizer = true;
    if (auto o = z.find("offload_optimizer"); o != z.end() && !o->is_null()) {
      if (!o->is_object()) return bad("zero_optimization.offload_optimizer", "an object", *o);
      for (auto k = o->begin(); k != o->end(); ++k)
        if (!in(deepspeed_offload_optimizer_keys(), k.key()))
          return Status::bad_input(file_ + ": field 'zero_optimization.offload_optimizer." + k.key() +
                                   "': not a DeepSpeed v0.16.4 offload key (deepspeed/runtime/zero/offload_config.py L52-93 "
                                   "forbids unknown keys)");
      if (Status st = offload_device(*o, "zero_optimization.offload_optimizer.device", &d->offload_optimizer); !st) return st;
      if (auto r = o->find("ratio"); r != o->end() && r->is_number() && r->get<double>() < 1.0)
        notes_->push_back("zero_optimization.offload_optimizer.ratio " + r->dump() +
                          ": partial offload is not modelled; the plan offloads all optimizer states");
      if (d->offload_optimizer && d->zero == 0)
        return Status::bad_input(file_ + ": field 'zero_optimization.offload_optimizer': expected ZeRO stage 1-3 with optimizer "
                                 "offload (ZeRO-Offload partitions the states it moves), got stage 0");
    }
    if (auto o = z.find("offload_param"); o != z.end() && !o->is_null()) {
      if (!o->is_object()) return bad("zero_optimization.offload_param", "an object", *o);
      for (auto k = o->begin(); k != o->end(); ++k)
        if (!in(deepspeed_offload_param_keys(), k.key()))
          return Status::bad_input(file_ + ": field 'zero_optimization.offload_param." + k.key() +
                                   "': not a DeepSpeed v0.16.4 offload key (offload_config.py L21-45 forbids unknown keys)");
      if (Status st = offload_device(*o, "zero_optimization.offload_param.device", &d->offload_params); !st) return st;
      // DeepSpeed honours offload_param at stage 3 only (zero/config.py: "valid only for stage 3").
      if (d->offload_params && d->zero != 3)
        return Status::bad_input(file_ + ": field 'zero_optimization.offload_param': expected ZeRO stage 3 with parameter "
                                 "offload, got stage " + std::to_string(d->zero));
      if (d->offload_params && !d->offload_optimizer)
        return Status::bad_input(file_ + ": field 'zero_optimization.offload_param': llmplan plans parameter offload with "
                                 "the optimizer offloaded too (offload_optimizer device cpu), as ZeRO-Infinity's CPU "
                                 "recipes run it; got the optimizer on the GPU");
    }
    return Status::ok();
  }

  // An offload section's device (offload_config.py L14-18): cpu sets *offloaded; none
  // leaves it; nvme (ZeRO-Infinity's disk tier) is not modelled.
  Status offload_device(const json& section, const std::string& field, bool* offloaded) {
    const std::string device = section.value("device", std::string("none"));
    if (device == "cpu") *offloaded = true;
    else if (device == "nvme")
      return bad(field, "cpu or none (llmplan models host-memory offload; nvme is ZeRO-Infinity's disk tier)", section["device"]);
    else if (device != "none")
      return bad(field, "cpu, nvme or none (offload_config.py L14-18)", section["device"]);
    return Status::ok();
  }

  Status precision(const json& c, DsConfig* d) {
    auto enabled = [&](const char* section, std::optional<bool>* out, bool* is_auto) -> Status {
      auto it = c.find(section);
      if (it == c.end()) return Status::ok();
      if (!it->is_object()) return bad(section, "an object", *it);
      auto e = it->find("enabled");
      if (e == it->end()) return Status::ok();
      if (e->is_string() && e->get<std::string>() == "auto") {
        *is_auto = true;
        return Status::ok();
      }
      if (!e->is_boolean()) return bad(std::string(section) + ".enabled", "true, false or \"auto\"", *e);
      *out = e->get<bool>();
      // Loss-scale settings are the export's; any other key in the section is listed.
      static const std::set<std::string> kKnown = {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window",
                                                   "hysteresis", "min_loss_scale", "auto_cast", "consecutive_hysteresis",
                                                   "immediate_grad_update"};
      for (auto k = it->begin(); k != it->end(); ++k)
        if (!kKnown.count(k.key())) unknown_->push_back(std::string(section) + "." + k.key());
      return Status::ok();
    };
    std::optional<bool> fp16, bf16, bf16_legacy;
    bool fp16_auto = false, bf16_auto = false;
    if (Status st = enabled("fp16", &fp16, &fp16_auto); !st) return st;
    if (Status st = enabled("bf16", &bf16, &bf16_auto); !st) return st;
    if (Status st = enabled("bfloat16", &bf16_legacy, &bf16_auto); !st) return st;  // legacy alias (constants.py L124)
    if (bf16_legacy && !bf16) bf16 = bf16_legacy;
    if (auto a = c.find("amp"); a != c.end() && a->is_object() && a->value("enabled", false))
      return Status::bad_input(file_ + ": field 'amp.enabled': expected false (llmplan models DeepSpeed's fp16 and bf16 modes, "
                               "not Apex AMP; constants.py L200-202), got true");
    if (fp16.value_or(false) && bf16.value_or(false))
      return Status::bad_input(file_ + ": fields 'bf16.enabled' and 'fp16.enabled': expected at most one enabled (DeepSpeed "
                               "asserts \"bf16 and fp16 modes cannot be simultaneously enabled\", config.py L834-835), got both");
    if (fp16_auto || bf16_auto) {
      if (fp16.value_or(false)) d->precision = Precision::fp16;
      else if (bf16.value_or(false)) d->precision = Precision::bf16;
      return Status::ok();  // unresolved: the caller takes the GPU's 16-bit default and notes it
    }
    d->precision = fp16.value_or(false) ? Precision::fp16 : bf16.value_or(false) ? Precision::bf16 : Precision::fp32;
    return Status::ok();
  }

  Status optimizer(const json& o, DsConfig* d) {
    if (!o.is_object()) return bad("optimizer", "an object with type and params", o);
    for (auto k = o.begin(); k != o.end(); ++k)
      if (k.key() != "type") unknown_->push_back("optimizer." + k.key());
    auto t = o.find("type");
    if (t == o.end()) return Status::ok();
    if (!t->is_string()) return bad("optimizer.type", "an optimizer name", *t);
    std::string name = t->get<std::string>();
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    // deepspeed/runtime/config.py DEEPSPEED_OPTIMIZERS (v0.16.4): the Adam family keeps two
    // moments per parameter, as llmplan's AdamW; MuSGD one, as SGD with momentum.
    static const std::set<std::string> kAdamLike = {"adam", "adamw", "fusedadam", "cpuadam", "onebitadam", "zerooneadam",
                                                    "lamb", "onebitlamb", "muadam", "muadamw"};
    if (kAdamLike.count(name)) {
      d->optimizer = Optimizer::adamw;
      if (name != "adam" && name != "adamw")
        notes_->push_back("optimizer.type " + t->get<std::string>() + ": costed as AdamW (two fp32 moments per parameter)");
    } else if (name == "sgd" || name == "musgd") {
      d->optimizer = Optimizer::sgd_momentum;
    } else {
      return bad("optimizer.type", "an optimizer llmplan models (Adam, AdamW and their DeepSpeed variants, SGD)", *t);
    }
    return Status::ok();
  }

  std::string file_;
  std::vector<std::string>* unknown_;
  std::vector<std::string>* notes_;
};

// ---------------------------------------------------------------- import: launch.sh

// What the launch script says: the launcher's size and pretrain_gpt.py's arguments.
struct ScriptFacts {
  std::string file;
  int line = 0;
  std::optional<int> nodes, gpus_per_node;
  std::string program;
  std::string config_path;  // --deepspeed_config
  int tp = 1, pp = 1, ep = 1;
  bool sp = false, no_pipeline = false, deepspeed = false;
  std::optional<int> zero;
  std::optional<int64_t> micro, global, seq;
  ModelShape shape;
  std::optional<Precision> precision;  // --bf16 / --fp16
  bool flash = false;
  std::optional<Optimizer> optimizer;
  bool cpu_optimizer = false, finetune = false;
  std::string granularity, method;
  int recompute_layers = 1;
  bool checkpoint_activations = false;
  int checkpoint_num_layers = 1;
};

// pretrain_gpt.py's options that take no value (megatron/arguments.py @4efb479d
// store_true/store_false), among those the reader knows or that commonly appear.
const std::set<std::string> kMegatronFlags = {
    "--no-pipeline-parallel", "--sequence-parallel", "--swiglu", "--use-rotary-position-embeddings", "--disable-bias-linear",
    "--untie-embeddings-and-output-weights", "--bf16", "--fp16", "--recompute-activations", "--checkpoint-activations",
    "--deepspeed-activation-checkpointing", "--partition-activations", "--contigious-checkpointing", "--checkpoint-in-cpu",
    "--synchronize-each-layer", "--profile-backward", "--use-flash-attn", "--use-flash-attn-v1", "--use-flash-attn-v2",
    "--use-flash-attn-triton", "--use-flash-attn-builder", "--cpu-optimizer", "--finetune", "--deepspeed", "--deepscale",
    "--deepspeed_mpi", "--create-moe-param-group", "--disable-moe-token-dropping", "--no-position-embedding",
    "--no-query-key-layer-scaling", "--no-masked-softmax-fusion", "--no-bias-gelu-fusion", "--no-bias-dropout-fusion",
    "--no-gradient-accumulation-fusion", "--no-async-tensor-model-parallel-allreduce", "--use-mcore-models", "--no-load-optim",
    "--no-load-rng", "--no-save-optim", "--no-save-rng", "--fp16-lm-cross-entropy", "--apply-layernorm-1p",
    "--enable-expert-tensor-parallelism", "--use-tutel", "--log-params-norm", "--log-num-zeros-in-grad", "--log-timers-to-tensorboard",
    "--log-validation-ppl-to-tensorboard", "--log-memory-to-tensorboard", "--log-world-size-to-tensorboard",
    "--log-batch-size-to-tensorboard", "--log-optimizer-states-to-tensorboard", "--embedding-weights-in-fp32", "--openai-gelu",
    "--squared-relu", "--trust-remote-code", "--use-dataset-only", "--zero-reduce-scatter", "--zero-contigious-gradients",
    "--random-ltd", "--force-ds-sequence-parallel", "--ds-sequence-parallel-fpdt", "--ds-sequence-parallel-fpdt-offloading",
    "--exit-signal-handler", "--split-transformers", "--scattered-embeddings", "--memory-centric-tiled-linear"};

class ScriptReader {
 public:
  ScriptReader(std::string file, std::vector<std::string>* unknown) : file_(std::move(file)), unknown_(unknown) {}

  Result<std::optional<ScriptFacts>> read(const std::string& text) {
    Result<shell::Script> script = shell::read_shell_script(text, file_);
    if (!script) return script.status();
    Result<std::optional<shell::LaunchLine>> line = shell::find_launch_line(script->commands, file_);
    if (!line) return line.status();
    if (!line->has_value()) return std::optional<ScriptFacts>();
    const shell::LaunchLine& l = **line;
    ScriptFacts s;
    s.file = file_;
    s.line = l.line;
    s.nodes = l.nodes;
    s.gpus_per_node = l.gpus_per_node;
    s.program = l.program;
    for (const std::string& u : l.unused) unknown_->push_back(u);
    if (s.program.empty())
      return Status::bad_input(file_ + ": line " + num(l.line) + ": " + l.launcher + " runs no program (expected " +
                               kDefaultEntryPoint + " and its arguments)");
    if (Status st = arguments(l.args, &s); !st) return st;
    return std::optional<ScriptFacts>(std::move(s));
  }

 private:
  Status bad(const ScriptFacts& s, const std::string& key, const std::string& what) const {
    return Status::bad_input(file_ + ": line " + num(s.line) + ": " + key + ": " + what);
  }

  Status arguments(const std::vector<std::string>& args, ScriptFacts* s) {
    std::vector<std::string> experts;
    std::optional<int64_t> ffn, kv_heads, kv_channels, expert_interval;
    std::string normalization = "layernorm", mlp_type = "standard";
    bool swiglu = false, no_bias = false, untie = false;
    for (size_t k = 0; k < args.size(); ++k) {
      shell::OptionWord o = shell::split_option_word(args[k]);
      if (o.name.rfind("--", 0) != 0) {
        unknown_->push_back(args[k]);
        continue;
      }
      const bool flag = kMegatronFlags.count(o.name) > 0;
      if (!flag && !o.has_value) {
        if (k + 1 < args.size() && args[k + 1].rfind("--", 0) != 0) o.value = args[++k];
      }
      auto integer = [&](int64_t min, int64_t max) { return shell::parse_integer_word(o.value, min, max, o.name, file_, s->line); };
      Status st;
      auto set = [&](auto* out, int64_t min, int64_t max) {
        Result<int64_t> v = integer(min, max);
        if (!v) st = v.status();
        else *out = static_cast<std::remove_reference_t<decltype(*out)>>(*v);
      };
      const std::string& n = o.name;
      if (n == "--tensor-model-parallel-size") set(&s->tp, 1, 1024);
      else if (n == "--pipeline-model-parallel-size") set(&s->pp, 1, 100000);
      else if (n == "--moe-expert-parallel-size") set(&s->ep, 1, 100000);
      else if (n == "--no-pipeline-parallel") s->no_pipeline = true;
      else if (n == "--sequence-parallel") s->sp = true;
      else if (n == "--zero-stage") {
        int z = 0;
        set(&z, 0, 3);
        s->zero = z;
      } else if (n == "--num-layers") {
        int v = 0;
        set(&v, 1, 10000);
        s->shape.layers = v;
      } else if (n == "--hidden-size") {
        int64_t v = 0;
        set(&v, 1, 1 << 20);
        s->shape.hidden = v;
      } else if (n == "--ffn-hidden-size") {
        int64_t v = 0;
        set(&v, 1, 1 << 22);
        ffn = v;
      } else if (n == "--num-attention-heads") {
        int v = 0;
        set(&v, 1, 100000);
        s->shape.heads = v;
      } else if (n == "--num-key-value-heads") {
        int64_t v = 0;
        set(&v, 1, 100000);
        kv_heads = v;
      } else if (n == "--kv-channels") {
        int64_t v = 0;
        set(&v, 1, 1 << 16);
        kv_channels = v;
      } else if (n == "--max-position-embeddings") {
        int64_t v = 0;
        set(&v, 1, int64_t{1} << 24);
        s->shape.max_positions = v;
      } else if (n == "--vocab-size") {
        int64_t v = 0;
        set(&v, 1, int64_t{1} << 24);
        s->shape.vocab = v;
      } else if (n == "--seq-length") {
        int64_t v = 0;
        set(&v, 1, int64_t{1} << 24);
        s->seq = v;
      } else if (n == "--micro-batch-size") {
        int64_t v = 0;
        set(&v, 1, 1 << 20);
        s->micro = v;
      } else if (n == "--global-batch-size") {
        int64_t v = 0;
        set(&v, 1, int64_t{1} << 30);
        s->global = v;
      } else if (n == "--swiglu") swiglu = true;
      else if (n == "--normalization") normalization = o.value;
      else if (n == "--disable-bias-linear") no_bias = true;
      else if (n == "--untie-embeddings-and-output-weights") untie = true;
      else if (n == "--use-rotary-position-embeddings" || n == "--no-position-embedding") {
        // the llama family's rotary positions; read with --swiglu and rmsnorm below
      } else if (n == "--num-experts") {
        experts.push_back(o.value);
        while (k + 1 < args.size() && args[k + 1].rfind("--", 0) != 0) experts.push_back(args[++k]);  // nargs='+'
      } else if (n == "--topk") {
        int v = 0;
        set(&v, 1, 1024);
        s->shape.experts_per_token = v;
      } else if (n == "--expert-interval") {
        int64_t v = 0;
        set(&v, 1, 10000);
        expert_interval = v;
      } else if (n == "--mlp-type") mlp_type = o.value;
      else if (n == "--bf16") s->precision = Precision::bf16;
      else if (n == "--fp16") s->precision = Precision::fp16;
      else if (n == "--recompute-granularity") s->granularity = o.value;
      else if (n == "--recompute-method") s->method = o.value;
      else if (n == "--recompute-num-layers") set(&s->recompute_layers, 1, 10000);
      else if (n == "--recompute-activations") s->granularity = "selective";  // arguments.py L145-146
      else if (n == "--checkpoint-activations") s->checkpoint_activations = true;
      else if (n == "--checkpoint-num-layers") set(&s->checkpoint_num_layers, 1, 10000);
      else if (n.rfind("--use-flash-attn", 0) == 0) s->flash = true;
      else if (n == "--optimizer") {
        if (o.value == "adam") s->optimizer = Optimizer::adamw;
        else if (o.value == "sgd") s->optimizer = Optimizer::sgd_momentum;
        else st = bad(*s, n, "expected adam or sgd (megatron/arguments.py L940), got '" + o.value + "'");
      } else if (n == "--cpu-optimizer") s->cpu_optimizer = true;
      else if (n == "--finetune") s->finetune = true;
      else if (n == "--deepspeed") s->deepspeed = true;
      else if (n == "--deepspeed_config") s->config_path = o.value;
      else if (n == "--ds-sequence-parallel-size") {
        int v = 1;
        set(&v, 1, 100000);
        if (st && v > 1)
          st = bad(*s, n, "expected 1: DeepSpeed-Ulysses splits attention heads over ranks with all-to-alls, which llmplan does not "
                          "model (megatron/arguments.py L974), got " + num(v));
      } else if (n == "--num-layers-per-virtual-pipeline-stage") {
        st = bad(*s, n, "not run by DeepSpeed's pipeline engine, which has no interleaved stages "
                        "(deepspeed/runtime/pipe/schedule.py); expected no virtual stages");
      } else if (n == "--deepspeed-activation-checkpointing" || n == "--deepscale") {
        // configures deepspeed.checkpointing, the mechanism behind the recompute flags
      } else {
        unknown_->push_back(n);
      }
      if (!st) return st;
    }
    // The model's family from its blocks (megatron/arguments.py L647, L670, L937).
    if (swiglu && normalization == "rmsnorm") {
      if (!no_bias)
        return bad(*s, "--disable-bias-linear", "expected with --swiglu and rmsnorm: llmplan's llama family has no MLP biases, "
                                                "and Megatron-DeepSpeed has one bias switch for every linear layer");
      s->shape.family = Family::llama;
      s->shape.attention_bias = AttentionBias::none;
    } else if (!swiglu && normalization == "layernorm") {
      if (no_bias) return bad(*s, "--disable-bias-linear", "a GPT-family model (GELU, LayerNorm) has biases in llmplan");
      s->shape.family = Family::gpt;
    } else {
      return bad(*s, "--swiglu", "with --normalization rmsnorm (llama family) or neither (GPT family), got swiglu " +
                                     std::string(swiglu ? "on" : "off") + " with " + normalization);
    }
    s->shape.qk_norm = false;
    s->shape.tied_embeddings = !untie;
    if (s->shape.heads) s->shape.kv_heads = static_cast<int>(kv_heads.value_or(*s->shape.heads));
    if (s->shape.hidden && s->shape.heads) s->shape.head_width = kv_channels.value_or(*s->shape.hidden / *s->shape.heads);
    // arguments.py L287-294: the default MLP width.
    if (ffn) s->shape.ffn_hidden = ffn;
    else if (s->shape.hidden) s->shape.ffn_hidden = swiglu ? static_cast<int64_t>((4.0 * *s->shape.hidden * 2 / 3) / 64) * 64 : 4 * *s->shape.hidden;
    int e = 1;
    if (experts.size() > 1) return bad(*s, "--num-experts", "one value (every MoE layer alike), got " + num(static_cast<int64_t>(experts.size())));
    if (!experts.empty()) {
      Result<int64_t> v = shell::parse_integer_word(experts[0], 1, 100000, "--num-experts", file_, s->line);
      if (!v) return v.status();
      e = static_cast<int>(*v);
    }
    if (e > 1) {
      if (expert_interval.value_or(2) != 1)
        return bad(*s, "--expert-interval", "1 (llmplan's MoE models have experts in every layer), got " + num(expert_interval.value_or(2)));
      if (mlp_type != "standard") return bad(*s, "--mlp-type", "standard (residual is PR-MoE, which llmplan does not model), got " + mlp_type);
      s->shape.experts = e;
      s->shape.expert_ffn_hidden = s->shape.ffn_hidden;
      s->shape.shared_experts = 0;
      if (!s->shape.experts_per_token) s->shape.experts_per_token = 1;  // --topk default (L612)
    } else {
      s->shape.experts = 0;
      s->shape.experts_per_token.reset();
    }
    return Status::ok();
  }

  std::string file_;
  std::vector<std::string>* unknown_;
};

// The field a script flag states of the model, for messages.
std::string flag_of_field(const std::string& field) {
  static const std::map<std::string, std::string> kFlags = {
      {"family", "--swiglu/--normalization"}, {"layers", "--num-layers"}, {"hidden", "--hidden-size"},
      {"heads", "--num-attention-heads"}, {"kv_heads", "--num-key-value-heads"}, {"head_dim", "--kv-channels"},
      {"ffn_hidden", "--ffn-hidden-size"}, {"vocab", "--vocab-size"}, {"max_positions", "--max-position-embeddings"},
      {"tied_embeddings", "--untie-embeddings-and-output-weights"}, {"attention_bias", "--disable-bias-linear"},
      {"qk_norm", "--qk-layernorm"}, {"moe.experts", "--num-experts"}, {"moe.experts_per_token", "--topk"},
      {"moe.expert_ffn_hidden", "--ffn-hidden-size"}, {"moe.shared_experts", "--mlp-type"}};
  auto it = kFlags.find(field);
  return it == kFlags.end() ? field : it->second;
}

}  // namespace

std::span<const char* const> deepspeed_zero_optimization_keys() { return kZeroKeys; }
std::span<const char* const> deepspeed_offload_optimizer_keys() { return kOffloadOptimizerKeys; }
std::span<const char* const> deepspeed_offload_param_keys() { return kOffloadParamKeys; }

Result<ExportResult> export_deepspeed(const PlanFile& f, const ExportOptions& opt) {
  if (Status st = refusal(f); !st) return st;
  ExportResult r;
  const ordered_json config = ds_config(f);
  r.files.push_back({kConfigName, config.dump(2) + "\n", false});
  r.files.push_back({kScriptName, launch_script(f, opt, config, &r.notes), true});
  r.notes.push_back("launch.sh runs Megatron-DeepSpeed's " + (opt.entry_point.empty() ? std::string(kDefaultEntryPoint) : opt.entry_point) +
                    " from $MEGATRON_DEEPSPEED (default: the current folder); --data-path and --tokenizer-model are " +
                    (opt.data_path == ExportOptions{}.data_path ? "placeholders to replace" : "as given"));
  r.notes.push_back("the learning rate (--lr) and schedule are not part of the plan: edit them in launch.sh");
  return r;
}

Result<ImportedConfig> import_deepspeed(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin) {
  // The config: ds_config.json, else the one JSON file with DeepSpeed's batch or ZeRO keys.
  const LaunchFile* config = nullptr;
  const LaunchFile* script = nullptr;
  for (const LaunchFile& f : files) {
    if (f.name.ends_with(".json")) {
      if (f.name == kConfigName || (config == nullptr && (f.text.find("\"zero_optimization\"") != std::string::npos ||
                                                          f.text.find("\"train_batch_size\"") != std::string::npos ||
                                                          f.text.find("\"train_micro_batch_size_per_gpu\"") != std::string::npos)))
        config = &f;
    } else if (f.name == kScriptName || (script == nullptr && (f.name.ends_with(".sh") || f.text.find("deepspeed") != std::string::npos))) {
      script = &f;
    }
  }
  if (config == nullptr)
    return Status::bad_input(origin + ": no DeepSpeed config (expected ds_config.json, or a JSON file with train_batch_size, "
                                      "train_micro_batch_size_per_gpu or zero_optimization)");
  const std::string config_file = file_origin(origin, config->name);
  ImportedConfig out;
  std::vector<std::string>& notes = out.notes;

  // Parse, with the depth guard of planner/spec/spec_json.cpp's read_json_file.
  bool too_deep = false;
  const json::parser_callback_t depth_guard = [&too_deep](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  json doc = json::parse(config->text, depth_guard, /*allow_exceptions=*/false);
  if (too_deep) return Status::bad_input(config_file + ": JSON nested deeper than " + num(kMaxJsonDepth) + " levels (expected a DeepSpeed config)");
  if (doc.is_discarded()) {
    try {
      json again = json::parse(config->text, depth_guard);
      (void)again;
    } catch (const json::parse_error& e) {
      return Status::bad_input(config_file + ": malformed JSON at byte " + num(static_cast<int64_t>(e.byte)) + " (expected a DeepSpeed config)");
    } catch (const json::exception& e) {
      return Status::bad_input(config_file + ": malformed JSON: " + e.what() + " (expected a DeepSpeed config with finite numbers)");
    }
    return Status::bad_input(config_file + ": malformed JSON (expected a DeepSpeed config)");
  }
  Result<DsConfig> ds = DsConfigReader(config_file, &out.unknown_keys, &notes).read(doc);
  if (!ds) return ds.status();

  std::optional<ScriptFacts> sf;
  if (script != nullptr) {
    Result<std::optional<ScriptFacts>> r = ScriptReader(file_origin(origin, script->name), &out.unknown_keys).read(script->text);
    if (!r) return r.status();
    sf = std::move(*r);
    if (!sf) notes.push_back(script->name + " has no deepspeed or torchrun line: read ds_config.json alone");
  }
  const std::string script_file = sf ? sf->file : std::string();
  auto script_bad = [&](const std::string& key, const std::string& what) {
    return Status::bad_input(script_file + ": line " + num(sf->line) + ": " + key + ": " + what);
  };

  // The model: --model, checked against what the script states; else the presets with the
  // script's shape.
  const PresetRegistry& reg = *opt.presets;
  PlanFile& pf = out.file;
  if (!opt.model.empty()) {
    Result<ModelSpec> m = reg.resolve_model(opt.model, "--model");
    if (!m) return m.status();
    pf.model = *m;
    if (sf) {
      if (std::optional<ShapeMismatch> d = shape_mismatch(sf->shape, pf.model))
        return script_bad(flag_of_field(d->field), "states " + d->field + " " + d->stated + ", but --model " + opt.model + " has " + d->model);
    }
  } else if (sf && sf->shape.layers && sf->shape.hidden && sf->shape.heads) {
    const std::vector<std::string> ids = presets_with_shape(reg, sf->shape);
    if (ids.empty())
      return Status::bad_input("--model: " + script_file + " describes a model no preset has (" + num(*sf->shape.layers) + " layers, hidden " +
                               num(*sf->shape.hidden) + ", " + num(*sf->shape.heads) +
                               " heads, ...) and no vocabulary: expected --model with a preset id or a config.json");
    Result<ModelSpec> m = reg.model(ids[0]);
    if (!m) return m.status();
    pf.model = *m;
    if (ids.size() > 1) {
      std::string others;
      for (size_t k = 1; k < ids.size(); ++k) others += (k > 1 ? ", " : "") + ids[k];
      notes.push_back("model " + ids[0] + " from the script's shape (the first of the presets with it; also " + others + ": --model chooses)");
    } else {
      notes.push_back("model " + ids[0] + ": the preset with the script's shape");
    }
  } else {
    return Status::bad_input("--model: " + config_file +
                             " does not describe the model (a DeepSpeed config never does): expected --model with a preset id or a "
                             "config.json");
  }

  // Parallel sizes: the script's; ds_config alone runs tp = pp = 1.
  ParallelPlan& p = pf.plan;
  TrainingJob& j = pf.job;
  p.tp = sf ? sf->tp : 1;
  p.pp = sf ? sf->pp : 1;
  p.ep = sf ? sf->ep : 1;
  p.sp = sf && sf->sp && p.tp > 1;  // Megatron-DeepSpeed drops --sequence-parallel when tp == 1 (arguments.py L387-388)
  p.cp = 1;
  p.vpp = 1;
  p.schedule = Schedule::one_f_one_b;  // DeepSpeed's TrainSchedule (deepspeed/runtime/pipe/schedule.py)
  if (!sf) notes.push_back("tp = pp = 1: a DeepSpeed config alone runs data parallel only (the parallel sizes are the training script's)");
  if (sf && sf->no_pipeline && p.pp > 1)
    return script_bad("--no-pipeline-parallel", "expected --pipeline-model-parallel-size 1 with it (megatron/arguments.py L94-96: "
                                                "\"pipeline_model_parallel_size must be 1 if pipeline parallel is disabled\"), got " + num(p.pp));

  // The GPUs: the launch line's, else (when the batch keys do not fix dp) one node.
  Result<ClusterSpec> cluster = reg.cluster_for_gpu(opt.gpu.empty() ? "h100-sxm" : opt.gpu);
  if (!cluster) return cluster.status();
  ClusterSpec c = *cluster;
  if (opt.gpus_per_node > 0) c.gpus_per_node = opt.gpus_per_node;
  else if (sf && sf->gpus_per_node) c.gpus_per_node = *sf->gpus_per_node;
  const int model_parallel = p.tp * p.pp;
  std::optional<int64_t> dp;
  if (sf && (sf->nodes || sf->gpus_per_node)) {
    const int64_t world = static_cast<int64_t>(sf->nodes.value_or(1)) * c.gpus_per_node;
    if (world % model_parallel != 0)
      return script_bad("--num_gpus", "expected the launch's " + num(world) + " GPUs to be a multiple of tp*pp = " + num(model_parallel));
    dp = world / model_parallel;
  }

  // The batch: DeepSpeed derives the missing one of train_batch_size,
  // train_micro_batch_size_per_gpu and gradient_accumulation_steps from the other two and the
  // data-parallel size (deepspeed/runtime/config.py L919-979, v0.16.4).
  std::optional<int64_t> tb = ds->train_batch, mb = ds->micro, ga = ds->grad_accum;
  if (sf && sf->micro) {
    if (mb && *mb != *sf->micro)
      return Status::bad_input(config_file + ": field 'train_micro_batch_size_per_gpu': expected " + num(*sf->micro) + " as " + script_file +
                               "'s --micro-batch-size says, got " + num(*mb));
    mb = sf->micro;
  }
  if (sf && sf->global) {
    if (tb && *tb != *sf->global)
      return Status::bad_input(config_file + ": field 'train_batch_size': expected " + num(*sf->global) + " as " + script_file +
                               "'s --global-batch-size says, got " + num(*tb));
    tb = sf->global;
  }
  if (!dp && tb && mb && ga) {
    if (*tb % (*mb * *ga) != 0)
      return Status::bad_input(config_file + ": field 'train_batch_size': expected a multiple of train_micro_batch_size_per_gpu * "
                               "gradient_accumulation_steps = " + num(*mb * *ga) + " (config.py L931: their product with the "
                               "data-parallel size), got " + num(*tb));
    dp = *tb / (*mb * *ga);
    notes.push_back("dp " + num(*dp) + " = train_batch_size / (micro * gradient_accumulation_steps)");
  }
  if (!dp) {
    dp = c.gpus_per_node / model_parallel > 0 ? c.gpus_per_node / model_parallel : 1;
    notes.push_back("dp " + num(*dp) + ": the batch keys do not fix the data-parallel size, so one node of " + num(c.gpus_per_node) +
                    " GPUs is assumed (--gpus-per-node changes it)");
  }
  if (!tb && !mb && !ga) {
    // transformers TrainingArguments: per_device_train_batch_size 8, gradient_accumulation_steps 1.
    mb = 8;
    ga = 1;
    notes.push_back("no batch size: the Hugging Face Trainer fills it (DeepSpeed alone refuses such a config, config.py L977-979); "
                    "assumed its defaults, micro-batch 8 and gradient accumulation 1");
  }
  if (tb && mb && ga) {
    if (*tb != *mb * *ga * *dp)
      return Status::bad_input(config_file + ": field 'train_batch_size': expected train_micro_batch_size_per_gpu * "
                               "gradient_accumulation_steps * data-parallel size = " + num(*mb) + " * " + num(*ga) + " * " +
                               num(*dp) + " = " + num(*mb * *ga * *dp) + " (deepspeed/runtime/config.py L931), got " + num(*tb));
  } else if (tb && mb) {
    if (*tb % (*mb * *dp) != 0)
      return Status::bad_input(config_file + ": field 'train_batch_size': expected a multiple of micro * dp = " + num(*mb * *dp) + ", got " + num(*tb));
    ga = *tb / (*mb * *dp);
  } else if (tb && ga) {
    if (*tb % (*ga * *dp) != 0)
      return Status::bad_input(config_file + ": field 'train_batch_size': expected a multiple of gradient_accumulation_steps * dp = " +
                               num(*ga * *dp) + ", got " + num(*tb));
    mb = *tb / (*ga * *dp);
  } else if (mb && ga) {
    tb = *mb * *ga * *dp;
  } else if (tb) {
    if (*tb % *dp != 0)
      return Status::bad_input(config_file + ": field 'train_batch_size': expected a multiple of the data-parallel size " + num(*dp) + ", got " + num(*tb));
    ga = 1;
    mb = *tb / *dp;
  } else {
    if (!ga) ga = 1;
    tb = *mb * *ga * *dp;
  }
  p.dp = static_cast<int>(*dp);
  p.micro_batch = static_cast<int>(*mb);
  p.grad_accum = static_cast<int>(*ga);
  j.global_batch = *tb;

  // ZeRO, precision, offload.
  p.zero = ds->zero;
  if (sf && sf->zero && *sf->zero != p.zero)
    return script_bad("--zero-stage", "expected " + num(p.zero) + " as " + config_file + "'s zero_optimization.stage says, got " + num(*sf->zero));
  p.offload_optimizer = ds->offload_optimizer;
  p.offload_params = ds->offload_params;
  if (ds->precision) {
    j.precision = *ds->precision;
  } else {
    Result<GpuSpec> g = reg.gpu(opt.gpu.empty() ? "h100-sxm" : opt.gpu);
    j.precision = g ? default_half_precision(*g) : Precision::bf16;
    if (sf && sf->precision) j.precision = *sf->precision;
    notes.push_back(std::string("precision \"auto\": ") + to_string(j.precision) + (sf && sf->precision ? " from the script" : " (the GPU's 16-bit format)"));
  }
  // Megatron-DeepSpeed builds the model in the dtype of --bf16/--fp16 and DeepSpeed trains it
  // in ds_config's: the two must agree.
  if (sf && sf->precision != (j.precision == Precision::fp32 ? std::nullopt : std::optional<Precision>(j.precision))) {
    const std::string flag = j.precision == Precision::bf16 ? "--bf16" : j.precision == Precision::fp16 ? "--fp16"
                                                                                                         : (sf->precision == Precision::bf16 ? "--bf16" : "--fp16");
    return script_bad(flag, std::string(j.precision == Precision::fp32 ? "not expected: " : "expected: ") + config_file +
                                "'s bf16/fp16 sections train in " + to_string(j.precision));
  }
  if (p.zero == 0 && j.precision == Precision::bf16) {
    p.zero = 1;
    notes.push_back("bf16 without ZeRO: DeepSpeed runs it through BF16_Optimizer, which partitions the fp32 master weights and "
                    "optimizer states over data parallel (deepspeed/runtime/engine.py L1017-1019, L1331-1348; "
                    "bf16_optimizer.py L127-157): planned as ZeRO-1");
  }
  if (pf.model.moe.enabled() && p.zero == 3)
    return Status::bad_input(config_file + ": field 'zero_optimization.stage': expected 0-2 for a mixture of experts (\"MoE not "
                             "supported with Stage 3\", deepspeed/runtime/engine.py L1675), got 3");
  const bool pipeline_engine = sf && !sf->no_pipeline;  // pretrain_gpt.py model_provider: GPTModelPipe unless --no-pipeline-parallel
  if (pipeline_engine && p.zero >= 2)
    return Status::bad_input(config_file + ": field 'zero_optimization.stage': expected 0 or 1 under DeepSpeed's pipeline engine (\"ZeRO-2 "
                             "and ZeRO-3 are incompatible with pipeline parallelism\", deepspeed/runtime/pipe/engine.py L77-78; " +
                             script_file + " builds the pipeline model unless --no-pipeline-parallel), got " + num(p.zero));
  if (sf && p.offload_optimizer && !sf->cpu_optimizer)
    notes.push_back("optimizer offload without --cpu-optimizer: DeepSpeed wants DeepSpeedCPUAdam for it (zero_force_ds_cpu_optimizer)");
  j.optimizer = sf && sf->optimizer ? *sf->optimizer : ds->optimizer.value_or(Optimizer::adamw);
  if (sf && sf->optimizer && ds->optimizer && *sf->optimizer != *ds->optimizer)
    return script_bad("--optimizer", std::string("expected the optimizer of ") + config_file + "'s optimizer.type (" + to_string(*ds->optimizer) + ")");
  if (!ds->optimizer && !(sf && sf->optimizer)) notes.push_back("optimizer: AdamW assumed (the config has no optimizer section)");
  j.mode = sf && sf->finetune ? TrainMode::finetune : TrainMode::pretrain;
  if (!sf) notes.push_back("job mode pretrain (fine-tuning is the training script's choice)");

  // Sequence and recompute: the script's.
  if (sf && sf->seq) {
    j.seq_len = *sf->seq;
  } else {
    j.seq_len = std::min<int64_t>(2048, pf.model.max_positions > 0 ? pf.model.max_positions : 2048);
    notes.push_back("sequence length " + num(j.seq_len) + " assumed (a DeepSpeed config does not state it)");
  }
  p.flash_attention = sf ? sf->flash : true;
  if (!sf) notes.push_back("fused (flash) attention assumed (the attention kernel is the model code's)");
  p.recompute = Recompute::none;
  if (sf) {
    const std::string& g = sf->granularity;
    if (g == "selective") {
      p.recompute = Recompute::selective;
    } else if (g == "full" || sf->checkpoint_activations) {
      const std::string method = sf->checkpoint_activations ? "uniform" : sf->method;
      const int n = sf->checkpoint_activations ? sf->checkpoint_num_layers : sf->recompute_layers;
      if (method == "block") {
        if (pipeline_engine) {
          notes.push_back("--recompute-method block is ignored by DeepSpeed's pipeline engine (megatron/model/gpt_model.py L446-451): no recompute");
        } else {
          p.recompute = Recompute::full_k;
          p.recompute_layers = n;
        }
      } else if (method == "uniform") {
        p.recompute = Recompute::full;
        if (n > 1)
          notes.push_back("--recompute-num-layers " + num(n) + " (uniform) checkpoints one input per " + num(n) +
                          " layers: planned as full recompute, which keeps one per layer");
      } else {
        return script_bad("--recompute-method", "uniform or block with --recompute-granularity full (megatron/arguments.py L842), got '" + method + "'");
      }
    } else if (!g.empty()) {
      return script_bad("--recompute-granularity", "full or selective (megatron/arguments.py L830), got '" + g + "'");
    }
  } else if (ds->activation_checkpointing) {
    p.recompute = Recompute::full;
    notes.push_back("activation_checkpointing section: full recompute assumed (which layers are checkpointed is the model code's)");
  } else {
    notes.push_back("no recompute assumed (activation checkpointing is the training script's choice)");
  }
  // cpu_checkpointing moves every checkpoint to host memory: activation offload of every
  // layer, which the plan has only under full recompute.
  if (ds->cpu_checkpointing) {
    if (p.recompute == Recompute::full) {
      p.activation_offload_layers = pp_stage_layers(pf.model.layers, p, 0);
    } else {
      notes.push_back("activation_checkpointing.cpu_checkpointing is on with " + std::string(to_string(p.recompute)) +
                      " recompute: llmplan offloads checkpoints of full recompute only (the estimate keeps them on the GPU)");
    }
  }

  // The cluster.
  const int world = p.dp * p.tp * p.pp;
  if (sf && sf->nodes) {
    c.nodes = *sf->nodes;
    if (static_cast<int64_t>(c.nodes) * c.gpus_per_node != world)
      return script_bad("--num_nodes", "expected nodes * GPUs per node = dp * tp * pp = " + num(world) + ", got " + num(c.nodes) + " * " +
                                           num(c.gpus_per_node));
  } else {
    c = cluster_with_gpus(c, world);
  }
  pf.cluster = c;
  pf.gpus = world;
  if (sf && !sf->config_path.empty() && shell::file_name(sf->config_path) != config->name)
    notes.push_back(script_file + " names " + sf->config_path + " as its config; read " + config->name + " beside it");
  if (Status st = check_inputs(pf.model, j, config_file); !st) return st;
  if (Status st = check_plan_status(pf.model, pf.cluster, j, p, pf.gpus, config_file); !st) return st;
  return out;
}

}  // namespace llmplan::launch_formats
