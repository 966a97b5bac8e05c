#include "planner/cost/memory_model.h"

#include <algorithm>
#include <cmath>

#include "planner/cost/memory_events.h"
#include "planner/cost/plan_check.h"
#include "planner/spec/fp8_recipe.h"

namespace llmplan {

const char* to_string(MemoryItem item) {
  static const char* kNames[] = {"weights",      "gradients",       "optimizer_states", "master_weights",
                                 "activations",  "backward_working", "logits_loss",     "gathered_params",
                                 "comm_buffers", "workspace",       "cuda_context",     "fragmentation"};
  return kNames[static_cast<int>(item)];
}

const char* label(MemoryItem item) {
  static const char* kLabels[] = {"weights",          "gradients",
                                  "optimizer states", "master weights",
                                  "activations",      "backward working set",
                                  "logits + loss",    "ZeRO-3 gathered params",
                                  "comm buffers",     "GEMM workspace",
                                  "CUDA context",     "fragmentation reserve"};
  return kLabels[static_cast<int>(item)];
}

const char* to_string(SelectiveRecompute v) { return v == SelectiveRecompute::torch_op_sac ? "torch_op_sac" : "attention_scores"; }
bool parse_enum(const std::string& s, SelectiveRecompute* out) {
  for (SelectiveRecompute v : {SelectiveRecompute::attention_scores, SelectiveRecompute::torch_op_sac})
    if (s == to_string(v)) return *out = v, true;
  return false;
}

const char* to_string(Fp8WeightCopies v) {
  static const char* kNames[] = {"none", "cached", "per_microbatch", "primary"};
  return kNames[static_cast<int>(v)];
}
bool parse_enum(const std::string& s, Fp8WeightCopies* out) {
  for (Fp8WeightCopies v : {Fp8WeightCopies::none, Fp8WeightCopies::cached, Fp8WeightCopies::per_microbatch, Fp8WeightCopies::primary})
    if (s == to_string(v)) return *out = v, true;
  return false;
}

const char* to_string(Phase p) {
  static const char* kNames[] = {"forward", "backward", "optimizer"};
  return kNames[static_cast<int>(p)];
}

double StageMemory::model_states() const {
  return bytes[0] + bytes[1] + bytes[2] + bytes[3];
}

BytesPerParam bytes_per_param(const TrainingJob& j) {
  BytesPerParam b{};
  // m and v, or momentum: fp32, or bf16 under a precision-aware optimizer (MomentsDtype).
  const double moment_bytes = j.moments == MomentsDtype::bf16 ? 2 : 4;
  const double adam = (j.optimizer == Optimizer::adamw ? 2 : 1) * moment_bytes;
  if (j.precision == Precision::fp32) {
    b = {4, 4, adam, 0, 4};
    return b;
  }
  if (j.qlora()) {
    // QLoRA's reference trainer casts the adapters to the 16-bit compute dtype and steps
    // them with 32-bit (paged) AdamW: no fp32 master (Dettmers et al. 2023; qlora.py
    // --bf16 --optim paged_adamw_32bit). The frozen 16-bit parts stay 2 bytes.
    b = {2, 2, adam, 0, 2};
    return b;
  }
  switch (j.amp) {
    case AmpLevel::O1:
      // fp32 weights, grads and optimizer; autocast keeps a 16-bit copy of every weight
      // it casts, referenced by saved tensors until backward: 4 + 2 bytes of weights.
      b = {6, 4, adam, 0, 6};
      break;
    case AmpLevel::O3:
      // Pure half precision: 16-bit weights, grads and optimizer moments, no master.
      b = {2, 2, adam / 2, 0, 2};
      break;
    case AmpLevel::O0:
    case AmpLevel::O2:
    default:
      // 16-bit weights, fp32 master and optimizer. DeepSpeed keeps 16-bit grads (16 B),
      // Megatron accumulates fp32 main grads (18 B).
      b = {2, j.grads == GradConvention::megatron ? 4.0 : 2.0, adam, 4, 2};
      break;
  }
  return b;
}

ModelStateBytes model_state_bytes(double trainable, double frozen, const TrainingJob& j, int zero, int shard_group,
                                  bool offload, double frozen_nf4, bool offload_params) {
  const BytesPerParam b = bytes_per_param(j);
  const double n = std::max(1, shard_group);
  ModelStateBytes s;
  s.weights = trainable * b.weights / (zero >= 3 ? n : 1) +
              ((frozen - frozen_nf4) * b.frozen_weights + frozen_nf4 * kNf4BytesPerParam) / (zero >= 3 ? n : 1);
  s.gradients = trainable * b.gradients / (zero >= 2 ? n : 1);
  s.optimizer_states = trainable * b.optimizer / (zero >= 1 ? n : 1);
  s.master_weights = trainable * b.master / (zero >= 1 ? n : 1);
  if (offload) {
    // ZeRO-Offload: fp32 states live in host memory; gradients stream out by bucket.
    s.host = s.optimizer_states + s.master_weights + s.gradients;
    s.optimizer_states = 0;
    s.master_weights = 0;
    s.gradients = 0;
  }
  if (offload_params) {
    // ZeRO-Infinity / FSDP CPU offload: the parameter shard too; the GPU holds only the
    // units gathered for compute (MemoryItem::gathered_params).
    s.host += s.weights;
    s.weights = 0;
  }
  return s;
}

double step_grad_copy_bytes(const TrainingJob& j, double master_weight_bytes, int zero, const MemoryOptions& opt) {
  if (!opt.step_fp32_grad_copy || j.moments != MomentsDtype::fp32 || bytes_per_param(j).gradients >= 4) return 0;
  if (zero >= 3 && opt.step_grad_copy_group_elements > 0) return std::min(master_weight_bytes, 4 * opt.step_grad_copy_group_elements);
  return master_weight_bytes;  // fp32, one per master weight
}

int64_t microbatches_per_step(const TrainingJob& j, const ParallelPlan& p) {
  return j.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp);
}

double inflight_microbatches(const ParallelPlan& p, int64_t m, int stage) {
  if (p.pp == 1) return 1;
  const double md = static_cast<double>(m);
  if (p.schedule == Schedule::gpipe) return md;
  // Zero-bubble orders hold a micro-batch's activations from its forward to its W. The
  // counts are those of PyTorch's orders (specs.h Schedule) walked op by op (for every
  // pp <= 13 and micro-batch count, in the tests):
  //  ZB-H1: min(m, pp) on every stage (rank r defers its first r W's: "all stages have the
  //  same number of in-flight micro-batches", Qi et al. 2024 Sec. 2.1).
  //  ZB-V: min(2m, m + 1 + r, 2pp) chunks of half the stage's layers.
  //  DualPipeV (m >= 2pp): 2pp + 1 chunks.
  const double pp = p.pp, r = stage;
  if (p.schedule == Schedule::zb_h1) return std::min(md, pp);
  if (p.schedule == Schedule::zbv) return std::min({2 * md, md + 1 + r, 2 * pp}) / 2;
  if (p.schedule == Schedule::dualpipev) return (2 * pp + 1) / 2;
  if (p.vpp > 1) {
    // Megatron interleaved 1F1B: rank i runs (p-i-1)*2 + (v-1)*p warm-up chunks and holds
    // one more in steady state; a chunk is 1/v of the stage's layers.
    const double chunks = (p.pp - stage - 1) * 2.0 + (p.vpp - 1.0) * p.pp + 1.0;
    return std::min(md, chunks / p.vpp);
  }
  return std::min(md, static_cast<double>(p.pp - stage));
}

LayerRecompute layer_recompute(const ParallelPlan& p, int layer_in_stage, int layers_in_stage) {
  switch (p.recompute) {
    case Recompute::none: return LayerRecompute::none;
    case Recompute::selective: return LayerRecompute::selective;
    case Recompute::full: return LayerRecompute::full;
    case Recompute::full_k: {
      // Megatron applies --recompute-num-layers per model chunk: with v virtual stages the
      // first k layers of every chunk are recomputed, so chunks stay alike.
      const int chunk_layers = p.vpp > 1 ? std::max(1, layers_in_stage / p.vpp) : layers_in_stage;
      const int in_chunk = chunk_layers > 0 ? layer_in_stage % chunk_layers : layer_in_stage;
      return in_chunk < p.recompute_layers ? LayerRecompute::full : LayerRecompute::none;
    }
  }
  return LayerRecompute::none;
}

namespace {
// Interleaved 1F1B whose chunks hold unequal layer counts (PipelineSplit other than even):
// the stage's kept activations at their peak, every chunk's micro-batches in flight holding
// that chunk's own layers (`per_layer` bytes each) and, on the first and last virtual stage,
// the embedding's and the head's tensors (`first_set`, `last_set` per micro-batch). Walks
// Megatron's order on this rank (megatron/core/pipeline_parallel/schedules.py,
// get_model_chunk_id): forward k runs chunk (k % (pp*vpp)) / pp and backward k the chunk
// vpp - 1 - that; (pp - s - 1) * 2 + (vpp - 1) * pp warm-up forwards, then one forward and
// one backward a step. The steady state repeats every pp * vpp steps, so the walk stops
// after two periods.
double unequal_chunk_activations(const ModelSpec& m, const ParallelPlan& p, int64_t mb, int stage, double per_layer, double first_set,
                                 double last_set) {
  const int vpp = p.vpp, pp = p.pp, nv = p.pp * p.vpp;
  std::vector<double> bytes(vpp);
  for (int c = 0; c < vpp; ++c) {
    const int v = c * pp + stage;
    bytes[c] = virtual_stage_layers(m.layers, p, v) * per_layer + (v == 0 ? first_set : 0) + (v == nv - 1 ? last_set : 0);
  }
  const int64_t total = mb * vpp;
  const int64_t warm = std::min<int64_t>(total, (pp - stage - 1) * 2 + static_cast<int64_t>(vpp - 1) * pp);
  auto chunk = [&](int64_t k) { return static_cast<int>((k % nv) / pp); };
  int64_t f = 0;
  double held = 0, peak = 0;
  for (; f < warm; ++f) held += bytes[chunk(f)], peak = std::max(peak, held);
  const int64_t stop = std::min<int64_t>(total, warm + 2 * static_cast<int64_t>(nv));
  for (int64_t b = 0; b < stop; ++b) {
    if (f < total) held += bytes[chunk(f)], ++f, peak = std::max(peak, held);
    held -= bytes[vpp - 1 - chunk(b)];
  }
  return peak;
}
}  // namespace

double first_chunk_sets(const ParallelPlan& p, int64_t m) {
  if (p.pp == 1) return 1;
  const double md = static_cast<double>(m);
  if (p.schedule == Schedule::gpipe) return md;
  // Rank 0's chunk 0 (the walk of inflight_microbatches): ZB-H1 min(m, pp); a V min(m, 2pp).
  if (p.schedule == Schedule::zb_h1) return std::min(md, static_cast<double>(p.pp));
  if (v_shape(p.schedule)) return std::min(md, 2.0 * p.pp);
  // Interleaved rank 0 runs p chunk-0 forwards, then the other chunks, then p-1 more
  // chunk-0 forwards in warm-up, plus one in steady state: 2p before a chunk-0 backward.
  if (p.vpp > 1) return std::min(md, 2.0 * p.pp);
  return std::min(md, static_cast<double>(p.pp));
}

double last_chunk_sets(const ParallelPlan& p, int64_t m) {
  // ZB-H1's last stage holds min(m, pp) micro-batches until their W; in a V the head is
  // rank 0's chunk 1, whose F, B and W run back to back (one set).
  if (p.pp > 1 && p.schedule == Schedule::zb_h1) return std::min(static_cast<double>(m), static_cast<double>(p.pp));
  // The last virtual stage runs each micro-batch's backward right after its forward,
  // except under GPipe, where every forward comes first.
  return (p.pp > 1 && p.schedule == Schedule::gpipe) ? static_cast<double>(m) : 1.0;
}

double pending_weight_grad_sets(const ParallelPlan& p, int64_t m, int stage) {
  if (p.pp == 1 || !splits_backward(p.schedule)) return 0;
  const double md = static_cast<double>(m), pp = p.pp, r = stage;
  // ZB-H1: rank r defers r W's, one more B waits for its W at that moment: min(m, r + 1).
  if (p.schedule == Schedule::zb_h1) return std::min(md, r + 1);
  // ZB-V: 2r + 1 chunks (the cool-down's r pairs of B before their W's) once m >= 2pp - 1;
  // fewer micro-batches: at most 2m - 1 (an upper bound; the walk is exact above).
  if (p.schedule == Schedule::zbv) return (md >= 2 * pp - 1 ? 2 * r + 1 : std::min(2 * r + 1, 2 * md - 1)) / 2;
  return (r + 1) / 2;  // DualPipeV: r + 1 chunks (steps 6-8 of the order)
}

int split_backward_peak_counts(const ParallelPlan& p, int64_t m, int stage, std::array<SplitBackwardCounts, 3>& out) {
  const double pp = p.pp, r = stage, md = static_cast<double>(m);
  if (p.pp > 1 && p.schedule == Schedule::zbv && md >= 2 * pp - 1) {
    out[0] = {pp, 0.5};
    if (stage == 0) return 1;
    out[1] = {(pp + r) / 2, (2 * r + 1) / 2};
    return 2;
  }
  if (p.pp > 1 && p.schedule == Schedule::dualpipev && md >= 2 * pp) {
    int n = 0;
    out[n++] = {(2 * pp + 1) / 2, 0};
    if (stage < p.pp - 1) out[n++] = {pp, 0.5};
    if (stage >= 1) out[n++] = {pp / 2, (r + 1) / 2};
    return n;
  }
  out[0] = {inflight_microbatches(p, m, stage), pending_weight_grad_sets(p, m, stage)};
  return 1;
}

double head_pending_weight_grads(const ParallelPlan& p, int64_t m, double pending) {
  if (p.pp == 1 || !splits_backward(p.schedule)) return 0;
  // DualPipeV's head chunk runs each W right after its B (warm-up) or a whole backward: its
  // W set is held only at its own split pass, the moment with a W pending on stage 0.
  if (p.schedule == Schedule::dualpipev && pending <= 0) return 0;
  return p.schedule == Schedule::zb_h1 ? std::min(static_cast<double>(m), static_cast<double>(p.pp)) : 1;
}

LayerContext layer_context(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int global_layer) {
  LayerContext c;
  c.b = p.micro_batch;
  c.s = j.seq_len / p.cp;
  c.s_kv = j.seq_len;
  c.span_kv = j.attention_span();
  c.t = p.tp;
  c.sp = p.sp;
  c.ep = p.ep;
  c.act_bytes = j.precision == Precision::fp32 ? 4 : 2;
  c.flash = p.flash_attention;
  c.dense_mlp = m.moe.enabled() && !m.moe_layer(global_layer);
  c.window = m.attention_window(global_layer);
  const int frozen = j.frozen_layer_count(m.layers);
  const bool frozen_layer = global_layer < frozen;
  // Backward reaches a layer only if something at or below it trains: frozen bottom
  // layers keep no activations at all.
  c.grad_flows = !frozen_layer;
  c.base_trainable = j.mode != TrainMode::lora && !frozen_layer;
  // QLoRA: each base weight read as NF4 (+ constants) and written as a 16-bit copy per use.
  if (j.qlora()) c.dequant_bytes_per_param = kNf4BytesPerParam + c.act_bytes;
  if (j.mode == TrainMode::lora && !frozen_layer) {
    c.lora_targets = lora_target_mask(j.lora, m.family);
    c.lora_rank = j.lora.rank;
  }
  return c;
}

double layer_rematerialised_bytes(const SavedTensorSums& sums, LayerRecompute policy) {
  const double checkpoint = policy == LayerRecompute::full ? activation_bytes_per_layer(sums, policy) : 0;
  return recompute_working_bytes(sums, policy) - checkpoint;
}

double layer_forward_transient_bytes(const SavedTensorSums& sums, const SavedTensorSums& as_trainable, LayerRecompute policy) {
  // The layer's 16-bit output branch is always transient beside what the policy keeps.
  if (sums.grad_flows) return sums.input + layer_rematerialised_bytes(sums, policy);
  // A frozen layer below every trainable weight keeps nothing: its whole forward set is
  // transient, as under full recompute.
  return sums.input + layer_rematerialised_bytes(as_trainable, LayerRecompute::full);
}

namespace {

LayerContext as_trainable_context(LayerContext lc) {
  lc.grad_flows = true;
  lc.base_trainable = true;
  return lc;
}

const MemoryInputs::StageLayers* find_stage_layers(const MemoryInputs& in, const StageLayerKinds& kinds) {
  for (int i = 0; i < in.shape_count; ++i)
    if (in.shapes[i].kinds == kinds) return &in.shapes[i];
  return nullptr;
}

}  // namespace

void apply_memory_conventions(const TrainingJob& j, const GpuSpec& gpu, const MemoryOptions& opt, LayerContext* lc) {
  const bool fp8 = j.fp8_linear();
  if (fp8 && opt.fp8_quantized_inputs) lc->fp8_input_bytes = fp8_saved_input_bytes(j.fp8, gpu);
  if (fp8 && opt.fp8_weight_copies == Fp8WeightCopies::per_microbatch) lc->fp8_weight_bytes = fp8_recipe_facts(j.fp8, gpu).weight_bytes;
  lc->moe_probs_in_activation = opt.moe_probs_in_activation;
}

LayerMemoryBytes layer_memory_bytes(const SavedTensorSums& sums, const SavedTensorSums& as_trainable, bool grad_flows,
                                    LayerRecompute policy, const MemoryOptions& opt) {
  LayerMemoryBytes b;
  if (policy == LayerRecompute::selective && opt.selective == SelectiveRecompute::torch_op_sac && grad_flows) {
    // Per-op SAC keeps its save list; backward re-runs the layer's other operators, whose
    // outputs are then live beside the kept ones; in forward they are transient.
    b.kept = sums.op_sac;
    b.rematerialised = std::max(0.0, sums.all - sums.op_sac);
    b.transient = sums.input + b.rematerialised;
    return b;
  }
  b.kept = activation_bytes_per_layer(sums, policy);
  b.rematerialised = grad_flows ? layer_rematerialised_bytes(sums, policy) : 0;
  b.transient = layer_forward_transient_bytes(sums, as_trainable, policy);
  if (policy == LayerRecompute::selective && sums.latent > 0) b.rematerialised_attention = b.rematerialised;
  return b;
}

LayerMemoryBytes layer_memory_bytes(const ModelSpec& m, const LayerContext& lc, LayerRecompute policy, const MemoryOptions& opt) {
  const SavedTensorSums sums = sum_saved_tensors(m, lc);
  return layer_memory_bytes(sums, lc.grad_flows ? sums : sum_saved_tensors(m, as_trainable_context(lc)), lc.grad_flows, policy, opt);
}

double cp_all_gather_buffer_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p) {
  if (p.cp <= 1) return 0;
  const double act_bytes = j.precision == Precision::fp32 ? 4 : 2;
  const double whole = static_cast<double>(p.micro_batch) * static_cast<double>(j.seq_len) / p.tp * act_bytes;  // per column
  return whole * 3 * static_cast<double>(m.kv_width());
}

LayerBackwardMoments activation_gradient_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, bool dense_mlp) {
  const double act_bytes = j.precision == Precision::fp32 ? 4 : 2;
  const double seq_div = p.sp ? p.tp : 1.0;
  const double tokens = static_cast<double>(p.micro_batch) * (j.seq_len / p.cp);
  const double mlp_grads = m.family == Family::gpt ? 1 : 2;  // GELU: d(fc1); SwiGLU: d(gate) and d(up)
  // LoRA on the MLP's input projections: their adapter's input gradient and dz beside the
  // base GEMM's (dense: on TP rank 0 under TP, which applies the replicated adapter; MoE:
  // one expert block's).
  const uint32_t lora = j.mode == TrainMode::lora ? lora_target_mask(j.lora, m.family) : 0;
  const bool lora_mlp_input = (lora & (projection_bit(Projection::gate) | projection_bit(Projection::up))) != 0;
  double mlp_moment = 0, mlp_comm = 0, shared_moment = 0;
  if (m.moe.enabled() && !dense_mlp) {
    // The routed experts' backward over the rank's E x C
    // capacity-padded rows, beside the layer's output and input gradients (2 tok x h):
    // first the expert outputs' gradient (rows x h) and the activation gradient (rows x fe);
    // then the hidden gradients (1 or 2 x rows x fe), the expert inputs' gradient (rows x h;
    // a communication buffer under ep > 1, sent back by all-to-all) and one GEMM call's
    // input-gradient scratch (all rows with one local expert, one block of C rows otherwise).
    const double h = static_cast<double>(m.hidden), tok = tokens / seq_div, fe = static_cast<double>(m.moe.expert_ffn_hidden);
    const double rows = moe_expert_rows(m, tok, p.ep), local = static_cast<double>(m.moe.experts) / p.ep;
    const double call = local == 1 ? rows : rows / m.moe.experts;
    double up = rows * (mlp_grads * fe + (p.ep > 1 ? 0 : h)) + call * h;
    const double down = rows * (h + fe);
    if (lora_mlp_input) up += call * (h + static_cast<double>(j.lora.rank));
    // The down projection's moment holds no exchange buffer: its gradient's send buffer is
    // freed once received. The up projection's holds the expert inputs' gradient in one.
    const double up_comm = p.ep > 1 ? rows * h : 0;
    const bool up_wins = up + up_comm > down;
    // Post-norms (Gemma): the branch output's gradient, out of the post-norm's backward, is
    // the experts' dy and held through their backward and the shared experts'. (A dense MLP
    // frees it after its down projection, before its widest moment.)
    const double post = m.post_norms ? tok * h : 0;
    mlp_moment = (2 * tok * h + post + (up_wins ? up : down)) * act_bytes;
    mlp_comm = up_wins ? up_comm * act_bytes : 0;
    // Then the shared experts' backward, TP-split like a dense MLP over the whole sequence:
    // their hidden gradients (1 or 2 x tokens x fs/t) and their input gradient's two
    // partials (2 tokens x h) beside the layer's output and input gradients; no EP buffer.
    if (m.moe.shared_experts > 0) {
      const double fs = static_cast<double>(m.shared_ffn_width()) / p.tp;
      shared_moment = (2 * tok * h + post + mlp_grads * tokens * fs + 2 * tokens * h) * act_bytes;
    }
  } else {
    // The output's gradient over the rank's tokens; the input's over the whole sequence
    // under SP (column-parallel partial sums, reduce-scattered after the GEMMs).
    const double h = static_cast<double>(m.hidden);
    mlp_moment = (tokens * h / seq_div + tokens * h + mlp_grads * tokens * static_cast<double>(m.ffn_hidden) / p.tp) * act_bytes;
    if (lora_mlp_input) mlp_moment += tokens * (h + static_cast<double>(j.lora.rank)) * act_bytes;
    // LoRA on the down projection: its adapter's input gradient (f/t wide, with dz) beside the
    // base GEMM's, the activation's gradient, before either up projection's moment -- wider
    // than that one for GPT's single f-wide gradient.
    if (j.mode == TrainMode::lora && (lora & projection_bit(Projection::down)) != 0)
      mlp_moment = std::max(mlp_moment, (tokens * h / seq_div + tokens * (2 * static_cast<double>(m.ffn_hidden) / p.tp +
                                                                              static_cast<double>(j.lora.rank))) * act_bytes);
  }
  // Widths on the rank of the attention output (the output projection's input, ow), the
  // queries (qw), keys (kw) and values (vw). Latent attention: a key per query head, values
  // of v_head_dim (its later moments, through the up and down projections, are narrower
  // than the kernel's: the executor frees dk and dv, then dq, as each is read).
  const double qw = static_cast<double>(m.q_width()) / p.tp, ow = static_cast<double>(m.v_width()) / p.tp;
  const double kw = m.mla.enabled() ? qw : static_cast<double>(m.kv_width()) / p.tp;
  const double vw = m.mla.enabled() ? ow : kw;
  // The layer output's gradient (the residual's) is live through attention's backward too.
  const double output_grad = tokens * static_cast<double>(m.hidden) / seq_div;
  // Without CP: the kernel's moment holds the output projection's input gradient and dq,
  // dk, dv (FlashAttention-2's backward writes dq, dk, dv from dO: Dao 2023, Alg. 2).
  if (p.cp <= 1) return {mlp_moment, (output_grad + tokens * (ow + qw + kw + vw)) * act_bytes, mlp_comm, shared_moment};
  // Ring (Liu et al. 2023, Ring Attention): beside dout, dq, dk, dv, one step's partial dq and dk, dv.
  if (p.cp_exchange == CpExchange::ring)
    return {mlp_moment, (output_grad + tokens * (ow + 2 * qw + 2 * (kw + vw))) * act_bytes, mlp_comm, shared_moment};
  return {mlp_moment, (output_grad + tokens * (ow + qw + kw + vw + p.cp * (kw + vw))) * act_bytes, mlp_comm, shared_moment};
}

StageParams stage_params(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, const ParamCounts& pc, int stage) {
  const int layers = pp_stage_layers(m.layers, p, stage);
  const int first_layer = first_layer_of_pp_stage(m.layers, p, stage);
  const int frozen_layers = j.frozen_layer_count(m.layers);
  const int frozen_here = std::clamp(frozen_layers - first_layer, 0, layers);
  const bool embedding_trainable = j.mode != TrainMode::lora && frozen_layers == 0;
  StageParams sp;
  // The stage's layers of each MLP kind (a MoE model's dense layers have their own counts).
  const StageLayerKinds kinds = stage_layer_kinds(m, p, stage, frozen_here);
  for (int k = 0; k < kLayerKinds; ++k) {
    const int n = kinds.layers[k], frozen = kinds.frozen[k];
    if (n == 0) continue;
    const LayerParams lp = pc.layer(kind_dense_mlp(k));
    if (j.mode == TrainMode::lora) {
      sp.frozen += n * lp.per_layer_rank;
      if (j.qlora()) sp.frozen_nf4 += n * linear_weights_per_layer_rank(m, p.tp, p.ep, kind_dense_mlp(k)).total;
      sp.trainable += (n - frozen) * lp.lora_per_layer_rank;
      sp.expert += (n - frozen) * lp.lora_expert_per_layer_rank;
    } else {
      sp.trainable += (n - frozen) * lp.per_layer_rank;
      sp.frozen += frozen * lp.per_layer_rank;
      sp.expert += (n - frozen) * lp.expert_per_layer_rank;
    }
  }
  if (stage == 0) (embedding_trainable ? sp.trainable : sp.frozen) += pc.embedding_rank;
  if (stage == head_stage(p)) (j.mode == TrainMode::lora ? sp.frozen : sp.trainable) += pc.head_rank;
  // Multi-token prediction with the head: trained with the main model (frozen under LoRA).
  if (stage == head_stage(p) && pc.mtp_rank > 0) {
    (j.mode == TrainMode::lora ? sp.frozen : sp.trainable) += pc.mtp_rank;
    if (j.mode != TrainMode::lora) sp.expert += pc.mtp_expert_rank;
  }
  return sp;
}

ModelStateBytes stage_state_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, const ParamCounts& pc, int stage,
                                  bool with_frozen) {
  StageParams params = stage_params(m, j, p, pc, stage);
  if (!with_frozen) params.frozen = params.frozen_nf4 = 0;
  // Expert parallel: a routed expert's states exist only on the dp*cp/ep ranks holding that
  // expert, so ZeRO shards them over those (Megatron-Core's expert-data-parallel group), the
  // rest over dp*cp.
  if (p.ep > 1 && params.expert > 0)
    return model_state_bytes(params.trainable - params.expert, params.frozen, j, p.zero, p.dp * p.cp, p.offload_optimizer,
                             params.frozen_nf4, p.offload_params) +
           model_state_bytes(params.expert, 0, j, p.zero, p.dp * p.cp / p.ep, p.offload_optimizer, 0, p.offload_params);
  return model_state_bytes(params.trainable, params.frozen, j, p.zero, p.dp * p.cp, p.offload_optimizer, params.frozen_nf4,
                           p.offload_params);
}

StageParams stage_params(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int stage) {
  const uint32_t lora_mask = j.mode == TrainMode::lora ? lora_target_mask(j.lora, m.family) : 0;
  return stage_params(m, j, p, count_params(m, p.tp, p.pp, p.ep, lora_mask, j.lora.rank), stage);
}

LayerRecompute mtp_recompute(const ParallelPlan& p) {
  return p.recompute == Recompute::full ? LayerRecompute::full : p.recompute == Recompute::selective ? LayerRecompute::selective : LayerRecompute::none;
}

// What the multi-token prediction modules keep per micro-batch (DeepSeek-V3 sec. 2.2): per
// module its block's kept tensors (a layer of the last layer's kind under `policy`), the
// embedding's norm input, eh_proj's input (the two normed inputs concatenated, 2h) and its
// own final-norm and head inputs: 5 tokens x h beside the block, held with the head's set.
double mtp_kept_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, LayerRecompute policy) {
  if (m.mtp_layers <= 0) return 0;
  const double act_bytes = j.precision == Precision::fp32 ? 4 : 2;
  const double head_input = static_cast<double>(p.micro_batch) * (j.seq_len / p.cp) * m.hidden / (p.sp ? p.tp : 1.0) * act_bytes;
  return m.mtp_layers * (activation_bytes_per_layer(m, layer_context(m, j, p, m.layers - 1), policy) + 5 * head_input);
}

namespace {

// stage_memory_extras with the rank's parameter counts (read only under ZeRO-2/3 and for
// MoE under TP) and its layers' backward moments given.
StageMemoryExtras stage_memory_extras(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int stage,
                                      const MemoryOptions& opt, const ParamCounts& pc, const LayerBackwardMoments& main_moments,
                                      const LayerBackwardMoments& dense_moments, const double* mtp_kept = nullptr) {
  StageMemoryExtras x;
  const int layers = pp_stage_layers(m.layers, p, stage);
  const int first_layer = first_layer_of_pp_stage(m.layers, p, stage);
  const int frozen_layers = j.frozen_layer_count(m.layers);
  const int frozen_here = std::clamp(frozen_layers - first_layer, 0, layers);
  // The kinds of the stage's layers (one kind: all of kind 0). Of a stage of several kinds
  // each per-layer term below takes its largest kind (an upper bound where, as ZeRO-3's
  // pool of two adjacent units, the two largest need not be adjacent).
  const StageLayerKinds kinds = stage_layer_kinds(m, p, stage, frozen_here);
  const bool has_moe = has_moe_layer(m, kinds);
  bool has_dense = false;
  for (int k = 0; k < kLayerKinds; ++k) has_dense = has_dense || (m.moe.enabled() && kind_dense_mlp(k) && kinds.layers[k] > 0);
  LayerBackwardMoments moments = has_dense && !has_moe ? dense_moments : main_moments;
  if (has_dense && has_moe) {
    if (dense_moments.mlp > main_moments.mlp + main_moments.mlp_comm) moments.mlp = dense_moments.mlp, moments.mlp_comm = 0;
    moments.attention = std::max(main_moments.attention, dense_moments.attention);
  }
  const bool is_first = stage == 0, is_last = stage == head_stage(p);  // is_last: holds the LM head
  const bool embedding_trainable = j.mode != TrainMode::lora && frozen_layers == 0;
  const double act_bytes = j.precision == Precision::fp32 ? 4 : 2;
  const double seq_div = p.sp ? p.tp : 1.0;
  const double tokens = static_cast<double>(p.micro_batch) * (j.seq_len / p.cp);
  const double h = static_cast<double>(m.hidden);
  const double vocab_rank = vocab_rows_per_rank(m, p.tp);  // the rank's logits columns, token-table rows
  if (is_first && m.dropout && embedding_trainable) x.first_chunk_set = tokens * h / seq_div;  // embedding dropout mask
  if (is_last) {
    x.head_input = tokens * h / seq_div * act_bytes;
    x.last_chunk_set = 2 * x.head_input;  // final-norm input (the last layer's output) + LM-head input
    // Multi-token prediction's kept tensors, held with the head's set (mtp_kept_bytes).
    if (m.mtp_layers > 0)
      x.last_chunk_set += mtp_kept ? mtp_kept[static_cast<int>(mtp_recompute(p))] : mtp_kept_bytes(m, j, p, mtp_recompute(p));
    // logits + fp32 softmax (the executor's loss), or the framework's loss peak
    const bool tp_loss = p.tp > 1 && opt.loss_bytes_per_logit_tp > 0;
    const double framework_loss = tp_loss ? opt.loss_bytes_per_logit_tp : opt.loss_bytes_per_logit;
    // ... with the blocks the caching allocator keeps reserved over it (MemoryOptions).
    const double cached = tp_loss ? opt.loss_cached_bytes_per_logit_tp : opt.loss_cached_bytes_per_logit;
    const double per_logit = (framework_loss > 0 ? framework_loss : act_bytes + 4) + cached;
    x.logits_set = tokens * vocab_rank * per_logit;
    // Every multi-token prediction module's logits and loss live with the main head's
    // until the backward (Megatron-Core computes each depth's loss in the forward).
    if (m.mtp_layers > 0) x.logits_set *= 1 + m.mtp_layers;
  }
  const bool layers_train = frozen_here < layers;
  // The layer backward's MLP moment: its activation gradients, one GEMM's scratch and (MoE
  // under TP) the layer's partial router and expert gradients, all live at once in the
  // MoE MLP's backward.
  double mlp_working = moments.mlp + opt.backward_gemm_scratch_bytes;
  if (has_moe && p.tp > 1 && opt.moe_tp_partial_gradients) {
    const double partial = j.mode == TrainMode::lora ? pc.lora_expert_per_layer_rank
                                                     : pc.expert_per_layer_rank + static_cast<double>(m.moe.experts) * h;  // + router
    mlp_working += partial * bytes_per_param(j).gradients;
  }
  // The shared experts' moment comes after the partials are summed and the EP buffers freed.
  double routed_comm = moments.mlp_comm;
  if (has_moe && moments.mlp_shared + opt.backward_gemm_scratch_bytes > mlp_working + routed_comm) {
    mlp_working = moments.mlp_shared + opt.backward_gemm_scratch_bytes;
    routed_comm = 0;
  }
  if (is_last) {
    x.head_logits = tokens * vocab_rank * act_bytes * (1 + m.mtp_layers);
    x.head_weight_grad = j.mode == TrainMode::lora ? 0 : x.head_logits;
    x.head_forward_working = opt.head_gemm_scratch_bytes;
    // The head input gradient over the (SP: gathered) micro-batch and the layer-output
    // gradient the final norm's backward writes, allocated before the GEMM.
    x.head_backward_working = (tokens + tokens / seq_div) * h * act_bytes + opt.head_gemm_scratch_bytes;
  }
  if (p.zero >= 2) {
    const bool lora = j.mode == TrainMode::lora;
    const double tok = vocab_rank * h;                       // the token table (or untied head) on this rank
    const double norm = m.family == Family::gpt ? 2 * h : h;  // final norm weight (+ bias)
    // A layer unit (the stage's largest kind) and its gradient; all of them, for the
    // stage's whole set under zero3_pp_unsharded.
    double layer = 0, layer_grad = 0, all_layers = 0, all_grads = 0;
    for (int k = 0; k < kLayerKinds; ++k) {
      if (kinds.layers[k] == 0) continue;
      const LayerParams lp = pc.layer(kind_dense_mlp(k));
      layer = std::max(layer, lp.per_layer_rank + (lora ? lp.lora_per_layer_rank : 0));
      layer_grad = std::max(layer_grad, lora ? lp.lora_per_layer_rank : lp.per_layer_rank);
      all_layers += kinds.layers[k] * (lp.per_layer_rank + (lora ? lp.lora_per_layer_rank : 0));
      all_grads += kinds.layers[k] * (lora ? lp.lora_per_layer_rank : lp.per_layer_rank);
    }
    // Units in the order of use: the embedding, the layers, the final norm + head (with the
    // multi-token prediction modules, which use the head).
    const double emb_unit = pc.embedding_rank, head_unit = norm + tok + (is_last ? pc.mtp_rank : 0);
    // Gradients: only trainable parameters have them (a tied head's table trains with the embedding).
    double grad = layers_train ? layer_grad : 0;
    if (is_first && embedding_trainable) grad = std::max(grad, emb_unit);
    const double head_grad = is_last && !lora ? norm + (m.tied_embeddings && !embedding_trainable ? 0 : tok) + pc.mtp_rank : 0;
    grad = std::max(grad, head_grad);
    x.unit_grad_transient = grad * bytes_per_param(j).gradients;
    x.head_grad_transient = head_grad * bytes_per_param(j).gradients;
    if (p.zero == 3) {
      double pool = layers >= 2 ? 2 * layer : layer;
      if (is_first) pool = std::max(pool, emb_unit + (layers > 0 ? layer : 0));
      if (is_last) pool = std::max(pool, head_unit + (layers > 0 ? layer : 0));
      if (opt.zero3_root_gathered) {
        // A tied head on the first stage reads the embedding's table: only its norm is new.
        const double root = (is_first ? emb_unit : 0) + (is_last ? norm + (m.tied_embeddings && is_first ? 0 : tok) : 0);
        pool = root + (layers >= 2 ? 2 * layer : layer);
      }
      x.gathered_pool = pool * act_bytes;
      // Inside a layer's forward: it and the next in the order of use (the head after the
      // stage's last layer; the embedding pairs with layer 0 only in its own forward). Inside
      // a layer's backward: it and the one below it. At the loss the head is released again;
      // the head's own GEMMs hold it alone (forward) or with the top layer (backward).
      const double pool_backward = layers >= 2 ? 2 * layer : layer;
      double pool_layer = pool_backward;
      if (is_last) pool_layer = std::max(pool_layer, head_unit + (layers > 0 ? layer : 0));
      bool root = opt.zero3_root_gathered;
      if (opt.zero3_module_fetch) {
        // DeepSpeed (MemoryOptions::zero3_module_fetch): the largest module it must hold
        // whole, beside the reuse window and the prefetch bucket, capped by the stage's
        // parameters; held through the step (its window follows the trace, not the layers).
        double largest = 0, largest_grad = 0;
        for (int k = 0; k < kLayerKinds; ++k) {
          if (kinds.layers[k] == 0) continue;
          const double linear = linear_weights_per_layer_rank(m, p.tp, p.ep, kind_dense_mlp(k)).largest;
          largest = std::max(largest, linear);
          if (layers_train && !lora) largest_grad = std::max(largest_grad, linear);
        }
        if (is_first) largest = std::max(largest, emb_unit);
        if (is_last) largest = std::max(largest, tok);
        if (is_first && embedding_trainable) largest_grad = std::max(largest_grad, emb_unit);
        if (head_grad > 0) largest_grad = std::max(largest_grad, tok);
        // A tied head on the embedding's own stage is the same table: only its norm is new.
        const double stage_params = all_layers + (is_first ? emb_unit : 0) + (is_last ? head_unit - (is_first && m.tied_embeddings ? tok : 0) : 0);
        x.gathered_pool = std::min(stage_params, opt.zero3_reuse_params + opt.zero3_prefetch_params + largest) * act_bytes;
        // LoRA's trainable units are small; their gradient stays the unit's.
        if (!lora) {
          x.unit_grad_transient = largest_grad * bytes_per_param(j).gradients;
          x.head_grad_transient = head_grad > 0 ? std::min(head_grad, tok) * bytes_per_param(j).gradients : 0;
        }
        root = true;
      } else if (opt.zero3_pp_unsharded && p.pp > 1) {
        // Under PP the stage's whole parameters stay gathered all step (MemoryOptions), and
        // its gradients accumulate unsharded in fp32 until the last micro-batch: held, not a
        // unit's transient.
        x.gathered_pool = (all_layers + (is_first ? emb_unit : 0) + (is_last ? head_unit : 0)) * act_bytes;
        x.unsharded_gradients = (layers_train ? all_grads : 0) * 4.0 +
                                ((is_first && embedding_trainable) ? emb_unit * 4.0 : 0) + head_grad * 4.0;
        x.unit_grad_transient = x.head_grad_transient = 0;
        root = true;
      }
      x.gathered_pool_layer = root ? x.gathered_pool : pool_layer * act_bytes;
      x.gathered_pool_backward = root ? x.gathered_pool : pool_backward * act_bytes;
      x.gathered_at_loss = root ? x.gathered_pool : 0;
      if (is_last) {
        x.head_gathered_forward = root ? x.gathered_pool : head_unit * act_bytes;
        x.head_gathered_backward = root ? x.gathered_pool : (head_unit + (layers_train ? layer : 0)) * act_bytes;
      }
    }
  }

  int groups = 0;
  double sp_ep = 0;        // the SP gather and EP all-to-all buffers counted below (MLP / GEMM-input side)
  double cp_forward = 0, cp_backward = 0;  // the CP exchange's buffers: attention forward's peak, backward kernel's
  double sp_gather = 0;                    // the SP gather of a layer's input
  if (p.dp * p.cp > 1) {
    x.comm_buffers += 2 * opt.dp_bucket_bytes;
    // DeepSpeed ZeRO-3's contiguous gradient bucket, allocated once (zero3_module_fetch).
    if (p.zero == 3 && opt.zero3_module_fetch) x.comm_buffers += opt.zero3_reduce_bucket_params * bytes_per_param(j).gradients;
    ++groups;
  }
  if (p.tp > 1) {
    // Sequence parallel all-gathers a layer's input into a full-sequence buffer; plain TP
    // all-reduces in place and needs none (measured by the distributed executor).
    // It lives only around the GEMMs that read it (a layer's, the LM head's).
    if (p.sp) sp_gather = tokens * h * act_bytes;
    x.comm_buffers += sp_gather;
    x.layer_comm_buffers += sp_gather;
    sp_ep += sp_gather;
    ++groups;
  }
  if (p.pp > 1) {
    // Send + receive of one micro-batch; interleaved 1F1B has an activation and a gradient
    // send in flight at once (Megatron's steady state; the executor's comm/pipeline.h). A V
    // (ZB-V, DualPipeV) sends its two chunks' outputs opposite ways, each chunk and
    // direction from its own buffer (one shared buffer deadlocks the V's order under
    // rendezvous sends; PyTorch keeps each send's tensor until it completes): stage 0
    // sends chunk 0's activations and chunk 1's gradients, every other stage all four.
    const double outputs = placed_in_v(p) ? (stage == 0 ? 3 : 5) : p.vpp > 1 ? 3 : 2;
    x.comm_buffers += outputs * tokens * h / seq_div * act_bytes;
    if (opt.pp_buffers_per_microbatch) {
      // torch.distributed.pipelining (MemoryOptions::pp_buffers_per_microbatch): every
      // micro-batch of every chunk has its own receive buffers, activation (not on the first
      // stage) and gradient (not on the last), the input gradient stays on the former, and
      // the schedule keeps each chunk output to the end of the step: the last stage's its
      // logits (the one at the loss is already counted there), the others' their hidden.
      const double unit = tokens * h / seq_div * act_bytes, chunks = p.grad_accum * static_cast<double>(p.vpp);
      const double units = (is_first ? 0 : 2) + (is_last ? 0 : 2);
      x.comm_buffers += chunks * units * unit;
      if (is_last) x.comm_buffers += (p.grad_accum - 1.0) * tokens * vocab_rank * act_bytes * (1 + m.mtp_layers);
    }
    ++groups;
  }
  if (p.cp > 1) {
    // Added below, against the SP and EP buffers they are never live with.
    if (p.cp_exchange == CpExchange::all_gather) {
      cp_forward = cp_all_gather_buffer_bytes(m, j, p);
      // Backward's kernel runs once v's raw buffer is freed: the whole k and v (2 of the 3).
      cp_backward = cp_forward * 2 / 3;
    } else {
      // The ring (Liu et al. 2023, Ring Attention) holds the k and v of two
      // ranks, the current and the next; backward also the dk, dv accumulators that travel
      // with them, current and next.
      cp_forward = 2 * 2 * tokens * m.kv_width() / p.tp * act_bytes;
      cp_backward = 2 * cp_forward;
    }
    ++groups;
  }
  if (p.ep > 1) {
    // The all-to-all send buffer of one dispatch or combine (or of their gradients in
    // backward): the rank's capacity-padded expert rows; the receiving side is the expert
    // input / output the recipe keeps. One at a time.
    // Under SP the all-gathered layer input above is live during the dispatch only when
    // shared experts read it (it is gathered before the exchange); without them the two
    // are never live together, so only the larger counts.
    const double a2a = has_moe ? moe_expert_rows(m, tokens / seq_div, p.ep) * h * act_bytes : 0;
    const double ep_extra = m.moe.shared_experts > 0 ? a2a : std::max(a2a, sp_ep) - sp_ep;  // sp_ep: the SP gather so far
    x.comm_buffers += ep_extra;
    x.layer_comm_buffers += ep_extra;
    sp_ep += ep_extra;
    ++groups;
  }
  // The CP exchange's buffers live only inside attention (freed when it returns), the SP
  // gather only around the GEMM that reads it and the EP buffers only inside the MoE MLP:
  // never both sides at once, so only the larger counts.
  const double cp_extra = cp_forward > 0 ? std::max(cp_forward, sp_ep) - sp_ep : 0;
  x.comm_buffers += cp_extra;
  x.layer_comm_buffers += cp_extra;
  x.comm_buffers += groups * opt.nccl_bytes_per_group;
  if (is_last) x.head_comm = sp_gather;  // the head's SP-gathered input, in its GEMMs
  if (is_last && opt.sp_head_input_saved) x.loss_comm = sp_gather;
  // A layer's backward peaks at the MLP or in attention (the larger: attention under CP, or
  // narrow MLPs beside a wide attention kernel workspace): never both at once.
  // The MLP's GEMMs read the SP-gathered input (a dense MLP's, shared experts'; routed
  // experts only their own tokens) and MoE's the all-to-all buffer; attention holds only
  // the exchanged keys and values (the SP gather is freed after the QKV GEMM).
  if (layers_train) {
    const double mlp_comm = (!m.moe.enabled() || m.moe.shared_experts > 0 ? sp_gather : 0) + routed_comm;
    const double attention_working = moments.attention + opt.attention_scratch_bytes;
    x.backward_sides = {attention_working, cp_backward, mlp_working, mlp_comm};
    const BackwardMoment moment = backward_moment(x.backward_sides, 0, 0);
    x.activation_grads = moment.grads;
    x.backward_layer_comm = moment.comm;
    x.cp_backward_buffers = cp_backward;
  }
  return x;
}

}  // namespace

double qlora_dequantized_weight_bytes(const TrainingJob& j, double largest_linear) {
  return j.qlora() ? largest_linear * (j.precision == Precision::fp32 ? 4 : 2) : 0;
}

double qlora_dequantized_weight_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p) {
  if (!j.qlora()) return 0;
  double largest = 0;
  for (int k = 0; k < kLayerKinds; ++k)
    if (layer_kinds_present(m) & (1u << k)) largest = std::max(largest, linear_weights_per_layer_rank(m, p.tp, p.ep, kind_dense_mlp(k)).largest);
  return qlora_dequantized_weight_bytes(j, largest);
}

BackwardMoment backward_moment(const BackwardSides& s, double remat_max, double remat_mlp_max) {
  if (remat_max + s.attention + s.attention_comm > remat_mlp_max + s.mlp + s.mlp_comm) return {remat_max, s.attention, s.attention_comm};
  return {remat_mlp_max, s.mlp, s.mlp_comm};
}

StageMemoryExtras stage_memory_extras(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int stage,
                                      const MemoryOptions& opt) {
  ParamCounts pc;
  if (p.zero >= 2 || (m.moe.enabled() && p.tp > 1)) {
    const uint32_t lora_mask = j.mode == TrainMode::lora ? lora_target_mask(j.lora, m.family) : 0;
    pc = count_params(m, p.tp, p.pp, p.ep, lora_mask, j.lora.rank);
  }
  const LayerBackwardMoments main = activation_gradient_bytes(m, j, p);
  return stage_memory_extras(m, j, p, stage, opt, pc, main, m.moe.enabled() ? activation_gradient_bytes(m, j, p, true) : main);
}

MemoryInputs memory_inputs(const ModelSpec& m, const GpuSpec& gpu, const TrainingJob& j, const ParallelPlan& plan,
                           const MemoryOptions& opt) {
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);  // DualPipe: its rank-equivalent DualPipeV plan
  MemoryInputs in;
  const uint32_t lora_mask = j.mode == TrainMode::lora ? lora_target_mask(j.lora, m.family) : 0;
  in.pc = count_params(m, p.tp, p.pp, p.ep, lora_mask, j.lora.rank);
  const bool fp8 = j.fp8_linear();
  if (fp8 && (opt.fp8_weight_copies == Fp8WeightCopies::cached || opt.fp8_weight_copies == Fp8WeightCopies::primary)) {
    in.fp8_cached_bytes_per_param = fp8_weight_copy_bytes(j.fp8, gpu);
    // FP8 primary weights replace the layers' 16-bit weights (outside ZeRO-3, whose
    // sharded states keep their 16-bit count): the layers' linear weights drop those bytes.
    // Blockwise scaling keeps 16-bit weights: Megatron-Bridge's recipe for it
    // (bf16_with_fp8_subchannel_scaling_mixed, training/mixed_precision.py, v0.3.0) sets
    // fp8_param_gather False where the tensorwise, delayed and MXFP8 ones set it True.
    if (opt.fp8_weight_copies == Fp8WeightCopies::primary && j.fp8 != Fp8Recipe::blockwise && plan.zero < 3 &&
        j.mode != TrainMode::lora && j.frozen_layer_count(m.layers) == 0)
      in.fp8_primary_saved_bytes_per_param = j.precision == Precision::fp32 ? 4 : 2;
    // FP8 modules of a layer: Transformer Engine fuses q, k, v into one (LayerNormLinear),
    // then the output projection and the MLP's two GEMMs; a routed expert has its own two
    // (GroupedLinear), the router stays 16-bit.
    const double modules = m.moe.enabled() ? 2 + 2.0 * m.moe.experts / p.ep + (m.moe.shared_experts > 0 ? 2 : 0) : 4;
    in.fp8_scaling_bytes_per_layer = modules * fp8_scaling_state_bytes(j.fp8, gpu);
  }
  in.backward_moments = activation_gradient_bytes(m, j, p);
  in.dense_backward_moments = m.moe.enabled() ? activation_gradient_bytes(m, j, p, true) : in.backward_moments;
  in.kinds = layer_kinds_present(m);
  for (int r = 0; r < 3; ++r) in.mtp_kept[r] = mtp_kept_bytes(m, j, p, static_cast<LayerRecompute>(r));
  const int frozen = j.frozen_layer_count(m.layers);
  for (int k = 0; k < kLayerKinds; ++k) {
    if (!(in.kinds & (1u << k))) continue;
    for (int f = 0; f < 2; ++f) {
      // A layer index that is (f=1) or is not (f=0) frozen; contexts differ only in that,
      // and in the kind set here.
      const int layer = f ? 0 : m.layers - 1;
      LayerContext lc = layer_context(m, j, p, layer);
      set_layer_kind(m, k, &lc);
      if (f == 1 && frozen == 0) lc.grad_flows = false;
      apply_memory_conventions(j, gpu, opt, &lc);
      // One walk over the recipe per kind of layer serves all three policies.
      const SavedTensorSums sums = sum_saved_tensors(m, lc);
      const SavedTensorSums trainable = lc.grad_flows ? sums : sum_saved_tensors(m, as_trainable_context(lc));
      in.wgrad_bytes[k][f] = weight_grad_buffer_bytes(m, lc);
      for (int r = 0; r < 3; ++r) {
        const LayerMemoryBytes b = layer_memory_bytes(sums, trainable, lc.grad_flows, static_cast<LayerRecompute>(r), opt);
        in.layer_bytes[k][f][r] = b.kept;
        in.remat_bytes[k][f][r] = b.rematerialised;
        in.remat_attention_bytes[k][f][r] = b.rematerialised_attention;
        in.transient_bytes[k][f][r] = b.transient;
      }
    }
  }
  // The same walk over a stage's layers as stage_memory, once per distinct stage shape,
  // and the runs of equal middle stages (1 .. pp-2) for estimate_memory.
  in.runs_complete = true;
  for (int s = 0; s < p.pp; ++s) {
    const int layers = pp_stage_layers(m.layers, p, s);
    const int frozen_here = std::clamp(frozen - first_layer_of_pp_stage(m.layers, p, s), 0, layers);
    const StageLayerKinds kinds = stage_layer_kinds(m, p, s, frozen_here);
    if (s >= 1 && s < p.pp - 1) {
      MemoryInputs::StageRun* run = in.run_count > 0 ? &in.runs[in.run_count - 1] : nullptr;
      if (run && run->kinds == kinds) {
        run->end = s + 1;
      } else if (in.run_count < static_cast<int>(in.runs.size())) {
        in.runs[in.run_count++] = {s, s + 1, kinds};
      } else {
        in.runs_complete = false;
      }
    }
    // A shape seen before, or one more than the list holds (stage_phases then walks its layers).
    if (find_stage_layers(in, kinds) || in.shape_count == static_cast<int>(in.shapes.size())) continue;
    MemoryInputs::StageLayers& sl = in.shapes[in.shape_count++];
    sl.kinds = kinds;
    for (int k = 0; k < kLayerKinds; ++k)  // the W buffers do not depend on the recompute policy
      for (int i = 0; i < kinds.layers[k]; ++i) sl.wgrad += in.wgrad_bytes[k][i < kinds.frozen[k] ? 1 : 0];
    for (int r = 0; r < 3; ++r) {
      double per_mb = 0, remat = 0, remat_mlp = 0, transient = 0;
      // Kind by kind, its frozen layers first (the walk's order for a model of one kind).
      for (int k = 0; k < kLayerKinds; ++k)
        for (int i = 0; i < kinds.layers[k]; ++i) {
          const int f = i < kinds.frozen[k] ? 1 : 0;
          per_mb += in.layer_bytes[k][f][r];
          remat = std::max(remat, in.remat_bytes[k][f][r]);
          remat_mlp = std::max(remat_mlp, in.remat_bytes[k][f][r] - in.remat_attention_bytes[k][f][r]);
          transient = std::max(transient, in.transient_bytes[k][f][r]);
        }
      sl.kept[r] = per_mb;
      sl.remat[r] = remat;
      sl.remat_mlp[r] = remat_mlp;
      sl.transient[r] = transient;
    }
  }
  return in;
}

namespace {

// A stage's items at the peak of each phase (forward, backward, optimizer), fragmentation
// included -- all its total depends on -- and what stage_memory adds to its report.
struct StagePhases {
  std::array<std::array<double, kMemoryItems>, 3> b;  // [Phase][MemoryItem], bytes
  std::array<double, 3> total{-1, -1, -1};            // [Phase]: their totals
  int layers = 0;
  double inflight = 0;
  double activations = 0, logits = 0, transient = 0, remat_and_grads = 0, head_working = 0;  // bytes, for item_peak
  double activations_peak = 0;  // the activations' largest: with a split backward's own W set, from its B on
  double host_activations = 0;  // activation offload: in host memory at the peak
  double weight_grad_buffers = 0;  // split backward: output gradients waiting for their W (in activations)
  double host_states = 0;       // optimizer offload: the model states moved to host memory
  double gathered_peak = 0;  // the ZeRO-3 pool (forward, backward), for item_peak
  double gradients_peak = 0; // with the largest unit's full gradient (ZeRO >= 2), for item_peak
  double comm_peak = 0;      // every communication buffer, inside a layer, for item_peak
};

// What a stage holds outside its passes: the model states on this rank and the buffers of
// StageMemoryExtras at their largest (ZeRO-3's pool, every communication buffer), the
// workspace and the CUDA context; and the model states moved to host memory.
struct StageBase {
  std::array<double, kMemoryItems> items{};
  double host_states = 0;
  double step_grad_copy = 0;  // the optimizer step's fp32 gradients (step_grad_copy_bytes)
};

StageBase stage_base(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int stage, int layers, const MemoryOptions& opt,
                     const MemoryInputs& in, const StageMemoryExtras& x) {
  const ModelStateBytes states = stage_state_bytes(m, j, p, in.pc, stage);
  StageBase sb;
  sb.host_states = states.host;
  std::array<double, kMemoryItems>& base = sb.items;
  // FP8 weight cache: every layer's quantized copies, held all step long. Under ZeRO-3 a
  // layer's weights exist whole only while gathered, and so do their copies: those of the
  // gathered unit and the prefetched one (Megatron FSDP gathers FP8 parameters, its
  // fp8_param_gather), not a cache of the whole stage.
  const double cached_layers = p.zero == 3 ? std::min(layers, 2) : layers;
  // The cached layers' parameters: of a stage of several kinds, every layer's (ZeRO-3: two
  // of the largest kind).
  double cached_params = cached_layers * in.pc.per_layer_rank, largest_linear = 0;
  if (in.kinds != 1 || j.qlora()) {
    const StageLayerKinds kinds =
        stage_layer_kinds(m, p, stage, std::clamp(j.frozen_layer_count(m.layers) - first_layer_of_pp_stage(m.layers, p, stage), 0, layers));
    double all = 0, largest = 0;
    for (int k = 0; k < kLayerKinds; ++k) {
      if (kinds.layers[k] == 0) continue;
      all += kinds.layers[k] * in.pc.layer(kind_dense_mlp(k)).per_layer_rank;
      largest = std::max(largest, in.pc.layer(kind_dense_mlp(k)).per_layer_rank);
      if (j.qlora()) largest_linear = std::max(largest_linear, linear_weights_per_layer_rank(m, p.tp, p.ep, kind_dense_mlp(k)).largest);
    }
    if (in.kinds != 1) cached_params = p.zero == 3 ? cached_layers * largest : all;
  }
  base[static_cast<int>(MemoryItem::weights)] =
      states.weights + cached_params * (in.fp8_cached_bytes_per_param - in.fp8_primary_saved_bytes_per_param) +
      layers * in.fp8_scaling_bytes_per_layer;
  base[static_cast<int>(MemoryItem::gradients)] = states.gradients + x.unsharded_gradients;
  base[static_cast<int>(MemoryItem::optimizer_states)] = states.optimizer_states;
  base[static_cast<int>(MemoryItem::master_weights)] = states.master_weights;
  sb.step_grad_copy = step_grad_copy_bytes(j, states.master_weights, p.zero, opt);
  base[static_cast<int>(MemoryItem::gathered_params)] = x.gathered_pool;
  base[static_cast<int>(MemoryItem::comm_buffers)] = x.comm_buffers;
  base[static_cast<int>(MemoryItem::workspace)] =
      opt.gemm_workspace_bytes + (layers > 0 ? qlora_dequantized_weight_bytes(j, largest_linear) : 0);
  base[static_cast<int>(MemoryItem::cuda_context)] = opt.cuda_context_bytes;
  return sb;
}

// The stage's memory events (memory_events.h) from its base and extras: held all step are
// the model states, ZeRO-3's units gathered at the loss and the buffers outside layers;
// every layer-only and head buffer is an event's.
StageMemoryProgram stage_memory_program(const StageBase& sb, const StageMemoryExtras& x, const MemoryOptions& opt) {
  StageMemoryProgram st;
  st.held = sb.items;
  st.step_grad_copy = sb.step_grad_copy;
  st.held[static_cast<int>(MemoryItem::gathered_params)] = x.gathered_at_loss;
  st.held[static_cast<int>(MemoryItem::comm_buffers)] = x.comm_buffers - x.layer_comm_buffers;
  st.fragmentation_fraction = opt.fragmentation_fraction;
  st.layer_gathered = x.gathered_pool_layer - x.gathered_at_loss;
  st.layer_gathered_backward = x.gathered_pool_backward - x.gathered_at_loss;
  st.layer_comm = x.layer_comm_buffers;
  st.layer_comm_backward = x.backward_layer_comm;
  st.grad_transient = x.unit_grad_transient;
  st.head_logits = x.head_logits;
  st.head_forward_working = x.head_forward_working;
  st.head_backward_working = x.head_backward_working;
  st.head_gathered_forward = x.head_gathered_forward - x.gathered_at_loss;
  st.head_gathered_backward = x.head_gathered_backward - x.gathered_at_loss;
  st.head_grad_transient = x.head_grad_transient;
  st.head_comm = x.head_comm;
  st.loss_comm = x.loss_comm;
  return st;
}

StagePhases stage_phases(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int stage, const MemoryOptions& opt,
                         const MemoryInputs& in) {
  StagePhases out;
  out.layers = pp_stage_layers(m.layers, p, stage);
  const int first_layer = first_layer_of_pp_stage(m.layers, p, stage);
  const bool is_last = stage == head_stage(p);  // holds the LM head
  const int64_t mb = microbatches_per_step(j, p);
  out.inflight = inflight_microbatches(p, mb, stage);

  // ---- parameters on this rank
  const int frozen_here = std::clamp(j.frozen_layer_count(m.layers) - first_layer, 0, out.layers);
  StageMemoryExtras x = stage_memory_extras(m, j, p, stage, opt, in.pc, in.backward_moments, in.dense_backward_moments, in.mtp_kept);
  const StageBase sb = stage_base(m, j, p, stage, out.layers, opt, in, x);
  const std::array<double, kMemoryItems>& base = sb.items;
  out.host_states = sb.host_states;

  // ---- activations of one micro-batch through this stage
  double per_mb = 0, remat = 0, remat_mlp = 0, transient = 0, wgrad = 0;
  const MemoryInputs::StageLayers* sl =
      p.recompute == Recompute::full_k ? nullptr : find_stage_layers(in, stage_layer_kinds(m, p, stage, frozen_here));
  if (sl) {
    const int r = static_cast<int>(p.recompute);  // none, selective, full: the same policy on every layer
    per_mb = sl->kept[r];
    remat = sl->remat[r];
    remat_mlp = sl->remat_mlp[r];
    transient = sl->transient[r];
    wgrad = sl->wgrad;
  } else {
    const bool one_kind = in.kinds == 1;
    for (int i = 0; i < out.layers; ++i) {
      const int f = i < frozen_here ? 1 : 0;
      const int r = static_cast<int>(layer_recompute(p, i, out.layers));
      const int k = one_kind ? 0 : layer_kind(m, stage_layer_global_index(m.layers, p, stage, i));
      per_mb += in.layer_bytes[k][f][r];
      wgrad += in.wgrad_bytes[k][f];
      remat = std::max(remat, in.remat_bytes[k][f][r]);
      remat_mlp = std::max(remat_mlp, in.remat_bytes[k][f][r] - in.remat_attention_bytes[k][f][r]);
      transient = std::max(transient, in.transient_bytes[k][f][r]);
    }
  }
  // The backward's larger moment, with what is re-materialised there (none without a
  // layer that trains).
  const BackwardMoment moment =
      x.activation_grads > 0 ? backward_moment(x.backward_sides, remat, remat_mlp) : BackwardMoment{remat, 0, x.backward_layer_comm};
  x.activation_grads = moment.grads;
  x.backward_layer_comm = moment.comm;
  // Split backward: the moment whose in-flight activations and pending W buffers weigh most
  // (in a V the two counts peak apart: split_backward_peak_counts).
  double pending = 0;
  if (p.pp > 1 && splits_backward(p.schedule)) {
    std::array<SplitBackwardCounts, 3> at{};
    const int n = split_backward_peak_counts(p, mb, stage, at);
    int best = 0;
    for (int i = 1; i < n; ++i)
      if (per_mb * at[i].inflight + wgrad * at[i].pending > per_mb * at[best].inflight + wgrad * at[best].pending) best = i;
    out.inflight = at[best].inflight;
    pending = at[best].pending;
  }
  // Tensors that belong to the first chunk (embedding) or the last (head) are held by as
  // many micro-batches as that chunk has in flight, not by the stage's average.
  const double last_sets = is_last ? last_chunk_sets(p, mb) : 0;
  double activations = per_mb * out.inflight + first_chunk_sets(p, mb) * x.first_chunk_set + last_sets * x.last_chunk_set;
  // Unequal chunks (the embedding/loss split): each chunk's micro-batches in flight hold its
  // own layers, which the stage's average would miss (the small first chunk has the most
  // in flight), and the head's tensors only while a last-chunk micro-batch is in flight.
  if (p.vpp > 1 && p.pipeline_split != PipelineSplit::even && p.schedule != Schedule::gpipe && out.layers > 0)
    activations = unequal_chunk_activations(m, p, mb, stage, per_mb / out.layers, x.first_chunk_set, x.last_chunk_set);
  // A split backward frees the logits at the loss's B, right after the head's F (the head's
  // W keeps their gradient instead: head_pending_weight_grads): one set in flight.
  const double logit_sets = is_last && splits_backward(p.schedule) ? 1 : last_sets;
  const double logits = logit_sets * x.logits_set;
  // The micro-batch in flight on the last chunk holds its logits from the head forward
  // to the head backward; the others (GPipe holds every micro-batch) all the time.
  const double other_logits = is_last ? (logit_sets - 1) * x.logits_set : 0;
  // Activation offload of this stage's first k layers: every in-flight micro-batch keeps their
  // activations in host memory but for one offloaded layer's: Transformer Engine's offload
  // handler (transformer_engine/pytorch/cpu_offload.py, the layer window map of
  // AsyncDoubleBufferGroupOffloadHandler in TE 1.x-2.8 and OffloadSynchronizer's
  // finish_offload_map/start_reload_map after it) frees an offloaded layer's GPU copy only
  // when a later layer's forward commits and reloads the next one a layer ahead in backward,
  // so at most one offloaded layer is resident beside the L - k kept ones, and none at the
  // head's moments (PassMemory::offload_resident).
  double offload_resident = 0;
  if (const int k = std::min(p.activation_offload_layers, out.layers); k > 0 && out.layers > 0) {
    offload_resident = per_mb / out.layers;
    out.host_activations = offload_resident * k * out.inflight;
    activations -= out.host_activations - offload_resident;
  }
  // Split backward (ZB-H1, ZB-V, DualPipeV): the output gradients each B leaves for its W,
  // for the stage's pending sets (its layers' weight_grad_buffer_bytes; on the head's
  // stage the logits' gradient for the head's W), held with the activations. The scanned
  // pass's own set appears at its backward's largest moment (memory_events.h), the others'
  // are held throughout: at the counts of the moment chosen above (for ZB-H1 both counts'
  // largest, which coincide: rank r's r-th deferred W; a forward meets one pending set fewer).
  out.weight_grad_buffers = wgrad * pending + (is_last ? head_pending_weight_grads(p, mb, pending) * x.head_weight_grad : 0);
  // (A moment with nothing pending is a forward's or a whole backward's: no W set of its
  // own; in a V the pass is one chunk: half the stage's W set.)
  const bool split_pass = p.pp > 1 && splits_backward(p.schedule) && pending > 0;
  const double own_weight_grads = split_pass ? wgrad / (placed_in_v(p) ? 2 : 1) + (is_last ? x.head_weight_grad : 0) : 0;
  activations += std::max(0.0, out.weight_grad_buffers - own_weight_grads);
  out.activations = activations;
  out.activations_peak = activations + own_weight_grads;
  out.logits = logits;
  out.transient = transient;
  out.remat_and_grads = moment.remat + moment.grads;
  // Multi-token prediction: each module's block backward comes after the head's, with every
  // activation still held, the main and the block's output gradients and the earlier depths'
  // logits (compute dtype) beside its working set -- the head's moment (all 1 + D depths'
  // logits) less two depths' logits: the head moment covers it unless the block is wider.
  if (is_last && m.mtp_layers > 0 && moment.grads > 0) {
    const double depth_logits = x.head_logits / (1 + m.mtp_layers);
    x.head_backward_working = std::max(x.head_backward_working, out.remat_and_grads + 2 * x.head_input - 2 * depth_logits);
  }
  out.head_working = std::max(x.head_forward_working, x.head_backward_working);
  out.gathered_peak = base[static_cast<int>(MemoryItem::gathered_params)];

  // The phases' peaks: a scan of one micro-batch's pass through the stage
  // (memory_events.h) with every other in-flight micro-batch's activations and logits held,
  // the largest total of each phase's moments (the first of equals).
  const StageMemoryProgram prog = stage_memory_program(sb, x, opt);
  PassMemory pass;
  pass.kept = per_mb + x.first_chunk_set + (is_last ? x.last_chunk_set : 0);
  pass.head_set = is_last ? x.last_chunk_set : 0;
  pass.head_input = x.head_input;
  pass.logits = is_last ? x.logits_set : 0;
  // DualPipeV pairs a head forward with another micro-batch's backward (F&B): that
  // micro-batch's logits are held through a backward that is not theirs.
  pass.partner_logits = is_last && p.pp > 1 && p.schedule == Schedule::dualpipev ? x.logits_set : 0;
  pass.offload_resident = offload_resident;
  pass.transient = transient;
  pass.working = out.remat_and_grads;
  pass.weight_grad_buffer = own_weight_grads;
  pass.split_backward = split_pass;
  // Each moment's total is the bytes held outside the items that change (the gradients
  // aside, constant) plus those items with their fragmentation reserve. The changing items
  // are tracked apart and written out only at a phase's new largest moment.
  const int A = static_cast<int>(MemoryItem::activations), W = static_cast<int>(MemoryItem::backward_working),
            L = static_cast<int>(MemoryItem::logits_loss), G = static_cast<int>(MemoryItem::gathered_params),
            C = static_cast<int>(MemoryItem::comm_buffers), F = static_cast<int>(MemoryItem::fragmentation),
            R = static_cast<int>(MemoryItem::gradients);
  const std::array<double, kMemoryItems>& held = prog.held;
  const double held_other = held[static_cast<int>(MemoryItem::weights)] + held[static_cast<int>(MemoryItem::optimizer_states)] +
                            held[static_cast<int>(MemoryItem::master_weights)] + held[static_cast<int>(MemoryItem::workspace)] +
                            held[static_cast<int>(MemoryItem::cuda_context)];
  const double f = prog.fragmentation_fraction;
  // The pass starts with every other in-flight micro-batch's activations and logits held.
  MemoryChange cur{activations - pass.kept, 0, other_logits, held[G], held[C], held[R]};
  auto visit = [&](const MemoryEvent& e, int ph) __attribute__((always_inline)) {
    const MemoryChange& d = e.change;
    cur.activations += d.activations;
    cur.backward_working += d.backward_working;
    cur.logits_loss += d.logits_loss;
    cur.gathered_params += d.gathered_params;
    cur.comm_buffers += d.comm_buffers;
    cur.gradients += d.gradients;
    // An event that only frees cannot raise the total (every item and the reserve fall or
    // stay, and rounding is monotone): the moment before it is at least as large.
    if (out.total[ph] >= 0 && d.activations <= 0 && d.backward_working <= 0 && d.logits_loss <= 0 && d.gathered_params <= 0 &&
        d.comm_buffers <= 0 && d.gradients <= 0)
      return;
    const double dynamic = cur.activations + cur.backward_working + cur.logits_loss + cur.gathered_params + cur.comm_buffers;
    const double reserve = f * dynamic;
    const double total = held_other + cur.gradients + dynamic + reserve;
    if (total > out.total[ph]) {
      out.total[ph] = total;
      std::array<double, kMemoryItems>& items = out.b[ph];
      items = held;
      items[A] = cur.activations;
      items[W] = cur.backward_working;
      items[L] = cur.logits_loss;
      items[G] = cur.gathered_params;
      items[C] = cur.comm_buffers;
      items[R] = cur.gradients;
      items[F] = reserve;
    }
  };
  for_each_pass_memory_event(pass, prog, [&](const MemoryEvent& e) __attribute__((always_inline)) {
    visit(e, static_cast<int>(moment_phase(e.moment)));
  });
  cur = MemoryChange{0, 0, 0, held[G], held[C], held[R]};
  visit(optimizer_memory_events(prog)[0], static_cast<int>(Phase::optimizer));
  out.comm_peak = std::max(base[static_cast<int>(MemoryItem::comm_buffers)],
                           base[static_cast<int>(MemoryItem::comm_buffers)] - x.layer_comm_buffers + x.cp_backward_buffers);
  out.gradients_peak = base[static_cast<int>(MemoryItem::gradients)] + std::max({x.unit_grad_transient, x.head_grad_transient, sb.step_grad_copy});
  return out;
}

// The phase with the largest total (the first of equals) and the totals.
int peak_phase(const StagePhases& sp, std::array<double, 3>& totals) {
  totals = sp.total;
  int peak = 0;
  for (int ph = 1; ph < 3; ++ph)
    if (totals[ph] > totals[peak]) peak = ph;
  return peak;
}

StageMemory stage_memory(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int stage, const MemoryOptions& opt,
                         const MemoryInputs& in) {
  const StagePhases sp = stage_phases(m, j, p, stage, opt, in);
  StageMemory sm;
  sm.stage = stage;
  sm.layers = sp.layers;
  sm.inflight_microbatches = sp.inflight;
  sm.host_activation_bytes = sp.host_activations;
  sm.weight_grad_buffer_bytes = sp.weight_grad_buffers;
  sm.host_state_bytes = sp.host_states;
  // Each item's peak over the step: the model states and buffers of the optimizer phase,
  // the gradients of the backward phase (ZeRO >= 2: with a unit's full gradient), the
  // ZeRO-3 gathered pool, the activations and logits
  // at the end of the head forward, the larger of the forward transient and the backward
  // working set, and the largest fragmentation reserve.
  const int frag = static_cast<int>(MemoryItem::fragmentation);
  sm.item_peak = sp.b[static_cast<int>(Phase::optimizer)];
  const int grads = static_cast<int>(MemoryItem::gradients);
  sm.item_peak[grads] = sp.gradients_peak;
  sm.item_peak[static_cast<int>(MemoryItem::gathered_params)] = sp.gathered_peak;
  sm.item_peak[static_cast<int>(MemoryItem::comm_buffers)] = sp.comm_peak;
  sm.item_peak[static_cast<int>(MemoryItem::activations)] = sp.activations_peak;
  sm.item_peak[static_cast<int>(MemoryItem::logits_loss)] = sp.logits;
  sm.item_peak[static_cast<int>(MemoryItem::backward_working)] = std::max({sp.transient, sp.remat_and_grads, sp.head_working});
  sm.item_peak[frag] = 0;
  for (int ph = 0; ph < 3; ++ph) {
    sm.phase_bytes[ph] = sp.b[ph];
    sm.item_peak[frag] = std::max(sm.item_peak[frag], sp.b[ph][frag]);
  }
  const int peak = peak_phase(sp, sm.phase_total);
  sm.peak_phase = static_cast<Phase>(peak);
  sm.bytes = sp.b[peak];
  sm.total = sm.phase_total[peak];
  sm.allocator_peak = sm.total - sm.bytes[static_cast<int>(MemoryItem::cuda_context)];
  return sm;
}

}  // namespace

StageMemory estimate_stage_memory(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& plan, int stage,
                                  const MemoryOptions& opt) {
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);  // DualPipe: stage of its rank-equivalent DualPipeV plan
  return stage_memory(m, j, p, stage, opt, memory_inputs(m, c.gpu, j, p, opt));
}

StageMemoryProgram stage_memory_program(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& plan,
                                        int stage, const MemoryOptions& opt) {
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);
  const MemoryInputs in = memory_inputs(m, c.gpu, j, p, opt);
  const StageMemoryExtras x = stage_memory_extras(m, j, p, stage, opt, in.pc, in.backward_moments, in.dense_backward_moments);
  return stage_memory_program(stage_base(m, j, p, stage, pp_stage_layers(m.layers, p, stage), opt, in, x), x, opt);
}

MemoryReport estimate_memory(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                             const MemoryOptions& opt) {
  return estimate_memory(m, c, j, p, memory_inputs(m, c.gpu, j, p, opt), opt);
}

namespace {

// Calls cost(s) for every stage s that can be the worst, in stage order: the first, the
// last, and of the middle stages only those that may exceed the stage before.
//
// Middle stages (neither first nor last) with the same layers and frozen layers of each
// kind (StageLayerKinds) as the stage before differ from it only in holding no more
// in-flight micro-batches (every
// schedule's count falls with the stage), and every term of a middle stage's total at
// each of its moments is non-decreasing in that count, in floating point too (sums and
// products of non-negative values round monotonically, and so does adding the pass's
// events to the held background); a phase's peak is the largest of those totals. Such a
// stage cannot exceed the stage before, so it cannot become the worst (ties keep the
// earlier stage): skipping it keeps the report exact and makes a plan cost a few stages
// instead of pp. (The terms that do not scale with the count are equal on equal shapes:
// parameters and the DP buckets follow the layers and frozen layers; so do ZeRO-2/3's
// unit gradient in backward -- a middle stage's largest trainable unit is one of its
// layers if any trains -- and ZeRO-3's gathered pool, one or two of its layers.)
template <class Cost>
void for_candidate_stages(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, const MemoryInputs& in, Cost cost) {
  cost(0);
  // Split-backward schedules hold more on later stages (pending W's grow with the stage):
  // every stage is a candidate.
  if (splits_backward(p.schedule) && p.pp > 1) {
    for (int s = 1; s < p.pp; ++s) cost(s);
    return;
  }
  if (in.runs_complete) {
    // Runs of equal middle stages from memory_inputs: the first of each.
    for (int k = 0; k < in.run_count; ++k) cost(in.runs[k].first);
    if (p.pp > 1) cost(p.pp - 1);
    return;
  }
  StageLayerKinds prev;
  const int frozen = j.frozen_layer_count(m.layers);
  for (int s = 1; s < p.pp; ++s) {
    const int layers = pp_stage_layers(m.layers, p, s);
    const int frozen_here = std::clamp(frozen - first_layer_of_pp_stage(m.layers, p, s), 0, layers);
    const StageLayerKinds kinds = stage_layer_kinds(m, p, s, frozen_here);
    const bool same_shape = s > 1 && kinds == prev;
    prev = kinds;
    if (same_shape && s < p.pp - 1) continue;
    cost(s);
  }
}

}  // namespace

MemoryReport estimate_memory(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& plan,
                             const MemoryInputs& in, const MemoryOptions& opt) {
  // DualPipe: its rank-equivalent DualPipeV plan; stage s stands for ranks s and pp-1-s.
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);
  MemoryReport r;
  r.capacity = c.gpu.memory_bytes;
  r.host_capacity = c.host_memory_bytes;
  for_candidate_stages(m, j, p, in, [&](int s) {
    const StageMemory sm = stage_memory(m, j, p, s, opt, in);
    r.host_bytes_per_node = std::max(r.host_bytes_per_node, (sm.host_activation_bytes + sm.host_state_bytes) * c.gpus_per_node);
    if (s == 0) {
      r.first = sm;
      r.worst = sm;
    } else if (sm.total > r.worst.total) {
      r.worst = sm;
    }
    if (s == p.pp - 1) r.last = sm;
  });
  return r;
}

MemoryPeak estimate_memory_peak(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& plan,
                                const MemoryInputs& in, const MemoryOptions& opt) {
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);  // DualPipe: as estimate_memory
  MemoryPeak r;
  r.capacity = c.gpu.memory_bytes;
  r.host_capacity = c.host_memory_bytes;
  for_candidate_stages(m, j, p, in, [&](int s) {
    const StagePhases sp = stage_phases(m, j, p, s, opt, in);
    r.host_bytes_per_node = std::max(r.host_bytes_per_node, (sp.host_activations + sp.host_states) * c.gpus_per_node);
    std::array<double, 3> totals;
    const int peak = peak_phase(sp, totals);
    if (s == 0 || totals[peak] > r.total) {
      r.total = totals[peak];
      r.stage = s;
      r.phase = static_cast<Phase>(peak);
    }
  });
  return r;
}

}  // namespace llmplan
