#include "planner/cost/time_model.h"

#include <algorithm>
#include <cmath>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"

namespace llmplan {

Link group_link(const ClusterSpec& c, const ParallelPlan& p, Group g) {
  // Ranks are laid out TP innermost, then CP, DP, PP: group g is `size` ranks `stride`
  // apart. It stays on NVLink when the span it covers fits in one NVLink domain (the
  // node, or a whole NVL72 rack of 4-GPU trays).
  int64_t stride = 1, size = 1;
  switch (g) {
    case Group::tp: size = p.tp; break;
    case Group::cp: stride = p.tp, size = p.cp; break;
    case Group::ep: stride = p.tp, size = p.ep; break;  // EP groups are carved out of DP x CP, after TP
    case Group::dp: stride = static_cast<int64_t>(p.tp) * p.cp, size = p.dp; break;
    case Group::pp: stride = static_cast<int64_t>(p.tp) * p.cp * p.dp, size = p.pp; break;
  }
  const int64_t domain = c.scale_up_gpus();
  if (size <= 1 || stride * size <= domain) return {c.intra_node_bandwidth, c.intra_node_latency, LinkTier::intra_node};
  // k ranks of the group share a domain; NCCL's ring channels leave it through k NICs
  // (collectives only: PP sends and the CP ring are point-to-point, one NIC).
  const int64_t k = stride >= domain ? 1 : std::min<int64_t>(size, domain / stride);
  const int64_t nodes = (size + k - 1) / k;
  const bool channels = g == Group::tp || g == Group::dp;
  Link l;
  // Each channel's ring still runs through the domain's own fabric, so k NICs never give
  // a rank more than its NVLink bandwidth (k reaches 36 on an NVL72 rack, not 8 as in a node).
  l.bandwidth = std::min(c.intra_node_bandwidth, c.inter_node_bandwidth * static_cast<double>(channels ? k : 1));
  if (g == Group::ep) {
    // All-to-all is no ring: each rank sends its own share to every other rank, (k-1)/n of
    // its bytes inside the domain over NVLink and (n-k)/n out through its own NIC (the
    // NICs are per GPU, rail-optimized; NCCL's PXN forwards off-rail traffic over NVLink
    // first but each NIC still carries one GPU's share; DeepEP's internode kernels reach
    // about one 400 Gb/s NIC, 50 GB/s, per GPU). The two run at once: the slower sets the
    // time, written as the bandwidth that alltoall_time's (n-1)/n * bytes / bw gives it.
    const double in_domain = static_cast<double>(k - 1) / c.intra_node_bandwidth;
    const double off_domain = static_cast<double>(size - k) / c.inter_node_bandwidth;
    l.bandwidth = static_cast<double>(size - 1) / std::max(in_domain, off_domain);
  }
  l.latency = ((k - 1) * c.intra_node_latency + (nodes - 1) * c.inter_node_latency) / static_cast<double>(size - 1);
  l.tier = LinkTier::inter_node;
  return l;
}

double allreduce_time(double bytes, int n, const Link& l, const Efficiency& e) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2.0 * (n - 1) / n * bytes / (l.bandwidth * e.network) + 2.0 * (n - 1) * l.latency;
}

double allgather_time(double bytes, int n, const Link& l, const Efficiency& e) {
  if (n <= 1 || bytes <= 0) return 0;
  return static_cast<double>(n - 1) / n * bytes / (l.bandwidth * e.network) + (n - 1) * l.latency;
}

double alltoall_time(double bytes, int n, const Link& l, const Efficiency& e) {
  return allgather_time(bytes, n, l, e);
}

double p2p_time(double bytes, const Link& l, const Efficiency& e) {
  if (bytes <= 0) return 0;
  return bytes / (l.bandwidth * e.network) + l.latency;
}

double allreduce_latency(double bytes, int n, const Link& l) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2.0 * (n - 1) * l.latency;
}

double allgather_latency(double bytes, int n, const Link& l) {
  if (n <= 1 || bytes <= 0) return 0;
  return (n - 1) * l.latency;
}

double p2p_latency(double bytes, const Link& l) { return bytes <= 0 ? 0 : l.latency; }

double gemm_time(double m, double n, double k, double elem_bytes, double peak_flops, double bandwidth, const Efficiency& e) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const double flops = 2 * m * n * k;
  const double d = std::min({m, n, k});
  // The traffic term is per FLOP at 16-bit operands: fp8 operands move half the bytes.
  const double compute = flops / (peak_flops * e.gemm * d / (d + e.gemm_half_dim)) + flops * e.gemm_traffic * elem_bytes / 2 / bandwidth;
  // Roofline: a GEMM too thin to be compute-bound streams its operands once.
  const double bytes = elem_bytes * (m * k + k * n + m * n);
  return std::max(compute, bytes / (bandwidth * e.memory)) + e.kernel_launch_s;
}

Dtype compute_dtype(const TrainingJob& j, const GpuSpec& g) {
  if (j.precision == Precision::bf16) return Dtype::bf16;
  if (j.precision == Precision::fp16) return Dtype::fp16;
  return g.peak(Dtype::tf32) > 0 ? Dtype::tf32 : Dtype::fp32;
}

namespace {

struct Gemm {
  double m, n, k;
  bool base;   // base weight (vs LoRA adapter)
  double count;
  bool fp8 = true;  // runs in FP8 under an FP8 recipe when `base` (the MoE router stays 16-bit)
  bool latent_up = false;  // a latent attention up projection: re-run by selective recompute
};

}  // namespace

HeadTimes head_times(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const Efficiency& e) {
  // LM head + cross-entropy on the last stage (always trained unless LoRA).
  const LayerContext top = layer_context(m, j, p, m.layers - 1);
  const double peak = c.gpu.peak(compute_dtype(j, c.gpu));
  const double bw = c.gpu.memory_bandwidth;
  const double tokens_mb = static_cast<double>(p.micro_batch) * static_cast<double>(j.seq_len / p.cp);
  const bool head_trains = j.mode != TrainMode::lora;
  HeadTimes h;
  const double gemm = gemm_time(tokens_mb, static_cast<double>(m.vocab) / p.tp, static_cast<double>(m.hidden), top.act_bytes, peak, bw, e);
  const double loss = tokens_mb * static_cast<double>(m.vocab) / p.tp * e.loss_bytes_per_logit / (bw * e.memory);
  // A frozen head (LoRA) passes only the input gradient back: one GEMM, and the loss at
  // the forward's share.
  h.forward = gemm + loss / 3;
  h.backward = head_trains ? 2 * gemm + 2 * loss / 3 : gemm + loss / 3;
  if (m.mtp_layers > 0) {
    // Multi-token prediction (DeepSeek-V3 sec. 2.2) on the last stage, per module: its block
    // (a layer of the last layer's kind, under the plan's recompute, its in-layer
    // communication counted here as exposed), eh_proj (2h -> h/t) and one more pass through
    // the shared head and loss. Frozen under LoRA, like the head.
    const LayerContext lc = layer_context(m, j, p, m.layers - 1);
    const LayerRecompute policy = p.recompute == Recompute::full       ? LayerRecompute::full
                                  : p.recompute == Recompute::selective ? LayerRecompute::selective
                                                                        : LayerRecompute::none;
    const LayerTimes lt = layer_times(m, c, j, p, lc, policy, e);
    const double comm = lt.tp_comm + lt.cp_comm_exposed + lt.ep_comm;
    const double eh = gemm_time(tokens_mb, static_cast<double>(m.hidden) / p.tp, 2.0 * static_cast<double>(m.hidden), top.act_bytes, peak, bw, e);
    const double d = m.mtp_layers;
    h.forward += d * (lt.forward + eh + gemm + loss / 3 + comm / 2);
    h.backward += d * (lt.backward + lt.recompute + (head_trains ? 2 * (eh + gemm) + 2 * loss / 3 : eh + gemm + loss / 3) + comm / 2);
  }
  return h;
}

OptimizerTime optimizer_time(const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const Efficiency& e, double trainable) {
  // Bytes read and written per trainable parameter on this rank.
  const BytesPerParam bpp = bytes_per_param(j);
  const double shard = p.zero >= 1 ? static_cast<double>(p.dp) * p.cp : 1;
  const double opt_bytes = (2 * bpp.weights + bpp.gradients + 2 * bpp.master + 2 * bpp.optimizer);
  OptimizerTime t;
  if (p.offload_optimizer) {
    // Gradients down to the host, updated 16-bit parameters back up (none with parameter
    // offload: they stay in host memory, fetched by the next step's gathers).
    const double host = trainable / shard * (bpp.gradients + (p.offload_params ? 0 : bpp.weights)) / c.host_bandwidth;
    const double cpu_adam = trainable / shard / (1.5e9 / c.gpus_per_node);  // DeepSpeed CPU-Adam ~1.5 G params/s per host
    t.offload = host + cpu_adam;
  } else {
    t.optimizer = trainable / shard * opt_bytes / (c.gpu.memory_bandwidth * e.memory);
  }
  return t;
}

LayerCommByPass layer_comm_by_pass(const LayerTimes& lt, LayerRecompute policy, bool grad_flows) {
  LayerCommByPass r;
  const double nf = 2, nb = grad_flows ? 2 : 0, nr = (policy == LayerRecompute::full && grad_flows) ? 2 : 0;
  const double n_tp = nf + nb + nr;
  r.tp[0] = lt.tp_comm * nf / n_tp;
  r.tp[1] = lt.tp_comm * nb / n_tp;
  r.tp[2] = lt.tp_comm * nr / n_tp;
  const double n_ep = nf + nb;
  r.ep[0] = lt.ep_comm * nf / n_ep;
  r.ep[1] = lt.ep_comm * nb / n_ep;
  r.tp_latency[0] = lt.tp_comm_latency * nf / n_tp;
  r.tp_latency[1] = lt.tp_comm_latency * nb / n_tp;
  r.tp_latency[2] = lt.tp_comm_latency * nr / n_tp;
  r.ep_latency[0] = lt.ep_comm_latency * nf / n_ep;
  r.ep_latency[1] = lt.ep_comm_latency * nb / n_ep;
  r.cp[0] = lt.cp_comm_forward > 0 ? lt.cp_comm_forward : grad_flows ? lt.cp_comm_exposed / 3 : lt.cp_comm_exposed;
  r.cp[1] = lt.cp_comm_exposed - r.cp[0];
  return r;
}

double pp_boundary_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p) {
  const LayerContext top = layer_context(m, j, p, m.layers - 1);
  const double tokens_mb = static_cast<double>(p.micro_batch) * (j.seq_len / p.cp);
  return tokens_mb * m.hidden / (p.sp ? p.tp : 1) * top.act_bytes;
}

Link dp_group_link(const ClusterSpec& c, const ParallelPlan& p) {
  // The degrees group_link reads, not a copy of the plan (whose stage_layers would be copied
  // on every costed plan).
  ParallelPlan reduce_group;
  reduce_group.dp = p.dp * p.cp;
  reduce_group.tp = p.tp, reduce_group.pp = p.pp, reduce_group.ep = p.ep;
  reduce_group.cp = 1;
  return group_link(c, reduce_group, Group::dp);
}

double zero1_bucket_params(int dp_group) { return std::max(40e6, 1e6 * dp_group); }

double param_fetch_time(double unit_bytes, int shard_group, double host_bandwidth, const Efficiency& e) {
  if (unit_bytes <= 0 || host_bandwidth <= 0) return 0;
  return unit_bytes / std::max(1, shard_group) / (host_bandwidth * e.network);
}

static void with_param_fetch(DpStep* d, const ClusterSpec& c, const Efficiency& e) {
  // Parameter offload: each unit's shard comes from host memory first, then is gathered
  // (DeepSpeed's PartitionedParameterCoordinator fetches the offloaded partition to the GPU
  // before its all-gather; FSDP2's CPUOffloadPolicy copies the sharded parameter to the
  // device in its pre-all-gather). In series with the gather, hidden by the same prefetch.
  // A one-rank group copies the whole unit and gathers nothing (ZeRO-Infinity on one GPU,
  // Rajbhandari et al. 2021, sec. 5).
  const double copies = d->params.count * param_fetch_time(d->params.bytes, d->group, c.host_bandwidth, e);
  d->params.duration += copies;
  d->params.host_copy += copies;
  d->host_bandwidth = c.host_bandwidth;
}

DpStep dp_step(const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const Efficiency& e, double trainable,
               double all_params, int layers) {
  DpStep d;
  d.group = p.dp * p.cp;
  d.link = dp_group_link(c, p);
  const BytesPerParam bpp = bytes_per_param(j);
  // The reduction moves the gradient buffer's dtype (fp32 main grads under Megatron's
  // convention, 16-bit ones under DeepSpeed's), or fp32 when the stack upcasts for it
  // (FSDP's reduce_dtype: Efficiency::grad_reduce_fp32).
  d.grad_bytes_per_param = e.grad_reduce_fp32 > 0 ? std::max(4.0, bpp.gradients) : bpp.gradients;
  d.weight_bytes_per_param = bpp.weights;
  d.per_microbatch = p.zero == 3 && !(p.pp > 1 && e.zero3_pp_gather_once > 0);
  d.hbm_bandwidth = c.gpu.memory_bandwidth;
  if (p.zero == 0) d.grad_bucket_bytes = kDdpBucketBytes;
  if (p.zero == 1) {
    d.grad_bucket_bytes = zero1_bucket_params(d.group) * d.grad_bytes_per_param;
    d.gather_bucket_bytes = zero1_bucket_params(d.group) * d.weight_bytes_per_param;
  }
  if (trainable <= 0 || (d.group <= 1 && p.zero != 3)) return d;
  const double grad_bytes = trainable * d.grad_bytes_per_param;
  const double weight_bytes = (p.zero == 3 ? all_params : trainable) * d.weight_bytes_per_param;
  const int n = d.group;
  const Link& l = d.link;
  // Each collective pays its own ring latency.
  const double layer_units = layers + 1.0;  // plus the embedding/head
  const double units = p.zero == 0   ? std::max(1.0, std::ceil(grad_bytes / kDdpBucketBytes))
                       : p.zero == 1 ? std::max(1.0, std::ceil(trainable / zero1_bucket_params(n)))
                                     : layer_units;
  auto collective = [&](DpKind kind, double bytes) {
    DpCollective x;
    x.kind = kind;
    x.count = units;
    x.bytes = bytes / units;
    x.duration = units * (kind == DpKind::allreduce ? allreduce_time(x.bytes, n, l, e) : allgather_time(x.bytes, n, l, e));
    return x;
  };
  d.grads = collective(p.zero == 0 ? DpKind::allreduce : DpKind::reduce_scatter, grad_bytes);
  if (p.zero >= 1) d.params = collective(DpKind::allgather, weight_bytes);
  if (p.zero == 3 && p.offload_params) with_param_fetch(&d, c, e);
  if (n > 1) d.last_bucket = p2p_time(std::min(grad_bytes, kDdpBucketBytes), l, e);
  return d;
}

double collective_hbm_traffic(DpKind kind) {
  switch (kind) {
    case DpKind::allgather: return 2;
    case DpKind::reduce_scatter: return 3;
    case DpKind::allreduce: return 2.5;
  }
  return 3;
}

double dp_exposed_time(const DpStep& d, double microbatches, double fwd, double bwd, const Efficiency& e) {
  if (d.grads.count <= 0) return 0;
  // The received bytes per second of a collective running at the link's rate, as HBM
  // seconds per second of it hidden.
  const double hbm_share = d.hbm_bandwidth > 0 ? d.link.bandwidth * e.network / (d.hbm_bandwidth * e.memory) : 0;
  // A copy from host memory writes its bytes once, at the host link's rate.
  const double host_hbm_share = d.hbm_bandwidth > 0 ? d.host_bandwidth * e.network / (d.hbm_bandwidth * e.memory) : 0;
  // Time a collective of duration `comm` adds to a step when `hide` seconds of compute run
  // beside it (prefetch and bucketed overlap): what does not fit behind the compute, and
  // the HBM traffic of what does (the hidden time split between the network and the host
  // copies in proportion).
  auto cost = [&](const DpCollective& x, double hide) {
    const double hidden = std::min(x.duration, std::max(0.0, hide));
    const double host_share = x.duration > 0 ? x.host_copy / x.duration : 0;
    return x.duration - hidden + hidden * ((1 - host_share) * collective_hbm_traffic(x.kind) * hbm_share + host_share * host_hbm_share);
  };
  const double hide_bwd = e.overlap * bwd, gather_fwd = e.gather_overlap * fwd, gather_bwd = e.gather_overlap * bwd;
  if (d.per_microbatch) {
    // FSDP: gather weights before forward and again before backward, reduce-scatter
    // gradients, every micro-batch; prefetch hides them behind compute.
    return microbatches * (cost(d.params, gather_fwd) + cost(d.params, gather_bwd) + cost(d.grads, hide_bwd)) + d.last_bucket;
  }
  // Gradients are synchronised once per step, overlapped with the last micro-batch's
  // backward; ZeRO-1/2 then all-gather updated parameters behind the next forward.
  return cost(d.grads, hide_bwd) + cost(d.params, gather_fwd) + d.last_bucket;
}

LayerTimes layer_times(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const LayerContext& lc,
                       LayerRecompute policy, const Efficiency& e) {
  LayerTimes lt;
  const Dtype dt = compute_dtype(j, c.gpu);
  const double peak = c.gpu.peak(dt);
  const double gemm_peak = j.fp8_linear() ? peak * e.fp8_gemm_speedup : peak;
  const double bw = c.gpu.memory_bandwidth;
  const double eb = lc.act_bytes;
  const double t = lc.t;
  const double tokens = static_cast<double>(lc.b) * static_cast<double>(lc.s);
  const double h = static_cast<double>(m.hidden);
  const double qw = static_cast<double>(m.q_width()), kvw = static_cast<double>(m.kv_width());
  const bool gpt = m.family == Family::gpt;
  const bool moe = m.moe.enabled() && !lc.dense_mlp;  // the layer's MLP (recipe.h layer_kind)

  // ---- GEMMs of the layer on this rank
  Gemm gemms[16];
  int ng = 0;
  if (m.mla.enabled()) {
    // Latent attention (recipe.h count_params): the replicated down projections over the
    // rank's tokens (its sequence shard under SP), the up projections and o split by t.
    const MlaSpec& a = m.mla;
    const double own = tokens / (p.sp ? t : 1);
    if (a.q_lora_rank > 0) {
      gemms[ng++] = {own, static_cast<double>(a.q_lora_rank), h, true, 1};
      gemms[ng++] = {tokens, qw / t, static_cast<double>(a.q_lora_rank), true, 1, true, true};
    } else {
      gemms[ng++] = {tokens, qw / t, h, true, 1};
    }
    gemms[ng++] = {own, static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim), h, true, 1};
    gemms[ng++] = {tokens, m.heads * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim) / t, static_cast<double>(a.kv_lora_rank),
                   true, 1, true, true};
    gemms[ng++] = {tokens, h, static_cast<double>(m.v_width()) / t, true, 1};
  } else {
    gemms[ng++] = {tokens, (qw + 2 * kvw) / t, h, true, 1};
    gemms[ng++] = {tokens, h, qw / t, true, 1};
  }
  if (moe) {
    const double fe = static_cast<double>(m.moe.expert_ffn_hidden);
    const double local_experts = static_cast<double>(m.moe.experts) / p.ep;
    // The executor's dispatch buffer: every expert's capacity C of rows, padded (GShard);
    // the most loaded EP rank's under an imbalanced load (MoeSpec::load_imbalance).
    const double routed = moe_expert_rows(m, tokens / t, p.ep);  // rows this rank sends, E x C
    const double per_expert = routed * p.ep / m.moe.experts;  // rows a local expert computes, ep x C
    gemms[ng++] = {per_expert, (gpt ? 1 : 2) * fe, h, true, local_experts};
    gemms[ng++] = {per_expert, h, fe, true, local_experts};
    gemms[ng++] = {tokens / t, static_cast<double>(m.moe.experts), h, true, 1, false};  // router
    if (m.moe.shared_experts > 0) {
      const double fs = static_cast<double>(m.shared_ffn_width());
      gemms[ng++] = {tokens, (gpt ? 1 : 2) * fs / t, h, true, 1};
      gemms[ng++] = {tokens, h, fs / t, true, 1};
    }
  } else {
    const double f = static_cast<double>(m.ffn_hidden);
    gemms[ng++] = {tokens, (gpt ? 1 : 2) * f / t, h, true, 1};
    gemms[ng++] = {tokens, h, f / t, true, 1};
  }
  if (lc.lora_targets) {
    const double r = lc.lora_rank;
    const int n_targets = __builtin_popcount(lc.lora_targets);
    // A (in -> r) and B (r -> out); all adapters are about h wide.
    gemms[ng++] = {tokens, r, h, false, static_cast<double>(n_targets)};
    gemms[ng++] = {tokens, h / t, r, false, static_cast<double>(n_targets)};
  }
  double gemm_fwd = 0, gemm_bwd = 0, latent_up_fwd = 0, gemm_wgrad = 0;
  // FP8 recipes: base projections run at the fitted FP8 speed-up (Efficiency::
  // fp8_gemm_speedup, an effective figure that includes the recipe's casts); LoRA adapters
  // and the MoE router stay in 16 bits (Transformer Engine quantizes only its own linear
  // modules; adapters and the router are plain torch layers).
  for (int i = 0; i < ng; ++i) {
    const Gemm& g = gemms[i];
    const bool fp8 = j.fp8_linear() && g.base && g.fp8;
    const double one = g.count * gemm_time(g.m, g.n, g.k, fp8 ? 1 : eb, fp8 ? gemm_peak : peak, bw, e);
    gemm_fwd += one;
    if (g.latent_up) latent_up_fwd += one;
    // Backward: the input gradient always (when gradients flow), the weight gradient
    // only for weights that train.
    const bool weight_grad = g.base ? lc.base_trainable : true;
    gemm_bwd += one * (1 + (weight_grad ? 1 : 0));
    if (weight_grad) gemm_wgrad += one;
  }

  // ---- attention core
  const double a_local = m.heads / t;
  // Packed documents (LayerContext::span_kv): a fused kernel runs each document alone.
  const double core_full = 2 * 2 * tokens * lc.fused_keys() * qw / t;
  double attn_fwd = 0, attn_bwd = 0;
  if (lc.flash) {
    // Fused kernels skip the masked half; backward does 2.5x the forward's matmuls
    // (recomputed QK^T, dV, dP, dQ, dK). Narrow heads and short sequences use the tensor
    // cores less well (Dao 2023, FlashAttention-2, Fig. 5-6).
    const double d = static_cast<double>(m.head_width()), skv = lc.fused_keys();
    // A windowed layer's kernel visits only the window's key blocks (FlashAttention-2's
    // window_size, which skips the blocks outside it): its causal FLOPs are the recipe's and
    // its efficiency that of w keys. Latent attention: QK^T over d_h + d_h^R, PV over v.
    const bool windowed = lc.window > 0 && static_cast<double>(lc.window) < skv;
    const double keys = windowed ? static_cast<double>(lc.window) : skv;
    const double causal = windowed || m.mla.enabled()
                              ? 2 * tokens * (qw + static_cast<double>(m.v_width())) / t * causal_keys_per_query(skv, lc.window)
                              : 0.5 * core_full;
    // The kernels issue mma.sync, which reaches only part of Hopper's tensor peak.
    const double eff = e.attention * d / (d + e.gemm_half_dim) * keys / (keys + e.attention_half_seq);
    const double mma = 1 - e.attention_mma_sync * (1 - c.gpu.mma_sync_fraction);  // the attention kernel's share of the tensor peak
    const double matmuls = causal * (1 / (peak * mma * eff) + e.attention_traffic / bw) + e.kernel_launch_s;
    // The softmax's exponentials not hidden behind the MMAs, one per score in each pass (the
    // backward recomputes P from the saved logsumexp): scores = causal FLOPs / (4d); for
    // latent attention QK^T spans d_h + d_h^R and PV v.
    const double scores = causal / (2 * (d + static_cast<double>(m.mla.enabled() ? m.v_width() / m.heads : m.head_width())));
    const double softmax = e.attention_exp_serial * scores * c.gpu.tensor_flops_per_exp / (peak * eff);
    attn_fwd = matmuls + softmax;
    attn_bwd = 2.5 * matmuls + softmax;
  } else {
    const double head_dim = static_cast<double>(m.head_width());
    const double score_bytes = static_cast<double>(lc.b) * a_local * static_cast<double>(lc.s) * static_cast<double>(lc.s_kv) * eb;
    const double passes = m.dropout ? 6 : 4;  // write scores, softmax r/w, (dropout r/w), read for PV
    // Batched QK^T and PV over b * a/t heads, then softmax/dropout passes over the scores.
    const double rows = a_local * lc.b * static_cast<double>(lc.s);
    attn_fwd = gemm_time(rows, static_cast<double>(lc.s_kv), head_dim, eb, peak, bw, e) +
               gemm_time(rows, head_dim, static_cast<double>(lc.s_kv), eb, peak, bw, e) + passes * score_bytes / (bw * e.memory);
    attn_bwd = 2 * attn_fwd;
  }

  // ---- bandwidth-bound elementwise work (norms, activations, residuals, dropout)
  const LayerFlops fl = forward_flops_per_layer(m, lc, m.moe.capacity_factor);  // (the layer's kind from lc)
  const double elem_fwd = fl.elementwise_bytes / (bw * e.memory);
  const double dequant = fl.dequant_bytes / (bw * e.memory);  // QLoRA: once per pass

  if (lc.grad_flows) {
    lt.forward = gemm_fwd + attn_fwd + elem_fwd + dequant;
    lt.backward = gemm_bwd + attn_bwd + 2 * elem_fwd + dequant;
    lt.weight_grad = gemm_wgrad;
  } else {
    lt.forward = gemm_fwd + attn_fwd + elem_fwd + dequant;  // frozen bottom layers: forward only
    lt.backward = 0;
  }
  if (lc.grad_flows) {
    if (policy == LayerRecompute::full) lt.recompute = lt.forward;
    else if (policy == LayerRecompute::selective && !lc.flash) lt.recompute = attn_fwd;
    // Latent attention: selective recompute re-runs the up projections from the kept latents.
    if (policy == LayerRecompute::selective && latent_up_fwd > 0) lt.recompute += latent_up_fwd;
  }

  // ---- TP collectives: 2 all-reduces (or AG + RS with SP) forward, 2 backward.
  if (p.tp > 1) {
    const double bytes = tokens * h * eb;
    const Link l = group_link(c, p, Group::tp);
    const double one = allreduce_time(bytes, p.tp, l, e) + e.kernel_launch_s;
    lt.tp_comm = (lc.grad_flows ? 4 : 2) * one * (1 - e.tp_overlap);
    if (policy == LayerRecompute::full && lc.grad_flows) lt.tp_comm += 2 * one * (1 - e.tp_overlap);
    const double one_latency = allreduce_latency(bytes, p.tp, l) + e.kernel_launch_s;
    lt.tp_comm_latency = (lc.grad_flows ? 4 : 2) * one_latency * (1 - e.tp_overlap);
    if (policy == LayerRecompute::full && lc.grad_flows) lt.tp_comm_latency += 2 * one_latency * (1 - e.tp_overlap);
  }
  // ---- CP ring: K and V chunks pass around the ring, hidden behind attention. Backward
  // passes them again, and their gradients with them: cp shifts, the last one handing each
  // rank its own (Liu et al. 2023, Ring Attention).
  if (p.cp > 1 && p.cp_exchange == CpExchange::ring) {
    const double chunk = 2 * tokens * kvw / t * eb;
    const Link l = group_link(c, p, Group::cp);
    const double shift = p2p_time(chunk, l, e), ring = (p.cp - 1) * shift, ring_bwd = ring + p.cp * shift;
    lt.cp_comm_exposed = std::max(0.0, ring - attn_fwd) + (lc.grad_flows ? std::max(0.0, ring_bwd - attn_bwd) : 0);
  }
  // ---- CP all-gather (Llama 3's CP, Dubey et al. 2024 sec. 3.3.2): k and v
  // gathered whole before attention can start, so nothing hides them; queries stay local.
  // Backward gathers k and v again and reduce-scatters their whole-sequence gradients (a
  // reduce-scatter moves what an all-gather does). A fully recomputed layer runs the
  // forward's gathers once more; selective recompute shares the backward's.
  if (p.cp > 1 && p.cp_exchange == CpExchange::all_gather) {
    const Link l = group_link(c, p, Group::cp);
    const double whole = p.cp * tokens / t * eb;  // bytes per column of one gathered tensor
    const double gkv = allgather_time(whole * kvw, p.cp, l, e) + e.kernel_launch_s;
    const double fwd = 2 * gkv;
    lt.cp_comm_exposed = lt.cp_comm_forward = fwd;
    if (lc.grad_flows) lt.cp_comm_exposed += 2 * fwd + (policy == LayerRecompute::full ? fwd : 0);
  }
  // ---- EP all-to-all: dispatch and combine, forward and backward.
  if (moe && p.ep > 1) {
    const double bytes = moe_expert_rows(m, tokens / (p.sp ? t : 1), p.ep) * h * eb;  // the capacity-padded send buffer
    const Link l = group_link(c, p, Group::ep);
    lt.ep_comm = (lc.grad_flows ? 4 : 2) * alltoall_time(bytes, p.ep, l, e);
    lt.ep_comm_latency = (lc.grad_flows ? 4 : 2) * allgather_latency(bytes, p.ep, l);
  }
  return lt;
}

namespace {

// The per-stage loop of estimate_time: per micro-batch, the compute, recompute and exposed
// in-layer communication of each stage, its slowest stage and their sum.
CriticalStage critical_stage(const ModelSpec& m, const ParallelPlan& p, const LayerTimes (&kinds)[kLayerKinds][2][3], const HeadTimes& head,
                             int frozen, bool one_kind) {
  CriticalStage w;
  // Stages with the same layer count and frozen layers have the same sums (they are the
  // same additions), so a run of equal stages walks its layers once (a model of several
  // layer kinds: the same kinds at the same places; see below).
  int prev_layers = -1, prev_frozen = -1;
  double l_fwd = 0, l_bwd = 0, l_rc = 0, l_tp = 0, l_cp = 0, l_ep = 0, l_w = 0;
  for (int s = 0; s < p.pp; ++s) {
    const int layers = pp_stage_layers(m.layers, p, s);
    const int frozen_here = std::clamp(frozen - first_layer_of_pp_stage(m.layers, p, s), 0, layers);
    if (layers != prev_layers || frozen_here != prev_frozen || !one_kind) {
      l_fwd = l_bwd = l_rc = l_tp = l_cp = l_ep = l_w = 0;
      for (int i = 0; i < layers; ++i) {
        // The layer's kind from its index in the model (interleaved stages hold chunks).
        const int k = one_kind ? 0 : layer_kind(m, stage_layer_global_index(m.layers, p, s, i));
        const LayerTimes& lt = kinds[k][i < frozen_here ? 1 : 0][static_cast<int>(layer_recompute(p, i, layers))];
        l_fwd += lt.forward;
        l_bwd += lt.backward;
        l_w += lt.weight_grad;
        l_rc += lt.recompute;
        l_tp += lt.tp_comm;
        l_cp += lt.cp_comm_exposed;
        l_ep += lt.ep_comm;
      }
      prev_layers = layers;
      prev_frozen = frozen_here;
    }
    double fwd = l_fwd, bwd = l_bwd;
    if (s == head_stage(p)) {
      fwd += head.forward;
      bwd += head.backward;
    }
    const double stage_time = fwd + bwd + l_rc + l_tp + l_cp + l_ep;
    w.sum_stage += stage_time;
    if (stage_time > w.max_stage) {
      w.max_stage = stage_time;
      w.compute = fwd + bwd;
      w.recompute = l_rc;
      w.tp = l_tp;
      w.cp = l_cp;
      w.ep = l_ep;
      w.fwd = fwd;
      w.bwd = bwd + l_rc;
      w.wgrad = l_w;
    }
  }
  return w;
}

}  // namespace

StepTimeInputs step_time_inputs(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& plan,
                                const Efficiency& e) {
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);  // DualPipe: its rank-equivalent DualPipeV plan
  StepTimeInputs in;
  in.microbatches = static_cast<double>(microbatches_per_step(j, p));
  in.frozen = j.frozen_layer_count(m.layers);

  // Per-layer times for each kind of layer present (recipe.h layer_kind), trainable and
  // frozen, under the three policies.
  in.layer_kinds = layer_kinds_present(m);
  for (int k = 0; k < kLayerKinds; ++k) {
    if (!(in.layer_kinds & (1u << k))) continue;
    for (int f = 0; f < 2; ++f) {
      LayerContext lc = layer_context(m, j, p, f ? 0 : m.layers - 1);
      set_layer_kind(m, k, &lc);
      if (f == 1 && in.frozen == 0) lc.grad_flows = false;
      for (int r = 0; r < 3; ++r) in.kinds[k][f][r] = layer_times(m, c, j, p, lc, static_cast<LayerRecompute>(r), e);
    }
  }
  {
    // The activation bytes of a trainable layer of the first stage's first layer's kind (the
    // offloaded ones).
    LayerContext lc = layer_context(m, j, p, m.layers - 1);
    set_layer_kind(m, layer_kind(m, stage_layer_global_index(m.layers, p, 0, 0)), &lc);
    for (int r = 0; r < 3; ++r) in.layer_activation_bytes[r] = activation_bytes_per_layer(m, lc, static_cast<LayerRecompute>(r));
  }
  in.peak = c.gpu.peak(compute_dtype(j, c.gpu));
  // The head's time depends on the plan's recompute only through the multi-token prediction
  // blocks: in.head is full_k's (their blocks not recomputed), each policy below its own.
  ParallelPlan no_recompute = p;
  no_recompute.recompute = Recompute::none;
  in.head = head_times(m, c, j, no_recompute, e);
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    ParallelPlan q = p;
    q.recompute = r;
    const HeadTimes head = m.mtp_layers > 0 ? head_times(m, c, j, q, e) : in.head;
    in.uniform[static_cast<int>(r)] = critical_stage(m, q, in.kinds, head, in.frozen, in.layer_kinds == 1);
  }

  // PP point-to-point: one hop's send.
  if (p.pp > 1) in.pp_hop = p2p_time(pp_boundary_bytes(m, j, p), group_link(c, p, Group::pp), e);

  // Trainable params on the first stage's rank (the embedding makes it the largest).
  const uint32_t lora_mask = j.mode == TrainMode::lora ? lora_target_mask(j.lora, m.family) : 0;
  const ParamCounts pc = count_params(m, p.tp, p.pp, p.ep, lora_mask, j.lora.rank);
  in.layers0 = pp_stage_layers(m.layers, p, 0);
  const int frozen0 = std::clamp(in.frozen, 0, in.layers0);
  if (in.layer_kinds == 1) {
    in.trainable = j.mode == TrainMode::lora ? (in.layers0 - frozen0) * pc.lora_per_layer_rank : (in.layers0 - frozen0) * pc.per_layer_rank;
    in.all_params_rank = in.layers0 * pc.per_layer_rank;
  } else {
    // The first stage's layers by kind (a MoE model's dense layers are its first ones).
    const StageLayerKinds kinds = stage_layer_kinds(m, p, 0, frozen0);
    for (int k = 0; k < kLayerKinds; ++k) {
      const LayerParams lp = pc.layer(kind_dense_mlp(k));
      in.trainable += (kinds.layers[k] - kinds.frozen[k]) * (j.mode == TrainMode::lora ? lp.lora_per_layer_rank : lp.per_layer_rank);
      in.all_params_rank += kinds.layers[k] * lp.per_layer_rank;
    }
  }
  if (j.mode != TrainMode::lora && in.frozen == 0) in.trainable += pc.embedding_rank;
  if (p.pp == 1 && j.mode != TrainMode::lora) in.trainable += pc.head_rank + pc.mtp_rank;
  in.all_params_rank = in.all_params_rank + pc.embedding_rank + (p.pp == 1 ? pc.head_rank + pc.mtp_rank : 0);
  for (int z = 0; z < 4; ++z) {
    ParallelPlan q = p;
    q.zero = z;
    q.offload_params = false;  // estimate_time adds the host copies (it is costed for plans that differ in it)
    in.dp[z] = dp_step(c, j, q, e, in.trainable, in.all_params_rank, in.layers0);
  }

  in.step_tokens = static_cast<double>(j.global_batch) * j.seq_len;
  // Model FLOPs: 6N + attention per token for full training; LoRA and frozen layers skip
  // weight gradients of frozen weights (2N + 2N + small instead of 6N).
  double per_token = model_flops_per_token(m, j.attention_span());  // packed documents: attention within each
  if (j.mode == TrainMode::lora) per_token *= 2.0 / 3.0;
  else if (in.frozen > 0) per_token *= 1.0 - (static_cast<double>(in.frozen) / m.layers) / 3.0;
  in.model_flops = per_token * in.step_tokens;
  return in;
}

double pp_exposed_time(const ParallelPlan& p, double microbatches, double hop, const CriticalStage& w, const Efficiency& e) {
  if (p.pp <= 1) return 0;
  // The fill and drain: the first micro-batch's activations and the last one's gradients
  // cross the stages with nothing else to run beside them.
  const double fill = 2.0 * (p.pp - 2) * hop;
  const double steady = microbatches * p.vpp;  // sends each way per stage per step
  if (e.pp_p2p_overlap <= 0 || p.vpp <= 1) return fill + 2 * steady * hop;
  // Overlapped (Efficiency::pp_p2p_overlap): a forward send runs under the next forward
  // chunk, a backward one under the next backward chunk; only what outlasts them waits.
  const double fwd_chunk = w.fwd / p.vpp, bwd_chunk = w.bwd / p.vpp;
  return fill + steady * (std::max(0.0, hop - fwd_chunk) + std::max(0.0, hop - bwd_chunk));
}

double pipeline_bubble(const ParallelPlan& p, const CriticalStage& w) {
  if (p.pp <= 1) return 0;
  // Fill and drain: every other stage's work once (equal stages: (p-1) * T), divided by
  // v with interleaving (Narayanan et al. 2021). GPipe has the same bubble.
  double bubble = (w.sum_stage - w.max_stage) / p.vpp;
  // Split backward: with F, B (input gradient, recompute and in-layer communication
  // included) and W (weight gradient) per micro-batch per chunk, ZB-H1's bubble is
  // (p-1)(F + B - W) (Qi et al. 2024, Sec. 2.1; the DualPipe README's (PP-1)(F + B - 2W)
  // with B the whole backward), and ZB-V's and DualPipeV's (p-1)(F + B - W) over their
  // half-size chunks -- each at least (p-1) F, the forward's own fill (a W larger than
  // F + B cannot run before the first B). Exact with equal F, B, W for PyTorch's orders
  // played op by op; with unequal ones ZB-H1 stays exact and a V's is an approximation
  // (its order plays 0.6x to 1.9x of it, the most when W is twice F and B).
  if (splits_backward(p.schedule) && w.max_stage > 0) {
    const double fwd = w.fwd, wgrad = w.wgrad, input_grad = w.max_stage - w.fwd - w.wgrad;
    const double zb = std::max(fwd, fwd + input_grad - wgrad) / (fwd + input_grad + wgrad);
    bubble *= zb;
  }
  return bubble;
}

StepTime estimate_time(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const Efficiency& e) {
  return estimate_time(m, c, j, p, step_time_inputs(m, c, j, p, e), e);
}

StepTime estimate_time(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& plan, const StepTimeInputs& in,
                       const Efficiency& e) {
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);  // DualPipe: its rank-equivalent DualPipeV plan
  StepTime st;
  const double md = in.microbatches;
  // full_k recomputes the first k layers of each model chunk: its stages depend on vpp.
  const CriticalStage w = p.recompute == Recompute::full_k ? critical_stage(m, p, in.kinds, in.head, in.frozen, in.layer_kinds == 1)
                                                           : in.uniform[static_cast<int>(p.recompute)];
  st.compute = md * w.compute;
  st.recompute = md * w.recompute;
  st.tp_comm = md * w.tp;
  st.cp_comm = md * w.cp;
  st.ep_comm = md * w.ep;
  // DualPipeV pairs a forward chunk of one micro-batch with a backward chunk of another in
  // its main phase (step 4 of the order: m - 2pp + 1 pairs of pairs on rank 0), and each
  // one's EP all-to-all runs under the other's compute (DeepSeek-V3 report, Sec. 3.2.1):
  // that share of the exposed EP time is hidden, as far as the compute covers it.
  if (p.pp > 1 && p.schedule == Schedule::dualpipev && md > 0) {
    const double paired = std::max(0.0, md - 2.0 * p.pp + 1) / md;
    st.ep_comm -= std::min(st.ep_comm * paired, st.compute * paired);
  }
  st.bubble = pipeline_bubble(p, w);

  // ---- PP point-to-point: one send forward and one backward per micro-batch per chunk
  // hop on the critical path.
  st.pp_comm = pp_exposed_time(p, md, in.pp_hop, w, e);
  // DualPipe hands a micro-batch from rank pp/2-1 to rank pp/2 where DualPipeV's V turns on
  // one rank (dualpipe.py is_middle_rank: _send_forward / _send_backward across the middle):
  // one hop more each way on the fill and drain.
  if (plan.schedule == Schedule::dualpipe) st.pp_comm += 2 * in.pp_hop;

  // ---- DP / ZeRO traffic on the worst stage's rank
  DpStep dp;
  if (p.zero >= 0 && p.zero < 4) {
    dp = in.dp[p.zero];  // cached without parameter offload (step_time_inputs), which adds to the gathers only
    if (p.zero == 3 && p.offload_params) with_param_fetch(&dp, c, e);
  } else {
    dp = dp_step(c, j, p, e, in.trainable, in.all_params_rank, in.layers0);
  }
  st.dp_comm = dp_exposed_time(dp, md, w.fwd, w.bwd, e);

  // ---- optimizer step on the first stage's rank
  const OptimizerTime opt = optimizer_time(c, j, p, e, in.trainable);
  st.optimizer = opt.optimizer;
  st.offload = opt.offload;
  // ---- activation offload: each micro-batch sends its first k layers' activations to the
  // host during the stage's forward and fetches them during its backward, over the host
  // link (PCIe, or NVLink-C2C on Grace-Blackwell) in each direction; what the stage's own
  // compute does not cover is exposed.
  if (const int k = std::min(p.activation_offload_layers, in.layers0); k > 0) {
    const LayerRecompute policy = layer_recompute(p, 0, in.layers0);  // the stage's first (offloaded) layer
    const double transfer = k * in.layer_activation_bytes[static_cast<int>(policy)] / (c.host_bandwidth * e.network);
    st.offload += md * (std::max(0.0, transfer - w.fwd) + std::max(0.0, transfer - w.bwd));
  }

  st.total = st.compute + st.recompute + st.tp_comm + st.pp_comm + st.dp_comm + st.cp_comm + st.ep_comm + st.offload + st.bubble +
             st.optimizer;
  st.tokens_per_s = in.step_tokens / st.total;
  st.model_flops = in.model_flops;
  const double recompute_share = st.compute > 0 ? st.recompute / st.compute : 0;
  st.hardware_flops = st.model_flops * (1 + recompute_share);
  const double gpus = static_cast<double>(p.world_size());
  st.mfu = st.model_flops / (st.total * gpus * in.peak);
  st.hfu = st.hardware_flops / (st.total * gpus * in.peak);
  return st;
}

}  // namespace llmplan
