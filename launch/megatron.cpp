// The megatron format (launch/launch.h): Megatron-LM pretrain_gpt.py arguments, target
// Megatron-LM core_v0.13.0 (megatron/training/arguments.py; every flag written is one of its
// options, tests/fixtures/frameworks/megatron_args.txt), in a bash launch script.
//
// Export writes `launch.sh`: the arguments in bash arrays grouped by what they set, each on
// its own line with its meaning and the arguments.py line that defines it, and the launch
// line: torchrun on each node (NODE_RANK / MASTER_ADDR from the environment), or under
// sbatch (`#SBATCH` lines at the top) one torchrun per node through srun.
//
// Import reads such a script, any launch script built the same way (variables, arrays,
// if / else on string tests: launch/shell_words.h) or a plain argument list: the arguments
// after the entry point (the word ending in .py) of the torchrun / python / srun command,
// else every `--flag` in the file's commands and arrays. Flags map back to the model, job
// and plan as validate_args reads them (the defaults it applies are named in the notes);
// flags llmplan does not use are listed in unknown_keys; pairs Megatron asserts against are
// bad input naming the flag; what Megatron silently adjusts is a note.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "launch/formats.h"
#include "launch/megatron_family.h"
#include "launch/shell_words.h"
#include "planner/cost/plan_check.h"

namespace llmplan::launch_formats {

namespace {

std::string n(int64_t v) { return std::to_string(v); }

// Lines of megatron/training/arguments.py at core_v0.13.0 (commit c550cf6c) where each
// flag this format writes or reads is defined: the comment each exported line carries.
struct FlagLine {
  const char* flag;
  int line;
};
constexpr FlagLine kArgumentLines[] = {
    {"--num-layers", 1364}, {"--hidden-size", 1370}, {"--ffn-hidden-size", 1372}, {"--num-attention-heads", 1375},
    {"--attention-backend", 1377}, {"--kv-channels", 1378}, {"--group-query-attention", 1383}, {"--num-query-groups", 1385},
    {"--max-position-embeddings", 1387}, {"--position-embedding-type", 1390}, {"--normalization", 1430},
    {"--swiglu", 1448}, {"--untie-embeddings-and-output-weights", 1456}, {"--attention-dropout", 1665},
    {"--hidden-dropout", 1667}, {"--micro-batch-size", 1697}, {"--global-batch-size", 1704}, {"--rampup-batch-size", 1711},
    {"--recompute-granularity", 1733}, {"--recompute-method", 1754}, {"--recompute-num-layers", 1763},
    {"--recompute-modules", 1768}, {"--train-iters", 1858}, {"--disable-bias-linear", 1906}, {"--add-qkv-bias", 1909},
    {"--optimizer", 1912}, {"--optimizer-cpu-offload", 1915}, {"--optimizer-offload-fraction", 1917},
    {"--sequence-parallel", 1939}, {"--no-gradient-accumulation-fusion", 1941}, {"--finetune", 2114},
    {"--fp16", 2200}, {"--bf16", 2202}, {"--grad-reduce-in-bf16", 2204}, {"--initial-loss-scale", 2210}, {"--tensor-model-parallel-size", 2243},
    {"--pipeline-model-parallel-size", 2248}, {"--decoder-first-pipeline-num-layers", 2258},
    {"--decoder-last-pipeline-num-layers", 2262}, {"--num-virtual-stages-per-pipeline-rank", 2279},
    {"--overlap-grad-reduce", 2295}, {"--overlap-param-gather", 2319}, {"--account-for-embedding-in-pipeline-split", 2342},
    {"--account-for-loss-in-pipeline-split", 2345}, {"--use-distributed-optimizer", 2348}, {"--use-custom-fsdp", 2356},
    {"--data-parallel-sharding-strategy", 2359}, {"--context-parallel-size", 2384}, {"--cp-comm-type", 2386},
    {"--vocab-size", 2438}, {"--tokenizer-type", 2447}, {"--tokenizer-model", 2462}, {"--data-path", 2476},
    {"--seq-length", 2517}, {"--qk-layernorm", 2690}, {"--expert-model-parallel-size", 2700},
    {"--expert-tensor-parallel-size", 2702}, {"--num-experts", 2704}, {"--moe-ffn-hidden-size", 2714},
    {"--moe-shared-expert-intermediate-size", 2717}, {"--moe-grouped-gemm", 2725}, {"--moe-router-topk", 2753},
    {"--moe-token-dispatcher-type", 2790}, {"--moe-expert-capacity-factor", 2801},
    {"--moe-pad-expert-input-to-capacity", 2803}, {"--use-precision-aware-optimizer", 2932},
    {"--exp-avg-dtype", 2940}, {"--exp-avg-sq-dtype", 2945}, {"--fp8-format", 1179},
    {"--fp8-recipe", 1184},
};

int argument_line(const std::string& flag) {
  for (const FlagLine& f : kArgumentLines)
    if (flag == f.flag) return f.line;
  return 0;
}

// ---------------------------------------------------------------- export

struct Arg {
  std::string flag;
  std::vector<std::string> values;
  std::string meaning;  // what it sets, in llmplan's terms
};

struct ArgGroup {
  const char* var;    // the bash array
  std::string title;  // its comment
  std::vector<Arg> args;
  std::vector<std::string> comments;  // comment-only lines after the arguments
};

std::string render_group(const ArgGroup& g) {
  std::string s = "# " + g.title + "\n" + g.var + "=(\n";
  for (const Arg& a : g.args) {
    std::string line = "    " + a.flag;
    // Appended in two steps: GCC 12's -Wrestrict misfires on `" " + std::string&&` at -O3.
    for (const std::string& v : a.values) {
      line += ' ';
      line += shell::quote(v);
    }
    if (line.size() < 56) line.resize(56, ' ');
    const int at = argument_line(a.flag);
    line += "  # " + a.meaning + " (arguments.py L" + n(at) + ")";
    s += line + "\n";
  }
  for (const std::string& c : g.comments) s += "    # " + c + "\n";
  return s + ")\n\n";
}

}  // namespace

Result<ExportResult> export_megatron(const PlanFile& f, const ExportOptions& opt) {
  const ModelSpec& m = f.model;
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  const std::string to = "--to megatron";
  if (j.mode == TrainMode::lora)
    return Status::bad_input(to + ": job.mode: " + std::string(to_string(job_mode(j))) +
                             ": Megatron-LM core_v0.13.0 has no LoRA or QLoRA (pretrain_gpt.py trains every weight; "
                             "arguments.py has no adapter option); NeMo 2 adds LoRA on Megatron-Core, --to nemo");
  if (j.frozen_layer_count(m.layers) > 0)
    return Status::bad_input(to + ": job.frozen_layers: " + n(j.frozen_layer_count(m.layers)) +
                             " frozen layers: Megatron-LM core_v0.13.0 pretrain_gpt.py has no option to freeze layers "
                             "(arguments.py has none)");
  if (p.activation_offload_layers > 0)
    return Status::bad_input(to + ": plan.activation_offload_layers: " + n(p.activation_offload_layers) +
                             ": Megatron-LM core_v0.13.0 has no command-line flag for activation offload (Megatron-Core's "
                             "TransformerConfig.cpu_offloading_num_layers, model_parallel_config.py L324, is not an argument in "
                             "arguments.py; later versions add --cpu-offloading-num-layers); NeMo sets it as "
                             "model.config.cpu_offloading_num_layers, --to nemo");
  if (Status st = refuse_for_megatron_core(f, to); !st) return st;

  const bool llama = m.family == Family::llama;
  const bool fsdp = p.zero >= 2;
  std::vector<ArgGroup> groups;

  ArgGroup model{"MODEL_ARGS", "Model shape: Megatron-Core GPTModel (llmplan model " + m.name + ")", {}, {}};
  auto add = [](ArgGroup* g, std::string flag, std::vector<std::string> values, std::string meaning) {
    g->args.push_back({std::move(flag), std::move(values), std::move(meaning)});
  };
  add(&model, "--num-layers", {n(m.layers)}, "transformer layers, model.layers");
  add(&model, "--hidden-size", {n(m.hidden)}, "model width, model.hidden");
  add(&model, "--ffn-hidden-size", {n(m.ffn_hidden)}, "MLP inner width, model.ffn_hidden");
  add(&model, "--num-attention-heads", {n(m.heads)}, "attention heads, model.heads");
  if (m.kv_heads != m.heads) {
    add(&model, "--group-query-attention", {}, "grouped-query attention");
    add(&model, "--num-query-groups", {n(m.kv_heads)}, "key/value heads, model.kv_heads");
  }
  if (m.hidden % m.heads != 0 || m.head_width() != m.hidden / m.heads)
    add(&model, "--kv-channels", {n(m.head_width())}, "per-head width, not hidden/heads, model.head_dim");
  add(&model, "--seq-length", {n(j.seq_len)}, "tokens per sequence, job.seq_len");
  add(&model, "--max-position-embeddings", {n(m.max_positions)}, "context the model is built for, model.max_positions");
  add(&model, "--vocab-size", {n(m.vocab)}, "vocabulary, model.vocab; a HuggingFaceTokenizer brings its own");
  if (llama) {
    add(&model, "--swiglu", {}, "gated SiLU MLP, Llama family");
    add(&model, "--normalization", {"RMSNorm"}, "RMSNorm, Llama family");
    add(&model, "--position-embedding-type", {"rope"}, "rotary positions, Llama family");
    add(&model, "--disable-bias-linear", {}, "no linear biases, Llama family");
    if (m.attention_bias == AttentionBias::qkv) add(&model, "--add-qkv-bias", {}, "biases on q, k, v only, model.attention_bias qkv");
    if (m.qk_norm) add(&model, "--qk-layernorm", {}, "per-head norm of q and k, model.qk_norm");
  } else {
    add(&model, "--normalization", {"LayerNorm"}, "LayerNorm, GPT family");
    add(&model, "--position-embedding-type", {"learned_absolute"}, "learned positions, GPT family");
  }
  if (!m.tied_embeddings) add(&model, "--untie-embeddings-and-output-weights", {}, "LM head apart from the embedding, model.tied_embeddings false");
  const std::string dropout = m.dropout ? "0.1" : "0";
  add(&model, "--hidden-dropout", {dropout}, m.dropout ? "dropout, model.dropout" : "no dropout, model.dropout false");
  add(&model, "--attention-dropout", {dropout}, m.dropout ? "dropout, model.dropout" : "no dropout, model.dropout false");
  if (m.moe.enabled()) {
    add(&model, "--num-experts", {n(m.moe.experts)}, "routed experts per layer, model.moe.experts");
    add(&model, "--moe-router-topk", {n(m.moe.experts_per_token)}, "experts per token, model.moe.experts_per_token");
    add(&model, "--moe-ffn-hidden-size", {n(m.moe.expert_ffn_hidden)}, "one expert's inner width, model.moe.expert_ffn_hidden");
    if (m.moe.shared_experts > 0)
      add(&model, "--moe-shared-expert-intermediate-size", {n(m.ffn_hidden * m.moe.shared_experts)},
          "shared experts' total width: ffn_hidden x model.moe.shared_experts");
    if (m.moe.capacity_factor != 1.0) {
      add(&model, "--moe-expert-capacity-factor", {number_text(m.moe.capacity_factor)}, "expert capacity, model.moe.capacity_factor");
      add(&model, "--moe-pad-expert-input-to-capacity", {}, "buffers padded to capacity, as llmplan costs them");
    }
    add(&model, "--moe-grouped-gemm", {}, "one grouped GEMM for a rank's experts");
    add(&model, "--moe-token-dispatcher-type", {"alltoall"}, "tokens to experts by all-to-all over the EP group");
    add(&model, "--expert-tensor-parallel-size", {"1"}, "experts whole on each EP rank, as llmplan costs them, default: = TP");
  }
  groups.push_back(std::move(model));

  ArgGroup par{"PARALLEL_ARGS",
               "Parallel layout: dp " + n(p.dp) + " x tp " + n(p.tp) + " x pp " + n(p.pp) + " x cp " + n(p.cp) + " = " + n(f.gpus) +
                   " GPUs (Megatron derives dp = world / (tp*pp*cp), arguments.py L376-390)",
               {},
               {}};
  add(&par, "--tensor-model-parallel-size", {n(p.tp)}, "tensor parallel, plan.tp");
  add(&par, "--pipeline-model-parallel-size", {n(p.pp)}, "pipeline stages, plan.pp");
  // The split: Megatron's embedding/loss accounting, else its first/last stage sizes when they
  // say it, else a layout (which carries the virtual stages itself: arguments.py L496-507
  // allows one of it and --num-virtual-stages-per-pipeline-rank).
  int first = 0, last = 0;
  const bool as_first_last = p.pp > 1 && p.pipeline_split != PipelineSplit::account_embedding_loss && split_as_first_last(m.layers, p, &first, &last);
  const bool as_layout = p.pp > 1 && p.pipeline_split != PipelineSplit::account_embedding_loss && !as_first_last;
  if (p.vpp > 1 && !as_layout) add(&par, "--num-virtual-stages-per-pipeline-rank", {n(p.vpp)}, "virtual stages per rank: interleaved 1F1B, plan.vpp");
  if (p.pp > 1 && p.pipeline_split == PipelineSplit::account_embedding_loss) {
    add(&par, "--account-for-embedding-in-pipeline-split", {}, "the embedding counts as a layer, plan.pipeline_split");
    add(&par, "--account-for-loss-in-pipeline-split", {}, "the loss counts as a layer, plan.pipeline_split");
  } else if (as_first_last) {
    if (first > 0) add(&par, "--decoder-first-pipeline-num-layers", {n(first)}, "the first stage's layers, plan.pipeline_split " + std::string(to_string(p.pipeline_split)));
    if (last > 0) add(&par, "--decoder-last-pipeline-num-layers", {n(last)}, "the last stage's layers, plan.pipeline_split " + std::string(to_string(p.pipeline_split)));
  } else if (as_layout) {
    add(&par, "--pipeline-model-parallel-layout", {pipeline_layout_text(m, p)},
        "each virtual stage's layers (pp " + n(p.pp) + " x vpp " + n(p.vpp) + "), plan.pipeline_split " + to_string(p.pipeline_split));
  }
  add(&par, "--context-parallel-size", {n(p.cp)}, "context parallel, plan.cp");
  if (p.cp > 1)
    add(&par, "--cp-comm-type", {p.cp_exchange == CpExchange::ring ? "p2p" : "all_gather"},
        p.cp_exchange == CpExchange::ring ? "K/V ring, plan.cp_exchange ring"
                                          : "K/V all-gathered (plan.cp_exchange all_gather; the value TE reads, "
                                            "transformer_config.py L526)");
  if (p.ep > 1) add(&par, "--expert-model-parallel-size", {n(p.ep)}, "expert parallel, plan.ep");
  if (p.sp) add(&par, "--sequence-parallel", {}, "sequence parallel, plan.sp");
  groups.push_back(std::move(par));

  ArgGroup dp{"DATA_PARALLEL_ARGS",
              "Data parallel: ZeRO-" + n(p.zero) +
                  (p.zero >= 2 ? " as Megatron-FSDP" : p.zero == 1 ? " as the distributed optimizer" : " as plain DDP"),
              {},
              {}};
  if (p.zero == 0) {
    add(&dp, "--overlap-grad-reduce", {}, "ZeRO-0: plain DDP, gradients all-reduced during backward");
  } else if (p.zero == 1) {
    add(&dp, "--use-distributed-optimizer", {}, "ZeRO-1: optimizer state sharded over dp, plan.zero 1");
    add(&dp, "--overlap-grad-reduce", {}, "gradient reduce-scatter during backward");
    add(&dp, "--overlap-param-gather", {}, "parameter all-gather during forward");
  } else {
    add(&dp, "--use-custom-fsdp", {}, "Megatron-FSDP (plan.zero " + n(p.zero) + ")");
    add(&dp, "--use-distributed-optimizer", {}, "required by Megatron-FSDP, L646-648");
    add(&dp, "--data-parallel-sharding-strategy", {p.zero == 2 ? "optim_grads" : "optim_grads_params"},
        p.zero == 2 ? "ZeRO-2: optimizer state and gradients sharded" : "ZeRO-3: optimizer state, gradients and weights sharded");
    add(&dp, "--no-gradient-accumulation-fusion", {}, "Megatron-FSDP sharding needs it off, L650-653");
    add(&dp, "--overlap-grad-reduce", {}, "gradient reduce-scatter during backward");
    if (p.zero == 3) add(&dp, "--overlap-param-gather", {}, "parameter all-gather during forward");
  }
  if (p.offload_optimizer) {
    add(&dp, "--optimizer-cpu-offload", {}, "optimizer state and master weights in host memory, plan.offload_optimizer");
    add(&dp, "--use-precision-aware-optimizer", {}, "required by --optimizer-cpu-offload, L1049-1053");
    add(&dp, "--optimizer-offload-fraction", {"1.0"}, "all of it offloaded, as llmplan costs it");
  }
  if (j.moments == MomentsDtype::bf16) {
    if (!p.offload_optimizer)
      add(&dp, "--use-precision-aware-optimizer", {}, "Transformer Engine's FusedAdam with its own state dtypes (job.moments bf16)");
    add(&dp, "--exp-avg-dtype", {"bf16"}, "first moment in bf16, job.moments");
    add(&dp, "--exp-avg-sq-dtype", {"bf16"}, "second moment in bf16, job.moments");
  }
  add(&dp, "--optimizer", {j.optimizer == Optimizer::adamw ? "adam" : "sgd"},
      j.optimizer == Optimizer::adamw ? "AdamW: Megatron's adam decouples weight decay, job.optimizer adamw"
                                      : "SGD with momentum, job.optimizer sgd");
  groups.push_back(std::move(dp));

  ArgGroup rc{"RECOMPUTE_ARGS", "Activation recompute", {}, {}};
  switch (p.recompute) {
    case Recompute::none: rc.comments.push_back("no recompute (plan.recompute none): every activation kept"); break;
    case Recompute::selective:
      add(&rc, "--recompute-granularity", {"selective"}, "attention core recomputed, plan.recompute selective");
      break;
    case Recompute::full:
      add(&rc, "--recompute-granularity", {"full"}, "whole layers recomputed, plan.recompute full");
      add(&rc, "--recompute-method", {"uniform"}, "every layer's input kept");
      add(&rc, "--recompute-num-layers", {"1"}, "one layer per recompute unit");
      break;
    case Recompute::full_k:
      add(&rc, "--recompute-granularity", {"full"}, "whole layers recomputed, plan.recompute full_k");
      add(&rc, "--recompute-method", {"block"}, "the first k layers of each stage, virtual stage under interleaving");
      add(&rc, "--recompute-num-layers", {n(p.recompute_layers)}, "k, plan.recompute_layers");
      break;
  }
  groups.push_back(std::move(rc));

  ArgGroup tr{"TRAINING_ARGS", "Batch, precision, attention", {}, {}};
  add(&tr, "--micro-batch-size", {n(p.micro_batch)}, "sequences per micro-batch per dp rank, plan.micro_batch");
  add(&tr, "--global-batch-size", {n(j.global_batch)},
      "sequences per step (job.global_batch): " + n(p.grad_accum) + " micro-batches per step");
  add(&tr, "--train-iters", {n(opt.train_steps)}, "training steps, not the plan's: --train-steps");
  if (j.mode == TrainMode::finetune) add(&tr, "--finetune", {}, "fine-tuning: weights from --load, no optimizer state, job.mode");
  if (j.precision == Precision::bf16 && j.grads == GradConvention::deepspeed) {
    add(&tr, "--bf16", {}, "bf16 mixed precision, fp32 main weights, job.precision");
    add(&tr, "--grad-reduce-in-bf16", {}, "bf16 main-gradient buffers (job.grads deepspeed: 16 B/param with Adam; arguments.py L683-684)");
  } else if (j.precision == Precision::bf16) {
    add(&tr, "--bf16", {}, "bf16 mixed precision, fp32 main weights and gradients, job.precision");
  } else if (j.precision == Precision::fp16) {
    add(&tr, "--fp16", {}, "fp16 mixed precision (job.precision); dynamic loss scaling, no --loss-scale");
    add(&tr, "--initial-loss-scale", {"65536"}, "dynamic scale starting at 2^16, Megatron's default 2^32 spends steps halving");
  } else {
    tr.comments.push_back("precision fp32 (job.precision): neither --bf16 nor --fp16, Megatron's default, arguments.py L663");
  }
  if (j.fp8_linear()) {
    add(&tr, "--fp8-format", {"hybrid"}, "FP8 GEMMs in the linear layers: E4M3 forward, E5M2 gradients");
    add(&tr, "--fp8-recipe", {to_string(j.fp8)}, "the scaling recipe, job.fp8");
  }
  add(&tr, "--attention-backend", {p.flash_attention ? "flash" : "unfused"},
      p.flash_attention ? "fused attention, no s*s scores kept, plan.flash_attention" : "unfused attention, plan.flash_attention false");
  groups.push_back(std::move(tr));

  ArgGroup data{"DATA_ARGS", "Data and tokenizer, placeholders unless given to llmplan export", {}, {}};
  add(&data, "--data-path", {opt.data_path}, "tokenized dataset prefix");
  add(&data, "--tokenizer-type", {"HuggingFaceTokenizer"}, "tokenizer from a Hugging Face folder or hub id");
  add(&data, "--tokenizer-model", {opt.tokenizer}, "the tokenizer");
  groups.push_back(std::move(data));

  const std::string entry = opt.entry_point.empty() ? "pretrain_gpt.py" : opt.entry_point;
  const int gpn = f.cluster.gpus_per_node, nodes = f.cluster.nodes;
  std::string s;
  s += "#!/bin/bash\n";
  s += "# Megatron-LM launch written by llmplan export from a plan: " + m.name + " on " + n(f.gpus) + " x " + f.cluster.gpu.name +
       " (" + n(nodes) + " node" + (nodes > 1 ? "s" : "") + " x " + n(gpn) + " GPUs).\n";
  s += "# Arguments of Megatron-LM core_v0.13.0 pretrain_gpt.py; each line names the line of\n";
  s += "# megatron/training/arguments.py that defines it. Run from the Megatron-LM checkout:\n";
  s += "#   on each node:  NODE_RANK=<0.." + n(nodes - 1) + "> MASTER_ADDR=<node 0's address> bash launch.sh\n";
  s += "#   under Slurm:   sbatch launch.sh   (srun starts one torchrun per node)\n";
  s += "#SBATCH --nodes=" + n(nodes) + "\n";
  s += "#SBATCH --ntasks-per-node=1\n";
  s += "#SBATCH --gpus-per-node=" + n(gpn) + "\n";
  s += "#SBATCH --exclusive\n";
  s += "set -eo pipefail\n\n";
  if (fsdp) {
    s += "# Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is not 1 (arguments.py L659-660): leave it unset.\n\n";
  } else {
    s += "# One CUDA stream connection keeps tensor/sequence-parallel communication in issue order.\n";
    s += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n";
  }
  s += "GPUS_PER_NODE=" + n(gpn) + "\n";
  s += "NUM_NODES=" + n(nodes) + "\n";
  s += "NODE_RANK=${NODE_RANK:-0}\n";
  s += "MASTER_ADDR=${MASTER_ADDR:-localhost}\n";
  s += "MASTER_PORT=6000\n\n";
  for (const ArgGroup& g : groups) s += render_group(g);
  s += "ARGS=(";
  for (size_t i = 0; i < groups.size(); ++i) s += std::string(i ? " " : "") + "\"${" + groups[i].var + "[@]}\"";
  s += ")\n\n";
  s += "if [[ -n \"${SLURM_JOB_ID:-}\" ]]; then\n";
  s += "    # Under sbatch: one torchrun per node, meeting at the first node (c10d rendezvous).\n";
  s += "    MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n";
  s += "    srun --nodes \"$NUM_NODES\" --ntasks-per-node 1 \\\n";
  s += "        torchrun --nproc-per-node \"$GPUS_PER_NODE\" --nnodes \"$NUM_NODES\" \\\n";
  s += "        --rdzv-id \"$SLURM_JOB_ID\" --rdzv-backend c10d --rdzv-endpoint \"$MASTER_ADDR:$MASTER_PORT\" \\\n";
  s += "        " + shell::quote(entry) + " \"${ARGS[@]}\"\n";
  s += "else\n";
  s += "    torchrun --nproc-per-node \"$GPUS_PER_NODE\" --nnodes \"$NUM_NODES\" --node-rank \"$NODE_RANK\" \\\n";
  s += "        --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\" \\\n";
  s += "        " + shell::quote(entry) + " \"${ARGS[@]}\"\n";
  s += "fi\n";

  ExportResult r;
  r.files.push_back({"launch.sh", s, true});
  const ExportOptions defaults;
  if (opt.data_path == defaults.data_path || opt.tokenizer == defaults.tokenizer)
    r.notes.push_back("launch.sh: --data-path and --tokenizer-model are placeholders: replace them (or give --data-path and "
                      "--tokenizer to llmplan export)");
  r.notes.push_back("launch.sh: learning rate and schedule, weight decay, --rotary-base (Llama 3: 500000), --norm-epsilon, "
                    "checkpointing (--save/--load) are not in the plan: Megatron's defaults apply until you add them");
  if (j.precision == Precision::fp16 && j.grads == GradConvention::deepspeed)
    r.notes.push_back("Megatron keeps fp32 main gradients under fp16 (job.grads megatron); the plan was costed with 16-bit "
                      "gradients: `llmplan import` of launch.sh costs the run as Megatron runs it");
  if (fsdp)
    r.notes.push_back("ZeRO-" + n(p.zero) + " is Megatron-FSDP: --use-custom-fsdp at core_v0.13.0, renamed --use-megatron-fsdp by "
                      "core_v0.19.0");
  if (m.moe.enabled() && p.tp > 1)
    r.notes.push_back("--expert-tensor-parallel-size 1: the experts are not split by tp, as llmplan costs them (Megatron's "
                      "default would split them like the dense layers)");
  return r;
}

// ---------------------------------------------------------------- import

namespace {

// The flags of one command line: `--flag v1 v2 ...` (values: the words up to the next
// word starting with "--") or `--flag=value`; argparse keeps the last of a repeated flag.
class Flags {
 public:
  Flags(const std::string& origin, std::vector<std::string>* notes) : origin_(origin), notes_(notes) {}

  void add(const std::string& flag, std::vector<std::string> values) {
    auto it = values_.find(flag);
    if (it == values_.end()) {
      order_.push_back(flag);
    } else if (it->second != values) {
      notes_->push_back(flag + " is given twice; argparse keeps the last (" + join(values) + ")");
    }
    values_[flag] = std::move(values);
  }
  void stray(const std::string& word) { strays_.push_back(word); }

  bool has(const std::string& f) {
    used_.insert(f);
    return values_.count(f) > 0;
  }
  // A store_true flag: present, with no value.
  Result<bool> on(const std::string& f) {
    if (!has(f)) return false;
    const std::vector<std::string>& v = values_.at(f);
    if (!v.empty()) return Status::bad_input(origin_ + ": " + f + ": takes no value, got '" + join(v) + "'");
    return true;
  }
  Result<std::string> text(const std::string& f, const std::string& fallback) {
    if (!has(f)) return fallback;
    const std::vector<std::string>& v = values_.at(f);
    if (v.size() != 1) return Status::bad_input(origin_ + ": " + f + ": expected one value, got " + (v.empty() ? std::string("none") : std::string("'").append(join(v)).append("'")));
    return v[0];
  }
  Result<std::string> choice(const std::string& f, const std::string& fallback, std::initializer_list<const char*> allowed) {
    if (!has(f)) return fallback;
    Result<std::string> v = text(f, fallback);
    if (!v) return v;
    std::string list;
    for (const char* a : allowed) {
      if (*v == a) return v;
      list += std::string(list.empty() ? "" : ", ") + a;
    }
    return Status::bad_input(origin_ + ": " + f + ": expected one of " + list + ", got '" + *v + "'");
  }
  Result<int64_t> integer(const std::string& f, int64_t fallback, int64_t lo, int64_t hi) {
    if (!has(f)) return fallback;
    Result<std::string> v = text(f, "");
    if (!v) return v.status();
    int64_t x = 0;
    const char* b = v->data();
    const char* e = b + v->size();
    auto [ptr, ec] = std::from_chars(b, e, x);
    if (ec != std::errc() || ptr != e || x < lo || x > hi)
      return Status::bad_input(origin_ + ": " + f + ": expected an integer in [" + n(lo) + ", " + n(hi) + "], got '" + *v + "'" +
                               (v->find('$') != std::string::npos ? " (a variable the script does not set)" : ""));
    return x;
  }
  Result<double> real(const std::string& f, double fallback, double lo, double hi) {
    if (!has(f)) return fallback;
    Result<std::string> v = text(f, "");
    if (!v) return v.status();
    char* end = nullptr;
    const double x = std::strtod(v->c_str(), &end);
    if (v->empty() || end != v->c_str() + v->size() || !(x >= lo && x <= hi))
      return Status::bad_input(origin_ + ": " + f + ": expected a number in [" + number_text(lo) + ", " + number_text(hi) +
                               "], got '" + *v + "'");
    return x;
  }
  const std::vector<std::string>& values(const std::string& f) {
    used_.insert(f);
    static const std::vector<std::string> kNone;
    auto it = values_.find(f);
    return it == values_.end() ? kNone : it->second;
  }
  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const std::string& f : order_)
      if (!used_.count(f)) out.push_back(f);
    for (const std::string& w : strays_) out.push_back(w);
    return out;
  }
  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& w : v) s += (s.empty() ? "" : " ") + w;
    return s;
  }

 private:
  std::string origin_;
  std::vector<std::string>* notes_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> order_;
  std::vector<std::string> strays_;
  std::set<std::string> used_;
};

// Flags llmplan reads without a plan field: what its own export writes beside the plan
// (data, tokenizer, training length, overlap and dispatcher settings the time model assumes).
constexpr const char* kLaunchSettings[] = {
    "--train-iters",         "--data-path",        "--tokenizer-type",
    "--tokenizer-model",     "--overlap-grad-reduce", "--overlap-param-gather",
    "--moe-grouped-gemm",    "--moe-token-dispatcher-type", "--no-gradient-accumulation-fusion",
    "--initial-loss-scale",  "--moe-pad-expert-input-to-capacity", "--vocab-file", "--merge-file",
};

// torchrun's and srun's options that size the run.
struct Launcher {
  int nproc = 0, nnodes = 0;  // 0: not given
  std::string described;      // "torchrun --nproc-per-node 8 --nnodes 2"
};

bool launcher_word(const std::string& w) {
  const std::string base = std::filesystem::path(w).filename().string();
  return base == "torchrun" || base == "python" || base == "python3" || base == "srun" || base == "deepspeed" || base == "mpirun";
}
bool entry_word(const std::string& w) { return w.size() > 3 && w.compare(w.size() - 3, 3, ".py") == 0; }

Status read_launcher(const std::vector<std::string>& words, const std::string& origin, Launcher* l, std::vector<std::string>* notes) {
  auto value_of = [&](size_t i, std::string* name, std::string* value) {
    const std::string& w = words[i];
    const size_t eq = w.find('=');
    if (eq != std::string::npos) {
      *name = w.substr(0, eq);
      *value = w.substr(eq + 1);
      return false;  // no separate value word
    }
    *name = w;
    *value = i + 1 < words.size() ? words[i + 1] : "";
    return true;
  };
  auto count = [&](const std::string& flag, const std::string& v, int* out) -> Status {
    std::string s = v;
    const size_t colon = s.find(':');
    if (colon != std::string::npos) {  // torchrun's elastic --nnodes MIN:MAX
      if (s.substr(0, colon) != s.substr(colon + 1))
        return Status::bad_input(origin + ": " + flag + " " + v + ": an elastic range; llmplan needs a fixed node count");
      s = s.substr(0, colon);
    }
    int x = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (ec != std::errc() || ptr != s.data() + s.size() || x < 1 || x > (1 << 20)) {
      if (flag.find("nproc") != std::string::npos && (s == "gpu" || s == "auto")) {
        notes->push_back(flag + " " + s + ": one process per GPU of the node");
        return Status::ok();
      }
      return Status::bad_input(origin + ": " + flag + ": expected a positive integer, got '" + v + "'" +
                               (v.find('$') != std::string::npos ? " (a variable the script does not set)" : ""));
    }
    *out = x;
    return Status::ok();
  };
  const bool srun = !words.empty() && std::filesystem::path(words[0]).filename() == "srun";
  int srun_nodes = 0, srun_tasks = 0;
  bool torchrun_seen = false;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string base = std::filesystem::path(words[i]).filename().string();
    if (base == "torchrun" || words[i] == "torch.distributed.run" || words[i] == "torch.distributed.launch") torchrun_seen = true;
    std::string name, value;
    const bool separate = value_of(i, &name, &value);
    Status st;
    if (name == "--nproc-per-node" || name == "--nproc_per_node") {
      st = count(name, value, &l->nproc);
    } else if (name == "--nnodes") {
      st = count(name, value, &l->nnodes);
    } else if (srun && !torchrun_seen && (name == "--nodes" || name == "-N")) {
      st = count(name, value, &srun_nodes);
    } else if (srun && !torchrun_seen && name == "--ntasks-per-node") {
      st = count(name, value, &srun_tasks);
    } else {
      continue;
    }
    if (!st) return st;
    l->described += (l->described.empty() ? "" : " ") + name + " " + value;
    if (separate) ++i;
  }
  if (!torchrun_seen && srun) {  // srun starting the training processes itself
    l->nproc = srun_tasks;
    l->nnodes = srun_nodes;
  }
  return Status::ok();
}

// The file of `files` holding Megatron arguments: a script naming an entry point or
// carrying the parallel-size flags; else the only file.
const LaunchFile* megatron_file(const std::vector<LaunchFile>& files) {
  for (const LaunchFile& f : files)
    if (f.text.find("--tensor-model-parallel-size") != std::string::npos || f.text.find("--num-layers") != std::string::npos)
      return &f;
  return files.size() == 1 ? &files[0] : nullptr;
}

}  // namespace

Result<ImportedConfig> import_megatron(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin_in) {
  const LaunchFile* file = megatron_file(files);
  if (file == nullptr)
    return Status::bad_input(origin_in + ": no Megatron-LM arguments (expected a launch script or argument list with "
                             "--num-layers / --tensor-model-parallel-size)");
  const std::string origin = files.size() > 1 ? origin_in + "/" + file->name : origin_in;
  Result<shell::Script> script = shell::read_shell_script(file->text, origin);
  if (!script) return script.status();

  ImportedConfig out;
  std::vector<std::string>& notes = out.notes;
  for (const std::string& s : script->notes) notes.push_back(s);

  // The launch command: a launcher (torchrun, python, srun, ...) running a .py entry point.
  const shell::Command* launch = nullptr;
  for (const shell::Command& c : script->commands) {
    if (c.words.empty() || !(launcher_word(c.words[0]) || entry_word(c.words[0]))) continue;
    if (std::none_of(c.words.begin(), c.words.end(), entry_word)) continue;
    if (launch == nullptr || (!launch->undecided.empty() && c.undecided.empty())) launch = &c;
  }
  std::vector<std::string> args, launcher_words;
  if (launch != nullptr) {
    const auto entry = std::find_if(launch->words.begin(), launch->words.end(), entry_word);
    launcher_words.assign(launch->words.begin(), entry);
    args.assign(entry + 1, launch->words.end());
    if (!launch->undecided.empty())
      notes.push_back(origin + ": line " + n(launch->line) + ": the launch line is reached only if " + launch->undecided +
                      " holds, which cannot be decided without running the script");
  } else {
    // An argument list: every array's elements, then every command that starts with a flag.
    for (const std::string& a : script->array_order)
      for (const std::string& w : script->arrays.at(a)) {
        const std::vector<std::string> split = shell::split_blanks(w);
        args.insert(args.end(), split.begin(), split.end());
      }
    for (const shell::Command& c : script->commands)
      if (!c.words.empty() && c.words[0].rfind("--", 0) == 0) args.insert(args.end(), c.words.begin(), c.words.end());
    launcher_words = args;  // torchrun's options may sit in an array of their own
  }
  if (args.empty()) return Status::bad_input(origin + ": no Megatron-LM arguments found (expected pretrain_gpt.py's --flags)");

  Launcher launcher;
  if (Status st = read_launcher(launcher_words, origin, &launcher, &notes); !st) return st;

  Flags fl(origin, &notes);
  std::set<std::string> unset_vars;
  for (const std::string& w : args) {
    for (size_t at = w.find('$'); at != std::string::npos; at = w.find('$', at + 1)) {
      size_t e = at + 1;
      if (e < w.size() && w[e] == '{') {
        const size_t close = w.find('}', e);
        e = close == std::string::npos ? w.size() : close + 1;
      } else {
        while (e < w.size() && (std::isalnum(static_cast<unsigned char>(w[e])) || w[e] == '_')) ++e;
      }
      if (e > at + 1) unset_vars.insert(w.substr(at, e - at));
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& w = args[i];
    if (w.rfind("--", 0) != 0 || w.size() == 2) {
      fl.stray(w);
      continue;
    }
    const size_t eq = w.find('=');
    if (eq != std::string::npos) {
      fl.add(w.substr(0, eq), {w.substr(eq + 1)});
      continue;
    }
    std::vector<std::string> values;
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) values.push_back(args[++i]);
    fl.add(w, std::move(values));
  }
  for (const std::string& v : unset_vars)
    notes.push_back(v + ": not set in the script (the environment or a script argument): left as written");
  if (launch == nullptr)  // torchrun options among the arguments are the launcher's
    for (const char* f : {"--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank", "--master-addr",
                          "--master_addr", "--master-port", "--master_port"})
      fl.has(f);

  // A macro for the Result plumbing: every read can fail with a message naming the flag.
#define LLMPLAN_TRY(var, expr)          \
  auto var##_r = (expr);                \
  if (!var##_r) return var##_r.status(); \
  const auto var = *var##_r

  // ---- model (validate_args L744-790, core_transformer_config_from_args L1130-1160)
  ModelSpec m;
  for (const char* req : {"--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--micro-batch-size"})
    if (!fl.has(req))
      return Status::bad_input(origin + ": " + req + ": missing (Megatron-LM requires it: arguments.py L486, L753-754, L783)");
  LLMPLAN_TRY(layers, fl.integer("--num-layers", 0, 1, 10000));
  LLMPLAN_TRY(hidden, fl.integer("--hidden-size", 0, 1, 1 << 20));
  LLMPLAN_TRY(heads, fl.integer("--num-attention-heads", 0, 1, 1 << 16));
  LLMPLAN_TRY(gqa, fl.on("--group-query-attention"));
  LLMPLAN_TRY(groups, fl.integer("--num-query-groups", 1, 1, 1 << 16));
  if (!gqa && fl.has("--num-query-groups") && groups != heads)
    notes.push_back("--num-query-groups " + n(groups) + " without --group-query-attention: Megatron ignores it (multi-head attention)");
  const int64_t kv = gqa ? groups : heads;
  if (kv > heads || heads % kv != 0)
    return Status::bad_input(origin + ": --num-query-groups: expected a divisor of --num-attention-heads (" + n(heads) + "), got " + n(kv));
  LLMPLAN_TRY(kv_channels, fl.integer("--kv-channels", 0, 1, 1 << 20));
  if (kv_channels == 0 && hidden % heads != 0)
    return Status::bad_input(origin + ": --kv-channels: missing, and --hidden-size " + n(hidden) + " is not a multiple of "
                             "--num-attention-heads " + n(heads) + " (arguments.py L771-773)");
  LLMPLAN_TRY(swiglu, fl.on("--swiglu"));
  LLMPLAN_TRY(squared_relu, fl.on("--squared-relu"));
  if (swiglu && squared_relu)
    return Status::bad_input(origin + ": --swiglu and --squared-relu: two activations for one MLP (arguments.py L1144-1145)");
  int64_t ffn_default = swiglu ? static_cast<int64_t>(4.0 * hidden * 2.0 / 3.0 / 64.0) * 64 : 4 * hidden;
  LLMPLAN_TRY(ffn, fl.integer("--ffn-hidden-size", ffn_default, 1, 16 << 20));
  if (!fl.has("--ffn-hidden-size")) notes.push_back("--ffn-hidden-size: Megatron's default " + n(ffn) + " (arguments.py L760-769)");
  LLMPLAN_TRY(max_pos, fl.integer("--max-position-embeddings", 0, 1, 1 << 24));
  if (!fl.has("--max-position-embeddings"))
    return Status::bad_input(origin + ": --max-position-embeddings: missing (Megatron-LM requires it: arguments.py L753-754)");
  LLMPLAN_TRY(seq, fl.integer("--seq-length", 0, 1, 1 << 24));
  if (max_pos < seq)
    return Status::bad_input(origin + ": --max-position-embeddings " + n(max_pos) + " is shorter than --seq-length " + n(seq) +
                             " (Megatron asserts max_position_embeddings >= seq_length, arguments.py L784-787)");
  LLMPLAN_TRY(norm, fl.choice("--normalization", "LayerNorm", {"LayerNorm", "RMSNorm"}));
  LLMPLAN_TRY(pos, fl.choice("--position-embedding-type", "learned_absolute", {"learned_absolute", "rope", "mrope", "relative", "none"}));
  LLMPLAN_TRY(no_bias, fl.on("--disable-bias-linear"));
  LLMPLAN_TRY(qkv_bias, fl.on("--add-qkv-bias"));
  LLMPLAN_TRY(untie, fl.on("--untie-embeddings-and-output-weights"));
  LLMPLAN_TRY(qk_norm, fl.on("--qk-layernorm"));
  LLMPLAN_TRY(hidden_dropout, fl.real("--hidden-dropout", 0.1, 0, 1));
  LLMPLAN_TRY(attention_dropout, fl.real("--attention-dropout", 0.1, 0, 1));
  m.layers = static_cast<int>(layers);
  m.hidden = hidden;
  m.heads = static_cast<int>(heads);
  m.kv_heads = static_cast<int>(kv);
  m.head_dim = kv_channels;
  m.ffn_hidden = ffn;
  m.max_positions = max_pos;
  m.tied_embeddings = !untie;
  m.dropout = hidden_dropout > 0 || attention_dropout > 0;
  if (swiglu) {
    m.family = Family::llama;
    m.attention_bias = !no_bias ? AttentionBias::all : qkv_bias ? AttentionBias::qkv : AttentionBias::none;
    m.qk_norm = qk_norm;
    if (!no_bias)
      notes.push_back("--swiglu without --disable-bias-linear: every linear layer has a bias; llmplan counts the attention "
                      "biases (model.attention_bias all), not the MLP's");
    if (norm != "RMSNorm")
      notes.push_back("--swiglu with --normalization " + norm + ": llmplan's Llama family uses RMSNorm (a LayerNorm adds a "
                      "hidden-sized bias per norm)");
    if (pos != "rope") notes.push_back("--swiglu with --position-embedding-type " + pos + ": llmplan's Llama family uses rotary positions");
  } else {
    m.family = Family::gpt;
    if (qk_norm) notes.push_back("--qk-layernorm on a GPT-family model: not in llmplan's GPT layer; ignored");
    if (no_bias) notes.push_back("--disable-bias-linear on a GPT-family model: llmplan's GPT layer has every bias");
    if (squared_relu) notes.push_back("--squared-relu: costed as GPT's GELU MLP (same shapes)");
    if (norm != "LayerNorm" || pos != "learned_absolute")
      notes.push_back("a non-gated MLP with --normalization " + norm + " and --position-embedding-type " + pos +
                      ": costed as llmplan's GPT family (LayerNorm, learned positions)");
  }
  // MoE (L941-944, moe arguments L2697-2803)
  LLMPLAN_TRY(experts, fl.integer("--num-experts", 0, 0, 100000));
  if (experts > 0) {
    LLMPLAN_TRY(topk, fl.integer("--moe-router-topk", 2, 1, 100000));
    LLMPLAN_TRY(expert_ffn, fl.integer("--moe-ffn-hidden-size", ffn, 1, 16 << 20));
    LLMPLAN_TRY(shared, fl.integer("--moe-shared-expert-intermediate-size", 0, 0, 1 << 30));
    LLMPLAN_TRY(capacity, fl.real("--moe-expert-capacity-factor", -1, -1e9, 100));
    if (topk > experts)
      return Status::bad_input(origin + ": --moe-router-topk: expected at most --num-experts (" + n(experts) + "), got " + n(topk));
    if (shared % ffn != 0)
      return Status::bad_input(origin + ": --moe-shared-expert-intermediate-size: expected a multiple of --ffn-hidden-size (" +
                               n(ffn) + ": llmplan's shared experts are ffn_hidden wide each), got " + n(shared));
    m.moe.experts = static_cast<int>(experts);
    m.moe.experts_per_token = static_cast<int>(topk);
    m.moe.expert_ffn_hidden = expert_ffn;
    m.moe.shared_experts = static_cast<int>(shared / ffn);
    m.moe.capacity_factor = capacity > 0 ? capacity : 1.0;
    if (capacity <= 0) notes.push_back("MoE without --moe-expert-capacity-factor routes dropless; costed with capacity factor 1.0");
  } else {
    for (const char* f : {"--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size"})
      if (fl.has(f)) notes.push_back(std::string(f) + " without --num-experts: a dense model, ignored");
  }
  // Vocabulary: --vocab-size, else what the tokenizer says.
  LLMPLAN_TRY(tokenizer, fl.text("--tokenizer-type", ""));
  LLMPLAN_TRY(vocab, fl.integer("--vocab-size", 0, 1, 100000000));
  m.vocab = vocab;
  if (m.vocab == 0) {
    if (tokenizer == "GPT2BPETokenizer" || (tokenizer.empty() && fl.has("--vocab-file") && fl.has("--merge-file"))) {
      m.vocab = 50257;
      notes.push_back("vocabulary: GPT-2's BPE (--vocab-file / --merge-file), 50257 tokens");
    } else if (!opt.model.empty()) {
      Result<ModelSpec> given = opt.presets->resolve_model(opt.model, "--model");
      if (!given) return given.status();
      m.vocab = given->vocab;
    } else {
      return Status::bad_input(origin + ": --vocab-size: missing, and the tokenizer (" + (tokenizer.empty() ? "none" : tokenizer) +
                               ") is a file llmplan does not read; give --vocab-size or --model");
    }
  }

  // ---- job
  TrainingJob j;
  j.seq_len = seq;
  LLMPLAN_TRY(bf16, fl.on("--bf16"));
  LLMPLAN_TRY(fp16, fl.on("--fp16"));
  if (bf16 && fp16)
    return Status::bad_input(origin + ": --bf16 and --fp16: two precisions (Megatron asserts one, arguments.py L665 and L675)");
  j.precision = bf16 ? Precision::bf16 : fp16 ? Precision::fp16 : Precision::fp32;
  j.amp = j.precision == Precision::fp32 ? AmpLevel::O0 : AmpLevel::O2;
  // Main gradients: fp32 buffers, or bf16 with --grad-reduce-in-bf16 (arguments.py L679-686).
  LLMPLAN_TRY(grad_bf16, fl.on("--grad-reduce-in-bf16"));
  j.grads = bf16 && grad_bf16 ? GradConvention::deepspeed : GradConvention::megatron;
  if (grad_bf16 && !bf16) notes.push_back("--grad-reduce-in-bf16 without --bf16: Megatron keeps fp32 main gradients");
  if (j.precision == Precision::fp32) notes.push_back("precision: fp32 (neither --bf16 nor --fp16)");
  LLMPLAN_TRY(optimizer, fl.choice("--optimizer", "adam", {"adam", "sgd"}));
  j.optimizer = optimizer == "adam" ? Optimizer::adamw : Optimizer::sgd_momentum;
  LLMPLAN_TRY(fp8_format, fl.text("--fp8-format", ""));
  LLMPLAN_TRY(fp8_recipe, fl.choice("--fp8-recipe", "delayed", kMegatronFp8Recipes));
  if (!fp8_format.empty()) {
    if (fp8_format != "hybrid" && fp8_format != "e4m3")
      return Status::bad_input(origin + ": --fp8-format: expected one of e4m3, hybrid, got '" + fp8_format + "'");
    parse_enum(fp8_recipe, &j.fp8);
    if (!fl.has("--fp8-recipe")) notes.push_back("--fp8-recipe: Megatron's default delayed (arguments.py L1184)");
  } else if (fl.has("--fp8-recipe")) {
    notes.push_back("--fp8-recipe without --fp8-format: FP8 is off (Megatron reads the recipe only with a format)");
  }
  LLMPLAN_TRY(finetune, fl.on("--finetune"));
  j.mode = finetune ? TrainMode::finetune : TrainMode::pretrain;

  // ---- plan
  ParallelPlan p;
  LLMPLAN_TRY(tp, fl.integer("--tensor-model-parallel-size", 1, 1, 1 << 20));
  LLMPLAN_TRY(pp, fl.integer("--pipeline-model-parallel-size", 1, 1, 1 << 20));
  LLMPLAN_TRY(cp, fl.integer("--context-parallel-size", 1, 1, 1 << 20));
  LLMPLAN_TRY(ep, fl.integer("--expert-model-parallel-size", 1, 1, 1 << 20));
  LLMPLAN_TRY(micro, fl.integer("--micro-batch-size", 1, 1, 100000000));
  p.tp = static_cast<int>(tp), p.pp = static_cast<int>(pp), p.cp = static_cast<int>(cp), p.ep = static_cast<int>(ep);
  p.micro_batch = static_cast<int>(micro);
  if (ep > 1 && m.moe.experts == 0)
    return Status::bad_input(origin + ": --expert-model-parallel-size " + n(ep) + " without --num-experts (arguments.py L952-953)");
  if (m.moe.enabled()) {
    LLMPLAN_TRY(etp, fl.integer("--expert-tensor-parallel-size", tp, 1, 1 << 20));
    if (etp != 1 && tp > 1)
      notes.push_back("expert tensor parallel " + n(etp) + (fl.has("--expert-tensor-parallel-size") ? "" : " (Megatron's default: = tp)") +
                      ": llmplan costs experts whole on each EP rank (expert tp 1), more expert memory than this run holds");
  }
  // Virtual stages (L495-547).
  LLMPLAN_TRY(vstages, fl.integer("--num-virtual-stages-per-pipeline-rank", 0, 1, 1 << 20));
  LLMPLAN_TRY(layers_per_vstage, fl.integer("--num-layers-per-virtual-pipeline-stage", 0, 1, 10000));
  LLMPLAN_TRY(layout, fl.text("--pipeline-model-parallel-layout", ""));
  if ((vstages > 0) + (layers_per_vstage > 0) + !layout.empty() > 1)
    return Status::bad_input(origin + ": --num-virtual-stages-per-pipeline-rank, --num-layers-per-virtual-pipeline-stage and "
                             "--pipeline-model-parallel-layout: at most one (arguments.py L496-507)");
  LLMPLAN_TRY(acc_embedding, fl.on("--account-for-embedding-in-pipeline-split"));
  LLMPLAN_TRY(acc_loss, fl.on("--account-for-loss-in-pipeline-split"));
  LLMPLAN_TRY(first_layers, fl.integer("--decoder-first-pipeline-num-layers", 0, 1, 10000));
  LLMPLAN_TRY(last_layers, fl.integer("--decoder-last-pipeline-num-layers", 0, 1, 10000));
  if (!layout.empty() && (first_layers > 0 || last_layers > 0 || acc_embedding || acc_loss))
    return Status::bad_input(origin + ": --pipeline-model-parallel-layout with --decoder-first/last-pipeline-num-layers or "
                             "--account-for-*-in-pipeline-split: the layout says the whole split (transformer_config.py, "
                             "core_v0.13.0, refuses the mix)");
  if ((first_layers > 0 || last_layers > 0) && (acc_embedding || acc_loss))
    return Status::bad_input(origin + ": --decoder-first/last-pipeline-num-layers with --account-for-*-in-pipeline-split: "
                             "Megatron-Core refuses the pair (transformer_config.py L861-871)");
  if (acc_embedding != acc_loss)
    return Status::bad_input(origin + ": " + (acc_embedding ? "--account-for-embedding-in-pipeline-split" : "--account-for-loss-in-pipeline-split") +
                             " alone: llmplan models the embedding and the loss counted together (plan.pipeline_split "
                             "account_embedding_loss); add the other flag or neither");
  std::vector<int> custom;
  if (!layout.empty()) {
    LLMPLAN_TRY(counts, parse_pipeline_layout(layout, static_cast<int>(pp), m.mtp_layers, origin + ": --pipeline-model-parallel-layout"));
    custom = counts;
    int64_t sum = 0;
    for (int c : custom) sum += c;
    if (sum != layers)
      return Status::bad_input(origin + ": --pipeline-model-parallel-layout '" + layout + "': " + n(sum) + " decoder layers, --num-layers is " +
                               n(layers) + " (validate_layer_layout)");
    p.vpp = static_cast<int>(custom.size() / pp);
  } else if (layers_per_vstage > 0) {
    const int64_t slots = layers + (acc_embedding ? 2 : 0);
    if (slots % pp != 0 || (slots / pp) % layers_per_vstage != 0)
      return Status::bad_input(origin + ": --num-layers-per-virtual-pipeline-stage " + n(layers_per_vstage) + ": expected a divisor of "
                               "the layers per pipeline stage (" + n(slots) + " / pp " + n(pp) + "; arguments.py L536-541)");
    p.vpp = static_cast<int>(slots / pp / layers_per_vstage);
  } else {
    p.vpp = vstages > 0 ? static_cast<int>(vstages) : 1;
  }
  if (p.vpp > 1 && pp == 1)
    return Status::bad_input(origin + ": virtual pipeline stages with --pipeline-model-parallel-size 1 (arguments.py L564-568)");
  p.pipeline_split = acc_embedding ? PipelineSplit::account_embedding_loss : PipelineSplit::even;
  if (!custom.empty()) {
    set_split_from_counts(m.layers, custom, {PipelineSplit::even}, &p);
  } else if (first_layers > 0 || last_layers > 0) {
    LLMPLAN_TRY(counts, first_last_stage_layers(m.layers, p.pp, p.vpp, static_cast<int>(first_layers), static_cast<int>(last_layers),
                                                origin + ": --decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"));
    set_split_from_counts(m.layers, counts, {PipelineSplit::even}, &p);
  } else if (pp > 1 && !acc_embedding && layers % pp != 0) {
    return Status::bad_input(origin + ": --num-layers " + n(layers) + " is not a multiple of --pipeline-model-parallel-size " + n(pp) +
                             " (Megatron asserts it without uneven-stage flags, arguments.py L561-562)");
  }
  p.schedule = p.vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  // Sequence parallel (L850-853).
  LLMPLAN_TRY(sp, fl.on("--sequence-parallel"));
  p.sp = sp && tp > 1;
  if (sp && tp == 1)
    notes.push_back("--sequence-parallel with tensor parallel 1: Megatron switches it off (arguments.py L850-853)");
  // Context parallel exchange (L2386; the values TE reads: transformer_config.py L526).
  const std::vector<std::string>& cp_types = fl.values("--cp-comm-type");
  if (!cp_types.empty()) {
    for (const std::string& t : cp_types)
      if (t != cp_types[0])
        return Status::bad_input(origin + ": --cp-comm-type: per-layer types (" + Flags::join(cp_types) + "): llmplan models one "
                                 "exchange for every layer");
    const std::string& t = cp_types[0];
    if (t == "p2p") {
      p.cp_exchange = CpExchange::ring;
    } else if (t == "all_gather" || t == "allgather") {
      p.cp_exchange = CpExchange::all_gather;
      if (t == "allgather")
        notes.push_back("--cp-comm-type allgather: read as all_gather, the value Transformer Engine accepts "
                        "(transformer_config.py L526; arguments.py's help text spells it allgather)");
    } else if (t == "a2a" || t == "a2a+p2p") {
      return Status::bad_input(origin + ": --cp-comm-type " + t + ": an all-to-all (Ulysses) exchange, which llmplan does not "
                               "model (it models p2p, the ring, and all_gather)");
    } else {
      return Status::bad_input(origin + ": --cp-comm-type: expected one of p2p, all_gather, a2a, a2a+p2p, got '" + t + "'");
    }
  }
  // Micro/global batch and data parallel.
  const int64_t model_ranks = tp * pp * cp;
  int64_t world = 0;
  if (launcher.nproc > 0 && launcher.nnodes > 0) {
    world = static_cast<int64_t>(launcher.nproc) * launcher.nnodes;
  } else if (launcher.nproc > 0) {
    world = launcher.nproc;
    notes.push_back("--nnodes not given: one node");
    launcher.nnodes = 1;
  }
  LLMPLAN_TRY(global_in, fl.integer("--global-batch-size", 0, 1, 100000000));
  int64_t dp = 0;
  if (world > 0) {
    if (world < model_ranks) {
      notes.push_back("the launch line starts " + n(world) + " processes (" + launcher.described + "), fewer than one model "
                      "replica needs (tp*pp*cp = " + n(model_ranks) + "): the script is meant to be edited for more nodes; "
                      "taken as dp 1 on " + n(model_ranks) + " GPUs");
      dp = 1;
      launcher.nnodes = 0;
    } else if (world % model_ranks != 0) {
      return Status::bad_input(origin + ": " + n(world) + " processes (" + launcher.described + ") are not a multiple of tp*pp*cp = " +
                               n(model_ranks) + " (arguments.py L382-384)");
    } else {
      dp = world / model_ranks;
    }
  } else if (global_in > 0) {
    if (global_in % micro != 0)
      return Status::bad_input(origin + ": --global-batch-size " + n(global_in) + " is not a multiple of --micro-batch-size " + n(micro));
    dp = global_in / micro;
    notes.push_back("no launch line (torchrun --nproc-per-node / --nnodes): dp taken as --global-batch-size / --micro-batch-size = " +
                    n(dp) + ", one micro-batch per step");
  } else {
    return Status::bad_input(origin + ": the world size: no torchrun --nproc-per-node and no --global-batch-size to derive dp from");
  }
  p.dp = static_cast<int>(dp);
  int64_t global = global_in;
  if (global == 0) {
    global = micro * dp;
    notes.push_back("--global-batch-size: Megatron's default micro-batch x dp = " + n(global) + " (arguments.py L488-489)");
  }
  if (global % (micro * dp) != 0)
    return Status::bad_input(origin + ": --global-batch-size " + n(global) + " is not a multiple of --micro-batch-size x dp = " +
                             n(micro * dp));
  j.global_batch = global;
  p.grad_accum = static_cast<int>(global / (micro * dp));
  if (fl.has("--rampup-batch-size")) {
    notes.push_back("--rampup-batch-size " + Flags::join(fl.values("--rampup-batch-size")) +
                    ": the batch grows during training; costed at the full --global-batch-size" +
                    (fl.has("--train-iters") ? std::string("; Megatron asserts it is not used with --train-iters "
                                                           "(arguments.py L723-724)")
                                             : std::string()));
  }
  // ZeRO (L587-661).
  LLMPLAN_TRY(dist_opt, fl.on("--use-distributed-optimizer"));
  LLMPLAN_TRY(custom_fsdp, fl.on("--use-custom-fsdp"));
  LLMPLAN_TRY(torch_fsdp2, fl.on("--use-torch-fsdp2"));
  LLMPLAN_TRY(no_reshard, fl.on("--torch-fsdp2-no-reshard-after-forward"));
  LLMPLAN_TRY(sharding, fl.choice("--data-parallel-sharding-strategy", "no_shard", {"no_shard", "optim", "optim_grads", "optim_grads_params"}));
  LLMPLAN_TRY(overlap_param, fl.on("--overlap-param-gather"));
  if (overlap_param && !dist_opt)
    return Status::bad_input(origin + ": --overlap-param-gather without --use-distributed-optimizer (arguments.py L594-596)");
  if (custom_fsdp && !dist_opt)
    return Status::bad_input(origin + ": --use-custom-fsdp without --use-distributed-optimizer (arguments.py L646-648)");
  if (torch_fsdp2 && (dist_opt || custom_fsdp))
    return Status::bad_input(origin + ": --use-torch-fsdp2 with " + (custom_fsdp ? "--use-custom-fsdp" : "--use-distributed-optimizer") +
                             " (arguments.py L609-610)");
  if (custom_fsdp) {
    p.zero = sharding == "no_shard" ? 0 : sharding == "optim" ? 1 : sharding == "optim_grads" ? 2 : 3;
  } else if (torch_fsdp2) {
    p.zero = no_reshard ? 2 : 3;
    notes.push_back("--use-torch-fsdp2: PyTorch FSDP2, costed as ZeRO-" + n(p.zero));
  } else {
    p.zero = dist_opt ? 1 : 0;
    if (fl.has("--data-parallel-sharding-strategy") && sharding != "no_shard")
      notes.push_back("--data-parallel-sharding-strategy " + sharding + " without --use-custom-fsdp: Megatron shards nothing more "
                      "than the distributed optimizer does");
  }
  if (p.zero >= 2 && pp > 1)
    notes.push_back("ZeRO-" + n(p.zero) + " (Megatron-FSDP) with pipeline parallelism is not documented as supported at core_v0.13.0");
  // Optimizer offload (L1049-1053).
  LLMPLAN_TRY(cpu_offload, fl.on("--optimizer-cpu-offload"));
  LLMPLAN_TRY(precision_aware, fl.on("--use-precision-aware-optimizer"));
  LLMPLAN_TRY(offload_fraction, fl.real("--optimizer-offload-fraction", 1.0, 0, 1));
  if (cpu_offload && !precision_aware)
    return Status::bad_input(origin + ": --optimizer-cpu-offload without --use-precision-aware-optimizer (arguments.py L1049-1053)");
  p.offload_optimizer = cpu_offload && offload_fraction > 0;
  // Moment dtypes of the precision-aware optimizer (--exp-avg-dtype, --exp-avg-sq-dtype,
  // arguments.py L2940/L2945; fp32 by default, anything else only with
  // --use-precision-aware-optimizer): bf16 when both are.
  LLMPLAN_TRY(exp_avg, fl.choice("--exp-avg-dtype", "fp32", {"fp32", "fp16", "bf16", "fp8"}));
  LLMPLAN_TRY(exp_avg_sq, fl.choice("--exp-avg-sq-dtype", "fp32", {"fp32", "fp16", "bf16", "fp8"}));
  if ((exp_avg != "fp32" || exp_avg_sq != "fp32") && !precision_aware)
    return Status::bad_input(origin + ": --exp-avg-dtype " + exp_avg + " --exp-avg-sq-dtype " + exp_avg_sq +
                             " without --use-precision-aware-optimizer (only Transformer Engine's FusedAdam keeps other moment dtypes)");
  if ((exp_avg != "fp32" || exp_avg_sq != "fp32") && p.zero == 0)
    return Status::bad_input(origin + ": --exp-avg-dtype " + exp_avg + " --exp-avg-sq-dtype " + exp_avg_sq +
                             " without --use-distributed-optimizer (Megatron-Core runs the precision-aware optimizer only distributed)");
  if (exp_avg == "bf16" && exp_avg_sq == "bf16") j.moments = MomentsDtype::bf16;
  else if (exp_avg != "fp32" || exp_avg_sq != "fp32")
    notes.push_back("--exp-avg-dtype " + exp_avg + " --exp-avg-sq-dtype " + exp_avg_sq + ": modelled with fp32 moments (llmplan has fp32 and bf16 pairs)");
  if (p.offload_optimizer && offload_fraction < 1)
    notes.push_back("--optimizer-offload-fraction " + number_text(offload_fraction) + ": llmplan costs the whole optimizer offloaded");
  // Recompute (L446-448, L842-845; transformer_config.py L774-800).
  LLMPLAN_TRY(recompute_activations, fl.on("--recompute-activations"));
  LLMPLAN_TRY(granularity, fl.choice("--recompute-granularity", recompute_activations ? "selective" : "", {"full", "selective"}));
  LLMPLAN_TRY(method, fl.choice("--recompute-method", "", {"uniform", "block"}));
  LLMPLAN_TRY(recompute_layers, fl.integer("--recompute-num-layers", 0, 1, 10000));
  const std::vector<std::string>& modules = fl.values("--recompute-modules");
  if (granularity != "full" && !method.empty())
    return Status::bad_input(origin + ": --recompute-method " + method + " without --recompute-granularity full (" +
                             (granularity.empty() ? std::string("no recompute granularity") : "granularity " + granularity) +
                             "; arguments.py L842-845, transformer_config.py L781-790)");
  if (granularity != "full" && fl.has("--recompute-num-layers"))
    return Status::bad_input(origin + ": --recompute-num-layers without --recompute-granularity full (transformer_config.py L792-800)");
  if (granularity == "full" && method.empty())
    return Status::bad_input(origin + ": --recompute-granularity full without --recompute-method uniform|block (transformer_config.py L786-790)");
  if (granularity == "full" && recompute_layers == 0)
    return Status::bad_input(origin + ": --recompute-granularity full without --recompute-num-layers (transformer_config.py L792-797)");
  if (granularity.empty()) {
    p.recompute = Recompute::none;
  } else if (granularity == "selective") {
    p.recompute = Recompute::selective;
    if (!modules.empty() && !(modules.size() == 1 && modules[0] == "core_attn"))
      notes.push_back("--recompute-modules " + Flags::join(modules) + ": llmplan's selective recompute drops the attention "
                      "scores only (core_attn)");
  } else {
    const int chunk_layers = pp_stage_layers(m.layers, p, 0) / std::max(1, p.vpp);
    if (method == "uniform") {
      p.recompute = Recompute::full;
      if (recompute_layers > 1)
        notes.push_back("--recompute-method uniform --recompute-num-layers " + n(recompute_layers) + ": Megatron keeps one input "
                        "per " + n(recompute_layers) + " layers; llmplan's full recompute keeps one per layer (a little more memory)");
    } else if (recompute_layers >= chunk_layers) {
      p.recompute = Recompute::full;
    } else {
      p.recompute = Recompute::full_k;
      p.recompute_layers = static_cast<int>(recompute_layers);
    }
  }
  // Attention (L1377, L1903).
  LLMPLAN_TRY(backend, fl.choice("--attention-backend", "auto", {"flash", "fused", "unfused", "local", "auto"}));
  LLMPLAN_TRY(use_flash, fl.on("--use-flash-attn"));
  p.flash_attention = use_flash || !(backend == "unfused" || backend == "local");
  if (!fl.has("--attention-backend") && !use_flash)
    notes.push_back("--attention-backend: Megatron's default auto (Transformer Engine's flash or fused attention)");
  p.activation_offload_layers = 0;

  for (const char* s : kLaunchSettings) fl.has(s);
  out.unknown_keys = fl.unused();

  // ---- cluster and names
  PlanFile& f = out.file;
  const std::string stem = std::filesystem::path(origin).stem().string();
  if (Status st = name_imported_model(opt, origin, stem.empty() ? "megatron-model" : stem,
                                      "read from Megatron-LM arguments in " + origin, &m, &notes);
      !st)
    return st;
  f.model = m;
  f.job = j;
  f.plan = p;
  f.gpus = static_cast<int>(dp * model_ranks);
  Result<ClusterSpec> c = imported_cluster(opt, f.gpus, launcher.nproc, launcher.nnodes, origin);
  if (!c) return c.status();
  f.cluster = *c;
  if (Status st = check_imported(f, origin); !st) return st;
#undef LLMPLAN_TRY
  return out;
}

}  // namespace llmplan::launch_formats
