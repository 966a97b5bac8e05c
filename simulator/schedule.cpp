#include "simulator/schedule.h"

#include <algorithm>

namespace llmplan {

EffectiveSchedule effective_schedule(const ParallelPlan& p) {
  if (p.pp == 1) return EffectiveSchedule::sequential;
  if (p.schedule == Schedule::gpipe) return EffectiveSchedule::gpipe;
  if (p.vpp > 1 || p.schedule == Schedule::interleaved) return EffectiveSchedule::interleaved;
  return EffectiveSchedule::one_f_one_b;
}

const char* to_string(EffectiveSchedule s) {
  switch (s) {
    case EffectiveSchedule::sequential: return "sequential";
    case EffectiveSchedule::gpipe: return "gpipe";
    case EffectiveSchedule::one_f_one_b: return "1f1b";
    case EffectiveSchedule::interleaved: return "interleaved";
  }
  return "?";
}

int64_t warmup_forwards(EffectiveSchedule s, int pp, int vpp, int64_t m, int stage) {
  const int64_t total = m * vpp;
  switch (s) {
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
  return {forward, mb, chunk};
}

// Forward / backward k of a GPipe or 1F1B stage with v chunks, chunk-major (v == 1 for
// 1F1B; GPipe with v > 1 sweeps every micro-batch through chunk 0, then chunk 1, ...).
PipelineOp chunk_major_op(int64_t k, bool forward, int64_t m, int vpp) {
  int chunk = static_cast<int>(k / m);
  if (!forward) chunk = vpp - 1 - chunk;
  return {forward, static_cast<int>(k % m), chunk};
}

}  // namespace

std::vector<StageProgram> pipeline_schedule(EffectiveSchedule s, int pp, int vpp, int64_t m) {
  std::vector<StageProgram> out(pp);
  const int64_t total = m * vpp;
  for (int stage = 0; stage < pp; ++stage) {
    StageProgram& prog = out[stage];
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
    now += op.forward ? 1 : -1;
    held[op.chunk] += op.forward ? 1 : -1;
    if (now > best) {
      best = now;
      if (per_chunk) *per_chunk = held;
    }
  }
  return best;
}

}  // namespace llmplan
