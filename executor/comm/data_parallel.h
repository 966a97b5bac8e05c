// DataParallel: gradient synchronisation and ZeRO-1/2/3 partitioning of one model replica
// over the DP group of a Communicator (Group::dp_cp: with context parallel the DP x CP
// ranks, which hold the same parameters and each a share of the tokens).
//
// Partition (ZeRO >= 1): every parameter of n elements is cut into dp slices of
// c = ceil(n / dp) elements; DP rank r owns elements [r * c, min((r + 1) * c, n)) of each
// trainable parameter (ZeRO-3: of every parameter, frozen ones too, as the planner divides
// frozen weights by dp under ZeRO-3). Cutting each parameter, rather than the flat
// concatenation, lets one unit (model.h ParamHooks: a layer, the embedding, the head) be
// reduce-scattered or all-gathered on its own, as its backward or forward needs it
// (PyTorch FSDP's layout). Per rank the partition differs from the planner's n / dp by less
// than one element per parameter (none when dp divides every size).
//
// Memory: the model's tensors and the buckets live where the backend keeps them; every
// movement between them goes through `ops` (comm/bucket_ops.h: host loops on the CPU,
// kernels on a GPU), and the communicator must accept that memory (MPI: host, NCCL: device).
//
// Transfers go through two f32 bucket buffers of `bucket_bytes` each in
// Category::communication (the planner's 2 * dp_bucket_bytes of comm_buffers); 16-bit
// gradients and weights are widened to f32 in the bucket, so sums are f32 sums. A bucket
// carries several parameters' slices: [rank 0's slices | rank 1's slices | ...].
//   ZeRO 0, 1  sync_grads: bucketed all-reduce of every (full-size) gradient (sum; the loss
//              is already divided by the global token count, so the sum is the global mean)
//   ZeRO 2, 3  gradients persist only as this rank's partition (Category::gradients). As
//              the backward reaches a unit (begin_grads) its full-size gradients are
//              allocated, zeroed, in Category::gradients; when the unit's backward ends
//              (end_grads) they are reduce-scattered bucket by bucket, added into the
//              partition, and freed -- so every micro-batch's gradients are reduced while
//              the backward goes on (overlap below). sync_grads then only completes the
//              last one. The planner counts that one unit's full gradient as a
//              backward-phase transient of the gradients line.
//   ZeRO 3     weights persist only as this rank's partition (Category::weights).
//              use_weights(u, next) all-gathers unit u (and prefetches `next`) into
//              full-size tensors in Category::gathered_params; release_weights(u) frees
//              them. At most two units are gathered at once (current + prefetch), the
//              planner's gathered_params line. The optimizer updates the partition in place;
//              nothing is gathered after the step.
//   ZeRO 1, 2  gather_weights after the optimizer step: bucketed all-gather of every rank's
//              updated slices into every replica's full weights.
// Expert parallel (plan.ep > 1, MoE): a routed expert's parameters (ParamRef::expert) are
// replicated only over the dp*cp/ep ranks holding that expert (Group::edp), so their
// gradients are all-reduced or reduce-scattered, and ZeRO partitions (and ZeRO-3 gathers)
// them, over edp; every other parameter over dp_cp as above. A unit mixing both (an MoE
// layer) moves each group's parameters in its own collectives.
// Overlap (a communicator that can_defer: NCCL's): a collective touches only the two
// buckets, so the unpack of a unit's last reduce-scatter (ZeRO 2, 3) and of a prefetched
// unit's all-gather (ZeRO 3) is left pending while the model computes on -- the next
// unit's backward, the current unit's forward -- and done by the next call that needs the
// buckets, the prefetched weights or the partitions (finish: fence, then unpack). Every
// other collective is completed before its call returns. With MPI (blocking) nothing is
// pending and the order of operations is the CPU's as it always was. One collective is in
// flight at a time (each uses both buckets).
// With expert parallel a unit's collectives are its dp_cp ones, then its edp ones; only the
// last of them is left pending (each collective's first bucket finishes the one before).
// Thread-safety: none.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "executor/allocator.h"
#include "executor/comm/bucket_ops.h"
#include "executor/comm/communicator.h"
#include "executor/model.h"
#include "executor/tensor.h"
#include "executor/trainer.h"

namespace llmplan::exec {

class DataParallel final : public ParamHooks {
 public:
  // Shrinks the model's gradients (ZeRO >= 2) and weights (ZeRO-3) to this rank's partition
  // and, for ZeRO >= 2, installs itself as the model's ParamHooks.
  // ops: the backend's BucketOps; nullptr = host memory (HostBucketOps).
  // REQUIRES: model, comm, alloc and ops outlive this. Errors: runtime (OOM of the buckets).
  static Result<std::unique_ptr<DataParallel>> create(TrackingAllocator& alloc, Model& model, Communicator& comm, int zero,
                                                      int64_t bucket_bytes, BucketOps* ops = nullptr);
  ~DataParallel() override;
  Status sync_grads();      // ZeRO 0, 1; no-op for ZeRO 2, 3 (reduced during backward)
  // ZeRO 2, 3: completes the last unit's reduce-scatter, which a deferring communicator
  // (NCCL) leaves in flight, so every gradient partition is whole -- before anything but
  // sync_grads reads them (the pipeline's tied-embedding sum). No-op otherwise.
  Status complete_pending() { return finish(); }
  Status gather_weights();  // after the optimizer step: ZeRO 1, 2; no-op otherwise
  // ZeRO-3: makes every weight full-size for good (inspection at the end of a run).
  Status unshard_weights();
  TrainerShard shard() const;
  int64_t buckets_used() const { return buckets_; }  // collective calls so far

  Status use_weights(int unit, int next) override;
  void release_weights(int unit) override;
  Status begin_grads(int unit) override;
  Status end_grads(int unit) override;

 private:
  struct Part {
    int64_t n = 0;      // elements of the (TP-local) parameter
    int64_t chunk = 0;  // slice length c = ceil(n / dp)
    int64_t lo = 0;     // this rank's slice starts at rank * chunk
    int64_t count = 0;  // elements this rank owns: min(chunk, n - lo), >= 0
    int refs = 0;       // ZeRO-3: gathered units that hold this parameter
    int group = 0;      // groups_ index it is reduced and partitioned over
    Tensor wstash;      // ZeRO-3: the weight partition while the gathered tensor is in the model
    Tensor gstash;      // ZeRO >= 2: the gradient partition while the full gradient is in the model
  };
  // A group parameters are replicated over: [0] dp_cp, [1] edp (expert parameters, ep > 1;
  // with ep = 1 it holds nothing).
  struct GroupShare {
    Group group = Group::dp_cp;
    int size = 1, rank = 0;
    std::vector<int> ids;  // its trainable params() indices
    int64_t n = 0;         // their elements
  };
  DataParallel() = default;
  // defer: the last bucket's unpack may stay pending (Communicator::can_defer).
  // group: the groups_ index; REQUIRES: every one of ids is partitioned over groups_[group].
  Status gather(const std::vector<int>& ids, bool from_partition, int group, bool defer);
  // Each over its parameters' group (dp_cp, then edp); only the last collective may stay pending.
  Status reduce_scatter(const std::vector<int>& ids, bool defer);
  Status reduce_scatter(const std::vector<int>& ids, int group, bool defer);  // REQUIRES: as gather
  std::vector<int> in_group(const std::vector<int>& ids, int group) const;   // those of ids in groups_[group]
  Status gather_unit(int unit, bool defer);
  // The unpack of the collective just issued: run now (after fence), or kept as pending_
  // when `defer` and the communicator can defer. finish() runs a pending one after fence().
  Status complete(std::function<Status()> unpack, bool defer);
  Status finish();
  template <class F>
  Status collective(F&& f);  // f() with the communicator deferring where it can
  Status zero_tensor(Tensor& t);
  void release_unit(int unit);

  HostBucketOps host_ops_;
  BucketOps* ops_ = nullptr;  // &host_ops_ or the backend's
  TrackingAllocator* alloc_ = nullptr;
  Model* model_ = nullptr;
  Communicator* comm_ = nullptr;
  int zero_ = 0, dp_ = 1, rank_ = 0;
  int64_t n_ = 0, bucket_elems_ = 0, buckets_ = 0;
  GroupShare groups_[2];
  std::vector<Part> parts_;           // per model.params() index
  std::vector<int> trainable_;        // params() indices with a gradient
  std::vector<char> unit_gathered_;   // ZeRO-3, per unit
  std::vector<std::vector<int>> unit_grads_;  // per unit: its trainable params() indices
  Tensor a_, b_;  // the two f32 buckets
  std::function<Status()> pending_;  // the deferred unpack of the last collective, if any
};

}  // namespace llmplan::exec
