// Pipeline parallel: runs one step's micro-batches through this rank's stage (a Model
// built with ModelConfig::stage) under the plan's schedule, exchanging activations and
// their gradients with the neighbouring stages over the PP group of a Communicator.
//
// Schedules (Narayanan et al. 2021; Megatron-LM's forward_backward_pipelining_without_
// interleaving): GPipe (every forward, then every backward: m micro-batches in flight)
// and 1F1B (stage i runs p-i-1 warm-up forwards, then alternates one forward and one
// backward: min(m, p-i) in flight), i.e. planner inflight_microbatches. A send is paired
// with the receive that follows it (Communicator::sendrecv) as Megatron batches its p2p,
// so blocking point-to-point cannot deadlock.
//
// Interleaved 1F1B (plan.vpp = v > 1; Narayanan et al. 2021 sec 2.2, Megatron-LM's
// forward_backward_pipelining_with_interleaving): the model has v chunks (Model::chunk;
// chunk c is virtual stage c*p + r). The step's m*v chunk-micro-batches run in Megatron's
// order -- virtual micro-batch k is micro-batch (k / (p*v))*p + k % p of chunk
// (k % (p*v)) / p (backward: v-1 minus that) -- with (p-r-1)*2 + (v-1)*p warm-up
// forwards, then one forward and one backward, then the cool-down backwards; m must be a
// multiple of p. Activations go from virtual stage s to s+1 (rank r chunk c to rank r+1
// chunk c; rank p-1 chunk c to rank 0 chunk c+1), gradients back. Sends are non-blocking
// (Communicator::isend) from one activation and one gradient send buffer, each waited for
// before its reuse; receives are blocking, just before use. That cannot deadlock even when
// every send waits for its receive (tests/executor_dist: InterleavedSchedule simulates
// the order for pp 2..8, vpp 2..4, m = pp..5pp; one shared send buffer does deadlock), and
// the buffers are the planner's interleaved PP comm_buffers: three stage outputs.
//
// Split backward (zero-bubble schedules; Qi et al. 2024): the stage runs each backward as
// B (Model::stage_backward_input, whose input gradient goes to the previous stage) and W
// (stage_backward_weight) in the order of simulator/schedule.h pipeline_schedule (PyTorch's
// torch.distributed.pipelining orders), one slot per micro-batch. ZB-H1 (vpp 1) is 1F1B's
// order of F and B with the W's between (the same paired sends and two buffers); ZB-V
// (vpp 2) places chunk 0 on virtual stage r and chunk 1 on 2pp-1-r (the V: stage 0 holds
// the embedding and the head) and communicates as interleaved 1F1B does (non-blocking
// sends, each buffer's previous send waited for before it is rewritten; blocking receives
// just before use), but with a send buffer per chunk and direction: the two chunks' sends
// go opposite ways, and one shared activation (gradient) buffer deadlocks from pp 3 on
// (tests/executor_dist: SplitSchedules simulates the orders with rendezvous sends). At the
// V's turn (stage pp-1, chunk 0 to chunk 1 and back) the output stays in its send buffer
// for the other chunk, which must be that buffer's next user (checked). Stage 0 sends from
// two of the four (chunk 0's activations, chunk 1's gradients), the others from all four:
// with the receive buffer 3 and 5 stage outputs, the planner's V comm_buffers.
// DualPipeV (vpp 2, m >= 2pp; DeepSeek's DualPipe README, PyTorch's ScheduleDualPipeV)
// runs on the same V walker and buffers: its overlapped F&B pairs run as the forward, then
// the whole backward (Model::stage_backward, B and W at once), as schedule.h orders them;
// the overlap of one pass's communication with the other's compute is a time effect the
// simulator costs, not something a CPU rank can show. SplitSchedules checks its programs
// for deadlock as ZB-V's.
//
// Buffers: one send and one receive buffer of one micro-batch's stage output
// (b*s/t_sp x h, activation dtype) in Category::communication: the planner's
// "2 * tokens * h / seq_div * act_bytes" of PP comm_buffers.
// Tied embeddings on pp > 1: the first stage's embedding and the last stage's copy get
// their gradients summed (sync_tied_embedding, Megatron's embedding-group all-reduce).
// Errors: runtime Status from the communicator or the model (OOM). Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "executor/allocator.h"
#include "executor/comm/bucket_ops.h"
#include "executor/comm/communicator.h"
#include "executor/model.h"

namespace llmplan::exec {

class Pipeline {
 public:
  // REQUIRES: model is stage comm.rank(Group::pp) of plan; model, comm, alloc (and ops)
  // outlive this. ops: how the backend adds its tensors (the tied embedding's gradient);
  // nullptr: host memory.
  static Result<std::unique_ptr<Pipeline>> create(TrackingAllocator& alloc, Model& model, Communicator& comm,
                                                  BucketOps* ops = nullptr);
  // Runs micro-batches 0..m-1 (batch(j), dropout seed seed(j)) forward and backward; weight
  // gradients accumulate in the model. Returns the sum of the micro-batches' losses on the
  // last stage, 0 on the others.
  Result<double> run_step(int64_t m, const std::function<Batch(int64_t)>& batch, const std::function<uint64_t(int64_t)>& seed,
                          double loss_scale, double denom);
  // Sums the tied embedding's gradient between the first and the last stage (no-op
  // without tied embeddings or with pp = 1).
  Status sync_tied_embedding();
  // Interleaved 1F1B: pipeline rank r's order of chunk forwards and backwards for m
  // micro-batches over p ranks with v chunks each (Megatron's; see the top).
  struct ChunkOp {
    bool forward = true;
    int chunk = 0;
    int64_t micro_batch = 0;
  };
  static std::vector<ChunkOp> interleaved_order(int p, int v, int64_t m, int r);
  // Micro-batches this stage holds at once under the schedule (planner inflight_microbatches).
  static int64_t slots(const ParallelPlan& plan, int64_t m, int stage);
  // ZB-H1: the W's stage `stage` runs after its i-th B (w_after[i], micro-batches in
  // order), read from its pipeline_schedule program. Errors: the program's F and B are not
  // 1F1B's (the order this pipeline pairs its sends in).
  static Result<std::vector<std::vector<int64_t>>> zb_h1_weight_passes(int p, int64_t m, int stage);

 private:
  Pipeline() = default;
  Result<double> run_interleaved(int64_t m, const std::function<Batch(int64_t)>& batch,
                                 const std::function<uint64_t(int64_t)>& seed, double loss_scale, double denom);
  Result<double> run_v(int64_t m, const std::function<Batch(int64_t)>& batch, const std::function<uint64_t(int64_t)>& seed,
                       double loss_scale, double denom);
  Tensor send_grad_;                // interleaved: the gradient send buffer (send_: activations)
  int send_h_ = -1, send_grad_h_ = -1;  // their pending isend handles (-1: none)
  Tensor v_send_[2][2];             // ZB-V: [forward][chunk] send buffers (undefined where the stage sends none)
  int v_send_h_[2][2] = {{-1, -1}, {-1, -1}};
  TrackingAllocator* alloc_ = nullptr;
  Model* model_ = nullptr;
  Communicator* comm_ = nullptr;
  HostBucketOps host_ops_;
  BucketOps* ops_ = nullptr;
  Tensor send_, recv_;
  int64_t count_ = 0;  // elements of one stage output
  DType dtype_ = DType::f32;
};

}  // namespace llmplan::exec
