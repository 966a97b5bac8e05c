// Plan JSON (best.json): read_plan_file, then what `llmplan memory PLAN` and
// `llmplan explain PLAN` compute from an accepted file (planner/io/plan_file.h).
#include "fuzz/fuzz_util.h"
#include "planner/io/plan_file.h"
#include "planner/search/explain.h"

using namespace llmplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "plan.json");
  Result<PlanFile> f = read_plan_file(path);
  if (!f) {
    fuzz::expect_clear_error(f.status(), path);
    return 0;
  }
  const MemoryReport mem = estimate_memory(f->model, f->cluster, f->job, f->plan);
  const StepTime time = estimate_time(f->model, f->cluster, f->job, f->plan);
  fuzz::expect_finite(mem.worst.total, "memory.worst.total");
  fuzz::expect_finite(time.total, "time.total");
  fuzz::expect_finite(time.tokens_per_s, "time.tokens_per_s");
  // What `--json` writes must read back as the same plan.
  const nlohmann::json out = plan_file_to_json(*f, mem, time);
  Result<PlanFile> again = plan_file_from_json(out, "written plan");
  if (!again) fuzz::violated("a written plan does not read back: " + again.status().message());
  const Explanation e = explain_plan(f->model, f->cluster, f->job, f->plan, f->gpus, 0);
  fuzz::expect_finite(e.memory.worst.total, "explain.memory.worst.total");
  return 0;
}
