// Parameter offload (ParallelPlan::offload_params: DeepSpeed ZeRO-Infinity's offload_param,
// FSDP2's CPUOffloadPolicy) in the plan check, the memory model, the time model, the
// simulator and the sweep, each against a hand computation.
#include <utility>

#include <gtest/gtest.h>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/cost/time_model.h"
#include "planner/search/explain.h"
#include "planner/search/sweep.h"
#include "simulator/step_simulator.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

struct OffloadCase {
  ModelSpec m;
  ClusterSpec c;
  TrainingJob j;
  ParallelPlan p;
};

// Llama 2 7B on one node of 8 A100-80GB, ZeRO-3 with the optimizer and the parameters
// offloaded (bf16 O2, the DeepSpeed convention: 2 + 2 + 12 B/param).
OffloadCase llama7b_offloaded() {
  const PresetRegistry& reg = testing::shipped_presets();
  OffloadCase s{*reg.model("llama2-7b"), *reg.cluster_for_gpu("a100-80g"), {}, {}};
  s.j.seq_len = 2048;
  s.j.global_batch = 64;
  s.j.grads = GradConvention::deepspeed;
  s.p.dp = 8;
  s.p.micro_batch = 1;
  s.p.zero = 3;
  s.p.recompute = Recompute::full;
  s.p.offload_optimizer = s.p.offload_params = true;
  return s;
}

// The same plan with only the optimizer offloaded.
ParallelPlan without_parameter_offload(ParallelPlan p) {
  p.offload_params = false;
  return p;
}

// The DP collectives of the case's plan for P trainable parameters, with and without
// parameter offload.
std::pair<DpStep, DpStep> dp_steps_with_and_without_parameter_offload(const OffloadCase& s, const Efficiency& e, double P) {
  return {dp_step(s.c, s.j, s.p, e, P, P, s.m.layers), dp_step(s.c, s.j, without_parameter_offload(s.p), e, P, P, s.m.layers)};
}

// The whole step with parameter offload (s.p) against optimizer offload only: slower by the
// copies the compute cannot hide, and faster by the upload of updated parameters it skips;
// the analytic model and the simulator both charge them.
void expect_step_and_simulator_charge_the_copies(const OffloadCase& s, const ParallelPlan& opt_only) {
  const StepTime tw = estimate_time(s.m, s.c, s.j, s.p), to = estimate_time(s.m, s.c, s.j, opt_only);
  EXPECT_GT(tw.dp_comm, to.dp_comm);
  Result<SimResult> sw = simulate_step(s.m, s.c, s.j, s.p), so = simulate_step(s.m, s.c, s.j, opt_only);
  ASSERT_TRUE(sw) << sw.status().message();
  ASSERT_TRUE(so) << so.status().message();
  EXPECT_GT(sw->total, so->total - (to.offload - tw.offload));
}

TEST(ParamOffload, NeedsZero3WithOptimizerOffload) {
  OffloadCase s = llama7b_offloaded();
  EXPECT_EQ(check_plan(s.m, s.c, s.j, s.p, 8), RejectReason::none);
  ParallelPlan q = s.p;
  q.zero = 2;  // DeepSpeed reads offload_param at stage 3 only
  EXPECT_EQ(check_plan(s.m, s.c, s.j, q, 8), RejectReason::zero_offload);
  q = s.p;
  q.offload_optimizer = false;  // FSDP's CPUOffloadPolicy steps the optimizer on the host
  EXPECT_EQ(check_plan(s.m, s.c, s.j, q, 8), RejectReason::zero_offload);
  q = s.p;
  q.dp = 1;  // ZeRO-Infinity on one GPU
  EXPECT_EQ(check_plan(s.m, s.c, s.j, q, 1), RejectReason::none);
}

// What leaves the GPU: the 16-bit parameter shard, 2 B x P / 8, beside the 14 B x P / 8 of
// gradients, master weights and moments that optimizer offload moves. The GPU keeps only
// the units gathered for compute.
TEST(ParamOffload, MovesTheParameterShardToTheHost) {
  const OffloadCase s = llama7b_offloaded();
  const ParallelPlan opt_only = without_parameter_offload(s.p);
  const MemoryReport with = estimate_memory(s.m, s.c, s.j, s.p);
  const MemoryReport without = estimate_memory(s.m, s.c, s.j, opt_only);
  const double P = count_params(s.m, 1, 1, 1, 0, 0).total;
  const int w = static_cast<int>(MemoryItem::weights);
  EXPECT_EQ(with.worst.bytes[w], 0);
  EXPECT_NEAR(without.worst.bytes[w], 2 * P / 8, 1.0);
  EXPECT_NEAR(without.worst.host_state_bytes, 14 * P / 8, 1.0);
  EXPECT_NEAR(with.worst.host_state_bytes, 16 * P / 8, 1.0);
  EXPECT_NEAR(with.host_bytes_per_node, 16 * P / 8 * s.c.gpus_per_node, 8.0);
  EXPECT_NEAR(without.worst.total - with.worst.total, 2 * P / 8, 1.0);
  EXPECT_GT(with.worst.bytes[static_cast<int>(MemoryItem::gathered_params)], 0);  // still gathered per unit
}

// The cost: each gather first copies the rank's shard of the unit over the host link, so a
// pass's gathers take sum(unit bytes) / n / (host bandwidth x network efficiency) more:
// 2 B x P / 8 over 25 GB/s at 0.8 for the whole model. The optimizer step no longer
// uploads the updated parameters.
TEST(ParamOffload, EachGatherFirstCopiesTheShardFromTheHost) {
  const OffloadCase s = llama7b_offloaded();
  const ParallelPlan opt_only = without_parameter_offload(s.p);
  const Efficiency e;
  const double P = 6.74e9;
  const auto [with, without] = dp_steps_with_and_without_parameter_offload(s, e, P);
  EXPECT_NEAR(with.params.duration - without.params.duration, 2 * P / 8 / (s.c.host_bandwidth * e.network), 1e-9);
  EXPECT_DOUBLE_EQ(with.grads.duration, without.grads.duration);
  const OptimizerTime ow = optimizer_time(s.c, s.j, s.p, e, P), oo = optimizer_time(s.c, s.j, opt_only, e, P);
  EXPECT_NEAR(oo.offload - ow.offload, P / 8 * 2 / s.c.host_bandwidth, 1e-9);
  expect_step_and_simulator_charge_the_copies(s, opt_only);
}

// One GPU (ZeRO-Infinity's single-GPU case, Rajbhandari et al. 2021): there is no group to
// gather over, so each unit comes whole from the host, before its forward and again before
// its backward: 2 B x P / (host bandwidth x network efficiency) per pass. Hidden behind the
// compute, the copies cost only their HBM writes: 2 passes x 2 B x P / (HBM bandwidth x
// memory efficiency), whatever the host link's speed. Without parameter offload a one-rank
// ZeRO-3 moves nothing.
TEST(ParamOffload, OneGpuCopiesEachUnitWholeFromTheHost) {
  OffloadCase s = llama7b_offloaded();
  s.p.dp = 1;
  s.j.global_batch = 8;
  const ParallelPlan opt_only = without_parameter_offload(s.p);
  const Efficiency e;
  const double P = 6.74e9;
  const auto [with, without] = dp_steps_with_and_without_parameter_offload(s, e, P);
  EXPECT_NEAR(with.params.duration, 2 * P / (s.c.host_bandwidth * e.network), 1e-9);
  EXPECT_DOUBLE_EQ(with.params.host_copy, with.params.duration);
  EXPECT_EQ(with.grads.duration, 0);
  EXPECT_EQ(with.last_bucket, 0);
  EXPECT_EQ(dp_exposed_time(without, 8, 1.0, 2.0, e), 0);
  // Nothing hidden: both passes' copies, every micro-batch.
  EXPECT_NEAR(dp_exposed_time(with, 8, 0, 0, e), 8 * 2 * with.params.duration, 1e-9);
  // All hidden: their HBM writes only.
  EXPECT_NEAR(dp_exposed_time(with, 1, 1e3, 1e3, e), 2 * 2 * P / (s.c.gpu.memory_bandwidth * e.memory), 1e-9);
  expect_step_and_simulator_charge_the_copies(s, opt_only);
}

// Llama 2 70B (seq 512, DeepSpeed's gradients) on `gpus` GPUs of `gpu_bytes`, host memory
// not checked: every plan the sweep ranks offloads the parameters, and explain offers
// parameter offload for the best plan without it, which does not fit.
void expect_only_parameter_offload_fits(double gpu_bytes, int gpus, const SweepSpace& space) {
  const PresetRegistry& reg = testing::shipped_presets();
  const ModelSpec m = *reg.model("llama2-70b");
  ClusterSpec c = *reg.cluster_for_gpu("a100-80g");
  c.gpu.memory_bytes = gpu_bytes;
  c.host_memory_bytes = 0;
  TrainingJob j;
  j.seq_len = 512;
  j.global_batch = 8;
  j.grads = GradConvention::deepspeed;
  SweepOptions opt;
  opt.threads = 2;
  const SweepResult r = run_sweep(m, c, j, gpus, space, opt);
  ASSERT_FALSE(r.top.empty());
  for (const PlanResult& x : r.top) {
    EXPECT_TRUE(x.plan.offload_params);
    EXPECT_EQ(x.plan.zero, 3);
  }
  const ParallelPlan without = without_parameter_offload(r.top.front().plan);
  const Explanation ex = explain_plan(m, c, job_for(j, r.top.front()), without, gpus, 0);
  EXPECT_FALSE(ex.memory.fits(0));
  bool offered = false;
  for (const PlanChange& ch : ex.changes) offered |= ch.plan.offload_params && ch.fits;
  EXPECT_TRUE(offered);
}

// On one 80 GB GPU its 2 x 69B = 138 GB of 16-bit weights fit only in host memory.
TEST(ParamOffload, OneGpuSweepFindsItForA70BModel) { expect_only_parameter_offload_fits(80e9, 1, SweepSpace{}); }

// A model whose 16-bit shard alone does not fit: over 8 GPUs of 16 GB, ZeRO-3 still holds
// 2 x 69B / 8 = 17.2 GB of parameters per GPU.
TEST(ParamOffload, TheSweepFindsItWhereNothingElseFits) {
  SweepSpace space;
  space.tp = {1};
  space.pp = {1};
  space.cp = {1};
  expect_only_parameter_offload_fits(16e9, 8, space);
}

}  // namespace
}  // namespace llmplan
