// Training-stack profiles (data/stacks/<name>.json): what differs between the software
// stacks that run the same plan on the same GPUs. Kernels, fusion and communication
// overlap differ by 20% and more between Megatron-Core with Transformer Engine,
// torchtitan, llm-foundry, DeepSpeed and llm.c, and so do their memory conventions
// (fp32 main gradients, what selective recompute keeps, the loss's fp32 buffers, FSDP's
// root unit). A profile holds both: the time model's Efficiency constants, fitted per
// stack by `llmplan validate --fit` or measured by `llmplan calibrate`, and the memory
// conventions, read from each stack's source and cited in its file.
//
// The "llmplan" profile is the planner's default: its Efficiency is the one fitted on
// every published record together (the compiled-in Efficiency defaults equal it; a test
// checks), and its memory conventions are this project's executor's.
//
// Pure values and pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/cost/memory_model.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"
#include "planner/cost/time_model.h"

namespace llmplan {

struct StackProfile {
  std::string name;                     // "megatron-core"
  std::string description;
  std::string source;                   // where every convention below comes from
  std::vector<std::string> frameworks;  // reference-record framework ids it stands for
  std::string fitted_on;                // what produced `efficiency` ("validate --fit: 41 records", "calibrate: 3 runs")
  Efficiency efficiency;
  // Another stack whose efficiency this one shares (the same kernels, another configuration:
  // megatron-core takes megatron-bridge's fit); "" = its own. The file then has no
  // "efficiency"; resolve_shared_efficiency fills it in.
  std::string efficiency_from;
  // ---- communication the stack's code overlaps with compute (facts of its code, not
  // fitted: Efficiency::overlap and gather_overlap are 1 when set, and its fit leaves them)
  // The data-parallel gradient reduction is launched bucket by bucket during the backward,
  // as soon as a bucket's gradients are complete (Megatron-Core's overlap_grad_reduce):
  // only the last bucket waits for the end of the backward.
  bool overlaps_grad_reduce = false;
  // The parameter all-gather of the distributed optimizer (or FSDP) is launched bucket by
  // bucket ahead of the forward layers that need it (overlap_param_gather).
  bool overlaps_param_gather = false;
  // The interleaved pipeline's sends and receives run under the next chunk's compute
  // (Megatron-Core's overlap_p2p_comm: Efficiency::pp_p2p_overlap 1).
  bool overlaps_pp_p2p = false;
  // ---- memory conventions
  GradConvention grads = GradConvention::deepspeed;  // 16-bit grads (16 B/param) or fp32 main grads (18)
  SelectiveRecompute selective = SelectiveRecompute::attention_scores;
  double loss_bytes_per_logit = 0;      // MemoryOptions::loss_bytes_per_logit (0: the executor's)
  double loss_bytes_per_logit_tp = 0;   // MemoryOptions::loss_bytes_per_logit_tp (0: as without TP)
  // The loss's allocations and frees in bytes per logit ("+logits 2", "-logits"), without TP
  // and under TP (empty: loss_bytes_per_logit as given). Replayed through the caching
  // allocator at load: its allocated peak is loss_bytes_per_logit(_tp), its reserved
  // surplus loss_cached_bytes_per_logit(_tp).
  std::vector<std::string> loss_ops, loss_ops_tp;
  double loss_cached_bytes_per_logit = 0;     // MemoryOptions::loss_cached_bytes_per_logit
  double loss_cached_bytes_per_logit_tp = 0;  // MemoryOptions::loss_cached_bytes_per_logit_tp
  // A lighter loss the stack offers as an option beside its default (Megatron-Core's
  // cross_entropy_fusion_impl 'te': 2 B per logit), in bytes per logit with and without TP,
  // and its name; 0: none. Not a convention: `llmplan validate` assumes it, and says so,
  // only for a completed run that would not fit with the default, like a plan knob.
  double loss_option_bytes_per_logit = 0;
  std::string loss_option;
  bool zero3_root_gathered = false;     // MemoryOptions::zero3_root_gathered
  bool zero3_pp_unsharded = false;      // MemoryOptions::zero3_pp_unsharded (and Efficiency::zero3_pp_gather_once)
  bool zero3_module_fetch = false;      // MemoryOptions::zero3_module_fetch (DeepSpeed)
  bool pp_buffers_per_microbatch = false;  // MemoryOptions::pp_buffers_per_microbatch (torch.distributed.pipelining)
  bool grad_reduce_fp32 = false;        // Efficiency::grad_reduce_fp32: DP reduction in fp32 whatever the gradients' dtype
  bool sp_head_input_saved = false;     // MemoryOptions::sp_head_input_saved
  bool moe_tp_partial_gradients = true; // MemoryOptions::moe_tp_partial_gradients
  bool moe_probs_in_activation = false; // MemoryOptions::moe_probs_in_activation
  bool fp8_quantized_inputs = false;    // MemoryOptions::fp8_quantized_inputs
  bool step_fp32_grad_copy = false;     // MemoryOptions::step_fp32_grad_copy
  double step_grad_copy_group_elements = 0;  // MemoryOptions::step_grad_copy_group_elements
  Fp8WeightCopies fp8_weight_copies = Fp8WeightCopies::none;  // MemoryOptions::fp8_weight_copies
};

// `base` with the stack's memory conventions.
MemoryOptions stack_memory_options(const StackProfile& s, const MemoryOptions& base);
// `job` with the stack's gradient convention.
TrainingJob stack_job(const StackProfile& s, const TrainingJob& job);

// The stack's constants fitted elsewhere (`fitted`, e.g. the generic fit) with the stack's
// own kernel facts, which are counted or read from its code and never fitted: the loss's
// HBM bytes per logit and whether its attention runs on mma.sync.
Efficiency with_stack_kernel_facts(Efficiency fitted, const StackProfile& s);
// The time model's facts that a stack file gives in its memory section (ZeRO-3 under PP
// gathering once, the gradient reduction's dtype), written into `e`.
void apply_stack_code_facts(const StackProfile& s, Efficiency* e);

// The plan's memory under each stack's conventions, in `stacks` order: the range a plan
// must fit in when the stack is not known.
struct StackMemory {
  std::string stack;
  MemoryReport report;
};
std::vector<StackMemory> memory_under_stacks(const std::vector<StackProfile>& stacks, const ModelSpec& m, const ClusterSpec& c,
                                             const TrainingJob& j, const ParallelPlan& p, const MemoryOptions& base);

// The memory conventions that differ between two stacks, as words for `explain`
// ("fp32 main gradients (18 B/param)", "loss on fp32-upcast logits (12 B/logit)"); the FP8
// ones only for a job with FP8 linears (`fp8`).
std::vector<std::string> memory_convention_names(const StackProfile& s, int tp, bool fp8);

// One stack's memory conventions, as the sweep applies them beside its own.
struct MemoryConvention {
  std::string stack;
  MemoryOptions memory;
  GradConvention grads = GradConvention::deepspeed;
  // Bounded by another convention (or the own one) on every plan without ZeRO-3: only its
  // ZeRO-3 conventions (MemoryOptions::zero3_module_fetch) can set a higher peak.
  bool zero3_only = false;
};
// The conventions of `stacks` that can set a different peak than `own` for `job` (with its
// gradient convention; FP8 conventions count only when it has FP8 linears): duplicates and the own one dropped, and any that another one bounds from
// above in every field dropped too (for example llm-foundry's, which equals the
// executor's without its MoE-under-TP partial gradients). What is left is the list a plan
// must also fit under when the stack is not known.
std::vector<MemoryConvention> distinct_memory_conventions(const std::vector<StackProfile>& stacks, const MemoryOptions& own,
                                                          const TrainingJob& job);

// Copies the efficiency of the stack named by each one's efficiency_from (one level: a stack
// that shares cannot be shared from). bad_input naming the stack when it is not in `stacks`.
Status resolve_shared_efficiency(std::vector<StackProfile*> stacks);

// JSON in and out (data/stacks/README.md has the format). Every problem is bad_input
// naming the file and field.
Result<StackProfile> stack_from_json(const nlohmann::json& j, const std::string& origin);
nlohmann::json to_json(const StackProfile& s);
Result<StackProfile> load_stack_file(const std::string& path);

// The Efficiency fields by name, in the order of the stack file's "efficiency" object,
// with the physically possible range a stack file may give (not the fit's bounds).
struct EfficiencyField {
  const char* name;
  double Efficiency::*field;
  double lo, hi;
};
const std::vector<EfficiencyField>& efficiency_fields();

}  // namespace llmplan
