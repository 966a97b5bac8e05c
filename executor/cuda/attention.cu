// Attention on the GPU (attention.h): the materialized path (permutes, batched cuBLASLt
// GEMMs, softmax kernels) and the fused flash kernels.
#include "executor/cuda/attention.h"

#include <cmath>

#include "executor/cuda/check.h"
#include "executor/cuda/device_util.cuh"
#include "executor/cuda/linear.h"

namespace llmplan::exec::cuda {
using dev::block_max;
using dev::block_sum;
using dev::load;
using dev::store;
using dev::warp_max;
using dev::warp_sum;

namespace {
constexpr int kSoftmaxThreads = 256;

float score_scale(const AttentionDims& dm) {
  return static_cast<float>(dm.scale != 0 ? dm.scale : 1.0 / std::sqrt(static_cast<double>(dm.head_dim)));
}

Status check_dims(const AttentionDims& dm) {
  if (dm.b < 0 || dm.s < 0 || dm.heads <= 0 || dm.kv_heads <= 0 || dm.head_dim <= 0 || dm.heads % dm.kv_heads != 0) {
    return Status::bad_input("attention: heads must be a positive multiple of kv_heads, and every size >= 0");
  }
  return Status::ok();
}

// ---------------------------------------------------------------- materialized

// Token-major (b, s, heads, d) -> head-major (b, heads, s, d), or back.
template <class S>
Status to_head_major(CudaContext& ctx, const S* src, S* dst, int64_t b, int64_t s, int64_t heads, int64_t d) {
  return for_each_index(ctx, b * s * heads * d, [=] __device__(int64_t e) {
    const int64_t c = e % d, i = (e / d) % s, h = (e / (d * s)) % heads, bi = e / (d * s * heads);
    dst[e] = src[((bi * s + i) * heads + h) * d + c];
  }, "to_head_major");
}
template <class S>
Status from_head_major(CudaContext& ctx, const S* src, S* dst, int64_t b, int64_t s, int64_t heads, int64_t d) {
  return for_each_index(ctx, b * s * heads * d, [=] __device__(int64_t e) {
    const int64_t c = e % d, h = (e / d) % heads, i = (e / (d * heads)) % s, bi = e / (d * heads * s);
    dst[e] = src[((bi * heads + h) * s + i) * d + c];
  }, "from_head_major");
}

// One block per score row r = (bi, h, i): probs = softmax over allowed keys, 0 elsewhere.
template <class S>
__global__ void softmax_forward_kernel(const float* scores, S* probs, const int32_t* doc, int64_t s, int64_t heads) {
  const int64_t r = blockIdx.x, i = r % s, bi = r / (heads * s);
  const float* x = scores + r * s;
  S* p = probs + r * s;
  const int32_t* docs = doc != nullptr ? doc + bi * s : nullptr;
  auto allowed = [&](int64_t j) { return j <= i && (docs == nullptr || docs[j] == docs[i]); };
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    if (allowed(j)) m = fmaxf(m, x[j]);
  m = block_max(m);  // finite: key i is always allowed
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    if (allowed(j)) sum += expf(x[j] - m);
  const float inv = 1.0f / block_sum(sum);
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) p[j] = store<S>(allowed(j) ? expf(x[j] - m) * inv : 0.0f);
}

// dS = P (dP - sum_j P dP) per row.
template <class S>
__global__ void softmax_backward_kernel(const S* probs, const float* dp, S* ds, int64_t s) {
  const int64_t off = static_cast<int64_t>(blockIdx.x) * s;
  float acc = 0;
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) acc += load(probs[off + j]) * dp[off + j];
  const float D = block_sum(acc);
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
    const float p = load(probs[off + j]);
    ds[off + j] = store<S>(p * (dp[off + j] - D));
  }
}

// The batched GEMM over (b, kv_head) groups: C = alpha op(A) op(B) with the given strides.
template <class S>
Status group_gemm(CudaContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const S* a,
                  int64_t lda, int64_t sa, const S* b, int64_t ldb, int64_t sb, void* c, DType ct, int64_t ldc,
                  int64_t sc, int64_t batch) {
  GemmArgs g;
  g.ta = ta;
  g.tb = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.c = c;
  g.ldc = ldc;
  g.a_type = g.b_type = dtype_of<S>;
  g.c_type = ct;
  g.batch = static_cast<int>(batch);
  g.stride_a = sa;
  g.stride_b = sb;
  g.stride_c = sc;
  return gemm(ctx, g);
}

template <class S>
int64_t materialized_bytes(const AttentionDims& dm) {
  const int64_t q = carved(dm.b * dm.heads * dm.s * dm.head_dim * static_cast<int64_t>(sizeof(S)));
  const int64_t kv = carved(dm.b * dm.kv_heads * dm.s * dm.head_dim * static_cast<int64_t>(sizeof(S)));
  const int64_t scores = carved(dm.b * dm.heads * dm.s * dm.s * 4);
  const int64_t ds = carved(dm.b * dm.heads * dm.s * dm.s * static_cast<int64_t>(sizeof(S)));
  return std::max(2 * q + 2 * kv + scores, 3 * q + 4 * kv + scores + ds);
}

// ---------------------------------------------------------------- flash

constexpr int kWarps = 8;   // query (or key) rows per block, one warp each
constexpr int kTile = 32;   // key (or query) rows per shared-memory tile
constexpr int kMaxD = static_cast<int>(kFlashMaxHeadDim);
constexpr int kPer = kMaxD / 32;  // head-dim elements per lane: lane l holds l, l + 32, ...

struct FlashDims {
  int64_t s, heads, kv_heads, d, group;
  float scale;
};

// Tile rows [r0, r0 + kTile) of head `head` of x (b, s, nh, d) into smem (kTile, kMaxD) as
// fp32, zeros beyond s and d. Called by the whole block.
template <class S>
__device__ void load_tile(float (*dst)[kMaxD], const S* x, int64_t bi, int64_t r0, int64_t head, int64_t nh,
                          const FlashDims& D) {
  for (int e = threadIdx.x; e < kTile * kMaxD; e += blockDim.x) {
    const int t = e / kMaxD, c = e % kMaxD;
    const int64_t r = r0 + t;
    dst[t][c] = r < D.s && c < D.d ? load(x[((bi * D.s + r) * nh + head) * D.d + c]) : 0.0f;
  }
}

// This lane's kPer elements of row r of head `head` of x (b, s, nh, d).
template <class S>
__device__ void load_row(float (&out)[kPer], const S* x, int64_t bi, int64_t r, int64_t head, int64_t nh,
                         const FlashDims& D) {
  const int lane = threadIdx.x & 31;
  for (int c = 0; c < kPer; ++c) {
    const int dim = lane + 32 * c;
    out[c] = dim < D.d ? load(x[((bi * D.s + r) * nh + head) * D.d + dim]) : 0.0f;
  }
}
template <class S>
__device__ void store_row(S* x, const float (&v)[kPer], float mul, int64_t bi, int64_t r, int64_t head, int64_t nh,
                          const FlashDims& D) {
  const int lane = threadIdx.x & 31;
  for (int c = 0; c < kPer; ++c) {
    const int dim = lane + 32 * c;
    if (dim < D.d) x[((bi * D.s + r) * nh + head) * D.d + dim] = store<S>(v[c] * mul);
  }
}

__device__ __forceinline__ float dot_row(const float (&a)[kPer], const float* b_row) {
  const int lane = threadIdx.x & 31;
  float p = 0;
  for (int c = 0; c < kPer; ++c) p += a[c] * b_row[lane + 32 * c];
  return warp_sum(p);
}

// grid (ceil(s / kWarps), heads, b); warp w of block x owns query row x * kWarps + w.
template <class S>
__global__ void __launch_bounds__(kWarps * 32)
    flash_forward_kernel(const S* q, const S* k, const S* v, const int32_t* doc, S* o, float* lse, FlashDims D) {
  __shared__ float Ks[kTile][kMaxD];
  __shared__ float Vs[kTile][kMaxD];
  __shared__ int32_t docs[kTile];
  const int lane = threadIdx.x & 31;
  const int64_t bi = blockIdx.z, h = blockIdx.y, kh = h / D.group;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kWarps, i = row0 + (threadIdx.x >> 5);
  const int64_t last = min(D.s, row0 + kWarps) - 1;  // causal: no key beyond the block's last row
  const bool active = i < D.s;
  float qr[kPer], acc[kPer];
  for (int c = 0; c < kPer; ++c) acc[c] = 0.0f;
  int32_t my_doc = 0;
  if (active) {
    load_row(qr, q, bi, i, h, D.heads, D);
    if (doc != nullptr) my_doc = doc[bi * D.s + i];
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile(Ks, k, bi, j0, kh, D.kv_heads, D);
    load_tile(Vs, v, bi, j0, kh, D.kv_heads, D);
    if (threadIdx.x < kTile) docs[threadIdx.x] = doc != nullptr && j0 + threadIdx.x < D.s ? doc[bi * D.s + j0 + threadIdx.x] : 0;
    __syncthreads();
    if (!active) continue;  // warp-uniform; the warp still meets every barrier
    const int cols = static_cast<int>(min(static_cast<int64_t>(kTile), D.s - j0));
    float my_score = -INFINITY;  // lane t: the score of key j0 + t
    for (int t = 0; t < cols; ++t) {
      const float sc = dot_row(qr, Ks[t]) * D.scale;
      const int64_t j = j0 + t;
      const bool ok = j <= i && (doc == nullptr || docs[t] == my_doc);
      if (lane == t) my_score = ok ? sc : -INFINITY;
    }
    const float tile_max = warp_max(my_score);
    if (tile_max == -INFINITY) continue;  // no allowed key in this tile
    const float m_new = fmaxf(m, tile_max);
    const float corr = expf(m - m_new);  // 0 while m is still -inf
    const float p = expf(my_score - m_new);
    l = l * corr + warp_sum(p);
    for (int c = 0; c < kPer; ++c) acc[c] *= corr;
    for (int t = 0; t < cols; ++t) {
      const float pt = __shfl_sync(0xFFFFFFFFu, p, t);
      for (int c = 0; c < kPer; ++c) acc[c] += pt * Vs[t][lane + 32 * c];
    }
    m = m_new;
  }
  if (!active) return;
  store_row(o, acc, 1.0f / l, bi, i, h, D.heads, D);
  if (lane == 0) lse[(bi * D.heads + h) * D.s + i] = m + logf(l);
}

// dq_i = scale sum_j P_ij (dP_ij - D_i) k_j, P_ij = exp(scale q_i.k_j - lse_i), dP_ij = dO_i.v_j;
// also stores D_i = dO_i . o_i for the dk/dv kernel. Grid as the forward.
template <class S>
__global__ void __launch_bounds__(kWarps * 32)
    flash_backward_dq_kernel(const S* q, const S* k, const S* v, const int32_t* doc, const S* o, const float* lse,
                             const S* dout, S* dq, float* dsum, FlashDims D) {
  __shared__ float Ks[kTile][kMaxD];
  __shared__ float Vs[kTile][kMaxD];
  __shared__ int32_t docs[kTile];
  const int lane = threadIdx.x & 31;
  const int64_t bi = blockIdx.z, h = blockIdx.y, kh = h / D.group;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kWarps, i = row0 + (threadIdx.x >> 5);
  const int64_t last = min(D.s, row0 + kWarps) - 1;
  const bool active = i < D.s;
  float qr[kPer], dor[kPer], acc[kPer];
  for (int c = 0; c < kPer; ++c) acc[c] = 0.0f;
  int32_t my_doc = 0;
  float Di = 0, lse_i = 0;
  if (active) {
    load_row(qr, q, bi, i, h, D.heads, D);
    load_row(dor, dout, bi, i, h, D.heads, D);
    float orow[kPer];
    load_row(orow, o, bi, i, h, D.heads, D);
    float part = 0;
    for (int c = 0; c < kPer; ++c) part += dor[c] * orow[c];
    Di = warp_sum(part);
    const int64_t r = (bi * D.heads + h) * D.s + i;
    if (lane == 0) dsum[r] = Di;
    lse_i = lse[r];
    if (doc != nullptr) my_doc = doc[bi * D.s + i];
  }
  for (int64_t j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();
    load_tile(Ks, k, bi, j0, kh, D.kv_heads, D);
    load_tile(Vs, v, bi, j0, kh, D.kv_heads, D);
    if (threadIdx.x < kTile) docs[threadIdx.x] = doc != nullptr && j0 + threadIdx.x < D.s ? doc[bi * D.s + j0 + threadIdx.x] : 0;
    __syncthreads();
    if (!active) continue;
    const int cols = static_cast<int>(min(static_cast<int64_t>(kTile), D.s - j0));
    for (int t = 0; t < cols; ++t) {
      const float sc = dot_row(qr, Ks[t]) * D.scale;
      const float dp = dot_row(dor, Vs[t]);
      const int64_t j = j0 + t;
      const bool ok = j <= i && (doc == nullptr || docs[t] == my_doc);
      const float p = ok ? expf(sc - lse_i) : 0.0f;
      const float ds = p * (dp - Di);
      for (int c = 0; c < kPer; ++c) acc[c] += ds * Ks[t][lane + 32 * c];
    }
  }
  if (active) store_row(dq, acc, D.scale, bi, i, h, D.heads, D);
}

// dk_j = scale sum_{h in group, i >= j} dS_ij q_i;  dv_j = sum P_ij dO_i.
// grid (ceil(s / kWarps), kv_heads, b); warp w of block x owns key row x * kWarps + w.
template <class S>
__global__ void __launch_bounds__(kWarps * 32)
    flash_backward_dkv_kernel(const S* q, const S* k, const S* v, const int32_t* doc, const float* lse,
                              const S* dout, const float* dsum, S* dk, S* dv, FlashDims D) {
  __shared__ float Qs[kTile][kMaxD];
  __shared__ float dOs[kTile][kMaxD];
  __shared__ float lse_s[kTile], D_s[kTile];
  __shared__ int32_t docs[kTile];
  const int lane = threadIdx.x & 31;
  const int64_t bi = blockIdx.z, kh = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kWarps, j = row0 + (threadIdx.x >> 5);
  const bool active = j < D.s;
  float kr[kPer], vr[kPer], dka[kPer], dva[kPer];
  for (int c = 0; c < kPer; ++c) dka[c] = dva[c] = 0.0f;
  int32_t my_doc = 0;
  if (active) {
    load_row(kr, k, bi, j, kh, D.kv_heads, D);
    load_row(vr, v, bi, j, kh, D.kv_heads, D);
    if (doc != nullptr) my_doc = doc[bi * D.s + j];
  }
  for (int64_t h = kh * D.group; h < (kh + 1) * D.group; ++h) {
    for (int64_t i0 = row0 / kTile * kTile; i0 < D.s; i0 += kTile) {  // causal: queries i >= j only
      __syncthreads();
      load_tile(Qs, q, bi, i0, h, D.heads, D);
      load_tile(dOs, dout, bi, i0, h, D.heads, D);
      if (threadIdx.x < kTile) {
        const int64_t i = i0 + threadIdx.x;
        const bool in = i < D.s;
        const int64_t r = (bi * D.heads + h) * D.s + i;
        lse_s[threadIdx.x] = in ? lse[r] : 0.0f;
        D_s[threadIdx.x] = in ? dsum[r] : 0.0f;
        docs[threadIdx.x] = doc != nullptr && in ? doc[bi * D.s + i] : 0;
      }
      __syncthreads();
      if (!active) continue;
      const int rows = static_cast<int>(min(static_cast<int64_t>(kTile), D.s - i0));
      for (int t = 0; t < rows; ++t) {
        const float sc = dot_row(kr, Qs[t]) * D.scale;
        const float dp = dot_row(vr, dOs[t]);
        const int64_t i = i0 + t;
        const bool ok = j <= i && (doc == nullptr || docs[t] == my_doc);
        const float p = ok ? expf(sc - lse_s[t]) : 0.0f;
        const float ds = p * (dp - D_s[t]);
        for (int c = 0; c < kPer; ++c) {
          dva[c] += p * dOs[t][lane + 32 * c];
          dka[c] += ds * Qs[t][lane + 32 * c];
        }
      }
    }
  }
  if (!active) return;
  store_row(dk, dka, D.scale, bi, j, kh, D.kv_heads, D);
  store_row(dv, dva, 1.0f, bi, j, kh, D.kv_heads, D);
}

FlashDims flash_dims(const AttentionDims& dm) {
  return {dm.s, dm.heads, dm.kv_heads, dm.head_dim, dm.heads / dm.kv_heads, score_scale(dm)};
}

Status check_flash(const AttentionDims& dm) {
  if (Status s = check_dims(dm); !s) return s;
  if (dm.head_dim > kFlashMaxHeadDim) {
    return Status::bad_input("flash attention on CUDA: head_dim " + std::to_string(dm.head_dim) + " > " +
                             std::to_string(kFlashMaxHeadDim) + " (use the materialized path)");
  }
  if (dm.b > 65535) return Status::bad_input("flash attention on CUDA: more than 65535 sequences per call");
  return Status::ok();
}

dim3 flash_grid(const AttentionDims& dm, int64_t heads) {
  return dim3(static_cast<unsigned>((dm.s + kWarps - 1) / kWarps), static_cast<unsigned>(heads),
              static_cast<unsigned>(dm.b));
}
}  // namespace

int64_t attention_workspace_bytes(DType st, const AttentionDims& dm, bool flash) {
  if (flash) return carved(std::max<int64_t>(1, dm.b * dm.heads * dm.s) * 4);
  return st == DType::f32 ? materialized_bytes<float>(dm) : materialized_bytes<bf16_t>(dm);  // f16: as bf16
}

template <class S>
Status attention_forward_materialized(CudaContext& ctx, const S* q, const S* k, const S* v, const int32_t* doc,
                                      S* o, S* probs, const AttentionDims& dm, std::span<std::byte> ws) {
  if (Status st = check_dims(dm); !st) return st;
  const int64_t b = dm.b, s = dm.s, H = dm.heads, KV = dm.kv_heads, d = dm.head_dim, g = H / KV;
  if (b * s == 0) return Status::ok();
  DeviceCarver c(ws);
  S* Qh = c.take<S>(b * H * s * d);
  S* Kh = c.take<S>(b * KV * s * d);
  S* Vh = c.take<S>(b * KV * s * d);
  S* Oh = c.take<S>(b * H * s * d);
  float* scores = c.take<float>(b * H * s * s);
  if (!c.ok()) return Status::bad_input("attention: workspace smaller than attention_workspace_bytes()");
  if (Status st = to_head_major(ctx, q, Qh, b, s, H, d); !st) return st;
  if (Status st = to_head_major(ctx, k, Kh, b, s, KV, d); !st) return st;
  if (Status st = to_head_major(ctx, v, Vh, b, s, KV, d); !st) return st;
  // scores (g s, s) = scale Q_group K^T, per (sequence, kv head)
  if (Status st = group_gemm(ctx, false, true, g * s, s, d, score_scale(dm), Qh, d, g * s * d, Kh, d, s * d, scores,
                             DType::f32, s, g * s * s, b * KV);
      !st)
    return st;
  softmax_forward_kernel<<<static_cast<unsigned>(b * H * s), kSoftmaxThreads, 0, ctx.compute_stream()>>>(
      scores, probs, doc, s, H);
  if (Status st = launch_status("softmax_forward_kernel"); !st) return st;
  // O_group (g s, d) = P_group (g s, s) V (s, d)
  if (Status st = group_gemm(ctx, false, false, g * s, d, s, 1.0f, probs, s, g * s * s, Vh, d, s * d, Oh,
                             dtype_of<S>, d, g * s * d, b * KV);
      !st)
    return st;
  return from_head_major(ctx, Oh, o, b, s, H, d);
}

template <class S>
Status attention_backward_materialized(CudaContext& ctx, const S* q, const S* k, const S* v, const S* probs,
                                       const S* dout, S* dq, S* dk, S* dv, const AttentionDims& dm,
                                       std::span<std::byte> ws) {
  if (Status st = check_dims(dm); !st) return st;
  const int64_t b = dm.b, s = dm.s, H = dm.heads, KV = dm.kv_heads, d = dm.head_dim, g = H / KV;
  if (b * s == 0) return Status::ok();
  const float scale = score_scale(dm);
  DeviceCarver c(ws);
  S* Qh = c.take<S>(b * H * s * d);
  S* dOh = c.take<S>(b * H * s * d);
  S* dQh = c.take<S>(b * H * s * d);
  S* Kh = c.take<S>(b * KV * s * d);
  S* Vh = c.take<S>(b * KV * s * d);
  S* dKh = c.take<S>(b * KV * s * d);
  S* dVh = c.take<S>(b * KV * s * d);
  float* dP = c.take<float>(b * H * s * s);
  S* dS = c.take<S>(b * H * s * s);
  if (!c.ok()) return Status::bad_input("attention: workspace smaller than attention_workspace_bytes()");
  if (Status st = to_head_major(ctx, q, Qh, b, s, H, d); !st) return st;
  if (Status st = to_head_major(ctx, dout, dOh, b, s, H, d); !st) return st;
  if (Status st = to_head_major(ctx, k, Kh, b, s, KV, d); !st) return st;
  if (Status st = to_head_major(ctx, v, Vh, b, s, KV, d); !st) return st;
  // dP (g s, s) = dO_group V^T
  if (Status st = group_gemm(ctx, false, true, g * s, s, d, 1.0f, dOh, d, g * s * d, Vh, d, s * d, dP, DType::f32,
                             s, g * s * s, b * KV);
      !st)
    return st;
  softmax_backward_kernel<<<static_cast<unsigned>(b * H * s), kSoftmaxThreads, 0, ctx.compute_stream()>>>(probs, dP,
                                                                                                          dS, s);
  if (Status st = launch_status("softmax_backward_kernel"); !st) return st;
  const DType t = dtype_of<S>;
  // dQ_group (g s, d) = scale dS_group K
  if (Status st = group_gemm(ctx, false, false, g * s, d, s, scale, dS, s, g * s * s, Kh, d, s * d, dQh, t, d,
                             g * s * d, b * KV);
      !st)
    return st;
  // dK (s, d) = scale dS_group^T Q_group; dV (s, d) = P_group^T dO_group (sums over the group's heads)
  if (Status st = group_gemm(ctx, true, false, s, d, g * s, scale, dS, s, g * s * s, Qh, d, g * s * d, dKh, t, d,
                             s * d, b * KV);
      !st)
    return st;
  if (Status st = group_gemm(ctx, true, false, s, d, g * s, 1.0f, probs, s, g * s * s, dOh, d, g * s * d, dVh, t, d,
                             s * d, b * KV);
      !st)
    return st;
  if (Status st = from_head_major(ctx, dQh, dq, b, s, H, d); !st) return st;
  if (Status st = from_head_major(ctx, dKh, dk, b, s, KV, d); !st) return st;
  return from_head_major(ctx, dVh, dv, b, s, KV, d);
}

template <class S>
Status attention_forward_flash(CudaContext& ctx, const S* q, const S* k, const S* v, const int32_t* doc, S* o,
                               float* lse, const AttentionDims& dm, std::span<std::byte> /*ws*/) {
  if (Status st = check_flash(dm); !st) return st;
  if (dm.b * dm.s == 0) return Status::ok();
  flash_forward_kernel<<<flash_grid(dm, dm.heads), kWarps * 32, 0, ctx.compute_stream()>>>(q, k, v, doc, o, lse,
                                                                                         flash_dims(dm));
  return launch_status("flash_forward_kernel");
}

template <class S>
Status attention_backward_flash(CudaContext& ctx, const S* q, const S* k, const S* v, const int32_t* doc,
                                const S* o, const float* lse, const S* dout, S* dq, S* dk, S* dv,
                                const AttentionDims& dm, std::span<std::byte> ws) {
  if (Status st = check_flash(dm); !st) return st;
  if (dm.b * dm.s == 0) return Status::ok();
  DeviceCarver c(ws);
  float* dsum = c.take<float>(dm.b * dm.heads * dm.s);
  if (!c.ok()) return Status::bad_input("attention: workspace smaller than attention_workspace_bytes()");
  const FlashDims D = flash_dims(dm);
  flash_backward_dq_kernel<<<flash_grid(dm, dm.heads), kWarps * 32, 0, ctx.compute_stream()>>>(
      q, k, v, doc, o, lse, dout, dq, dsum, D);
  if (Status st = launch_status("flash_backward_dq_kernel"); !st) return st;
  flash_backward_dkv_kernel<<<flash_grid(dm, dm.kv_heads), kWarps * 32, 0, ctx.compute_stream()>>>(
      q, k, v, doc, lse, dout, dsum, dk, dv, D);
  return launch_status("flash_backward_dkv_kernel");
}

#define INST(S)                                                                                              \
  template Status attention_forward_materialized<S>(CudaContext&, const S*, const S*, const S*, const int32_t*, \
                                                    S*, S*, const AttentionDims&, std::span<std::byte>);     \
  template Status attention_backward_materialized<S>(CudaContext&, const S*, const S*, const S*, const S*,    \
                                                     const S*, S*, S*, S*, const AttentionDims&,             \
                                                     std::span<std::byte>);                                  \
  template Status attention_forward_flash<S>(CudaContext&, const S*, const S*, const S*, const int32_t*, S*, \
                                             float*, const AttentionDims&, std::span<std::byte>);            \
  template Status attention_backward_flash<S>(CudaContext&, const S*, const S*, const S*, const int32_t*,    \
                                              const S*, const float*, const S*, S*, S*, S*,                  \
                                              const AttentionDims&, std::span<std::byte>);
LLMPLAN_CUDA_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cuda
