// Memory over the step against the analytic memory model: the simulated peak of every
// stage must equal estimate_stage_memory(...).total. Each item is tracked over time
// (activations of the micro-batch-chunks in flight, backward working set, logits,
// buffers), so a disagreement here means the analytic model's in-flight accounting and
// what the schedule really holds differ: it fails, it is not a tolerance to widen. The
// 1-byte tolerance absorbs only the order of floating-point sums of ~1e10-byte values
// (one ulp there is ~1e-6 byte); the smallest real item (a dropout mask) is > 1 MiB.
//
// Known disagreements with planner/memory_model.cpp (planner commit 43540b0); the tests
// below fail until the planner (or, if the planner is right, the simulator) changes:
//  - GPipe, last stage: the logits + fp32 softmax (b s V/t (2 + 4) bytes) are saved from
//    each micro-batch's forward to its backward, and GPipe runs every forward first, so
//    the last stage holds m of them; the planner counts one. Llama-2 7B tp2 pp4 m16 s4096:
//    16 x 393.2 MB = 6.29 GB vs 0.39 GB (+5.90 GB, +6.19 GB with fragmentation).
//  - Interleaved, last stage: the final-norm and LM-head inputs (2 b s h/t_sp x 2 bytes)
//    belong to the last chunk only, whose forward is followed at once by its backward,
//    so one set is held; the planner multiplies them by the stage's (w + 1)/v in-flight
//    micro-batches (2.5 for pp4 v2). Llama-2 7B tp2 sp pp4 v2: -50.3 MB (-52.8 MB total).
//  - Interleaved, first stage with dropout: the embedding dropout mask (b s h/t_sp bytes)
//    belongs to chunk 0, of which the stage holds 2 pp sets at its peak (pp4 v2 m32:
//    chunk-0 micro-batches 0-7 with chunk-1 1-3), not (w + 1)/v = 5.5. GPT-3 1.3B tp2 sp
//    pp4 v2: +5.24 MB (+5.5 MB total). GPT-3 175B tp8 sp pp16 v2 m64: 32 masks, not 23.5,
//    +28.1 MB on stage 0 (and -99.1 MB on stage 15 from the item above).
//  - Interleaved with full_k: layer_recompute's "first k layers of the stage" all fall in
//    chunk 0, so chunks keep different activations and the full-recompute working set
//    only appears during chunk 0's backwards; the planner uses the stage average times
//    (w + 1)/v and the stage's largest working set at every backward. Llama-2 7B tp2 pp4
//    v2 k2 m32: the planner is higher by 0.80, 0.27, 0.55 and 1.13 GB on stages 0-3.
#include <gtest/gtest.h>

#include <string>

#include "planner/memory_model.h"
#include "sim_fixtures.h"
#include "simulator/step_simulator.h"

namespace llmplan {
namespace {

using testing::dgx_a100;

struct MemCase {
  std::string name;
  ModelSpec model;
  int nodes;
  int64_t seq, global_batch;
  ParallelPlan plan;
};

ParallelPlan mk(int dp, int tp, int pp, int vpp, Schedule sched, Recompute rc, int zero, int micro, int64_t gb) {
  ParallelPlan p = testing::plan(dp, tp, pp, vpp, sched, micro, gb);
  p.recompute = rc;
  p.zero = zero;
  return p;
}

void expect_peaks_equal(const MemCase& mc) {
  SCOPED_TRACE(mc.name);
  const ClusterSpec c = dgx_a100(mc.nodes);
  const TrainingJob j = testing::job(mc.seq, mc.global_batch);
  SimOptions opt;
  opt.record_events = false;
  auto r = simulate_step(mc.model, c, j, mc.plan, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (const StageResult& st : r->stages) {
    const StageMemory am = estimate_stage_memory(mc.model, c, j, mc.plan, st.stage);
    EXPECT_NEAR(st.peak_bytes, am.total, 1.0)
        << "stage " << st.stage << ": simulated " << st.peak_bytes << " B (" << st.peak_inflight
        << " micro-batches in flight, phase " << to_string(st.peak_phase) << "), analytic " << am.total << " B ("
        << am.inflight_microbatches << " in flight, phase " << to_string(am.peak_phase) << "), difference "
        << st.peak_bytes - am.total << " B";
    EXPECT_EQ(st.peak_phase, am.peak_phase) << "stage " << st.stage;
    for (int i = 0; i < kMemoryItems; ++i) {
      EXPECT_NEAR(st.peak_items[i], am.bytes[i], 1.0) << "stage " << st.stage << " item " << to_string(static_cast<MemoryItem>(i));
    }
  }
}

const ModelSpec kLlama = testing::llama2_7b();
const ModelSpec kGpt = testing::gpt3_1_3b();

TEST(SimMemory, PeakEqualsAnalyticPipelineDepths) {
  expect_peaks_equal({"llama7b dp8", kLlama, 1, 4096, 64, mk(8, 1, 1, 1, Schedule::one_f_one_b, Recompute::full, 1, 1, 64)});
  expect_peaks_equal({"llama7b tp2 pp2 dp2 1f1b", kLlama, 1, 4096, 64, mk(2, 2, 2, 1, Schedule::one_f_one_b, Recompute::selective, 0, 1, 64)});
  expect_peaks_equal({"llama7b tp2 pp4 1f1b", kLlama, 1, 4096, 32, mk(1, 2, 4, 1, Schedule::one_f_one_b, Recompute::none, 0, 1, 32)});
  expect_peaks_equal({"llama7b tp2 pp4 1f1b m<p", kLlama, 1, 4096, 2, mk(1, 2, 4, 1, Schedule::one_f_one_b, Recompute::selective, 0, 1, 2)});
}

TEST(SimMemory, PeakEqualsAnalyticRecomputeAndZero) {
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    for (int zero : {0, 3}) {
      expect_peaks_equal({std::string("llama7b pp2 dp4 ") + to_string(rc) + " zero" + std::to_string(zero), kLlama, 1, 4096, 64,
                          mk(4, 1, 2, 1, Schedule::one_f_one_b, rc, zero, 1, 64)});
    }
  }
  ParallelPlan k = mk(2, 2, 2, 1, Schedule::one_f_one_b, Recompute::full_k, 1, 1, 64);
  k.recompute_layers = 4;
  expect_peaks_equal({"llama7b pp2 full_k 4", kLlama, 1, 4096, 64, k});
}

TEST(SimMemory, PeakEqualsAnalyticGPipe) {
  expect_peaks_equal({"llama7b tp2 pp4 gpipe", kLlama, 1, 4096, 16, mk(1, 2, 4, 1, Schedule::gpipe, Recompute::selective, 0, 1, 16)});
}

TEST(SimMemory, PeakEqualsAnalyticInterleaved) {
  expect_peaks_equal(
      {"llama7b tp2 pp4 vpp2", kLlama, 1, 4096, 16, mk(1, 2, 4, 2, Schedule::interleaved, Recompute::selective, 0, 1, 16)});
  expect_peaks_equal(
      {"llama7b pp4 vpp2 dp2 zero1 m=p", kLlama, 1, 4096, 8, mk(2, 1, 4, 2, Schedule::interleaved, Recompute::full, 1, 1, 8)});
}

TEST(SimMemory, PeakEqualsAnalyticInterleavedWithDropout) {
  // GPT (embedding dropout mask on stage 0's chunk 0).
  expect_peaks_equal({"gpt1.3b tp2 pp4 vpp2", kGpt, 1, 2048, 32, mk(1, 2, 4, 2, Schedule::interleaved, Recompute::selective, 0, 1, 32)});
}

TEST(SimMemory, PeakEqualsAnalyticInterleavedFullK) {
  // full_k marks the first k layers of the stage (layer_recompute), which interleaving
  // puts all in chunk 0: chunks then keep different activations.
  ParallelPlan p = mk(1, 2, 4, 2, Schedule::interleaved, Recompute::full_k, 0, 1, 32);
  p.recompute_layers = 2;
  expect_peaks_equal({"llama7b tp2 pp4 vpp2 full_k 2", kLlama, 1, 4096, 32, p});
}

}  // namespace
}  // namespace llmplan
