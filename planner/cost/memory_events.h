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
// A split backward (ZB-H1, ZB-V, DualPipeV: specs.h splits_backward) leaves its W (weight
// gradient) the output gradients of its trained linears (PassMemory::weight_grad_buffer,
// allocated at backward_start) and keeps the head's inputs, which the head's W reads; its B
// (input gradient) runs the backward's moments, but B's end frees only the working set and
// buffers: the activations and those gradients stay, and go at
//   weight_grad_end the W's end (split_backward_memory_events)
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
  weight_grad_end,
  optimizer_start,
  optimizer_end,
};
const char* to_string(MemoryMoment m);  // "forward_start"
// The phase a moment belongs to, and where it falls in its pass: at the pass's start or
// its end, and whether it is ordered before the other events of its time (the frees, and
// the optimizer step's end, which precedes whatever starts then).
constexpr Phase moment_phase(MemoryMoment m) {
  return m <= MemoryMoment::loss ? Phase::forward : m <= MemoryMoment::weight_grad_end ? Phase::backward : Phase::optimizer;
}
constexpr bool at_pass_end(MemoryMoment m) {
  return m == MemoryMoment::forward_end || m == MemoryMoment::head_forward || m == MemoryMoment::loss ||
         m == MemoryMoment::backward_end || m == MemoryMoment::weight_grad_end || m == MemoryMoment::optimizer_end;
}
constexpr bool frees_first(MemoryMoment m) {
  return m == MemoryMoment::forward_end || m == MemoryMoment::backward_end || m == MemoryMoment::weight_grad_end ||
         m == MemoryMoment::optimizer_end;
}

// The change an event makes to the items that change over a step, bytes (> 0 allocates,
// < 0 frees). The other items are held all step. (No member initializers: the sweep builds
// these for every plan it costs, and MemoryChange{} is all zeros.)
struct MemoryChange {
  double activations, backward_working, logits_loss, gathered_params, comm_buffers, gradients;
};
inline void apply(const MemoryChange& d, std::array<double, kMemoryItems>& items) {
  items[static_cast<int>(MemoryItem::activations)] += d.activations;
  items[static_cast<int>(MemoryItem::backward_working)] += d.backward_working;
  items[static_cast<int>(MemoryItem::logits_loss)] += d.logits_loss;
  items[static_cast<int>(MemoryItem::gathered_params)] += d.gathered_params;
  items[static_cast<int>(MemoryItem::comm_buffers)] += d.comm_buffers;
  items[static_cast<int>(MemoryItem::gradients)] += d.gradients;
}
// The fragmentation reserve of `items` -- `fraction` of the dynamic bytes (activations,
// working set, logits, gathered units, communication buffers: the caching allocator's
// reserve, MemoryOptions::fragmentation_fraction) -- and the total over all items with it
// in place of items' own fragmentation entry.
inline double fragmentation_bytes(const std::array<double, kMemoryItems>& items, double fraction) {
  return fraction * (items[static_cast<int>(MemoryItem::activations)] + items[static_cast<int>(MemoryItem::backward_working)] +
                     items[static_cast<int>(MemoryItem::logits_loss)] + items[static_cast<int>(MemoryItem::gathered_params)] +
                     items[static_cast<int>(MemoryItem::comm_buffers)]);
}
inline double total_with_fragmentation(const std::array<double, kMemoryItems>& items, double fragmentation) {
  double total = 0;
  for (int i = 0; i < static_cast<int>(MemoryItem::fragmentation); ++i) total += items[i];
  return total + fragmentation;  // fragmentation is the last item
}
// Sets items' fragmentation entry and returns the total.
inline double with_fragmentation(std::array<double, kMemoryItems>& items, double fraction) {
  items[static_cast<int>(MemoryItem::fragmentation)] = fragmentation_bytes(items, fraction);
  return total_with_fragmentation(items, items[static_cast<int>(MemoryItem::fragmentation)]);
}

struct MemoryEvent {
  MemoryMoment moment;
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
  double step_grad_copy = 0;                               // the optimizer step's fp32 gradients (memory_model.h step_grad_copy_bytes)
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
  // Split backward: the output gradients its W reads (the linears' weight_grad_buffer_bytes,
  // recipe.h, and on the head's chunk the logits' gradient), from its backward's largest
  // moment to its W's end. 0 for a whole backward.
  double weight_grad_buffer = 0;
  bool split_backward = false;  // B then W: the head set and weight_grad_buffer stay to the W's end
  // Logits + loss of another micro-batch held through this pass's backward (DualPipeV's F&B
  // pairs run a head forward beside a backward, whose head set then stays too); the
  // simulator, which plays the pairs, leaves it 0.
  double partner_logits = 0;
  // Activation offload: the one offloaded layer's activations resident beside the kept ones
  // (counted in the held activations) are gone at the head's moments: Transformer Engine
  // frees the last offloaded layer's GPU copy when the stage's last layer forward commits
  // and reloads it only at the top layer's backward (memory_model.cpp). 0 without offload.
  double offload_resident = 0;
  bool head() const { return logits > 0; }
};

// The events of a pass, in order: visit(const MemoryEvent&) for each, forward first. This
// function is the list; pass_memory_events collects it. (A visitor, not an array, so that
// the sweep's scan over it compiles to straight-line code.) A forward has at most 4, a
// backward at most 3.
template <class Visit>
[[gnu::always_inline]] inline void for_each_pass_memory_event(const PassMemory& pass, const StageMemoryProgram& st, Visit&& visit);

struct PassMemoryEvents {
  std::array<MemoryEvent, 4> forward;  // [0, forward_count) are set
  std::array<MemoryEvent, 3> backward;  // [0, backward_count) are set
  int forward_count = 0, backward_count = 0;
};
PassMemoryEvents pass_memory_events(const PassMemory& pass, const StageMemoryProgram& st);

// The same pass's backward run as B then W: B's events are the backward's but for the
// activations (and W buffer) its end would free, which the W's end frees instead.
struct SplitBackwardMemoryEvents {
  std::array<MemoryEvent, 3> input_grad;  // [0, input_grad_count) are set
  int input_grad_count = 0;
  MemoryEvent weight_grad_end;
};
SplitBackwardMemoryEvents split_backward_memory_events(const PassMemoryEvents& pass);
// The optimizer step's two events.
inline std::array<MemoryEvent, 2> optimizer_memory_events(const StageMemoryProgram& stage);

// ---- implementation

template <class Visit>
[[gnu::always_inline]] inline void for_each_pass_memory_event(const PassMemory& pass, const StageMemoryProgram& st, Visit&& visit) {
  auto fwd = [&](MemoryMoment at, const MemoryChange& d) __attribute__((always_inline)) { visit(MemoryEvent{at, d}); };
  auto& bwd = fwd;
  const double lg = st.layer_gathered, lc = st.layer_comm;
  fwd(MemoryMoment::forward_start, {pass.kept - pass.head_input, pass.transient, 0, lg, lc, 0});
  fwd(MemoryMoment::forward_end, {0, -pass.transient, 0, -lg, -lc, 0});
  if (pass.head()) {
    // The head GEMM's moment, then the loss's: the logits in the compute dtype grow into
    // the loss's logits + fp32 softmax, the head unit and the SP-gathered input give way
    // to what the loss keeps of them.
    fwd(MemoryMoment::head_forward,
        {pass.head_input - pass.offload_resident, st.head_forward_working, st.head_logits, st.head_gathered_forward, st.head_comm, 0});
    fwd(MemoryMoment::loss, {0, -st.head_forward_working, pass.logits - st.head_logits, -st.head_gathered_forward,
                             st.loss_comm - st.head_comm, 0});
  } else if (pass.head_input != 0) {
    fwd(MemoryMoment::head_forward, {pass.head_input, 0, 0, 0, 0, 0});
  }
  const double lgb = st.layer_gathered_backward, lcb = st.layer_comm_backward;
  // At backward_start. DualPipeV's moment with a partner is another chunk's backward beside
  // the head chunk's forward: the head set held is the partner's, not freed.
  const double head_freed = pass.split_backward || pass.partner_logits > 0 ? 0 : pass.head_set;
  const double g = pass.working > 0 ? st.grad_transient : 0;  // a chunk that trains
  if (pass.head()) {
    const double hw = st.head_backward_working, hg = st.head_gathered_backward, hl = st.head_logits, hgr = st.head_grad_transient;
    bwd(MemoryMoment::head_backward, {0, hw, -(pass.logits - hl), hg, st.head_comm - st.loss_comm, hgr});
    bwd(MemoryMoment::backward_start, {pass.weight_grad_buffer - head_freed + pass.offload_resident, pass.working - hw,
                                       pass.partner_logits - hl, lgb - hg, lcb - st.head_comm, g - hgr});
  } else {
    bwd(MemoryMoment::backward_start,
        {pass.weight_grad_buffer - head_freed, pass.working, pass.partner_logits - pass.logits, lgb, lcb, g});
  }
  bwd(MemoryMoment::backward_end,
      {-(pass.kept - head_freed) - pass.weight_grad_buffer, -pass.working, -pass.partner_logits, -lgb, -lcb, -g});
}

inline std::array<MemoryEvent, 2> optimizer_memory_events(const StageMemoryProgram& st) {
  // ZeRO-3's units gathered at the loss are released for the step; ZeRO 1-2 all-gather the
  // updated parameters through the persistent DP buckets straight into the weights (as
  // Megatron's distributed optimizer and DeepSpeed do), which takes no memory of its own.
  // A stack that steps on fp32 copies of its 16-bit gradients holds them beside the
  // gradients for the step (the gradients item) and frees them at its end.
  const double gathered = st.held[static_cast<int>(MemoryItem::gathered_params)];
  MemoryChange release{}, regather{};
  release.gathered_params = -gathered;
  regather.gathered_params = gathered;
  release.gradients = st.step_grad_copy;
  regather.gradients = -st.step_grad_copy;
  return {MemoryEvent{MemoryMoment::optimizer_start, release}, MemoryEvent{MemoryMoment::optimizer_end, regather}};
}

}  // namespace llmplan
