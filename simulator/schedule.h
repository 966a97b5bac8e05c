// Pipeline schedules of one training step: for every pipeline stage, the order in which
// it runs the forward and backward passes of its micro-batches (and model chunks, for
// interleaved 1F1B and the V schedules). The order is the whole schedule; the dependencies
// between stages (a forward needs the previous virtual stage's output, a backward the next
// virtual stage's input gradient, a weight gradient its own input gradient) are fixed by
// the model and added by the simulator.
//
// Virtual stages: with v chunks per rank, chunk c of stage s is virtual stage c*pp + s
// (Megatron's interleaved layout), so a micro-batch visits stage 0..pp-1 v times; under a
// V schedule (ZB-V, DualPipeV) chunk 0 is virtual stage s and chunk 1 is 2pp-1-s
// (planner/cost/plan_check.h chunk_virtual_stage), so rank 0 holds the first and the last.
//
// Split backward (ZB-H1, ZB-V, DualPipeV; Qi et al. 2024, "Zero Bubble Pipeline
// Parallelism"): a backward runs as its input-gradient part (B, what the previous stage
// waits for) and its weight-gradient part (W), which the schedule defers into what would
// be bubble. The orders are PyTorch's torch.distributed.pipelining ones (pytorch/pytorch
// 00722e648b74, torch/distributed/pipelining/schedules.py).
//
// Pure functions. Thread-safety: pure.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/spec/specs.h"

namespace llmplan {

// What a pass computes: a forward, a whole backward, or a split backward's two parts.
enum class PassKind : uint8_t {
  forward,
  backward,     // input and weight gradients together
  input_grad,   // B of a split backward: the input gradient (with any recompute and in-layer communication)
  weight_grad,  // W of a split backward: the weight-gradient GEMMs, after its B
};
const char* to_string(PassKind k);  // "F", "B", "I", "W" (PyTorch's action letters)

struct PipelineOp {
  PassKind kind = PassKind::forward;  // of one chunk for one micro-batch
  int microbatch = 0;                 // 0..m-1
  int chunk = 0;                      // model chunk on this stage, 0..v-1
  bool forward() const { return kind == PassKind::forward; }
  bool frees_activations() const { return kind == PassKind::backward || kind == PassKind::weight_grad; }
};
using StageProgram = std::vector<PipelineOp>;

// The schedule a plan really runs: pp == 1 runs forward then backward of each
// micro-batch in turn whatever the plan says (no pipeline); vpp > 1 is interleaved unless
// the plan asks for GPipe or a split-backward schedule (as planner/cost/memory_model.cpp's
// inflight_microbatches reads it).
enum class EffectiveSchedule { sequential, gpipe, one_f_one_b, interleaved, zb_h1, zbv, dualpipev };
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
//  - ZB-H1 (_get_1f1b_rank_ops with enable_zero_bubble, one stage per rank): 1F1B's
//    warm-up, each B followed by the W deferred by `stage` B's, the rest at the end.
//  - ZB-V (ScheduleZBVZeroBubble._calculate_single_rank_operations), vpp 2: the V's
//    warm-up of 2(pp-s)-1 chunk-0 forwards, F/B/W triples per chunk, a cool-down of B's
//    whose W's come last; micro-batches padded to 2pp-1 and the padding dropped.
//  - DualPipeV (ScheduleDualPipeV._calculate_single_rank_operations), vpp 2, m >= 2pp:
//    the steps of DeepSeek's DualPipeV; its overlapped F&B pairs run here as the forward,
//    then the whole backward (the compute of the pair is the same; the simulator does not
//    overlap the pair's communication).
// REQUIRES: pp >= 1, vpp >= 1, m >= 1; interleaved: m % pp == 0 (check_plan's rule);
// zb_h1: vpp == 1; zbv, dualpipev: vpp == 2; dualpipev: m >= 2pp.
std::vector<StageProgram> pipeline_schedule(EffectiveSchedule s, int pp, int vpp, int64_t m);

// Forwards stage `stage` runs before its first backward (of either kind).
int64_t warmup_forwards(EffectiveSchedule s, int pp, int vpp, int64_t m, int stage);

// The most (micro-batch, chunk) activation sets `program` holds at once, a forward adding
// one and its backward (a split backward's W) removing it; `per_chunk` (size v) receives
// how many of each chunk are held at the first moment the maximum is reached.
// Timing-independent.
int64_t max_inflight_chunks(const StageProgram& program, int vpp, std::vector<int64_t>* per_chunk = nullptr);
// The most B's `program` has run whose W has not run yet (0 without a split backward).
int64_t max_pending_weight_grads(const StageProgram& program);

}  // namespace llmplan
