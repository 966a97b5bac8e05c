#include <gtest/gtest.h>

#include "planner/io/presets.h"
#include "planner/search/sweep.h"
#include "planner/cost/time_model.h"

namespace llmplan {
namespace {

PresetRegistry presets() { return std::move(PresetRegistry::load(LLMPLAN_SOURCE_ROOT)).value(); }

TEST(Sweep, Llama7bOnEightA100sBestPlanFitsAndRejectedPlansDoNot) {
  const PresetRegistry reg = presets();
  const ModelSpec m = *reg.model("llama2-7b");
  ClusterSpec c = *reg.cluster_for_gpu("a100-80g");
  TrainingJob j;
  j.seq_len = 2048;
  j.global_batch = 512;
  SweepOptions opt;
  opt.keep_all = true;
  opt.threads = 2;
  const SweepResult r = run_sweep(m, c, j, 8, SweepSpace{}, opt);
  ASSERT_FALSE(r.top.empty());
  EXPECT_LE(r.top.front().peak_bytes, c.gpu.memory_bytes);
  EXPECT_EQ(r.fitting + r.rejected[static_cast<int>(RejectReason::does_not_fit)] + r.rejected[static_cast<int>(RejectReason::host_does_not_fit)],
            r.evaluated);
  int64_t checked = 0;
  for (const PlanResult& x : r.all) {
    if (x.reason != RejectReason::does_not_fit) continue;
    // Independently re-evaluated: a rejected plan really exceeds the card.
    EXPECT_GT(estimate_memory(m, c, job_for(j, x), x.plan).worst.total, c.gpu.memory_bytes);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  for (size_t i = 1; i < r.top.size(); ++i) EXPECT_GE(r.top[i - 1].tokens_per_s, r.top[i].tokens_per_s);
  // Pareto front: memory increases while throughput increases.
  for (size_t i = 1; i < r.pareto.size(); ++i) {
    EXPECT_GT(r.pareto[i].peak_bytes, r.pareto[i - 1].peak_bytes);
    EXPECT_GT(r.pareto[i].tokens_per_s, r.pareto[i - 1].tokens_per_s);
  }
}

// Llama 2 70B at 4096 tokens on 16 H100s: where a plan fits with full recompute but not
// without, the sweep also offers full recompute of only the first k layers per chunk, with
// the fewest k that fits (k - 1 does not, or k = 1), faster than recomputing every layer.
TEST(Sweep, OffersTheFewestFirstLayersToRecomputeWhereNoRecomputeDoesNotFit) {
  const PresetRegistry reg = presets();
  const ModelSpec m = *reg.model("llama2-70b");
  const ClusterSpec c = *reg.cluster_for_gpu("h100-sxm");
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 128;
  SweepSpace space;
  space.offload = {0};
  SweepOptions opt;
  opt.keep_all = true;
  opt.threads = 2;
  const SweepResult r = run_sweep(m, c, j, 16, space, opt);
  int checked = 0;
  for (const PlanResult& x : r.all) {
    if (x.plan.recompute != Recompute::full_k) continue;
    ASSERT_EQ(x.reason, RejectReason::none);
    const TrainingJob jx = job_for(j, x);
    const int k = x.plan.recompute_layers;
    ASSERT_GE(k, 1);
    ASSERT_LT(k, pp_stage_layers(m.layers, x.plan, 0) / x.plan.vpp);
    EXPECT_TRUE(estimate_memory(m, c, jx, x.plan).fits(0));
    ParallelPlan fewer = x.plan;
    if (k == 1) fewer.recompute = Recompute::none;
    else fewer.recompute_layers = k - 1;
    EXPECT_FALSE(estimate_memory(m, c, jx, fewer).fits(0)) << k;
    ParallelPlan all = x.plan;
    all.recompute = Recompute::full;
    EXPECT_LT(estimate_time(m, c, jx, x.plan).total, estimate_time(m, c, jx, all).total);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  // Pinned to full recompute, the sweep does not choose k.
  space.recompute = {Recompute::full};
  for (const PlanResult& x : run_sweep(m, c, j, 16, space, opt).all) EXPECT_NE(x.plan.recompute, Recompute::full_k);
}

TEST(Sweep, Gpt3OnThousandGpusUsesTensorInNodeAndPipelineAcross) {
  const PresetRegistry reg = presets();
  const ModelSpec m = *reg.model("gpt3-175b");
  ClusterSpec c = *reg.cluster_for_gpu("a100-80g");
  c.nodes = 128;
  TrainingJob j;
  j.seq_len = 2048;
  j.global_batch = 1536;
  SweepSpace space;
  space.flash = {1};
  SweepOptions opt;
  opt.threads = 2;
  const SweepResult r = run_sweep(m, c, j, 1024, space, opt);
  ASSERT_FALSE(r.top.empty());
  const ParallelPlan& best = r.top.front().plan;
  EXPECT_GT(best.tp, 1);
  EXPECT_LE(best.tp, c.gpus_per_node);
  EXPECT_GT(best.pp, 1);
  EXPECT_GT(static_cast<int64_t>(best.tp) * best.cp * best.dp * best.pp, c.gpus_per_node);
}

TEST(Sweep, SameResultWhateverTheThreadCount) {
  const PresetRegistry reg = presets();
  const ModelSpec m = *reg.model("llama2-13b");
  ClusterSpec c = *reg.cluster_for_gpu("a100-80g");
  TrainingJob j;
  SweepOptions one, two;
  one.threads = 1;
  two.threads = 2;
  const SweepResult a = run_sweep(m, c, j, 8, SweepSpace{}, one);
  const SweepResult b = run_sweep(m, c, j, 8, SweepSpace{}, two);
  ASSERT_EQ(a.top.size(), b.top.size());
  for (size_t i = 0; i < a.top.size(); ++i) EXPECT_EQ(a.top[i].tokens_per_s, b.top[i].tokens_per_s) << i;
  EXPECT_EQ(a.evaluated, b.evaluated);
}

// Context parallel varies its exchange too: with flash attention off, only the all-gather
// can run (the ring merges flash partials), so every evaluated CP plan is an all-gather
// and each ring plan is rejected for needing flash; with flash on both are costed, and a
// plan's cached time inputs follow its exchange (each result equals a fresh estimate).
TEST(Sweep, ContextParallelVariesItsExchange) {
  const PresetRegistry reg = presets();
  const ModelSpec m = *reg.model("llama2-7b");
  const ClusterSpec c = *reg.cluster_for_gpu("a100-80g");
  TrainingJob j;
  j.seq_len = 16384;
  j.global_batch = 16;
  SweepOptions opt;
  opt.keep_all = true;
  opt.threads = 2;
  SweepSpace space;
  space.cp = {2};
  space.tp = {1};
  space.pp = {1};
  space.flash = {0};
  SweepResult r = run_sweep(m, c, j, 8, space, opt);
  int64_t ring = 0, gathered = 0;
  for (const PlanResult& x : r.all) {
    if (x.plan.cp_exchange == CpExchange::ring) {
      EXPECT_EQ(x.reason, RejectReason::cp_needs_flash);
      ++ring;
    } else if (x.reason == RejectReason::none || x.reason == RejectReason::does_not_fit) {
      ++gathered;
    }
  }
  EXPECT_GT(ring, 0);
  EXPECT_GT(gathered, 0);
  space.flash = {1};
  r = run_sweep(m, c, j, 8, space, opt);
  int64_t costed[2] = {0, 0};
  for (const PlanResult& x : r.all) {
    if (x.reason != RejectReason::none && x.reason != RejectReason::does_not_fit) continue;
    ++costed[static_cast<int>(x.plan.cp_exchange)];
    EXPECT_NEAR(x.step_time_s, estimate_time(m, c, job_for(j, x), x.plan).total, 1e-9 * x.step_time_s);
  }
  EXPECT_GT(costed[0], 0);
  EXPECT_GT(costed[1], 0);
}

}  // namespace
}  // namespace llmplan
