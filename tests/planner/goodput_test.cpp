// Goodput, cost and energy (planner/cost/goodput.h, train_budget.h), the reliability and
// price data (planner/io/economics.h) and compute-optimal sizing (planner/search/
// compute_optimal.h), against closed forms computed by hand, numerical optima, the
// published parameter counts and the papers' tables.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "planner/cost/goodput.h"
#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/cost/time_model.h"
#include "planner/cost/train_budget.h"
#include "planner/io/economics.h"
#include "planner/io/presets.h"
#include "planner/search/compute_optimal.h"
#include "planner/spec/recipe.h"
#include "tests/model_fixtures.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

using llmplan::testing::shipped_presets;

// ---- Young / Daly, by hand: delta = 60 s, M = 1 h, R = 10 min.
//   Young: sqrt(2 * 60 * 3600) = 657.267 s.
//   Daly:  x = 60 / 7200; 657.267 * (1 + sqrt(x)/3 + x/9) - 60 = 617.876 s.
//   f:     617.876 / (3600 e^(600/3600) (e^((617.876 + 60)/3600) - 1)) = 0.701195.
TEST(Goodput, YoungAndDalyIntervalsAreTheClosedForms) {
  EXPECT_NEAR(young_interval_s(60, 3600), 657.267, 1e-3);
  EXPECT_NEAR(daly_interval_s(60, 3600), 617.876, 1e-3);
  EXPECT_NEAR(productive_fraction(617.876, 60, 600, 3600), 0.701195, 1e-5);
  // Daly: the interval is the MTBF once a checkpoint takes twice as long.
  EXPECT_DOUBLE_EQ(daly_interval_s(7200, 3600), 3600);
}

// Daly's interval is an approximation of the optimum of his complete model: a numerical
// maximisation of productive_fraction (golden section) finds no better interval.
TEST(Goodput, DalyIntervalIsTheOptimumOfTheCompleteModel) {
  for (auto [delta, restart, mtbf] : {std::tuple{60.0, 600.0, 3600.0}, {5.0, 900.0, 11000.0}, {300.0, 1800.0, 86400.0}}) {
    auto f = [&](double tau) { return productive_fraction(tau, delta, restart, mtbf); };
    double lo = 1, hi = 4 * mtbf;
    const double g = (std::sqrt(5.0) - 1) / 2;
    for (int i = 0; i < 200; ++i) {
      const double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
      if (f(a) < f(b)) lo = a;  // the maximum lies right of a
      else hi = b;
    }
    const double tau_opt = (lo + hi) / 2;
    EXPECT_NEAR(daly_interval_s(delta, mtbf) / tau_opt, 1, 0.02) << delta;
    EXPECT_GE(f(daly_interval_s(delta, mtbf)), f(tau_opt) * (1 - 1e-4)) << delta;
  }
}

// Small delta and R against M: Daly's fraction is the first-order waste model, 1 - delta/tau -
// (R + tau/2)/M, to second order.
TEST(Goodput, FractionIsTheFirstOrderWasteForRareFailures) {
  const double delta = 10, restart = 100, mtbf = 1e6, tau = young_interval_s(delta, mtbf);
  const double first_order = 1 - delta / tau - (restart + tau / 2) / mtbf;
  EXPECT_NEAR(productive_fraction(tau, delta, restart, mtbf), first_order, 1e-4);
  // No failures: only the checkpoints cost.
  EXPECT_DOUBLE_EQ(productive_fraction(900, 100, 600, std::numeric_limits<double>::infinity()), 0.9);
}

// ---- Checkpoint size: Llama 2 7B has 6,738,415,616 parameters (HF safetensors); bf16 O2
// with AdamW keeps 2 (weights) + 4 (fp32 master) + 8 (m, v) bytes of each.
TEST(Goodput, CheckpointHoldsWeightsMasterAndOptimizerOnce) {
  const ModelSpec m = testing::llama2_7b();
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 8;
  p.zero = 1;
  const double n = 6'738'415'616.0;
  const CheckpointSize z1 = checkpoint_size(m, j, p);
  EXPECT_DOUBLE_EQ(z1.total_bytes, 14 * n);
  EXPECT_DOUBLE_EQ(z1.frozen_bytes, 0);
  EXPECT_DOUBLE_EQ(z1.write_bytes_per_rank, 14 * n / 8);
  // ZeRO-1: each rank holds the 16-bit weights whole and 1/8 of the fp32 states.
  EXPECT_DOUBLE_EQ(z1.rank_bytes, 2 * n + 12 * n / 8);
  // ZeRO-3: every state sharded, so the ranks together hold exactly one checkpoint.
  p.zero = 3;
  EXPECT_DOUBLE_EQ(checkpoint_size(m, j, p).rank_bytes * 8, 14 * n);
  // Offload moves states to the host; the checkpoint still holds them.
  p.offload_optimizer = true;
  EXPECT_DOUBLE_EQ(checkpoint_size(m, j, p).rank_bytes * 8, 14 * n);
}

// The rank's shard is the memory model's: its weights, master weights and optimizer states.
TEST(Goodput, CheckpointShardIsTheMemoryModelsStates) {
  const ModelSpec m = testing::llama2_7b();
  const ClusterSpec c = testing::dgx_a100(1);
  TrainingJob j;
  j.seq_len = 2048;
  j.global_batch = 64;
  for (int zero : {0, 1, 2, 3}) {
    for (int tp : {1, 2}) {
      ParallelPlan p;
      p.tp = tp;
      p.dp = 8 / tp;
      p.zero = zero;
      p.micro_batch = 1;
      p.grad_accum = static_cast<int>(j.global_batch / p.dp);
      ASSERT_EQ(check_plan(m, c, j, p, 8), RejectReason::none);
      const MemoryReport r = estimate_memory(m, c, j, p);
      const double states = r.worst.bytes[static_cast<int>(MemoryItem::weights)] + r.worst.bytes[static_cast<int>(MemoryItem::master_weights)] +
                            r.worst.bytes[static_cast<int>(MemoryItem::optimizer_states)];
      EXPECT_DOUBLE_EQ(checkpoint_size(m, j, p).rank_bytes, states) << "zero " << zero << " tp " << tp;
    }
  }
}

// LoRA writes the adapters and their optimizer states; the frozen base is read at restart.
TEST(Goodput, LoraCheckpointLeavesTheFrozenBaseOut) {
  const ModelSpec m = testing::llama2_7b();
  TrainingJob j;
  set_job_mode(JobMode::lora, &j);
  j.lora.rank = 8;
  j.lora.targets = {"q", "v"};
  j.seq_len = 2048;
  j.global_batch = 8;
  // r (in + out) per adapted projection: q and v are 4096 x 4096 in each of 32 layers.
  const double adapters = 32 * 2 * 8.0 * (4096 + 4096);
  const CheckpointSize s = checkpoint_size(m, j, ParallelPlan{});
  EXPECT_DOUBLE_EQ(s.total_bytes, 14 * adapters);
  EXPECT_DOUBLE_EQ(s.frozen_bytes, 2 * 6'738'415'616.0);
}

TEST(Goodput, CheckpointTimesSpreadOverNodesUnderTheStorageLimit) {
  CheckpointSize size;
  size.total_bytes = 1e12;
  size.frozen_bytes = 1e11;
  size.write_bytes_per_rank = 1e12 / 16;
  ClusterSpec c = testing::dgx_a100(2);
  StorageSpec s;
  s.write_per_node = 10e9;
  s.read_per_node = 20e9;
  CheckpointTimes t = checkpoint_times(size, c, 16, s);
  EXPECT_DOUBLE_EQ(t.persist_s, 1e12 / 20e9);
  EXPECT_DOUBLE_EQ(t.blocking_s, t.persist_s);
  EXPECT_DOUBLE_EQ(t.load_s, 1.1e12 / 40e9);
  s.aggregate_write = 5e9;
  s.aggregate_read = 5e9;
  t = checkpoint_times(size, c, 16, s);
  EXPECT_DOUBLE_EQ(t.persist_s, 1e12 / 5e9);
  EXPECT_DOUBLE_EQ(t.load_s, 1.1e12 / 5e9);
  s.async = true;
  EXPECT_DOUBLE_EQ(checkpoint_times(size, c, 16, s).blocking_s, 1e12 / 16 / c.host_bandwidth);
}

// ---- The failure data: Llama 3's 54-day snapshot on 16,384 GPUs (2,048 nodes): 268
// interruptions in a GPU, 151 elsewhere, 47 planned (data/reliability/failures.json).
TEST(Goodput, ShippedFailureRatesAreTheLlama3Counts) {
  Result<EconomicsData> d = load_economics(LLMPLAN_SOURCE_ROOT, shipped_presets());
  ASSERT_TRUE(d.ok()) << d.status().message();
  const FailureSource* f = d->failure_source(d->default_failure_source);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->unexpected(), 419);
  const double hours = 54 * 24.0;
  EXPECT_NEAR(f->rates.per_gpu_hour, 268 / (16384 * hours), 1e-12);
  EXPECT_NEAR(f->rates.per_node_hour, 151 / (2048 * hours), 1e-12);
  EXPECT_NEAR(f->rates.planned_per_node_hour, 47 / (2048 * hours), 1e-12);
  // The same job: one unexpected interruption every 54 x 24 / 419 = 3.093 hours.
  EXPECT_NEAR(job_mtbf_s(f->rates, 16384, 8) / 3600, 54 * 24.0 / 419, 1e-9);
}

// The Llama 3 405B job itself (Dubey et al. 2024, sec. 3.3): 16,384 H100s as TP 8, PP 16,
// DP 128 at 8K sequences and 16M tokens a step; Tectonic storage at 2 TB/s sustained
// (sec. 3.3.1); the paper's interruption rate; "higher than 90% effective training time".
TEST(Goodput, Llama3JobReachesTheEffectiveTrainingTimeThePaperReports) {
  const PresetRegistry& reg = shipped_presets();
  Result<EconomicsData> d = load_economics(LLMPLAN_SOURCE_ROOT, reg);
  ASSERT_TRUE(d.ok()) << d.status().message();
  const ModelSpec m = *reg.model("llama3.1-405b");
  ClusterSpec c = reg.cluster("dgx-h100")->cluster;
  c.nodes = 2048;
  TrainingJob j;
  j.seq_len = 8192;
  j.global_batch = 2048;
  ParallelPlan p;
  p.tp = 8;
  p.sp = true;
  p.pp = 16;
  p.dp = 128;
  p.zero = 1;
  p.micro_batch = 1;
  p.grad_accum = 16;
  p.pipeline_split = PipelineSplit::account_embedding_loss;  // 126 layers over 16 stages, as Megatron's uneven split
  ASSERT_EQ(check_plan(m, c, j, p, 16384), RejectReason::none);
  const StepTime t = estimate_time(m, c, j, p);
  GoodputOptions opt;
  opt.failures = d->failure_source(d->default_failure_source)->rates;
  opt.storage.aggregate_write = opt.storage.aggregate_read = 2e12;
  const Goodput g = estimate_goodput(m, c, j, p, 16384, t.total, opt);
  EXPECT_GT(g.fraction, 0.90);
  EXPECT_LT(g.fraction, 0.97);
  // The checkpoint: 405B parameters x 14 bytes, once.
  EXPECT_NEAR(g.size.total_bytes / (14 * static_cast<double>(count_params(m, 1, 1, 1, 0, 0).total)), 1, 1e-12);
}

TEST(Goodput, EconomicsFilesRefuseBadFieldsNamingThem) {
  const PresetRegistry& reg = shipped_presets();
  using nlohmann::json;
  const json failures = {{"default", "x"},
                         {"sources", {{{"id", "x"}, {"source", "s"}, {"gpus", 8}, {"gpus_per_node", 8}, {"days", 1}, {"causes", {{{"cause", "c"}, {"scale", "gpu"}, {"count", 1}}}}}}}};
  const json prices = {{"offers", {{{"gpu", "h100-sxm"}, {"per_gpu_hour", 2.0}, {"provider", "p"}, {"offer", "o"}, {"date", "d"}, {"source", "s"}}}}};
  const json power = {{"idle_fraction", 0.1},  {"idle_source", "s"},
                      {"pue", 1.2},            {"pue_source", "s"},
                      {"default_node_overhead_per_gpu_tdp", 0.5}, {"default_node_overhead_source", "s"},
                      {"gpus", {{"h100-sxm", {{"tdp_w", 700}, {"source", "s"}}}}},
                      {"nodes", json::object()}};
  ASSERT_TRUE(economics_from_json(failures, "f.json", prices, "p.json", power, "w.json", reg).ok());
  auto message = [&](json f, json p, json w) {
    Result<EconomicsData> r = economics_from_json(f, "f.json", p, "p.json", w, "w.json", reg);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().exit_code(), 2);
    return r.status().message();
  };
  json f = failures;
  f["sources"][0]["causes"][0]["count"] = -1;
  EXPECT_NE(message(f, prices, power).find("f.json: field 'sources[0].causes[0].count'"), std::string::npos);
  f = failures;
  f["sources"][0]["causes"][0]["scale"] = "rack";
  EXPECT_NE(message(f, prices, power).find("expected \"gpu\" or \"node\""), std::string::npos);
  f = failures;
  f["default"] = "nope";
  EXPECT_NE(message(f, prices, power).find("f.json: field 'default'"), std::string::npos);
  json p = prices;
  p["offers"][0]["gpu"] = "h100-typo";
  EXPECT_NE(message(failures, p, power).find("p.json: field 'offers[0].gpu'"), std::string::npos);
  p = prices;
  p["offers"][0]["per_gpu_hour"] = -3;
  EXPECT_NE(message(failures, p, power).find("p.json: field 'offers[0].per_gpu_hour'"), std::string::npos);
  json w = power;
  w["gpus"]["h100-sxm"]["tdp_w"] = "lots";
  EXPECT_NE(message(failures, prices, w).find("w.json: field 'gpus.h100-sxm.tdp_w'"), std::string::npos);
  w = power;
  w["nodes"]["no-such-node"] = {{"overhead_w", 1}, {"source", "s"}};
  EXPECT_NE(message(failures, prices, w).find("w.json: field 'nodes.no-such-node'"), std::string::npos);
  w = power;
  w["pue"] = 0.5;
  EXPECT_NE(message(failures, prices, w).find("w.json: field 'pue'"), std::string::npos);
}

// ---- Time, money, energy by hand: 1e12 tokens at 1e6 tokens/s and goodput 0.8 on 16
// GPUs (2 nodes of 8), $2 per GPU-hour, 700 W TDP, idle 10%, a 10% bubble, 4,600 W per
// node, PUE 1.1, 400 g/kWh.
TEST(Goodput, TrainingBudgetIsTheClosedForm) {
  StepTime t;
  t.total = 10;
  t.bubble = 1;
  t.tokens_per_s = 1e6;
  EnergySpec e;
  e.gpu_tdp_w = 700;
  e.idle_fraction = 0.1;
  e.node_overhead_w = 4600;
  e.pue = 1.1;
  e.grid_g_co2_per_kwh = 400;
  const TrainingBudget b = training_budget(1e12, 16, 8, t, 0.8, 2.0, e);
  const double wall = 1e6 / 0.8;
  EXPECT_DOUBLE_EQ(b.wall_s, wall);
  EXPECT_DOUBLE_EQ(b.gpu_hours, wall * 16 / 3600);
  EXPECT_DOUBLE_EQ(b.cost, wall * 16 / 3600 * 2);
  const double gpu_w = 700 * (0.1 + 0.9 * 0.9);
  EXPECT_DOUBLE_EQ(b.gpu_power_w, gpu_w);
  EXPECT_NEAR(b.energy_kwh, (16 * gpu_w + 2 * 4600) * 1.1 * wall / 3.6e6, 1e-6);
  EXPECT_NEAR(b.co2_kg, b.energy_kwh * 0.4, 1e-9);
}

// ---- Chinchilla (Hoffmann et al. 2022). Table 3, Approach 1's projections:
//   10B  1.23e22 FLOPs  205.1B tokens;  175B  3.85e24  3.7T;  1T  1.27e26  21.2T.
TEST(ComputeOptimal, TwentyTokensPerParameterReproducesTable3) {
  for (auto [flops, params, tokens] : {std::tuple{1.23e22, 10e9, 205.1e9}, {3.85e24, 175e9, 3.7e12}, {1.27e26, 1e12, 21.2e12}}) {
    const ComputeOptimal o = optimal_by_tokens_per_param(flops);
    EXPECT_NEAR(o.params / params, 1, 0.05) << flops;
    EXPECT_NEAR(o.tokens / tokens, 1, 0.05) << flops;
    EXPECT_NEAR(6 * o.params * o.tokens / flops, 1, 1e-12);
  }
}

// The fitted law's closed-form optimum against a numerical minimisation of L(N, C/6N), and
// its exponent a = beta / (alpha + beta) against the paper's Table 2 (Approach 3: 0.46).
TEST(ComputeOptimal, LawOptimumIsTheMinimumOfTheFittedLoss) {
  const ChinchillaLaw law;
  EXPECT_NEAR(law.beta / (law.alpha + law.beta), 0.46, 0.01);
  for (double flops : {1e21, 5.76e23, 1e26}) {
    auto loss = [&](double log_n) { return chinchilla_loss(law, std::exp(log_n), flops / (6 * std::exp(log_n))); };
    double lo = std::log(1e6), hi = std::log(1e14);
    const double g = (std::sqrt(5.0) - 1) / 2;
    for (int i = 0; i < 300; ++i) {
      const double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
      if (loss(a) < loss(b)) hi = b;
      else lo = a;
    }
    const ComputeOptimal o = optimal_by_law(flops, law);
    EXPECT_NEAR(o.params / std::exp((lo + hi) / 2), 1, 1e-4) << flops;
    EXPECT_NEAR(6 * o.params * o.tokens / flops, 1, 1e-12);
  }
}

// For Llama 3 8B's count (8,030,261,248) the derived shape is Llama 3 8B's own (Dubey et
// al. 2024, Table 3: 32 layers, 4096 wide, 32 heads, 8 KV heads, FFN 14336).
TEST(ComputeOptimal, DerivedShapeOfLlama3_8bCountIsLlama3_8b) {
  const ModelSpec m = derived_llama_shape(8'030'261'248.0);
  EXPECT_EQ(m.layers, 32);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.ffn_hidden, 14336);
  EXPECT_EQ(count_params(m, 1, 1, 1, 0, 0).total, 8'030'261'248);
}

TEST(ComputeOptimal, DerivedShapesAreCloseAndTensorParallelFriendly) {
  // A few hundred million: the 128,256-token embeddings dominate; the count still holds.
  EXPECT_NEAR(static_cast<double>(count_params(derived_llama_shape(3e8), 1, 1, 1, 0, 0).total) / 3e8, 1, 0.03);
  for (double n : {1.2e9, 3e10, 7e10, 4e11, 2e12}) {
    const ModelSpec m = derived_llama_shape(n);
    EXPECT_NEAR(static_cast<double>(count_params(m, 1, 1, 1, 0, 0).total) / n, 1, 0.03) << n;
    if (m.heads >= 16) {
      EXPECT_EQ(m.heads % 8, 0) << n;
    }
    EXPECT_GE(m.layers, m.heads / 2) << n;
    EXPECT_LE(m.layers, 2 * m.heads) << n;
  }
}

}  // namespace
}  // namespace llmplan
