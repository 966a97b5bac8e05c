// JSON of a simulated step's summary (no events): step time and breakdown next to the
// analytic prediction, bubble fraction, and per stage busy time, breakdown and memory
// peak (with the analytic stage memory). For `llmplan simulate --json` and the GUI.
//
// Thread-safety: pure.
#pragma once

#include <nlohmann/json.hpp>

#include "simulator/step_simulator.h"

namespace llmplan {

nlohmann::json breakdown_to_json(const SimBreakdown& b);
nlohmann::json sim_result_to_json(const SimResult& r);

}  // namespace llmplan
