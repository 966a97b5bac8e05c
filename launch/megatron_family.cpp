#include "launch/megatron_family.h"

#include <cmath>
#include <cstdio>

#include "launch/model_shape.h"
#include "planner/cost/plan_check.h"

namespace llmplan::launch_formats {

namespace {
std::string n(int64_t v) { return std::to_string(v); }
}  // namespace

std::string number_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return n(static_cast<int64_t>(v));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

bool even_split_as_first_last(int layers, int pp, int* first, int* last) {
  *first = 0, *last = 0;
  if (pp <= 1) return true;
  const int q = layers / pp, r = layers % pp;
  if (r == 0) return true;
  // llmplan's even split puts one more layer on each of the last r stages. Megatron spreads
  // what the first and last stage do not hold evenly over the middle stages
  // (transformer_config.py L924-991), so only a remainder of 1 (a heavier last stage) or
  // pp - 1 (a lighter first stage) has that form.
  if (r == 1) {
    *last = q + 1;
    return true;
  }
  if (r == pp - 1) {
    *first = q;
    return true;
  }
  return false;
}

bool first_last_is_even_split(int layers, int pp, int first, int last) {
  if (pp <= 1) return first == 0 && last == 0;
  int middle_layers = layers, middle_stages = pp;
  if (first > 0) middle_layers -= first, --middle_stages;
  if (last > 0) middle_layers -= last, --middle_stages;
  if (middle_layers < 0 || (middle_stages > 0 && middle_layers % middle_stages != 0)) return false;
  if (middle_stages == 0 && middle_layers != 0) return false;
  const int middle = middle_stages > 0 ? middle_layers / middle_stages : 0;
  for (int s = 0; s < pp; ++s) {
    const int megatron = (s == 0 && first > 0) ? first : (s == pp - 1 && last > 0) ? last : middle;
    if (megatron != layers_in_stage(layers, pp, s)) return false;
  }
  return true;
}

Status refuse_for_megatron_core(const PlanFile& f, const std::string& to) {
  const ModelSpec& m = f.model;
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  const std::string o = to + ": ";
  if (f.gpus != f.cluster.gpus_per_node * f.cluster.nodes)
    return Status::bad_input(o + "gpus: " + n(f.gpus) + " GPUs do not fill " + n(f.cluster.nodes) + " nodes of " +
                             n(f.cluster.gpus_per_node) + " (cluster.gpus_per_node); torchrun and NeMo start the same number of "
                             "processes on every node, so the plan must use whole nodes");
  if (p.pp > 1 && splits_backward(p.schedule))
    return Status::bad_input(o + "plan.schedule: " + to_string(p.schedule) +
                             ": Megatron-Core's pipeline schedules are 1F1B and interleaved 1F1B (megatron/core/pipeline_parallel/"
                             "schedules.py get_forward_backward_func, core_v0.13.0); the zero-bubble and DualPipe orders are forks");
  if (p.pp > 1 && p.schedule == Schedule::gpipe)
    return Status::bad_input(o + "plan.schedule: gpipe: Megatron-Core has no GPipe schedule; with pipeline parallelism it runs "
                             "1F1B, or interleaved 1F1B when virtual stages are set (megatron/core/pipeline_parallel/"
                             "schedules.py get_forward_backward_func, core_v0.13.0)");
  if (p.pp > 1 && p.schedule == Schedule::interleaved && p.vpp <= 1)
    return Status::bad_input(o + "plan.schedule: interleaved with vpp 1: Megatron-Core interleaves only when virtual stages are "
                             "set (vpp > 1; schedules.py get_forward_backward_func, core_v0.13.0)");
  if (p.pp > 1 && p.schedule == Schedule::one_f_one_b && p.vpp > 1)
    return Status::bad_input(o + "plan.schedule: 1f1b with vpp " + n(p.vpp) + ": Megatron-Core runs the interleaved schedule "
                             "whenever virtual stages are set (schedules.py get_forward_backward_func, core_v0.13.0)");
  if (p.zero >= 2 && p.pp > 1)
    return Status::bad_input(o + "plan.zero: ZeRO-" + n(p.zero) + " with pp " + n(p.pp) +
                             ": Megatron-Core's ZeRO-2/3 is Megatron-FSDP (use_custom_fsdp with data_parallel_sharding_strategy "
                             "optim_grads / optim_grads_params, megatron/training/arguments.py L646-657 at core_v0.13.0), which is "
                             "not documented as supported with pipeline parallelism at core_v0.13.0 (torch FSDP2 is refused with "
                             "it outright, L605-606); use ZeRO-1 (the distributed optimizer) with pp > 1, or pp 1");
  if (p.pp > 1 && p.vpp <= 1 && p.pipeline_split == PipelineSplit::even) {
    int first = 0, last = 0;
    if (!even_split_as_first_last(m.layers, p.pp, &first, &last))
      return Status::bad_input(o + "plan.pp: " + n(m.layers) + " layers on pp " + n(p.pp) +
                               ": llmplan's even split puts one more layer on each of the last " + n(m.layers % p.pp) +
                               " stages; Megatron-Core splits evenly or sets only the first and last stage's layers "
                               "(transformer_config.py L924-991, core_v0.13.0), which cannot say that");
  }
  if (m.family == Family::llama && m.attention_bias == AttentionBias::all)
    return Status::bad_input(o + "model.attention_bias: all: Megatron-Core gives q, k and v a bias alone (add_qkv_bias) but the "
                             "output projection's bias only with a bias on every linear layer, the MLP's included "
                             "(add_bias_linear; arguments.py L886-891, core_v0.13.0)");
  if (j.seq_len > m.max_positions)
    return Status::bad_input(o + "job.seq_len: " + n(j.seq_len) + " is longer than model.max_positions (" + n(m.max_positions) +
                             "); Megatron asserts max_position_embeddings >= seq_length (arguments.py L784-787, core_v0.13.0)");
  if (p.cp > 1 && !p.flash_attention)
    return Status::bad_input(o + "plan.flash_attention: false with cp " + n(p.cp) +
                             ": Megatron-Core's context parallelism runs only in Transformer Engine's fused and flash attention "
                             "(dot_product_attention.py L52-54, core_v0.13.0: \"Context parallelism is only supported by "
                             "TEDotProductAttention\"; TE's unfused attention has no context parallelism)");
  if (p.ep > 1 && j.precision == Precision::fp16)
    return Status::bad_input(o + "job.precision: fp16 with ep " + n(p.ep) +
                             ": Megatron asserts that expert parallelism is not used with fp16 (arguments.py L956-957, core_v0.13.0)");
  return Status::ok();
}

Status name_imported_model(const ImportOptions& opt, const std::string& origin, const std::string& fallback_name,
                           const std::string& described_by, ModelSpec* m, std::vector<std::string>* notes) {
  if (!opt.model.empty()) {
    Result<ModelSpec> given = opt.presets->resolve_model(opt.model, "--model");
    if (!given) return given.status();
    if (std::optional<ShapeMismatch> d = shape_mismatch(shape_of(*m), *given))
      return Status::bad_input(origin + ": the config's model and --model " + opt.model + " differ in " + mismatch_text(*d) +
                               " (the config's value first)");
    const double cf = m->moe.capacity_factor;
    const bool dropout = m->dropout;
    *m = *given;
    m->moe.capacity_factor = cf;
    m->dropout = dropout;
    return Status::ok();
  }
  const std::vector<std::string> ids = presets_with_shape(*opt.presets, shape_of(*m));
  if (!ids.empty()) {
    const std::string& id = ids.front();
    Result<ModelSpec> p = opt.presets->model(id);
    m->name = id;
    m->source = described_by + "; the shape of preset " + id + " (" + p->source + ")";
    notes->push_back("model: the shape is preset " + id + "'s");
    return Status::ok();
  }
  m->name = fallback_name;
  m->source = described_by;
  notes->push_back("model: the shape matches no preset; named '" + fallback_name + "'");
  return Status::ok();
}

Result<ClusterSpec> imported_cluster(const ImportOptions& opt, int world, int gpus_per_node, int nodes, const std::string& origin) {
  const std::string gpu = opt.gpu.empty() ? "h100-sxm" : opt.gpu;
  Result<ClusterSpec> c = opt.presets->cluster_for_gpu(gpu);
  if (!c) return c.status().with_context(origin + ": --gpu");
  ClusterSpec out = *c;
  if (opt.gpus_per_node > 0) gpus_per_node = opt.gpus_per_node, nodes = 0;
  if (gpus_per_node > 0) {
    out.gpus_per_node = gpus_per_node;
    out.nodes = nodes > 0 ? nodes : nodes_for(world, gpus_per_node);
  } else {
    out = cluster_with_gpus(out, world);
  }
  if (static_cast<int64_t>(out.nodes) * out.gpus_per_node < world)
    return Status::bad_input(origin + ": " + n(out.nodes) + " nodes of " + n(out.gpus_per_node) + " GPUs hold fewer than the " +
                             n(world) + " GPUs the plan uses");
  return out;
}

Status check_imported(const PlanFile& f, const std::string& origin) {
  if (Status st = check_inputs(f.model, f.job, origin); !st) return st;
  return check_plan_status(f.model, f.cluster, f.job, f.plan, f.gpus, origin);
}

}  // namespace llmplan::launch_formats
