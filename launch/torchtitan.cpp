// The torchtitan format (launch/launch.h): torchtitan v0.2.2's job TOML (JobConfig,
// torchtitan/config/job_config.py at pytorch/torchtitan 73a0e697) and launch.sh with
// run_train.sh's torchrun line (`torchrun --nproc_per_node N -m torchtitan.train
// --job.config_file train.toml`).
//
// Mapping (each with its source in the comment above the key it writes):
//   ZeRO-3 = FSDP2 over dp (data_parallel_shard_degree = dp); ZeRO-0 = DDP
//   (data_parallel_replicate_degree = dp), which torchtitan runs only as the one parallel
//   dimension; ZeRO-1/2 have no torchtitan equivalent.
//   tp > 1 always shards the norms' activations (sequence parallel) in torchtitan.
//   Recompute: selective = op-level SAC, full = full, full_k = layer SAC every n-th layer when
//   that checkpoints k layers of every stage.
//   Pipeline: 1F1B, GPipe, Interleaved1F1B; the stage split through first/last-stage weights
//   and layers per stage when torchtitan's generator reproduces llmplan's split, else the
//   explicit module_fqns_per_model_part.
//   Model: [model] name + flavor, by exact shape (llama3 8B/70B/405B, qwen3 0.6B-235B-A22B).
//
// toml++ formats every value (a one-key table through toml::toml_formatter); the `#` lines
// above them are written here, since toml++ writes no comments.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "launch/formats.h"
#include "launch/model_shape.h"
#include "launch/shell_words.h"
#include "launch/torchtitan_schema.h"
#include "planner/cost/plan_check.h"

namespace llmplan::launch_formats {

namespace {

constexpr const char* kConfigName = "train.toml";
constexpr const char* kScriptName = "launch.sh";
constexpr const char* kDefaultModule = "torchtitan.train";

// torchtitan/config/job_config.py @v0.2.2 (tests/fixtures/frameworks/torchtitan_keys.txt).
constexpr TorchtitanField kFields[] = {
    {"job.config_file", "str | None"}, {"job.dump_folder", "str"}, {"job.description", "str"}, {"job.print_config", "bool"},
    {"job.save_config_file", "str | None"}, {"job.custom_config_module", "str"}, {"profiling.enable_profiling", "bool"},
    {"profiling.save_traces_folder", "str"}, {"profiling.profile_freq", "int"}, {"profiling.profiler_active", "int"},
    {"profiling.profiler_warmup", "int"}, {"profiling.enable_memory_snapshot", "bool"}, {"profiling.save_memory_snapshot_folder", "str"},
    {"metrics.log_freq", "int"}, {"metrics.enable_tensorboard", "bool"}, {"metrics.disable_color_printing", "bool"},
    {"metrics.save_tb_folder", "str"}, {"metrics.save_for_all_ranks", "bool"}, {"metrics.enable_wandb", "bool"},
    {"model.name", "str"}, {"model.flavor", "str"}, {"model.hf_assets_path", "str"}, {"model.tokenizer_path", "str | None"},
    {"model.converters", "list[str]"}, {"model.print_after_conversion", "bool"}, {"optimizer.name", "str"}, {"optimizer.lr", "float"},
    {"optimizer.beta1", "float"}, {"optimizer.beta2", "float"}, {"optimizer.eps", "float"}, {"optimizer.weight_decay", "float"},
    {"optimizer.implementation", "Literal['for-loop', 'foreach', 'fused']"}, {"optimizer.early_step_in_backward", "bool"},
    {"lr_scheduler.warmup_steps", "int"}, {"lr_scheduler.total_steps", "int | None"}, {"lr_scheduler.decay_ratio", "float | None"},
    {"lr_scheduler.decay_type", "Literal['linear', 'sqrt', 'cosine']"}, {"lr_scheduler.min_lr_factor", "float"},
    {"training.dataset", "str"}, {"training.dataset_path", "str | None"}, {"training.local_batch_size", "int"},
    {"training.global_batch_size", "int"}, {"training.seq_len", "int"}, {"training.max_norm", "float | int"}, {"training.steps", "int"},
    {"training.enable_cpu_offload", "bool"}, {"training.dtype", "Literal['bfloat16', 'float32']"},
    {"training.mixed_precision_param", "Literal['bfloat16', 'float32']"}, {"training.mixed_precision_reduce", "Literal['float32']"},
    {"training.gc_freq", "int"}, {"training.gc_debug", "bool"}, {"training.dataloader.num_workers", "int"},
    {"training.dataloader.persistent_workers", "bool"}, {"training.dataloader.pin_memory", "bool"},
    {"training.dataloader.prefetch_factor", "int | None"}, {"parallelism.data_parallel_replicate_degree", "int"},
    {"parallelism.data_parallel_shard_degree", "int"}, {"parallelism.fsdp_reshard_after_forward", "Literal['default', 'always', 'never']"},
    {"parallelism.tensor_parallel_degree", "int"}, {"parallelism.disable_loss_parallel", "bool"},
    {"parallelism.enable_async_tensor_parallel", "bool"}, {"parallelism.pipeline_parallel_degree", "int"},
    {"parallelism.module_fqns_per_model_part", "list[list[str]] | None"}, {"parallelism.pipeline_parallel_first_stage_less_layers", "int"},
    {"parallelism.pipeline_parallel_last_stage_less_layers", "int"}, {"parallelism.pipeline_parallel_layers_per_stage", "int | None"},
    {"parallelism.pipeline_parallel_schedule", "str"}, {"parallelism.pipeline_parallel_schedule_csv", "str | None"},
    {"parallelism.pipeline_parallel_microbatch_size", "int"}, {"parallelism.pipeline_parallel_expert_parallel_overlap", "bool"},
    {"parallelism.context_parallel_degree", "int"}, {"parallelism.context_parallel_load_balancer", "str | None"},
    {"parallelism.context_parallel_rotate_method", "Literal['allgather', 'alltoall']"}, {"parallelism.expert_parallel_degree", "int"},
    {"parallelism.expert_tensor_parallel_degree", "int"}, {"parallelism.expert_parallel_comm_backend", "Literal['standard', 'deepep']"},
    {"checkpoint.enable", "bool"}, {"checkpoint.enable_ft_dataloader_checkpoints", "bool"}, {"checkpoint.folder", "str"},
    {"checkpoint.interval", "int"}, {"checkpoint.initial_load_path", "str | None"}, {"checkpoint.initial_load_model_only", "bool"},
    {"checkpoint.initial_load_in_hf", "bool"}, {"checkpoint.initial_load_in_hf_quantized", "bool"}, {"checkpoint.last_save_model_only", "bool"},
    {"checkpoint.last_save_in_hf", "bool"}, {"checkpoint.export_dtype", "Literal['float16', 'bfloat16', 'float32']"},
    {"checkpoint.async_mode", "Literal['disabled', 'async', 'async_with_pinned_mem']"}, {"checkpoint.keep_latest_k", "int"},
    {"checkpoint.load_step", "int"}, {"checkpoint.exclude_from_loading", "list[str]"}, {"checkpoint.enable_first_step_checkpoint", "bool"},
    {"checkpoint.create_seed_checkpoint", "bool"}, {"checkpoint.load_only", "bool"},
    {"activation_checkpoint.mode", "Literal['selective', 'full', 'memory_budget', 'none']"}, {"activation_checkpoint.selective_ac_option", "str"},
    {"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", "list[str]"}, {"activation_checkpoint.early_stop", "bool"},
    {"activation_checkpoint.memory_budget", "float"}, {"activation_checkpoint.visualize_memory_budget_pareto", "bool"},
    {"activation_checkpoint.preserve_rng_state", "bool"}, {"activation_checkpoint.determinism_check", "str"},
    {"activation_checkpoint.debug", "bool"}, {"compile.enable", "bool"}, {"compile.components", "list[str]"}, {"compile.backend", "str"},
    {"quantize.linear.float8.enable_fsdp_float8_all_gather", "bool"}, {"quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", "bool"},
    {"quantize.linear.float8.recipe_name", "Literal['tensorwise', 'rowwise', 'rowwise_with_gw_hp'] | None"},
    {"quantize.linear.float8.filter_fqns", "list[str]"}, {"quantize.linear.float8.emulate", "bool"},
    {"quantize.linear.mx.mxfp8_dim1_cast_kernel_choice", "Literal['triton', 'cuda', 'torch']"}, {"quantize.linear.mx.recipe_name", "str"},
    {"quantize.linear.mx.filter_fqns", "list[str]"}, {"quantize.grouped_mm.float8.fqns", "list[str] | str"},
    {"quantize.grouped_mm.mx.recipe_name", "Literal['mxfp8']"}, {"quantize.grouped_mm.mx.fqns", "list[str] | str"},
    {"comm.init_timeout_seconds", "int"}, {"comm.train_timeout_seconds", "int"}, {"comm.trace_buf_size", "int"},
    {"comm.save_traces_folder", "str"}, {"comm.save_traces_file_prefix", "str"}, {"comm.mode", "Literal['default', 'fake_backend', 'local_tensor']"},
    {"memory_estimation.enable", "bool"}, {"memory_estimation.disable_fake_mode", "bool"}, {"fault_tolerance.enable", "bool"},
    {"fault_tolerance.process_group", "str"}, {"fault_tolerance.process_group_timeout_ms", "int"}, {"fault_tolerance.replica_id", "int"},
    {"fault_tolerance.group_size", "int"}, {"fault_tolerance.min_replica_size", "int"}, {"fault_tolerance.semi_sync_method", "str | None"},
    {"experimental.custom_import", "str"}, {"experimental.custom_args_module", "str"}, {"validation.enable", "bool"},
    {"validation.dataset", "str"}, {"validation.dataset_path", "str | None"}, {"validation.local_batch_size", "int"},
    {"validation.seq_len", "int"}, {"validation.freq", "int"}, {"validation.steps", "int"}, {"validation.dataloader.num_workers", "int"},
    {"validation.dataloader.persistent_workers", "bool"}, {"validation.dataloader.pin_memory", "bool"},
    {"validation.dataloader.prefetch_factor", "int | None"}, {"debug.seed", "int | None"}, {"debug.deterministic", "bool"},
    {"debug.deterministic_warn_only", "bool"}, {"debug.moe_force_load_balance", "bool"}};

constexpr const char* kSections[] = {"job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training", "training.dataloader",
                                     "parallelism", "checkpoint", "activation_checkpoint", "compile", "quantize", "quantize.linear",
                                     "quantize.linear.float8", "quantize.linear.mx", "quantize.grouped_mm", "quantize.grouped_mm.float8",
                                     "quantize.grouped_mm.mx", "comm", "memory_estimation", "fault_tolerance", "experimental", "validation",
                                     "validation.dataloader", "debug"};

// torchtitan/models/llama3/__init__.py (llama3_args; TransformerModelArgs defaults vocab_size
// 128256, max_seq_len 131072, no weight tying) and torchtitan/models/qwen3/__init__.py
// (qwen3_args), v0.2.2. llama3's MLP width: FeedForward(hidden_dim = 4*dim) ->
// int(2*4*dim/3), times ffn_dim_multiplier, rounded up to multiple_of: 8B 1.3/1024 -> 14336,
// 70B 1.3/4096 -> 28672, 405B 1.2/4096 -> 53248.
constexpr TorchtitanFlavor kFlavors[] = {
    {"llama3", "8B", 32, 4096, 32, 8, 128, 14336, 128256, 131072, false, false, 0, 0},
    {"llama3", "70B", 80, 8192, 64, 8, 128, 28672, 128256, 131072, false, false, 0, 0},
    {"llama3", "405B", 126, 16384, 128, 8, 128, 53248, 128256, 131072, false, false, 0, 0},
    {"qwen3", "0.6B", 28, 1024, 16, 8, 128, 3072, 151936, 4096, true, true, 0, 0},
    {"qwen3", "1.7B", 28, 2048, 16, 8, 128, 6144, 151936, 4096, true, true, 0, 0},
    {"qwen3", "4B", 36, 2560, 32, 8, 128, 9728, 151936, 4096, true, true, 0, 0},
    {"qwen3", "8B", 36, 4096, 32, 8, 128, 12288, 151936, 4096, false, true, 0, 0},
    {"qwen3", "14B", 40, 5120, 40, 8, 128, 17408, 151936, 4096, false, true, 0, 0},
    {"qwen3", "32B", 64, 5120, 64, 8, 128, 25600, 151936, 4096, false, true, 0, 0},
    {"qwen3", "30B-A3B", 48, 2048, 32, 4, 128, 768, 151936, 262144, false, true, 128, 8},
    {"qwen3", "235B-A22B", 94, 4096, 64, 4, 128, 1536, 151936, 4096, false, true, 128, 8},
};

// torch.distributed.pipelining.schedules get_schedule_class (case-insensitive), the names
// llmplan's schedules map to; the other names it accepts (LoopedBFS, InterleavedZeroBubble,
// PipelineScheduleSingle/Multi) are schedules llmplan does not model.
struct ScheduleName {
  const char* name;
  Schedule schedule;
  bool multi_stage;  // a PipelineScheduleMulti: two or more stages per rank
};
constexpr ScheduleName kSchedules[] = {
    {"1F1B", Schedule::one_f_one_b, false},     {"GPipe", Schedule::gpipe, false},        {"Interleaved1F1B", Schedule::interleaved, true},
    {"ZBVZeroBubble", Schedule::zbv, true}, {"DualPipeV", Schedule::dualpipev, true}};
constexpr const char* kOtherSchedules[] = {"LoopedBFS", "InterleavedZeroBubble", "PipelineScheduleSingle", "PipelineScheduleMulti"};
// The torchtitan name of an llmplan schedule, or nullptr (zb-h1: none).
const ScheduleName* torchtitan_schedule(Schedule s) {
  for (const ScheduleName& k : kSchedules)
    if (k.schedule == s) return &k;
  return nullptr;
}

std::string num(int64_t v) { return std::to_string(v); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

ModelShape flavor_shape(const TorchtitanFlavor& f) {
  ModelShape s;
  s.family = Family::llama;
  s.layers = f.layers;
  s.hidden = f.hidden;
  s.heads = f.heads;
  s.kv_heads = f.kv_heads;
  s.head_width = f.head_dim;
  s.ffn_hidden = f.ffn_hidden;
  s.vocab = f.vocab;
  s.tied_embeddings = f.tied;
  s.attention_bias = AttentionBias::none;
  s.qk_norm = f.qk_norm;
  s.experts = f.experts;
  if (f.experts > 0) {
    s.experts_per_token = f.experts_per_token;
    s.expert_ffn_hidden = f.ffn_hidden;
    s.shared_experts = 0;
  }
  return s;
}

const TorchtitanFlavor* flavor_of(const ModelSpec& m) {
  for (const TorchtitanFlavor& f : kFlavors)
    if (!shape_mismatch(flavor_shape(f), m)) return &f;
  return nullptr;
}

// torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part (v0.2.2
// L238-330): the transformer layers of each of `stages` stages when the embedding counts as
// `in` layers and the norm + output as `out`; the remainder of the division goes to the first
// stages. An empty result with *why set when torchtitan raises.
std::vector<int> torchtitan_stage_layers(int stages, int layers, int in, int out, std::string* why) {
  if (stages < 1) {
    *why = "the number of stages must be at least 1";
    return {};
  }
  if (stages == 1) return {layers};
  const int effective = layers + in + out;
  if (stages > effective) {
    *why = "more stages (" + num(stages) + ") than effective layers (" + num(effective) + ")";
    return {};
  }
  const int per = effective / stages, extra = effective % stages;
  if (per == 0 || in > per || out > per) {
    *why = "the first/last-stage weights exceed the layers per stage (" + num(per) + ")";
    return {};
  }
  std::vector<int> out_layers;
  int current = 0;
  for (int s = 0; s < stages; ++s) {
    const int eff = per + (s < extra ? 1 : 0);
    const int want = s == 0 ? eff - in : s == stages - 1 ? eff - out : eff;
    const int got = std::max(0, std::min(want, layers - current));
    current += got;
    out_layers.push_back(got);
  }
  return out_layers;
}

// ---------------------------------------------------------------- export

// How the plan is written in torchtitan's terms (after the refusals).
struct TitanPlan {
  const TorchtitanFlavor* flavor = nullptr;
  // The pipeline split: torchtitan's generator with these weights (and layers per stage when
  // vpp > 1), or explicit module lists when it cannot reproduce llmplan's.
  int first_less = 0, last_less = 0;
  int layers_per_stage = 0;  // 0: not written
  std::vector<int> explicit_stage_layers;
  int ac_every = 0;  // layer SAC frequency for full_k
};

Result<TitanPlan> titan_plan(const PlanFile& f) {
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  const ModelSpec& m = f.model;
  TitanPlan t;
  if (j.mode == TrainMode::lora)
    return Status::bad_input(std::string("job.mode: ") + to_string(job_mode(j)) +
                             ": torchtitan v0.2.2 has no LoRA (no adapter option in torchtitan/config/job_config.py, no "
                             "adapter module under torchtitan/models)");
  if (j.moments == MomentsDtype::bf16)
    return Status::bad_input("job.moments: bf16: torchtitan v0.2.2 builds torch.optim's Adam/AdamW, whose moments take the "
                             "parameters' dtype (fp32 under FSDP's mixed precision; torchtitan/components/optimizer.py)");
  if (j.frozen_layer_count(m.layers) > 0)
    return Status::bad_input("job.frozen_layers: torchtitan v0.2.2's job config has no option that freezes layers "
                             "(torchtitan/config/job_config.py)");
  if (j.precision == Precision::fp16)
    return Status::bad_input("job.precision: fp16: torchtitan v0.2.2 trains in bfloat16 or float32 "
                             "(training.mixed_precision_param, job_config.py L282) and has no loss scaling");
  if (j.optimizer != Optimizer::adamw)
    return Status::bad_input(std::string("job.optimizer: ") + to_string(j.optimizer) +
                             ": torchtitan v0.2.2 builds Adam and AdamW only (torchtitan/components/optimizer.py L314-319)");
  if (j.fp8 == Fp8Recipe::delayed || j.fp8 == Fp8Recipe::blockwise)
    return Status::bad_input(std::string("job.fp8: ") + to_string(j.fp8) +
                             ": torchtitan v0.2.2's float8 recipes are torchao's tensorwise, rowwise and rowwise_with_gw_hp "
                             "(quantize.linear.float8.recipe_name, job_config.py L738) and MX's mxfp8 (quantize.linear.mx); "
                             "it has no delayed or 1x128/128x128 blockwise scaling");
  if (j.fp8 == Fp8Recipe::tensorwise && m.moe.enabled())
    return Status::bad_input("job.fp8: tensorwise on a mixture of experts: torchtitan's quantize.linear.float8 converts nn.Linear "
                             "modules only, and its float8 converter for the experts' grouped GEMMs is rowwise "
                             "(torchtitan/components/quantization/float8.py L176-235, torchao MoETrainingConfig), so the "
                             "experts cannot run tensorwise FP8 as planned");
  t.flavor = flavor_of(m);
  if (t.flavor == nullptr)
    return Status::bad_input("model: " + m.name +
                             ": torchtitan v0.2.2 defines its models in Python, and no llama3 or qwen3 flavor "
                             "(torchtitan/models/llama3/__init__.py, models/qwen3/__init__.py) has this shape (" + num(m.layers) +
                             " layers, hidden " + num(m.hidden) + ", heads " + num(m.heads) + "/" + num(m.kv_heads) + ", ffn " +
                             num(m.ffn_hidden) + ", vocab " + num(m.vocab) + (m.moe.enabled() ? ", MoE" : "") + ")");
  if (p.zero == 1 || p.zero == 2)
    return Status::bad_input("plan.zero: " + num(p.zero) +
                             ": torchtitan shards with FSDP2 (ZeRO-3: data_parallel_shard_degree) or replicates with DDP "
                             "(ZeRO-0: data_parallel_replicate_degree) and has no ZeRO-" + num(p.zero) +
                             " (torchtitan/config/job_config.py L313-350)");
  if (p.zero == 0 && p.cp > 1)
    return Status::bad_input("plan.zero: 0 with cp " + num(p.cp) +
                             ": torchtitan applies FSDP over the context-parallel ranks whenever cp > 1 "
                             "(distributed/parallel_dims.py L334-335); plan zero 3");
  if (p.zero == 0 && p.dp > 1 && (p.tp > 1 || p.pp > 1))
    return Status::bad_input("plan.zero: 0 with tp or pp > 1: torchtitan's DDP refuses any other parallel dimension (\"DDP has "
                             "not supported > 1D parallelism\", torchtitan/models/llama3/infra/parallelize.py L150-151); plan "
                             "zero 3");
  if (p.zero == 0 && (p.tp > 1 || p.pp > 1) && j.precision != Precision::fp32)
    return Status::bad_input(std::string("plan.zero: 0 with tp or pp > 1 in ") + to_string(j.precision) +
                             ": without FSDP torchtitan turns mixed precision off under TP or PP and trains in float32 "
                             "(distributed/utils.py maybe_enable_amp L251-256)");
  if (p.zero == 0 && p.ep > 1)
    return Status::bad_input("plan.ep: " + num(p.ep) + " with zero 0: torchtitan carves expert parallelism out of the FSDP ranks "
                             "(dp_shard * cp, distributed/parallel_dims.py L201), so it needs zero 3");
  if (p.zero == 3 && p.dp * p.cp == 1)
    return Status::bad_input("plan.zero: 3 over one data-parallel rank: torchtitan applies FSDP only when "
                             "data_parallel_shard_degree or context_parallel_degree is above 1 (parallel_dims.py L334-335); "
                             "plan zero 0");
  if (p.offload_optimizer && !p.offload_params)
    return Status::bad_input("plan.offload_optimizer: torchtitan has no optimizer-only offload: training.enable_cpu_offload puts "
                             "FSDP's CPUOffloadPolicy on the parameters, gradients and optimizer states together "
                             "(job_config.py L270, models/llama3/infra/parallelize.py L316-317); plan offload_params too");
  if (p.activation_offload_layers > 0)
    return Status::bad_input("plan.activation_offload_layers: " + num(p.activation_offload_layers) +
                             ": torchtitan v0.2.2 has no activation offload (job_config.py)");
  if (!p.flash_attention)
    return Status::bad_input("plan.flash_attention: false: torchtitan's attention is PyTorch SDPA (or flex/varlen), which never "
                             "keeps the s x s scores (torchtitan/models/llama3/model/args.py attn_type)");
  if (p.tp > 1 && !p.sp)
    return Status::bad_input("plan.sp: false with tp " + num(p.tp) +
                             ": torchtitan's tensor parallelism always shards the norms and their activations over the TP "
                             "ranks (SequenceParallel, torchtitan/models/llama3/infra/parallelize.py L161-235)");
  if (m.moe.enabled() && p.tp > 1)
    return Status::bad_input("plan.tp: " + num(p.tp) +
                             " on a mixture of experts: llmplan keeps each expert whole on its EP rank, while torchtitan "
                             "either tensor-parallelises the experts (expert_tensor_parallel_degree = tp) or folds the TP ranks "
                             "into the expert groups (= 1; parallel_dims.py L59, L201)");
  if (std::string(t.flavor->model) == "qwen3" && p.pp > 1)
    return Status::bad_input("plan.pp: " + num(p.pp) + ": torchtitan v0.2.2's qwen3 has no pipelining function "
                             "(torchtitan/models/qwen3/__init__.py get_train_spec: pipelining_fn=None; train.py L218-223)");
  if (p.pp > 1 && p.schedule == Schedule::dualpipe)
    return Status::bad_input("plan.schedule: dualpipe: torch.distributed.pipelining has DeepSeek's V-shaped DualPipeV, not the "
                             "two-direction DualPipe (get_schedule_class); plan.schedule dualpipev on pp/2 ranks is the one torchtitan runs");
  if (p.pp > 1 && p.schedule == Schedule::zb_h1)
    return Status::bad_input("plan.schedule: zb-h1: torch.distributed.pipelining has no one-stage-per-rank zero-bubble schedule "
                             "(InterleavedZeroBubble is multi-stage; get_schedule_class, torchtitan/distributed/pipeline_parallel.py "
                             "L104-109); ZBVZeroBubble (plan.schedule zbv, vpp 2) is the one torchtitan runs");
  if (p.pp > 1 && ((p.vpp > 1) != torchtitan_schedule(p.schedule)->multi_stage))
    return Status::bad_input(std::string("plan.schedule: ") + to_string(p.schedule) + " with vpp " + num(p.vpp) +
                             ": torchtitan runs 1F1B and GPipe with one stage per rank and Interleaved1F1B, ZBVZeroBubble and "
                             "DualPipeV with two or more (torchtitan/distributed/pipeline_parallel.py L96-109)");
  if (j.seq_len % (2 * p.tp * p.cp) != 0)
    return Status::bad_input("job.seq_len: " + num(j.seq_len) + ": torchtitan needs it divisible by tp * 2 * cp = " +
                             num(2 * p.tp * p.cp) + " (parallel_dims.py L365-372; models/llama3/infra/parallelize.py L70-74)");
  if (p.recompute == Recompute::full_k) {
    // Layer SAC checkpoints every n-th block a rank builds (a per-process counter:
    // torchtitan/distributed/activation_checkpoint.py L24-40): k per stage only when
    // floor(stage layers / n) = k for every stage, and one chunk per rank.
    if (p.vpp > 1)
      return Status::bad_input("plan.recompute: full_k with vpp > 1: torchtitan's layer SAC counts layers over all of a rank's "
                               "virtual stages (torchtitan/distributed/activation_checkpoint.py L24-40), not k per stage");
    const int k = p.recompute_layers;
    for (int n = 2; n <= m.layers && t.ac_every == 0; ++n) {
      bool all = true;
      for (int s = 0; s < p.pp && all; ++s) all = pp_stage_layers(m.layers, p, s) / n == k;
      if (all) t.ac_every = n;
    }
    if (t.ac_every == 0)
      return Status::bad_input("plan.recompute: full_k with k " + num(k) +
                               ": torchtitan's layer SAC (activation_checkpoint.selective_ac_option = n) checkpoints every n-th "
                               "layer (torchtitan/distributed/activation_checkpoint.py L24-40), and no n checkpoints " + num(k) +
                               " layers of every stage");
  }
  if (p.pp > 1) {
    const std::vector<int> want = virtual_stage_counts(m.layers, p);
    const int stages = p.pp * p.vpp;
    bool found = false;
    // torchtitan's default weights (1, 1) first, then none, then the others.
    constexpr std::pair<int, int> kWeights[] = {{1, 1}, {0, 0}, {1, 0}, {0, 1}, {2, 2}, {2, 0}, {0, 2}, {2, 1}, {1, 2}};
    for (const auto& [in, out] : kWeights) {
      std::string why;
      if (torchtitan_stage_layers(stages, m.layers, in, out, &why) != want) continue;
      if (p.vpp > 1) {
        const int eff = m.layers + in + out;
        const int lps = (eff + stages - 1) / stages;
        if ((eff + lps - 1) / lps != stages) continue;  // pipeline_parallel.py L72-77
        t.layers_per_stage = lps;
      }
      t.first_less = in, t.last_less = out;
      found = true;
      break;
    }
    if (!found) t.explicit_stage_layers = want;
  }
  return t;
}

// TOML text: comment lines written here, every value formatted by toml++.
class TomlWriter {
 public:
  void line(const std::string& comment) { text_ += "# " + comment + "\n"; }
  void section(const std::string& name) { text_ += "\n[" + name + "]\n"; }
  template <class V>
  void key(const std::string& comment, const std::string& key, V&& value) {
    toml::table one;
    one.insert(key, std::forward<V>(value));
    std::ostringstream s;
    s << toml::toml_formatter{one};
    line(comment);
    text_ += s.str() + "\n";
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

toml::array string_array(std::initializer_list<const char*> items) {
  toml::array a;
  for (const char* s : items) a.push_back(s);
  return a;
}

std::string train_toml(const PlanFile& f, const TitanPlan& t, const ExportOptions& opt) {
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  const ModelSpec& m = f.model;
  const bool moe = m.moe.enabled();
  TomlWriter w;
  w.line("torchtitan v0.2.2 job config (JobConfig, torchtitan/config/job_config.py at pytorch/torchtitan 73a0e697; L = its");
  w.line("line), written by llmplan export for " + m.name + " on " + num(p.world_size()) + " GPUs (" + f.cluster.gpu.name + ").");
  w.line("Run with launch.sh beside it (torchrun -m torchtitan.train --job.config_file train.toml, as run_train.sh).");

  w.section("job");
  w.key("what the run is called in its logs (L25)", "description",
        "llmplan: " + m.name + " dp" + num(p.dp) + " tp" + num(p.tp) + " pp" + num(p.pp) + " cp" + num(p.cp) + " ep" + num(p.ep));
  w.key("folder for checkpoints, traces and logs (L22)", "dump_folder", "./outputs");

  w.section("model");
  w.key(std::string("model family, torchtitan/models/") + t.flavor->model + " (L101)", "name", t.flavor->model);
  w.key(std::string("the family's shape (L104; models/") + t.flavor->model + "/__init__.py \"" + t.flavor->flavor + "\": " +
            num(t.flavor->layers) + " layers, dim " + num(t.flavor->hidden) + ", " + num(t.flavor->heads) + "/" + num(t.flavor->kv_heads) +
            " heads, MLP " + num(t.flavor->ffn_hidden) + (moe ? " per expert" : "") + ")",
        "flavor", t.flavor->flavor);
  w.key("tokenizer and Hugging Face assets (L107; placeholder unless given)", "hf_assets_path", opt.tokenizer);
  if (j.fp8 == Fp8Recipe::tensorwise)
    w.key("float8 linear layers through torchao (L118; registered name: components/quantization/float8.py L238)", "converters",
          string_array({"quantize.linear.float8"}));
  if (j.fp8 == Fp8Recipe::mxfp8) {
    if (moe)
      w.key("MXFP8 linear layers and expert GEMMs through torchao (L118; components/quantization/mx.py L171-172)", "converters",
            string_array({"quantize.linear.mx", "quantize.grouped_mm.mx"}));
    else
      w.key("MXFP8 linear layers through torchao (L118; components/quantization/mx.py L171)", "converters", string_array({"quantize.linear.mx"}));
  }

  w.section("optimizer");
  w.key("AdamW (L135; components/optimizer.py L314-319)", "name", "AdamW");

  w.section("training");
  const int64_t local = p.pp > 1 ? static_cast<int64_t>(p.micro_batch) * p.grad_accum : p.micro_batch;
  w.key(p.pp > 1 ? "sequences per data-parallel rank per step, split into pipeline micro-batches (L253)"
                 : "sequences per data-parallel rank per micro-batch (L253)",
        "local_batch_size", local);
  w.key("sequences per optimizer step; gradient accumulation = global / (local * dp) (L256; train.py L196-214)", "global_batch_size",
        j.global_batch);
  w.key("tokens per sequence (L261)", "seq_len", j.seq_len);
  w.key("optimizer steps to run (L267; not part of the plan)", "steps", static_cast<int64_t>(opt.train_steps));
  w.key(p.zero == 3 ? "FSDP's parameter dtype for compute (L282; MixedPrecisionPolicy)"
                    : "autocast dtype under DDP (L282; distributed/utils.py maybe_enable_amp L243-263)",
        "mixed_precision_param", j.precision == Precision::bf16 ? "bfloat16" : "float32");
  w.key("gradient reduction dtype (L290)", "mixed_precision_reduce", "float32");
  if (p.offload_params)
    w.key("FSDP's CPUOffloadPolicy: parameter shards, gradients and optimizer states in host memory, the step on the CPU "
          "(L270; models/llama3/infra/parallelize.py L316-317)",
          "enable_cpu_offload", true);
  w.key("dataset name (L244; c4 reads the C4 layout)", "dataset", "c4");
  w.key("where it is (L247; placeholder unless given)", "dataset_path", opt.data_path);

  w.section("parallelism");
  w.key(p.zero == 0 ? "DDP: weights replicated over the data-parallel ranks, ZeRO-0 (L313)"
                    : "no replication beside the sharding (L313; > 1 with sharding would be HSDP)",
        "data_parallel_replicate_degree", static_cast<int64_t>(p.zero == 0 ? p.dp : 1));
  w.key(p.zero == 3 ? "FSDP2 over the data-parallel ranks: weights, gradients and optimizer states sharded, ZeRO-3 (L324)"
                    : "no sharding (L324; -1 would take the leftover ranks)",
        "data_parallel_shard_degree", static_cast<int64_t>(p.zero == 3 ? p.dp : 1));
  if (p.zero == 3)
    w.key(p.pp > 1 ? "free gathered weights after each forward, as ZeRO-3 (L336; \"default\" keeps them under PP: "
                     "models/llama3/infra/parallelize.py L319-327)"
                   : "free gathered weights after forward except the root unit's (L336; models/llama3/infra/parallelize.py L319-354)",
          "fsdp_reshard_after_forward", p.pp > 1 ? "always" : "default");
  w.key(p.tp > 1 ? "tensor-parallel ranks, with sequence parallel on the norms (L351; models/llama3/infra/parallelize.py L161-235)"
                 : "tensor-parallel ranks (L351)",
        "tensor_parallel_degree", static_cast<int64_t>(p.tp));
  w.key("pipeline ranks (L360)", "pipeline_parallel_degree", static_cast<int64_t>(p.pp));
  if (p.pp > 1) {
    const char* schedule = torchtitan_schedule(p.schedule)->name;  // zb-h1 was refused above
    w.key("pipeline schedule (L396; torch.distributed.pipelining get_schedule_class)", "pipeline_parallel_schedule", schedule);
    w.key("sequences per pipeline micro-batch: local_batch_size / it micro-batches per step (L412; "
          "distributed/pipeline_parallel.py L186-194)",
          "pipeline_parallel_microbatch_size", static_cast<int64_t>(p.micro_batch));
    if (t.explicit_stage_layers.empty()) {
      w.key("layers the embedding counts as in the stage split (L377; pipeline_parallel.py generate_llm_fqn_per_model_part)",
            "pipeline_parallel_first_stage_less_layers", static_cast<int64_t>(t.first_less));
      w.key("layers the final norm and output count as (L383)", "pipeline_parallel_last_stage_less_layers", static_cast<int64_t>(t.last_less));
      if (t.layers_per_stage > 0)
        w.key("layers per virtual stage: " + num(p.pp * p.vpp) + " stages, " + num(p.vpp) + " per rank (L389; pipeline_parallel.py L72-92)",
              "pipeline_parallel_layers_per_stage", static_cast<int64_t>(t.layers_per_stage));
    } else {
      toml::array parts;
      int layer = 0;
      const int stages = static_cast<int>(t.explicit_stage_layers.size());
      for (int s = 0; s < stages; ++s) {
        toml::array part;
        if (s == 0) part.push_back("tok_embeddings");
        for (int k = 0; k < t.explicit_stage_layers[static_cast<size_t>(s)]; ++k) part.push_back("layers." + num(layer++));
        if (s == stages - 1) {
          part.push_back("norm");
          part.push_back("output");
        }
        parts.push_back(std::move(part));
      }
      w.key("the modules of each virtual stage, llmplan's " + std::string(to_string(p.pipeline_split)) +
                " split (L367; torchtitan's generator places a remainder on the first stages)",
            "module_fqns_per_model_part", std::move(parts));
    }
  }
  w.key("context-parallel ranks (L428)", "context_parallel_degree", static_cast<int64_t>(p.cp));
  if (p.cp > 1)
    w.key(p.cp_exchange == CpExchange::all_gather ? "K/V all-gathered before attention (L446)"
                                                  : "K/V passed around the ring of CP ranks, shard by shard (L446; all-to-all rotation)",
          "context_parallel_rotate_method", p.cp_exchange == CpExchange::all_gather ? "allgather" : "alltoall");
  if (moe) {
    w.key("expert-parallel ranks, taken from the FSDP ranks (L454; parallel_dims.py L201)", "expert_parallel_degree", static_cast<int64_t>(p.ep));
    w.key("experts are not tensor-parallel (L464)", "expert_tensor_parallel_degree", int64_t{1});
  }

  w.section("activation_checkpoint");
  switch (p.recompute) {
    case Recompute::none: w.key("keep every activation (L652)", "mode", "none"); break;
    case Recompute::selective:
      w.key("selective recompute (L652)", "mode", "selective");
      w.key("per-op SAC: save matmuls (every other), attention and reductions, recompute the rest (L655; "
            "distributed/activation_checkpoint.py _apply_op_sac)",
            "selective_ac_option", "op");
      break;
    case Recompute::full: w.key("recompute every transformer block (L652)", "mode", "full"); break;
    case Recompute::full_k:
      w.key("layer SAC (L652)", "mode", "selective");
      w.key("checkpoint every " + num(t.ac_every) + "-th block of a stage: " + num(p.recompute_layers) +
                " per stage, llmplan's full_k (L655; distributed/activation_checkpoint.py L24-40)",
            "selective_ac_option", num(t.ac_every));
      break;
  }

  w.section("compile");
  w.key("torch.compile off, as llmplan's torchtitan stack is costed (L722)", "enable", false);

  if (j.fp8 == Fp8Recipe::tensorwise) {
    w.section("quantize.linear.float8");
    w.key("torchao Float8LinearConfig recipe: one scale per tensor from its current amax (L738)", "recipe_name", "tensorwise");
    w.key("the output layer stays 16-bit, as planned (L741; components/quantization/utils.py module_filter_fn)", "filter_fqns",
          string_array({"output"}));
  }
  if (j.fp8 == Fp8Recipe::mxfp8) {
    w.section("quantize.linear.mx");
    w.key("MXFP8 with cuBLAS kernels: 1x32 blocks, E8M0 scales (L777)", "recipe_name", "mxfp8_cublas");
    w.key(moe ? "the output layer and the router stay 16-bit, as planned (L784)" : "the output layer stays 16-bit, as planned (L784)",
          "filter_fqns", moe ? string_array({"output", "router.gate"}) : string_array({"output"}));
    if (moe) {
      w.section("quantize.grouped_mm.mx");
      w.key("MXFP8 grouped GEMMs for the experts (L795)", "recipe_name", "mxfp8");
      w.key("the routed experts' modules (L802)", "fqns", string_array({"experts"}));
    }
  }
  if (j.mode == TrainMode::finetune) {
    w.section("checkpoint");
    w.key("the pretrained checkpoint to start from (L522; placeholder)", "initial_load_path", "/path/to/base_checkpoint");
    w.key("load its weights only, no optimizer state or step (L538)", "initial_load_model_only", true);
  }
  return w.text();
}

std::string launch_script(const PlanFile& f, const ExportOptions& opt, std::vector<std::string>* notes) {
  const int world = f.plan.world_size();
  int nodes = f.cluster.nodes, per_node = f.cluster.gpus_per_node;
  if (nodes * per_node != world) {
    nodes = nodes_for(world, per_node);
    if (world % nodes == 0) per_node = world / nodes;
    notes->push_back("the plan uses " + num(world) + " of the cluster's " + num(f.cluster.nodes * f.cluster.gpus_per_node) +
                     " GPUs: launch.sh starts " + num(per_node) + " per node on " + num(nodes) + " nodes");
  }
  const std::string entry = opt.entry_point.empty() ? std::string(kDefaultModule) : opt.entry_point;
  const bool script = entry.ends_with(".py");
  std::ostringstream s;
  s << "#!/usr/bin/env bash\n"
    << "# " << f.model.name << " on " << nodes << " node(s) x " << per_node << " GPUs with torchtitan v0.2.2: torchrun starts\n"
    << "# " << entry << " on every GPU with train.toml beside this script (torchtitan's run_train.sh line).\n"
    << "# Run it from the torchtitan checkout" << (nodes > 1 ? ", on every node, with MASTER_ADDR set to the first node" : "") << ".\n"
    << "set -euo pipefail\n"
    << "HERE=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\"\n"
    << "# the allocator setting run_train.sh uses\n"
    << "export PYTORCH_ALLOC_CONF=\"expandable_segments:True\"\n\n"
    << "TORCHRUN_ARGS=(\n"
    << "  # nodes (torch/distributed/run.py --nnodes)\n  --nnodes " << nodes << "\n"
    << "  # processes, one per GPU, per node (--nproc_per_node)\n  --nproc_per_node " << per_node << "\n";
  if (nodes > 1)
    s << "  # rendezvous of the nodes (--rdzv_backend, --rdzv_endpoint)\n"
      << "  --rdzv_backend c10d --rdzv_endpoint \"${MASTER_ADDR:-localhost}:${MASTER_PORT:-29500}\"\n";
  s << ")\n\n";
  s << "torchrun \"${TORCHRUN_ARGS[@]}\" " << (script ? "" : "-m ") << entry << " --job.config_file \"$HERE/" << kConfigName << "\"\n";
  return s.str();
}

// ---------------------------------------------------------------- import

bool is_field(const std::string& path) {
  return std::any_of(std::begin(kFields), std::end(kFields), [&](const TorchtitanField& f) { return path == f.path; });
}
bool is_section(const std::string& path) {
  return std::any_of(std::begin(kSections), std::end(kSections), [&](const char* s) { return path == s; });
}

std::string node_text(const toml::node& n) {
  std::ostringstream s;
  s << toml::toml_formatter{n};
  std::string out = s.str();
  if (out.size() > 40) out = out.substr(0, 37) + "...";
  return out;
}

// The TOML document with the reads llmplan makes: typed, range-checked, each failure naming
// the file, the line and the key; every leaf llmplan does not read is listed afterwards.
class TitanConfig {
 public:
  TitanConfig(toml::table root, std::string file) : root_(std::move(root)), file_(std::move(file)) {}

  toml::table& root() { return root_; }
  const std::string& file() const { return file_; }

  Status bad(const std::string& path, const std::string& expected_and_got) const {
    const toml::node* n = root_.at_path(path).node();
    const std::string where = n && n->source().begin.line > 0 ? ": line " + num(n->source().begin.line) : "";
    return Status::bad_input(file_ + where + ": field '" + path + "': " + expected_and_got);
  }

  // Rejects a key outside torchtitan's JobConfig unless a custom config module may define it.
  Status check_schema(bool custom_module, std::vector<std::string>* unknown) const { return walk(root_, "", custom_module, unknown); }

  const toml::node* get(const std::string& path) {
    used_.insert(path);
    return root_.at_path(path).node();
  }
  Result<std::optional<int64_t>> integer(const std::string& path, int64_t min, int64_t max) {
    const toml::node* n = get(path);
    if (n == nullptr) return std::optional<int64_t>();
    std::optional<int64_t> v = n->value<int64_t>();
    if (!n->is_integer() || !v || *v < min || *v > max)
      return bad(path, "expected an integer in [" + num(min) + ", " + num(max) + "], got " + node_text(*n));
    return v;
  }
  Result<std::optional<std::string>> string(const std::string& path) {
    const toml::node* n = get(path);
    if (n == nullptr) return std::optional<std::string>();
    if (!n->is_string()) return bad(path, "expected a string, got " + node_text(*n));
    return std::optional<std::string>(*n->value<std::string>());
  }
  Result<std::optional<bool>> boolean(const std::string& path) {
    const toml::node* n = get(path);
    if (n == nullptr) return std::optional<bool>();
    if (!n->is_boolean()) return bad(path, "expected true or false, got " + node_text(*n));
    return std::optional<bool>(*n->value<bool>());
  }
  Result<std::optional<std::vector<std::string>>> strings(const std::string& path) {
    const toml::node* n = get(path);
    if (n == nullptr) return std::optional<std::vector<std::string>>();
    std::vector<std::string> out;
    if (n->is_string()) out.push_back(*n->value<std::string>());  // list[str] | str fields
    else if (const toml::array* a = n->as_array()) {
      for (const toml::node& e : *a) {
        if (!e.is_string()) return bad(path, "expected a list of strings, got " + node_text(*n));
        out.push_back(*e.value<std::string>());
      }
    } else {
      return bad(path, "expected a list of strings, got " + node_text(*n));
    }
    return std::optional<std::vector<std::string>>(std::move(out));
  }

  // Leaves not read, in key order (toml++ tables are sorted), except the keys llmplan's export writes with fixed
  // values (`quiet`).
  void unread(const std::set<std::string>& quiet, std::vector<std::string>* out) const { unread(root_, "", quiet, out); }

 private:
  Status walk(const toml::table& t, const std::string& prefix, bool custom_module, std::vector<std::string>* unknown) const {
    for (auto&& [k, v] : t) {
      const std::string path = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      if (is_section(path)) {
        const toml::table* sub = v.as_table();
        if (sub == nullptr) return bad(path, "expected a table (a JobConfig section), got " + node_text(v));
        if (Status st = walk(*sub, path, custom_module, unknown); !st) return st;
      } else if (!is_field(path)) {
        if (!custom_module)
          return bad(path, "not a torchtitan v0.2.2 JobConfig field (torchtitan refuses it: \"Invalid field names\", "
                           "torchtitan/config/manager.py L160-171; job_config.py)");
        unknown->push_back(path);
        skip_.insert(path);
      }
    }
    return Status::ok();
  }
  void unread(const toml::table& t, const std::string& prefix, const std::set<std::string>& quiet, std::vector<std::string>* out) const {
    for (auto&& [k, v] : t) {
      const std::string path = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      if (skip_.count(path)) continue;
      if (const toml::table* sub = v.as_table(); sub && is_section(path)) unread(*sub, path, quiet, out);
      else if (!used_.count(path) && !quiet.count(path)) out->push_back(path);
    }
  }

  toml::table root_;
  std::string file_;
  std::set<std::string> used_;
  mutable std::set<std::string> skip_;
};

// A CLI override from the launch line (--section.key value / --section.key=value, tyro's
// form; the command line wins over the TOML: run_train.sh "$@"), set into the document.
Status apply_override(TitanConfig* c, const std::string& path, const std::optional<std::string>& value, const std::string& script_file,
                      int line) {
  std::string key = path;
  std::optional<std::string> v = value;
  const size_t dot = key.rfind('.');
  if (!v && dot != std::string::npos && key.compare(dot + 1, 3, "no-") == 0) {  // tyro's --x.no-flag
    key = key.substr(0, dot + 1) + key.substr(dot + 4);
    v = "false";
  }
  std::replace(key.begin(), key.end(), '-', '_');
  if (!is_field(key))
    return Status::bad_input(script_file + ": line " + num(line) + ": --" + path + ": not a torchtitan v0.2.2 JobConfig field "
                             "(torchtitan/config/job_config.py)");
  toml::table* t = &c->root();
  size_t start = 0;
  for (size_t d = key.find('.'); d != std::string::npos; start = d + 1, d = key.find('.', start)) {
    const std::string part = key.substr(start, d - start);
    if (!t->contains(part)) t->insert(part, toml::table{});
    t = (*t)[part].as_table();
    if (t == nullptr) return Status::bad_input(c->file() + ": field '" + key.substr(0, d) + "': expected a table");
  }
  const std::string leaf = key.substr(start);
  const std::string text = v.value_or("true");
  try {
    toml::table parsed = toml::parse("v = " + text);
    parsed.get("v")->visit([&](auto&& node) { t->insert_or_assign(leaf, node); });
  } catch (const toml::parse_error&) {
    t->insert_or_assign(leaf, text);  // a bare word: a string (schedule names, flavors)
  }
  return Status::ok();
}

}  // namespace

std::span<const TorchtitanField> torchtitan_job_config_fields() { return kFields; }
std::span<const char* const> torchtitan_job_config_sections() { return kSections; }
std::span<const TorchtitanFlavor> torchtitan_flavors() { return kFlavors; }

Result<ExportResult> export_torchtitan(const PlanFile& f, const ExportOptions& opt) {
  Result<TitanPlan> t = titan_plan(f);
  if (!t) return t.status();
  ExportResult r;
  r.files.push_back({kConfigName, train_toml(f, *t, opt), false});
  r.files.push_back({kScriptName, launch_script(f, opt, &r.notes), true});
  r.notes.push_back(std::string("train.toml's model.hf_assets_path and training.dataset_path are ") +
                    (opt.tokenizer == ExportOptions{}.tokenizer ? "placeholders to replace" : "as given"));
  if (f.model.max_positions != t->flavor->max_seq_len)
    r.notes.push_back("torchtitan's " + std::string(t->flavor->model) + " " + t->flavor->flavor +
                      " has the shape of " + f.model.name + "; its context length is training.seq_len (args.py update_from_config)");
  return r;
}

Result<ImportedConfig> import_torchtitan(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin) {
  const LaunchFile* config = nullptr;
  const LaunchFile* script = nullptr;
  for (const LaunchFile& f : files) {
    if (f.name.ends_with(".toml")) {
      if (config == nullptr || f.name == kConfigName) config = &f;
    } else if (f.name == kScriptName || (script == nullptr && (f.name.ends_with(".sh") || f.text.find("torchrun") != std::string::npos))) {
      script = &f;
    }
  }
  if (config == nullptr) return Status::bad_input(origin + ": no torchtitan job config (expected a .toml file)");
  const std::string config_file = file_origin(origin, config->name);
  ImportedConfig out;
  std::vector<std::string>& notes = out.notes;

  toml::table root;
  try {
    root = toml::parse(config->text, config_file);
  } catch (const toml::parse_error& e) {
    return Status::bad_input(config_file + ": line " + num(e.source().begin.line) + ": malformed TOML: " + std::string(e.description()) +
                             " (expected a torchtitan job config)");
  }
  TitanConfig c(std::move(root), config_file);

  // The launch line: GPUs, and the command line's overrides of the TOML.
  std::optional<shell::LaunchLine> launch;
  std::string script_file;
  if (script != nullptr) {
    script_file = file_origin(origin, script->name);
    Result<shell::Script> parsed = shell::read_shell_script(script->text, script_file);
    if (!parsed) return parsed.status();
    Result<std::optional<shell::LaunchLine>> l = shell::find_launch_line(parsed->commands, script_file);
    if (!l) return l.status();
    launch = *l;
    if (!launch) notes.push_back(script->name + " has no torchrun line: read " + config->name + " alone");
  }
  if (launch) {
    for (const std::string& u : launch->unused) out.unknown_keys.push_back(u);
    for (size_t k = 0; k < launch->args.size(); ++k) {
      shell::OptionWord o = shell::split_option_word(launch->args[k]);
      if (o.name.rfind("--", 0) != 0) {
        out.unknown_keys.push_back(launch->args[k]);
        continue;
      }
      std::optional<std::string> value;
      if (o.has_value) value = o.value;
      else if (k + 1 < launch->args.size() && launch->args[k + 1].rfind("--", 0) != 0) value = launch->args[++k];
      const std::string path = o.name.substr(2);
      if (path == "job.config_file") {
        if (value && shell::file_name(*value) != config->name)
          notes.push_back(script->name + " names " + *value + " as its config; read " + config->name + " beside it");
        continue;
      }
      if (Status st = apply_override(&c, path, value, script_file, launch->line); !st) return st;
    }
  }

  // Keys outside JobConfig: torchtitan refuses them unless a custom config module adds fields.
  std::optional<std::string> custom;
  for (const char* k : {"job.custom_config_module", "experimental.custom_args_module"}) {
    const toml::node* n = c.root().at_path(k).node();
    if (n && n->is_string() && !n->value<std::string>()->empty()) custom = *n->value<std::string>();
  }
  if (Status st = c.check_schema(custom.has_value(), &out.unknown_keys); !st) return st;
  if (custom) notes.push_back("custom config module " + *custom + ": its fields are listed, not read");

  // ---- the model
  Result<std::optional<std::string>> name = c.string("model.name");
  if (!name) return name.status();
  Result<std::optional<std::string>> flavor_name = c.string("model.flavor");
  if (!flavor_name) return flavor_name.status();
  const std::string model_name = name->value_or("llama3"), flavor = flavor_name->value_or("debugmodel");
  const TorchtitanFlavor* fl = nullptr;
  std::string base = flavor;
  for (const char* suffix : {"_flex", "_varlen"})
    if (base.ends_with(suffix) && model_name == "llama3") {
      base = base.substr(0, base.size() - std::string(suffix).size());
      notes.push_back("flavor " + flavor + " is " + base + " with " + std::string(suffix + 1) + " attention (the same shape)");
    }
  for (const TorchtitanFlavor& f : kFlavors)
    if (model_name == f.model && base == f.flavor) fl = &f;
  const PresetRegistry& reg = *opt.presets;
  PlanFile& pf = out.file;
  Result<std::optional<int64_t>> seq = c.integer("training.seq_len", 1, int64_t{1} << 24);
  if (!seq) return seq.status();
  const int64_t seq_len = seq->value_or(2048);  // job_config.py L261
  if (!opt.model.empty()) {
    Result<ModelSpec> m = reg.resolve_model(opt.model, "--model");
    if (!m) return m.status();
    pf.model = *m;
    if (fl) {
      if (std::optional<ShapeMismatch> d = shape_mismatch(flavor_shape(*fl), pf.model))
        return c.bad("model.flavor", model_name + " " + flavor + " has " + d->field + " " + d->stated + ", but --model " + opt.model +
                                         " has " + d->model);
    } else {
      notes.push_back("model " + model_name + " " + flavor + " is not in llmplan's table of torchtitan flavors: --model " + opt.model +
                      " taken unchecked");
    }
  } else if (fl) {
    const std::vector<std::string> ids = presets_with_shape(reg, flavor_shape(*fl));
    std::string pick;
    for (const std::string& id : ids) {
      Result<ModelSpec> m = reg.model(id);
      if (m && m->max_positions >= seq_len) {
        pick = id;
        break;
      }
    }
    if (pick.empty() && !ids.empty()) pick = ids[0];
    if (!pick.empty()) {
      pf.model = *reg.model(pick);
      std::string others;
      for (const std::string& id : ids)
        if (id != pick) others += (others.empty() ? "" : ", ") + id;
      notes.push_back("model " + pick + ": the preset with " + model_name + " " + flavor + "'s shape" +
                      (others.empty() ? std::string() : " (the first whose context holds seq_len; also " + others + ": --model chooses)"));
    } else {
      ModelSpec m;
      m.name = "torchtitan-" + model_name + "-" + base;
      m.source = "torchtitan v0.2.2 torchtitan/models/" + model_name + "/__init__.py flavor " + base;
      m.family = Family::llama;
      m.layers = fl->layers, m.hidden = fl->hidden, m.heads = fl->heads, m.kv_heads = fl->kv_heads, m.head_dim = fl->head_dim;
      m.ffn_hidden = fl->ffn_hidden, m.vocab = fl->vocab, m.max_positions = fl->max_seq_len, m.tied_embeddings = fl->tied;
      m.qk_norm = fl->qk_norm;
      if (fl->experts > 0) m.moe = MoeSpec{fl->experts, fl->experts_per_token, fl->ffn_hidden, 0, 1.0};
      pf.model = m;
      notes.push_back("model " + m.name + ": no preset has the flavor's shape; built from the flavor");
    }
  } else {
    return c.bad("model.flavor", "expected a flavor llmplan knows the shape of (llama3: 8B, 70B, 405B; qwen3: 0.6B to 235B-A22B, "
                                 "from torchtitan/models/*/__init__.py), or --model, got " + model_name + " " + flavor);
  }
  const ModelSpec& m = pf.model;
  const bool moe = m.moe.enabled();

  // ---- the GPUs
  Result<ClusterSpec> cluster = reg.cluster_for_gpu(opt.gpu.empty() ? "h100-sxm" : opt.gpu);
  if (!cluster) return cluster.status();
  ClusterSpec cl = *cluster;
  if (opt.gpus_per_node > 0) cl.gpus_per_node = opt.gpus_per_node;
  else if (launch && launch->gpus_per_node) cl.gpus_per_node = *launch->gpus_per_node;
  int world = cl.gpus_per_node;
  if (launch && (launch->nodes || launch->gpus_per_node)) {
    cl.nodes = launch->nodes.value_or(1);
    world = cl.nodes * cl.gpus_per_node;
  } else {
    cl.nodes = 1;
    notes.push_back("no launch line: one node of " + num(cl.gpus_per_node) + " GPUs (run_train.sh's NGPU default is 8; "
                    "--gpus-per-node changes it)");
  }

  // ---- parallel sizes (distributed/parallel_dims.py L35-59)
  ParallelPlan& p = pf.plan;
  TrainingJob& j = pf.job;
  auto degree = [&](const char* key, int64_t dflt, int64_t min) -> Result<int64_t> {
    Result<std::optional<int64_t>> v = c.integer(std::string("parallelism.") + key, min, 1 << 20);
    if (!v) return v.status();
    return v->value_or(dflt);
  };
  Result<int64_t> replicate = degree("data_parallel_replicate_degree", 1, 1), shard = degree("data_parallel_shard_degree", -1, -1),
                  tp = degree("tensor_parallel_degree", 1, 1), pp = degree("pipeline_parallel_degree", 1, 1),
                  cp = degree("context_parallel_degree", 1, 1), ep = degree("expert_parallel_degree", 1, 1),
                  etp = degree("expert_tensor_parallel_degree", 1, 1);
  for (const Result<int64_t>* r : {&replicate, &shard, &tp, &pp, &cp, &ep, &etp})
    if (!*r) return r->status();
  if (*shard == 0) return c.bad("parallelism.data_parallel_shard_degree", "expected -1 or a positive integer (parallel_dims.py L48), got 0");
  const int64_t others = *replicate * *cp * *tp * *pp;
  int64_t dp_shard = *shard;
  if (dp_shard < 0) {
    if (world % others != 0)
      return c.bad("parallelism.data_parallel_shard_degree", "-1 takes the ranks left over, but " + num(world) +
                                                                 " GPUs are not a multiple of replicate * cp * tp * pp = " + num(others));
    dp_shard = world / others;
  } else if (dp_shard * others != world) {
    if (launch && (launch->nodes || launch->gpus_per_node))
      return c.bad("parallelism.data_parallel_shard_degree", "expected replicate * shard * cp * tp * pp = the launch's " + num(world) +
                                                                 " GPUs (parallel_dims.py L53-55), got " + num(dp_shard * others));
    world = static_cast<int>(dp_shard * others);
    cl = cluster_with_gpus(cl, world);
    notes.push_back(num(world) + " GPUs: the product of the parallel degrees");
  }
  if (*replicate > 1 && (dp_shard > 1 || *cp > 1))
    return c.bad("parallelism.data_parallel_replicate_degree", "expected 1 with sharding: HSDP (replicas of FSDP groups) shards "
                                                                "over part of the data-parallel ranks, which llmplan's ZeRO does not "
                                                                "model, got " + num(*replicate));
  if (*replicate > 1 && (*tp > 1 || *pp > 1))
    return c.bad("parallelism.data_parallel_replicate_degree", "DDP with tp or pp > 1: torchtitan refuses it (\"DDP has not "
                                                                "supported > 1D parallelism\", models/llama3/infra/parallelize.py)");
  p.tp = static_cast<int>(*tp), p.pp = static_cast<int>(*pp), p.cp = static_cast<int>(*cp);
  const bool fsdp = dp_shard > 1 || *cp > 1;  // parallel_dims.py L334-335
  p.dp = static_cast<int>(fsdp ? dp_shard : *replicate);
  p.zero = fsdp ? 3 : 0;
  p.sp = p.tp > 1;
  if (fsdp) {
    Result<std::optional<std::string>> reshard = c.string("parallelism.fsdp_reshard_after_forward");
    if (!reshard) return reshard.status();
    const std::string r = reshard->value_or("default");
    if (r != "default" && r != "always" && r != "never")
      return c.bad("parallelism.fsdp_reshard_after_forward", "expected default, always or never (job_config.py L336), got " + r);
    if (r == "never" || (r == "default" && p.pp > 1))
      notes.push_back("fsdp_reshard_after_forward " + r + (p.pp > 1 ? " under PP" : "") +
                      ": the gathered weights stay until backward, more than llmplan's ZeRO-3 keeps");
  }
  Result<std::optional<bool>> cpu_offload = c.boolean("training.enable_cpu_offload");
  if (!cpu_offload) return cpu_offload.status();
  // FSDP's CPUOffloadPolicy: parameters, gradients and optimizer states on the host (the
  // plan's optimizer and parameter offload), under FSDP only.
  const bool cpu_offloaded = cpu_offload->value_or(false);
  if (cpu_offloaded && p.zero != 3)
    return c.bad("training.enable_cpu_offload", "expected false without FSDP (data_parallel_shard_degree or "
                                                "context_parallel_degree above 1): CPUOffloadPolicy is FSDP's");
  if (moe) {
    p.ep = static_cast<int>(*ep);
    if (p.tp > 1)
      return c.bad("parallelism.tensor_parallel_degree", "expected 1 on a mixture of experts: torchtitan shards the experts over "
                                                         "the TP ranks or folds them into the expert groups (parallel_dims.py L59, "
                                                         "L201), while llmplan keeps each expert whole on its EP rank, got " + num(p.tp));
    if (p.ep > 1 && !fsdp)
      return c.bad("parallelism.expert_parallel_degree", "expected 1 without FSDP: torchtitan takes the expert-parallel ranks from "
                                                         "dp_shard * cp (parallel_dims.py L201), got " + num(p.ep));
    if (p.ep > 1 && *etp != 1)
      return c.bad("parallelism.expert_tensor_parallel_degree", "expected 1: llmplan keeps each expert whole on its EP rank, got " + num(*etp));
  } else if (*ep > 1) {
    notes.push_back("expert_parallel_degree " + num(*ep) + " has no effect on a dense model (job_config.py L454)");
  }

  // ---- pipeline
  p.vpp = 1;
  p.schedule = Schedule::one_f_one_b;
  Result<std::optional<std::string>> sched = c.string("parallelism.pipeline_parallel_schedule");
  if (!sched) return sched.status();
  Result<std::optional<std::string>> csv = c.string("parallelism.pipeline_parallel_schedule_csv");
  if (!csv) return csv.status();
  Result<std::optional<int64_t>> micro_size = c.integer("parallelism.pipeline_parallel_microbatch_size", 1, 1 << 20);
  if (!micro_size) return micro_size.status();
  Result<std::optional<int64_t>> first_less = c.integer("parallelism.pipeline_parallel_first_stage_less_layers", 0, 10000);
  if (!first_less) return first_less.status();
  Result<std::optional<int64_t>> last_less = c.integer("parallelism.pipeline_parallel_last_stage_less_layers", 0, 10000);
  if (!last_less) return last_less.status();
  Result<std::optional<int64_t>> lps = c.integer("parallelism.pipeline_parallel_layers_per_stage", 1, 10000);
  if (!lps) return lps.status();
  const toml::node* fqns = c.get("parallelism.module_fqns_per_model_part");
  std::vector<int> stage_layers;
  if (p.pp > 1) {
    if (csv->has_value() && !(*csv)->empty())
      return c.bad("parallelism.pipeline_parallel_schedule_csv", "expected none: a schedule read from a CSV file is not one llmplan models");
    const std::string s = sched->value_or("1F1B");
    const ScheduleName* known = nullptr;
    for (const ScheduleName& k : kSchedules)
      if (lower(s) == lower(k.name)) known = &k;
    if (known == nullptr) {
      const bool other = std::any_of(std::begin(kOtherSchedules), std::end(kOtherSchedules), [&](const char* n) { return lower(s) == lower(n); });
      return c.bad("parallelism.pipeline_parallel_schedule",
                   std::string("expected 1F1B, GPipe, Interleaved1F1B, ZBVZeroBubble or DualPipeV (the schedules llmplan models), got ") + s +
                       (other ? " (a torch.distributed.pipelining schedule llmplan does not model)" : " (not a schedule name get_schedule_class knows)"));
    }
    p.schedule = known->schedule;
    const int in = static_cast<int>(first_less->value_or(1)), out_w = static_cast<int>(last_less->value_or(1));
    if (fqns != nullptr) {
      const toml::array* parts = fqns->as_array();
      if (parts == nullptr || parts->empty()) return c.bad("parallelism.module_fqns_per_model_part", "expected a list of lists of module names");
      int next = 0;
      for (const toml::node& part : *parts) {
        const toml::array* names = part.as_array();
        if (names == nullptr) return c.bad("parallelism.module_fqns_per_model_part", "expected a list of lists of module names");
        int count = 0;
        for (const toml::node& n : *names) {
          const std::optional<std::string> v = n.value<std::string>();
          if (!v) return c.bad("parallelism.module_fqns_per_model_part", "expected module names (strings)");
          if (v->rfind("layers.", 0) == 0) {
            if (*v != "layers." + num(next))
              return c.bad("parallelism.module_fqns_per_model_part", "expected the layers in order (layers." + num(next) + " next), got " + *v);
            ++next, ++count;
          }
        }
        stage_layers.push_back(count);
      }
      if (next != m.layers)
        return c.bad("parallelism.module_fqns_per_model_part", "expected all " + num(m.layers) + " layers, got " + num(next));
    } else {
      int stages = p.pp * (known->multi_stage ? 2 : 1);  // pipeline_parallel.py L110-115
      if (lps->has_value()) stages = static_cast<int>((m.layers + in + out_w + **lps - 1) / **lps);  // L72-77
      std::string why;
      stage_layers = torchtitan_stage_layers(stages, m.layers, in, out_w, &why);
      if (stage_layers.empty()) return c.bad("parallelism.pipeline_parallel_layers_per_stage", "torchtitan refuses the split: " + why);
    }
    const int stages = static_cast<int>(stage_layers.size());
    if (stages % p.pp != 0)
      return c.bad("parallelism.pipeline_parallel_layers_per_stage", "expected the stages (" + num(stages) + ") to be a multiple of "
                                                                     "pipeline_parallel_degree " + num(p.pp) + " (pipeline_parallel.py L85-92)");
    p.vpp = stages / p.pp;
    if (known->multi_stage != (p.vpp > 1))
      return c.bad("parallelism.pipeline_parallel_schedule", std::string(known->name) + (known->multi_stage ? " needs two or more " : " needs one ") +
                                                                 "stage per rank, got " + num(p.vpp) + " (pipeline_parallel.py L96-109)");
    // The split llmplan models that has these layer counts: its own, stage by stage, unless a
    // stage is empty or the schedule is a V (costed with equal chunks: check_plan).
    ParallelPlan q = p;
    set_split_from_counts(m.layers, stage_layers, {PipelineSplit::even, PipelineSplit::account_embedding_loss}, &q);
    const bool none_empty = std::all_of(stage_layers.begin(), stage_layers.end(), [](int n) { return n >= 1; });
    if (q.pipeline_split != PipelineSplit::custom || (none_empty && !v_shape(p.schedule))) {
      p = q;
    } else {
      p.pipeline_split = default_pipeline_split(m.layers, p.pp, p.vpp);
      std::string counts;
      for (int n : stage_layers) counts += (counts.empty() ? "" : ",") + num(n);
      notes.push_back("torchtitan's stage split (" + counts + " layers) " +
                      (none_empty ? std::string("is not one a V schedule runs (two equal chunks a rank)") : std::string("leaves a stage without layers")) +
                      ": costed as llmplan's " + to_string(p.pipeline_split) + " split");
    }
  }

  // ---- batch (train.py L196-214; pipeline_parallel.py L186-194)
  Result<std::optional<int64_t>> local_r = c.integer("training.local_batch_size", 1, 1 << 20);
  if (!local_r) return local_r.status();
  Result<std::optional<int64_t>> global_r = c.integer("training.global_batch_size", -1, int64_t{1} << 30);
  if (!global_r) return global_r.status();
  const int64_t local = local_r->value_or(8);  // job_config.py L253
  if (!local_r->has_value()) notes.push_back("training.local_batch_size 8 (torchtitan's default)");
  const int64_t batch_degree = p.zero == 3 ? dp_shard * *replicate : *replicate;
  int64_t global = global_r->value_or(-1);
  if (global == 0) return c.bad("training.global_batch_size", "expected -1 or a positive integer, got 0");
  if (global < 0) global = local * batch_degree;
  if (global % (local * batch_degree) != 0)
    return c.bad("training.global_batch_size", "expected a multiple of local_batch_size * data-parallel degree = " + num(local * batch_degree) +
                                                   " (train.py L201-208), got " + num(global));
  int64_t micro = local;
  if (p.pp > 1) {
    micro = micro_size->value_or(1);
    if (local % micro != 0)
      return c.bad("parallelism.pipeline_parallel_microbatch_size", "expected a divisor of training.local_batch_size " + num(local) +
                                                                        " (pipeline_parallel.py L186-194), got " + num(micro));
  }
  p.micro_batch = static_cast<int>(micro);
  p.grad_accum = static_cast<int>(global / (micro * batch_degree));
  j.global_batch = global;
  j.seq_len = seq_len;
  if (!seq->has_value()) notes.push_back("training.seq_len 2048 (torchtitan's default)");

  // ---- context parallel
  p.cp_exchange = CpExchange::all_gather;
  if (p.cp > 1) {
    Result<std::optional<std::string>> rotate = c.string("parallelism.context_parallel_rotate_method");
    if (!rotate) return rotate.status();
    const std::string r = rotate->value_or("allgather");  // job_config.py L446
    if (r == "allgather") p.cp_exchange = CpExchange::all_gather;
    else if (r == "alltoall") p.cp_exchange = CpExchange::ring;
    else return c.bad("parallelism.context_parallel_rotate_method", "expected allgather or alltoall (job_config.py L446), got " + r);
  }

  // ---- precision and FP8
  Result<std::optional<std::string>> mp = c.string("training.mixed_precision_param");
  if (!mp) return mp.status();
  const std::string param = mp->value_or("bfloat16");
  if (param != "bfloat16" && param != "float32")
    return c.bad("training.mixed_precision_param", "expected bfloat16 or float32 (job_config.py L282), got " + param);
  Result<std::optional<std::string>> mr = c.string("training.mixed_precision_reduce");
  if (!mr) return mr.status();
  if (mr->has_value() && **mr != "float32") return c.bad("training.mixed_precision_reduce", "expected float32 (job_config.py L290), got " + **mr);
  Result<std::optional<std::string>> dtype = c.string("training.dtype");
  if (!dtype) return dtype.status();
  j.precision = param == "bfloat16" ? Precision::bf16 : Precision::fp32;
  if (!fsdp && (p.tp > 1 || p.pp > 1)) {
    j.precision = Precision::fp32;
    notes.push_back("no FSDP with TP or PP: torchtitan turns mixed precision off and trains in float32 (distributed/utils.py "
                    "maybe_enable_amp L251-256)");
  }
  if (dtype->value_or("float32") == "bfloat16")
    notes.push_back("training.dtype bfloat16 keeps no fp32 master weights; llmplan costs bf16 training with them");
  Result<std::optional<std::vector<std::string>>> conv = c.strings("model.converters");
  if (!conv) return conv.status();
  j.fp8 = Fp8Recipe::none;
  bool linear_fp8 = false, linear_mx = false, grouped_mx = false;
  for (const std::string& cv : conv->value_or(std::vector<std::string>{})) {
    if (cv == "quantize.linear.float8") linear_fp8 = true;
    else if (cv == "quantize.linear.mx") linear_mx = true;
    else if (cv == "quantize.grouped_mm.mx") grouped_mx = true;
    else if (cv == "quantize.grouped_mm.float8")
      return c.bad("model.converters", "quantize.grouped_mm.float8 runs the experts in rowwise float8 (components/quantization/"
                                       "float8.py L176-235), a recipe llmplan does not model");
    else
      return c.bad("model.converters", "expected registered converters (quantize.linear.float8, quantize.linear.mx, "
                                       "quantize.grouped_mm.float8, quantize.grouped_mm.mx), got " + cv);
  }
  if (linear_fp8) {
    Result<std::optional<std::string>> recipe = c.string("quantize.linear.float8.recipe_name");
    if (!recipe) return recipe.status();
    if (recipe->has_value() && **recipe != "tensorwise")
      return c.bad("quantize.linear.float8.recipe_name", "expected tensorwise (llmplan models per-tensor current scaling; rowwise is "
                                                         "another recipe), got " + **recipe);
    if (moe)
      return c.bad("model.converters", "quantize.linear.float8 on a mixture of experts leaves the experts in 16-bit (it converts "
                                       "nn.Linear only), which llmplan's FP8 recipes do not describe");
    j.fp8 = Fp8Recipe::tensorwise;
  }
  if (linear_mx) {
    Result<std::optional<std::string>> recipe = c.string("quantize.linear.mx.recipe_name");
    if (!recipe) return recipe.status();
    if (recipe->value_or("mxfp8_cublas").rfind("mxfp8", 0) != 0)
      return c.bad("quantize.linear.mx.recipe_name", "expected an mxfp8 recipe, got " + **recipe);
    if (moe && !grouped_mx)
      return c.bad("model.converters", "quantize.linear.mx without quantize.grouped_mm.mx leaves the experts in 16-bit, which "
                                       "llmplan's mxfp8 recipe does not describe");
    if (linear_fp8) return c.bad("model.converters", "expected one float8 converter, got quantize.linear.float8 and quantize.linear.mx");
    j.fp8 = Fp8Recipe::mxfp8;
  }
  // The output layer: llmplan costs it in 16-bit; filter_fqns defaults: float8 none, mx
  // ["output"] (job_config.py L741, L784).
  struct Filter {
    const char* key;
    bool active;
    bool output_by_default;
  };
  for (const Filter& filter : {Filter{"quantize.linear.float8.filter_fqns", linear_fp8, false},
                               Filter{"quantize.linear.mx.filter_fqns", linear_mx, true}}) {
    if (!filter.active) continue;
    Result<std::optional<std::vector<std::string>>> fq = c.strings(filter.key);
    if (!fq) return fq.status();
    const std::vector<std::string> names = fq->value_or(filter.output_by_default ? std::vector<std::string>{"output"} : std::vector<std::string>{});
    if (std::find(names.begin(), names.end(), "output") == names.end())
      notes.push_back(std::string(filter.key) + " keeps the output layer in FP8; llmplan costs it in 16-bit");
  }
  if (grouped_mx) (void)c.strings("quantize.grouped_mm.mx.fqns");

  // ---- recompute (distributed/activation_checkpoint.py)
  Result<std::optional<std::string>> mode_r = c.string("activation_checkpoint.mode");
  if (!mode_r) return mode_r.status();
  Result<std::optional<std::string>> option_r = c.string("activation_checkpoint.selective_ac_option");
  if (!option_r) return option_r.status();
  const std::string mode = mode_r->value_or("selective"), option = option_r->value_or("2");  // job_config.py L652-655
  if (mode == "none") {
    p.recompute = Recompute::none;
  } else if (mode == "full") {
    p.recompute = Recompute::full;
  } else if (mode == "selective") {
    if (option == "op") {
      p.recompute = Recompute::selective;
    } else if (!option.empty() && option.size() <= 6 &&
               std::all_of(option.begin(), option.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      // Layer SAC: every n-th block a rank builds (L37-40: `not ac_freq or count % ac_freq
      // == 0`), so floor(stage layers / n) blocks of each stage.
      const int n = std::stoi(option);
      if (n <= 1) {
        p.recompute = Recompute::full;
      } else {
        std::set<int> ks;
        for (int s = 0; s < p.pp; ++s) ks.insert(pp_stage_layers(m.layers, p, s) / n);
        const int k = *ks.begin();
        if (k == 0) {
          p.recompute = Recompute::none;
          notes.push_back("selective_ac_option " + option + " checkpoints no block of a stage this short: no recompute");
        } else {
          p.recompute = Recompute::full_k;
          p.recompute_layers = k;
          notes.push_back("layer SAC every " + option + "-th block: costed as full recompute of " + num(k) + " blocks per stage (full_k)" +
                          (ks.size() > 1 || p.vpp > 1 ? std::string(", though the stages checkpoint different numbers") : std::string()));
        }
      }
    } else {
      return c.bad("activation_checkpoint.selective_ac_option", "expected 'op' or a positive integer (activation_checkpoint.py "
                                                                "L176-183), got " + option);
    }
  } else if (mode == "memory_budget") {
    return c.bad("activation_checkpoint.mode", "expected none, selective or full: memory_budget lets the compiler choose what to "
                                               "recompute, which llmplan does not model");
  } else {
    return c.bad("activation_checkpoint.mode", "expected none, selective, full or memory_budget (job_config.py L652), got " + mode);
  }
  p.flash_attention = true;  // SDPA, flex or varlen: no s x s scores kept
  p.offload_optimizer = p.offload_params = cpu_offloaded;
  p.activation_offload_layers = 0;

  // ---- job
  Result<std::optional<std::string>> opt_name = c.string("optimizer.name");
  if (!opt_name) return opt_name.status();
  const std::string on = opt_name->value_or("AdamW");
  if (on != "AdamW" && on != "Adam") return c.bad("optimizer.name", "expected Adam or AdamW (components/optimizer.py L314-319), got " + on);
  j.optimizer = Optimizer::adamw;
  Result<std::optional<std::string>> load = c.string("checkpoint.initial_load_path");
  if (!load) return load.status();
  Result<std::optional<bool>> model_only = c.boolean("checkpoint.initial_load_model_only");
  if (!model_only) return model_only.status();
  j.mode = load->has_value() && !(*load)->empty() && model_only->value_or(true) ? TrainMode::finetune : TrainMode::pretrain;
  if (j.mode == TrainMode::finetune) notes.push_back("checkpoint.initial_load_path with model-only loading: fine-tuning");

  // ---- the rest, listed
  static const std::set<std::string> kQuiet = {"job.description", "job.dump_folder", "model.hf_assets_path", "training.steps",
                                               "training.dataset", "training.dataset_path", "compile.enable"};
  c.unread(kQuiet, &out.unknown_keys);

  pf.cluster = cl;
  pf.gpus = world;
  if (static_cast<int64_t>(p.dp) * p.tp * p.pp * p.cp != world)
    return Status::bad_input(config_file + ": the parallel degrees use " + num(static_cast<int64_t>(p.dp) * p.tp * p.pp * p.cp) +
                             " GPUs, the launch " + num(world));
  if (Status st = check_inputs(m, j, config_file); !st) return st;
  if (Status st = check_plan_status(m, pf.cluster, j, p, pf.gpus, config_file); !st) return st;
  return out;
}

}  // namespace llmplan::launch_formats
