// Pipeline schedules of one training step: for every pipeline stage, the order in which
// it runs the forward and backward passes of its micro-batches (and model chunks, for
// interleaved 1F1B). The order is the whole schedule; the dependencies between stages (a
// forward needs the previous virtual stage's output, a backward the next virtual stage's
// input gradient) are fixed by the model and added by the simulator.
//
// Virtual stages: with v chunks per rank, chunk c of stage s is virtual stage c*pp + s
// (Megatron's interleaved layout), so a micro-batch visits stage 0..pp-1 v times.
//
// Pure functions. Thread-safety: pure.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/spec/specs.h"

namespace llmplan {

struct PipelineOp {
  bool forward = true;  // forward pass (else backward) of one chunk for one micro-batch
  int microbatch = 0;   // 0..m-1
  int chunk = 0;        // model chunk on this stage, 0..v-1
};
using StageProgram = std::vector<PipelineOp>;

// The schedule a plan really runs: pp == 1 runs forward then backward of each
// micro-batch in turn whatever the plan says (no pipeline); vpp > 1 is interleaved unless
// the plan asks for GPipe (as planner/cost/memory_model.cpp's inflight_microbatches reads it).
enum class EffectiveSchedule { sequential, gpipe, one_f_one_b, interleaved };
EffectiveSchedule effective_schedule(const ParallelPlan& p);
const char* to_string(EffectiveSchedule s);

// Per-stage programs of one step with m micro-batches.
//  - sequential: F0 B0 F1 B1 ...
//  - GPipe: every forward (chunk-major: chunk 0 of every micro-batch, then chunk 1, ...),
//    then every backward in the mirrored order.
//  - 1F1B (Narayanan et al. 2021, PipeDream-Flush): min(pp - s - 1, m) warm-up forwards,
//    then one forward and one backward alternately, then the remaining backwards.
//  - interleaved 1F1B (Megatron-LM forward_backward_pipelining_with_interleaving):
//    micro-batches in groups of pp per chunk; warm-up min(2(pp - s - 1) + (v - 1) pp,
//    m v) forwards, then 1F1B over chunks; backward visits chunks in reverse order.
// REQUIRES: pp >= 1, vpp >= 1, m >= 1; interleaved: m % pp == 0 (check_plan's rule).
std::vector<StageProgram> pipeline_schedule(EffectiveSchedule s, int pp, int vpp, int64_t m);

// Forwards stage `stage` runs before its first backward.
int64_t warmup_forwards(EffectiveSchedule s, int pp, int vpp, int64_t m, int stage);

// The most (micro-batch, chunk) activation sets `program` holds at once, a forward adding
// one and its backward removing it; `per_chunk` (size v) receives how many of each chunk
// are held at the first moment the maximum is reached. Timing-independent.
int64_t max_inflight_chunks(const StageProgram& program, int vpp, std::vector<int64_t>* per_chunk = nullptr);

}  // namespace llmplan
