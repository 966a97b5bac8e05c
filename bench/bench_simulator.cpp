// Step simulator speed: one training step of GPT-3 175B on 1024 A100-80G (128 DGX
// nodes), tp 8, pp 16 with 2 virtual stages (interleaved 1F1B), dp 8, micro-batch 1,
// global batch 512 (64 micro-batches per pipeline), selective recompute, SP. The issue's
// target: well under a second per simulation. And a 64-stage DualPipeV step: GPT-3's
// shape with 128 layers (two per chunk) on 1024 A100s, tp 8, pp 64, dp 2, 256
// micro-batches per pipeline; and the same model as a 64-stage two-direction DualPipe (pp
// 64 ranks, each holding two stages of two layers, dp 2, 128 micro-batches each way),
// simulated as its rank-equivalent DualPipeV on 32 ranks.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "planner/io/presets.h"
#include "simulator/step_simulator.h"
#include "simulator/trace.h"

namespace llmplan {
namespace {

struct Gpt3Case {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingJob job;
  ParallelPlan plan;
};

const Gpt3Case& gpt3_case() {
  static const Gpt3Case c = [] {
    Gpt3Case g;
    auto reg = PresetRegistry::load(default_data_root());
    if (!reg.ok()) {
      std::fprintf(stderr, "presets: %s\n", reg.status().message().c_str());
      std::exit(1);
    }
    auto m = reg->model("gpt3-175b");
    auto cl = reg->cluster("dgx-a100");  // 8 x A100-80G, 300 / 25 GB/s, 5 / 10 us
    if (!m.ok() || !cl.ok()) {
      std::fprintf(stderr, "presets: gpt3-175b or dgx-a100 missing\n");
      std::exit(1);
    }
    g.model = *m;
    g.cluster = cl->cluster;
    g.cluster.nodes = 128;
    g.job.seq_len = 2048;
    g.job.global_batch = 512;
    g.plan.tp = 8;
    g.plan.pp = 16;
    g.plan.vpp = 2;
    g.plan.dp = 8;
    g.plan.sp = true;
    g.plan.micro_batch = 1;
    g.plan.grad_accum = 64;
    g.plan.recompute = Recompute::selective;
    g.plan.schedule = Schedule::interleaved;
    return g;
  }();
  return c;
}

const Gpt3Case& dualpipev_case() {
  static const Gpt3Case c = [] {
    Gpt3Case g = gpt3_case();
    g.model.layers = 128;
    g.plan.pp = 64;
    g.plan.dp = 2;
    g.plan.grad_accum = 256;
    g.plan.schedule = Schedule::dualpipev;
    return g;
  }();
  return c;
}

const Gpt3Case& dualpipe_case() {
  static const Gpt3Case c = [] {
    Gpt3Case g = dualpipev_case();
    g.plan.schedule = Schedule::dualpipe;
    return g;
  }();
  return c;
}

void run(benchmark::State& state, bool events, const Gpt3Case& g = gpt3_case()) {
  SimOptions opt;
  opt.record_events = events;
  opt.record_memory = events;
  size_t n_events = 0;
  double step = 0;
  for (auto _ : state) {
    auto r = simulate_step(g.model, g.cluster, g.job, g.plan, opt);
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    n_events = r->events.size();
    step = r->total;
    benchmark::DoNotOptimize(r->total);
  }
  state.counters["events"] = static_cast<double>(n_events);
  state.counters["step_s"] = step;
}

// Full result: every event (for the trace) and every memory curve.
void BM_SimulateGpt3_175B_1024Gpus(benchmark::State& state) { run(state, true); }
// Summary only, as `llmplan sweep --simulate-top K` re-ranks plans.
void BM_SimulateGpt3_175B_1024Gpus_SummaryOnly(benchmark::State& state) { run(state, false); }
// The full result plus building the Chrome trace JSON.
void BM_SimulateGpt3_175B_1024Gpus_WithTraceJson(benchmark::State& state) {
  const Gpt3Case& g = gpt3_case();
  for (auto _ : state) {
    auto r = simulate_step(g.model, g.cluster, g.job, g.plan);
    benchmark::DoNotOptimize(chrome_trace_json(*r).size());
  }
}

// One step of the 64-stage DualPipeV plan, full result.
void BM_SimulateDualPipeV_64Stages(benchmark::State& state) { run(state, true, dualpipev_case()); }
// One step of the 64-stage two-direction DualPipe plan, full result.
void BM_SimulateDualPipe_64Stages(benchmark::State& state) { run(state, true, dualpipe_case()); }

BENCHMARK(BM_SimulateGpt3_175B_1024Gpus)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateDualPipeV_64Stages)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateDualPipe_64Stages)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateGpt3_175B_1024Gpus_SummaryOnly)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateGpt3_175B_1024Gpus_WithTraceJson)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace llmplan

BENCHMARK_MAIN();
