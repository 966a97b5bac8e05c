// Sweep throughput: configurations evaluated per second, one thread and all threads,
// for llama2-7b on 8 A100-80G and GPT-3 175B on 1024 A100-80G; the latter also with each
// plan's goodput (what `sweep --tokens` and `--objective cost` add); and DeepSeek-V3 on 1024
// H800s, a model of two layer kinds (3 dense, 58 MoE) with latent attention and multi-token
// prediction, whose stages are summed by kind and whose inputs are recomputed per vpp.
#include <benchmark/benchmark.h>

#include "planner/io/presets.h"
#include "planner/search/sweep.h"

namespace llmplan {
namespace {

void run(benchmark::State& state, const char* model, int gpus, int64_t global_batch, bool goodput = false, const char* gpu = "a100-80g") {
  const PresetRegistry reg = std::move(PresetRegistry::load(LLMPLAN_SOURCE_ROOT)).value();
  const ModelSpec m = *reg.model(model);
  ClusterSpec c = *reg.cluster_for_gpu(gpu);
  c.nodes = (gpus + c.gpus_per_node - 1) / c.gpus_per_node;
  TrainingJob j;
  j.global_batch = global_batch;
  SweepOptions opt;
  opt.threads = static_cast<int>(state.range(0));
  GoodputOptions g;
  g.failures.per_gpu_hour = 1.26e-5;  // data/reliability/failures.json's Llama 3 rates, rounded
  g.failures.per_node_hour = 5.7e-5;
  if (goodput) {
    opt.goodput = &g;
    opt.objective = Objective::cost;
  }
  int64_t plans = 0, costed = 0;
  for (auto _ : state) {
    const SweepResult r = run_sweep(m, c, j, gpus, SweepSpace{}, opt);
    plans += r.enumerated;
    costed += r.evaluated;
    benchmark::DoNotOptimize(r.top.data());
  }
  state.counters["plans/s"] = benchmark::Counter(static_cast<double>(plans), benchmark::Counter::kIsRate);
  state.counters["costed/s"] = benchmark::Counter(static_cast<double>(costed), benchmark::Counter::kIsRate);
  state.counters["plans"] = static_cast<double>(plans) / state.iterations();
}

void BM_SweepLlama7bOn8(benchmark::State& s) { run(s, "llama2-7b", 8, 512); }
void BM_SweepGpt3On1024(benchmark::State& s) { run(s, "gpt3-175b", 1024, 1536); }
void BM_SweepGpt3On1024Goodput(benchmark::State& s) { run(s, "gpt3-175b", 1024, 1536, true); }
void BM_SweepDeepSeekV3On1024H800(benchmark::State& s) { run(s, "deepseek-v3", 1024, 1536, false, "h800"); }

BENCHMARK(BM_SweepLlama7bOn8)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SweepGpt3On1024)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SweepGpt3On1024Goodput)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SweepDeepSeekV3On1024H800)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace llmplan

BENCHMARK_MAIN();
