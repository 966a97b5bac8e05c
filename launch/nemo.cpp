// The nemo format (launch/launch.h): NeMo 2 recipe overrides, target NeMo v2.4.0 with
// Megatron-Core core_v0.13.0, and the same plan as Megatron-Bridge v0.6.0 overrides.
//
// Export writes two files:
//   nemo_overrides.sh             `nemo llm pretrain|finetune --factory <recipe> <overrides>`,
//                                 the NeMo-Run dotted overrides in a bash array, each with a
//                                 comment line above it naming the field and its source (an
//                                 array, because a comment line inside a backslash-continued
//                                 command would end the command)
//   megatron_bridge_overrides.txt the same plan as Megatron-Bridge Hydra overrides, one
//                                 key=value a line (docs/megatron-lm-to-megatron-bridge.md)
// Every plan field the recipe has a key for is written, the recipe's default or not, so that
// the files say the whole plan. The recipe is the model preset's NeMo recipe (kRecipes, by
// ModelSpec::name: export has no registry to compare shapes with); a model without one is
// refused naming it.
//
// Import reads such files back (the shell script through launch/shell_words.h, the Bridge
// file line by line): the factory names the model, the overrides the plan, and what is not
// overridden comes from the recipe's defaults where llmplan has the recipe verbatim
// (llama3_8b and llama3_70b, tests/fixtures/frameworks/nemo_llama3_*_recipe.py; kDefaults),
// else it must be given. Keys llmplan does not use are listed in unknown_keys; when both
// files are there, a plan field they set differently is bad input naming both keys.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "launch/formats.h"
#include "launch/megatron_family.h"
#include "launch/model_shape.h"
#include "launch/shell_words.h"
#include "planner/cost/plan_check.h"

namespace llmplan::launch_formats {

namespace {

std::string n(int64_t v) { return std::to_string(v); }

// ---------------------------------------------------------------- recipes

// The NeMo v2.4.0 recipes (nemo/collections/llm/recipes/<name>.py) llmplan writes for: the
// preset whose shape the recipe's model config has (checked against the config classes at
// v2.4.0), and whether the recipe module has a finetune_recipe (LoRA / full fine-tuning).
struct Recipe {
  const char* preset;
  const char* factory;
  const char* model_config;  // the class and where it is defined
  bool finetune;
};
constexpr Recipe kRecipes[] = {
    {"llama3-8b", "llama3_8b", "Llama3Config8B, gpt/model/llama.py L199-211", true},
    {"llama3-70b", "llama3_70b", "Llama3Config70B, gpt/model/llama.py L215-229", true},
    {"llama3.1-8b", "llama31_8b", "Llama31Config8B, gpt/model/llama.py L233-246", true},
    {"llama3.1-70b", "llama31_70b", "Llama31Config70B, gpt/model/llama.py L250-264", true},
    {"llama3.1-405b", "llama31_405b", "Llama31Config405B, gpt/model/llama.py L268-282", true},
    {"mixtral-8x7b", "mixtral_8x7b", "MixtralConfig8x7B, gpt/model/mixtral.py L97-107", true},
    {"qwen3-30b-a3b", "qwen3_30b_a3b", "Qwen3Config30B_A3B, gpt/model/qwen3.py L144-154", true},
    {"gpt3-175b", "gpt3_175b", "GPTConfig175B, gpt/model/base.py L536-545", false},
};

const Recipe* recipe_for_preset(const std::string& preset) {
  for (const Recipe& r : kRecipes)
    if (preset == r.preset) return &r;
  return nullptr;
}
const Recipe* recipe_named(const std::string& factory) {
  for (const Recipe& r : kRecipes)
    if (factory == r.factory) return &r;
  return nullptr;
}
std::string recipe_list() {
  std::string s;
  for (const Recipe& r : kRecipes) s += std::string(s.empty() ? "" : ", ") + r.factory + " (" + r.preset + ")";
  return s;
}

// ---------------------------------------------------------------- the keys

// Every plan setting both files carry, with its NeMo 2 key (nemo_overrides.sh) and its
// Megatron-Bridge key (megatron_bridge_overrides.txt; "" when Bridge has none).
enum class Key {
  num_nodes, devices, max_steps, tp, pp, vpp, cp, sp, ep, etp, account_embedding, account_loss, first_stage_layers,
  last_stage_layers, micro_batch, global_batch, data_seq, model_seq, recompute_granularity, recompute_method,
  recompute_layers, distributed_optimizer, bridge_ddp_distributed_optimizer, fsdp, sharding, average_in_collective,
  grad_accumulation_fusion, optimizer_offload, precision_aware_optimizer, optimizer_offload_fraction, optimizer,
  plugins, fp8, fp8_recipe, grad_reduce_fp32, mixed_precision, cp_comm_type, activation_offload, activation_offload_layers,
  activation_offload_weights, lora_dim, lora_alpha, lora_targets, kCount
};

struct KeyName {
  Key key;
  const char* nemo;
  const char* bridge;
};
constexpr KeyName kKeys[] = {
    {Key::num_nodes, "trainer.num_nodes", ""},
    {Key::devices, "trainer.devices", ""},
    {Key::max_steps, "trainer.max_steps", "train.train_iters"},
    {Key::tp, "trainer.strategy.tensor_model_parallel_size", "model.tensor_model_parallel_size"},
    {Key::pp, "trainer.strategy.pipeline_model_parallel_size", "model.pipeline_model_parallel_size"},
    {Key::vpp, "trainer.strategy.virtual_pipeline_model_parallel_size", "model.virtual_pipeline_model_parallel_size"},
    {Key::cp, "trainer.strategy.context_parallel_size", "model.context_parallel_size"},
    {Key::sp, "trainer.strategy.sequence_parallel", "model.sequence_parallel"},
    {Key::ep, "trainer.strategy.expert_model_parallel_size", "model.expert_model_parallel_size"},
    {Key::etp, "trainer.strategy.expert_tensor_parallel_size", "model.expert_tensor_parallel_size"},
    {Key::account_embedding, "trainer.strategy.account_for_embedding_in_pipeline_split", "model.account_for_embedding_in_pipeline_split"},
    {Key::account_loss, "trainer.strategy.account_for_loss_in_pipeline_split", "model.account_for_loss_in_pipeline_split"},
    {Key::first_stage_layers, "trainer.strategy.num_layers_in_first_pipeline_stage", "model.num_layers_in_first_pipeline_stage"},
    {Key::last_stage_layers, "trainer.strategy.num_layers_in_last_pipeline_stage", "model.num_layers_in_last_pipeline_stage"},
    {Key::micro_batch, "data.micro_batch_size", "train.micro_batch_size"},
    {Key::global_batch, "data.global_batch_size", "train.global_batch_size"},
    {Key::data_seq, "data.seq_length", "dataset.seq_length"},
    {Key::model_seq, "model.config.seq_length", "model.seq_length"},
    {Key::recompute_granularity, "model.config.recompute_granularity", "model.recompute_granularity"},
    {Key::recompute_method, "model.config.recompute_method", "model.recompute_method"},
    {Key::recompute_layers, "model.config.recompute_num_layers", "model.recompute_num_layers"},
    {Key::distributed_optimizer, "optim.config.use_distributed_optimizer", "optimizer.use_distributed_optimizer"},
    {Key::bridge_ddp_distributed_optimizer, "", "ddp.use_distributed_optimizer"},
    {Key::fsdp, "trainer.strategy.fsdp", "ddp.use_megatron_fsdp"},
    {Key::sharding, "trainer.strategy.ddp.data_parallel_sharding_strategy", "ddp.data_parallel_sharding_strategy"},
    {Key::average_in_collective, "trainer.strategy.ddp.average_in_collective", "ddp.average_in_collective"},
    {Key::grad_accumulation_fusion, "model.config.gradient_accumulation_fusion", "model.gradient_accumulation_fusion"},
    {Key::optimizer_offload, "optim.config.optimizer_cpu_offload", "optimizer.optimizer_cpu_offload"},
    {Key::precision_aware_optimizer, "optim.config.use_precision_aware_optimizer", "optimizer.use_precision_aware_optimizer"},
    {Key::optimizer_offload_fraction, "optim.config.optimizer_offload_fraction", "optimizer.optimizer_offload_fraction"},
    {Key::optimizer, "optim.config.optimizer", "optimizer.optimizer"},
    {Key::plugins, "trainer.plugins", ""},
    {Key::fp8, "trainer.plugins.fp8", ""},
    {Key::fp8_recipe, "trainer.plugins.fp8_recipe", ""},
    {Key::grad_reduce_fp32, "trainer.plugins.grad_reduce_in_fp32", "ddp.grad_reduce_in_fp32"},
    {Key::mixed_precision, "", "mixed_precision"},
    {Key::cp_comm_type, "model.config.cp_comm_type", "model.cp_comm_type"},
    {Key::activation_offload, "model.config.cpu_offloading", "model.cpu_offloading"},
    {Key::activation_offload_layers, "model.config.cpu_offloading_num_layers", "model.cpu_offloading_num_layers"},
    {Key::activation_offload_weights, "model.config.cpu_offloading_weights", "model.cpu_offloading_weights"},
    {Key::lora_dim, "peft.dim", "peft.dim"},
    {Key::lora_alpha, "peft.alpha", "peft.alpha"},
    {Key::lora_targets, "peft.target_modules", "peft.target_modules"},
};

const char* key_name(Key k, bool bridge) {
  for (const KeyName& kn : kKeys)
    if (kn.key == k) return bridge ? kn.bridge : kn.nemo;
  return "";
}

// ---------------------------------------------------------------- export

// One override: its key, the value as each tool spells it, and its comment.
struct Override {
  Key key;
  std::string nemo_value;    // NeMo-Run parses Python literals: True, None, ['a', 'b']
  std::string bridge_value;  // Hydra / OmegaConf: true, null, [a,b]
  std::string comment;
};

// Megatron-Core fuses q, k and v into linear_qkv and the gate and up projections into
// linear_fc1 (LoRA's target_modules, nemo/collections/llm/peft/lora.py L365-375 @v2.4.0).
struct FusedModule {
  const char* name;
  std::vector<std::string> llama, gpt;  // llmplan's projection names it holds
};
const FusedModule kFusedModules[] = {
    {"linear_qkv", {"q", "k", "v"}, {"q", "k", "v"}},
    {"linear_proj", {"o"}, {"o"}},
    {"linear_fc1", {"gate", "up"}, {"up"}},
    {"linear_fc2", {"down"}, {"down"}},
};
constexpr const char* kProjectionOrder[] = {"q", "k", "v", "o", "gate", "up", "down"};

std::string canonical_target(const std::string& t) { return t == "fc1" ? "up" : t == "fc2" ? "down" : t; }

// The fused modules whose union is exactly `targets`, or an error naming job.lora.targets.
Result<std::vector<std::string>> lora_modules(const std::vector<std::string>& targets, Family family, const std::string& to) {
  std::set<std::string> want;
  for (const std::string& t : targets) want.insert(canonical_target(t));
  std::vector<std::string> modules;
  std::set<std::string> covered;
  for (const FusedModule& m : kFusedModules) {
    const std::vector<std::string>& holds = family == Family::llama ? m.llama : m.gpt;
    const size_t in = std::count_if(holds.begin(), holds.end(), [&](const std::string& p) { return want.count(p) > 0; });
    if (in == 0) continue;
    if (in != holds.size()) {
      std::string all;
      for (const std::string& p : holds) all += (all.empty() ? "" : ", ") + p;
      return Status::bad_input(to + ": job.lora.targets: NeMo's LoRA adapts Megatron-Core's fused " + m.name + " (" + all +
                               ") as one module (target_modules, nemo/collections/llm/peft/lora.py L365-375 @v2.4.0), so a "
                               "target set must take all of it or none; CanonicalLoRA (peft/canonical_lora.py) splits them but has "
                               "no CLI factory at v2.4.0 (finetune_default.py registers lora and dora only)");
    }
    modules.push_back(m.name);
    covered.insert(holds.begin(), holds.end());
  }
  for (const std::string& t : want)
    if (!covered.count(t))
      return Status::bad_input(to + ": job.lora.targets: '" + t + "' is not a projection of a " + to_string(family) + " layer");
  return modules;
}

std::string nemo_bool(bool b) { return b ? "True" : "False"; }
std::string bridge_bool(bool b) { return b ? "true" : "false"; }

// A word for a bash array: double-quoted when NeMo-Run's list or string syntax needs it.
std::string shell_word(const std::string& s) {
  if (s.find_first_of("'[] ()") == std::string::npos) return s;
  return "\"" + s + "\"";
}

const char* bridge_precision_preset(Precision p, Fp8Recipe r) {
  // Megatron-Bridge v0.6.0 src/megatron/bridge/training/mixed_precision.py registered presets.
  const bool bf16 = p == Precision::bf16;
  switch (r) {
    case Fp8Recipe::none: return bf16 ? "bf16_mixed" : "fp16_mixed";  // L185, L201
    case Fp8Recipe::delayed: return bf16 ? "bf16_with_fp8_delayed_scaling_mixed" : "fp16_with_fp8_delayed_scaling_mixed";  // L217, L236
    case Fp8Recipe::tensorwise: return bf16 ? "bf16_with_fp8_current_scaling_mixed" : "fp16_with_fp8_current_scaling_mixed";  // L285, L351
    case Fp8Recipe::blockwise: return bf16 ? "bf16_with_fp8_subchannel_scaling_mixed" : "fp16_with_fp8_subchannel_scaling_mixed";  // L373, L389
    case Fp8Recipe::mxfp8: return bf16 ? "bf16_with_mxfp8_mixed" : "fp16_with_mxfp8_mixed";  // L255, L270
  }
  return "";
}

}  // namespace

Result<ExportResult> export_nemo(const PlanFile& f, const ExportOptions& opt) {
  const ModelSpec& m = f.model;
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  const std::string to = "--to nemo";
  if (j.moments == MomentsDtype::bf16)
    return Status::bad_input(to + ": job.moments: bf16: llmplan writes NeMo's overrides as text, and the precision-aware "
                             "optimizer's exp_avg_dtype / exp_avg_sq_dtype are torch dtypes the overrides cannot spell; "
                             "use --to megatron (--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)");
  const Recipe* recipe = recipe_for_preset(m.name);
  if (recipe == nullptr)
    return Status::bad_input(to + ": model: '" + m.name + "' has no NeMo v2.4.0 recipe llmplan writes for (nemo/collections/llm/"
                             "recipes/; llmplan knows " + recipe_list() + ")");
  if (j.qlora())
    return Status::bad_input(to + ": job.mode: qlora: NeMo 2's LoRA recipes train on 16-bit base weights (peft/lora.py @v2.4.0 has "
                             "no NF4 quantization)");
  if (j.mode != TrainMode::pretrain && !recipe->finetune)
    return Status::bad_input(to + ": job.mode: " + std::string(to_string(job_mode(j))) + ": the " + recipe->factory +
                             " recipe has no finetune_recipe at v2.4.0");
  if (j.frozen_layer_count(m.layers) > 0)
    return Status::bad_input(to + ": job.frozen_layers: the NeMo recipes have no option to freeze layers");
  if (j.precision == Precision::fp32)
    return Status::bad_input(to + ": job.precision: fp32: the recipes' precision plugins are bf16_mixed and fp16_mixed "
                             "(recipes/precision/mixed_precision.py @v2.4.0); llmplan writes no fp32 run");
  if (!p.flash_attention)
    return Status::bad_input(to + ": plan.flash_attention: false: the recipes keep Megatron-Core's default attention backend "
                             "(auto: Transformer Engine's flash or fused attention), and llmplan writes no other");
  if (p.zero >= 2 && j.mode != TrainMode::pretrain)
    return Status::bad_input(to + ": plan.zero: ZeRO-" + n(p.zero) + " when fine-tuning: the finetune recipes build the strategy "
                             "with ddp='megatron' (finetune_default.py default_finetune_trainer @v2.4.0), so trainer.strategy.ddp.* "
                             "cannot be overridden from the command line");
  if (p.activation_offload_layers > 0) {
    if (p.pp > 1)
      return Status::bad_input(to + ": plan.activation_offload_layers with pp " + n(p.pp) + ": Megatron-Core refuses CPU offloading "
                               "with pipeline parallelism (transformer_config.py L764-767, core_v0.13.0)");
    if (p.recompute != Recompute::none)
      return Status::bad_input(to + ": plan.activation_offload_layers with recompute " + std::string(to_string(p.recompute)) +
                               ": Megatron-Core refuses CPU offloading with recompute (transformer_config.py L769-772, core_v0.13.0)");
    if (p.activation_offload_layers >= m.layers)
      return Status::bad_input(to + ": plan.activation_offload_layers: " + n(p.activation_offload_layers) +
                               ": Megatron-Core offloads fewer than num_layers (transformer_config.py L757-762, core_v0.13.0)");
  }
  std::vector<std::string> lora_targets;
  if (j.mode == TrainMode::lora) {
    if (j.lora.alpha != std::floor(j.lora.alpha))
      return Status::bad_input(to + ": job.lora.alpha: " + number_text(j.lora.alpha) + ": NeMo's LoRA alpha is an int "
                               "(peft/lora.py L412 @v2.4.0)");
    Result<std::vector<std::string>> mods = lora_modules(j.lora.targets, m.family, to);
    if (!mods) return mods.status();
    lora_targets = *mods;
  }
  if (Status st = refuse_for_megatron_core(f, to); !st) return st;
  // NeMo's MegatronStrategy sets a split by the embedding/loss accounting or the first and last
  // stage's layers (megatron_strategy.py L240-252); no layout string.
  int first = 0, last = 0;
  const bool as_first_last = split_as_first_last(f.model.layers, f.plan, &first, &last);
  if (f.plan.pp > 1 && f.plan.pipeline_split != PipelineSplit::account_embedding_loss && !as_first_last)
    return Status::bad_input(to + ": plan.pipeline_split " + to_string(f.plan.pipeline_split) + ": " + n(f.model.layers) + " layers on pp " +
                             n(f.plan.pp) + " x vpp " + n(f.plan.vpp) +
                             " in a split NeMo's MegatronStrategy cannot say (it sets the first and last stage's layers and spreads "
                             "the rest evenly, each stage in vpp equal chunks: megatron_strategy.py L240-241); Megatron-LM's "
                             "--pipeline-model-parallel-layout can (llmplan export --to megatron)");

  std::vector<Override> o;
  auto add = [&](Key k, std::string nemo, std::string bridge, std::string comment) {
    o.push_back({k, std::move(nemo), std::move(bridge), std::move(comment)});
  };
  auto add_int = [&](Key k, int64_t v, std::string comment) { add(k, n(v), n(v), std::move(comment)); };
  auto add_bool = [&](Key k, bool v, std::string comment) { add(k, nemo_bool(v), bridge_bool(v), std::move(comment)); };
  const char* strategy = "MegatronStrategy, megatron_strategy.py";
  add_int(Key::num_nodes, f.cluster.nodes, "nodes (nl.Trainer num_nodes; recipe trainer() passes it)");
  add_int(Key::devices, f.cluster.gpus_per_node, "GPUs per node (nl.Trainer devices)");
  add_int(Key::max_steps, opt.train_steps, "training steps, not the plan's (llmplan export --train-steps)");
  add_int(Key::tp, p.tp, std::string("tensor parallel, plan.tp (") + strategy + " L237)");
  add_int(Key::pp, p.pp, std::string("pipeline stages, plan.pp (") + strategy + " L238)");
  if (p.vpp > 1) {
    add_int(Key::vpp, p.vpp, std::string("virtual stages per rank, interleaved 1F1B, plan.vpp (") + strategy + " L242)");
  } else {
    add(Key::vpp, "None", "null", std::string("no virtual stages (") + strategy + " L242)");
  }
  if (p.pp > 1 && p.pipeline_split == PipelineSplit::account_embedding_loss) {
    add_bool(Key::account_embedding, true, std::string("the embedding counts as a layer, plan.pipeline_split (") + strategy + " L251)");
    add_bool(Key::account_loss, true, std::string("the loss counts as a layer, plan.pipeline_split (") + strategy + " L252)");
  } else if (p.pp > 1) {
    if (first > 0) add_int(Key::first_stage_layers, first, std::string("the first stage's layers, plan.pipeline_split (") + strategy + " L240)");
    if (last > 0) add_int(Key::last_stage_layers, last, std::string("the last stage's layers, plan.pipeline_split (") + strategy + " L241)");
  }
  add_int(Key::cp, p.cp, std::string("context parallel, plan.cp (") + strategy + " L244)");
  if (p.cp > 1)
    add(Key::cp_comm_type, p.cp_exchange == CpExchange::ring ? "p2p" : "all_gather", p.cp_exchange == CpExchange::ring ? "p2p" : "all_gather",
        "K/V exchange, plan.cp_exchange (TransformerConfig.cp_comm_type, transformer_config.py L522-526, core_v0.13.0)");
  add_bool(Key::sp, p.sp, std::string("sequence parallel, plan.sp (") + strategy + " L245)");
  if (m.moe.enabled()) {
    add_int(Key::ep, p.ep, std::string("expert parallel, plan.ep (") + strategy + " L246)");
    add_int(Key::etp, 1, std::string("experts whole on each EP rank, as llmplan costs them (") + strategy + " L248; default = tp)");
  }
  add_int(Key::micro_batch, p.micro_batch, "sequences per micro-batch per dp rank, plan.micro_batch");
  add_int(Key::global_batch, j.global_batch, "sequences per step, job.global_batch: " + n(p.grad_accum) + " micro-batches per step");
  add_int(Key::data_seq, j.seq_len, "tokens per sequence, job.seq_len");
  add_int(Key::model_seq, j.seq_len, "the model's sequence length; the recipes keep it equal to the data's");
  switch (p.recompute) {
    case Recompute::none:
      add(Key::recompute_granularity, "None", "null", "no recompute, plan.recompute none (transformer_config.py, core_v0.13.0)");
      break;
    case Recompute::selective:
      add(Key::recompute_granularity, "selective", "selective", "attention core recomputed, plan.recompute selective");
      break;
    case Recompute::full:
      add(Key::recompute_granularity, "full", "full", "whole layers recomputed, plan.recompute full");
      add(Key::recompute_method, "uniform", "uniform", "every layer's input kept");
      add_int(Key::recompute_layers, 1, "one layer per recompute unit");
      break;
    case Recompute::full_k:
      add(Key::recompute_granularity, "full", "full", "whole layers recomputed, plan.recompute full_k");
      add(Key::recompute_method, "block", "block", "the first k layers of each (virtual) stage");
      add_int(Key::recompute_layers, p.recompute_layers, "k, plan.recompute_layers");
      break;
  }
  // Data parallel: ZeRO-0/1 through the distributed optimizer (recipes/optim/adam.py L47
  // turns it on), ZeRO-2/3 as Megatron-FSDP (megatron_strategy.py L356-378).
  add_bool(Key::distributed_optimizer, p.zero >= 1,
           p.zero == 0 ? "ZeRO-0: no distributed optimizer, plan.zero 0" : "optimizer state sharded over dp, plan.zero " + n(p.zero));
  o.back().bridge_value = bridge_bool(p.zero >= 1);
  add(Key::bridge_ddp_distributed_optimizer, "", bridge_bool(p.zero >= 1), "Bridge keeps ddp's and optimizer's in step");
  if (p.zero >= 2) {
    add(Key::fsdp, "megatron", "true", "Megatron-FSDP, plan.zero " + n(p.zero) + std::string(" (") + strategy + " L261, L371-378)");
    add(Key::sharding, p.zero == 2 ? "optim_grads" : "optim_grads_params", p.zero == 2 ? "optim_grads" : "optim_grads_params",
        p.zero == 2 ? "ZeRO-2: optimizer state and gradients sharded" : "ZeRO-3: optimizer state, gradients and weights sharded");
    add_bool(Key::average_in_collective, false, "not supported with Megatron-FSDP (llama3_8b.py L121)");
    add_bool(Key::grad_accumulation_fusion, false, "Megatron-FSDP sharding needs it off (arguments.py L650-653, core_v0.13.0)");
  }
  if (p.offload_optimizer) {
    add_bool(Key::optimizer_offload, true, "optimizer state and master weights in host memory, plan.offload_optimizer");
    add_bool(Key::precision_aware_optimizer, true, "required by the CPU offload (arguments.py L1049-1053, core_v0.13.0)");
    add(Key::optimizer_offload_fraction, "1.0", "1.0", "all of it; OptimizerConfig's default is 0.0 (optimizer_config.py L138)");
  }
  add(Key::optimizer, j.optimizer == Optimizer::adamw ? "adam" : "sgd", j.optimizer == Optimizer::adamw ? "adam" : "sgd",
      j.optimizer == Optimizer::adamw ? "AdamW, job.optimizer (Megatron's adam decouples weight decay)" : "SGD with momentum, job.optimizer");
  add(Key::plugins, j.precision == Precision::bf16 ? "bf16_mixed" : "fp16_mixed", "",
      std::string(j.precision == Precision::bf16 ? "bf16" : "fp16") + " mixed precision, job.precision (recipes/precision/mixed_precision.py)");
  if (j.fp8_linear()) {
    add(Key::fp8, "hybrid", "", "FP8 GEMMs in the linear layers: E4M3 forward, E5M2 gradients (MegatronMixedPrecision fp8)");
    add(Key::fp8_recipe, to_string(j.fp8), "", "the scaling recipe, job.fp8 (MegatronMixedPrecision fp8_recipe, default delayed)");
  }
  if (j.precision != Precision::fp32)
    add_bool(Key::grad_reduce_fp32, j.grads == GradConvention::megatron,
             j.grads == GradConvention::megatron ? "fp32 main-gradient buffers, job.grads megatron (MegatronMixedPrecision L105, default True)"
                                                 : "16-bit main-gradient buffers, job.grads deepspeed (as the performance recipes set it)");
  add(Key::mixed_precision, "", bridge_precision_preset(j.precision, j.fp8),
      "job.precision and job.fp8 as a Megatron-Bridge preset (training/mixed_precision.py)");
  if (p.activation_offload_layers > 0) {
    add_bool(Key::activation_offload, true, "activations of the first layers to host memory (model_parallel_config.py L321)");
    add_int(Key::activation_offload_layers, p.activation_offload_layers, "plan.activation_offload_layers (L324)");
    add_bool(Key::activation_offload_weights, false, "activations only, as llmplan costs it (L337; default True)");
  }
  if (j.mode == TrainMode::lora) {
    add_int(Key::lora_dim, j.lora.rank, "LoRA rank, job.lora.rank (peft/lora.py L411)");
    add_int(Key::lora_alpha, static_cast<int64_t>(j.lora.alpha), "job.lora.alpha (L412)");
    std::string nemo_list = "[", bridge_list = "[";
    for (size_t i = 0; i < lora_targets.size(); ++i) {
      nemo_list += std::string(i ? ", " : "") + "'" + lora_targets[i] + "'";
      bridge_list += std::string(i ? "," : "") + lora_targets[i];
    }
    add(Key::lora_targets, nemo_list + "]", bridge_list + "]", "job.lora.targets as Megatron-Core's fused modules (L365-375, L408)");
  }

  // nemo_overrides.sh
  const bool pretrain = j.mode == TrainMode::pretrain;
  const std::string factory = pretrain ? std::string(recipe->factory)
                                       : std::string(recipe->factory) + (j.mode == TrainMode::lora ? "(peft_scheme='lora')" : "(peft_scheme='none')");
  std::string s;
  s += "#!/bin/bash\n";
  s += "# NeMo 2 launch written by llmplan export from a plan: " + m.name + " on " + n(f.gpus) + " x " + f.cluster.gpu.name + " (" +
       n(f.cluster.nodes) + " node" + (f.cluster.nodes > 1 ? "s" : "") + " x " + n(f.cluster.gpus_per_node) + " GPUs).\n";
  s += "# Target: NeMo v2.4.0 (nemo/collections/llm/recipes/" + std::string(recipe->factory) + ".py, model config " +
       recipe->model_config + ") on Megatron-Core core_v0.13.0.\n";
  s += "# NeMo-Run dotted overrides (docs/source/features/parallelisms.rst @v2.4.0); every plan field is written, the\n";
  s += "# recipe's default or not. They sit in a bash array so that each can carry its comment.\n";
  s += "set -eo pipefail\n\n";
  s += "OVERRIDES=(\n";
  for (const Override& ov : o) {
    const char* key = key_name(ov.key, false);
    if (*key == '\0') continue;
    s += "    # " + ov.comment + "\n";
    s += "    " + shell_word(std::string(key) + "=" + ov.nemo_value) + "\n";
  }
  if (j.mode == TrainMode::lora) s += "    # LoRA: peft=lora is the recipe's default (peft_scheme='lora', finetune_default.py L216)\n";
  s += ")\n\n";
  s += std::string("nemo llm ") + (pretrain ? "pretrain" : "finetune") + " --factory " + shell_word(factory) + " \"${OVERRIDES[@]}\"\n";

  // megatron_bridge_overrides.txt
  std::string b;
  b += "# Megatron-Bridge v0.6.0 Hydra overrides for the same plan (" + m.name + ", " + n(f.gpus) + " GPUs: " + n(f.cluster.nodes) +
       " node" + (f.cluster.nodes > 1 ? "s" : "") + " x " + n(f.cluster.gpus_per_node) + "), written by llmplan export.\n";
  b += "# Keys per docs/megatron-lm-to-megatron-bridge.md @v0.6.0: append them to\n";
  b += "#   torchrun --nproc-per-node " + n(f.cluster.gpus_per_node) + " --nnodes " + n(f.cluster.nodes) +
       " scripts/training/run_recipe.py --recipe <a recipe of " + m.name + "> --mode " +
       (j.mode == TrainMode::lora ? "lora" : pretrain ? "pretrain" : "sft") + "\n";
  b += "# The nodes and GPUs are the torchrun line's; everything else is below. model.* are Megatron-Core\n";
  b += "# TransformerConfig fields of Bridge's Megatron-LM (3rdparty/Megatron-LM @cd4afffa), ddp.* / optimizer.* its\n";
  b += "# DistributedDataParallelConfig and OptimizerConfig, mixed_precision a preset of training/mixed_precision.py.\n";
  for (const Override& ov : o) {
    const char* key = key_name(ov.key, true);
    if (*key == '\0' || ov.bridge_value.empty()) continue;
    // The meaning without NeMo's source (Bridge builds on a newer Megatron-Core).
    const size_t paren = ov.comment.rfind(" (");
    const bool cites = paren != std::string::npos && ov.comment.back() == ')';
    b += "# " + (cites ? ov.comment.substr(0, paren) : ov.comment) + "\n";
    b += std::string(key) + "=" + ov.bridge_value + "\n";
  }

  ExportResult r;
  r.files.push_back({"nemo_overrides.sh", s, true});
  r.files.push_back({"megatron_bridge_overrides.txt", b, false});
  r.notes.push_back("nemo_overrides.sh: the data is the recipe's (MockDataModule for pretraining, SQuAD for fine-tuning); set "
                    "data=... for your own");
  if (j.mode == TrainMode::lora)
    r.notes.push_back("LoRA on Megatron-Core's fused linear_qkv / linear_fc1 has one adapter per fused module where llmplan "
                      "counts one per projection: a few adapter parameters fewer than the plan's");

  if (m.moe.enabled() && p.tp > 1)
    r.notes.push_back("expert_tensor_parallel_size=1: the experts are not split by tp, as llmplan costs them");
  return r;
}

// ---------------------------------------------------------------- import

namespace {

// The recipe defaults llmplan has verbatim (tests/fixtures/frameworks/nemo_llama3_8b_recipe.py
// and nemo_llama3_70b_recipe.py, NeMo v2.4.0), for pretrain_recipe with its own defaults.
struct RecipeDefaults {
  const char* factory;
  int num_nodes, devices, tp, pp, vpp, cp;
  bool sp;
  int64_t seq, global_batch;
  int micro_batch;
  const char* source;
};
constexpr RecipeDefaults kDefaults[] = {
    // trainer() L60-71 (tp 1, pp 1, vpp None, cp 2, sp False), pretrain_recipe() L147-199 (num_nodes 1,
    // num_gpus_per_node 8; MockDataModule seq_length 8192, global_batch_size 512, micro_batch_size 1).
    {"llama3_8b", 1, 8, 1, 1, 1, 2, false, 8192, 512, 1, "nemo_llama3_8b_recipe.py L60-71, L147-199"},
    // trainer() L61-72 (tp 4, pp 4, vpp 5, cp 2, sp True); pretrain_recipe() L142-199 passes its own num_nodes=1 (the
    // trainer's 4 is not used), num_gpus_per_node 8, MockDataModule(8192, 512, 1) L194.
    {"llama3_70b", 1, 8, 4, 4, 5, 2, true, 8192, 512, 1, "nemo_llama3_70b_recipe.py L61-72, L142-199"},
};
// Both: optim=distributed_fused_adam_with_cosine_annealing (use_distributed_optimizer=True,
// recipes/optim/adam.py L47), plugins=bf16_mixed() (trainer L138), no recompute
// (TransformerConfig.recompute_granularity None), fsdp=None (ZeRO-1).

const RecipeDefaults* defaults_for(const std::string& factory) {
  for (const RecipeDefaults& d : kDefaults)
    if (factory == d.factory) return &d;
  return nullptr;
}

// The overrides of one file: key -> (value, as spelled).
struct Overrides {
  std::map<Key, std::pair<std::string, std::string>> values;  // value, the key as written
  std::vector<std::string> unknown;
  std::string origin;
  bool bridge = false;
};

Key key_of(const std::string& k, bool bridge, bool* found) {
  for (const KeyName& kn : kKeys)
    if (k == (bridge ? kn.bridge : kn.nemo) && *(bridge ? kn.bridge : kn.nemo) != '\0') {
      *found = true;
      return kn.key;
    }
  *found = false;
  return Key::kCount;
}

Status add_override(Overrides* o, const std::string& word) {
  const size_t eq = word.find('=');
  if (eq == std::string::npos || eq == 0) {
    o->unknown.push_back(word);
    return Status::ok();
  }
  std::string key = word.substr(0, eq), value = word.substr(eq + 1);
  if (!key.empty() && (key[0] == '+' || key[0] == '~')) key = key.substr(1);  // Hydra's add / delete prefixes
  bool found = false;
  const Key k = key_of(key, o->bridge, &found);
  if (!found) {
    o->unknown.push_back(key);
    return Status::ok();
  }
  if (o->values.count(k) && o->values[k].first != value)
    return Status::bad_input(o->origin + ": " + key + " is set twice (" + o->values[k].first + ", " + value + ")");
  o->values[k] = {value, key};
  return Status::ok();
}

std::string unquote(std::string v) {
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) return v.substr(1, v.size() - 2);
  return v;
}

// Typed reads of one file's overrides; errors name the key as written and the file.
class Reader {
 public:
  explicit Reader(const Overrides& o) : o_(o) {}
  bool has(Key k) const { return o_.values.count(k) > 0; }
  std::string key(Key k) const { return has(k) ? o_.values.at(k).second : key_name(k, o_.bridge); }
  std::string raw(Key k) const { return has(k) ? o_.values.at(k).first : ""; }
  bool is_none(Key k) const {
    const std::string v = raw(k);
    return v == "None" || v == "null" || v == "~";
  }
  Status bad(Key k, const std::string& expected) const {
    return Status::bad_input(o_.origin + ": " + key(k) + ": expected " + expected + ", got '" + raw(k) + "'");
  }
  Result<int64_t> integer(Key k, int64_t lo, int64_t hi) const {
    const std::string v = unquote(raw(k));
    int64_t x = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || ptr != v.data() + v.size() || x < lo || x > hi)
      return bad(k, "an integer in [" + n(lo) + ", " + n(hi) + "]");
    return x;
  }
  Result<double> real(Key k, double lo, double hi) const {
    const std::string v = unquote(raw(k));
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !(x >= lo && x <= hi)) return bad(k, "a number in [" + number_text(lo) + ", " + number_text(hi) + "]");
    return x;
  }
  Result<bool> boolean(Key k) const {
    const std::string v = unquote(raw(k));
    if (v == "True" || v == "true" || v == "1") return true;
    if (v == "False" || v == "false" || v == "0") return false;
    return bad(k, o_.bridge ? "true or false" : "True or False");
  }
  Result<std::string> choice(Key k, std::initializer_list<const char*> allowed) const {
    const std::string v = unquote(raw(k));
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return v;
      list += std::string(list.empty() ? "" : ", ") + a;
    }
    return bad(k, "one of " + list);
  }
  // A Python / Hydra list of names: ['a', 'b'] or [a,b].
  Result<std::vector<std::string>> names(Key k) const {
    std::string v = raw(k);
    if (v.size() < 2 || v.front() != '[' || v.back() != ']') return bad(k, "a list such as ['linear_qkv', 'linear_proj']");
    std::vector<std::string> out;
    std::string cur;
    for (char c : v.substr(1, v.size() - 2) + ",") {
      if (c == ',') {
        const size_t a = cur.find_first_not_of(" \t"), b = cur.find_last_not_of(" \t");
        if (a != std::string::npos) out.push_back(unquote(cur.substr(a, b - a + 1)));
        cur.clear();
      } else {
        cur += c;
      }
    }
    return out;
  }

 private:
  const Overrides& o_;
};

// What one file says about the plan, each field unset when the file does not say it.
struct Said {
  std::optional<int> num_nodes, devices, tp, pp, vpp, cp, ep, etp, micro_batch, first_stage, last_stage, recompute_layers;
  std::optional<int64_t> global_batch, seq, model_seq;
  std::optional<bool> sp, account_embedding, account_loss, distributed_optimizer, fsdp;
  std::optional<std::string> sharding, granularity, method, cp_comm_type, optimizer;
  std::optional<Precision> precision;
  std::optional<Fp8Recipe> fp8;
  std::optional<bool> offload;
  std::optional<bool> grad_reduce_fp32;
  std::optional<int> activation_offload_layers;
  std::optional<int> lora_dim;
  std::optional<double> lora_alpha;
  std::optional<std::vector<std::string>> lora_modules;
};

#define LLMPLAN_READ(dst, expr)          \
  do {                                   \
    auto r_ = (expr);                    \
    if (!r_) return r_.status();         \
    dst = *r_;                           \
  } while (0)

Result<Said> interpret(const Overrides& o, std::vector<std::string>* notes) {
  const Reader r(o);
  Said s;
  auto int_key = [&](Key k, std::optional<int>* dst, int64_t lo, int64_t hi) -> Status {
    if (!r.has(k)) return Status::ok();
    Result<int64_t> v = r.integer(k, lo, hi);
    if (!v) return v.status();
    *dst = static_cast<int>(*v);
    return Status::ok();
  };
  auto bool_key = [&](Key k, std::optional<bool>* dst) -> Status {
    if (!r.has(k)) return Status::ok();
    Result<bool> v = r.boolean(k);
    if (!v) return v.status();
    *dst = *v;
    return Status::ok();
  };
  for (auto [k, dst, hi] : {std::tuple{Key::num_nodes, &s.num_nodes, 1 << 20}, std::tuple{Key::devices, &s.devices, 1 << 10},
                            std::tuple{Key::tp, &s.tp, 1 << 20}, std::tuple{Key::pp, &s.pp, 1 << 20}, std::tuple{Key::cp, &s.cp, 1 << 20},
                            std::tuple{Key::ep, &s.ep, 1 << 20}, std::tuple{Key::etp, &s.etp, 1 << 20},
                            std::tuple{Key::micro_batch, &s.micro_batch, 100000000},
                            std::tuple{Key::first_stage_layers, &s.first_stage, 10000},
                            std::tuple{Key::last_stage_layers, &s.last_stage, 10000}})
    if (Status st = int_key(k, dst, 1, hi); !st) return st;
  if (r.has(Key::vpp)) {
    if (r.is_none(Key::vpp)) {
      s.vpp = 1;
    } else if (Status st = int_key(Key::vpp, &s.vpp, 1, 1 << 20); !st) {
      return st;
    }
  }
  if (r.has(Key::global_batch)) LLMPLAN_READ(s.global_batch, r.integer(Key::global_batch, 1, 100000000));
  if (r.has(Key::data_seq)) LLMPLAN_READ(s.seq, r.integer(Key::data_seq, 1, 1 << 24));
  if (r.has(Key::model_seq)) LLMPLAN_READ(s.model_seq, r.integer(Key::model_seq, 1, 1 << 24));
  for (auto [k, dst] : {std::pair{Key::sp, &s.sp}, std::pair{Key::account_embedding, &s.account_embedding},
                        std::pair{Key::account_loss, &s.account_loss}})
    if (Status st = bool_key(k, dst); !st) return st;
  // ZeRO: the distributed optimizer (both Bridge keys must agree), Megatron-FSDP.
  if (Status st = bool_key(Key::distributed_optimizer, &s.distributed_optimizer); !st) return st;
  if (r.has(Key::bridge_ddp_distributed_optimizer)) {
    std::optional<bool> ddp;
    if (Status st = bool_key(Key::bridge_ddp_distributed_optimizer, &ddp); !st) return st;
    if (s.distributed_optimizer && *s.distributed_optimizer != *ddp)
      return Status::bad_input(o.origin + ": " + r.key(Key::distributed_optimizer) + " and " + r.key(Key::bridge_ddp_distributed_optimizer) +
                               " differ (Bridge keeps them in step)");
    s.distributed_optimizer = ddp;
  }
  if (r.has(Key::fsdp)) {
    if (o.bridge) {
      if (Status st = bool_key(Key::fsdp, &s.fsdp); !st) return st;
    } else if (r.is_none(Key::fsdp)) {
      s.fsdp = false;
    } else {
      std::string v;
      LLMPLAN_READ(v, r.choice(Key::fsdp, {"megatron", "pytorch"}));
      if (v == "pytorch")
        return Status::bad_input(o.origin + ": " + r.key(Key::fsdp) + "=pytorch: NeMo raises NotImplementedError for PyTorch FSDP2 "
                                 "with MegatronParallel (megatron_strategy.py L371-372 @v2.4.0)");
      s.fsdp = true;
    }
  }
  if (r.has(Key::sharding)) LLMPLAN_READ(s.sharding, r.choice(Key::sharding, {"no_shard", "optim", "optim_grads", "optim_grads_params"}));
  // Recompute.
  if (r.has(Key::recompute_granularity)) {
    if (r.is_none(Key::recompute_granularity)) {
      s.granularity = "";
    } else {
      LLMPLAN_READ(s.granularity, r.choice(Key::recompute_granularity, {"full", "selective"}));
    }
  }
  if (r.has(Key::recompute_method) && !r.is_none(Key::recompute_method))
    LLMPLAN_READ(s.method, r.choice(Key::recompute_method, {"uniform", "block"}));
  if (r.has(Key::recompute_layers) && !r.is_none(Key::recompute_layers))
    if (Status st = int_key(Key::recompute_layers, &s.recompute_layers, 1, 10000); !st) return st;
  if (r.has(Key::cp_comm_type) && !r.is_none(Key::cp_comm_type))
    LLMPLAN_READ(s.cp_comm_type, r.choice(Key::cp_comm_type, {"p2p", "all_gather", "a2a", "a2a+p2p"}));
  if (r.has(Key::optimizer)) LLMPLAN_READ(s.optimizer, r.choice(Key::optimizer, {"adam", "sgd"}));
  // Optimizer offload (core_v0.13.0: OptimizerConfig.optimizer_offload_fraction defaults to 0.0).
  if (r.has(Key::optimizer_offload)) {
    bool on = false;
    LLMPLAN_READ(on, r.boolean(Key::optimizer_offload));
    bool aware = false;
    if (r.has(Key::precision_aware_optimizer)) LLMPLAN_READ(aware, r.boolean(Key::precision_aware_optimizer));
    if (on && !aware)
      return Status::bad_input(o.origin + ": " + r.key(Key::optimizer_offload) + " without " + r.key(Key::precision_aware_optimizer) +
                               "=" + (o.bridge ? "true" : "True") + " (Megatron-Core's CPU offload runs in the precision-aware "
                               "optimizer, arguments.py L1049-1053, core_v0.13.0)");
    double fraction = 0;
    if (r.has(Key::optimizer_offload_fraction)) LLMPLAN_READ(fraction, r.real(Key::optimizer_offload_fraction, 0, 1));
    if (on && fraction <= 0)
      notes->push_back(r.key(Key::optimizer_offload) + " with optimizer_offload_fraction 0.0 (OptimizerConfig's default, "
                       "optimizer_config.py L138): nothing is offloaded");
    if (on && fraction > 0 && fraction < 1)
      notes->push_back("optimizer_offload_fraction " + number_text(fraction) + ": llmplan costs the whole optimizer offloaded");
    s.offload = on && fraction > 0;
  }
  // Precision: NeMo's plugin and its fp8 fields, or Bridge's preset.
  if (!o.bridge) {
    if (r.has(Key::plugins)) {
      std::string v;
      LLMPLAN_READ(v, r.choice(Key::plugins, {"bf16_mixed", "fp16_mixed"}));
      s.precision = v == "bf16_mixed" ? Precision::bf16 : Precision::fp16;
    }
    if (r.has(Key::fp8) && !r.is_none(Key::fp8)) {
      LLMPLAN_READ(std::ignore, r.choice(Key::fp8, {"hybrid", "e4m3"}));
      std::string recipe = "delayed";  // MegatronMixedPrecision's default (plugins/mixed_precision.py L108 @v2.4.0)
      if (r.has(Key::fp8_recipe)) LLMPLAN_READ(recipe, r.choice(Key::fp8_recipe, kMegatronFp8Recipes));
      Fp8Recipe f = Fp8Recipe::none;
      parse_enum(recipe, &f);
      s.fp8 = f;
    } else if (r.has(Key::fp8) || r.has(Key::fp8_recipe)) {
      s.fp8 = Fp8Recipe::none;
    }
  } else if (r.has(Key::mixed_precision)) {
    const std::string v = unquote(r.raw(Key::mixed_precision));
    bool known = false;
    for (Precision prec : {Precision::bf16, Precision::fp16})
      for (Fp8Recipe f : {Fp8Recipe::none, Fp8Recipe::delayed, Fp8Recipe::tensorwise, Fp8Recipe::blockwise, Fp8Recipe::mxfp8})
        if (v == bridge_precision_preset(prec, f)) {
          s.precision = prec, s.fp8 = f, known = true;
        }
    if (!known) return r.bad(Key::mixed_precision, "a Megatron-Bridge mixed-precision preset such as bf16_mixed");
  }
  // Main gradients: fp32 buffers (the plugin's and DistributedDataParallelConfig's default), or 16-bit.
  if (r.has(Key::grad_reduce_fp32)) LLMPLAN_READ(s.grad_reduce_fp32, r.boolean(Key::grad_reduce_fp32));
  // Activation offload.
  if (r.has(Key::activation_offload)) {
    bool on = false;
    LLMPLAN_READ(on, r.boolean(Key::activation_offload));
    std::optional<int> layers;
    if (Status st = int_key(Key::activation_offload_layers, &layers, 0, 10000); !st) return st;
    bool weights = true;
    if (r.has(Key::activation_offload_weights)) LLMPLAN_READ(weights, r.boolean(Key::activation_offload_weights));
    if (on && weights)
      notes->push_back(r.key(Key::activation_offload_weights) + " is True (ModelParallelConfig's default, L337): weights are "
                       "offloaded too; llmplan costs the activations");
    s.activation_offload_layers = on ? layers.value_or(0) : 0;
  }
  // LoRA.
  if (r.has(Key::lora_dim)) {
    std::optional<int> dim;
    if (Status st = int_key(Key::lora_dim, &dim, 1, 1 << 16); !st) return st;
    s.lora_dim = dim;
  }
  if (r.has(Key::lora_alpha)) LLMPLAN_READ(s.lora_alpha, r.real(Key::lora_alpha, 0, 1e9));
  if (r.has(Key::lora_targets)) LLMPLAN_READ(s.lora_modules, r.names(Key::lora_targets));
  return s;
}

// The first field two files both say and say differently, as "key1=v1 vs key2=v2".
template <class T>
void differ(const std::optional<T>& a, const std::optional<T>& b, Key k, std::string* out) {
  if (out->empty() && a && b && *a != *b) *out = std::string(key_name(k, false)) + " vs " + key_name(k, true);
}

// "llama3_8b" or "llama3_8b(num_nodes=2, peft_scheme='none')": the name and its arguments.
Status parse_factory(const std::string& text, const std::string& origin, std::string* name, std::map<std::string, std::string>* kwargs) {
  const size_t open = text.find('(');
  *name = text.substr(0, open);
  if (open == std::string::npos) return Status::ok();
  if (text.back() != ')') return Status::bad_input(origin + ": --factory " + text + ": expected name(arg=value, ...)");
  std::string inner = text.substr(open + 1, text.size() - open - 2) + ",";
  std::string cur;
  for (char c : inner) {
    if (c != ',') {
      cur += c;
      continue;
    }
    const size_t a = cur.find_first_not_of(" \t"), b = cur.find_last_not_of(" \t");
    if (a != std::string::npos) {
      const std::string arg = cur.substr(a, b - a + 1);
      const size_t eq = arg.find('=');
      if (eq == std::string::npos) return Status::bad_input(origin + ": --factory " + text + ": expected arg=value, got '" + arg + "'");
      auto trim = [](std::string s) {
        const size_t x = s.find_first_not_of(" \t"), y = s.find_last_not_of(" \t");
        return x == std::string::npos ? std::string() : s.substr(x, y - x + 1);
      };
      (*kwargs)[trim(arg.substr(0, eq))] = unquote(trim(arg.substr(eq + 1)));
    }
    cur.clear();
  }
  return Status::ok();
}

}  // namespace

Result<ImportedConfig> import_nemo(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin_in) {
  const LaunchFile* nemo_file = nullptr;
  const LaunchFile* bridge_file = nullptr;
  for (const LaunchFile& f : files) {
    if (f.text.find("nemo llm ") != std::string::npos || f.text.find("trainer.strategy.") != std::string::npos) {
      if (nemo_file == nullptr) nemo_file = &f;
    } else if (f.text.find("model.tensor_model_parallel_size=") != std::string::npos || f.text.find("train.micro_batch_size=") != std::string::npos) {
      if (bridge_file == nullptr) bridge_file = &f;
    }
  }
  if (nemo_file == nullptr && bridge_file == nullptr)
    return Status::bad_input(origin_in + ": no NeMo overrides (expected `nemo llm pretrain --factory ...` with trainer.strategy.* "
                             "overrides, or Megatron-Bridge key=value overrides)");
  auto origin_of = [&](const LaunchFile* f) { return files.size() > 1 ? origin_in + "/" + f->name : origin_in; };

  ImportedConfig out;
  std::vector<std::string>& notes = out.notes;
  std::string factory, command = "pretrain";
  std::map<std::string, std::string> kwargs;
  Overrides nemo, bridge;
  if (nemo_file != nullptr) {
    nemo.origin = origin_of(nemo_file);
    Result<shell::Script> script = shell::read_shell_script(nemo_file->text, nemo.origin);
    if (!script) return script.status();
    const shell::Command* launch = nullptr;
    for (const shell::Command& c : script->commands)
      if (c.words.size() >= 3 && c.words[0] == "nemo" && c.words[1] == "llm") launch = &c;
    if (launch == nullptr) return Status::bad_input(nemo.origin + ": no `nemo llm pretrain|finetune` command");
    command = launch->words[2];
    if (command != "pretrain" && command != "finetune")
      return Status::bad_input(nemo.origin + ": nemo llm " + command + ": expected pretrain or finetune");
    for (size_t i = 3; i < launch->words.size(); ++i) {
      const std::string& w = launch->words[i];
      if (w == "--factory" || w == "-f") {
        if (i + 1 >= launch->words.size()) return Status::bad_input(nemo.origin + ": --factory: expected a recipe name");
        factory = launch->words[++i];
      } else if (w.rfind("--factory=", 0) == 0) {
        factory = w.substr(10);
      } else if (w.rfind("-", 0) == 0) {
        nemo.unknown.push_back(w);
      } else if (Status st = add_override(&nemo, w); !st) {
        return st;
      }
    }
    if (factory.empty()) return Status::bad_input(nemo.origin + ": --factory: missing (the recipe names the model)");
  }
  if (bridge_file != nullptr) {
    bridge.origin = origin_of(bridge_file);
    bridge.bridge = true;
    Result<std::vector<shell::Command>> lines = shell::split_shell_lines(bridge_file->text, bridge.origin);
    if (!lines) return lines.status();
    for (const shell::Command& c : *lines)
      for (const std::string& w : c.words)
        if (Status st = add_override(&bridge, w); !st) return st;
  }
  Result<Said> said_nemo = nemo_file ? interpret(nemo, &notes) : Result<Said>(Said{});
  if (!said_nemo) return said_nemo.status();
  std::vector<std::string> bridge_notes;
  Result<Said> said_bridge = bridge_file ? interpret(bridge, nemo_file ? &bridge_notes : &notes) : Result<Said>(Said{});
  if (!said_bridge) return said_bridge.status();
  if (nemo_file && bridge_file) {  // the same plan, or bad input naming both keys
    const Said &a = *said_nemo, &b = *said_bridge;
    std::string d;
    differ(a.tp, b.tp, Key::tp, &d), differ(a.pp, b.pp, Key::pp, &d), differ(a.vpp, b.vpp, Key::vpp, &d);
    differ(a.cp, b.cp, Key::cp, &d), differ(a.sp, b.sp, Key::sp, &d), differ(a.ep, b.ep, Key::ep, &d);
    differ(a.micro_batch, b.micro_batch, Key::micro_batch, &d), differ(a.global_batch, b.global_batch, Key::global_batch, &d);
    differ(a.seq, b.seq, Key::data_seq, &d), differ(a.granularity, b.granularity, Key::recompute_granularity, &d);
    differ(a.method, b.method, Key::recompute_method, &d), differ(a.recompute_layers, b.recompute_layers, Key::recompute_layers, &d);
    differ(a.distributed_optimizer, b.distributed_optimizer, Key::distributed_optimizer, &d);
    differ(a.fsdp, b.fsdp, Key::fsdp, &d), differ(a.sharding, b.sharding, Key::sharding, &d);
    differ(a.offload, b.offload, Key::optimizer_offload, &d), differ(a.cp_comm_type, b.cp_comm_type, Key::cp_comm_type, &d);
    differ(a.account_embedding, b.account_embedding, Key::account_embedding, &d);
    differ(a.first_stage, b.first_stage, Key::first_stage_layers, &d), differ(a.last_stage, b.last_stage, Key::last_stage_layers, &d);
    differ(a.lora_dim, b.lora_dim, Key::lora_dim, &d), differ(a.lora_modules, b.lora_modules, Key::lora_targets, &d);
    differ(a.activation_offload_layers, b.activation_offload_layers, Key::activation_offload_layers, &d);
    differ(a.grad_reduce_fp32, b.grad_reduce_fp32, Key::grad_reduce_fp32, &d);
    if (d.empty() && a.precision && b.precision && (*a.precision != *b.precision || a.fp8.value_or(Fp8Recipe::none) != b.fp8.value_or(Fp8Recipe::none)))
      d = "trainer.plugins / trainer.plugins.fp8_recipe vs mixed_precision";
    if (!d.empty())
      return Status::bad_input(origin_in + ": " + nemo_file->name + " and " + bridge_file->name + " say different plans: " + d);
  }
  // Bridge alone carries no recipe name or node count.
  const Said& s = nemo_file ? *said_nemo : *said_bridge;
  const std::string& origin = nemo_file ? nemo.origin : bridge.origin;
  for (const std::string& k : nemo.unknown) out.unknown_keys.push_back(k);
  for (const std::string& k : bridge.unknown) out.unknown_keys.push_back(k);

  // ---- the recipe: model and defaults
  std::string factory_name;
  if (Status st = parse_factory(factory, origin, &factory_name, &kwargs); !st) return st;
  ModelSpec m;
  const RecipeDefaults* defaults = nullptr;
  if (nemo_file) {
    const Recipe* recipe = recipe_named(factory_name);
    if (recipe == nullptr)
      return Status::bad_input(origin + ": --factory " + factory_name + ": a recipe llmplan does not know the model of (it knows " +
                               recipe_list() + ")");
    Result<ModelSpec> pm = opt.presets->model(recipe->preset);
    if (!pm) return pm.status();
    m = *pm;
    if (!opt.model.empty()) {
      Result<ModelSpec> given = opt.presets->resolve_model(opt.model, "--model");
      if (!given) return given.status();
      if (std::optional<ShapeMismatch> d = shape_mismatch(shape_of(m), *given))
        return Status::bad_input(origin + ": --factory " + factory_name + " is " + recipe->preset + "; --model " + opt.model +
                                 " differs in " + mismatch_text(*d));
    }
    if (command == "pretrain") defaults = defaults_for(factory_name);
    for (const auto& [k, v] : kwargs)
      if (k == "performance_mode" && (v == "True" || v == "true"))
        notes.push_back("--factory " + factory + ": performance_mode changes the recipe's communication overlap and "
                        "precision settings beyond the plan's fields");
  } else {
    if (opt.model.empty())
      return Status::bad_input(origin + ": a Megatron-Bridge override file does not name its recipe: give the model (--model)");
    Result<ModelSpec> given = opt.presets->resolve_model(opt.model, "--model");
    if (!given) return given.status();
    m = *given;
  }

  // ---- what the file leaves to the recipe
  auto need = [&](bool set, Key k) -> Status {
    if (set) return Status::ok();
    return Status::bad_input(origin + ": " + key_name(k, !nemo_file) + ": not set, and llmplan has the defaults of the " +
                             "llama3_8b and llama3_70b pretraining recipes only (their verbatim copies in tests/fixtures/frameworks)");
  };
  TrainingJob j;
  ParallelPlan p;
  j.grads = GradConvention::megatron;
  // Mode (finetune_recipe's peft_scheme: 'lora' by default, 'dora', 'none').
  if (command == "finetune") {
    const std::string scheme = kwargs.count("peft_scheme") ? kwargs.at("peft_scheme") : "lora";
    if (scheme == "none" || scheme == "None") {
      j.mode = TrainMode::finetune;
    } else if (scheme == "lora") {
      j.mode = TrainMode::lora;
    } else {
      return Status::bad_input(origin + ": --factory peft_scheme=" + scheme + ": llmplan models LoRA and full fine-tuning (lora, none)");
    }
  }
  if (!nemo_file && s.lora_dim) j.mode = TrainMode::lora;
  int nodes = 0, devices = 0;
  if (nemo_file) {
    // The factory's own arguments (pretrain_recipe(num_nodes=..., num_gpus_per_node=...)), then the overrides.
    auto factory_int = [&](const char* arg, Key k, int* dst) -> Status {
      if (!kwargs.count(arg)) return Status::ok();
      Overrides one;
      one.origin = origin;
      one.values[k] = {kwargs.at(arg), std::string("--factory ") + factory_name + "(" + arg + "=...)"};
      Result<int64_t> v = Reader(one).integer(k, 1, 1 << 20);
      if (!v) return v.status();
      *dst = static_cast<int>(*v);
      return Status::ok();
    };
    int factory_nodes = 0, factory_devices = 0;
    if (Status st = factory_int("num_nodes", Key::num_nodes, &factory_nodes); !st) return st;
    if (Status st = factory_int("num_gpus_per_node", Key::devices, &factory_devices); !st) return st;
    if (Status st = need(s.num_nodes || factory_nodes || defaults, Key::num_nodes); !st) return st;
    if (Status st = need(s.devices || factory_devices || defaults, Key::devices); !st) return st;
    nodes = s.num_nodes.value_or(factory_nodes ? factory_nodes : defaults ? defaults->num_nodes : 1);
    devices = s.devices.value_or(factory_devices ? factory_devices : defaults ? defaults->devices : 8);
  }
  for (auto [set, k] : {std::pair{s.tp.has_value(), Key::tp}, std::pair{s.pp.has_value(), Key::pp}, std::pair{s.vpp.has_value(), Key::vpp},
                        std::pair{s.cp.has_value(), Key::cp}, std::pair{s.sp.has_value(), Key::sp},
                        std::pair{s.micro_batch.has_value(), Key::micro_batch}, std::pair{s.global_batch.has_value(), Key::global_batch},
                        std::pair{s.seq.has_value(), Key::data_seq}, std::pair{s.distributed_optimizer.has_value(), Key::distributed_optimizer},
                        std::pair{s.granularity.has_value(), Key::recompute_granularity}})
    if (Status st = need(set || defaults, k); !st) return st;
  if (nemo_file)
    if (Status st = need(s.precision.has_value() || defaults, Key::plugins); !st) return st;
  if (!nemo_file)
    if (Status st = need(s.precision.has_value(), Key::mixed_precision); !st) return st;
  if (m.moe.enabled())
    if (Status st = need(s.ep.has_value() || defaults, Key::ep); !st) return st;
  p.tp = s.tp.value_or(defaults ? defaults->tp : 1);
  p.pp = s.pp.value_or(defaults ? defaults->pp : 1);
  p.vpp = s.vpp.value_or(defaults ? defaults->vpp : 1);
  p.cp = s.cp.value_or(defaults ? defaults->cp : 1);
  p.sp = s.sp.value_or(defaults ? defaults->sp : false);
  p.ep = s.ep.value_or(1);
  p.micro_batch = s.micro_batch.value_or(defaults ? defaults->micro_batch : 1);
  j.global_batch = s.global_batch.value_or(defaults ? defaults->global_batch : 1);
  j.seq_len = s.seq.value_or(defaults ? defaults->seq : 1);
  if (s.model_seq && s.seq && *s.model_seq != *s.seq)
    return Status::bad_input(origin + ": " + key_name(Key::model_seq, !nemo_file) + "=" + n(*s.model_seq) + " and " +
                             key_name(Key::data_seq, !nemo_file) + "=" + n(*s.seq) + ": the recipes keep the model's and the data's "
                             "sequence length equal (\"must agree\", llama3_70b.py finetune_recipe)");
  if (p.sp && p.tp == 1) {
    notes.push_back(std::string(key_name(Key::sp, !nemo_file)) + " with tensor parallel 1: Megatron-Core switches it off");
    p.sp = false;
  }
  if (s.etp && *s.etp != 1 && p.tp > 1 && m.moe.enabled())
    notes.push_back("expert tensor parallel " + n(*s.etp) + ": llmplan costs experts whole on each EP rank (expert tp 1)");
  else if (!s.etp && p.tp > 1 && m.moe.enabled())
    notes.push_back("expert_tensor_parallel_size not set (MegatronStrategy default None: = tp): llmplan costs experts whole on "
                    "each EP rank (expert tp 1)");
  // Pipeline split.
  if (s.account_embedding.value_or(false) != s.account_loss.value_or(false))
    return Status::bad_input(origin + ": " + key_name(s.account_embedding.value_or(false) ? Key::account_embedding : Key::account_loss, !nemo_file) +
                             " alone: llmplan models the embedding and the loss counted together");
  p.pipeline_split = s.account_embedding.value_or(false) ? PipelineSplit::account_embedding_loss : PipelineSplit::even;
  if (s.first_stage || s.last_stage) {
    if (p.pipeline_split != PipelineSplit::even)
      return Status::bad_input(origin + ": " + key_name(s.first_stage ? Key::first_stage_layers : Key::last_stage_layers, !nemo_file) +
                               " with account_for_embedding/loss_in_pipeline_split: Megatron-Core refuses the pair "
                               "(transformer_config.py, core_v0.13.0)");
    auto counts = first_last_stage_layers(m.layers, p.pp, p.vpp, s.first_stage.value_or(0), s.last_stage.value_or(0),
                                          origin + ": " + key_name(Key::first_stage_layers, !nemo_file), key_name(Key::last_stage_layers, !nemo_file));
    if (!counts) return counts.status();
    set_split_from_counts(m.layers, *counts, {PipelineSplit::even}, &p);
  } else if (p.pp > 1 && p.pipeline_split == PipelineSplit::even && m.layers % p.pp != 0) {
    return Status::bad_input(origin + ": " + key_name(Key::pp, !nemo_file) + "=" + n(p.pp) + ": " + n(m.layers) +
                             " layers are not a multiple, and no first/last stage sizes are set (transformer_config.py, core_v0.13.0)");
  }
  p.schedule = p.vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  // ZeRO.
  const bool dist_opt = s.distributed_optimizer.value_or(j.mode == TrainMode::lora ? false : true);
  if (s.fsdp.value_or(false)) {
    const std::string sh = s.sharding.value_or("no_shard");  // DistributedDataParallelConfig default
    p.zero = sh == "no_shard" ? 0 : sh == "optim" ? 1 : sh == "optim_grads" ? 2 : 3;
    if (!dist_opt)
      return Status::bad_input(origin + ": " + key_name(Key::fsdp, !nemo_file) + " without " + key_name(Key::distributed_optimizer, !nemo_file) +
                               " (Megatron-FSDP needs the distributed optimizer, arguments.py L646-648, core_v0.13.0)");
  } else {
    p.zero = dist_opt ? 1 : 0;
    if (s.sharding && *s.sharding != "no_shard")
      notes.push_back(std::string(key_name(Key::sharding, !nemo_file)) + "=" + *s.sharding + " without Megatron-FSDP: no effect "
                      "(the llama3_8b recipe sets optim_grads_params the same way, \"For custom FSDP only\", L122)");
  }
  p.offload_optimizer = s.offload.value_or(false);
  // Recompute (transformer_config.py L774-800, core_v0.13.0).
  const std::string gran = s.granularity.value_or("");
  if (gran != "full" && (s.method || s.recompute_layers))
    return Status::bad_input(origin + ": " + key_name(s.method ? Key::recompute_method : Key::recompute_layers, !nemo_file) +
                             " without recompute_granularity full (transformer_config.py L781-800, core_v0.13.0)");
  if (gran == "full" && (!s.method || !s.recompute_layers))
    return Status::bad_input(origin + ": " + key_name(!s.method ? Key::recompute_method : Key::recompute_layers, !nemo_file) +
                             ": recompute_granularity full needs recompute_method and recompute_num_layers (transformer_config.py "
                             "L786-797, core_v0.13.0)");
  if (gran.empty()) {
    p.recompute = Recompute::none;
  } else if (gran == "selective") {
    p.recompute = Recompute::selective;
  } else {
    const int chunk_layers = pp_stage_layers(m.layers, p, 0) / std::max(1, p.vpp);
    if (*s.method == "uniform" || *s.recompute_layers >= chunk_layers) {
      p.recompute = Recompute::full;
      if (*s.method == "uniform" && *s.recompute_layers > 1)
        notes.push_back("recompute_method uniform with recompute_num_layers " + n(*s.recompute_layers) +
                        ": llmplan's full recompute keeps one input per layer (a little more memory)");
    } else {
      p.recompute = Recompute::full_k;
      p.recompute_layers = *s.recompute_layers;
    }
  }
  // Context parallel exchange (TE's default p2p, transformer_engine.py L801-802, core_v0.13.0).
  if (s.cp_comm_type) {
    if (*s.cp_comm_type == "a2a" || *s.cp_comm_type == "a2a+p2p")
      return Status::bad_input(origin + ": " + key_name(Key::cp_comm_type, !nemo_file) + "=" + *s.cp_comm_type +
                               ": an all-to-all (Ulysses) exchange, which llmplan does not model");
    p.cp_exchange = *s.cp_comm_type == "p2p" ? CpExchange::ring : CpExchange::all_gather;
  }
  p.activation_offload_layers = s.activation_offload_layers.value_or(0);
  p.flash_attention = true;
  // Precision.
  j.precision = s.precision.value_or(Precision::bf16);  // the recipes' plugins=bf16_mixed()
  j.amp = AmpLevel::O2;
  j.fp8 = s.fp8.value_or(Fp8Recipe::none);
  j.grads = s.grad_reduce_fp32.value_or(true) || j.precision == Precision::fp32 ? GradConvention::megatron : GradConvention::deepspeed;
  if (s.optimizer) j.optimizer = *s.optimizer == "adam" ? Optimizer::adamw : Optimizer::sgd_momentum;
  // LoRA: the recipe's rank and alpha (llama3_8b.py L305-306: 8 and 16; llama3_70b.py L322-323:
  // 16 and 32) and LoRA's default modules (peft/lora.py L408-410: all four).
  if (j.mode == TrainMode::lora) {
    const bool big = factory_name == "llama3_70b";
    if (!s.lora_dim && factory_name != "llama3_8b" && !big) return need(false, Key::lora_dim);
    if (!s.lora_alpha && factory_name != "llama3_8b" && !big) return need(false, Key::lora_alpha);
    j.lora.rank = s.lora_dim.value_or(big ? 16 : 8);
    j.lora.alpha = s.lora_alpha.value_or(big ? 32 : 16);
    const std::vector<std::string> modules = s.lora_modules.value_or(std::vector<std::string>{"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"});
    std::set<std::string> projections;
    for (const std::string& mod : modules) {
      const FusedModule* fm = nullptr;
      for (const FusedModule& f : kFusedModules)
        if (mod == f.name) fm = &f;
      if (fm == nullptr)
        return Status::bad_input(origin + ": " + key_name(Key::lora_targets, !nemo_file) + ": '" + mod +
                                 "' is not one of linear_qkv, linear_proj, linear_fc1, linear_fc2 (peft/lora.py L365-375)");
      const std::vector<std::string>& holds = m.family == Family::llama ? fm->llama : fm->gpt;
      projections.insert(holds.begin(), holds.end());
    }
    j.lora.targets.clear();
    for (const char* t : kProjectionOrder)
      if (projections.count(t)) j.lora.targets.push_back(t);
  }
  // World and data parallel.
  const int64_t model_ranks = static_cast<int64_t>(p.tp) * p.pp * p.cp;
  int64_t world = nemo_file ? static_cast<int64_t>(nodes) * devices : 0;
  if (world > 0 && world < model_ranks) {
    notes.push_back(std::string(key_name(Key::num_nodes, false)) + " x " + key_name(Key::devices, false) + " = " + n(world) +
                    " GPUs, fewer than one model replica (tp*pp*cp = " + n(model_ranks) + "; the llama3_70b recipe's own "
                    "num_nodes=1 is such a case): taken as dp 1");
    world = model_ranks;
    nodes = 0;
  }
  if (world == 0) {
    if (j.global_batch % p.micro_batch != 0)
      return Status::bad_input(origin + ": global batch " + n(j.global_batch) + " is not a multiple of the micro-batch " + n(p.micro_batch));
    world = j.global_batch / p.micro_batch * model_ranks;
    notes.push_back("no node count (the torchrun line is not in a Megatron-Bridge override file): dp taken as global / micro batch");
  }
  if (world % model_ranks != 0)
    return Status::bad_input(origin + ": " + n(world) + " GPUs (trainer.num_nodes x trainer.devices) are not a multiple of "
                             "tp*pp*cp = " + n(model_ranks));
  p.dp = static_cast<int>(world / model_ranks);
  if (j.global_batch % (static_cast<int64_t>(p.micro_batch) * p.dp) != 0)
    return Status::bad_input(origin + ": " + key_name(Key::global_batch, !nemo_file) + "=" + n(j.global_batch) +
                             ": not a multiple of micro-batch x dp = " + n(static_cast<int64_t>(p.micro_batch) * p.dp));
  p.grad_accum = static_cast<int>(j.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp));
  if (defaults)
    notes.push_back("what the overrides leave out is recipe " + factory_name + "'s default (" + defaults->source + ")");

  PlanFile& f = out.file;
  f.model = m;
  f.job = j;
  f.plan = p;
  f.gpus = static_cast<int>(world);
  Result<ClusterSpec> c = imported_cluster(opt, f.gpus, nemo_file ? devices : 0, nodes, origin);
  if (!c) return c.status();
  f.cluster = *c;
  if (Status st = check_imported(f, origin); !st) return st;
  return out;
}

#undef LLMPLAN_READ

}  // namespace llmplan::launch_formats
