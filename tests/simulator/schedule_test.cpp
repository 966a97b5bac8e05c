// Pipeline schedules: every pass exactly once, backward after forward, the published
// orders, and the activation sets each schedule really holds against the analytic
// memory model's in-flight count.
#include "simulator/schedule.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "planner/cost/memory_model.h"

namespace llmplan {
namespace {

void expect_complete(const std::vector<StageProgram>& progs, int pp, int vpp, int64_t m) {
  ASSERT_EQ(static_cast<int>(progs.size()), pp);
  for (int s = 0; s < pp; ++s) {
    std::set<std::tuple<bool, int, int>> seen;
    for (const PipelineOp& o : progs[s]) {
      EXPECT_TRUE(seen.insert({o.forward(), o.microbatch, o.chunk}).second) << "stage " << s << " repeats a pass";
      if (!o.forward()) {
        EXPECT_TRUE(seen.count({true, o.microbatch, o.chunk})) << "stage " << s << " backward before forward";
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), 2 * m * vpp) << "stage " << s;
  }
}

TEST(Schedule, EveryPassOnceBackwardAfterForward) {
  for (int pp : {1, 2, 4, 8}) {
    for (int64_t m : {1, 3, 8, 16}) {
      expect_complete(pipeline_schedule(pp == 1 ? EffectiveSchedule::sequential : EffectiveSchedule::one_f_one_b, pp, 1, m), pp, 1, m);
      expect_complete(pipeline_schedule(EffectiveSchedule::gpipe, pp, 2, m), pp, 2, m);
      if (pp > 1 && m % pp == 0) {
        for (int v : {2, 3}) expect_complete(pipeline_schedule(EffectiveSchedule::interleaved, pp, v, m), pp, v, m);
      }
    }
  }
}

// "F0 B0 ..." (with chunks: "F1.0"; a split backward's parts "I" and "W"). Appended piece by piece: GCC 12 at -O3 misreads a
// chained std::string operator+ as an overlapping copy (-Werror=restrict, GCC bug 105329).
std::string program_text(const StageProgram& prog, bool chunks) {
  std::string s;
  for (const PipelineOp& o : prog) {
    s += to_string(o.kind);
    if (chunks) {
      s += std::to_string(o.chunk);
      s += '.';
    }
    s += std::to_string(o.microbatch);
    s += ' ';
  }
  return s;
}

TEST(Schedule, OneFOneBOrder) {
  // PipeDream-Flush (Narayanan et al. 2021, Fig. 4 top): stage 0 of 4 with 8 micro-batches
  // runs 3 warm-up forwards, then alternates, then drains.
  const auto progs = pipeline_schedule(EffectiveSchedule::one_f_one_b, 4, 1, 8);
  EXPECT_EQ(program_text(progs[0], false), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 ");
  EXPECT_EQ(program_text(progs[3], false), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 ");
}

TEST(Schedule, InterleavedOrderIsMegatrons) {
  // Megatron-LM forward_backward_pipelining_with_interleaving, pp 2, v 2, m 4, rank 0:
  // warm-up 2(pp-1) + (v-1)pp = 4 forwards in groups of pp per chunk, backwards over
  // chunks in reverse.
  const auto progs = pipeline_schedule(EffectiveSchedule::interleaved, 2, 2, 4);
  EXPECT_EQ(program_text(progs[0], true),
            "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 "
            "B1.2 B1.3 B0.2 B0.3 ");
  EXPECT_EQ(warmup_forwards(EffectiveSchedule::interleaved, 2, 2, 4, 1), 2);
}

// What the schedule really holds (a forward adds an activation set, its backward frees
// it) against planner/cost/memory_model.cpp inflight_microbatches, in micro-batches.
TEST(Schedule, InflightMatchesAnalyticCount) {
  struct Case { Schedule sched; int pp, vpp; int64_t m; };
  const Case cases[] = {{Schedule::one_f_one_b, 4, 1, 8},  {Schedule::one_f_one_b, 4, 1, 2},  {Schedule::one_f_one_b, 8, 1, 64},
                        {Schedule::gpipe, 4, 1, 8},        {Schedule::gpipe, 2, 1, 3},        {Schedule::interleaved, 4, 2, 8},
                        {Schedule::interleaved, 4, 2, 4},  {Schedule::interleaved, 2, 3, 6},  {Schedule::interleaved, 16, 2, 64},
                        {Schedule::interleaved, 8, 4, 16}, {Schedule::one_f_one_b, 1, 1, 8}};
  for (const Case& c : cases) {
    ParallelPlan p;
    p.pp = c.pp;
    p.vpp = c.vpp;
    p.schedule = c.sched;
    const auto progs = pipeline_schedule(effective_schedule(p), c.pp, c.vpp, c.m);
    for (int s = 0; s < c.pp; ++s) {
      const double held = static_cast<double>(max_inflight_chunks(progs[s], c.vpp)) / c.vpp;
      EXPECT_DOUBLE_EQ(held, inflight_microbatches(p, c.m, s))
          << to_string(c.sched) << " pp " << c.pp << " vpp " << c.vpp << " m " << c.m << " stage " << s;
    }
  }
}

// The split-backward orders of PyTorch's torch.distributed.pipelining (pytorch 00722e648b74,
// schedules.py), worked by hand from its rank-operation functions for pp 2 and 4
// micro-batches. ZB-H1 (_get_1f1b_rank_ops, enable_zero_bubble): rank r defers each W by r B's.
TEST(Schedule, ZbH1OrderIsPyTorchs) {
  const auto progs = pipeline_schedule(EffectiveSchedule::zb_h1, 2, 1, 4);
  EXPECT_EQ(program_text(progs[0], false), "F0 F1 I0 W0 F2 I1 W1 F3 I2 W2 I3 W3 ");
  EXPECT_EQ(program_text(progs[1], false), "F0 I0 F1 I1 W0 F2 I2 W1 F3 I3 W2 W3 ");
  EXPECT_EQ(warmup_forwards(EffectiveSchedule::zb_h1, 2, 1, 4, 0), 2);
}

// ScheduleZBVZeroBubble._calculate_single_rank_operations: chunk 0 is virtual stage r,
// chunk 1 is 2pp-1-r (rank 0 holds the first and the last).
TEST(Schedule, ZbvOrderIsPyTorchs) {
  const auto progs = pipeline_schedule(EffectiveSchedule::zbv, 2, 2, 4);
  EXPECT_EQ(program_text(progs[0], true),
            "F0.0 F0.1 F0.2 F1.0 I1.0 W1.0 F1.1 I1.1 W1.1 F0.3 I0.0 W0.0 F1.2 I1.2 W1.2 I0.1 W0.1 F1.3 I1.3 W1.3 "
            "I0.2 W0.2 I0.3 W0.3 ");
  EXPECT_EQ(program_text(progs[1], true),
            "F0.0 F1.0 F0.1 F1.1 I1.0 W1.0 F0.2 I0.0 W0.0 F1.2 I1.1 W1.1 F0.3 I0.1 W0.1 F1.3 I1.2 W1.2 "
            "I0.2 I1.3 I0.3 W0.2 W1.3 W0.3 ");
}

// ScheduleDualPipeV._calculate_single_rank_operations (m >= 2pp): step 4's F&B pairs run as
// the forward, then the whole backward; from step 6 on the backwards split.
TEST(Schedule, DualPipeVOrderIsPyTorchs) {
  const auto progs = pipeline_schedule(EffectiveSchedule::dualpipev, 2, 2, 4);
  EXPECT_EQ(program_text(progs[0], true), "F0.0 F0.1 F0.2 F1.0 I1.0 W1.0 F1.1 F0.3 B1.1 F1.2 B0.0 B1.2 F1.3 B0.1 B1.3 I0.2 W0.2 I0.3 W0.3 ");
  EXPECT_EQ(program_text(progs[1], true), "F0.0 F1.0 F0.1 F1.1 F0.2 B1.0 F1.2 B0.0 F0.3 B1.1 F1.3 B0.1 B1.2 B0.2 I1.3 I0.3 W1.3 W0.3 ");
}

// Every pass once: each (micro-batch, chunk) has a forward, then either a whole backward or
// a B and, after it, its W.
TEST(Schedule, SplitBackwardEveryPassOnceInOrder) {
  for (EffectiveSchedule s : {EffectiveSchedule::zb_h1, EffectiveSchedule::zbv, EffectiveSchedule::dualpipev}) {
    const int v = s == EffectiveSchedule::zb_h1 ? 1 : 2;
    for (int pp : {2, 3, 4, 8})
      for (int64_t m : {static_cast<int64_t>(2 * pp), static_cast<int64_t>(3 * pp + 1)}) {
        const auto progs = pipeline_schedule(s, pp, v, m);
        for (int st = 0; st < pp; ++st) {
          std::set<std::tuple<int, int, int>> seen;  // (kind, micro-batch, chunk)
          for (const PipelineOp& o : progs[st]) {
            EXPECT_TRUE(seen.insert({static_cast<int>(o.kind), o.microbatch, o.chunk}).second);
            if (o.kind == PassKind::input_grad || o.kind == PassKind::backward) {
              EXPECT_TRUE(seen.count({static_cast<int>(PassKind::forward), o.microbatch, o.chunk}));
            }
            if (o.kind == PassKind::weight_grad) {
              EXPECT_TRUE(seen.count({static_cast<int>(PassKind::input_grad), o.microbatch, o.chunk}));
            }
          }
          int backwards = 0;
          for (const auto& [k, mb, c] : seen) backwards += k == static_cast<int>(PassKind::backward) || k == static_cast<int>(PassKind::weight_grad);
          EXPECT_EQ(backwards, m * v) << to_string(s) << " pp " << pp << " stage " << st;
          EXPECT_EQ(max_pending_weight_grads(progs[st]) > 0, true);
        }
      }
  }
}

}  // namespace
}  // namespace llmplan
