// The simulator against the closed forms that are exact: equal stages, no communication.
// 1F1B and GPipe take (m + p - 1)(t_f + t_b) with a bubble of (p - 1)/(m + p - 1) of the
// step (Huang et al. 2019; Narayanan et al. 2021 Sec. 2.2); interleaving with v chunks
// per stage divides the bubble by v (Narayanan et al. 2021 Sec. 2.2.2); the split-backward
// schedules' bubbles are below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <vector>

#include "planner/cost/memory_model.h"
#include "sim_fixtures.h"
#include "simulator/step_simulator.h"

namespace llmplan {
namespace {

using testing::dgx_a100;
using testing::gpt3_1_3b;
using testing::make_uniform;

struct Fixture {
  ModelSpec m = gpt3_1_3b();  // 24 layers
  ClusterSpec c;
  TrainingJob j;
  ParallelPlan p;
};

Fixture setup(int pp, int vpp, Schedule sched, int64_t m) {
  Fixture s;
  s.c = dgx_a100(pp > 8 ? pp / 8 : 1);
  s.c.gpus_per_node = std::min(8, pp);
  s.j = testing::job(2048, m);
  s.p = testing::plan(1, 1, pp, vpp, sched, 1, m);
  return s;
}

// Per layer 1 s forward and 2 s backward: dyadic, so every sum is exact.
SimResult run_uniform(const Fixture& s, double tf = 1.0, double tb = 2.0, double tw = 0.0) {
  SimCosts costs = default_costs(s.m, s.c, s.j, s.p);
  make_uniform(&costs, tf, tb, tw);
  SimOptions opt;
  auto r = simulate_step(s.m, s.c, s.j, s.p, costs, opt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : SimResult{};
}

TEST(ClosedForm, OneFOneBAndGPipeStepTime) {
  for (Schedule sched : {Schedule::one_f_one_b, Schedule::gpipe}) {
    for (int pp : {1, 2, 4, 8}) {
      for (int64_t m : {1, 2, 8, 16}) {
        const Fixture s = setup(pp, 1, sched, m);
        const SimResult r = run_uniform(s);
        const double layers = 24.0 / pp;
        const double tf = layers * 1.0, tb = layers * 2.0;
        const double expect = (m + pp - 1) * (tf + tb);
        EXPECT_DOUBLE_EQ(r.total, expect) << to_string(sched) << " pp " << pp << " m " << m;
        EXPECT_DOUBLE_EQ(r.bubble_fraction, static_cast<double>(pp - 1) / (m + pp - 1))
            << to_string(sched) << " pp " << pp << " m " << m;
        for (const StageResult& st : r.stages) {
          EXPECT_DOUBLE_EQ(st.busy, m * (tf + tb));
          EXPECT_DOUBLE_EQ(st.breakdown.bubble, (pp - 1) * (tf + tb));
        }
      }
    }
  }
}

TEST(ClosedForm, InterleavingDividesTheBubbleByV) {
  struct Case { int pp, vpp; int64_t m; };
  for (const Case& c : {Case{2, 2, 4}, Case{4, 2, 8}, Case{4, 3, 8}, Case{4, 2, 16}, Case{8, 3, 16}, Case{2, 3, 2}, Case{4, 2, 4}}) {
    for (auto [tf, tb] : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}, std::pair{0.5, 3.0}}) {
      const SimResult plain = run_uniform(setup(c.pp, 1, Schedule::one_f_one_b, c.m), tf, tb);
      const SimResult inter = run_uniform(setup(c.pp, c.vpp, Schedule::interleaved, c.m), tf, tb);
      const double stage = 24.0 / c.pp * (tf + tb);
      SCOPED_TRACE("pp " + std::to_string(c.pp) + " v " + std::to_string(c.vpp) + " m " + std::to_string(c.m) + " tf " +
                   std::to_string(tf) + " tb " + std::to_string(tb));
      EXPECT_DOUBLE_EQ(plain.breakdown.bubble, (c.pp - 1) * stage);
      EXPECT_DOUBLE_EQ(inter.breakdown.bubble, plain.breakdown.bubble / c.vpp);
      EXPECT_DOUBLE_EQ(inter.total, c.m * stage + (c.pp - 1) * stage / c.vpp);
    }
  }
}

// Uneven stages (24 layers on 5 stages: 4, 5, 5, 5, 5). GPipe is two flow shops of m
// identical jobs, forward then backward, each taking sum_s t_s + (m - 1) max_s t_s.
TEST(ClosedForm, UnevenStagesGPipeIsAFlowShop) {
  for (int64_t m : {1, 4, 10}) {
    const Fixture s = setup(5, 1, Schedule::gpipe, m);
    const SimResult r = run_uniform(s, 1.0, 2.0);
    double sum_f = 0, sum_b = 0, max_f = 0, max_b = 0;
    for (int st = 0; st < 5; ++st) {
      const double layers = static_cast<double>(s.m.layers / 5 + (st >= 5 - s.m.layers % 5 ? 1 : 0));
      sum_f += layers * 1.0;
      sum_b += layers * 2.0;
      max_f = std::max(max_f, layers * 1.0);
      max_b = std::max(max_b, layers * 2.0);
    }
    EXPECT_DOUBLE_EQ(r.total, sum_f + sum_b + (m - 1) * (max_f + max_b)) << "m " << m;
    // The stage with the most layers is the critical one (the first of them).
    EXPECT_EQ(r.critical_stage, 1);
  }
}

// 1F1B over uneven stages laid out by the planner (the extra layers on the last stages):
// the step is the analytic model's m * max + (sum - max) -- the slowest stage's own work
// plus every other stage's once for fill and drain.
TEST(ClosedForm, UnevenStagesOneFOneBMatchesAnalyticForm) {
  for (int pp : {5, 7}) {
    for (int64_t m : {1, 2, 3, 4, 7, 10, 16}) {
      const SimResult r = run_uniform(setup(pp, 1, Schedule::one_f_one_b, m), 1.0, 2.0);
      double sum = 0, max = 0;
      for (int st = 0; st < pp; ++st) {
        const double t = (24 / pp + (st >= pp - 24 % pp ? 1 : 0)) * 3.0;
        sum += t;
        max = std::max(max, t);
      }
      EXPECT_DOUBLE_EQ(r.total, m * max + (sum - max)) << "pp " << pp << " m " << m;
    }
  }
}

}  // namespace
}  // namespace llmplan

namespace llmplan {
namespace {

// Split backward (ZB-H1, ZB-V, DualPipeV) with equal per-layer F, B (input gradient) and
// W: the step is the work plus (p - 1)(F + B - W) of a chunk -- Qi et al. 2024, Sec. 2.1
// for ZB-H1 (one chunk per stage), the same over a V's half-size chunks (its fill is p - 1
// chunk forwards; the DualPipe README's (PP-1)(F + B - 2W) with B the whole backward).
TEST(ClosedForm, SplitBackwardEqualCostsIsWorkPlusThePapersBubble) {
  for (Schedule sched : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev}) {
    const int chunks = sched == Schedule::zb_h1 ? 1 : 2;
    for (int pp : {2, 3, 4, 6}) {
      for (int64_t m : {2 * pp, 3 * pp + 1, 24}) {
        const Fixture s = setup(pp, chunks, sched, m);
        const SimResult r = run_uniform(s, 1.0, 2.0, 1.0);  // F = B = W = 1 per layer
        const double chunk_layers = 24.0 / (pp * chunks);
        SCOPED_TRACE(std::string(to_string(sched)) + " pp " + std::to_string(pp) + " m " + std::to_string(m));
        EXPECT_DOUBLE_EQ(r.total, m * chunks * 3 * chunk_layers + (pp - 1) * chunk_layers);
        // Every stage computes the same: its own work, the rest bubble.
        for (const StageResult& st : r.stages) {
          EXPECT_DOUBLE_EQ(st.busy, m * chunks * 3 * chunk_layers);
          EXPECT_DOUBLE_EQ(st.breakdown.bubble, (pp - 1) * chunk_layers);
        }
      }
    }
  }
}

// Two-direction DualPipe on pp ranks (simulated as DualPipeV on pp/2 ranks with half the
// micro-batches, which dualpipe.py's step() is op for op: planner dualpipe_test.cpp), F = 1,
// B = 2 (whole), W = 1 per layer and chunks of 24/pp layers: each rank does m chunk passes,
// and the bubble is (pp/2 - 1)(F + B - 2W) of a chunk. The DualPipe README states
// (PP/2 - 1)(F&B + B - 3W), which equals it when the overlapped pair F&B takes F + W; with
// no overlap gain (F&B = F + B, as here: no communication to overlap) the README's form is
// (pp/2 - 1) B_input = (pp/2 - 1) chunk above what the order plays.
TEST(ClosedForm, DualPipeEqualCostsIsWorkPlusHalfThePipelinesBubble) {
  for (int pp : {4, 6, 8, 12}) {
    for (int64_t m : {2 * pp, 2 * pp + 2, 48}) {
      const Fixture s = setup(pp, 2, Schedule::dualpipe, m);
      const SimResult r = run_uniform(s, 1.0, 2.0, 1.0);
      const double chunk = 24.0 / pp;
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      EXPECT_TRUE(r.dualpipe);
      ASSERT_EQ(r.stages.size(), static_cast<size_t>(pp / 2));
      EXPECT_DOUBLE_EQ(r.total, m * 3 * chunk + (pp / 2 - 1) * chunk);
      for (const StageResult& st : r.stages) {
        EXPECT_DOUBLE_EQ(st.busy, m * 3 * chunk);
        EXPECT_DOUBLE_EQ(st.breakdown.bubble, (pp / 2 - 1) * chunk);
      }
      const double f = chunk, b = 2 * chunk, w = chunk;
      EXPECT_DOUBLE_EQ(r.breakdown.bubble, (pp / 2 - 1) * ((f + w) + b - 3 * w));  // the README's with F&B = F + W
    }
  }
}

// DualPipe's middle ranks hand each micro-batch over (dualpipe.py is_middle_rank), where
// DualPipeV's V turns on one rank: with the planner's costs the simulated stage pp/2 - 1
// sends every micro-batch's activation and gradient to the mirror it stands for (peer
// itself), once per micro-batch each way; DualPipeV's turn sends nothing.
TEST(ClosedForm, DualPipeHandsOverAcrossTheMiddle) {
  auto middle_sends = [](Schedule sched, int pp) {
    const Fixture s = setup(pp, 2, sched, 16);
    auto r = simulate_step(s.m, s.c, s.j, s.p);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return -1;
    const int turn = static_cast<int>(r->stages.size()) - 1;
    int n = 0;
    for (const SimEvent& e : r->events) n += e.kind == EventKind::pp_send && e.stage == turn && e.peer == turn && e.bytes > 0;
    return n;
  };
  EXPECT_EQ(middle_sends(Schedule::dualpipe, 8), 2 * 8);  // 16 micro-batches: 8 a direction through this rank pair's turn
  EXPECT_EQ(middle_sends(Schedule::dualpipev, 4), 0);
}

// ZB-H1 with unequal F, B, W stays exact: (p - 1) max(F, F + B - W) per stage, the
// planner's pipeline_bubble (a W larger than F + B cannot move before the first B).
TEST(ClosedForm, ZbH1UnequalCostsBubbleIsTheMaxForm) {
  for (auto [f, i, w] : {std::tuple{1.0, 2.0, 1.0}, std::tuple{2.0, 1.0, 1.0}, std::tuple{1.0, 1.0, 2.0}, std::tuple{1.0, 1.0, 0.5}}) {
    for (int pp : {2, 4, 8}) {
      const int64_t m = 3 * pp;
      const SimResult r = run_uniform(setup(pp, 1, Schedule::zb_h1, m), f, i + w, w);
      const double layers = 24.0 / pp;
      SCOPED_TRACE("F " + std::to_string(f) + " B " + std::to_string(i) + " W " + std::to_string(w) + " pp " + std::to_string(pp));
      EXPECT_DOUBLE_EQ(r.total, m * layers * (f + i + w) + (pp - 1) * layers * std::max(f, f + i - w));
    }
  }
}

// The simulator plays B and W apart: per stage, one W event per layer and micro-batch
// (per chunk), each after its own layer's B, and the trace names them "W".
TEST(ClosedForm, SplitBackwardRecordsWeightGradientEvents) {
  for (Schedule sched : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev}) {
    const int chunks = sched == Schedule::zb_h1 ? 1 : 2;
    const Fixture s = setup(4, chunks, sched, 8);
    const SimResult r = run_uniform(s, 1.0, 2.0, 1.0);
    std::map<std::tuple<int, int, int>, double> b_end;  // (stage, micro-batch, layer)
    int w_events = 0;
    for (const SimEvent& e : r.events)
      if (e.kind == EventKind::backward) b_end[{e.stage, e.microbatch, e.layer}] = e.end;
    for (const SimEvent& e : r.events) {
      if (e.kind != EventKind::weight_grad || e.layer < 0) continue;
      ++w_events;
      const auto it = b_end.find({e.stage, e.microbatch, e.layer});
      ASSERT_NE(it, b_end.end()) << to_string(sched);
      EXPECT_GE(e.start, it->second) << to_string(sched);
      EXPECT_EQ(event_name(e).substr(0, 2), "W ");
    }
    // DualPipeV splits only its last backwards; ZB-H1 and ZB-V all of them.
    if (sched == Schedule::dualpipev) {
      EXPECT_GT(w_events, 0);
      EXPECT_LT(w_events, 8 * 24);
    } else {
      EXPECT_EQ(w_events, 8 * 24) << to_string(sched);
    }
  }
}

// DualPipeV's F&B pairs hide each one's EP all-to-all under the other's compute: with a
// 0.5 s all-to-all after every layer's forward and backward (1 s and 2 s of compute), no
// all-to-all of ZB-V (no pairs) runs beside compute; in DualPipeV every all-to-all of a pair
// does but its backward's last (nothing is left to hide it).
TEST(ClosedForm, DualPipeVPairsHideTheirExpertAllToAll) {
  auto ep_under_compute = [](Schedule sched) {
    const Fixture s = setup(2, 2, sched, 16);  // 24 layers: 6 per chunk
    SimCosts costs = default_costs(s.m, s.c, s.j, s.p);
    make_uniform(&costs, 1.0, 2.0, 0.0);
    for (StageCost& st : costs.stages)
      for (LayerCost& l : st.layers) {
        l.comm[static_cast<int>(LayerComm::ep)][static_cast<int>(Pass::forward)].transfer = 0.5;
        l.comm[static_cast<int>(LayerComm::ep)][static_cast<int>(Pass::backward)].transfer = 0.5;
      }
    auto r = simulate_step(s.m, s.c, s.j, s.p, costs);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return -1.0;
    std::vector<std::pair<double, double>> busy;  // stage 0's compute stream
    for (const SimEvent& e : r->events)
      if (e.stage == 0 && e.stream == Stream::compute) busy.push_back({e.start, e.end});
    double overlap = 0;
    for (const SimEvent& e : r->events) {
      if (e.stage != 0 || e.kind != EventKind::ep_comm) continue;
      for (const auto& [b0, b1] : busy) overlap += std::max(0.0, std::min(e.end, b1) - std::max(e.start, b0));
    }
    return overlap;
  };
  EXPECT_DOUBLE_EQ(ep_under_compute(Schedule::zbv), 0);
  // Rank 0 of DualPipeV pp 2, m 16: 27 pairs (13 x 2 in step 4, 1 in step 5), each with
  // 2 x 6 all-to-alls of 0.5 s, of which all but the backward's last run under compute --
  // less where the backward waits for its input gradient while the forward's last
  // all-to-all runs (at most one more per pair).
  const double hidden = ep_under_compute(Schedule::dualpipev);
  EXPECT_LE(hidden, 27 * (2 * 6 - 1) * 0.5);
  EXPECT_GE(hidden, 27 * (2 * 6 - 2) * 0.5);
}

}  // namespace
}  // namespace llmplan
