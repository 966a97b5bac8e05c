// Training-step throughput of the CPU executor (tokens/s) for a GPT-2-small shape:
// 12 layers, hidden 768, 12 heads, vocab 50257, seq 512, micro-batch 4, fp32, AdamW, flash
// attention, no recompute. Threads: OPENBLAS_NUM_THREADS (run with 2 on the CI machine).
// Compare with bench/torch_cpu_gpt.py (PyTorch on the CPU, the same shape), run alternately.
#include <benchmark/benchmark.h>

#include "executor/data.h"
#include "executor/model.h"
#include "executor/trainer.h"

namespace {

using namespace llmplan;
using namespace llmplan::exec;

void BM_TrainStepGpt2Small(benchmark::State& state) {
  ModelConfig c;
  c.spec.name = "gpt2-124m";
  c.spec.family = Family::gpt;
  c.spec.layers = static_cast<int>(state.range(0));
  c.spec.hidden = 768;
  c.spec.heads = c.spec.kv_heads = 12;
  c.spec.ffn_hidden = 3072;
  c.spec.vocab = 50257;
  c.spec.max_positions = 1024;
  c.spec.tied_embeddings = true;
  c.spec.dropout = false;  // the peer runs without dropout
  c.job.seq_len = 512;
  c.job.precision = Precision::fp32;
  c.plan.micro_batch = 4;
  c.plan.flash_attention = true;
  CpuAllocator alloc;
  auto model = build_model(alloc, c);
  if (!model.ok()) {
    state.SkipWithError(model.status().message().c_str());
    return;
  }
  auto trainer = Trainer::create(alloc, **model, c.job, precision_scheme(c.job), TrainerOptions{});
  PackedBatch b;
  synthetic_batch(4, 512, c.spec.vocab, 1, &b);
  for (auto _ : state) {
    (*model)->zero_grads();
    auto loss = (*model)->forward_backward({b.tokens.data(), b.targets.data(), nullptr}, 1.0, 0, 1);
    benchmark::DoNotOptimize(loss);
    (*trainer)->step();
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * 4 * 512, benchmark::Counter::kIsRate);
  state.counters["peak_GiB"] = static_cast<double>(alloc.stats().peak_total) / (1024.0 * 1024 * 1024);
}
BENCHMARK(BM_TrainStepGpt2Small)->Arg(12)->Unit(benchmark::kSecond)->Iterations(3)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
