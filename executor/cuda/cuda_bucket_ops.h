// CudaBucketOps: the data-parallel bucket movements (executor/comm/bucket_ops.h) as kernels
// on the context's compute stream -- casts between the tensors' dtype and the f32 buckets,
// fills and device-to-device copies -- so DataParallel runs the CPU's bucket code on device
// gradients and weights, which never visit host memory.
//
// Tensors: f32, bf16 or f16 on ctx's device (bad_input otherwise). add_f32 into a 16-bit
// tensor widens its slice into an f32 temporary of the context's allocator
// (Category::communication, freed at once), adds, and rounds back once -- as the CPU does.
// Thread-safety: as CudaContext.
#pragma once

#include "executor/comm/bucket_ops.h"
#include "executor/cuda/context.h"

namespace llmplan::exec::cuda {

class CudaBucketOps final : public BucketOps {
 public:
  // REQUIRES: ctx outlives this.
  explicit CudaBucketOps(CudaContext& ctx) : ctx_(ctx) {}
  Status zero(void* p, int64_t bytes) override;
  Status read_f32(const Tensor& t, int64_t off, float* out, int64_t n) override;
  Status write_f32(const float* in, Tensor& t, int64_t off, int64_t n) override;
  Status add_f32(const float* in, Tensor& t, int64_t off, int64_t n) override;
  Status copy(void* dst, const void* src, int64_t bytes) override;
  Status add(DType t, void* y, const void* x, int64_t n) override;

 private:
  CudaContext& ctx_;
};

}  // namespace llmplan::exec::cuda
