// DataParallel: gradient synchronisation and ZeRO-1/2 partitioning of one model replica
// over the DP group of a Communicator.
//
// The trainable parameters (model.params() order, frozen ones skipped) form one flat
// vector of N elements, padded to dp * P (P = ceil(N / dp)); DP rank r owns
// [r * P, min((r + 1) * P, N)) -- the TrainerShard handed to Trainer::create for ZeRO >= 1.
// Transfers go through two f32 bucket buffers of `bucket_bytes` each in
// Category::communication (the planner's 2 * dp_bucket_bytes of comm_buffers); 16-bit
// gradients and weights are widened to f32 in the bucket, so sums are f32 sums.
//   ZeRO 0, 1  sync_grads: bucketed all-reduce of every gradient (sum; the loss is already
//              divided by the global token count, so the sum is the global mean)
//   ZeRO 2     sync_grads: bucketed reduce-scatter; only this rank's partition of the
//              gradient tensors holds the reduced values afterwards (the gradient tensors
//              themselves stay full-size in this executor: see the report's note)
//   ZeRO >= 1  gather_weights after the optimizer step: bucketed all-gather of every
//              rank's updated partition into every replica.
// Thread-safety: none.
#pragma once

#include <cstdint>
#include <memory>

#include "executor/allocator.h"
#include "executor/comm/communicator.h"
#include "executor/model.h"
#include "executor/tensor.h"
#include "executor/trainer.h"

namespace llmplan::exec {

class DataParallel {
 public:
  // REQUIRES: model, comm and alloc outlive this. Errors: runtime (OOM of the buckets).
  static Result<std::unique_ptr<DataParallel>> create(TrackingAllocator& alloc, Model& model, Communicator& comm, int zero,
                                                      int64_t bucket_bytes);
  Status sync_grads();
  Status gather_weights();  // no-op for ZeRO 0
  TrainerShard shard() const;
  int64_t flat_elements() const { return n_; }
  int64_t partition_elements() const { return part_; }
  int64_t buckets_used() const { return buckets_; }  // collective calls so far

 private:
  DataParallel() = default;
  Model* model_ = nullptr;
  Communicator* comm_ = nullptr;
  int zero_ = 0, dp_ = 1, rank_ = 0;
  int64_t n_ = 0, part_ = 0, bucket_elems_ = 0, buckets_ = 0;
  Tensor a_, b_;  // the two f32 buckets
};

}  // namespace llmplan::exec
