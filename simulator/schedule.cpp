#include "simulator/schedule.h"

#include <algorithm>
#include <deque>

namespace llmplan {

EffectiveSchedule effective_schedule(const ParallelPlan& p) {
  if (p.pp == 1) return EffectiveSchedule::sequential;
  if (p.schedule == Schedule::gpipe) return EffectiveSchedule::gpipe;
  if (p.schedule == Schedule::zb_h1) return EffectiveSchedule::zb_h1;
  if (p.schedule == Schedule::zbv) return EffectiveSchedule::zbv;
  if (p.schedule == Schedule::dualpipev) return EffectiveSchedule::dualpipev;
  if (p.vpp > 1 || p.schedule == Schedule::interleaved) return EffectiveSchedule::interleaved;
  return EffectiveSchedule::one_f_one_b;
}

const char* to_string(EffectiveSchedule s) {
  switch (s) {
    case EffectiveSchedule::sequential: return "sequential";
    case EffectiveSchedule::gpipe: return "gpipe";
    case EffectiveSchedule::one_f_one_b: return "1f1b";
    case EffectiveSchedule::interleaved: return "interleaved";
    case EffectiveSchedule::zb_h1: return "zb-h1";
    case EffectiveSchedule::zbv: return "zbv";
    case EffectiveSchedule::dualpipev: return "dualpipev";
  }
  return "?";
}

const char* to_string(PassKind k) {
  switch (k) {
    case PassKind::forward: return "F";
    case PassKind::backward: return "B";
    case PassKind::input_grad: return "I";
    case PassKind::weight_grad: return "W";
  }
  return "?";
}

namespace {
StageProgram split_backward_program(EffectiveSchedule s, int pp, int64_t m, int stage);
}  // namespace

int64_t warmup_forwards(EffectiveSchedule s, int pp, int vpp, int64_t m, int stage) {
  const int64_t total = m * vpp;
  switch (s) {
    case EffectiveSchedule::zb_h1:
    case EffectiveSchedule::zbv:
    case EffectiveSchedule::dualpipev: {
      int64_t n = 0;
      for (const PipelineOp& o : split_backward_program(s, pp, m, stage)) {
        if (!o.forward()) break;
        ++n;
      }
      return n;
    }
    case EffectiveSchedule::sequential: return std::min<int64_t>(1, total);
    case EffectiveSchedule::gpipe: return total;
    case EffectiveSchedule::one_f_one_b: return std::min<int64_t>(pp - stage - 1, m);
    case EffectiveSchedule::interleaved:
      return std::min<int64_t>(2 * static_cast<int64_t>(pp - stage - 1) + static_cast<int64_t>(vpp - 1) * pp, total);
  }
  return 0;
}

namespace {

// Megatron's k-th forward (or backward) of an interleaved stage: micro-batches in
// groups of pp per chunk, chunks ascending for forwards and descending for backwards.
PipelineOp interleaved_op(int64_t k, bool forward, int pp, int vpp) {
  const int64_t group = static_cast<int64_t>(pp) * vpp;
  const int64_t in_group = k % group;
  int chunk = static_cast<int>(in_group / pp);
  if (!forward) chunk = vpp - 1 - chunk;
  const int mb = static_cast<int>((k / group) * pp + k % pp);
  return {forward ? PassKind::forward : PassKind::backward, mb, chunk};
}

// Forward / backward k of a GPipe or 1F1B stage with v chunks, chunk-major (v == 1 for
// 1F1B; GPipe with v > 1 sweeps every micro-batch through chunk 0, then chunk 1, ...).
PipelineOp chunk_major_op(int64_t k, bool forward, int64_t m, int vpp) {
  int chunk = static_cast<int>(k / m);
  if (!forward) chunk = vpp - 1 - chunk;
  return {forward ? PassKind::forward : PassKind::backward, static_cast<int>(k % m), chunk};
}

// ZB-H1: _get_1f1b_rank_ops(n_local_stages=1, enable_zero_bubble=True,
// num_1f1b_microbatches=stage) with 1F1B's warm-up of min(pp-1-stage, m) forwards: after
// each B the W of the B `stage` places earlier, the deferred W's at the end.
StageProgram zb_h1_program(int pp, int64_t m, int stage) {
  StageProgram out;
  const int64_t warm = std::min<int64_t>(pp - 1 - stage, m), steady = m - warm;
  int64_t weight = 0;
  for (int64_t op = 0; op < warm + steady + warm; ++op) {
    if (op < warm + steady) out.push_back({PassKind::forward, static_cast<int>(op), 0});
    if (op < warm) continue;
    const int64_t b = op - warm;
    out.push_back({PassKind::input_grad, static_cast<int>(b), 0});
    if (b >= stage) out.push_back({PassKind::weight_grad, static_cast<int>(weight++), 0});
  }
  while (weight < m) out.push_back({PassKind::weight_grad, static_cast<int>(weight++), 0});
  return out;
}

// ZB-V: ScheduleZBVZeroBubble._calculate_single_rank_operations. Chunk 0 is virtual stage
// `stage`, chunk 1 is 2pp-1-stage. The order is built for max(2pp-1, m) micro-batches and
// the padding dropped, as PyTorch does.
StageProgram zbv_program(int pp, int64_t m, int stage) {
  StageProgram all;
  const int64_t n = std::max<int64_t>(2 * pp - 1, m);
  int64_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  auto add = [&](PassKind k, int chunk, int64_t& counter) { all.push_back({k, static_cast<int>(counter++), chunk}); };
  auto add_at = [&](PassKind k, int chunk, int64_t mb) { all.push_back({k, static_cast<int>(mb), chunk}); };
  for (int k = 0; k < 2 * (pp - stage) - 1; ++k) add(PassKind::forward, 0, f0);
  for (int k = 0; k < stage; ++k) add(PassKind::forward, 1, f1), add(PassKind::forward, 0, f0);
  for (int k = 0; k < pp - stage; ++k) {
    add(PassKind::forward, 1, f1);
    add_at(PassKind::input_grad, 1, b1);
    add(PassKind::weight_grad, 1, b1);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(PassKind::forward, 0, f0);
    add_at(PassKind::input_grad, 0, b0);
    add(PassKind::weight_grad, 0, b0);
    add(PassKind::forward, 1, f1);
    add_at(PassKind::input_grad, 1, b1);
    add(PassKind::weight_grad, 1, b1);
  }
  int64_t w0 = b0, w1 = b1;
  for (int k = 0; k < stage; ++k) add(PassKind::input_grad, 0, b0), add(PassKind::input_grad, 1, b1);
  for (int k = 0; k < pp - stage; ++k) add(PassKind::input_grad, 0, b0), add(PassKind::weight_grad, 0, w0);
  while (w1 < b1) add(PassKind::weight_grad, 1, w1);
  while (w0 < b0) add(PassKind::weight_grad, 0, w0);
  StageProgram out;
  for (const PipelineOp& o : all)
    if (o.microbatch < m) out.push_back(o);
  return out;
}

// DualPipeV: ScheduleDualPipeV._calculate_single_rank_operations (m >= 2pp), its eight
// steps. Step 4's overlapped F&B pairs (a chunk-0 forward with a chunk-1 backward and the
// reverse) are listed forward first.
StageProgram dualpipev_program(int pp, int64_t m, int stage) {
  StageProgram out;
  int64_t next[2][2] = {{0, 0}, {0, 0}};  // [chunk][forward 0 / backward 1]: next micro-batch
  std::deque<PipelineOp> weights;          // B's waiting for their W
  auto add = [&](int chunk, PassKind k) {
    const int64_t mb = next[chunk][k == PassKind::forward ? 0 : 1]++;
    out.push_back({k, static_cast<int>(mb), chunk});
    if (k == PassKind::input_grad) weights.push_back({PassKind::weight_grad, static_cast<int>(mb), chunk});
  };
  auto add_weight = [&] {
    if (weights.empty()) return;
    out.push_back(weights.front());
    weights.pop_front();
  };
  const int r = stage;
  for (int k = 0; k < (pp - r - 1) * 2; ++k) add(0, PassKind::forward);                       // step 1
  for (int k = 0; k < r + 1; ++k) add(0, PassKind::forward), add(1, PassKind::forward);       // step 2
  for (int k = 0; k < pp - r - 1; ++k) add(1, PassKind::input_grad), add_weight(), add(1, PassKind::forward);  // step 3
  for (int64_t k = 0; k < m - 2 * pp + r + 1; ++k)                                            // step 4: F&B pairs
    add(0, PassKind::forward), add(1, PassKind::backward), add(1, PassKind::forward), add(0, PassKind::backward);
  for (int k = 0; k < pp - r - 1; ++k) add(1, PassKind::backward), add(1, PassKind::forward), add(0, PassKind::backward);  // step 5
  bool split = false;  // steps 6-8: from the middle of step 6 on, backwards split, their W's deferred
  const int step6 = r + 1;
  for (int k = 0; k < step6; ++k) {
    if (k == step6 / 2 && r % 2 == 1) split = true;
    add(1, split ? PassKind::input_grad : PassKind::backward);
    if (k == step6 / 2 && r % 2 == 0) split = true;
    add(0, split ? PassKind::input_grad : PassKind::backward);
  }
  for (int k = 0; k < pp - r - 1; ++k) add_weight(), add(0, split ? PassKind::input_grad : PassKind::backward);  // step 7
  for (int k = 0; k < r + 1; ++k) add_weight();  // step 8
  return out;
}

StageProgram split_backward_program(EffectiveSchedule s, int pp, int64_t m, int stage) {
  if (s == EffectiveSchedule::zb_h1) return zb_h1_program(pp, m, stage);
  if (s == EffectiveSchedule::zbv) return zbv_program(pp, m, stage);
  return dualpipev_program(pp, m, stage);
}

}  // namespace

std::vector<StageProgram> pipeline_schedule(EffectiveSchedule s, int pp, int vpp, int64_t m) {
  std::vector<StageProgram> out(pp);
  const int64_t total = m * vpp;
  for (int stage = 0; stage < pp; ++stage) {
    StageProgram& prog = out[stage];
    if (s == EffectiveSchedule::zb_h1 || s == EffectiveSchedule::zbv || s == EffectiveSchedule::dualpipev) {
      prog = split_backward_program(s, pp, m, stage);
      continue;
    }
    prog.reserve(2 * total);
    auto op = [&](int64_t k, bool fwd) {
      return s == EffectiveSchedule::interleaved ? interleaved_op(k, fwd, pp, vpp) : chunk_major_op(k, fwd, m, vpp);
    };
    if (s == EffectiveSchedule::sequential) {
      for (int64_t k = 0; k < total; ++k) {
        prog.push_back(op(k, true));
        prog.push_back(op(k, false));
      }
      continue;
    }
    const int64_t warmup = warmup_forwards(s, pp, vpp, m, stage);
    for (int64_t k = 0; k < warmup; ++k) prog.push_back(op(k, true));
    for (int64_t k = 0; k < total - warmup; ++k) {  // steady state: one forward, one backward
      prog.push_back(op(warmup + k, true));
      prog.push_back(op(k, false));
    }
    for (int64_t k = total - warmup; k < total; ++k) prog.push_back(op(k, false));  // drain
  }
  return out;
}

int64_t max_inflight_chunks(const StageProgram& program, int vpp, std::vector<int64_t>* per_chunk) {
  std::vector<int64_t> held(vpp, 0);
  int64_t now = 0, best = 0;
  if (per_chunk) per_chunk->assign(vpp, 0);
  for (const PipelineOp& op : program) {
    const int change = op.forward() ? 1 : op.frees_activations() ? -1 : 0;
    now += change;
    held[op.chunk] += change;
    if (now > best) {
      best = now;
      if (per_chunk) *per_chunk = held;
    }
  }
  return best;
}

int64_t max_pending_weight_grads(const StageProgram& program) {
  int64_t now = 0, best = 0;
  for (const PipelineOp& op : program) {
    if (op.kind == PassKind::input_grad) best = std::max(best, ++now);
    if (op.kind == PassKind::weight_grad) --now;
  }
  return best;
}

}  // namespace llmplan
