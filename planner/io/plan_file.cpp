#include "planner/io/plan_file.h"

#include <fstream>

#include "planner/spec/json_fields.h"
#include "planner/cost/plan_check.h"
#include "planner/spec/spec_json.h"

namespace llmplan {

using nlohmann::json;

json memory_to_json(const StageMemory& s) {
  json items = json::object();
  for (int i = 0; i < kMemoryItems; ++i) items[to_string(static_cast<MemoryItem>(i))] = s.bytes[i];
  return {{"stage", s.stage},
          {"layers", s.layers},
          {"inflight_microbatches", s.inflight_microbatches},
          {"peak_phase", to_string(s.peak_phase)},
          {"total_bytes", s.total},
          {"allocator_peak_bytes", s.allocator_peak},
          {"phase_total_bytes", {{"forward", s.phase_total[0]}, {"backward", s.phase_total[1]}, {"optimizer", s.phase_total[2]}}},
          {"bytes", items}};
}

json time_to_json(const StepTime& t) {
  return {{"step_time_s", t.total},
          {"tokens_per_s", t.tokens_per_s},
          {"mfu", t.mfu},
          {"hfu", t.hfu},
          {"model_flops_per_step", t.model_flops},
          {"breakdown_s",
           {{"compute", t.compute},
            {"recompute", t.recompute},
            {"tp_comm", t.tp_comm},
            {"pp_comm", t.pp_comm},
            {"dp_comm", t.dp_comm},
            {"cp_comm", t.cp_comm},
            {"ep_comm", t.ep_comm},
            {"offload", t.offload},
            {"bubble", t.bubble},
            {"optimizer", t.optimizer}}}};
}

json plan_file_to_json(const PlanFile& f, const MemoryReport& mem, const StepTime& time) {
  return {{"schema", kPlanSchemaName},
          {"schema_version", kPlanSchemaVersion},
          {"gpus", f.gpus},
          {"model", to_json(f.model)},
          {"cluster", to_json(f.cluster)},
          {"job", to_json(f.job)},
          {"plan", to_json(f.plan)},
          {"predicted",
           {{"memory", {{"worst_stage", memory_to_json(mem.worst)}, {"first_stage", memory_to_json(mem.first)}, {"last_stage", memory_to_json(mem.last)},
                        {"capacity_bytes", mem.capacity}}},
            {"time", time_to_json(time)}}}};
}

Result<PlanFile> plan_file_from_json(const json& j, const std::string& origin) {
  FieldReader r(j, origin, "");
  std::string schema;
  r.get("schema", &schema);
  int version = 0;
  r.get("schema_version", &version, 1, 1000000);
  if (!r.status().is_ok()) return r.status();
  if (schema != kPlanSchemaName)
    return Status::bad_input(origin + ": field 'schema': expected \"" + kPlanSchemaName + "\", got \"" + schema + "\"");
  if (version > kPlanSchemaVersion)
    return Status::bad_input(origin + ": field 'schema_version': expected at most " + std::to_string(kPlanSchemaVersion) + ", got " +
                             std::to_string(version) + " (written by a newer llmplan)");
  PlanFile f;
  r.get("gpus", &f.gpus, 1, 1 << 24);
  r.allow("predicted");
  const json* model = r.raw("model");
  const json* cluster = r.raw("cluster");
  const json* job = r.raw("job");
  const json* plan = r.raw("plan");
  if (Status s = r.finish(); !s) return s;
  if (!model) return Status::bad_input(origin + ": field 'model': missing (expected the model object)");
  if (!cluster) return Status::bad_input(origin + ": field 'cluster': missing (expected the cluster object)");
  if (!job) return Status::bad_input(origin + ": field 'job': missing (expected the training job object)");
  if (!plan) return Status::bad_input(origin + ": field 'plan': missing (expected the parallel plan object)");
  Result<ModelSpec> m = model_from_json(*model, origin);
  if (!m) return m.status();
  Result<ClusterSpec> c = cluster_from_json(*cluster, origin);
  if (!c) return c.status();
  Result<TrainingJob> t = job_from_json(*job, origin);
  if (!t) return t.status();
  Result<ParallelPlan> p = plan_from_json(*plan, origin);
  if (!p) return p.status();
  f.model = *m;
  f.cluster = *c;
  f.job = *t;
  f.plan = *p;
  if (Status s = check_inputs(f.model, f.job, origin); !s) return s;
  if (Status s = check_plan_status(f.model, f.cluster, f.job, f.plan, f.gpus, origin); !s) return s;
  const int64_t expected_accum = f.job.global_batch / (static_cast<int64_t>(f.plan.micro_batch) * f.plan.dp);
  if (f.plan.grad_accum != expected_accum)
    return Status::bad_input(origin + ": field 'plan.grad_accum': expected global_batch/(micro_batch*dp) = " +
                             std::to_string(expected_accum) + ", got " + std::to_string(f.plan.grad_accum));
  return f;
}

Result<PlanFile> read_plan_file(const std::string& path) {
  Result<json> j = read_json_file(path);
  if (!j) return j.status();
  return plan_file_from_json(*j, path);
}

Status write_json_file(const std::string& path, const json& j) {
  // Write to a temporary file and rename, so an interrupted write never leaves half a plan.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) return Status::runtime(path + ": cannot write file");
    out << j.dump(2) << "\n";
    if (!out) return Status::runtime(path + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::runtime(path + ": cannot replace file");
  return Status::ok();
}

}  // namespace llmplan
