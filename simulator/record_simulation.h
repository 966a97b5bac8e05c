// The step simulator against the analytic model on published records: for every record the
// planner can cost (a throughput kind, an architecture, a GPU preset), one step simulated
// with the record's own efficiency constants, beside the analytic estimate, and the terms
// in which the two differ. `llmplan validate --simulate` prints it; tests and the GUI can
// read it as data.
//
// Thread-safety: pure over its arguments (simulate_step per record).
#pragma once

#include <string>
#include <vector>

#include "planner/io/presets.h"
#include "planner/validate/validate.h"

namespace llmplan {

struct RecordSimulation {
  std::string id, group;
  std::string error;             // non-empty: the simulator refused the record (message)
  double analytic_s = 0;         // estimate_time's step
  double simulated_s = 0;        // simulate_step's step
  // (term, simulated - analytic seconds) for the terms that differ by >= 0.5% of the step:
  // bubble, dp, tp, pp, cp, ep, compute (compute + recompute).
  std::vector<std::pair<std::string, double>> term_differences;
  double relative_difference() const { return simulated_s / analytic_s - 1; }
};

std::vector<RecordSimulation> simulate_reference_records(const ReferenceSet& set, const PresetRegistry& presets,
                                                         const ValidationOptions& opt);

}  // namespace llmplan
