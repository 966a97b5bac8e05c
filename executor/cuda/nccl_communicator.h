// NcclCommunicator: the executor's Communicator (executor/comm/communicator.h) over NCCL,
// one GPU per rank, so the distributed code paths of the CPU (DataParallel, the model's
// collectives, the runner's step) run unchanged on device buffers.
//
// Groups: one NCCL communicator per group this rank belongs to. The world's is bootstrapped
// from a unique id that world rank 0 draws and broadcasts over the host communicator (MPI);
// every subgroup is ncclCommSplit of the world by group_split (communicator.h), the colours
// and keys MpiCommunicator gives MPI_Comm_split, so the NCCL rank in a group = the MPI rank
// there = the rank's coordinate. A group as large as the world shares the world's
// communicator; a group of one rank gets none (its collectives are copies on the
// communication stream). Group sizes follow from the plan, so every rank makes the same
// choices and every split is called by every rank. That includes the expert-parallel
// groups (Group::ep, Group::edp): the plan is read back from the host's group sizes, ep
// included, so their colours and keys are MPI's too. all_to_all (MoE token exchange over
// ep) is one ncclSend/ncclRecv pair per group rank inside one NCCL group, on the
// communication stream and ordered like every other call. ring_shift (context
// parallel's ring) is an ncclSend to group rank r + 1 and an ncclRecv from r - 1 in one
// NCCL group.
//
// Memory: device buffers go over NCCL. Host buffers -- the step's loss, the gradient-norm
// partial sums, ZeRO's scalar sums: doubles the host computes with -- go over the host
// communicator on the same group, unstaged (cudaPointerGetAttributes tells them apart).
// A call mixing host and device buffers is bad_input.
//
// Streams and ordering: NCCL work runs on the context's communication stream. Before each
// call that stream waits (an event, no host sync) for the work enqueued on the compute
// stream so far, so a collective sees the gradients the kernels before it wrote; after it
// the compute stream waits for the communication stream, so kernels enqueued later read
// the results, and buffers freed later are reused by the caching allocator only after the
// collective (cuda_allocator.h's rule for memory used on another stream). Calls return
// once enqueued, so the host never waits. Overlap (Communicator::set_deferred, used by
// DataParallel for ZeRO-2's reduce-scatter during backward and ZeRO-3's prefetch): while
// deferred, the compute stream does not wait after the call; fence() makes it wait. The
// deferred collectives touch only the caller's persistent buffers (the DP buckets), so
// no freed block is still in use on the communication stream. Point-to-point pairs by call order per peer (tags are ignored): each
// rank's stream keeps its program order, so a schedule that is deadlock-free with blocking
// MPI send/recv is deadlock-free here. isend is such a send and returns -1 (complete as far
// as the caller can tell: a later write of the buffer is stream-ordered after it).
//
// Errors: runtime Status naming the rank, the call, the group and NCCL's message
// (ncclGetErrorString, ncclGetLastError). barrier and progress() (the watchdog) are the
// host communicator's.
// Lifetime: REQUIRES ctx and host outlive this; the destructor waits for the context's
// streams before destroying the NCCL communicators.
// Thread-safety: one thread drives it and the context.
#pragma once

#include <memory>

#include "executor/comm/communicator.h"
#include "executor/cuda/context.h"
#include "planner/spec/status.h"

namespace llmplan::exec::cuda {

// Collective over every rank of `host` (each must call it with its own context, one GPU per
// rank). Errors: runtime (NCCL init or split failed, with NCCL's message).
Result<std::unique_ptr<Communicator>> create_nccl_communicator(CudaContext& ctx, Communicator& host);

}  // namespace llmplan::exec::cuda
