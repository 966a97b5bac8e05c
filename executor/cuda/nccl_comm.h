// NcclComm: a thin wrapper of one NCCL communicator for the GPU side of the executor's
// collectives. Every collective runs on the context's communication stream and returns
// once enqueued (order it against compute with CudaContext::order_after). Errors come back
// as runtime Status values naming the call and NCCL's message.
//
// Bootstrapping: rank 0 calls unique_id(), the id's bytes travel to every rank over MPI
// (the host Communicator), then every rank calls init() with the same id; sub-communicators
// come from split(). The executor's Communicator over NCCL (nccl_communicator.h) holds one
// of these per group.
//
// Data types: f32, bf16, f16, f64, i32, u8. Counts are elements. Only compiled where NCCL
// was found (cmake/Cuda.cmake); linked shared (no static NCCL exists).
// Thread-safety: as CudaContext; one communicator per (context, group).
#pragma once

#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "executor/cuda/context.h"
#include "executor/dtype.h"
#include "planner/spec/status.h"

namespace llmplan::exec::cuda {

enum class ReduceOp { sum, avg, max, min };

// NCCL's element type for t (every DType: f32, f64, bf16, f16, i32, u8).
Result<ncclDataType_t> nccl_type(DType t);
// "ncclAllReduce on the dp group: unhandled cuda error (...)": what, NCCL's name for r, and
// NCCL's last message when it has one. Only for r != ncclSuccess.
Status nccl_error(ncclResult_t r, const std::string& what, const char* last_error = nullptr);

class NcclComm {
 public:
  // A fresh id for a new communicator (rank 0 only).
  static Result<ncclUniqueId> unique_id();
  // Joins the communicator `id` as `rank` of `nranks` on ctx's device. Blocks until every
  // rank has joined.
  static Result<std::unique_ptr<NcclComm>> init(CudaContext& ctx, const ncclUniqueId& id, int nranks, int rank);
  // ncclCommSplit: every rank of this communicator calls it (collective); ranks with equal
  // colour form one new communicator, ranked by key. REQUIRES: colour >= 0.
  Result<std::unique_ptr<NcclComm>> split(int colour, int key);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return nranks_; }

  // recv (count) = op over ranks of send (count); send may equal recv (in place).
  Status all_reduce(const void* send, void* recv, int64_t count, DType t, ReduceOp op);
  // recv (recv_count) = this rank's slice of op over ranks of send (recv_count * size()).
  Status reduce_scatter(const void* send, void* recv, int64_t recv_count, DType t, ReduceOp op);
  // recv (send_count * size()) = every rank's send (send_count), in rank order.
  Status all_gather(const void* send, void* recv, int64_t send_count, DType t);
  // recv (count) = root's send (count).
  Status broadcast(const void* send, void* recv, int64_t count, DType t, int root);
  // Point-to-point (pipeline stages). A matching send and recv must be enqueued on both
  // sides; pair them in group_start/group_end to avoid ordering deadlocks.
  Status send(const void* buf, int64_t count, DType t, int peer);
  Status recv(void* buf, int64_t count, DType t, int peer);
  // send to and recv from `peer` in one NCCL group (neither waits for the other).
  Status sendrecv(const void* sbuf, void* rbuf, int64_t count, DType t, int peer);
  // send to `to` and recv from `from` in one NCCL group (a ring's shift).
  Status exchange(const void* sbuf, int to, void* rbuf, int from, int64_t count, DType t);
  // recv (count * size()): block j = what rank j sent this rank; send (count * size()):
  // block j goes to rank j. One ncclSend/ncclRecv pair per rank (itself included) inside
  // one NCCL group, so no pair waits for another. REQUIRES: send and recv do not overlap.
  Status all_to_all(const void* send, void* recv, int64_t count, DType t);
  static Status group_start();
  static Status group_end();

 private:
  NcclComm(CudaContext& ctx, ncclComm_t comm, int nranks, int rank)
      : ctx_(ctx), comm_(comm), nranks_(nranks), rank_(rank) {}
  Status check(ncclResult_t r, const char* what) const;
  CudaContext& ctx_;
  ncclComm_t comm_;
  int nranks_, rank_;
};

}  // namespace llmplan::exec::cuda
