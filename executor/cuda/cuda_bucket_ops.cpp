#include "executor/cuda/cuda_bucket_ops.h"

#include <string>

#include "executor/cuda/pointwise.h"

namespace llmplan::exec::cuda {

namespace {
Status no_dtype(const Tensor& t) {
  return Status::bad_input("data-parallel buckets (cuda): no " + std::string(to_string(t.dtype())) + " tensors on the GPU");
}
}  // namespace

Status CudaBucketOps::zero(void* p, int64_t bytes) { return fill_bytes(ctx_, p, 0, bytes); }

Status CudaBucketOps::read_f32(const Tensor& t, int64_t off, float* out, int64_t n) {
  if (n <= 0) return Status::ok();
  switch (t.dtype()) {
    case DType::f32: return copy_on_device(ctx_, out, t.data<float>() + off, n * 4);
    case DType::bf16: return cast<bf16_t, float>(ctx_, t.data<bf16_t>() + off, out, n);
    case DType::f16: return cast<f16_t, float>(ctx_, t.data<f16_t>() + off, out, n);
    default: return no_dtype(t);
  }
}

Status CudaBucketOps::write_f32(const float* in, Tensor& t, int64_t off, int64_t n) {
  if (n <= 0) return Status::ok();
  switch (t.dtype()) {
    case DType::f32: return copy_on_device(ctx_, t.data<float>() + off, in, n * 4);
    case DType::bf16: return cast<float, bf16_t>(ctx_, in, t.data<bf16_t>() + off, n);
    case DType::f16: return cast<float, f16_t>(ctx_, in, t.data<f16_t>() + off, n);
    default: return no_dtype(t);
  }
}

Status CudaBucketOps::add_f32(const float* in, Tensor& t, int64_t off, int64_t n) {
  if (n <= 0) return Status::ok();
  if (t.dtype() == DType::f32) return add_inplace<float>(ctx_, t.data<float>() + off, in, n);
  if (t.dtype() != DType::bf16 && t.dtype() != DType::f16) return no_dtype(t);
  // Freed on the compute stream after the kernels that use it (the allocator reuses blocks
  // in stream order).
  Result<Tensor> tmp = Tensor::empty(ctx_.allocator(), Shape{n}, DType::f32, Category::communication, "dp.add_f32");
  if (!tmp) return tmp.status();
  if (Status s = read_f32(t, off, tmp->data<float>(), n); !s) return s;
  if (Status s = add_inplace<float>(ctx_, tmp->data<float>(), in, n); !s) return s;
  return write_f32(tmp->data<float>(), t, off, n);
}

Status CudaBucketOps::copy(void* dst, const void* src, int64_t bytes) { return copy_on_device(ctx_, dst, src, bytes); }

Status CudaBucketOps::add(DType t, void* y, const void* x, int64_t n) {
  if (n <= 0) return Status::ok();
  switch (t) {
    case DType::f32: return add_inplace<float>(ctx_, static_cast<float*>(y), static_cast<const float*>(x), n);
    case DType::bf16: return add_inplace<bf16_t>(ctx_, static_cast<bf16_t*>(y), static_cast<const bf16_t*>(x), n);
    case DType::f16: return add_inplace<f16_t>(ctx_, static_cast<f16_t*>(y), static_cast<const f16_t*>(x), n);
    default: return Status::bad_input("data-parallel buckets (cuda): no " + std::string(to_string(t)) + " tensors on the GPU");
  }
}

}  // namespace llmplan::exec::cuda
