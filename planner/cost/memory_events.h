// The memory events of one step on one pipeline stage: what the stage holds all step, and
// the allocations and frees of one micro-batch's forward and backward through a model
// chunk, at the moments the memory model reasons about. One description, two users:
// estimate_memory's peak of a stage is a scan of these events with every other in-flight
// micro-batch's activations held (the schedule's closed-form count, memory_model.cpp), and
// the simulator plays the same events at the times it schedules each pass and takes the
// largest total it meets (simulator/step_simulator.cpp). The bytes come from the memory
// model (stage_memory_extras, the recipe's per-layer bytes); this file fixes their order.
//
// A forward and a backward of one micro-batch through one chunk (PassMemory: what the
// pass keeps and needs) run through these moments:
//   forward_start   its kept activations (less the LM-head input) and its largest layer
//                   transient are allocated, with the layer-only buffers (ZeRO-3's
//                   gathered units, the SP gather, the EP all-to-all, the CP exchange)
//   forward_end     the transient and the layer-only buffers are freed
//   head_forward    last chunk of the last stage: the LM-head GEMM writes the logits in the
//                   compute dtype beside the head input it was given, with its scratch, the
//                   gathered head unit, the SP-gathered head input (any other chunk: the
//                   head input and logits it makes, if any)
//   loss            the loss adds its fp32 softmax; the GEMM's scratch and buffers go
//   head_backward   a backward starts with the LM-head backward GEMM over the logits'
//                   gradient (written over the logits), its scratch, the head unit's
//                   full-size gradient (ZeRO >= 2) and the gathered head + last layer
//   backward_start  the layers' backward at its largest moment: the head inputs and logits
//                   freed, the re-materialised activations and activation gradients
//                   (working), a unit's full-size gradient, the layer-only buffers
//   backward_end    the pass's activations, working set and buffers are freed
// and the optimizer step frees ZeRO-3's units gathered at the loss (optimizer_start) and
// gets them back for the next step (optimizer_end). At equal times frees come first.
//
// Plain values and pure functions. Thread-safety: pure.
#pragma once

#include <array>
#include <cstdint>

#include "planner/cost/memory_model.h"

namespace llmplan {

enum class MemoryMoment : uint8_t {
  forward_start,
  forward_end,
  head_forward,
  loss,
  head_backward,
  backward_start,
  backward_end,
  optimizer_start,
  optimizer_end,
};
const char* to_string(MemoryMoment m);  // "forward_start"
// The phase a moment belongs to, and where it falls in its pass: at the pass's start or
// its end, and whether it frees (frees come first at equal times).
Phase moment_phase(MemoryMoment m);
bool at_pass_end(MemoryMoment m);
bool frees_first(MemoryMoment m);

// The change an event makes to the items that change over a step, bytes (> 0 allocates,
// < 0 frees). The other items are held all step.
struct MemoryChange {
  double activations = 0, backward_working = 0, logits_loss = 0, gathered_params = 0, comm_buffers = 0, gradients = 0;
};
void apply(const MemoryChange& d, std::array<double, kMemoryItems>& items);
// Sets the fragmentation item to `fraction` of the dynamic bytes (activations, working
// set, logits, gathered units, communication buffers: the caching allocator's reserve,
// MemoryOptions::fragmentation_fraction) and returns the total over all items.
double with_fragmentation(std::array<double, kMemoryItems>& items, double fraction);

struct MemoryEvent {
  MemoryMoment moment = MemoryMoment::forward_start;
  MemoryChange change;
};

// What the stage holds all step, and what its passes hold beside their activations
// (from stage_memory_extras; every ZeRO-3 term is beyond the units held at the loss).
struct StageMemoryProgram {
  // Model states, ZeRO-3's units gathered at the loss, the communication buffers outside
  // layers, the GEMM workspace, the CUDA context (activations, working set, logits and
  // fragmentation are 0).
  std::array<double, kMemoryItems> held{};
  double fragmentation_fraction = 0;
  double layer_gathered = 0, layer_gathered_backward = 0;  // ZeRO-3: a layer's forward, its backward
  double layer_comm = 0, layer_comm_backward = 0;          // layer-only buffers in a forward, at a backward's largest moment
  double grad_transient = 0;                               // ZeRO >= 2: a trainable unit's full-size gradient in backward
  // The LM head (last stage; see StageMemoryExtras).
  double head_logits = 0, head_forward_working = 0, head_backward_working = 0;
  double head_gathered_forward = 0, head_gathered_backward = 0, head_grad_transient = 0;
  double head_comm = 0, loss_comm = 0;
};
// REQUIRES: check_plan(m, c, j, p, ...) == none; 0 <= stage < p.pp.
StageMemoryProgram stage_memory_program(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                                        int stage, const MemoryOptions& opt = {});

// One micro-batch's pass through one chunk, bytes.
struct PassMemory {
  double kept = 0;        // activations kept from its forward to its backward, the head set included
  double head_set = 0;    // of kept, the final-norm and LM-head inputs its head backward frees (last chunk of the last stage)
  double head_input = 0;  // of head_set, made at the end of its layers' forward (the LM-head input)
  double logits = 0;      // logits + fp32 softmax from its loss to its head backward (last chunk of the last stage)
  double transient = 0;   // the largest layer forward transient
  double working = 0;     // its backward's working set: re-materialised + activation gradients (0: nothing in the chunk trains)
  bool head() const { return logits > 0; }
};

// The events of a pass, in order. A forward has at most 4, a backward at most 3.
struct PassMemoryEvents {
  std::array<MemoryEvent, 4> forward{};
  std::array<MemoryEvent, 3> backward{};
  int forward_count = 0, backward_count = 0;
};
PassMemoryEvents pass_memory_events(const PassMemory& pass, const StageMemoryProgram& stage);
// The optimizer step's two events.
std::array<MemoryEvent, 2> optimizer_memory_events(const StageMemoryProgram& stage);

}  // namespace llmplan
