// ProfileStore::export_run_json: one run as a self-contained JSON document.
#include <nlohmann/json.hpp>

#include "profiles/profile_store.h"
#include "profiles/sqlite_statement.h"

namespace llmplan {
namespace {

using Json = nlohmann::ordered_json;  // keeps the fields in the order written, for people

// A stored JSON column as JSON: null when empty, an error when it does not parse.
Status embed(const std::string& text, const RunRecord& run, const char* field,
             const std::string& path, Json* out) {
  if (text.empty()) {
    *out = nullptr;
    return Status::ok();
  }
  *out = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!out->is_discarded()) return Status::ok();
  return Status::runtime(path + ": run " + std::to_string(run.id) + ": stored " + field +
                         " is not valid JSON");
}

Status run_to_json(const RunRecord& run, const std::string& path, Json* out) {
  Json& j = *out;
  j["id"] = run.id;
  j["created_at"] = run.created_at;
  j["model"] = run.model;
  j["hardware"] = run.hardware;
  j["host"] = run.host;
  j["backend"] = run.backend;
  j["versions"] = run.versions;
  j["status"] = to_string(run.status);
  j["error_message"] = run.error_message;
  j["steps_planned"] = run.steps_planned;
  j["tokens_per_s"] = run.tokens_per_s;
  j["step_time_s"] = run.step_time_s;
  j["peak_bytes"] = run.peak_bytes;
  j["predicted_peak_bytes"] = run.predicted_peak_bytes;
  j["predicted_step_time_s"] = run.predicted_step_time_s;
  Status s = embed(run.plan_json, run, "plan_json", path, &j["plan"]);
  if (s) s = embed(run.predicted_json, run, "predicted_json", path, &j["predicted"]);
  if (s) s = embed(run.measured_json, run, "measured_json", path, &j["measured"]);
  return s;
}

Json steps_to_json(const std::vector<StepRecord>& steps) {
  Json list = Json::array();
  for (const StepRecord& s : steps) {
    list.push_back({{"step", s.step},
                    {"loss", s.loss},
                    {"time_s", s.time_s},
                    {"tokens_per_s", s.tokens_per_s},
                    {"peak_bytes", s.peak_bytes}});
  }
  return list;
}

Json timings_to_json(const std::vector<OpTiming>& timings) {
  Json list = Json::array();
  for (const OpTiming& t : timings) {
    list.push_back({{"op", t.op},
                    {"shape", t.shape},
                    {"dtype", t.dtype},
                    {"flops", t.flops},
                    {"bytes", t.bytes},
                    {"time_s", t.time_s},
                    {"count", t.count}});
  }
  return list;
}

}  // namespace

Result<std::string> ProfileStore::export_run_json(int64_t run_id) {
  Json doc;
  // One read transaction: the run, its steps and its timings come from the same snapshot.
  Status status = sqlite::in_read_transaction(db_.get(), path_, [&]() -> Status {
    Result<RunRecord> run = get_run(run_id);
    if (!run.ok()) return run.status();
    Result<std::vector<StepRecord>> steps = get_steps(run_id);
    if (!steps.ok()) return steps.status();
    Result<std::vector<OpTiming>> timings = get_op_timings(run_id);
    if (!timings.ok()) return timings.status();
    doc["run"] = Json::object();
    Status s = run_to_json(*run, path_, &doc["run"]);
    doc["steps"] = steps_to_json(*steps);
    doc["op_timings"] = timings_to_json(*timings);
    return s;
  });
  if (!status) return status;
  // NaN (a diverged loss) becomes null; invalid UTF-8 in a text field is replaced, not thrown.
  return doc.dump(2, ' ', false, Json::error_handler_t::replace);
}

}  // namespace llmplan
