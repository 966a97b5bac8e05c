// Everything the panels show about one selected plan, computed from the planner in one
// call so that every panel shows the same numbers: the plan file, the per-stage memory
// report, the step-time breakdown, the explanation (fit and cheapest fixes) and the
// timeline.
//
// Qt-free. Thread-safety: pure.
#pragma once

#include <memory>

#include "gui/timeline.h"
#include "planner/search/explain.h"
#include "planner/io/plan_file.h"
#include "planner/search/sweep.h"

namespace llmplan::gui {

// The inputs a sweep's plans share: model, cluster, job, GPUs and the memory budget.
struct SweepContext {
  PlanFile base;             // plan unset
  double headroom_bytes = 0;
  Objective objective = Objective::tokens_per_s;
  // The sweep's other memory conventions (SweepOptions::also_fit): a plan's details are
  // computed under the one that sets its peak (PlanResult::peak_convention).
  std::vector<MemoryConvention> also_fit;
  // The sweep's own memory conventions and time constants (its stack's: the framework's
  // when one is chosen, else the default profile's).
  MemoryOptions memory;
  Efficiency efficiency;
  // The framework the sweep was restricted to (explain offers only its plans), nullptr: any.
  std::shared_ptr<const FrameworkSpec> framework;
  // The frameworks each plan is marked with (PlanResult::frameworks, the "runs on" column).
  std::vector<FrameworkSpec> frameworks;
};

struct PlanDetails {
  PlanFile file;             // base with the plan and its precision applied
  MemoryReport memory;
  StepTime time;
  Explanation explanation;
  Timeline timeline;
};

// REQUIRES: r passed the structural checks (r.reason is none, does_not_fit or host_does_not_fit).
PlanDetails compute_plan_details(const SweepContext& ctx, const PlanResult& r);

// The PlanResult of a single plan (for a plan opened from a file): costed like the sweep.
PlanResult evaluate_plan(const PlanFile& f, double headroom_bytes, const MemoryOptions& mo = {}, const Efficiency& e = {});

// "dp4 tp2 pp1 mb2 ga64 zero1 selective" (the CLI's plan_summary).
std::string plan_summary(const ParallelPlan& p);

}  // namespace llmplan::gui
