// Row-reduction CUDA ops (rowwise.h): one block per row for norms and cross-entropy,
// two-stage column sums (per-chunk partials, then a fixed-order finish) for the weight
// and bias gradients.
#include "executor/cuda/rowwise.h"

#include <algorithm>
#include <type_traits>

#include "executor/cuda/check.h"
#include "executor/cuda/device_util.cuh"

namespace llmplan::exec::cuda {
using dev::block_max;
using dev::block_sum;
using dev::load;
using dev::store;

namespace {
constexpr int kRowThreads = 256;   // norms: h is a few thousand at most per row
constexpr int kLossThreads = 512;  // cross-entropy: v is tens of thousands per row
constexpr int kColX = 32, kColY = 8;

// Row chunks of the column sums: enough blocks to fill the GPU, few partials to add.
int64_t column_chunks(int64_t n) { return std::clamp<int64_t>((n + 255) / 256, 1, 64); }

// ---------------------------------------------------------------- norms

// Mean (0 without centering) and rstd of row xr (h), as cpu/norm.cpp's row_stats.
template <bool kCenter, class S>
__device__ float2 row_stats(const S* xr, int64_t h, float eps) {
  float mean = 0;
  if (kCenter) {
    float s = 0;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) s += load(xr[j]);
    mean = block_sum(s) / static_cast<float>(h);
  }
  float ss = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float c = load(xr[j]) - mean;
    ss += c * c;
  }
  const float rstd = 1.0f / sqrtf(block_sum(ss) / static_cast<float>(h) + eps);
  return make_float2(mean, rstd);
}

template <bool kCenter, class S>
__global__ void norm_forward_kernel(const S* x, const S* w, const S* b, S* y, int64_t h, float eps) {
  const S* xr = x + static_cast<int64_t>(blockIdx.x) * h;
  S* yr = y + static_cast<int64_t>(blockIdx.x) * h;
  const float2 st = row_stats<kCenter>(xr, h, eps);  // every read of xr ends here: y may alias x
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    if (kCenter) {
      const float xhat = (load(xr[j]) - st.x) * st.y;
      yr[j] = store<S>(xhat * load(w[j]) + (b != nullptr ? load(b[j]) : 0.0f));
    } else {
      yr[j] = store<S>(load(xr[j]) * st.y * load(w[j]));
    }
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w (mean(g) only with centering);
// the row's (mean, rstd) go to stats for the column sums.
template <bool kCenter, class S>
__global__ void norm_backward_kernel(const S* x, const S* w, const S* dy, S* dx, float2* stats, int64_t h,
                                     float eps, bool accumulate_dx) {
  const int64_t off = static_cast<int64_t>(blockIdx.x) * h;
  const float2 st = row_stats<kCenter>(x + off, h, eps);
  float g_sum = 0, gx_sum = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float xhat = (load(x[off + j]) - st.x) * st.y;
    const float g = load(dy[off + j]) * load(w[j]);
    g_sum += g;
    gx_sum += g * xhat;
  }
  const float g_mean = kCenter ? block_sum(g_sum) / static_cast<float>(h) : 0.0f;
  const float gx_mean = block_sum(gx_sum) / static_cast<float>(h);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float xhat = (load(x[off + j]) - st.x) * st.y;
    const float g = load(dy[off + j]) * load(w[j]);
    float v = st.y * (g - g_mean - xhat * gx_mean);
    if (accumulate_dx) v += load(dx[off + j]);
    dx[off + j] = store<S>(v);
  }
  if (threadIdx.x == 0) stats[blockIdx.x] = st;
}

// ---------------------------------------------------------------- column sums

// Partial sums over one chunk of rows (blockIdx.y) for 32 columns (blockIdx.x):
// pb[chunk, j] = sum dy[r, j];  pw[chunk, j] = sum dy[r, j] xhat[r, j] (when x is given).
template <class S>
__global__ void column_partial_kernel(const S* dy, const S* x, const float2* stats, float* pw, float* pb,
                                      int64_t n, int64_t h, int64_t rows_per_chunk) {
  __shared__ float sw[kColY][kColX + 1];
  __shared__ float sb[kColY][kColX + 1];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColX + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(n, r0 + rows_per_chunk);
  float aw = 0, ab = 0;
  if (j < h) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY) {
      const float d = load(dy[r * h + j]);
      ab += d;
      if (x != nullptr) aw += d * ((load(x[r * h + j]) - stats[r].x) * stats[r].y);
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && j < h) {
    float tw = 0, tb = 0;
    for (int y = 0; y < kColY; ++y) {
      tw += sw[y][threadIdx.x];
      tb += sb[y][threadIdx.x];
    }
    if (pw != nullptr) pw[blockIdx.y * h + j] = tw;
    if (pb != nullptr) pb[blockIdx.y * h + j] = tb;
  }
}

// dw[j] += sum over chunks of pw[c, j] (one rounding into G); the same for db.
template <class G>
__global__ void column_finish_kernel(const float* pw, const float* pb, G* dw, G* db, int64_t chunks, int64_t h) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < h;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (dw != nullptr) {
      float s = 0;
      for (int64_t c = 0; c < chunks; ++c) s += pw[c * h + j];
      dw[j] = store<G>(load(dw[j]) + s);
    }
    if (db != nullptr) {
      float s = 0;
      for (int64_t c = 0; c < chunks; ++c) s += pb[c * h + j];
      db[j] = store<G>(load(db[j]) + s);
    }
  }
}

// The two stages, for dw (needs x and stats) and/or db.
template <class S, class G>
Status column_sums(CudaContext& ctx, const S* dy, const S* x, const float2* stats, G* dw, G* db, int64_t n,
                   int64_t h, DeviceCarver& c) {
  if (dw == nullptr && db == nullptr) return Status::ok();
  const int64_t chunks = column_chunks(n);
  float* pw = dw != nullptr ? c.take<float>(chunks * h) : nullptr;
  float* pb = db != nullptr ? c.take<float>(chunks * h) : nullptr;
  if (!c.ok()) return Status::bad_input("column sums: workspace smaller than *_workspace_bytes()");
  const int64_t rows_per_chunk = (n + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((h + kColX - 1) / kColX), static_cast<unsigned>(chunks));
  column_partial_kernel<<<grid, dim3(kColX, kColY), 0, ctx.compute_stream()>>>(
      dy, dw != nullptr ? x : nullptr, stats, pw, pb, n, h, rows_per_chunk);
  if (Status s = launch_status("column_partial_kernel"); !s) return s;
  column_finish_kernel<<<grid_for(h, 256), 256, 0, ctx.compute_stream()>>>(pw, pb, dw, db, chunks, h);
  return launch_status("column_finish_kernel");
}

template <bool kCenter, class S, class G>
Status norm_backward(CudaContext& ctx, const S* x, const S* w, const S* dy, S* dx, G* dw, G* db, int64_t n,
                     int64_t h, double eps, bool accumulate_dx, std::span<std::byte> ws) {
  if (n == 0 || h == 0) return Status::ok();
  DeviceCarver c(ws);
  float2* stats = c.take<float2>(n);
  if (!c.ok()) return Status::bad_input("norm backward: workspace smaller than norm_workspace_bytes()");
  norm_backward_kernel<kCenter><<<static_cast<unsigned>(n), kRowThreads, 0, ctx.compute_stream()>>>(
      x, w, dy, dx, stats, h, static_cast<float>(eps), accumulate_dx);
  if (Status s = launch_status("norm_backward_kernel"); !s) return s;
  return column_sums(ctx, dy, x, stats, dw, db, n, h, c);
}

// ---------------------------------------------------------------- cross-entropy

// The row's max m and sum exp(x - m), in every thread of the block (block reductions: every
// thread must call it).
template <class S>
__device__ __forceinline__ void row_max_sum_exp(const S* row, int64_t v, float& m, float& sum) {
  m = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, load(row[j]));
  m = block_max(m);
  float s = 0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += expf(load(row[j]) - m);
  sum = block_sum(s);
}

// row_loss[r] = (max - x_t) + log(sum exp(x - max)) for counted rows, 0 for ignored ones.
template <class S>
__global__ void xent_forward_kernel(const S* logits, const int32_t* targets, float* row_loss, int64_t v) {
  const int64_t r = blockIdx.x;
  const int32_t t = targets[r];
  if (t == -1) {  // uniform over the block
    if (threadIdx.x == 0) row_loss[r] = 0.0f;
    return;
  }
  const S* row = logits + r * v;
  float m, s;
  row_max_sum_exp(row, v, m, s);
  if (threadIdx.x == 0) row_loss[r] = (m - load(row[t])) + logf(s);
}

// counted = rows with a target; *loss = sum(row_loss) / (denom or counted), 0 when none.
// One block; fixed-order double sums.
__global__ void xent_finish_kernel(const float* row_loss, const int32_t* targets, double* loss, int64_t n,
                                   double denom) {
  double total = 0, counted = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    total += static_cast<double>(row_loss[r]);
    counted += targets[r] != -1 ? 1.0 : 0.0;
  }
  total = block_sum(total);
  counted = block_sum(counted);
  if (threadIdx.x == 0) {
    const double d = denom != 0 ? denom : counted;
    *loss = d == 0 ? 0.0 : total / d;
  }
}

__global__ void xent_count_kernel(const int32_t* targets, double* counted, int64_t n) {
  double c = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) c += targets[r] != -1 ? 1.0 : 0.0;
  c = block_sum(c);
  if (threadIdx.x == 0) *counted = c;
}

// drow = dloss / denom (softmax - onehot); the row's max and log-sum are taken before any
// write (dlogits may alias logits).
template <class S>
__global__ void xent_backward_kernel(const S* logits, const int32_t* targets, S* dlogits, int64_t v,
                                     double dloss, double denom, const double* counted) {
  const int64_t r = blockIdx.x;
  const int32_t t = targets[r];
  S* drow = dlogits + r * v;
  if (t == -1) {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) drow[j] = store<S>(0.0f);
    return;
  }
  const double d = denom != 0 ? denom : *counted;
  const float scale = d == 0 ? 0.0f : static_cast<float>(dloss / d);
  const S* row = logits + r * v;
  float m, s;
  row_max_sum_exp(row, v, m, s);  // ends in block_sum, which synchronises: all reads of the row are done
  const float log_sum = logf(s);
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float z = load(row[j]);
    drow[j] = store<S>(scale * (expf((z - m) - log_sum) - (j == t ? 1.0f : 0.0f)));
  }
}

// ---- vocabulary parallel (cpu/cross_entropy.h): one block per row of this rank's logits

__global__ void vocab_ce_max_kernel(const float* z, int64_t v, int64_t real, float* mx) {
  const float* row = z + static_cast<int64_t>(blockIdx.x) * v;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) m = fmaxf(m, row[j]);
  m = block_max(m);
  if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

__global__ void vocab_ce_sums_kernel(const float* z, const int32_t* targets, const float* all, int tp, int64_t n,
                                     int64_t v, int64_t real, int64_t v0, float* mx, float* sums) {
  const int64_t r = blockIdx.x;
  const float* row = z + r * v;
  float m = all[r];
  for (int q = 1; q < tp; ++q) m = fmaxf(m, all[q * n + r]);
  float s = 0;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) s += expf(row[j] - m);
  s = block_sum(s);
  if (threadIdx.x == 0) {
    const int64_t local = static_cast<int64_t>(targets[r]) - v0;
    mx[r] = m;
    sums[r] = s;
    sums[n + r] = targets[r] != -1 && local >= 0 && local < v ? row[local] : 0.0f;
  }
}

// One block; fixed-order double sums.
__global__ void vocab_ce_loss_kernel(const int32_t* targets, const float* mx, const float* sums, int64_t n,
                                     double* out) {
  double total = 0, counted = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    if (targets[r] == -1) continue;
    total += log(static_cast<double>(sums[r])) + static_cast<double>(mx[r]) - static_cast<double>(sums[n + r]);
    counted += 1.0;
  }
  total = block_sum(total);
  counted = block_sum(counted);
  if (threadIdx.x == 0) {
    out[0] = total;
    out[1] = counted;
  }
}

__global__ void vocab_ce_backward_kernel(float* z, const int32_t* targets, const float* mx, const float* sums,
                                         int64_t v, int64_t real, int64_t v0, float dscale) {
  const int64_t r = blockIdx.x;
  float* row = z + r * v;
  if (targets[r] == -1) {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) row[j] = 0.0f;
    return;
  }
  const float m = mx[r], inv = 1.0f / sums[r];
  const int64_t local = static_cast<int64_t>(targets[r]) - v0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float p = j < real ? dscale * (expf(row[j] - m) * inv) : 0.0f;
    row[j] = j == local ? p - dscale : p;
  }
}
}  // namespace

// ---------------------------------------------------------------- public

int64_t norm_workspace_bytes(int64_t n, int64_t h) {
  return carved(n * static_cast<int64_t>(sizeof(float2))) + column_sums_workspace_bytes(n, h);
}

int64_t column_sums_workspace_bytes(int64_t n, int64_t out) { return 2 * carved(column_chunks(n) * out * 4); }

int64_t cross_entropy_workspace_bytes(int64_t n) { return carved(std::max<int64_t>(n, 1) * 4) + carved(8); }

template <class S>
Status layernorm_forward(CudaContext& ctx, const S* x, const S* w, const S* b, S* y, int64_t n, int64_t h,
                         double eps) {
  if (n == 0 || h == 0) return Status::ok();
  norm_forward_kernel<true><<<static_cast<unsigned>(n), kRowThreads, 0, ctx.compute_stream()>>>(
      x, w, b, y, h, static_cast<float>(eps));
  return launch_status("layernorm_forward");
}

template <class S>
Status rmsnorm_forward(CudaContext& ctx, const S* x, const S* w, S* y, int64_t n, int64_t h, double eps) {
  if (n == 0 || h == 0) return Status::ok();
  norm_forward_kernel<false><<<static_cast<unsigned>(n), kRowThreads, 0, ctx.compute_stream()>>>(
      x, w, static_cast<const S*>(nullptr), y, h, static_cast<float>(eps));
  return launch_status("rmsnorm_forward");
}

template <class S, class G>
Status layernorm_backward(CudaContext& ctx, const S* x, const S* w, const S* dy, S* dx, G* dw, G* db,
                          int64_t n, int64_t h, double eps, bool accumulate_dx, std::span<std::byte> ws) {
  return norm_backward<true>(ctx, x, w, dy, dx, dw, db, n, h, eps, accumulate_dx, ws);
}

template <class S, class G>
Status rmsnorm_backward(CudaContext& ctx, const S* x, const S* w, const S* dy, S* dx, G* dw, int64_t n,
                        int64_t h, double eps, bool accumulate_dx, std::span<std::byte> ws) {
  return norm_backward<false>(ctx, x, w, dy, dx, dw, static_cast<G*>(nullptr), n, h, eps, accumulate_dx, ws);
}

template <class S, class G>
Status column_sums_accumulate(CudaContext& ctx, const S* dy, G* db, int64_t n, int64_t out,
                              std::span<std::byte> ws) {
  if (n == 0 || out == 0) return Status::ok();
  DeviceCarver c(ws);
  return column_sums(ctx, dy, static_cast<const S*>(nullptr), static_cast<const float2*>(nullptr),
                     static_cast<G*>(nullptr), db, n, out, c);
}

template <class S>
Status cross_entropy_forward(CudaContext& ctx, const S* logits, const int32_t* targets, double* loss,
                             int64_t n, int64_t v, double denom, std::span<std::byte> ws) {
  DeviceCarver c(ws);
  float* row_loss = c.take<float>(std::max<int64_t>(n, 1));
  if (!c.ok()) return Status::bad_input("cross_entropy_forward: workspace smaller than cross_entropy_workspace_bytes()");
  if (n > 0) {
    xent_forward_kernel<<<static_cast<unsigned>(n), kLossThreads, 0, ctx.compute_stream()>>>(logits, targets,
                                                                                             row_loss, v);
    if (Status s = launch_status("xent_forward_kernel"); !s) return s;
  }
  xent_finish_kernel<<<1, 1024, 0, ctx.compute_stream()>>>(row_loss, targets, loss, n, denom);
  return launch_status("xent_finish_kernel");
}

template <class S>
Status cross_entropy_backward(CudaContext& ctx, const S* logits, const int32_t* targets, S* dlogits,
                              int64_t n, int64_t v, double dloss, double denom, std::span<std::byte> ws) {
  if (n == 0) return Status::ok();
  DeviceCarver c(ws);
  c.take<float>(n);
  double* counted = c.take<double>(1);
  if (!c.ok()) return Status::bad_input("cross_entropy_backward: workspace smaller than cross_entropy_workspace_bytes()");
  if (denom == 0) {
    xent_count_kernel<<<1, 1024, 0, ctx.compute_stream()>>>(targets, counted, n);
    if (Status s = launch_status("xent_count_kernel"); !s) return s;
  }
  xent_backward_kernel<<<static_cast<unsigned>(n), kLossThreads, 0, ctx.compute_stream()>>>(
      logits, targets, dlogits, v, dloss, denom, counted);
  return launch_status("xent_backward_kernel");
}

template <class A>
Status vocab_parallel_ce_max(CudaContext& ctx, const A* z, int64_t n, int64_t v, int64_t real, A* mx) {
  static_assert(std::is_same_v<A, float>, "the GPU's loss runs in fp32");
  if (n == 0) return Status::ok();
  vocab_ce_max_kernel<<<static_cast<unsigned>(n), kLossThreads, 0, ctx.compute_stream()>>>(z, v, real, mx);
  return launch_status("vocab_ce_max_kernel");
}

template <class A>
Status vocab_parallel_ce_sums(CudaContext& ctx, const A* z, const int32_t* targets, const A* all, int tp, int64_t n,
                              int64_t v, int64_t real, int64_t v0, A* mx, A* sums) {
  static_assert(std::is_same_v<A, float>, "the GPU's loss runs in fp32");
  if (n == 0) return Status::ok();
  vocab_ce_sums_kernel<<<static_cast<unsigned>(n), kLossThreads, 0, ctx.compute_stream()>>>(z, targets, all, tp, n, v,
                                                                                             real, v0, mx, sums);
  return launch_status("vocab_ce_sums_kernel");
}

template <class A>
Status vocab_parallel_ce_loss(CudaContext& ctx, const int32_t* targets, const A* mx, const A* sums, int64_t n,
                              double* out) {
  static_assert(std::is_same_v<A, float>, "the GPU's loss runs in fp32");
  vocab_ce_loss_kernel<<<1, 1024, 0, ctx.compute_stream()>>>(targets, mx, sums, n, out);
  return launch_status("vocab_ce_loss_kernel");
}

template <class A>
Status vocab_parallel_ce_backward(CudaContext& ctx, A* z, const int32_t* targets, const A* mx, const A* sums, int64_t n,
                                  int64_t v, int64_t real, int64_t v0, double dscale) {
  static_assert(std::is_same_v<A, float>, "the GPU's loss runs in fp32");
  if (n == 0) return Status::ok();
  vocab_ce_backward_kernel<<<static_cast<unsigned>(n), kLossThreads, 0, ctx.compute_stream()>>>(
      z, targets, mx, sums, v, real, v0, static_cast<float>(dscale));
  return launch_status("vocab_ce_backward_kernel");
}

template Status vocab_parallel_ce_max<float>(CudaContext&, const float*, int64_t, int64_t, int64_t, float*);
template Status vocab_parallel_ce_sums<float>(CudaContext&, const float*, const int32_t*, const float*, int, int64_t,
                                              int64_t, int64_t, int64_t, float*, float*);
template Status vocab_parallel_ce_loss<float>(CudaContext&, const int32_t*, const float*, const float*, int64_t, double*);
template Status vocab_parallel_ce_backward<float>(CudaContext&, float*, const int32_t*, const float*, const float*,
                                                  int64_t, int64_t, int64_t, int64_t, double);

#define INST(S)                                                                                        \
  template Status layernorm_forward<S>(CudaContext&, const S*, const S*, const S*, S*, int64_t, int64_t, \
                                       double);                                                        \
  template Status rmsnorm_forward<S>(CudaContext&, const S*, const S*, S*, int64_t, int64_t, double);    \
  template Status cross_entropy_forward<S>(CudaContext&, const S*, const int32_t*, double*, int64_t,     \
                                           int64_t, double, std::span<std::byte>);                     \
  template Status cross_entropy_backward<S>(CudaContext&, const S*, const int32_t*, S*, int64_t, int64_t, \
                                            double, double, std::span<std::byte>);
LLMPLAN_CUDA_FOR_STORAGE(INST)
#undef INST
#define INSTG(S, G)                                                                                   \
  template Status layernorm_backward<S, G>(CudaContext&, const S*, const S*, const S*, S*, G*, G*,    \
                                           int64_t, int64_t, double, bool, std::span<std::byte>);     \
  template Status rmsnorm_backward<S, G>(CudaContext&, const S*, const S*, const S*, S*, G*, int64_t, \
                                         int64_t, double, bool, std::span<std::byte>);                \
  template Status column_sums_accumulate<S, G>(CudaContext&, const S*, G*, int64_t, int64_t,          \
                                               std::span<std::byte>);
LLMPLAN_CUDA_FOR_STORAGE_GRAD(INSTG)
#undef INSTG

}  // namespace llmplan::exec::cuda
