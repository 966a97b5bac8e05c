#include "planner/cost/stack_profile.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "planner/cost/caching_allocator.h"
#include "planner/spec/json_fields.h"
#include "planner/spec/spec_json.h"

namespace llmplan {

using nlohmann::json;

const std::vector<EfficiencyField>& efficiency_fields() {
  static const std::vector<EfficiencyField> kFields = {
      {"gemm", &Efficiency::gemm, 0, 1},
      {"gemm_half_dim", &Efficiency::gemm_half_dim, 0, 1e6},
      {"gemm_traffic", &Efficiency::gemm_traffic, 0, 1},
      {"attention", &Efficiency::attention, 0, 1},
      {"attention_half_seq", &Efficiency::attention_half_seq, 0, 1e6},
      {"attention_traffic", &Efficiency::attention_traffic, 0, 1},
      {"attention_mma_sync", &Efficiency::attention_mma_sync, 0, 1},
      {"attention_exp_serial", &Efficiency::attention_exp_serial, 0, 1},
      {"memory", &Efficiency::memory, 0, 1},
      {"network", &Efficiency::network, 0, 1},
      {"kernel_launch_s", &Efficiency::kernel_launch_s, 0, 1},
      {"overlap", &Efficiency::overlap, 0, 1},
      {"gather_overlap", &Efficiency::gather_overlap, 0, 1},
      {"tp_overlap", &Efficiency::tp_overlap, 0, 1},
      {"fp8_gemm_speedup", &Efficiency::fp8_gemm_speedup, 1, 4},
      {"loss_bytes_per_logit", &Efficiency::loss_bytes_per_logit, 0, 1000},
  };
  return kFields;
}

MemoryOptions stack_memory_options(const StackProfile& s, const MemoryOptions& base) {
  MemoryOptions o = base;
  o.selective = s.selective;
  o.loss_bytes_per_logit = s.loss_bytes_per_logit;
  o.loss_bytes_per_logit_tp = s.loss_bytes_per_logit_tp;
  o.loss_cached_bytes_per_logit = s.loss_cached_bytes_per_logit;
  o.loss_cached_bytes_per_logit_tp = s.loss_cached_bytes_per_logit_tp;
  o.zero3_root_gathered = s.zero3_root_gathered;
  o.zero3_pp_unsharded = s.zero3_pp_unsharded;
  o.zero3_module_fetch = s.zero3_module_fetch;
  o.pp_buffers_per_microbatch = s.pp_buffers_per_microbatch;
  o.sp_head_input_saved = s.sp_head_input_saved;
  o.moe_tp_partial_gradients = s.moe_tp_partial_gradients;
  o.moe_probs_in_activation = s.moe_probs_in_activation;
  o.fp8_quantized_inputs = s.fp8_quantized_inputs;
  o.fp8_weight_copies = s.fp8_weight_copies;
  o.step_fp32_grad_copy = s.step_fp32_grad_copy;
  o.step_grad_copy_group_elements = s.step_grad_copy_group_elements;
  return o;
}

TrainingJob stack_job(const StackProfile& s, const TrainingJob& job) {
  TrainingJob j = job;
  j.grads = s.grads;
  return j;
}

Efficiency with_stack_kernel_facts(Efficiency fitted, const StackProfile& s) {
  fitted.loss_bytes_per_logit = s.efficiency.loss_bytes_per_logit;
  fitted.attention_mma_sync = s.efficiency.attention_mma_sync;
  fitted.attention_exp_serial = s.efficiency.attention_exp_serial;
  apply_stack_code_facts(s, &fitted);
  return fitted;
}

void apply_stack_code_facts(const StackProfile& s, Efficiency* e) {
  e->zero3_pp_gather_once = s.zero3_pp_unsharded ? 1 : 0;
  e->grad_reduce_fp32 = s.grad_reduce_fp32 ? 1 : 0;
  if (s.overlaps_grad_reduce) e->overlap = 1;
  if (s.overlaps_param_gather) e->gather_overlap = 1;
  e->pp_p2p_overlap = s.overlaps_pp_p2p ? 1 : 0;
}

std::vector<StackMemory> memory_under_stacks(const std::vector<StackProfile>& stacks, const ModelSpec& m, const ClusterSpec& c,
                                             const TrainingJob& j, const ParallelPlan& p, const MemoryOptions& base) {
  std::vector<StackMemory> out;
  for (const StackProfile& s : stacks) out.push_back({s.name, estimate_memory(m, c, stack_job(s, j), p, stack_memory_options(s, base))});
  return out;
}

std::vector<std::string> memory_convention_names(const StackProfile& s, int tp, bool fp8) {
  std::vector<std::string> out;
  out.push_back(s.grads == GradConvention::megatron ? "fp32 main gradients beside 16-bit weights (18 B/param with AdamW)"
                                                    : "16-bit gradients, fp32 master weights and moments (16 B/param with AdamW)");
  out.push_back(s.selective == SelectiveRecompute::torch_op_sac ? "selective recompute keeps PyTorch op-SAC's tensors"
                                                                : "selective recompute drops only the attention scores");
  const double loss = tp > 1 && s.loss_bytes_per_logit_tp > 0 ? s.loss_bytes_per_logit_tp : s.loss_bytes_per_logit;
  char b[96];
  const double cached = tp > 1 && s.loss_bytes_per_logit_tp > 0 ? s.loss_cached_bytes_per_logit_tp : s.loss_cached_bytes_per_logit;
  if (loss > 0 && cached > 0) std::snprintf(b, sizeof b, "loss holds %.0f B per logit (fp32 buffers) and keeps %.0f more reserved", loss, cached);
  else if (loss > 0) std::snprintf(b, sizeof b, "loss holds %.0f B per logit (fp32 buffers)", loss);
  else std::snprintf(b, sizeof b, "loss holds the 16-bit logits and their fp32 softmax");
  out.push_back(b);
  if (s.zero3_root_gathered) out.push_back("ZeRO-3 root unit (embedding, head) gathered through backward");
  if (s.pp_buffers_per_microbatch) out.push_back("PP: receive buffers and outputs of every micro-batch kept to the end of the step");
  if (s.zero3_module_fetch) out.push_back("ZeRO-3 gathers per module within DeepSpeed's live/reuse window; gradients through its reduce bucket");
  if (s.zero3_pp_unsharded) out.push_back("ZeRO-3 with pipeline parallelism: the stage's parameters gathered and fp32 gradients unsharded all step");
  if (s.sp_head_input_saved) out.push_back("SP: the head's gathered input saved for backward");
  if (s.moe_probs_in_activation) out.push_back("MoE: routing probabilities applied in the experts' activation (their outputs not kept)");
  if (s.step_fp32_grad_copy) out.push_back("optimizer step on fp32 copies of 16-bit gradients (4 B per stepped param)");
  if (!fp8) return out;  // the FP8 conventions set no byte of a 16-bit job
  if (s.fp8_quantized_inputs) out.push_back("FP8: linear inputs saved quantized for the weight gradients");
  if (s.fp8_weight_copies == Fp8WeightCopies::cached) out.push_back("FP8: every layer's quantized weight copies cached all step");
  if (s.fp8_weight_copies == Fp8WeightCopies::per_microbatch) out.push_back("FP8: quantized weights saved with each micro-batch");
  if (s.fp8_weight_copies == Fp8WeightCopies::primary) out.push_back("FP8: the linear weights kept only as FP8 (no 16-bit copy)");
  return out;
}

namespace {

// The most elements the optimizer step's fp32 gradient copy can hold (step_grad_copy_bytes):
// none without it, a ZeRO-3 sub-group's when capped, else the whole shard (infinite).
double step_copy_cap(const MemoryOptions& o) {
  if (!o.step_fp32_grad_copy) return 0;
  return o.step_grad_copy_group_elements > 0 ? o.step_grad_copy_group_elements : std::numeric_limits<double>::infinity();
}

// a <= b in every convention that sets bytes (both with the same selective policy, whose
// two kinds keep different tensors and so are not ordered).
bool bounded_by(const MemoryConvention& a, const MemoryConvention& b, bool outside_zero3 = false) {
  auto loss = [](const MemoryOptions& o, bool tp) { return tp && o.loss_bytes_per_logit_tp > 0 ? o.loss_bytes_per_logit_tp : o.loss_bytes_per_logit; };
  // 0 means the executor's loss, 6 bytes per 16-bit logit: compare in bytes.
  auto bytes = [&](const MemoryOptions& o, bool tp) {
    const double x = loss(o, tp);
    return (x > 0 ? x : 6.0) + (tp && o.loss_bytes_per_logit_tp > 0 ? o.loss_cached_bytes_per_logit_tp : o.loss_cached_bytes_per_logit);
  };
  return a.memory.selective == b.memory.selective && (a.grads == b.grads || b.grads == GradConvention::megatron) &&
         bytes(a.memory, false) <= bytes(b.memory, false) && bytes(a.memory, true) <= bytes(b.memory, true) &&
         (!a.memory.zero3_root_gathered || b.memory.zero3_root_gathered) && (!a.memory.sp_head_input_saved || b.memory.sp_head_input_saved) &&
         (!a.memory.zero3_pp_unsharded || b.memory.zero3_pp_unsharded) &&
         // Module fetch holds more than layer units on small layers and less on large ones.
         (outside_zero3 || a.memory.zero3_module_fetch == b.memory.zero3_module_fetch) &&
         (!a.memory.pp_buffers_per_microbatch || b.memory.pp_buffers_per_microbatch) &&
         (!a.memory.moe_tp_partial_gradients || b.memory.moe_tp_partial_gradients) &&
         (a.memory.moe_probs_in_activation || !b.memory.moe_probs_in_activation) &&
         step_copy_cap(a.memory) <= step_copy_cap(b.memory) &&
         // Quantized saved inputs weigh less than 16-bit ones (the output projection's extra
         // FP8 copy is narrower than the three inputs it saves on); weight copies of two
         // kinds are not ordered.
         (a.memory.fp8_quantized_inputs || !b.memory.fp8_quantized_inputs) &&
         // FP8 primary weights (1-2 B) and the 16-bit weight alone (2 B) are not ordered
         // either; both are at most the 16-bit weight plus cached copies.
         (a.memory.fp8_weight_copies == b.memory.fp8_weight_copies ||
          (a.memory.fp8_weight_copies == Fp8WeightCopies::none && b.memory.fp8_weight_copies != Fp8WeightCopies::primary) ||
          (a.memory.fp8_weight_copies == Fp8WeightCopies::primary && b.memory.fp8_weight_copies == Fp8WeightCopies::cached));
}

}  // namespace

std::vector<MemoryConvention> distinct_memory_conventions(const std::vector<StackProfile>& stacks, const MemoryOptions& own,
                                                          const TrainingJob& job) {
  // Without FP8 linears the FP8 conventions set no byte: compared as equal.
  auto relevant = [&](MemoryOptions o) {
    if (!job.fp8_linear()) o.fp8_quantized_inputs = false, o.fp8_weight_copies = Fp8WeightCopies::none;
    return o;
  };
  const MemoryConvention self{"", relevant(own), job.grads};
  std::vector<MemoryConvention> all;
  for (const StackProfile& s : stacks) all.push_back({s.name, relevant(stack_memory_options(s, own)), s.grads});
  std::vector<MemoryConvention> out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (bounded_by(all[i], self)) continue;
    bool dominated = false;
    for (size_t k = 0; k < all.size() && !dominated; ++k) {
      if (k == i) continue;
      // Bounded by another one (ties: the one that comes first in stack order stays).
      dominated = bounded_by(all[i], all[k]) && (!bounded_by(all[k], all[i]) || k < i);
    }
    if (dominated) continue;
    // Module-fetch ZeRO-3 (DeepSpeed's) sets no byte of a plan without ZeRO-3: there it is
    // bounded as the rest of its conventions are.
    bool outside = bounded_by(all[i], self, true);
    for (size_t k = 0; k < all.size() && !outside; ++k) outside = k != i && bounded_by(all[i], all[k], true);
    all[i].zero3_only = outside;
    out.push_back(all[i]);
  }
  return out;
}

Result<StackProfile> stack_from_json(const json& j, const std::string& origin) {
  StackProfile s;
  FieldReader r(j, origin, "");
  r.get("name", &s.name);
  r.get("description", &s.description, false);
  r.get("source", &s.source);
  r.get("fitted_on", &s.fitted_on, false);
  if (const json* f = r.raw("frameworks")) {
    if (!f->is_array()) r.fail("frameworks", "expected an array of framework ids, got " + json_value_text(*f));
    else
      for (const json& x : *f) {
        if (!x.is_string()) {
          r.fail("frameworks", "expected an array of strings, got " + json_value_text(x));
          break;
        }
        s.frameworks.push_back(x.get<std::string>());
      }
  }
  r.get("efficiency_from", &s.efficiency_from, false);
  if (!s.efficiency_from.empty() && r.has("efficiency"))
    r.fail("efficiency_from", "expected either efficiency or efficiency_from (another stack's), not both");
  if (!r.status()) return r.status();
  {
    FieldReader o = r.child("overlap");
    o.get("grad_reduce", &s.overlaps_grad_reduce, false);
    o.get("param_gather", &s.overlaps_param_gather, false);
    o.get("pp_p2p", &s.overlaps_pp_p2p, false);
    if (Status st = o.finish(); !st) return st;
  }
  FieldReader e = r.child("efficiency");
  // Every constant may be given; one left out keeps the planner's default (the "llmplan"
  // profile's value).
  if (s.efficiency_from.empty())
    for (const EfficiencyField& f : efficiency_fields()) e.get(f.name, &(s.efficiency.*f.field), f.lo, f.hi, false);
  if (Status st = e.finish(); !st) return st;
  if (s.efficiency.gemm <= 0 || s.efficiency.memory <= 0 || s.efficiency.network <= 0 || s.efficiency.attention <= 0)
    return Status::bad_input(origin + ": field 'efficiency': gemm, attention, memory and network must be positive fractions");
  FieldReader m = r.child("memory");
  m.get_enum("grads", &s.grads, "deepspeed, megatron", false);
  m.get_enum("selective", &s.selective, "attention_scores, torch_op_sac", false);
  m.get("loss_bytes_per_logit", &s.loss_bytes_per_logit, 0, 1000, false);
  m.get("loss_bytes_per_logit_tp", &s.loss_bytes_per_logit_tp, 0, 1000, false);
  // The loss as allocator ops: its allocated peak and reserved surplus by replay.
  for (auto [key, ops, total, cached] :
       {std::tuple{"loss_ops", &s.loss_ops, &s.loss_bytes_per_logit, &s.loss_cached_bytes_per_logit},
        std::tuple{"loss_ops_tp", &s.loss_ops_tp, &s.loss_bytes_per_logit_tp, &s.loss_cached_bytes_per_logit_tp}}) {
    const json* v = m.raw(key);
    if (v == nullptr || !m.status()) continue;
    if (!v->is_array()) {
      m.fail(key, "expected a list of allocator ops (\"+NAME SIZE\", \"-NAME\"), got " + json_value_text(*v));
      continue;
    }
    for (const json& x : *v) {
      if (!x.is_string()) {
        m.fail(key, "expected allocator ops as strings, got " + json_value_text(x));
        break;
      }
      ops->push_back(x.get<std::string>());
    }
    if (!m.status()) continue;
    Result<std::vector<AllocatorOp>> parsed = parse_allocator_ops(*ops, m.field_name(key));
    if (!parsed) return parsed.status().with_context(origin);
    const AllocatorPeaks peaks = replay_caching_allocator(*parsed);
    const std::string other = std::string(key) == "loss_ops" ? "loss_bytes_per_logit" : "loss_bytes_per_logit_tp";
    if (m.has(other.c_str()) && std::abs(*total - peaks.allocated) > 1e-9)
      m.fail(other.c_str(), "expected " + std::to_string(peaks.allocated) + " (the allocated peak of " + key + "), or leave it out");
    *total = peaks.allocated;
    *cached = peaks.reserved - peaks.allocated;
  }
  m.get("loss_option_bytes_per_logit", &s.loss_option_bytes_per_logit, 0, 1000, false);
  m.get("loss_option", &s.loss_option, false);
  if (m.status() && (s.loss_option_bytes_per_logit > 0) != !s.loss_option.empty())
    m.fail("loss_option", "expected loss_option (its name) and loss_option_bytes_per_logit (> 0) together, or neither");
  m.get("zero3_root_gathered", &s.zero3_root_gathered, false);
  m.get("zero3_pp_unsharded", &s.zero3_pp_unsharded, false);
  m.get("zero3_module_fetch", &s.zero3_module_fetch, false);
  m.get("pp_buffers_per_microbatch", &s.pp_buffers_per_microbatch, false);
  m.get("grad_reduce_fp32", &s.grad_reduce_fp32, false);
  apply_stack_code_facts(s, &s.efficiency);
  m.get("sp_head_input_saved", &s.sp_head_input_saved, false);
  m.get("moe_tp_partial_gradients", &s.moe_tp_partial_gradients, false);
  m.get("moe_probs_in_activation", &s.moe_probs_in_activation, false);
  m.get("fp8_quantized_inputs", &s.fp8_quantized_inputs, false);
  m.get_enum("fp8_weight_copies", &s.fp8_weight_copies, "none, cached, per_microbatch, primary", false);
  m.get("step_fp32_grad_copy", &s.step_fp32_grad_copy, false);
  m.get("step_grad_copy_group_elements", &s.step_grad_copy_group_elements, 0, 1e15, false);
  if (Status st = m.finish(); !st) return st;
  r.allow("notes");
  if (Status st = r.finish(); !st) return st;
  if (s.name.empty()) return Status::bad_input(origin + ": field 'name': expected a non-empty stack name");
  return s;
}

json to_json(const StackProfile& s) {
  json eff = json::object();
  for (const EfficiencyField& f : efficiency_fields()) eff[f.name] = s.efficiency.*f.field;
  json out = {{"name", s.name},
          {"description", s.description},
          {"source", s.source},
          {"frameworks", s.frameworks},
          {"fitted_on", s.fitted_on},
          {"efficiency", eff},
          {"memory",
           {{"grads", to_string(s.grads)},
            {"selective", to_string(s.selective)},
            {"loss_bytes_per_logit", s.loss_bytes_per_logit},
            {"loss_bytes_per_logit_tp", s.loss_bytes_per_logit_tp},
            {"zero3_root_gathered", s.zero3_root_gathered},
            {"zero3_pp_unsharded", s.zero3_pp_unsharded},
            {"zero3_module_fetch", s.zero3_module_fetch},
            {"pp_buffers_per_microbatch", s.pp_buffers_per_microbatch},
            {"grad_reduce_fp32", s.grad_reduce_fp32},
            {"sp_head_input_saved", s.sp_head_input_saved},
            {"moe_tp_partial_gradients", s.moe_tp_partial_gradients},
            {"moe_probs_in_activation", s.moe_probs_in_activation},
            {"fp8_quantized_inputs", s.fp8_quantized_inputs},
            {"fp8_weight_copies", to_string(s.fp8_weight_copies)},
            {"step_fp32_grad_copy", s.step_fp32_grad_copy},
            {"step_grad_copy_group_elements", s.step_grad_copy_group_elements}}}};
  if (!s.efficiency_from.empty()) out.erase("efficiency"), out["efficiency_from"] = s.efficiency_from;
  if (s.overlaps_grad_reduce || s.overlaps_param_gather || s.overlaps_pp_p2p)
    out["overlap"] = {{"grad_reduce", s.overlaps_grad_reduce}, {"param_gather", s.overlaps_param_gather}, {"pp_p2p", s.overlaps_pp_p2p}};
  // The loss as ops when the file gave them (its byte counts are theirs: written once).
  if (s.loss_option_bytes_per_logit > 0)
    out["memory"]["loss_option"] = s.loss_option, out["memory"]["loss_option_bytes_per_logit"] = s.loss_option_bytes_per_logit;
  if (!s.loss_ops.empty()) out["memory"]["loss_ops"] = s.loss_ops, out["memory"].erase("loss_bytes_per_logit");
  if (!s.loss_ops_tp.empty()) out["memory"]["loss_ops_tp"] = s.loss_ops_tp, out["memory"].erase("loss_bytes_per_logit_tp");
  return out;
}

Status resolve_shared_efficiency(std::vector<StackProfile*> stacks) {
  for (StackProfile* s : stacks) {
    if (s->efficiency_from.empty()) continue;
    const StackProfile* from = nullptr;
    for (const StackProfile* o : stacks)
      if (o->name == s->efficiency_from) from = o;
    if (from == nullptr || !from->efficiency_from.empty())
      return Status::bad_input("stack '" + s->name + "': field 'efficiency_from': expected a stack with its own efficiency, got '" +
                               s->efficiency_from + "'");
    s->efficiency = from->efficiency;
    apply_stack_code_facts(*s, &s->efficiency);  // its own code's facts, not the other's
  }
  return Status::ok();
}

Result<StackProfile> load_stack_file(const std::string& path) {
  Result<json> j = read_json_file(path);
  if (!j) return j.status();
  return stack_from_json(*j, path);
}

}  // namespace llmplan
