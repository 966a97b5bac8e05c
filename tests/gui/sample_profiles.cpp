#include "tests/gui/sample_profiles.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/io/plan_file.h"
#include "planner/io/presets.h"
#include "planner/cost/time_model.h"
#include "profiles/profile_store.h"

namespace llmplan::gui_test {

namespace {

struct Sample {
  const char* model;
  const char* gpu;
  int gpus, dp, tp, pp, micro_batch, zero;
  Recompute recompute;
  double memory_factor, time_factor;  // "measured" = predicted * factor
  RunStatus status;
  int steps;
};

const Sample kSamples[] = {
    {"gpt2-124m", "a100-80g", 1, 1, 1, 1, 8, 0, Recompute::none, 1.06, 1.12, RunStatus::ok, 60},
    {"gpt2-355m", "a100-80g", 2, 2, 1, 1, 8, 1, Recompute::none, 0.97, 1.18, RunStatus::ok, 60},
    {"tinyllama-1.1b", "a100-80g", 4, 4, 1, 1, 4, 1, Recompute::selective, 1.09, 1.07, RunStatus::ok, 80},
    {"gpt2-774m", "a100-40g", 2, 1, 2, 1, 4, 0, Recompute::full, 1.03, 1.24, RunStatus::ok, 50},
    {"llama2-7b", "a100-80g", 1, 1, 1, 1, 1, 0, Recompute::none, 0, 0, RunStatus::oom, 0},
    {"tinyllama-1.1b", "h100-sxm", 8, 8, 1, 1, 8, 2, Recompute::none, 1.02, 0.95, RunStatus::ok, 100},
};

}  // namespace

Result<SampleSummary> write_sample_profiles(const std::string& db_path) {
  Result<PresetRegistry> reg = PresetRegistry::load(default_data_root());
  if (!reg) return reg.status();
  Result<ProfileStore> store = ProfileStore::open(db_path);
  if (!store) return store.status();
  SampleSummary sum;
  int run_index = 0;
  for (const Sample& s : kSamples) {
    ++run_index;
    PlanFile f;
    Result<ModelSpec> m = reg->model(s.model);
    if (!m) return m.status();
    Result<ClusterSpec> c = reg->cluster_for_gpu(s.gpu);
    if (!c) return c.status();
    f.model = *m;
    f.cluster = *c;
    if (s.gpus < f.cluster.gpus_per_node) f.cluster.gpus_per_node = s.gpus;
    f.gpus = s.gpus;
    f.job.seq_len = 1024;
    f.job.global_batch = 64;
    f.plan.dp = s.dp;
    f.plan.tp = s.tp;
    f.plan.pp = s.pp;
    f.plan.micro_batch = s.micro_batch;
    f.plan.zero = s.zero;
    f.plan.recompute = s.recompute;
    f.plan.flash_attention = s.recompute != Recompute::selective;
    f.plan.grad_accum = static_cast<int>(f.job.global_batch / (s.micro_batch * s.dp));
    if (Status st = check_plan_status(f.model, f.cluster, f.job, f.plan, f.gpus, s.model); !st) return st;
    const MemoryReport mem = estimate_memory(f.model, f.cluster, f.job, f.plan);
    const StepTime time = estimate_time(f.model, f.cluster, f.job, f.plan);

    RunRecord run;
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "2024-05-%02dT1%d:00:00Z", 1 + run_index, run_index % 10);
    run.created_at = stamp;
    run.plan_json = plan_file_to_json(f, mem, time).dump();
    run.model = s.model;
    run.hardware = std::string("synthetic example (") + s.gpu + ")";
    run.host = "example";
    run.backend = "example";
    run.versions = "llmplan 0.1.0 (sample data for the GUI, not a measurement)";
    run.predicted_json = nlohmann::json{{"memory", memory_to_json(mem.worst)}, {"time", time_to_json(time)}}.dump();
    run.predicted_peak_bytes = static_cast<int64_t>(mem.worst.total);
    run.predicted_step_time_s = time.total;
    run.steps_planned = s.status == RunStatus::ok ? s.steps : 50;
    std::vector<StepRecord> steps;
    for (int i = 0; i < s.steps; ++i) {
      StepRecord r;
      r.step = i;
      // A smooth, plausible curve: ln(vocab)-ish start decaying towards ~3 nats.
      r.loss = 3.0 + 7.8 * std::exp(-i / (10.0 + run_index)) + 0.05 * std::sin(i * 1.7 + run_index);
      r.time_s = time.total * s.time_factor * (1 + 0.02 * std::sin(i * 0.9));
      r.tokens_per_s = f.job.global_batch * f.job.seq_len / r.time_s;
      r.peak_bytes = static_cast<int64_t>(mem.worst.total * s.memory_factor);
      steps.push_back(r);
    }
    Result<int64_t> id = store->record_run(run, steps, {});
    if (!id) return id.status();
    RunOutcome out;
    out.status = s.status;
    if (s.status == RunStatus::ok) {
      out.step_time_s = time.total * s.time_factor;
      out.tokens_per_s = f.job.global_batch * f.job.seq_len / out.step_time_s;
      out.peak_bytes = static_cast<int64_t>(mem.worst.total * s.memory_factor);
      out.measured_json = nlohmann::json{{"peak_bytes", out.peak_bytes}, {"step_time_s", out.step_time_s}}.dump();
      ++sum.measured;
    } else {
      out.error_message = "out of memory in the backward phase on stage 0 (sample)";
    }
    if (Status st = store->finish_run(*id, out); !st) return st;
    ++sum.runs;
    sum.steps_of_last = s.steps;
  }
  return sum;
}

}  // namespace llmplan::gui_test
