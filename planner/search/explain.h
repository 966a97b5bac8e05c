// Explain a plan: does it fit, by how much, where (stage, phase, component), and the
// cheapest single changes that make it fit, each evaluated by the memory and time
// models (never hard-coded). "Cheapest" is the smallest loss of predicted throughput.
//
// Thread-safety: pure.
#pragma once

#include <string>
#include <vector>

#include "planner/cost/framework.h"
#include "planner/cost/memory_model.h"
#include "planner/spec/specs.h"
#include "planner/cost/time_model.h"

namespace llmplan {

struct PlanChange {
  std::string description;   // "ZeRO-1 -> 2", "selective recompute", "micro-batch 2 -> 1"
  TrainingJob job;
  ParallelPlan plan;
  double peak_bytes = 0;     // worst-stage peak after the change
  double delta_bytes = 0;    // peak after - peak before (negative saves memory)
  double tokens_per_s = 0;
  double throughput_change = 0;  // tokens_per_s after / before - 1
  bool fits = false;
};

struct Explanation {
  MemoryReport memory;
  StepTime time;
  double headroom_bytes = 0;
  double budget_bytes = 0;       // capacity - headroom
  double shortfall_bytes = 0;    // peak - budget (> 0: does not fit)
  bool fits = false;
  MemoryItem largest_item = MemoryItem::weights;  // the component that dominates the peak
  std::vector<PlanChange> changes;  // fitting changes first, then by throughput
  // Pipeline schedules (specs.h Schedule) that fit and are faster but do not save memory
  // (a zero-bubble order's W-gradient buffers), fastest first: their cost is delta_bytes.
  std::vector<PlanChange> faster_schedules;
  // With a framework: why it refuses the plan itself (framework_refusal_text), "" when it runs it.
  std::string framework_refusal;
};

// REQUIRES: check_plan(m, c, j, p, gpus) == none. With `framework` (non-null), the changes
// are only those it runs, and a refusal of the plan itself is named.
Explanation explain_plan(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, int gpus,
                         double headroom_bytes, const MemoryOptions& mo = {}, const Efficiency& e = {},
                         const FrameworkSpec* framework = nullptr);

}  // namespace llmplan
