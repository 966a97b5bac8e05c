#include "launch/megatron_family.h"

#include <algorithm>
#include <cctype>
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

Result<std::vector<int>> first_last_stage_layers(int layers, int pp, int vpp, int first, int last, const std::string& flag_first,
                                                 const std::string& flag_last) {
  vpp = std::max(1, vpp);
  if (pp < 2)
    return Status::bad_input(flag_first + "/" + flag_last + ": uneven stages need pipeline parallelism (pp " + n(pp) + ")");
  int middle_layers = layers, middle_stages = pp;
  if (first > 0) middle_layers -= first, --middle_stages;
  if (last > 0) middle_layers -= last, --middle_stages;
  // transformer_config.py: "Mismatch: N middle layers remaining but M middle stages".
  if (middle_layers < 0 || (middle_stages == 0) != (middle_layers == 0) || (middle_stages > 0 && middle_layers % middle_stages != 0))
    return Status::bad_input(flag_first + "/" + flag_last + " " + n(first) + "/" + n(last) + ": " + n(layers) + " layers leave " +
                             n(middle_layers) + " for " + n(middle_stages) + " middle stages of pp " + n(pp) +
                             "; Megatron-Core needs them to divide evenly (transformer_config.py, core_v0.13.0)");
  const int middle = middle_stages > 0 ? middle_layers / middle_stages : 0;
  std::vector<int> per_stage(static_cast<size_t>(pp), middle);
  if (first > 0) per_stage.front() = first;
  if (last > 0) per_stage.back() = last;
  for (int s = 0; s < pp; ++s) {
    const int l = per_stage[static_cast<size_t>(s)];
    if (l % vpp != 0 || l < vpp) {
      const std::string& flag = s == 0 && first > 0 ? flag_first : s == pp - 1 && last > 0 ? flag_last : flag_first + "/" + flag_last;
      return Status::bad_input(flag + ": stage " + n(s) + " would hold " + n(l) + " layers, which Megatron-Core splits into vpp " +
                               n(vpp) + " equal chunks of at least one layer (transformer_config.py: \"must be divisible by virtual "
                               "pipeline parallel degree\", core_v0.13.0)");
    }
  }
  std::vector<int> out(static_cast<size_t>(pp * vpp));
  for (int c = 0; c < vpp; ++c)
    for (int s = 0; s < pp; ++s) out[static_cast<size_t>(c * pp + s)] = per_stage[static_cast<size_t>(s)] / vpp;
  return out;
}

bool split_as_first_last(int layers, const ParallelPlan& p, int* first, int* last) {
  *first = 0, *last = 0;
  if (p.pp < 2) return false;
  const int vpp = std::max(1, p.vpp);
  const std::vector<int> have = virtual_stage_counts(layers, p);
  const int a = pp_stage_layers(layers, p, 0), b = pp_stage_layers(layers, p, p.pp - 1);
  const int middle = p.pp > 2 ? pp_stage_layers(layers, p, 1) : -1;
  const int f = a == middle ? 0 : a, l = b == middle ? 0 : b;
  const std::string none;
  const Result<std::vector<int>> want = first_last_stage_layers(layers, p.pp, vpp, f, l, none, none);
  if (!want.ok() || want.value() != have) return false;
  *first = f, *last = l;
  return true;
}

Result<std::vector<int>> parse_pipeline_layout(const std::string& layout, int pp, int mtp_layers, const std::string& flag) {
  auto bad = [&](const std::string& why) { return Status::bad_input(flag + " '" + layout + "': " + why); };
  if (layout.size() > 100000) return bad("longer than 100000 characters");
  // Unroll as parse_str_to_list does: drop commas, "(group)*n" (no nesting), then "x*n".
  std::string s;
  for (char ch : layout)
    if (ch != ',' && ch != ' ') s += ch;
  constexpr size_t kMaxUnrolled = 1000000;
  auto repeat_count = [](const std::string& s, size_t at, size_t* end) -> int64_t {
    size_t k = at;
    int64_t count = 0;
    while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k])) && count <= 1000000) count = count * 10 + (s[k++] - '0');
    *end = k;
    return k == at ? -1 : count;
  };
  std::string groups;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '(') {
      const size_t close = s.find(')', i);
      if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != '*') return bad("expected (...)*n");
      const std::string body = s.substr(i + 1, close - i - 1);
      if (body.empty() || body.find('(') != std::string::npos) return bad("expected a non-empty, unnested group in (...)*n");
      size_t end = 0;
      const int64_t count = repeat_count(s, close + 2, &end);
      if (count < 0 || count > 1000000 || groups.size() + body.size() * static_cast<size_t>(count) > kMaxUnrolled)
        return bad("expected a repeat count after (...)* that unrolls to at most 1000000 symbols");
      for (int64_t r = 0; r < count; ++r) groups += body;
      i = end;
    } else {
      groups += s[i++];
    }
  }
  std::string flat;
  for (size_t i = 0; i < groups.size();) {
    if (i + 1 < groups.size() && groups[i + 1] == '*') {
      size_t end = 0;
      const int64_t count = repeat_count(groups, i + 2, &end);
      if (count < 0 || flat.size() + static_cast<size_t>(count) > kMaxUnrolled) return bad("expected x*n unrolling to at most 1000000 symbols");
      flat.append(static_cast<size_t>(count), groups[i]);
      i = end;
    } else {
      flat += groups[i++];
    }
  }
  std::vector<std::string> stages(1);
  for (char ch : flat) {
    if (ch == '|') {
      stages.emplace_back();
    } else if (ch == 'E' || ch == 't' || ch == 'm' || ch == 'L') {
      stages.back() += ch;
    } else {
      return bad(std::string("unknown symbol '") + ch + "' (expected E, t, m, L, |, *, parentheses, commas)");
    }
  }
  const int nv = static_cast<int>(stages.size());
  if (pp < 1 || nv % pp != 0) return bad(n(nv) + " stages are not a multiple of the pipeline size " + n(pp));
  std::vector<int> out;
  int mtp_seen = 0;
  for (int v = 0; v < nv; ++v) {
    const std::string& st = stages[static_cast<size_t>(v)];
    int t = 0;
    for (size_t k = 0; k < st.size(); ++k) {
      const char ch = st[k];
      if (ch == 't') ++t;
      if (ch == 'E' && (v != 0 || k != 0)) return bad("llmplan keeps the embedding at the start of virtual stage 0");
      if (ch == 'L' && (v != nv - 1 || k + 1 != st.size())) return bad("llmplan keeps the loss at the end of the last virtual stage");
      if (ch == 'm') {
        if (v != nv - 1) return bad("llmplan keeps the MTP layers with the loss on the last virtual stage");
        ++mtp_seen;
      }
    }
    if (t == 0) return bad("virtual stage " + n(v) + " holds no decoder layer, which llmplan's stages need");
    out.push_back(t);
  }
  if (stages.front().empty() || stages.front()[0] != 'E') return bad("expected the embedding 'E' at the start");
  if (stages.back().empty() || stages.back().back() != 'L') return bad("expected the loss 'L' at the end");
  if (mtp_seen != mtp_layers) return bad(n(mtp_seen) + " MTP layers, the model has " + n(mtp_layers));
  return out;
}

std::string pipeline_layout_text(const ModelSpec& m, const ParallelPlan& p) {
  const int nv = p.pp * std::max(1, p.vpp);
  std::string out;
  for (int v = 0; v < nv; ++v) {
    if (v > 0) out += '|';
    if (v == 0) out += 'E';
    const int t = virtual_stage_layers(m.layers, p, v);
    out += t == 1 ? std::string("t") : "t*" + n(t);
    if (v == nv - 1) out += std::string(static_cast<size_t>(m.mtp_layers), 'm') + "L";
  }
  return out;
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
  if (p.offload_params)
    return Status::bad_input(o + "plan.offload_params: true: Megatron-Core offloads the optimizer (--optimizer-cpu-offload, "
                             "HybridDeviceOptimizer) and activations, not ZeRO-3's parameter shard (its FSDP keeps parameters "
                             "on the GPU, core_v0.13.0 arguments.py); DeepSpeed (offload_param) or torchtitan "
                             "(training.enable_cpu_offload) run it");
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
