// A profile database of synthetic example runs, clearly labelled as such (hardware
// "synthetic example", backend "example"): planner predictions for a few small plans,
// "measurements" that are those predictions times fixed factors, and smooth loss curves.
// The GUI tests read it, and scripts/screenshot.sh shows it in the Profiles tab until
// `llmplan execute` records real runs.
#pragma once

#include <string>

#include "planner/spec/status.h"

namespace llmplan::gui_test {

struct SampleSummary {
  int runs = 0;           // rows in `runs`
  int measured = 0;       // runs with measured peak memory and step time
  int steps_of_last = 0;  // steps recorded for the last (newest) run
};

// Appends the sample runs to the database at `db_path` (created when missing).
Result<SampleSummary> write_sample_profiles(const std::string& db_path);

}  // namespace llmplan::gui_test
