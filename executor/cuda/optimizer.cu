// Multi-tensor optimizer kernels (optimizer.h). The tensor list travels by value in the
// kernel's parameters (under the 4 KiB limit); block b works on chunk b - start[t] of the
// tensor t whose block range holds b.
#include "executor/cuda/optimizer.h"

#include <algorithm>
#include <cmath>

#include "executor/cuda/check.h"
#include "executor/cuda/device_util.cuh"

namespace llmplan::exec::cuda {
using dev::load;
using dev::store;

namespace {
constexpr int kThreads = 256;
constexpr int64_t kChunk = 4096;  // elements per block: 16 per thread

struct TensorList {
  float* p[kMaxTensorsPerLaunch];
  const void* g[kMaxTensorsPerLaunch];
  float* s1[kMaxTensorsPerLaunch];  // AdamW m; SGD buf
  float* s2[kMaxTensorsPerLaunch];  // AdamW v
  void* out[kMaxTensorsPerLaunch];
  int64_t n[kMaxTensorsPerLaunch];
  int64_t start[kMaxTensorsPerLaunch + 1];  // first block of each tensor; start[count] = total
  int count;
};
static_assert(sizeof(TensorList) < 4000, "kernel parameters are limited to 4 KiB");

// Hyper-parameters rounded to fp32 exactly as cpu::adamw_step / sgd_step round them.
struct AdamWParams {
  float b1, b2, bc1, bc2, lr, eps, decay, gs;
};
struct SgdParams {
  float mu, wd, lr, gs;
};

__device__ __forceinline__ int find_tensor(const TensorList& a, int64_t block) {
  int t = 0;
  while (t + 1 < a.count && a.start[t + 1] <= block) ++t;
  return t;
}

// This block's tensor t and its chunk [begin, end) of t's elements.
__device__ __forceinline__ int block_chunk(const TensorList& a, int64_t& begin, int64_t& end) {
  const int t = find_tensor(a, blockIdx.x);
  begin = (static_cast<int64_t>(blockIdx.x) - a.start[t]) * kChunk;
  end = min(a.n[t], begin + kChunk);
  return t;
}

__device__ __forceinline__ void write_model(void* out, int64_t i, float p, DType t) {
  if (out == nullptr) return;
  if (t == DType::bf16) {
    static_cast<bf16_t*>(out)[i] = store<bf16_t>(p);
  } else if (t == DType::f16) {
    static_cast<f16_t*>(out)[i] = store<f16_t>(p);
  } else {
    static_cast<float*>(out)[i] = p;
  }
}

template <class G>
__global__ void adamw_kernel(TensorList a, AdamWParams h, DType model_dtype) {
  int64_t begin, end;
  const int t = block_chunk(a, begin, end);
  const G* g = static_cast<const G*>(a.g[t]);
  float *p = a.p[t], *m = a.s1[t], *v = a.s2[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float gi = h.gs * load(g[i]);
    const float mi = h.b1 * m[i] + (1.0f - h.b1) * gi;
    const float vi = h.b2 * v[i] + (1.0f - h.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / h.bc1;
    const float vhat = vi / h.bc2;
    const float pi = p[i] * h.decay - h.lr * mhat / (sqrtf(vhat) + h.eps);
    p[i] = pi;
    write_model(a.out[t], i, pi, model_dtype);
  }
}

template <class G>
__global__ void sgd_kernel(TensorList a, SgdParams h, DType model_dtype) {
  int64_t begin, end;
  const int t = block_chunk(a, begin, end);
  const G* g = static_cast<const G*>(a.g[t]);
  float *p = a.p[t], *buf = a.s1[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float gi = h.gs * load(g[i]) + h.wd * p[i];
    const float b = h.mu * buf[i] + gi;
    buf[i] = b;
    const float pi = p[i] - h.lr * b;
    p[i] = pi;
    write_model(a.out[t], i, pi, model_dtype);
  }
}

// Packs tensors [first, first + count) into a TensorList; returns the block count.
template <class T, class Fill>
int64_t pack(std::span<const T> tensors, size_t first, int count, TensorList& a, Fill fill) {
  a = TensorList{};
  a.count = count;
  int64_t blocks = 0;
  for (int k = 0; k < count; ++k) {
    const T& x = tensors[first + static_cast<size_t>(k)];
    fill(x, a, k);
    a.n[k] = x.n;
    a.start[k] = blocks;
    blocks += (x.n + kChunk - 1) / kChunk;
  }
  a.start[count] = blocks;
  return blocks;
}

// Launches `launch(list, blocks)` over the tensors, kMaxTensorsPerLaunch at a time.
template <class T, class Fill, class Launch>
Status for_tensor_lists(std::span<const T> tensors, Fill fill, Launch launch) {
  for (size_t first = 0; first < tensors.size(); first += kMaxTensorsPerLaunch) {
    const int count = static_cast<int>(std::min<size_t>(kMaxTensorsPerLaunch, tensors.size() - first));
    TensorList a;
    const int64_t blocks = pack(tensors, first, count, a, fill);
    if (blocks == 0) continue;
    if (blocks > 0x7FFFFFFF) return Status::bad_input("optimizer step: more than 2^31 blocks in one launch");
    if (Status s = launch(a, static_cast<unsigned>(blocks)); !s) return s;
  }
  return Status::ok();
}
}  // namespace

template <class G>
Status adamw_step(CudaContext& ctx, std::span<const AdamWTensor> tensors, const cpu::AdamWOptions& o,
                  int64_t step, double grad_scale, DType model_dtype) {
  const double t = static_cast<double>(step);
  const AdamWParams h{static_cast<float>(o.beta1),
                      static_cast<float>(o.beta2),
                      static_cast<float>(1.0 - std::pow(o.beta1, t)),
                      static_cast<float>(1.0 - std::pow(o.beta2, t)),
                      static_cast<float>(o.lr),
                      static_cast<float>(o.eps),
                      static_cast<float>(1.0 - o.lr * o.weight_decay),
                      static_cast<float>(grad_scale)};
  auto fill = [](const AdamWTensor& x, TensorList& a, int k) {
    a.p[k] = x.p;
    a.g[k] = x.g;
    a.s1[k] = x.m;
    a.s2[k] = x.v;
    a.out[k] = x.model_out;
  };
  return for_tensor_lists(tensors, fill, [&](const TensorList& a, unsigned blocks) {
    adamw_kernel<G><<<blocks, kThreads, 0, ctx.compute_stream()>>>(a, h, model_dtype);
    return launch_status("adamw_kernel");
  });
}

template <class G>
Status adamw_step(CudaContext& ctx, float* p, const G* g, float* m, float* v, int64_t n,
                  const cpu::AdamWOptions& o, int64_t step, double grad_scale) {
  const AdamWTensor one{p, g, m, v, nullptr, n};
  return adamw_step<G>(ctx, std::span<const AdamWTensor>(&one, 1), o, step, grad_scale, DType::f32);
}

template <class G>
Status sgd_step(CudaContext& ctx, std::span<const SgdTensor> tensors, const cpu::SgdOptions& o,
                double grad_scale, DType model_dtype) {
  const SgdParams h{static_cast<float>(o.momentum), static_cast<float>(o.weight_decay),
                    static_cast<float>(o.lr), static_cast<float>(grad_scale)};
  auto fill = [](const SgdTensor& x, TensorList& a, int k) {
    a.p[k] = x.p;
    a.g[k] = x.g;
    a.s1[k] = x.buf;
    a.s2[k] = nullptr;
    a.out[k] = x.model_out;
  };
  return for_tensor_lists(tensors, fill, [&](const TensorList& a, unsigned blocks) {
    sgd_kernel<G><<<blocks, kThreads, 0, ctx.compute_stream()>>>(a, h, model_dtype);
    return launch_status("sgd_kernel");
  });
}

template <class G>
Status sgd_step(CudaContext& ctx, float* p, const G* g, float* buf, int64_t n, const cpu::SgdOptions& o,
                double grad_scale) {
  const SgdTensor one{p, g, buf, nullptr, n};
  return sgd_step<G>(ctx, std::span<const SgdTensor>(&one, 1), o, grad_scale, DType::f32);
}

namespace {
// One double per warp added atomically: the squares are summed in double, so the order of
// the atomic adds changes the norm only in its last bits.
template <class G>
__global__ void sum_squares_kernel(const G* g, int64_t n, double* acc) {
  double s = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = load(g[i]);
    s += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(acc, s);
}
}  // namespace

template <class G>
Status sum_squares_accumulate(CudaContext& ctx, const G* g, int64_t n, double* acc) {
  if (n <= 0) return Status::ok();
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{4} * ctx.sm_count());
  sum_squares_kernel<G><<<static_cast<unsigned>(blocks), kThreads, 0, ctx.compute_stream()>>>(g, n, acc);
  return launch_status("sum_squares_accumulate");
}

#define INST(G)                                                                                       \
  template Status sum_squares_accumulate<G>(CudaContext&, const G*, int64_t, double*);               \
  template Status adamw_step<G>(CudaContext&, std::span<const AdamWTensor>, const cpu::AdamWOptions&, \
                                int64_t, double, DType);                                              \
  template Status adamw_step<G>(CudaContext&, float*, const G*, float*, float*, int64_t,              \
                                const cpu::AdamWOptions&, int64_t, double);                           \
  template Status sgd_step<G>(CudaContext&, std::span<const SgdTensor>, const cpu::SgdOptions&, double, \
                              DType);                                                                 \
  template Status sgd_step<G>(CudaContext&, float*, const G*, float*, int64_t, const cpu::SgdOptions&, \
                              double);
LLMPLAN_CUDA_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cuda
