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

Phase moment_phase(MemoryMoment m) {
  switch (m) {
    case MemoryMoment::forward_start:
    case MemoryMoment::forward_end:
    case MemoryMoment::head_forward:
    case MemoryMoment::loss: return Phase::forward;
    case MemoryMoment::head_backward:
    case MemoryMoment::backward_start:
    case MemoryMoment::backward_end: return Phase::backward;
    case MemoryMoment::optimizer_start:
    case MemoryMoment::optimizer_end: return Phase::optimizer;
  }
  return Phase::forward;
}

bool at_pass_end(MemoryMoment m) {
  return m == MemoryMoment::forward_end || m == MemoryMoment::head_forward || m == MemoryMoment::loss ||
         m == MemoryMoment::backward_end || m == MemoryMoment::optimizer_end;
}

bool frees_first(MemoryMoment m) {
  return m == MemoryMoment::forward_end || m == MemoryMoment::backward_end || m == MemoryMoment::optimizer_end;
}

void apply(const MemoryChange& d, std::array<double, kMemoryItems>& items) {
  items[static_cast<int>(MemoryItem::activations)] += d.activations;
  items[static_cast<int>(MemoryItem::backward_working)] += d.backward_working;
  items[static_cast<int>(MemoryItem::logits_loss)] += d.logits_loss;
  items[static_cast<int>(MemoryItem::gathered_params)] += d.gathered_params;
  items[static_cast<int>(MemoryItem::comm_buffers)] += d.comm_buffers;
  items[static_cast<int>(MemoryItem::gradients)] += d.gradients;
}

double with_fragmentation(std::array<double, kMemoryItems>& items, double fraction) {
  const double dynamic = items[static_cast<int>(MemoryItem::activations)] + items[static_cast<int>(MemoryItem::backward_working)] +
                         items[static_cast<int>(MemoryItem::logits_loss)] + items[static_cast<int>(MemoryItem::gathered_params)] +
                         items[static_cast<int>(MemoryItem::comm_buffers)];
  items[static_cast<int>(MemoryItem::fragmentation)] = fraction * dynamic;
  double total = 0;
  for (double x : items) total += x;
  return total;
}

PassMemoryEvents pass_memory_events(const PassMemory& pass, const StageMemoryProgram& st) {
  PassMemoryEvents ev;
  auto fwd = [&](MemoryMoment at, MemoryChange d) { ev.forward[ev.forward_count++] = {at, d}; };
  auto bwd = [&](MemoryMoment at, MemoryChange d) { ev.backward[ev.backward_count++] = {at, d}; };
  const double lg = st.layer_gathered, lc = st.layer_comm;
  fwd(MemoryMoment::forward_start, {pass.kept - pass.head_input, pass.transient, 0, lg, lc, 0});
  fwd(MemoryMoment::forward_end, {0, -pass.transient, 0, -lg, -lc, 0});
  if (pass.head()) {
    // The head GEMM's moment, then the loss's: the logits in the compute dtype grow into
    // the loss's logits + fp32 softmax, the head unit and the SP-gathered input give way
    // to what the loss keeps of them.
    fwd(MemoryMoment::head_forward, {pass.head_input, st.head_forward_working, st.head_logits, st.head_gathered_forward, st.head_comm, 0});
    fwd(MemoryMoment::loss, {0, -st.head_forward_working, pass.logits - st.head_logits, -st.head_gathered_forward,
                             st.loss_comm - st.head_comm, 0});
  } else if (pass.head_input != 0) {
    fwd(MemoryMoment::head_forward, {pass.head_input, 0, 0, 0, 0, 0});
  }
  const double lgb = st.layer_gathered_backward, lcb = st.layer_comm_backward;
  const double g = pass.working > 0 ? st.grad_transient : 0;  // a chunk that trains
  if (pass.head()) {
    const double hw = st.head_backward_working, hg = st.head_gathered_backward, hl = st.head_logits, hgr = st.head_grad_transient;
    bwd(MemoryMoment::head_backward, {0, hw, -(pass.logits - hl), hg, st.head_comm - st.loss_comm, hgr});
    bwd(MemoryMoment::backward_start, {-pass.head_set, pass.working - hw, -hl, lgb - hg, lcb - st.head_comm, g - hgr});
  } else {
    bwd(MemoryMoment::backward_start, {-pass.head_set, pass.working, -pass.logits, lgb, lcb, g});
  }
  bwd(MemoryMoment::backward_end, {-(pass.kept - pass.head_set), -pass.working, 0, -lgb, -lcb, -g});
  return ev;
}

std::array<MemoryEvent, 2> optimizer_memory_events(const StageMemoryProgram& st) {
  // ZeRO-3's units gathered at the loss are released for the step; ZeRO 1-2 all-gather the
  // updated parameters through the persistent DP buckets straight into the weights (as
  // Megatron's distributed optimizer and DeepSpeed do), which takes no memory of its own.
  const double gathered = st.held[static_cast<int>(MemoryItem::gathered_params)];
  MemoryChange release, regather;
  release.gathered_params = -gathered;
  regather.gathered_params = gathered;
  return {MemoryEvent{MemoryMoment::optimizer_start, release}, MemoryEvent{MemoryMoment::optimizer_end, regather}};
}

}  // namespace llmplan
