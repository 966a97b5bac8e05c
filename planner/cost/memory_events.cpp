#include "planner/cost/memory_events.h"

namespace llmplan {

const char* to_string(MemoryMoment m) {
  switch (m) {
    case MemoryMoment::forward_start: return "forward_start";
    case MemoryMoment::forward_end: return "forward_end";
    case MemoryMoment::head_forward: return "head_forward";
    case MemoryMoment::loss: return "loss";
    case MemoryMoment::head_backward: return "head_backward";
    case MemoryMoment::backward_start: return "backward_start";
    case MemoryMoment::backward_end: return "backward_end";
    case MemoryMoment::weight_grad_end: return "weight_grad_end";
    case MemoryMoment::optimizer_start: return "optimizer_start";
    case MemoryMoment::optimizer_end: return "optimizer_end";
  }
  return "?";
}

PassMemoryEvents pass_memory_events(const PassMemory& pass, const StageMemoryProgram& st) {
  PassMemoryEvents ev;
  for_each_pass_memory_event(pass, st, [&](const MemoryEvent& e) {
    if (moment_phase(e.moment) == Phase::forward) ev.forward[ev.forward_count++] = e;
    else ev.backward[ev.backward_count++] = e;
  });
  return ev;
}

SplitBackwardMemoryEvents split_backward_memory_events(const PassMemoryEvents& pass) {
  SplitBackwardMemoryEvents out;
  out.input_grad_count = pass.backward_count;
  out.input_grad = pass.backward;
  for (int i = 0; i < out.input_grad_count; ++i) {
    MemoryEvent& e = out.input_grad[i];
    if (e.moment != MemoryMoment::backward_end) continue;
    MemoryChange w{};
    w.activations = e.change.activations;
    out.weight_grad_end = {MemoryMoment::weight_grad_end, w};
    e.change.activations = 0;
  }
  return out;
}

}  // namespace llmplan
