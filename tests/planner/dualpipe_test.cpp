// DeepSeek's two-direction DualPipe (Schedule::dualpipe), against independent references:
// its own step() transcribed from deepseek-ai/DualPipe (dualpipe/dualpipe.py at 3da1bbe),
// the DualPipe README's per-device parameters (2x) and activations (PP + 1 chunks), and the
// per-stage weights of the same model under 1F1B.
#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "planner/cost/framework.h"
#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/cost/time_model.h"
#include "planner/search/sweep.h"
#include "simulator/schedule.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

using testing::shipped_presets;

struct Op {
  PassKind kind;
  int chunk;
  bool operator==(const Op&) const = default;
};

// dualpipe.py DualPipe.step() on rank `rank` of `ranks` with `chunks` micro-batches (half
// from each end), its compute operations only: _forward_chunk(phase) is F of chunk `phase`
// (phase 0 is the direction whose stage this rank meets first), _backward_chunk(phase,
// enable_zb) a whole backward, or with enable_zb its input-gradient part whose weight
// gradient waits in WeightGradStore's queue for a _weight_chunk(); _forward_backward_chunk
// (a, b) is F of a then the backward of b.
std::vector<Op> dualpipe_step(int ranks, int chunks, int rank) {
  const int half_ranks = ranks / 2, half_rank = std::min(rank, ranks - 1 - rank), half_chunks = chunks / 2;
  std::vector<Op> ops;
  std::deque<int> weight_queue;  // the chunks whose W waits (FIFO, as WeightGradStore)
  auto f = [&](int c) { ops.push_back({PassKind::forward, c}); };
  auto b = [&](int c, bool zb) {
    ops.push_back({zb ? PassKind::input_grad : PassKind::backward, c});
    if (zb) weight_queue.push_back(c);
  };
  auto w = [&] {
    ops.push_back({PassKind::weight_grad, weight_queue.front()});
    weight_queue.pop_front();
  };
  for (int i = 0; i < (half_ranks - half_rank - 1) * 2; ++i) f(0);  // step 1: nF0
  for (int i = 0; i < half_rank + 1; ++i) f(0), f(1);                 // step 2: nF0F1
  for (int i = 0; i < half_ranks - half_rank - 1; ++i) b(1, true), w(), f(1);  // step 3: nB1W1F1
  for (int i = 0; i < half_chunks - ranks + half_rank + 1; ++i) {   // step 4: nF0B1F1B0
    f(0), b(1, false);
    f(1), b(0, false);
  }
  for (int i = 0; i < half_ranks - half_rank - 1; ++i) b(1, false), f(1), b(0, false);  // step 5: nB1F1B0
  bool zb = false;                                                                     // step 6: nB1B0
  for (int i = 0; i < half_rank + 1; ++i) {
    if (i == (half_rank + 1) / 2 && half_rank % 2 == 1) zb = true;
    b(1, zb);
    if (i == (half_rank + 1) / 2 && half_rank % 2 == 0) zb = true;
    b(0, zb);
  }
  for (int i = 0; i < half_ranks - half_rank - 1; ++i) w(), b(0, true);  // step 7: nWB0
  for (int i = 0; i < half_rank + 1; ++i) w();                           // step 8: nW
  EXPECT_TRUE(weight_queue.empty());
  return ops;
}

// The premise of costing DualPipe as DualPipeV (plan_check.h cost_plan): on every rank,
// DualPipe's step() runs op for op the order the planner and simulator hold for DualPipeV
// (PyTorch's ScheduleDualPipeV) on rank min(r, pp-1-r) of pp/2 ranks with half the
// micro-batches -- each chunk being the same stage, r or pp-1-r.
TEST(DualPipe, EachRankRunsDualPipeVsOrderOnHalfTheRanks) {
  int checked = 0;
  for (int ranks : {4, 6, 8, 16}) {
    for (int chunks : {2 * ranks, 2 * ranks + 2, 4 * ranks}) {
      ParallelPlan v;
      v.pp = ranks / 2, v.vpp = 2, v.schedule = Schedule::dualpipev;
      const std::vector<StageProgram> programs = pipeline_schedule(effective_schedule(v), v.pp, 2, chunks / 2);
      for (int r = 0; r < ranks; ++r) {
        std::vector<Op> held;
        for (const PipelineOp& o : programs[static_cast<size_t>(std::min(r, ranks - 1 - r))]) held.push_back({o.kind, o.chunk});
        const std::vector<Op> reference = dualpipe_step(ranks, chunks, r);
        ASSERT_EQ(held.size(), reference.size()) << "ranks " << ranks << " chunks " << chunks << " rank " << r;
        for (size_t i = 0; i < held.size(); ++i) {
          EXPECT_EQ(held[i].kind, reference[i].kind) << "ranks " << ranks << " chunks " << chunks << " rank " << r << " op " << i;
          EXPECT_EQ(held[i].chunk, reference[i].chunk) << "ranks " << ranks << " chunks " << chunks << " rank " << r << " op " << i;
        }
        // The README's activation per device, PP + 1 chunks, on rank 0: a forward's
        // activations are held until its whole backward or its W.
        if (r == 0) {
          int held = 0, most = 0;
          for (const Op& o : reference) {
            if (o.kind == PassKind::forward) most = std::max(most, ++held);
            if (o.kind == PassKind::backward || o.kind == PassKind::weight_grad) --held;
          }
          EXPECT_EQ(most, ranks + 1) << "ranks " << ranks << " chunks " << chunks;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * (4 + 6 + 8 + 16));
}

struct Job {
  ModelSpec m;
  ClusterSpec c;
  TrainingJob j;
};

Job llama3_8b_on_8() {  // 32 layers
  const PresetRegistry& reg = shipped_presets();
  Job x{*reg.model("llama3-8b"), cluster_with_gpus(*reg.cluster_for_gpu("h100-sxm"), 8), {}};
  x.j.seq_len = 4096;
  x.j.global_batch = 64;
  return x;
}

ParallelPlan dualpipe_plan() {
  ParallelPlan p;
  p.pp = 8, p.vpp = 2, p.dp = 1, p.micro_batch = 1, p.zero = 1;
  p.recompute = Recompute::full;
  p.schedule = Schedule::dualpipe;
  return p;
}

// Rank r holds stages r and pp-1-r (the DualPipe README: 2x the parameters per device):
// its weights and gradients are those two stages' under 1F1B on the same pp, to the byte;
// its optimizer states are sharded over the 2 x dp ranks holding those stages (rank r and
// its mirror of every replica, whose gradients are summed). Rank 0's activations: the
// planner's most sets held are (pp + 1) / 2 of its two chunks, the README's PP + 1 chunks.
TEST(DualPipe, RankHoldsTwoStagesOfParametersAndPpPlusOneChunkActivations) {
  Job x = llama3_8b_on_8();
  const ParallelPlan dual = dualpipe_plan();
  ASSERT_EQ(check_plan(x.m, x.c, x.j, dual, 8), RejectReason::none);
  ParallelPlan one = dual;
  one.vpp = 1, one.schedule = Schedule::one_f_one_b;
  const int weights = static_cast<int>(MemoryItem::weights), grads = static_cast<int>(MemoryItem::gradients),
            states = static_cast<int>(MemoryItem::optimizer_states);
  for (int r = 0; r < 4; ++r) {
    const StageMemory d = estimate_stage_memory(x.m, x.c, x.j, dual, r);
    const StageMemory a = estimate_stage_memory(x.m, x.c, x.j, one, r), b = estimate_stage_memory(x.m, x.c, x.j, one, 7 - r);
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_NEAR(d.bytes[weights], a.bytes[weights] + b.bytes[weights], 1e-9 * d.bytes[weights]);
    EXPECT_NEAR(d.bytes[grads], a.bytes[grads] + b.bytes[grads], 1e-9 * d.bytes[grads]);
    EXPECT_NEAR(d.bytes[states], (a.bytes[states] + b.bytes[states]) / 2, 1e-9 * d.bytes[states]);
  }
  const ParallelPlan v = cost_plan(dual);
  EXPECT_DOUBLE_EQ(inflight_microbatches(v, microbatches_per_step(x.j, v), 0) * 2, dual.pp + 1);
  EXPECT_LE(estimate_memory(x.m, x.c, x.j, dual).first.inflight_microbatches * 2, dual.pp + 1);
}

// Time: rank 0 runs m/2 micro-batches through stage 0 (the embedding and L/pp layers) and
// m/2 through stage pp-1 (L/pp layers and the head): the compute of 1F1B's last stage on
// pp/2 ranks, 2L/pp layers and the head, over its m/2 micro-batches (1F1B with dp doubled).
// The bubble is below 1F1B's on the same pp.
TEST(DualPipe, StepComputeIsHalfThePipelinesAndTheBubbleSmaller) {
  Job x = llama3_8b_on_8();
  const ParallelPlan dual = dualpipe_plan();
  ParallelPlan one = dual;
  one.vpp = 1, one.schedule = Schedule::one_f_one_b;
  ParallelPlan half = one;
  half.pp = 4, half.dp = 2;
  const StepTime d = estimate_time(x.m, x.c, x.j, dual), a = estimate_time(x.m, x.c, x.j, one),
                 h = estimate_time(x.m, x.c, x.j, half);
  EXPECT_NEAR(d.compute, h.compute, 1e-9 * h.compute);
  EXPECT_LT(d.compute, a.compute);
  EXPECT_LT(d.bubble, a.bubble / 2);
  EXPECT_NEAR(d.model_flops, a.model_flops, 1e-9 * a.model_flops);
}

TEST(DualPipe, CheckPlanRefusesShapesItCannotRunNamingTheField) {
  Job x = llama3_8b_on_8();
  ParallelPlan p = dualpipe_plan();
  auto message = [&] { return check_plan_status(x.m, x.c, x.j, p, 8, "plan.json").message(); };
  EXPECT_EQ(check_plan(x.m, x.c, x.j, p, 8), RejectReason::none);
  p.vpp = 1;
  EXPECT_EQ(check_plan(x.m, x.c, x.j, p, 8), RejectReason::schedule_shape);
  EXPECT_NE(message().find("'plan.vpp'"), std::string::npos);
  p.vpp = 2, p.pp = 2, p.dp = 4;  // a V on one rank
  EXPECT_EQ(check_plan(x.m, x.c, x.j, p, 8), RejectReason::schedule_shape);
  EXPECT_NE(message().find("'plan.pp'"), std::string::npos);
  // 32 layers on 8 ranks, but 30 do not divide: each rank's two stages are L / pp layers.
  p = dualpipe_plan();
  ModelSpec odd = x.m;
  odd.layers = 30;
  EXPECT_EQ(check_plan(odd, x.c, x.j, p, 8), RejectReason::schedule_shape);
  EXPECT_NE(check_plan_status(odd, x.c, x.j, p, 8, "plan.json").message().find("divisible by pp = 8"), std::string::npos);
  // Micro-batches: even (half each way) and at least 2 * pp.
  TrainingJob j = x.j;
  j.global_batch = 14;
  EXPECT_EQ(check_plan(x.m, x.c, j, p, 8), RejectReason::schedule_shape);
  EXPECT_NE(check_plan_status(x.m, x.c, j, p, 8, "plan.json").message().find("at least 2*pp = 16"), std::string::npos);
  j.global_batch = 17;
  EXPECT_EQ(check_plan(x.m, x.c, j, p, 8), RejectReason::schedule_shape);
  EXPECT_NE(check_plan_status(x.m, x.c, j, p, 8, "plan.json").message().find("an even number"), std::string::npos);
  j.global_batch = 16;
  EXPECT_EQ(check_plan(x.m, x.c, j, p, 8), RejectReason::none);
}

// The sweep takes DualPipe when asked (pp even, vpp 2), no framework the planner knows runs
// it, and its plans cost what their rank-equivalent DualPipeV plans cost but the one more
// hand-over across the middle each way.
TEST(DualPipe, SweepEnumeratesItAndNoFrameworkRunsIt) {
  Job x = llama3_8b_on_8();
  SweepSpace space;
  space.pp = {4, 8};
  space.vpp = {2};
  space.schedule = {Schedule::dualpipe};
  SweepOptions opt;
  opt.threads = 2;
  opt.keep_all = true;
  const SweepResult r = run_sweep(x.m, x.c, x.j, 8, space, opt);
  int fitting = 0;
  for (const PlanResult& pr : r.all) {
    if (pr.plan.pp == 1) continue;
    EXPECT_EQ(pr.plan.schedule, Schedule::dualpipe);
    if (pr.reason != RejectReason::none) continue;
    ++fitting;
    // The rank-equivalent DualPipeV plan written out by hand (half the ranks per pipeline,
    // twice the replicas, half the micro-batches each), not taken from cost_plan, so the
    // comparisons below check the mapping the cost entry points apply.
    ParallelPlan v = pr.plan;
    v.schedule = Schedule::dualpipev;
    v.pp = pr.plan.pp / 2;
    v.dp = pr.plan.dp * 2;
    v.grad_accum = pr.plan.grad_accum / 2;
    const MemoryPeak a = estimate_memory_peak(x.m, x.c, x.j, pr.plan, memory_inputs(x.m, x.c.gpu, x.j, pr.plan));
    const MemoryPeak b = estimate_memory_peak(x.m, x.c, x.j, v, memory_inputs(x.m, x.c.gpu, x.j, v));
    EXPECT_EQ(a.total, b.total);
    EXPECT_EQ(pr.peak_bytes, a.total);  // the sweep's inputs cached per shape give the same bits
    const StepTime ta = estimate_time(x.m, x.c, x.j, pr.plan), tb = estimate_time(x.m, x.c, x.j, v);
    EXPECT_EQ(pr.step_time_s, ta.total);
    EXPECT_GT(ta.pp_comm, tb.pp_comm);
    EXPECT_DOUBLE_EQ(ta.total - ta.pp_comm, tb.total - tb.pp_comm);
  }
  EXPECT_GT(fitting, 0);
  const PresetRegistry& reg = shipped_presets();
  ParallelPlan p = dualpipe_plan();
  for (const char* name : {"megatron", "nemo", "deepspeed", "mindformers", "torchtitan"}) {
    const FrameworkSpec fw = *reg.framework(name);
    EXPECT_GE(framework_refusal(fw, x.m, x.j, p), 0) << name;
  }
}

}  // namespace
}  // namespace llmplan
