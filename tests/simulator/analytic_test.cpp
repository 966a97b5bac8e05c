// Simulated step time against the analytic model (planner estimate_time). Where the
// analytic model is exact -- no pipeline, no data parallelism: every micro-batch's
// compute and blocking TP collectives in a row, then the optimizer -- the two must agree
// to rounding (the simulator takes the LM head, optimizer and per-pass collective times
// from the planner's head_times, optimizer_time and layer_comm_by_pass). Elsewhere the
// difference is printed, term by term.
#include <gtest/gtest.h>

#include <cstdio>

#include "sim_fixtures.h"
#include "simulator/step_simulator.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

TEST(SimVsAnalytic, ExactWithoutPipelineOrDataParallel) {
  const ModelSpec m = testing::llama2_7b();
  for (int tp : {1, 2, 8}) {
    for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
      ParallelPlan p = testing::plan(1, tp, 1, 1, Schedule::one_f_one_b, 1, 8);
      p.recompute = rc;
      const ClusterSpec c = testing::dgx_a100(1);
      const TrainingJob j = testing::job(4096, 8);
      SimOptions opt;
      opt.record_events = false;
      auto r = simulate_step(m, c, j, p, opt);
      ASSERT_TRUE(r.ok()) << r.status().message();
      const StepTime& a = r->analytic;
      SCOPED_TRACE("tp " + std::to_string(tp) + " recompute " + to_string(rc));
      EXPECT_NEAR(r->total, a.total, 1e-12 * a.total);
      EXPECT_NEAR(r->breakdown.compute, a.compute, 1e-12 * a.total);
      EXPECT_NEAR(r->breakdown.recompute, a.recompute, 1e-12 * a.total);
      EXPECT_NEAR(r->breakdown.tp_comm, a.tp_comm, 1e-12 * a.total);
      EXPECT_NEAR(r->breakdown.optimizer, a.optimizer, 1e-12 * a.total);
      EXPECT_EQ(r->breakdown.bubble, 0);
    }
  }
}

void print_comparison(const char* name, const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p) {
  SimOptions opt;
  opt.record_events = false;
  auto r = simulate_step(m, c, j, p, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const StepTime& a = r->analytic;
  const SimBreakdown& s = r->breakdown;
  std::printf("\n%s: simulated %.4f s, analytic %.4f s (%+.2f%%), critical stage %d, bubble fraction %.3f vs %.3f\n", name, r->total,
              a.total, 100 * (r->total - a.total) / a.total, r->critical_stage, r->bubble_fraction, a.bubble_fraction());
  std::printf("  %-10s %10s %10s\n", "term", "sim s", "analytic s");
  const std::pair<const char*, std::pair<double, double>> rows[] = {
      {"compute", {s.compute, a.compute}},       {"recompute", {s.recompute, a.recompute}}, {"tp", {s.tp_comm, a.tp_comm}},
      {"ep", {s.ep_comm, a.ep_comm}},            {"pp", {s.pp_comm, a.pp_comm}},            {"dp", {s.dp_comm, a.dp_comm}},
      {"bubble", {s.bubble, a.bubble}},
      {"optimizer", {s.optimizer, a.optimizer}}, {"total", {s.total, a.total}}};
  for (const auto& [n, v] : rows) std::printf("  %-10s %10.4f %10.4f\n", n, v.first, v.second);
  EXPECT_GT(r->total, 0);
  // The critical stage's own work is a lower bound of any step time.
  EXPECT_GE(r->total, s.compute + s.recompute);
  // Both models time the same layers: they agree within 5% on these plans (the issue's
  // bound); larger gaps must be explained term by term (`llmplan validate --simulate`).
  EXPECT_NEAR(r->total / a.total, 1.0, 0.05) << name;
}

TEST(SimVsAnalytic, PrintDifferences) {
  {
    ParallelPlan p = testing::plan(8, 8, 16, 2, Schedule::interleaved, 1, 512);
    p.recompute = Recompute::selective;
    print_comparison("GPT-3 175B, 1024 A100, tp8 pp16 vpp2 dp8, m 64", testing::gpt3_175b(), testing::dgx_a100(128),
                     testing::job(2048, 512), p);
  }
  {
    ParallelPlan p = testing::plan(8, 1, 1, 1, Schedule::one_f_one_b, 1, 64);
    p.zero = 1;
    p.recompute = Recompute::full;
    print_comparison("Llama-2 7B, 8 A100, dp8 zero1 full recompute", testing::llama2_7b(), testing::dgx_a100(1), testing::job(4096, 64), p);
  }
  {
    ParallelPlan p = testing::plan(8, 2, 4, 1, Schedule::one_f_one_b, 1, 256);
    p.recompute = Recompute::selective;
    print_comparison("Llama-2 7B, 64 A100, tp2 pp4 dp8 1f1b", testing::llama2_7b(), testing::dgx_a100(8), testing::job(4096, 256), p);
  }
  {
    ParallelPlan p = testing::plan(2, 8, 4, 1, Schedule::gpipe, 1, 64);
    p.recompute = Recompute::full;
    print_comparison("GPT-3 1.3B, 64 A100, GPipe pp4 tp8 dp2 full recompute", testing::gpt3_1_3b(), testing::dgx_a100(8), testing::job(2048, 64), p);
  }
  // Split backward: the simulator plays PyTorch's orders with B and W apart; the planner
  // scales 1F1B's bubble by max(F, F + B - W) / (F + B + W).
  for (Schedule sched : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev}) {
    ParallelPlan p = testing::plan(8, 2, 4, sched == Schedule::zb_h1 ? 1 : 2, sched, 1, 256);
    p.recompute = Recompute::selective;
    const std::string name = std::string("Llama-2 7B, 64 A100, tp2 pp4 dp8 ") + to_string(sched);
    print_comparison(name.c_str(), testing::llama2_7b(), testing::dgx_a100(8), testing::job(4096, 256), p);
  }
  {
    ParallelPlan p = testing::plan(4, 2, 8, 2, Schedule::dualpipe, 1, 256);
    p.recompute = Recompute::selective;
    print_comparison("Llama-2 7B, 64 A100, tp2 pp8 dp4 dualpipe", testing::llama2_7b(), testing::dgx_a100(8), testing::job(4096, 256), p);
  }
  // MoE: DualPipeV's F&B pairs hide their EP all-to-alls (the simulator plays the overlap,
  // the planner credits its share).
  const PresetRegistry& reg = testing::shipped_presets();
  const ModelSpec mixtral = *reg.model("mixtral-8x7b");
  const ClusterSpec h100 = cluster_with_gpus(*reg.cluster_for_gpu("h100-sxm"), 32);
  for (Schedule sched : {Schedule::zbv, Schedule::dualpipev}) {
    ParallelPlan p = testing::plan(8, 1, 4, 2, sched, 1, 256);
    p.ep = 8;
    p.zero = 1;
    p.recompute = Recompute::selective;
    const std::string name = std::string("Mixtral 8x7B, 32 H100, pp4 dp8 ep8 ") + to_string(sched);
    print_comparison(name.c_str(), mixtral, h100, testing::job(4096, 256), p);
  }
}

}  // namespace
}  // namespace llmplan
