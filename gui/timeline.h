// The timeline of one training step as the timeline view draws it: a list of slices,
// each on one pipeline stage and one stream of that stage, with a kind that picks its
// colour. The view knows nothing else, so any source can fill it.
//
// The source is simulated_timeline(): the step simulator's events.
//
// Qt-free. Thread-safety: plain values and pure functions.
#pragma once

#include <string>
#include <vector>

#include "planner/io/plan_file.h"
#include "planner/cost/time_model.h"

namespace llmplan::gui {

enum class SliceKind { forward, backward, recompute, weight_grad, communication, optimizer, idle };
constexpr int kSliceKinds = 7;
const char* to_string(SliceKind k);  // "forward", ..., "idle (bubble)"

struct TimelineSlice {
  int stage = 0;          // pipeline stage (the row group)
  std::string stream;     // row within the stage: "compute", "comm", ...
  SliceKind kind = SliceKind::forward;
  std::string name;       // shown in the tooltip, e.g. "F mb3 chunk0"
  double start_s = 0;     // s from the start of the step
  double end_s = 0;       // s
};

struct Timeline {
  std::vector<TimelineSlice> slices;
  int stages = 0;
  double end_s = 0;       // s, the end of the last slice
  double simulated_s = 0; // s, the simulator's step time (0: not simulated)
  std::string source;     // where the slices come from, shown under the view
  std::string note;       // approximations worth a sentence ("first 1024 micro-batches")
};

// One optimizer step of `f.plan` from the step simulator (simulator/step_simulator.h):
// the compute stream's passes (all layers of one chunk of one micro-batch merged into a
// slice), each communication stream's runs of back-to-back transfers, and the compute
// stream's waits as idle slices (the bubble and exposed communication). On a simulation
// error, an empty timeline whose source says why.
Timeline simulated_timeline(const PlanFile& f, const Efficiency& e = {});

// The timeline's title: the simulated step time beside the time model's and their
// difference (the drawing is the simulator's; the table's numbers are the time model's).
std::string timeline_title(const std::string& plan, const Timeline& t, double analytic_s);

}  // namespace llmplan::gui
