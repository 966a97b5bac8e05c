// Data-parallel gradient reduction overlapping backward, against the closed form of the
// bucketed overlap, and the engine's link sharing.
//
// Setup: one stage of L layers, t_b backward per layer, m micro-batches; each layer's
// gradients fill exactly one bucket, reduced (all-reduce, c seconds each) as the last
// micro-batch's backward produces them, one after another on the DP stream.
//  - c <= t_b (hidden): every bucket but the last is reduced while backward continues;
//    the step is the no-DP step plus the last bucket, c.
//  - c > t_b (link too slow): the DP stream never idles from the first bucket (ready t_b
//    after the last backward starts) on, so exposed = L c - (L - 1) t_b.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "planner/cost/plan_check.h"
#include "planner/cost/time_model.h"
#include "sim_fixtures.h"
#include "simulator/event_engine.h"
#include "simulator/step_simulator.h"

namespace llmplan {
namespace {

struct DpRun {
  SimResult with_dp, without_dp;
  double c = 0;  // one bucket's all-reduce, s
};

DpRun run_dp(double link_bandwidth) {
  const ModelSpec m = testing::gpt3_1_3b();  // 24 layers
  ClusterSpec cl = testing::dgx_a100(2);
  cl.gpus_per_node = 1;  // DP crosses nodes
  const TrainingJob j = testing::job(2048, 4);
  const ParallelPlan p = testing::plan(2, 1, 1, 1, Schedule::one_f_one_b, 1, 4);  // m = 2
  SimCosts costs = default_costs(m, cl, j, p);
  testing::make_uniform(&costs, 1.0, 2.0);
  SimOptions opt;
  DpRun out;
  auto nodp = simulate_step(m, cl, j, p, costs, opt);
  EXPECT_TRUE(nodp.ok());
  out.without_dp = *nodp;

  costs.dp_group = 2;
  costs.zero = 0;
  costs.bucket_bytes = 1e6;
  costs.dp_link = {link_bandwidth, 0.0};
  costs.efficiency.network = 1.0;
  for (StageCost& st : costs.stages) {
    for (LayerCost& l : st.layers) l.grad_bytes = 1e6;
    st.embedding_grad_bytes = st.head_grad_bytes = 0;
  }
  out.c = allreduce_time(1e6, 2, costs.dp_link, costs.efficiency);
  auto dp = simulate_step(m, cl, j, p, costs, opt);
  EXPECT_TRUE(dp.ok());
  out.with_dp = *dp;
  return out;
}

// The planner's DpStep for run_dp's collectives: 24 all-reduces of 1e6 bytes, c seconds
// each, once per step; the last bucket is never hidden.
DpStep buckets_as_the_planner_sees_them(double c, double link_bandwidth, const Efficiency& e) {
  DpStep d;
  d.group = 2;
  d.link = {link_bandwidth, 0.0};
  d.grads = {DpKind::allreduce, 1e6, 24, 24 * c};
  d.last_bucket = p2p_time(1e6, d.link, e);
  return d;
}

TEST(DpOverlap, HiddenAllReduceLeavesOnlyTheLastBucket) {
  const DpRun r = run_dp(2e6);  // c = 0.5 s < t_b = 2 s
  ASSERT_DOUBLE_EQ(r.c, 0.5);
  EXPECT_DOUBLE_EQ(r.without_dp.total, 2 * 24 * (1.0 + 2.0));
  EXPECT_DOUBLE_EQ(r.with_dp.total, r.without_dp.total + r.c);
  EXPECT_DOUBLE_EQ(r.with_dp.breakdown.dp_comm, r.c);
  // The analytic model's exposed DP time for the same collectives (planner dp_exposed_time
  // with overlap = 1): max(0, L c - overlap L t_b) + p2p_time(last bucket); with dp = 2
  // and no latency an all-reduce of one bucket takes what a p2p of it does, so the two
  // agree here.
  Efficiency e;
  e.network = 1.0;
  e.overlap = 1.0;
  const double closed_form = std::max(0.0, 24 * r.c - 24 * 2.0) + p2p_time(1e6, {2e6, 0.0}, e);
  EXPECT_DOUBLE_EQ(r.with_dp.breakdown.dp_comm, closed_form);
  EXPECT_DOUBLE_EQ(r.with_dp.breakdown.dp_comm, dp_exposed_time(buckets_as_the_planner_sees_them(r.c, 2e6, e), 2, 24 * 1.0, 24 * 2.0, e));
}

TEST(DpOverlap, SlowLinkExposesWhatTheBucketFormulaSays) {
  const DpRun r = run_dp(2.5e5);  // c = 4 s > t_b = 2 s
  ASSERT_DOUBLE_EQ(r.c, 4.0);
  const double exposed = 24 * r.c - 23 * 2.0;
  EXPECT_DOUBLE_EQ(r.with_dp.total - r.without_dp.total, exposed);
  EXPECT_DOUBLE_EQ(r.with_dp.breakdown.dp_comm, exposed);
  // Every bucket is reduced during or after the last micro-batch's backward.
  const double last_backward_start = 24 * 3.0 + 24 * 1.0;
  int buckets = 0;
  for (const SimEvent& e : r.with_dp.events) {
    if (e.kind != EventKind::dp_grad_sync) continue;
    ++buckets;
    EXPECT_GE(e.start, last_backward_start + 2.0);
  }
  EXPECT_EQ(buckets, 24);
  Efficiency e;
  e.network = 1.0;
  e.overlap = 1.0;
  const double analytic = std::max(0.0, 24 * r.c - 24 * 2.0) + p2p_time(1e6, {2.5e5, 0.0}, e);
  EXPECT_DOUBLE_EQ(analytic, dp_exposed_time(buckets_as_the_planner_sees_them(r.c, 2.5e5, e), 2, 24 * 1.0, 24 * 2.0, e));
  std::printf("DP exposed, slow link: simulated %.3f s, analytic formula %.3f s (overlap = 1)\n", exposed, analytic);
}

// Buckets smaller than a layer's gradients: each leaves as soon as the backward has
// produced its last byte (a layer's backward produces its bytes evenly over its time).
TEST(DpOverlap, BucketsLeaveAsTheirLastByteIsProduced) {
  const ModelSpec m = testing::gpt3_1_3b();  // 24 layers
  ClusterSpec cl = testing::dgx_a100(2);
  cl.gpus_per_node = 1;
  const TrainingJob j = testing::job(2048, 2);
  const ParallelPlan p = testing::plan(2, 1, 1, 1, Schedule::one_f_one_b, 1, 2);  // m = 1
  SimCosts costs = default_costs(m, cl, j, p);
  testing::make_uniform(&costs, 1.0, 2.0);
  costs.dp_group = 2;
  costs.zero = 0;
  costs.bucket_bytes = 1e6;
  costs.dp_link = {1e9, 0.0};  // 1 ms per bucket: never the bottleneck
  costs.efficiency.network = 1.0;
  for (StageCost& st : costs.stages) {
    for (LayerCost& l : st.layers) l.grad_bytes = 2e6;  // two buckets per layer
    st.embedding_grad_bytes = st.head_grad_bytes = 0;
  }
  auto r = simulate_step(m, cl, j, p, costs);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<double> starts;
  for (const SimEvent& e : r->events)
    if (e.kind == EventKind::dp_grad_sync) starts.push_back(e.start);
  ASSERT_EQ(starts.size(), 48u);
  std::sort(starts.begin(), starts.end());
  const double backward_start = 24 * 1.0;
  for (size_t i = 0; i < starts.size(); ++i) EXPECT_NEAR(starts[i], backward_start + (i + 1) * 1.0, 1e-9) << "bucket " << i;
  // Splitting the backward at bucket boundaries changes no compute time.
  EXPECT_NEAR(r->breakdown.compute, 24 * 3.0, 1e-9);
  EXPECT_NEAR(r->total, 24 * 3.0 + 1e-3, 1e-9);
}

// ZeRO-3 with one layer of prefetch: every gather but the first hides behind the previous
// layer's compute, every reduce-scatter but the last behind the next layer's backward
// (gathers and reduce-scatters share the link while they overlap, and still fit).
TEST(DpOverlap, Zero3PrefetchExposesFirstGatherAndLastReduceScatter) {
  const ModelSpec m = testing::gpt3_1_3b();  // 24 layers
  ClusterSpec cl = testing::dgx_a100(2);
  cl.gpus_per_node = 1;
  const TrainingJob j = testing::job(2048, 2);
  ParallelPlan p = testing::plan(2, 1, 1, 1, Schedule::one_f_one_b, 1, 2);  // m = 1
  p.zero = 3;
  SimCosts costs = default_costs(m, cl, j, p);
  testing::make_uniform(&costs, 1.0, 2.0);
  costs.dp_group = 2;
  costs.zero = 3;
  costs.dp_link = {1e6, 0.0};
  costs.efficiency.network = 1.0;
  for (StageCost& st : costs.stages) {
    for (LayerCost& l : st.layers) l.grad_bytes = l.weight_bytes = 1e6;  // 0.5 s each way
    st.embedding_grad_bytes = st.head_grad_bytes = st.embedding_weight_bytes = st.head_weight_bytes = 0;
  }
  const double g = allgather_time(1e6, 2, costs.dp_link, costs.efficiency);
  ASSERT_DOUBLE_EQ(g, 0.5);
  auto r = simulate_step(m, cl, j, p, costs);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->total, g + 24 * (1.0 + 2.0) + g);
  EXPECT_DOUBLE_EQ(r->breakdown.dp_comm, 2 * g);
  int gathers = 0, reduces = 0;
  for (const SimEvent& e : r->events) {
    gathers += e.kind == EventKind::dp_param_gather;
    reduces += e.kind == EventKind::dp_grad_sync;
  }
  EXPECT_EQ(gathers, 2 * 24);  // before every forward and every backward
  EXPECT_EQ(reduces, 24);
}

// default_costs takes the DP/ZeRO collectives from the planner's dp_step: the DP x CP
// group's link, the gradient bytes the stack reduces (the gradient buffer's 16 bits by
// default; fp32 under a stack that upcasts for the reduction, Efficiency::grad_reduce_fp32),
// DDP's 25 MiB buckets, ZeRO-1 buckets of max(40M, 1M x dp) parameters, and one collective
// per layer for ZeRO-2.
TEST(DpOverlap, DefaultCostsUseThePlannersCollectives) {
  const ModelSpec m = testing::llama2_7b();
  const ClusterSpec cl = testing::dgx_a100(2);
  const TrainingJob j = testing::job(4096, 16);
  ASSERT_GT(bytes_per_param(j).master, 0);  // mixed precision
  ASSERT_EQ(bytes_per_param(j).gradients, 2);  // 16-bit gradients (the DeepSpeed convention)
  for (int fp32 : {0, 1}) {
    for (int zero : {0, 1, 2}) {
      Efficiency e;
      e.grad_reduce_fp32 = fp32;
      ParallelPlan p = testing::plan(8, 1, 1, 1, Schedule::one_f_one_b, 1, 16);
      p.cp = 2;
      p.zero = zero;
      SCOPED_TRACE("zero " + std::to_string(zero) + " fp32 reduction " + std::to_string(fp32));
      ASSERT_EQ(check_plan(m, cl, j, p, p.world_size(), true), RejectReason::none);
      const SimCosts sc = default_costs(m, cl, j, p, e);
      EXPECT_EQ(sc.dp_group, 16);
      EXPECT_EQ(sc.dp_link.bandwidth, dp_group_link(cl, p).bandwidth);
      EXPECT_EQ(sc.dp_link.bandwidth, 8 * cl.inter_node_bandwidth);  // 8 ranks of the 16 per node: 8 NICs
      EXPECT_EQ(sc.dp_tier, LinkTier::inter_node);
      const double grad_bytes = fp32 ? 4 : 2;
      const double bucket = zero == 0 ? 25.0 * 1024 * 1024 : zero == 1 ? 40e6 * grad_bytes : 0;
      EXPECT_EQ(sc.bucket_bytes, bucket);
      EXPECT_EQ(sc.gather_bucket_bytes, zero == 1 ? 40e6 * 2 : 0);
      const LayerCost& l = sc.stages[0].layers[0];
      EXPECT_DOUBLE_EQ(l.grad_bytes, grad_bytes / 2 * l.trainable_weight_bytes);  // against bf16 weights
    }
  }
}

// Two collectives crossing the same tier of the same rank at once share it; a collective
// on the other tier does not slow them.
TEST(EventEngine, LinkSharingDividesBandwidth) {
  EventEngine eng(2);
  EngineTask a;
  a.stage = 0;
  a.stream = Stream::dp_reduce;
  a.kind = EventKind::dp_grad_sync;
  a.transfer = 1.0;
  a.tier = LinkTier::inter_node;
  EngineTask b = a;
  b.stream = Stream::dp_gather;
  b.kind = EventKind::dp_param_gather;
  EngineTask c = a;
  c.stream = Stream::tp;
  c.kind = EventKind::tp_comm;
  c.tier = LinkTier::intra_node;
  EngineTask d = a;  // a send from stage 1 into stage 0: shares stage 0's incoming direction
  d.stage = 1;
  d.peer = 0;
  d.stream = Stream::pp_send_prev;
  d.kind = EventKind::pp_send;
  d.transfer = 0.5;
  d.latency = 1.5;  // joins when a and b are done
  const int ia = eng.add(a), ib = eng.add(b), ic = eng.add(c), id = eng.add(d);
  ASSERT_TRUE(eng.run(true).is_ok());
  // 0 to 1.5 s: a and b share both directions of stage 0's inter-node link (rate 1/2),
  // 0.25 s of transfer left each. From 1.5 s d also enters stage 0's incoming direction:
  // three transfers there, rate 1/3, so a and b end at 1.5 + 0.75; d has moved 0.25 by
  // then and finishes the other 0.25 alone. c (intra-node) is never slowed.
  EXPECT_NEAR(eng.tasks()[ia].end, 2.25, 1e-12);
  EXPECT_NEAR(eng.tasks()[ib].end, 2.25, 1e-12);
  EXPECT_DOUBLE_EQ(eng.tasks()[ic].end, 1.0);
  EXPECT_NEAR(eng.tasks()[id].end, 2.5, 1e-12);
}

TEST(EventEngine, WithoutSharingEachTransferHasTheLink) {
  EventEngine eng(1);
  EngineTask a;
  a.stage = 0;
  a.stream = Stream::dp_reduce;
  a.transfer = 1.0;
  EngineTask b = a;
  b.stream = Stream::dp_gather;
  const int ia = eng.add(a), ib = eng.add(b);
  ASSERT_TRUE(eng.run(false).is_ok());
  EXPECT_DOUBLE_EQ(eng.tasks()[ia].end, 1.0);
  EXPECT_DOUBLE_EQ(eng.tasks()[ib].end, 1.0);
}

TEST(EventEngine, CycleIsAnError) {
  EventEngine eng(1);
  EngineTask a;
  a.stage = 0;
  a.latency = 1;
  const int x = eng.add(a), y = eng.add(a);
  eng.depend(y, x);  // y follows x on the stream, and x waits for y
  const Status s = eng.run(true);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.kind(), ErrorKind::runtime);
}

}  // namespace
}  // namespace llmplan
