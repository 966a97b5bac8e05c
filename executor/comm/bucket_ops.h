// BucketOps: the memory movements of the data-parallel buckets (comm/data_parallel.h) in
// the memory the backend's tensors live in. The bucket logic -- which slices go where,
// which collective runs -- is written once over these; the CPU runs them as host loops
// (HostBucketOps), a GPU as kernels on its compute stream (executor/cuda/cuda_bucket_ops.h),
// so device gradients and weights never pass through host memory.
//
// Pointers and tensors are in the backend's memory; offsets and counts are elements.
// Conversions to and from f32 round to nearest even, as read_f32 / write_f32 (tensor.h).
// Every function may return before its work is done (a GPU enqueues) but later calls and
// the communicator's collectives see its result (the communicator orders its stream after
// the compute stream). Errors: runtime Status (a failed launch, OOM of a temporary).
// Thread-safety: as the backend.
#pragma once

#include <cstdint>

#include "executor/dtype.h"
#include "executor/tensor.h"
#include "planner/spec/status.h"

namespace llmplan::exec {

class BucketOps {
 public:
  virtual ~BucketOps() = default;
  // Every byte of p (bytes) = 0 (0 in every float format).
  virtual Status zero(void* p, int64_t bytes) = 0;
  // out (n) = t[off, off + n) as f32.
  virtual Status read_f32(const Tensor& t, int64_t off, float* out, int64_t n) = 0;
  // t[off, off + n) = in (n), rounded to t's dtype.
  virtual Status write_f32(const float* in, Tensor& t, int64_t off, int64_t n) = 0;
  // t[off, off + n) += in (n): an f32 sum, rounded once to t's dtype.
  virtual Status add_f32(const float* in, Tensor& t, int64_t off, int64_t n) = 0;
  // dst = src, bytes (non-overlapping).
  virtual Status copy(void* dst, const void* src, int64_t bytes) = 0;
  // y (n) += x (n), element-wise in dtype t (f32, f64, bf16, f16; each 16-bit sum rounded
  // once), so two ranks adding each other's buffers get bit-equal sums (the pipeline's tied
  // embedding gradient).
  virtual Status add(DType t, void* y, const void* x, int64_t n) = 0;
};

// Host memory (the CPU backend): plain loops over tensor.h's read_f32 / write_f32. Never fails.
class HostBucketOps final : public BucketOps {
 public:
  Status zero(void* p, int64_t bytes) override;
  Status read_f32(const Tensor& t, int64_t off, float* out, int64_t n) override;
  Status write_f32(const float* in, Tensor& t, int64_t off, int64_t n) override;
  Status add_f32(const float* in, Tensor& t, int64_t off, int64_t n) override;
  Status copy(void* dst, const void* src, int64_t bytes) override;
  Status add(DType t, void* y, const void* x, int64_t n) override;
};

}  // namespace llmplan::exec
