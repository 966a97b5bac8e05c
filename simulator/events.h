// The vocabulary of a simulated step: the streams of a rank and the kinds of operation
// that run on them, and one recorded event (a slice of the trace).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>

namespace llmplan {

// Streams of one rank. The compute stream runs forward, backward, recompute and the
// optimizer; each communication kind has its own stream (its operations run in issue
// order); pp_recv_* mirror the neighbours' sends on the receiving rank.
enum class Stream : uint8_t {
  compute,
  tp,            // TP / SP collectives inside a layer (blocking)
  cp,            // context-parallel ring exchange (exposed part)
  ep,            // MoE all-to-all
  pp_send_next,  // activations to the next virtual stage
  pp_send_prev,  // input gradients to the previous virtual stage
  pp_recv_prev,  // activations arriving from the previous virtual stage
  pp_recv_next,  // gradients arriving from the next virtual stage
  dp_reduce,     // gradient all-reduce / reduce-scatter by bucket
  dp_gather,     // ZeRO parameter all-gathers
  kCount
};
constexpr int kStreams = static_cast<int>(Stream::kCount);
const char* to_string(Stream s);  // "compute", "tp", "pp send next", ...

enum class EventKind : uint8_t {
  forward,          // one layer's forward compute
  backward,         // one layer's backward compute
  recompute,        // one layer's recomputed forward inside its backward
  weight_grad,      // one layer's weight-gradient GEMMs, run apart from its backward (split-backward schedules)
  head_forward,     // LM head + loss
  head_backward,
  tp_comm,
  cp_comm,
  ep_comm,
  pp_send,          // activation or gradient between stages (sender side)
  pp_recv,          // the same transfer seen by the receiver
  dp_grad_sync,     // gradient bucket: all-reduce (ZeRO-0) or reduce-scatter (ZeRO >= 1)
  dp_param_gather,  // ZeRO parameter all-gather (ZeRO-1/2 after the step, ZeRO-3 per layer)
  optimizer,        // optimizer step on the GPU, or host transfers + CPU step when offloaded
  barrier,          // not recorded: every stage's gradients are ready (global grad norm)
  kCount
};
const char* to_string(EventKind k);  // "forward", "dp grad sync", ...

// One operation of one representative rank (the trace's slice).
struct SimEvent {
  int32_t stage = 0;        // pipeline stage of the rank
  Stream stream = Stream::compute;
  EventKind kind = EventKind::forward;
  int32_t microbatch = -1;  // -1 when not per micro-batch
  int32_t chunk = -1;       // model chunk (virtual stage: schedule.h), -1 if n/a
  int32_t layer = -1;       // global layer index, -1 if n/a
  int32_t peer = -1;        // pp send/recv: the other stage
  double bytes = 0;         // communication: bytes moved per rank (0 for compute)
  double start = 0, end = 0;  // s from the start of the step
};

}  // namespace llmplan
