// Arbitrary per-stage layer counts (PipelineSplit::custom, plan.stage_layers): the layer
// bookkeeping against hand-listed layouts, the plan file's checks, the memory model's
// heaviest stage against a hand computation, the time model's slowest stage, and the
// balanced split the sweep proposes where neither even nor the embedding/loss split is legal.
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/cost/time_model.h"
#include "planner/search/sweep.h"
#include "planner/spec/spec_json.h"
#include "simulator/step_simulator.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

using testing::shipped_presets;

ParallelPlan custom(int pp, int vpp, std::vector<int> counts) {
  ParallelPlan p;
  p.pp = pp, p.vpp = vpp;
  p.schedule = vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  p.pipeline_split = PipelineSplit::custom;
  p.stage_layers = std::move(counts);
  return p;
}

// pp 3 x vpp 2, virtual stages v = chunk*3 + stage holding 1, 3, 2 | 2, 1, 1 of 10 layers:
// layers 0 | 1-3 | 4-5 | 6-7 | 8 | 9. Stage 0 holds v0 + v3 = 3 layers, stage 1 v1 + v4 = 4
// (layers 1, 2, 3 then 8), stage 2 v2 + v5 = 3.
TEST(CustomSplit, StageBookkeepingFollowsTheCounts) {
  const ParallelPlan p = custom(3, 2, {1, 3, 2, 2, 1, 1});
  ASSERT_TRUE(pipeline_split_ok(10, p));
  EXPECT_EQ(virtual_stage_layers(10, p, 1), 3);
  EXPECT_EQ(first_layer_of_virtual_stage(10, p, 3), 6);
  EXPECT_EQ(first_layer_of_virtual_stage(10, p, 5), 9);
  EXPECT_EQ(pp_stage_layers(10, p, 0), 3);
  EXPECT_EQ(pp_stage_layers(10, p, 1), 4);
  EXPECT_EQ(pp_stage_layers(10, p, 2), 3);
  EXPECT_EQ(first_layer_of_pp_stage(10, p, 2), 7);
  const std::vector<int> stage1 = {1, 2, 3, 8};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(stage_layer_global_index(10, p, 1, i), stage1[static_cast<size_t>(i)]) << i;
  // The counts must hold the model: 11 layers, a stage of 0, or 5 counts for 6 stages fail.
  EXPECT_FALSE(pipeline_split_ok(11, p));
  EXPECT_FALSE(pipeline_split_ok(10, custom(3, 2, {0, 4, 2, 2, 1, 1})));
  EXPECT_FALSE(pipeline_split_ok(10, custom(3, 2, {2, 4, 2, 1, 1})));
}

TEST(CustomSplit, AWrongSplitNamesTheFieldAndTheNumbers) {
  const PresetRegistry& reg = shipped_presets();
  const ModelSpec m = *reg.model("llama3-8b");  // 32 layers
  const ClusterSpec c = *reg.cluster_for_gpu("h100-sxm");
  TrainingJob j;
  j.global_batch = 32;
  ParallelPlan p = custom(4, 1, {8, 8, 8, 7});
  p.dp = 2, p.micro_batch = 1;
  EXPECT_EQ(check_plan(m, c, j, p, 8), RejectReason::vpp_layers);
  const Status s = check_plan_status(m, c, j, p, 8, "plan.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("plan.stage_layers"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("summing to 31"), std::string::npos) << s.message();
  p.stage_layers = {6, 9, 9, 8};
  EXPECT_EQ(check_plan(m, c, j, p, 8), RejectReason::none);
  // The V schedules cost two equal chunks per rank: a custom split is refused there.
  ParallelPlan v = custom(4, 2, {4, 4, 4, 4, 4, 4, 4, 4});
  v.dp = 2, v.micro_batch = 1, v.schedule = Schedule::zbv;
  EXPECT_EQ(check_plan(m, c, j, v, 8), RejectReason::schedule_shape);
}

TEST(CustomSplit, PlanFileReadsWritesAndRefusesBadCounts) {
  const ParallelPlan p = custom(2, 2, {3, 5, 4, 4});
  const nlohmann::json j = to_json(p);
  ASSERT_EQ(j.at("pipeline_split"), "custom");
  const Result<ParallelPlan> back = plan_from_json(j, "plan.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->stage_layers, p.stage_layers);
  EXPECT_EQ(back->pipeline_split, PipelineSplit::custom);
  // An even plan's file has no stage_layers.
  EXPECT_FALSE(to_json(ParallelPlan{}).contains("stage_layers"));

  auto error_of = [](nlohmann::json f) {
    const Result<ParallelPlan> r = plan_from_json(f, "plan.json");
    return r.ok() ? std::string() : r.status().message();
  };
  nlohmann::json missing = j;
  missing.erase("stage_layers");
  EXPECT_NE(error_of(missing).find("'plan.stage_layers'"), std::string::npos) << error_of(missing);
  nlohmann::json short_list = j;
  short_list["stage_layers"] = {3, 5, 4};
  EXPECT_NE(error_of(short_list).find("pp*vpp = 4"), std::string::npos) << error_of(short_list);
  nlohmann::json zero = j;
  zero["stage_layers"] = {3, 0, 4, 4};
  EXPECT_NE(error_of(zero).find("the entry 0"), std::string::npos) << error_of(zero);
  nlohmann::json text = j;
  text["stage_layers"] = {3, "5", 4, 4};
  EXPECT_FALSE(error_of(text).empty());
  nlohmann::json stray = to_json(ParallelPlan{});
  stray["stage_layers"] = {1};
  EXPECT_NE(error_of(stray).find("only with pipeline_split custom"), std::string::npos) << error_of(stray);
}

// Llama 3.1 405B (126 layers) on pp 16 as Megatron's --decoder-first-pipeline-num-layers 5
// --decoder-last-pipeline-num-layers 9: 5, fourteen stages of 8, 9. By hand, per layer on a
// TP rank of 8: q, o (h x h), k, v (h x 8*128), gate, up, down (h x 53248) split over tp, two
// norms of h whole; the embedding and the LM head (vocab x h, untied) split over tp; the final
// norm (h) on the last stage. bf16 weights, 2 B each.
TEST(CustomSplit, HeaviestStageWeightsByHand) {
  const PresetRegistry& reg = shipped_presets();
  const ModelSpec m = *reg.model("llama3-405b");
  ASSERT_EQ(m.layers, 126);
  const ClusterSpec c = *reg.cluster_for_gpu("h100-sxm");
  TrainingJob j;
  j.seq_len = 8192;
  j.global_batch = 512;
  std::vector<int> counts(16, 8);
  counts.front() = 5, counts.back() = 9;
  ParallelPlan p = custom(16, 1, counts);
  p.dp = 64, p.tp = 8, p.sp = true, p.micro_batch = 1, p.grad_accum = 8, p.zero = 1;
  p.recompute = Recompute::full;
  ASSERT_EQ(check_plan(m, c, j, p, 64 * 8 * 16), RejectReason::none);
  const double h = 16384, kv = 8 * 128.0, f = 53248, vocab = static_cast<double>(m.vocab);
  const double per_layer_rank = (2 * h * h + 2 * h * kv + 3 * h * f) / 8 + 2 * h;
  const double table_rank = vocab * h / 8;
  const auto weights = [&](int s) { return estimate_stage_memory(m, c, j, p, s, MemoryOptions{}).bytes[static_cast<int>(MemoryItem::weights)]; };
  EXPECT_EQ(estimate_stage_memory(m, c, j, p, 15, MemoryOptions{}).layers, 9);
  EXPECT_NEAR(weights(0), (5 * per_layer_rank + table_rank) * 2, 1e-9 * weights(0));
  EXPECT_NEAR(weights(7), 8 * per_layer_rank * 2, 1e-9 * weights(7));
  EXPECT_NEAR(weights(15), (9 * per_layer_rank + table_rank + h) * 2, 1e-9 * weights(15));
}

// The slowest stage sets the pace. Llama 3 8B cut to 8 layers on pp 2: the last stage also
// runs the LM head, whose 2·h·V = 2·4096·128256 = 1.05 GFLOP a token is about 2.4 layers'
// forward (2 x 218M parameters = 0.44 GFLOP, plus attention). So, with H the head in layers:
// 2 + 6 paces at 6 + H, slower than even's 4 + H; 6 + 2 at max(6, 2 + H) = 6, a little faster;
// 5 + 3 at max(5, 3 + H) ~ 5.4, the fastest, which is why tuned recipes give the last stage
// fewer layers.
TEST(CustomSplit, TheSlowestStageSetsThePace) {
  const PresetRegistry& reg = shipped_presets();
  ModelSpec m = *reg.model("llama3-8b");
  m.layers = 8;
  const ClusterSpec c = *reg.cluster_for_gpu("h100-sxm");
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 64;
  auto step = [&](std::vector<int> counts) {
    ParallelPlan q = counts.empty() ? ParallelPlan{} : custom(2, 1, counts);
    q.pp = 2, q.dp = 4, q.micro_batch = 1, q.grad_accum = 16;
    EXPECT_EQ(check_plan(m, c, j, q, 8), RejectReason::none);
    return estimate_time(m, c, j, q, Efficiency{}).total;
  };
  const double even = step({}), heavy_last = step({2, 6}), heavy_first = step({6, 2}), balanced = step({5, 3});
  EXPECT_GT(heavy_last, 1.2 * even);
  EXPECT_LT(heavy_first, even);
  EXPECT_GT(heavy_first, 0.9 * even);
  EXPECT_LT(balanced, heavy_first);
  // The same counts as the even split cost the same.
  EXPECT_DOUBLE_EQ(step({4, 4}), even);
  ParallelPlan same = custom(2, 1, {4, 4}), plain;
  same.dp = plain.dp = 4, plain.pp = 2;
  EXPECT_DOUBLE_EQ(estimate_memory(m, c, j, same).worst.total, estimate_memory(m, c, j, plain).worst.total);
}

// Megatron-Core's embedding/loss split with one slot per virtual stage (NVIDIA's Llama 3.1
// 405B MXFP8 recipe on 256 GB200s: tp 4, pp 16 x vpp 8, 126 + 2 = 128 slots): the first
// chunk holds the embedding alone and the last the loss alone, so stage 0 and stage 15
// keep 8 - 1 = 7 layers and the other stages 8. Without interleaving one slot per stage
// leaves a stage nothing, which stays refused. The simulator plays the empty chunks as
// instant passes and lands within 5% of the analytic step.
TEST(CustomSplit, EmbeddingAndLossChunksWithoutLayers) {
  const PresetRegistry& reg = shipped_presets();
  const ModelSpec m = *reg.model("llama3.1-405b");
  ParallelPlan p;
  p.pp = 16, p.vpp = 8, p.tp = 4, p.sp = true, p.dp = 4, p.micro_batch = 1;
  p.schedule = Schedule::interleaved;
  p.pipeline_split = PipelineSplit::account_embedding_loss;
  ASSERT_TRUE(pipeline_split_ok(126, p));
  EXPECT_EQ(virtual_stage_layers(126, p, 0), 0);
  EXPECT_EQ(virtual_stage_layers(126, p, 127), 0);
  for (int v = 1; v < 127; ++v) EXPECT_EQ(virtual_stage_layers(126, p, v), 1) << v;
  EXPECT_EQ(first_layer_of_virtual_stage(126, p, 1), 0);
  EXPECT_EQ(first_layer_of_virtual_stage(126, p, 126), 125);
  EXPECT_EQ(pp_stage_layers(126, p, 0), 7);
  EXPECT_EQ(pp_stage_layers(126, p, 15), 7);
  EXPECT_EQ(pp_stage_layers(126, p, 7), 8);
  ParallelPlan flat = p;
  flat.pp = 128, flat.vpp = 1;
  EXPECT_FALSE(pipeline_split_ok(126, flat));

  const ClusterSpec c = cluster_with_gpus(*reg.cluster_for_gpu("gb200"), 256);
  TrainingJob j;
  j.seq_len = 8192;
  j.global_batch = 1536;
  j.fp8 = Fp8Recipe::mxfp8;
  p.grad_accum = 384;
  ASSERT_EQ(check_plan(m, c, j, p, 256), RejectReason::none);
  const double analytic = estimate_time(m, c, j, p, Efficiency{}).total;
  SimOptions o;
  o.record_events = o.record_memory = false;
  const Result<SimResult> sim = simulate_step(m, c, j, p, o);
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  EXPECT_NEAR(sim->total / analytic, 1.0, 0.05);
}

// DeepSeek-V3's 61 layers on pp 8 x vpp 2: neither 61 nor 63 divides by 16. The balanced split
// counts the embedding and the loss as a layer each: 63 slots are 3 a stage with 15 over,
// one each on virtual stages 1..15, so v0 holds 4 - 1 - 1 = 2, v1..v14 hold 4, v15 4 - 1 = 3.
TEST(CustomSplit, BalancedSplitWhereNeitherOtherIsLegal) {
  std::vector<int> want(16, 4);
  want.front() = 2, want.back() = 3;
  EXPECT_EQ(balanced_stage_layers(61, 0, 8, 2), want);
  EXPECT_EQ(std::accumulate(want.begin(), want.end(), 0), 61);
  // With DeepSeek-V3's one MTP block counted beside the loss: 64 slots of 4, the first
  // virtual stage 4 - 1 = 3 layers, the last 4 - 2 = 2.
  std::vector<int> mtp(16, 4);
  mtp.front() = 3, mtp.back() = 2;
  EXPECT_EQ(balanced_stage_layers(61, 1, 8, 2), mtp);
  EXPECT_TRUE(balanced_stage_layers(64, 0, 8, 2).empty());   // even is legal
  EXPECT_TRUE(balanced_stage_layers(62, 0, 8, 2).empty());   // 64 slots: the embedding/loss split is
  EXPECT_TRUE(balanced_stage_layers(126, 0, 16, 1).empty());  // vpp 1: even always is
  EXPECT_TRUE(balanced_stage_layers(29, 0, 8, 2).empty());   // 31 slots < 32: a stage would be empty

  // The sweep offers it: every pp 8 x vpp 2 plan of a 61-layer model is custom with those counts.
  const PresetRegistry& reg = shipped_presets();
  ModelSpec m = *reg.model("llama3-8b");
  m.layers = 61;
  ClusterSpec c = *reg.cluster_for_gpu("h100-sxm");
  c.nodes = 8;
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 512;
  SweepSpace space;
  space.pp = {8};
  space.vpp = {2};
  space.tp = {1};
  space.cp = {1};
  space.micro_batch = {1};
  SweepOptions opt;
  opt.threads = 1;
  const SweepResult r = run_sweep(m, c, j, 64, space, opt);
  ASSERT_FALSE(r.top.empty());
  for (const PlanResult& pr : r.top) {
    EXPECT_EQ(pr.plan.pipeline_split, PipelineSplit::custom);
    EXPECT_EQ(pr.plan.stage_layers, want);
  }
}

}  // namespace
}  // namespace llmplan
