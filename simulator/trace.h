// Chrome trace-event JSON of a simulated step, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one process per simulated rank (one per pipeline stage, named
// with the ranks it stands for), one thread per stream, one complete slice ("ph": "X",
// "ts"/"dur" in microseconds) per operation, and a "memory" counter track per rank.
//
// Thread-safety: pure functions; write_chrome_trace writes one file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "planner/spec/status.h"
#include "simulator/step_simulator.h"

namespace llmplan {

// The trace as a JSON object {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
// REQUIRES: r was simulated with record_events (else only metadata and counters).
nlohmann::json chrome_trace_json(const SimResult& r);

// Writes chrome_trace_json(r) to `path`. Errors (runtime) name the path.
Status write_chrome_trace(const SimResult& r, const std::string& path);

}  // namespace llmplan
