// The memory events of a step (planner/cost/memory_events.h) against their closed forms:
// every pass frees what it allocates, and the memory model's phase peaks are the largest
// of the moments the header documents, written out here by hand from the stage's extras.
#include <algorithm>
#include <array>

#include <gtest/gtest.h>

#include "planner/cost/memory_events.h"
#include "planner/cost/memory_model.h"
#include "tests/model_fixtures.h"

namespace llmplan {
namespace {

MemoryChange sum(const MemoryChange& a, const MemoryChange& b) {
  return {a.activations + b.activations,     a.backward_working + b.backward_working, a.logits_loss + b.logits_loss,
          a.gathered_params + b.gathered_params, a.comm_buffers + b.comm_buffers,     a.gradients + b.gradients};
}

void expect_zero(const MemoryChange& c, const char* what) {
  EXPECT_EQ(c.activations, 0) << what;
  EXPECT_EQ(c.backward_working, 0) << what;
  EXPECT_EQ(c.logits_loss, 0) << what;
  EXPECT_EQ(c.gathered_params, 0) << what;
  EXPECT_EQ(c.comm_buffers, 0) << what;
  EXPECT_EQ(c.gradients, 0) << what;
}

// Integer byte counts (exact in double): a forward and its backward leave nothing behind,
// with and without the LM head, and so does the optimizer step.
TEST(MemoryEvents, EveryPassFreesWhatItAllocates) {
  StageMemoryProgram st;
  st.held[static_cast<int>(MemoryItem::gathered_params)] = 4096;
  st.layer_gathered = 700, st.layer_gathered_backward = 900;
  st.layer_comm = 30, st.layer_comm_backward = 50;
  st.grad_transient = 11;
  st.head_logits = 2000, st.head_forward_working = 13, st.head_backward_working = 17;
  st.head_gathered_forward = 300, st.head_gathered_backward = 500, st.head_grad_transient = 19;
  st.head_comm = 23, st.loss_comm = 7;
  for (bool head : {false, true}) {
    PassMemory pass;
    pass.kept = 100000;
    pass.transient = 5000;
    pass.working = 8000;
    if (head) pass.head_set = 600, pass.head_input = 400, pass.logits = 6000;
    const PassMemoryEvents ev = pass_memory_events(pass, st);
    ASSERT_EQ(ev.forward[0].moment, MemoryMoment::forward_start);
    ASSERT_EQ(ev.backward[ev.backward_count - 1].moment, MemoryMoment::backward_end);
    EXPECT_EQ(ev.forward_count, head ? 4 : 2);
    EXPECT_EQ(ev.backward_count, head ? 3 : 2);
    MemoryChange total{};
    for (int i = 0; i < ev.forward_count; ++i) {
      EXPECT_EQ(moment_phase(ev.forward[i].moment), Phase::forward);
      total = sum(total, ev.forward[i].change);
    }
    // After the forward the pass holds its kept activations (and, with the head, its
    // logits and what the loss keeps of the SP-gathered head input).
    EXPECT_EQ(total.activations, pass.kept);
    EXPECT_EQ(total.logits_loss, pass.logits);
    EXPECT_EQ(total.comm_buffers, head ? st.loss_comm : 0);
    EXPECT_EQ(total.backward_working + total.gathered_params + total.gradients, 0);
    for (int i = 0; i < ev.backward_count; ++i) {
      EXPECT_EQ(moment_phase(ev.backward[i].moment), Phase::backward);
      total = sum(total, ev.backward[i].change);
    }
    expect_zero(total, head ? "pass with the head" : "pass without the head");
  }
  const std::array<MemoryEvent, 2> opt = optimizer_memory_events(st);
  EXPECT_EQ(opt[0].change.gathered_params, -4096);
  expect_zero(sum(opt[0].change, opt[1].change), "optimizer step");
}

double total_with(const std::array<double, kMemoryItems>& fixed, double dynamic, double fraction) {
  double t = 0;
  for (double x : fixed) t += x;
  return t + dynamic * (1 + fraction);
}

// Llama-2-7B over 2 stages x tp 2 with SP, ZeRO-3 over dp 4, 8 micro-batches: each
// phase's peak is the largest of its documented moments, from the stage's extras.
TEST(MemoryEvents, PhasePeaksAreTheLargestDocumentedMoment) {
  const ModelSpec m = testing::llama2_7b();
  TrainingJob j;
  j.seq_len = 2048;
  j.global_batch = 32;
  j.precision = Precision::bf16;
  ParallelPlan p;
  p.dp = 4;
  p.tp = 2;
  p.sp = true;
  p.pp = 2;
  p.zero = 3;
  p.micro_batch = 1;
  p.grad_accum = 8;
  MemoryOptions opt;
  opt.head_gemm_scratch_bytes = 1 << 20;
  const ClusterSpec c = testing::dgx_a100(2);
  const MemoryInputs in = memory_inputs(m, c.gpu, j, p, opt);
  const double frac = opt.fragmentation_fraction;
  for (int s = 0; s < p.pp; ++s) {
    SCOPED_TRACE(s);
    const bool last = s == p.pp - 1;
    const StageMemory sm = estimate_stage_memory(m, c, j, p, s, opt);
    const StageMemoryExtras x = stage_memory_extras(m, j, p, s, opt);
    // Held all step: the model states, workspace and context (the optimizer phase's,
    // whose only dynamic bytes are the communication buffers outside layers).
    std::array<double, kMemoryItems> fixed = sm.phase_bytes[static_cast<int>(Phase::optimizer)];
    for (MemoryItem it : {MemoryItem::activations, MemoryItem::backward_working, MemoryItem::logits_loss, MemoryItem::gathered_params,
                          MemoryItem::comm_buffers, MemoryItem::fragmentation})
      fixed[static_cast<int>(it)] = 0;
    const double acts = sm.item_peak[static_cast<int>(MemoryItem::activations)];  // every in-flight micro-batch's
    const double logits = sm.item_peak[static_cast<int>(MemoryItem::logits_loss)];
    const double other_logits = last ? logits - x.logits_set : 0;
    const double transient = in.transient_bytes[0][0][0];  // kind 0 (the only one), trainable, no recompute
    const double working = in.remat_bytes[0][0][0] + x.activation_grads;
    const double comm_out = x.comm_buffers - x.layer_comm_buffers;  // outside layers
    // Forward: a layer's forward, the head GEMM, the loss.
    const double layer_fwd = acts - x.head_input + transient + other_logits + x.gathered_pool_layer + x.comm_buffers;
    const double head_fwd = last ? acts + x.head_forward_working + other_logits + x.head_logits + x.head_gathered_forward + comm_out +
                                       x.head_comm
                                 : 0;
    const double loss = acts + logits + x.gathered_at_loss + comm_out + x.loss_comm;
    const double fwd = std::max({layer_fwd, head_fwd, loss});
    EXPECT_NEAR(sm.phase_total[static_cast<int>(Phase::forward)], total_with(fixed, fwd, frac), 1e-9 * fwd);
    // Backward: the head GEMM (with the head unit's gradient), a layer's (with a unit's).
    const double head_bwd = last ? acts + x.head_backward_working + other_logits + x.head_logits + x.head_gathered_backward +
                                       comm_out + x.head_comm
                                 : 0;
    const double layer_bwd = acts - (last ? x.last_chunk_set : 0) + working + other_logits + x.gathered_pool_backward + comm_out +
                             x.backward_layer_comm;
    const double bwd_head_total = total_with(fixed, head_bwd, frac) + x.head_grad_transient;
    const double bwd_layer_total = total_with(fixed, layer_bwd, frac) + x.unit_grad_transient;
    const double bwd = last ? std::max(bwd_head_total, bwd_layer_total) : bwd_layer_total;
    EXPECT_NEAR(sm.phase_total[static_cast<int>(Phase::backward)], bwd, 1e-9 * bwd);
    // The optimizer step: no activations, no gathered units, the buffers outside layers.
    EXPECT_NEAR(sm.phase_total[static_cast<int>(Phase::optimizer)], total_with(fixed, comm_out, frac), 1.0);
    // The model states and the layer-only buffers this test reads are not all zero.
    EXPECT_GT(x.gathered_pool_layer, 0);
    EXPECT_GT(x.layer_comm_buffers, 0);
    if (last) {
      EXPECT_GT(x.head_comm, 0);
      EXPECT_GT(x.head_logits, 0);
    }
  }
}

}  // namespace
}  // namespace llmplan
