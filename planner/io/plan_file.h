// Plan JSON (`best.json`): the model, cluster, training job and chosen plan, with the
// predicted memory and time breakdowns and a schema version. `llmplan explain`,
// `simulate` and `execute` read exactly this file. Predictions in a file are informative:
// readers recompute them from the specs, so a hand-edited plan is never stale.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "planner/cost/memory_model.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"
#include "planner/cost/time_model.h"

namespace llmplan {

constexpr int kPlanSchemaVersion = 1;
constexpr const char* kPlanSchemaName = "llmplan-plan";

struct PlanFile {
  ModelSpec model;
  ClusterSpec cluster;   // nodes * gpus_per_node >= plan.world_size()
  TrainingJob job;
  ParallelPlan plan;
  int gpus = 1;          // GPUs the plan uses (= plan.world_size())
};

nlohmann::json memory_to_json(const StageMemory& s);
nlohmann::json time_to_json(const StepTime& t);
nlohmann::json plan_file_to_json(const PlanFile& f, const MemoryReport& mem, const StepTime& time);

// Reads and validates a plan file: schema, every section, and check_plan on the result.
// Errors name the file and the field.
Result<PlanFile> read_plan_file(const std::string& path);
Result<PlanFile> plan_file_from_json(const nlohmann::json& j, const std::string& origin);
Status write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace llmplan
