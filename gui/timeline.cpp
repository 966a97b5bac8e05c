#include "gui/timeline.h"

#include <algorithm>

#include "simulator/step_simulator.h"

#include <algorithm>
#include <cstdio>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/spec/recipe.h"

namespace llmplan::gui {

const char* to_string(SliceKind k) {
  switch (k) {
    case SliceKind::forward: return "forward";
    case SliceKind::backward: return "backward";
    case SliceKind::recompute: return "recompute";
    case SliceKind::weight_grad: return "weight gradient (W)";
    case SliceKind::communication: return "communication";
    case SliceKind::optimizer: return "optimizer";
    case SliceKind::idle: return "idle (bubble)";
  }
  return "?";
}

// ============================================================================
// The simulator's events, merged into one slice per pass (all layers of one chunk of one
// micro-batch) on the compute stream and per run of back-to-back transfers on the others.
// ============================================================================
namespace {

SliceKind compute_kind(EventKind k) {
  switch (k) {
    case EventKind::forward:
    case EventKind::head_forward: return SliceKind::forward;
    case EventKind::backward:
    case EventKind::head_backward: return SliceKind::backward;
    case EventKind::recompute: return SliceKind::recompute;
    case EventKind::weight_grad: return SliceKind::weight_grad;
    case EventKind::optimizer: return SliceKind::optimizer;
    default: return SliceKind::communication;
  }
}

std::string pass_name(SliceKind k, const SimEvent& e) {
  std::string n = k == SliceKind::forward ? "F" : k == SliceKind::backward ? "B" : k == SliceKind::recompute ? "R" : k == SliceKind::weight_grad ? "W" : to_string(e.kind);
  if (e.microbatch >= 0) n += " mb" + std::to_string(e.microbatch);
  if (e.chunk > 0) n += " chunk" + std::to_string(e.chunk);
  return n;
}

}  // namespace

Timeline simulated_timeline(const PlanFile& f, const Efficiency& e) {
  Timeline t;
  t.stages = f.plan.pp;
  SimOptions opt;
  opt.efficiency = e;
  opt.record_memory = false;
  Result<SimResult> r = simulate_step(f.model, f.cluster, f.job, f.plan, opt);
  if (!r) {
    t.source = "simulation failed: " + r.status().message();
    return t;
  }
  std::vector<SimEvent> events = r->events;
  std::stable_sort(events.begin(), events.end(), [](const SimEvent& a, const SimEvent& b) {
    if (a.stage != b.stage) return a.stage < b.stage;
    if (a.stream != b.stream) return a.stream < b.stream;
    return a.start < b.start;
  });
  constexpr double kTouch = 1e-12;  // events closer than this are one slice
  std::vector<double> compute_end(f.plan.pp, 0.0);
  // Index of the pass slice each stage's compute stream is extending (-1: none).
  std::vector<int> open_pass(f.plan.pp, -1);
  for (const SimEvent& ev : events) {
    const bool compute = ev.stream == Stream::compute;
    const SliceKind kind = compute ? compute_kind(ev.kind) : SliceKind::communication;
    const std::string stream = compute ? "compute" : to_string(ev.stream);
    if (compute) {
      // Layers of one pass stay one slice even when blocking TP/CP/EP collectives separate
      // them (those waits show on their own rows); a wait between passes is idle.
      const int open = open_pass[ev.stage];
      if (open >= 0 && t.slices[open].kind == kind && t.slices[open].name == pass_name(kind, ev)) {
        t.slices[open].end_s = std::max(t.slices[open].end_s, ev.end);
        compute_end[ev.stage] = std::max(compute_end[ev.stage], ev.end);
        continue;
      }
      if (ev.start > compute_end[ev.stage] + kTouch)
        t.slices.push_back({ev.stage, "compute", SliceKind::idle, "idle", compute_end[ev.stage], ev.start});
      compute_end[ev.stage] = std::max(compute_end[ev.stage], ev.end);
      open_pass[ev.stage] = static_cast<int>(t.slices.size());
      t.slices.push_back({ev.stage, stream, kind, pass_name(kind, ev), ev.start, ev.end});
      continue;
    }
    TimelineSlice* last = t.slices.empty() ? nullptr : &t.slices.back();
    if (last && last->stage == ev.stage && last->stream == stream && ev.start <= last->end_s + kTouch) {
      last->end_s = std::max(last->end_s, ev.end);
      continue;
    }
    t.slices.push_back({ev.stage, stream, kind, to_string(ev.kind), ev.start, ev.end});
  }
  for (const TimelineSlice& x : t.slices) t.end_s = std::max(t.end_s, x.end_s);
  t.simulated_s = r->total;
  t.source = "step simulator (llmplan simulate): one representative rank per stage, events merged per pass";
  return t;
}

std::string timeline_title(const std::string& plan, const Timeline& t, double analytic_s) {
  char buf[256];
  if (t.simulated_s > 0)
    std::snprintf(buf, sizeof buf, "One training step of %s: %.3f s simulated, %.3f s by the time model (%+.1f%%)", plan.c_str(), t.simulated_s,
                  analytic_s, 100 * (t.simulated_s / analytic_s - 1));
  else
    std::snprintf(buf, sizeof buf, "One training step of %s: not simulated; %.3f s by the time model", plan.c_str(), analytic_s);
  return buf;
}

}  // namespace llmplan::gui
