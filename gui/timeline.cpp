#include "gui/timeline.h"

#include <algorithm>
#include <cstdio>

#include "planner/memory_model.h"
#include "planner/plan_check.h"
#include "planner/recipe.h"

namespace llmplan::gui {

const char* to_string(SliceKind k) {
  switch (k) {
    case SliceKind::forward: return "forward";
    case SliceKind::backward: return "backward";
    case SliceKind::recompute: return "recompute";
    case SliceKind::communication: return "communication";
    case SliceKind::optimizer: return "optimizer";
    case SliceKind::idle: return "idle (bubble)";
  }
  return "?";
}

// ============================================================================
// ADAPTER: analytic schedule from the planner's time model. Everything below this line
// is what the simulator's events replace (see timeline.h).
// ============================================================================
namespace {

constexpr int kMaxMicrobatches = 512;  // more are not drawn (the steady state repeats)
constexpr double kEps = 1e-12;

// Work of one virtual stage (model chunk) for one micro-batch, s.
struct ChunkCost {
  double fwd = 0, bwd = 0, recompute = 0;
  double comm_fwd = 0, comm_bwd = 0;  // exposed TP/CP/EP collectives
};

struct Op {
  bool forward;
  int chunk;
  int mb;
};

// The order in which pipeline stage `stage` runs its passes: GPipe (all forwards, then
// all backwards), 1F1B (warm-up forwards, then one forward one backward, then cool-down
// backwards), or Megatron's interleaved 1F1B over `v` chunks (REQUIRES m % pp == 0).
std::vector<Op> stage_order(Schedule schedule, int pp, int v, int m, int stage) {
  std::vector<Op> ops;
  if (schedule == Schedule::gpipe) {
    for (int mb = 0; mb < m; ++mb) ops.push_back({true, 0, mb});
    for (int mb = 0; mb < m; ++mb) ops.push_back({false, 0, mb});
    return ops;
  }
  const int total = m * v;
  // Megatron schedules.py: the k-th forward (backward) runs chunk (k / pp) % v (reversed
  // for backward) of micro-batch (k / (pp * v)) * pp + k % pp.
  auto op = [&](int k, bool forward) {
    const int chunk = (k / pp) % v;
    return Op{forward, forward ? chunk : v - 1 - chunk, (k / (pp * v)) * pp + k % pp};
  };
  const int warmup = std::min(total, v == 1 ? pp - stage - 1 : (pp - stage - 1) * 2 + (v - 1) * pp);
  for (int k = 0; k < warmup; ++k) ops.push_back(op(k, true));
  for (int i = 0; i < total - warmup; ++i) {
    ops.push_back(op(warmup + i, true));
    ops.push_back(op(i, false));
  }
  for (int i = total - warmup; i < total; ++i) ops.push_back(op(i, false));
  return ops;
}

std::string op_name(const char* what, const Op& o, int v) {
  char buf[96];
  if (v > 1) std::snprintf(buf, sizeof buf, "%s mb%d chunk%d", what, o.mb, o.chunk);
  else std::snprintf(buf, sizeof buf, "%s mb%d", what, o.mb);
  return buf;
}

}  // namespace

Timeline analytic_timeline(const PlanFile& f, const Efficiency& e) {
  const ModelSpec& m = f.model;
  const ClusterSpec& c = f.cluster;
  const TrainingJob& j = f.job;
  const ParallelPlan& p = f.plan;
  Timeline tl;
  tl.stages = p.pp;
  tl.source = "analytic schedule from the planner's time model (the step simulator will replace it)";

  const int v = p.schedule == Schedule::interleaved ? std::max(1, p.vpp) : 1;
  const int n_virtual = p.pp * v;
  const int64_t m_all = microbatches_per_step(j, p);
  int mbs = static_cast<int>(std::min<int64_t>(m_all, kMaxMicrobatches));
  if (v > 1) mbs = std::max(p.pp, mbs / p.pp * p.pp);
  if (mbs < m_all) {
    tl.note = "showing the first " + std::to_string(mbs) + " of " + std::to_string(m_all) +
              " micro-batches (the steady state repeats), then the DP sync and optimizer step";
  }
  if (p.vpp > 1 && p.schedule != Schedule::interleaved) tl.note += (tl.note.empty() ? "" : "; ") + std::string("vpp ignored by the schedule");

  // ---- per-chunk costs from the time model's per-layer times (as estimate_time sums them)
  std::vector<ChunkCost> cost(n_virtual);
  for (int vs = 0; vs < n_virtual; ++vs) {
    const int first = first_layer_of_stage(m.layers, n_virtual, vs);
    const int n = layers_in_stage(m.layers, n_virtual, vs);
    const int chunk = vs / p.pp;
    for (int i = 0; i < n; ++i) {
      const LayerTimes lt = layer_times(m, c, j, p, layer_context(m, j, p, first + i), layer_recompute(p, chunk * n + i), e);
      cost[vs].fwd += lt.forward;
      cost[vs].bwd += lt.backward;
      cost[vs].recompute += lt.recompute;
      const double comm = lt.tp_comm + lt.cp_comm_exposed + lt.ep_comm;
      cost[vs].comm_fwd += comm / 2;
      cost[vs].comm_bwd += comm / 2;
    }
  }
  // LM head + cross-entropy on the last virtual stage (estimate_time's formula).
  const LayerContext top = layer_context(m, j, p, m.layers - 1);
  const double peak = c.gpu.peak(compute_dtype(j, c.gpu));
  const double bw = c.gpu.memory_bandwidth;
  const double tokens_mb = static_cast<double>(p.micro_batch) * (j.seq_len / p.cp);
  const double vocab_rank = static_cast<double>(m.vocab) / p.tp;
  const double head_fwd = gemm_time(tokens_mb, vocab_rank, static_cast<double>(m.hidden), top.act_bytes, peak, bw, e) +
                          3 * tokens_mb * vocab_rank * 4 / (bw * e.memory);
  cost[n_virtual - 1].fwd += head_fwd;
  cost[n_virtual - 1].bwd += head_fwd * (j.mode != TrainMode::lora ? 2 : 1);
  // PP point-to-point: one activation (or its gradient) per micro-batch per hop.
  const double p2p = p.pp > 1 ? p2p_time(tokens_mb * m.hidden / (p.sp ? p.tp : 1) * top.act_bytes, group_link(c, p, Group::pp), e) : 0;

  // ---- play the schedule
  std::vector<std::vector<Op>> order(p.pp);
  for (int s = 0; s < p.pp; ++s) order[s] = stage_order(p.schedule, p.pp, v, mbs, s);
  // When the input of (virtual stage, micro-batch) is ready: activations for forward,
  // output gradients for backward; -1 = not yet.
  std::vector<double> fwd_ready(static_cast<size_t>(n_virtual) * mbs, -1), bwd_ready(static_cast<size_t>(n_virtual) * mbs, -1);
  for (int mb = 0; mb < mbs; ++mb) fwd_ready[mb] = 0;  // virtual stage 0 reads the data
  std::vector<size_t> next(p.pp, 0);
  std::vector<double> compute_free(p.pp, 0), comm_free(p.pp, 0);
  auto add = [&](int s, const char* stream, SliceKind k, std::string name, double t0, double t1) {
    if (t1 - t0 > kEps) tl.slices.push_back({s, stream, k, std::move(name), t0, t1});
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p.pp; ++s) {
      while (next[s] < order[s].size()) {
        const Op& o = order[s][next[s]];
        const int vs = o.chunk * p.pp + s;
        const size_t at = static_cast<size_t>(vs) * mbs + o.mb;
        const double ready = o.forward ? fwd_ready[at] : bwd_ready[at];
        if (ready < 0) break;  // waits for another stage
        double t = std::max(compute_free[s], ready);
        if (t > compute_free[s] + kEps)
          add(s, "compute", SliceKind::idle, "idle: waiting for " + op_name(o.forward ? "activations" : "gradients", o, v), compute_free[s], t);
        const ChunkCost& cc = cost[vs];
        if (o.forward) {
          add(s, "compute", SliceKind::forward, op_name("forward", o, v), t, t + cc.fwd);
          t += cc.fwd;
        } else {
          add(s, "compute", SliceKind::recompute, op_name("recompute", o, v), t, t + cc.recompute);
          t += cc.recompute;
          add(s, "compute", SliceKind::backward, op_name("backward", o, v), t, t + cc.bwd);
          t += cc.bwd;
        }
        // Exposed in-layer collectives block the compute stream.
        const double comm = o.forward ? cc.comm_fwd : cc.comm_bwd;
        if (comm > kEps) {
          const double t0 = std::max(t, comm_free[s]);
          add(s, "comm", SliceKind::communication, op_name("TP/CP/EP collectives", o, v), t0, t0 + comm);
          t = t0 + comm;
          comm_free[s] = t;
        }
        compute_free[s] = t;
        // Hand the result to the next (forward) or previous (backward) virtual stage.
        if (o.forward && vs == n_virtual - 1) {
          bwd_ready[at] = t;  // the loss: backward starts here
        } else {
          const int to_vs = o.forward ? vs + 1 : vs - 1;
          if (to_vs >= 0) {
            const double t0 = std::max(t, comm_free[s]);
            const int to_stage = to_vs % p.pp;
            add(s, "comm", SliceKind::communication,
                op_name(o.forward ? "send activations" : "send gradients", o, v) + " to stage " + std::to_string(to_stage), t0, t0 + p2p);
            comm_free[s] = t0 + p2p;
            (o.forward ? fwd_ready : bwd_ready)[static_cast<size_t>(to_vs) * mbs + o.mb] = t0 + p2p;
          }
        }
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p.pp; ++s)
    if (next[s] < order[s].size()) tl.note += (tl.note.empty() ? "" : "; ") + std::string("schedule stalled on stage ") + std::to_string(s);

  // ---- end of the step: exposed DP/ZeRO sync, then the optimizer (estimate_time's numbers)
  const StepTime st = estimate_time(m, c, j, p, e);
  for (int s = 0; s < p.pp; ++s) {
    double t = std::max(compute_free[s], comm_free[s]);
    add(s, "comm", SliceKind::communication, p.zero == 3 ? "ZeRO-3 gather/reduce-scatter (exposed)" : "DP gradient sync (exposed)", t,
        t + st.dp_comm);
    t += st.dp_comm;
    const double opt = st.optimizer + st.offload;
    add(s, "compute", SliceKind::optimizer, p.offload_optimizer ? "optimizer step (offloaded to host)" : "optimizer step", t, t + opt);
  }
  for (const TimelineSlice& x : tl.slices) tl.end_s = std::max(tl.end_s, x.end_s);
  return tl;
}

}  // namespace llmplan::gui
