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
    case MemoryMoment::optimizer_start: return "optimizer_start";
    case MemoryMoment::optimizer_end: return "optimizer_end";
  }
  return "?";
}

}  // namespace llmplan
