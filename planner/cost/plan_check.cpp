#include "planner/cost/plan_check.h"

#include <algorithm>
#include <cstdint>

#include "planner/spec/fp8_recipe.h"
#include "planner/spec/recipe.h"
#include "planner/spec/spec_json.h"

namespace llmplan {

const char* describe(RejectReason r) {
  switch (r) {
    case RejectReason::none: return "ok";
    case RejectReason::world_size_mismatch: return "dp*tp*pp*cp does not equal the GPU count";
    case RejectReason::tp_heads: return "tp does not divide heads and kv_heads";
    case RejectReason::tp_exceeds_node: return "tp larger than GPUs per node";
    case RejectReason::pp_layers: return "pp larger than the layer count";
    case RejectReason::vpp_layers:
      return "layers (+2 under the embedding/loss split) not divisible by pp*vpp, a custom split that does not hold the layers, or "
             "vpp without pp";
    case RejectReason::activation_offload: return "activation offload of more layers than the first pipeline stage holds";
    case RejectReason::cp_sequence: return "2*cp does not divide the sequence length";
    case RejectReason::cp_needs_flash: return "context parallel over a ring needs flash attention";
    case RejectReason::ep_experts: return "ep does not divide experts and dp*cp (or model is dense)";
    case RejectReason::sp_needs_tp: return "sequence parallel needs tp > 1";
    case RejectReason::moe_tp_needs_sp: return "MoE with tp > 1 needs sequence parallel";
    case RejectReason::batch_divisibility: return "global batch not divisible by micro-batch*dp";
    case RejectReason::interleave_microbatches: return "interleaved schedule needs micro-batches divisible by pp";
    case RejectReason::schedule_shape:
      return "schedule shape: zb-h1 runs one stage per rank (vpp 1); zbv and dualpipev two chunks per rank in a V (vpp 2, layers "
             "divisible by 2*pp); dualpipev needs at least 2*pp micro-batches; dualpipe two stages per rank (vpp 2), pp even and at "
             "least 4, layers divisible by pp, an even number of micro-batches, at least 2*pp";
    case RejectReason::zero_offload: return "optimizer offload needs ZeRO >= 1 and no pipeline; parameter offload ZeRO-3 with it";
    case RejectReason::recompute_layers: return "recompute_layers outside 1..layers per model chunk";
    case RejectReason::lora_zero3: return "ZeRO-3 with LoRA is not supported";
    case RejectReason::precision_unsupported: return "GPU has no peak for this precision (or no tensor cores for its FP8 recipe)";
    case RejectReason::frozen_all: return "every layer is frozen";
    case RejectReason::framework_refuses: return "the framework (--framework) cannot run it";
    case RejectReason::does_not_fit: return "does not fit in GPU memory";
    case RejectReason::host_does_not_fit: return "fits in GPU memory, but what it offloads does not fit in the node's host memory";
    case RejectReason::kCount: break;
  }
  return "?";
}

namespace {
int slots_per_virtual_stage(int layers, const ParallelPlan& p) { return (layers + 2) / (p.pp * std::max(1, p.vpp)); }

// Custom split: the plan's own count of virtual stage v (0 outside the list, which check_plan
// refuses before any cost is asked), and the sum of those before it.
int custom_layers(const ParallelPlan& p, int v) {
  return v >= 0 && v < static_cast<int>(p.stage_layers.size()) ? p.stage_layers[static_cast<size_t>(v)] : 0;
}
int custom_layers_before(const ParallelPlan& p, int v) {
  int sum = 0;
  for (int u = 0; u < v && u < static_cast<int>(p.stage_layers.size()); ++u) sum += p.stage_layers[static_cast<size_t>(u)];
  return sum;
}
int custom_pp_stage_layers(const ParallelPlan& p, int s) {
  int sum = 0;
  for (int c = 0; c < std::max(1, p.vpp); ++c) sum += custom_layers(p, chunk_virtual_stage(p, s, c));
  return sum;
}
}  // namespace

int virtual_stage_layers(int layers, const ParallelPlan& p, int v) {
  const int nv = p.pp * std::max(1, p.vpp);
  if (p.pipeline_split == PipelineSplit::even) return layers_in_stage(layers, nv, v);
  if (p.pipeline_split == PipelineSplit::custom) return custom_layers(p, v);
  return slots_per_virtual_stage(layers, p) - (v == 0 ? 1 : 0) - (v == nv - 1 ? 1 : 0);
}

int first_layer_of_virtual_stage(int layers, const ParallelPlan& p, int v) {
  const int nv = p.pp * std::max(1, p.vpp);
  if (p.pipeline_split == PipelineSplit::even) return first_layer_of_stage(layers, nv, v);
  if (p.pipeline_split == PipelineSplit::custom) return custom_layers_before(p, v);
  return v * slots_per_virtual_stage(layers, p) - (v > 0 ? 1 : 0);
}

int split_detail::pp_stage_layers(int layers, const ParallelPlan& p, int s) {
  if (p.pipeline_split == PipelineSplit::custom) return custom_pp_stage_layers(p, s);
  const int vpp = std::max(1, p.vpp);
  return vpp * slots_per_virtual_stage(layers, p) - (s == 0 ? 1 : 0) - (s == p.pp - 1 ? 1 : 0);
}

namespace {
int custom_first_layer_of_pp_stage(const ParallelPlan& p, int s) {
  if (p.vpp <= 1) return custom_layers_before(p, s);
  int sum = 0;
  for (int t = 0; t < s; ++t) sum += custom_pp_stage_layers(p, t);
  return sum;
}
}  // namespace

int split_detail::first_layer_of_pp_stage(int layers, const ParallelPlan& p, int s) {
  if (p.pipeline_split == PipelineSplit::custom) return custom_first_layer_of_pp_stage(p, s);
  return s * std::max(1, p.vpp) * slots_per_virtual_stage(layers, p) - (s > 0 ? 1 : 0);
}

int stage_layer_global_index(int layers, const ParallelPlan& p, int s, int i) {
  if (p.vpp <= 1) return first_layer_of_pp_stage(layers, p, s) + i;
  for (int c = 0; c < p.vpp; ++c) {
    const int v = chunk_virtual_stage(p, s, c), n = virtual_stage_layers(layers, p, v);
    if (i < n) return first_layer_of_virtual_stage(layers, p, v) + i;
    i -= n;
  }
  return layers - 1;  // not reached for 0 <= i < pp_stage_layers
}

StageLayerKinds stage_layer_kinds(const ModelSpec& m, const ParallelPlan& p, int s, int frozen_here) {
  StageLayerKinds k;
  const int n = pp_stage_layers(m.layers, p, s);
  if (uniform_layers(m)) {
    k.layers[0] = n;
    k.frozen[0] = frozen_here;
    return k;
  }
  // The stage's chunks in order (one for vpp 1), each a run of consecutive layers. A custom
  // split's interleaved chunks (v = c*pp + s) start where the previous one's pp virtual
  // stages end: summed as it goes, not from virtual stage 0 for each chunk.
  const bool custom_interleaved = p.pipeline_split == PipelineSplit::custom && p.vpp > 1 && !placed_in_v(p);
  int i = 0, custom_first = custom_interleaved ? first_layer_of_virtual_stage(m.layers, p, s) : 0;
  for (int c = 0; c < std::max(1, p.vpp); ++c) {
    const int v = chunk_virtual_stage(p, s, c);
    const int first = custom_interleaved ? custom_first
                      : p.vpp > 1        ? first_layer_of_virtual_stage(m.layers, p, v)
                                         : first_layer_of_pp_stage(m.layers, p, s);
    const int chunk = p.vpp > 1 ? virtual_stage_layers(m.layers, p, v) : n;
    if (custom_interleaved)
      for (int u = v; u < v + p.pp; ++u) custom_first += custom_layers(p, u);
    for (int l = first; l < first + chunk; ++l, ++i) {
      const int kind = layer_kind(m, l);
      ++k.layers[kind];
      if (i < frozen_here) ++k.frozen[kind];
    }
  }
  return k;
}

bool pipeline_split_ok(int layers, const ParallelPlan& p) {
  const int nv = p.pp * std::max(1, p.vpp);
  if (p.pipeline_split == PipelineSplit::even) return p.vpp <= 1 || layers % nv == 0;
  if (p.pipeline_split == PipelineSplit::custom) {
    if (static_cast<int>(p.stage_layers.size()) != nv) return false;
    int64_t sum = 0;
    for (int n : p.stage_layers) {
      if (n < 1) return false;
      sum += n;
    }
    return sum == layers;
  }
  // One slot per virtual stage leaves the first chunk only the embedding and the last only
  // the loss (Megatron-Core's account_for_embedding/loss_in_pipeline_split with
  // layers + 2 = pp * vpp: NVIDIA's Llama 3.1 405B MXFP8 recipe on GB200, 126 + 2 = 16 x 8):
  // allowed with interleaving, where those stages keep their other chunks' layers.
  const int slots = (layers + 2) / nv;
  return (layers + 2) % nv == 0 && (slots >= (nv == 1 ? 3 : 2) || (slots == 1 && p.vpp >= 2));
}

PipelineSplit default_pipeline_split(int layers, int pp, int vpp) {
  ParallelPlan p;
  p.pp = pp, p.vpp = vpp;
  if (pp == 1 || layers % (pp * vpp) == 0) return PipelineSplit::even;
  p.pipeline_split = PipelineSplit::account_embedding_loss;
  return pipeline_split_ok(layers, p) ? PipelineSplit::account_embedding_loss : PipelineSplit::even;
}

std::vector<int> virtual_stage_counts(int layers, const ParallelPlan& p) {
  const int nv = p.pp * std::max(1, p.vpp);
  std::vector<int> out(static_cast<size_t>(nv));
  for (int v = 0; v < nv; ++v) out[static_cast<size_t>(v)] = virtual_stage_layers(layers, p, v);
  return out;
}

void set_split_from_counts(int layers, const std::vector<int>& counts, std::initializer_list<PipelineSplit> standard, ParallelPlan* p) {
  p->stage_layers.clear();
  for (PipelineSplit split : standard) {
    p->pipeline_split = split;
    if (pipeline_split_ok(layers, *p) && virtual_stage_counts(layers, *p) == counts) return;
  }
  p->pipeline_split = PipelineSplit::custom;
  p->stage_layers = counts;
}

std::vector<int> balanced_stage_layers(int layers, int mtp_layers, int pp, int vpp) {
  const int nv = pp * vpp;
  if (pp < 2 || vpp < 2 || mtp_layers < 0) return {};
  ParallelPlan p;
  p.pp = pp, p.vpp = vpp;
  p.pipeline_split = default_pipeline_split(layers, pp, vpp);
  if (pipeline_split_ok(layers, p)) return {};
  const int last_extra = 1 + mtp_layers;  // the loss, and the MTP blocks beside it
  const int slots = layers + 1 + last_extra, q = slots / nv, r = slots % nv;
  std::vector<int> out(static_cast<size_t>(nv), q);
  for (int v = 1; v <= r; ++v) ++out[static_cast<size_t>(v)];  // r <= nv - 1
  out.front() -= 1, out.back() -= last_extra;
  for (int n : out)
    if (n < 1) return {};
  return out;
}

ParallelPlan cost_plan(const ParallelPlan& p) {
  if (p.schedule != Schedule::dualpipe) return p;
  ParallelPlan q = p;
  q.schedule = Schedule::dualpipev;
  q.pp = p.pp / 2;
  q.dp = p.dp * 2;
  q.grad_accum = p.grad_accum / 2;
  return q;
}

namespace {

// DualPipe's own shape (dualpipe.py step(): num_ranks % 2 == 0, num_chunks even and >= 2 *
// num_ranks; two stages per rank): pp even, vpp 2, an even number of micro-batches; and pp
// at least 4, since pp 2 would cost as a V on one rank, which the planner does not. The
// rest is its rank-equivalent DualPipeV plan's (cost_plan), whose 2*dp holds every check
// on dp but expert parallel's, which runs within the plan's own replicas.
// REQUIRES: micro_batch * dp divides the global batch.
bool dualpipe_shape_ok(const TrainingJob& j, const ParallelPlan& p) {
  return p.pp >= 4 && p.pp % 2 == 0 && p.vpp == 2 && (j.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp)) % 2 == 0;
}

}  // namespace

RejectReason check_plan(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, int gpus,
                        bool tp_across_nodes) {
  if (p.schedule == Schedule::dualpipe) {
    // (cost_plan keeps the world size, so the recursive call checks it.)
    if (p.pp > m.layers) return RejectReason::pp_layers;
    if (p.ep > 1 && m.moe.enabled() && (p.dp * p.cp) % p.ep != 0) return RejectReason::ep_experts;
    if (p.micro_batch < 1 || j.global_batch % (static_cast<int64_t>(p.micro_batch) * p.dp) != 0) return RejectReason::batch_divisibility;
    if (!dualpipe_shape_ok(j, p)) return RejectReason::schedule_shape;
    const RejectReason r = check_plan(m, c, j, cost_plan(p), gpus, tp_across_nodes);
    return r == RejectReason::vpp_layers ? RejectReason::schedule_shape : r;
  }
  if (static_cast<int64_t>(p.dp) * p.tp * p.pp * p.cp != gpus) return RejectReason::world_size_mismatch;
  if (m.heads % p.tp != 0 || m.kv_heads % p.tp != 0) return RejectReason::tp_heads;
  if (!tp_across_nodes && p.tp > c.gpus_per_node) return RejectReason::tp_exceeds_node;
  if (p.pp > m.layers) return RejectReason::pp_layers;
  if ((p.vpp > 1 && p.pp == 1) || !pipeline_split_ok(m.layers, p)) return RejectReason::vpp_layers;
  if (p.activation_offload_layers < 0 || p.activation_offload_layers > pp_stage_layers(m.layers, p, 0))
    return RejectReason::activation_offload;
  if (p.cp > 1 && j.seq_len % (2 * p.cp) != 0) return RejectReason::cp_sequence;
  // The ring merges partial softmaxes chunk by chunk (flash's online softmax); the all-gather
  // has every key at once and can materialise its queries' scores.
  if (p.cp > 1 && !p.flash_attention && p.cp_exchange == CpExchange::ring) return RejectReason::cp_needs_flash;
  if (p.ep > 1 && (!m.moe.enabled() || m.moe.experts % p.ep != 0 || (p.dp * p.cp) % p.ep != 0)) return RejectReason::ep_experts;
  if (p.sp && p.tp == 1) return RejectReason::sp_needs_tp;
  if (m.moe.enabled() && p.tp > 1 && !p.sp) return RejectReason::moe_tp_needs_sp;
  if (p.micro_batch < 1 || j.global_batch % (static_cast<int64_t>(p.micro_batch) * p.dp) != 0) return RejectReason::batch_divisibility;
  const int64_t micro_batches = j.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp);
  if (p.pp > 1) {
    // ZB-H1 is a one-stage-per-rank order; ZB-V and DualPipeV place exactly two chunks per
    // rank (PyTorch's ScheduleZBVZeroBubble / ScheduleDualPipeV raise otherwise) of equal
    // layers (the V's memory and time are costed per chunk); DualPipeV needs n_microbatches
    // >= its 2*pp stages (ScheduleDualPipeV.__init__; DualPipe's own num_chunks >= 2 * ranks).
    if (p.schedule == Schedule::zb_h1 && p.vpp != 1) return RejectReason::schedule_shape;
    if (v_shape(p.schedule) && (p.vpp != 2 || p.pipeline_split != PipelineSplit::even || m.layers % (2 * p.pp) != 0))
      return RejectReason::schedule_shape;
    if (p.schedule == Schedule::dualpipev && micro_batches < 2 * static_cast<int64_t>(p.pp)) return RejectReason::schedule_shape;
  }
  if (p.vpp > 1 && !v_shape(p.schedule) && micro_batches % p.pp != 0) return RejectReason::interleave_microbatches;
  if (p.offload_optimizer && (p.zero == 0 || p.pp > 1)) return RejectReason::zero_offload;
  // Parameter offload fetches each gathered unit's shard from the host (ZeRO-3) and leaves
  // the update on the host beside the optimizer (DeepSpeed offload_param needs stage 3;
  // FSDP's CPUOffloadPolicy steps the optimizer on the CPU). One rank is legal: it fetches
  // each unit whole (ZeRO-Infinity trains on a single GPU).
  if (p.offload_params && (p.zero != 3 || !p.offload_optimizer)) return RejectReason::zero_offload;
  if (p.recompute == Recompute::full_k &&
      (p.recompute_layers < 1 || p.recompute_layers > pp_stage_layers(m.layers, p, 0) / p.vpp))
    return RejectReason::recompute_layers;
  if (j.mode == TrainMode::lora && p.zero == 3) return RejectReason::lora_zero3;
  const Dtype d = j.precision == Precision::fp32 ? Dtype::fp32 : (j.precision == Precision::bf16 ? Dtype::bf16 : Dtype::fp16);
  if (c.gpu.peak(d) <= 0) return RejectReason::precision_unsupported;
  if (!fp8_recipe_supported(j.fp8, c.gpu)) return RejectReason::precision_unsupported;
  if (j.mode != TrainMode::lora && j.frozen_layer_count(m.layers) >= m.layers) return RejectReason::frozen_all;
  return RejectReason::none;
}

Status check_plan_status(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, int gpus,
                         const std::string& origin) {
  const RejectReason r = check_plan(m, c, j, p, gpus, /*tp_across_nodes=*/true);
  if (r == RejectReason::none) return Status::ok();
  const std::string o = origin + ": ";
  auto n = [](int64_t v) { return std::to_string(v); };
  switch (r) {
    case RejectReason::world_size_mismatch:
      return Status::bad_input(o + "plan uses dp*tp*pp*cp = " + n(p.dp) + "*" + n(p.tp) + "*" + n(p.pp) + "*" + n(p.cp) + " = " +
                               n(static_cast<int64_t>(p.dp) * p.tp * p.pp * p.cp) + " GPUs, expected " + n(gpus));
    case RejectReason::tp_heads:
      return Status::bad_input(o + "field 'plan.tp': expected a divisor of heads (" + n(m.heads) + ") and kv_heads (" +
                               n(m.kv_heads) + "), got " + n(p.tp));
    case RejectReason::batch_divisibility:
      return Status::bad_input(o + "field 'job.global_batch': expected a multiple of micro_batch*dp = " +
                               n(static_cast<int64_t>(p.micro_batch) * p.dp) + ", got " + n(j.global_batch));
    case RejectReason::pp_layers:
      return Status::bad_input(o + "field 'plan.pp': expected at most layers (" + n(m.layers) + "), got " + n(p.pp));
    case RejectReason::vpp_layers:
      if (p.pipeline_split == PipelineSplit::custom && !(p.vpp > 1 && p.pp == 1)) {
        int64_t sum = 0;
        for (int l : p.stage_layers) sum += l;
        return Status::bad_input(o + "field 'plan.stage_layers': expected pp*vpp = " + n(static_cast<int64_t>(p.pp) * p.vpp) +
                                 " counts of at least 1 summing to the model's layers (" + n(m.layers) + "), got " +
                                 n(static_cast<int64_t>(p.stage_layers.size())) + " counts summing to " + n(sum));
      }
      return Status::bad_input(o + "invalid plan: " + describe(r));
    case RejectReason::schedule_shape:
      if (p.schedule == Schedule::dualpipe) {
        if (p.pp % 2 != 0 || p.pp < 4)
          return Status::bad_input(o + "field 'plan.pp': dualpipe feeds micro-batches from both ends of an even number of ranks, expected "
                                       "an even pp of at least 4, got " + n(p.pp));
        if (p.vpp != 2)
          return Status::bad_input(o + "field 'plan.vpp': dualpipe holds two stages per rank (r and pp-1-r), expected vpp 2, got " + n(p.vpp));
        const int64_t micro_batches = j.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp);
        if (micro_batches % 2 != 0)
          return Status::bad_input(o + "field 'job.global_batch': dualpipe splits the micro-batches evenly between its two directions, "
                                       "expected an even number per step, got " + n(micro_batches));
        if (p.pipeline_split != PipelineSplit::even || m.layers % p.pp != 0)
          return Status::bad_input(o + "field 'plan.pp': dualpipe needs layers (" + n(m.layers) + ") divisible by pp = " + n(p.pp) +
                                   " with the even split");
        return Status::bad_input(o + "field 'job.global_batch': dualpipe needs at least 2*pp = " + n(2 * p.pp) +
                                 " micro-batches per step, got " + n(micro_batches));
      }
      if (p.schedule == Schedule::zb_h1)
        return Status::bad_input(o + "field 'plan.schedule': zb-h1 runs one stage per rank, expected vpp 1, got vpp " + n(p.vpp));
      if (p.vpp != 2)
        return Status::bad_input(o + "field 'plan.vpp': schedule " + to_string(p.schedule) +
                                 " places exactly two chunks per rank in a V, expected vpp 2, got " + n(p.vpp));
      if (p.pipeline_split != PipelineSplit::even || m.layers % (2 * p.pp) != 0)
        return Status::bad_input(o + "field 'plan.pp': schedule " + to_string(p.schedule) + " needs layers (" + n(m.layers) +
                                 ") divisible by 2*pp = " + n(2 * p.pp) + " with the even split");
      return Status::bad_input(o + "field 'job.global_batch': dualpipev needs at least 2*pp = " + n(2 * p.pp) +
                               " micro-batches per step, got " + n(j.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp)));
    case RejectReason::precision_unsupported:
      if (!fp8_recipe_supported(j.fp8, c.gpu))
        return Status::bad_input(o + "FP8 recipe '" + to_string(j.fp8) + "' needs " +
                                 (c.gpu.peak(Dtype::fp8) <= 0 ? "FP8 tensor cores" : "MX block-scaling tensor cores (Blackwell)") +
                                 ", which GPU '" + c.gpu.name + "' does not have");
      return Status::bad_input(o + "invalid plan: " + describe(r));
    default: return Status::bad_input(o + "invalid plan: " + describe(r));
  }
}

Status check_inputs(const ModelSpec& m, const TrainingJob& j, const std::string& origin) {
  const ParamCounts pc = count_params(m, 1, 1, 1, 0, 0);
  // 1e14 parameters is ~60x the largest trained dense model; beyond it is a typo.
  if (!(pc.total < 1e14))
    return Status::bad_input(origin + ": model '" + m.name + "' has " + std::to_string(pc.total) +
                             " parameters (expected fewer than 1e14; check hidden/layers/vocab)");
  if (j.seq_len > (int64_t{1} << 24))
    return Status::bad_input(origin + ": field 'job.seq_len': expected at most 16777216 tokens, got " + std::to_string(j.seq_len));
  if (Status s = check_doc_len(j, origin); !s) return s;
  // LoRA's q, k, v targets are the projections of h to the heads; latent attention has
  // down and up projections instead, whose adapters are not modelled.
  if (j.mode == TrainMode::lora && m.mla.enabled() &&
      (lora_target_mask(j.lora, m.family) & (projection_bit(Projection::q) | projection_bit(Projection::k) | projection_bit(Projection::v))))
    return Status::bad_input(origin + ": field 'job.lora.targets': q, k and v are not LoRA targets on model '" + m.name +
                             "', whose multi-head latent attention projects through latents (expected o and the MLP's gate, up, down)");
  // bf16 moments are Megatron-Core's precision-aware optimizer: Transformer Engine's FusedAdam
  // beside fp32 master weights (O2); O3 and fp32 training already set the moments' dtype.
  if (j.moments == MomentsDtype::bf16 && j.optimizer != Optimizer::adamw)
    return Status::bad_input(origin + ": field 'job.moments': bf16 is the precision-aware optimizer's, which is Adam only "
                             "(Megatron-Core OptimizerConfig); expected fp32 with optimizer sgd");
  if (j.moments == MomentsDtype::bf16 && (j.precision == Precision::fp32 || j.amp != AmpLevel::O2))
    return Status::bad_input(origin + ": field 'job.moments': bf16 moments keep fp32 master weights beside 16-bit ones "
                             "(O2 mixed precision); expected fp32 with precision " + std::string(to_string(j.precision)) +
                             " amp " + to_string(j.amp));
  if (j.mode == TrainMode::lora && j.lora.rank > m.hidden)
    return Status::bad_input(origin + ": field 'job.lora.rank': expected at most hidden (" + std::to_string(m.hidden) + "), got " +
                             std::to_string(j.lora.rank));
  return Status::ok();
}

}  // namespace llmplan
