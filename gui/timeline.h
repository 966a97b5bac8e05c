// The timeline of one training step as the timeline view draws it: a list of slices,
// each on one pipeline stage and one stream of that stage, with a kind that picks its
// colour. The view knows nothing else, so any source can fill it.
//
// Today the only source is analytic_timeline(), an ADAPTER that lays out a 1F1B (GPipe,
// interleaved 1F1B) schedule from the planner's per-layer times. When the step simulator
// (simulator/) lands, replace the body of analytic_timeline() -- the one place -- by a
// conversion of its SimEvents (stage, stream, kind, start, end) into TimelineSlices.
//
// Qt-free. Thread-safety: plain values and pure functions.
#pragma once

#include <string>
#include <vector>

#include "planner/plan_file.h"
#include "planner/time_model.h"

namespace llmplan::gui {

enum class SliceKind { forward, backward, recompute, communication, optimizer, idle };
constexpr int kSliceKinds = 6;
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
  std::string source;     // where the slices come from, shown under the view
  std::string note;       // approximations worth a sentence ("first 1024 micro-batches")
};

// ADAPTER (replace with the simulator's events): an analytic schedule of one optimizer
// step of `f.plan`. Per stage and micro-batch, forward/backward/recompute times are the
// time model's layer_times summed over the stage's layers (+ LM head on the last stage);
// exposed TP/CP/EP collectives follow each pass on the stage's comm stream; PP sends cost
// p2p_time; the exposed DP/ZeRO sync and the optimizer step (estimate_time's numbers)
// close the step. Waiting on the compute stream is drawn as idle (the bubble).
// REQUIRES: check_plan(f.model, f.cluster, f.job, f.plan, f.gpus) == none.
Timeline analytic_timeline(const PlanFile& f, const Efficiency& e = {});

}  // namespace llmplan::gui
