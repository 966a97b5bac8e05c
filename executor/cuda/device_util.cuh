// Device-side helpers shared by the .cu files of executor/cuda/ (internal): element loads
// and stores between the storage types and fp32 (round to nearest even, as the CPU ops'
// load/store), warp and block reductions in a fixed order (results do not depend on
// scheduling), launch-size helpers, and the instantiation lists.
//
// The storage types are the host structs of executor/dtype.h (bf16_t, f16_t: 16 bits, no
// arithmetic); their bits are reinterpreted as __nv_bfloat16 / __half here only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "executor/cuda/check.h"
#include "executor/cuda/context.h"
#include "executor/dtype.h"

namespace llmplan::exec::cuda::dev {

__device__ __forceinline__ float load(float x) { return x; }
__device__ __forceinline__ float load(bf16_t x) { return __uint_as_float(static_cast<unsigned>(x.bits) << 16); }
__device__ __forceinline__ float load(f16_t x) { return __half2float(__ushort_as_half(x.bits)); }

template <class S> __device__ __forceinline__ S store(float x);
template <> __device__ __forceinline__ float store<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16_t store<bf16_t>(float x) {
  bf16_t r;
  r.bits = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  return r;
}
template <> __device__ __forceinline__ f16_t store<f16_t>(float x) {
  f16_t r;
  r.bits = __half_as_ushort(__float2half_rn(x));
  return r;
}

// Sum / max over the 32 lanes of a warp; every lane gets the result (butterfly: the same
// order on every lane, so all lanes agree bit for bit).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// Sum / max over the whole block (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. REQUIRES: called by every thread of the block (it synchronises).
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T r = lane < warps ? partial[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) r = op(r, __shfl_xor_sync(0xFFFFFFFFu, r, o));
  return r;
}
struct Add {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, Add{}, 0.0f); }
__device__ __forceinline__ double block_sum(double v) { return block_reduce(v, Add{}, 0.0); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, Max{}, -INFINITY); }

}  // namespace llmplan::exec::cuda::dev

namespace llmplan::exec::cuda {

// Bytes a DeviceCarver uses for `bytes` (256-byte aligned pieces, as cudaMalloc's blocks).
constexpr int64_t carved(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Hands out consecutive, 256-byte aligned pieces of a caller's device workspace; take()
// returns nullptr (and ok() turns false) when the workspace is too small.
class DeviceCarver {
 public:
  explicit DeviceCarver(std::span<std::byte> ws) : ws_(ws) {}
  template <class T> T* take(int64_t count) {
    const int64_t bytes = carved(count * static_cast<int64_t>(sizeof(T)));
    if (used_ + bytes > static_cast<int64_t>(ws_.size())) {
      ok_ = false;
      return nullptr;
    }
    T* p = reinterpret_cast<T*>(ws_.data() + used_);
    used_ += bytes;
    return p;
  }
  bool ok() const { return ok_; }

 private:
  std::span<std::byte> ws_;
  int64_t used_ = 0;
  bool ok_ = true;
};

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never 0.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65536) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

template <class F>
__global__ void for_each_kernel(int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

// Runs f(i) for every i in [0, n) on the compute stream (f: a __device__ lambda).
template <class F>
Status for_each_index(CudaContext& ctx, int64_t n, F f, const char* name) {
  if (n <= 0) return Status::ok();
  for_each_kernel<<<grid_for(n, 256), 256, 0, ctx.compute_stream()>>>(n, f);
  return launch_status(name);
}

}  // namespace llmplan::exec::cuda

// Instantiation lists of the CUDA ops: X(S) over the storage types, XG(S, G) with the
// weight-gradient type (the storage type itself, or fp32 "main grads" for 16-bit storage).
#define LLMPLAN_CUDA_FOR_STORAGE(X) X(float) X(bf16_t) X(f16_t)
#define LLMPLAN_CUDA_FOR_STORAGE_GRAD(XG) \
  XG(float, float) XG(bf16_t, bf16_t) XG(bf16_t, float) XG(f16_t, f16_t) XG(f16_t, float)
