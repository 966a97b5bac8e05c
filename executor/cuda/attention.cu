// Attention on the GPU (attention.h): the materialized path (permutes, batched cuBLASLt
// GEMMs, softmax kernels) and the fused flash kernels.
#include "executor/cuda/attention.h"

#include <mma.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

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

// A forward with dims.sinks reads their logits on the device (`sinks`, heads floats).
Status check_sinks(const AttentionDims& dm, const float* sinks) {
  if (!dm.sinks.empty() && sinks == nullptr)
    return Status::bad_input("attention (cuda): dims.sinks given without their device copy (the sinks argument)");
  return Status::ok();
}

Status materialized_takes_whole_sequences() {
  return Status::bad_input("attention (cuda): the materialized kernels take whole sequences; context parallel's query "
                           "and key slices need flash attention on the GPU");
}

Status check_dims(const AttentionDims& dm) {
  if (dm.b < 0 || dm.s < 0 || dm.heads <= 0 || dm.kv_heads <= 0 || dm.head_dim <= 0 || dm.heads % dm.kv_heads != 0) {
    return Status::bad_input("attention: heads must be a positive multiple of kv_heads, and every size >= 0");
  }
  if (dm.window < 0) return Status::bad_input("attention: window must be >= 0 (0: full causal)");
  if (dm.v_dim < 0) return Status::bad_input("attention: v_dim must be >= 0 (0: the head width)");
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

// One block per score row r = (bi, h, i): probs = softmax over allowed keys, 0 elsewhere:
// j <= i, within the window's last `window` positions when window > 0 (cpu/attention.h
// allowed(i, j)), in the same document.
// sinks (heads) or nullptr: one more logit per row, of value 0, in the denominator only
// (cpu/attention.h sinks): the row's probabilities then sum to 1 - p_sink.
template <class S>
__global__ void softmax_forward_kernel(const float* scores, S* probs, const int32_t* doc, int64_t s, int64_t heads,
                                       int64_t window, const float* sinks) {
  const int64_t r = blockIdx.x, i = r % s, bi = r / (heads * s);
  const float* x = scores + r * s;
  S* p = probs + r * s;
  const int32_t* docs = doc != nullptr ? doc + bi * s : nullptr;
  auto allowed = [&](int64_t j) {
    return j <= i && (window <= 0 || i - j < window) && (docs == nullptr || docs[j] == docs[i]);
  };
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    if (allowed(j)) m = fmaxf(m, x[j]);
  m = block_max(m);  // finite: key i is always allowed
  const float sink = sinks != nullptr ? sinks[(r / s) % heads] : -INFINITY;
  m = fmaxf(m, sink);
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    if (allowed(j)) sum += expf(x[j] - m);
  const float inv = 1.0f / (block_sum(sum) + (sinks != nullptr ? expf(sink - m) : 0.0f));
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

// q, k at width d; v, o, dout at width dv (value_dim).
template <class S>
int64_t materialized_bytes(const AttentionDims& dm) {
  const int64_t es = static_cast<int64_t>(sizeof(S)), dv = value_dim(dm);
  const int64_t q = carved(dm.b * dm.heads * dm.s * dm.head_dim * es), o = carved(dm.b * dm.heads * dm.s * dv * es);
  const int64_t k = carved(dm.b * dm.kv_heads * dm.s * dm.head_dim * es), v = carved(dm.b * dm.kv_heads * dm.s * dv * es);
  const int64_t scores = carved(dm.b * dm.heads * dm.s * dm.s * 4);
  const int64_t ds = carved(dm.b * dm.heads * dm.s * dm.s * es);
  // forward: Qh Kh Vh Oh + scores; backward: Qh dOh dQh Kh Vh dKh dVh + dP + dS
  return std::max(q + k + v + o + scores, 2 * q + o + 2 * k + 2 * v + scores + ds);
}

// ---------------------------------------------------------------- flash

constexpr int kWarps = 8;   // query (or key) rows per block, one warp each
constexpr int kTile = 32;   // key (or query) rows per shared-memory tile
constexpr int kMaxD = static_cast<int>(kFlashMaxHeadDim);
constexpr int kPer = kMaxD / 32;  // head-dim elements per lane: lane l holds l, l + 32, ...

// s: the whole sequence (doc ids are (b, s), read at positions). The SIMT kernels also take
// slices (context parallel, cpu/attention.h): sq query rows per sequence, row i at
// position q_off + i, or q_hi + (i - q_split) from q_split on (q_split 0: one chunk); sk key
// rows at k_off / k_split / k_hi likewise. Positions increase with the row, so the keys a
// query may see (causal) are a prefix of the key rows and the queries that may see a key
// a suffix of the query rows. Whole sequences: sq = sk = s, offsets and splits 0.
// d: the width of a query and key head; dv: of a value (and output) head (latent
// attention's are narrower). window: the sliding window in positions (a key at p_k is seen
// from p_q when p_q - p_k < window), or 0: full causal.
struct FlashDims {
  int64_t s, heads, kv_heads, d, group;
  float scale;
  int64_t sq, q_off, q_split, q_hi;
  int64_t sk, k_off, k_split, k_hi;
  int64_t window;
  int64_t dv;
  const float* sinks;  // (heads) on the device, or nullptr: none
};

// Whether the query at position qp may see the key at position kp: causal, and inside the
// window when there is one (cpu/attention.h allowed(i, j), without the document ids).
__device__ __forceinline__ bool sees(const FlashDims& D, int64_t qp, int64_t kp) {
  return kp <= qp && (D.window <= 0 || qp - kp < D.window);
}

__device__ __forceinline__ int64_t clamp_rows(int64_t x, int64_t hi) { return x < 0 ? 0 : x > hi ? hi : x; }
__device__ __forceinline__ int64_t q_pos(const FlashDims& D, int64_t i) {
  return D.q_split > 0 && i >= D.q_split ? D.q_hi + (i - D.q_split) : D.q_off + i;
}
__device__ __forceinline__ int64_t k_pos(const FlashDims& D, int64_t j) {
  return D.k_split > 0 && j >= D.k_split ? D.k_hi + (j - D.k_split) : D.k_off + j;
}
// Key rows at positions <= p (a prefix).
__device__ __forceinline__ int64_t keys_upto(const FlashDims& D, int64_t p) {
  if (D.k_split <= 0) return clamp_rows(p - D.k_off + 1, D.sk);
  return clamp_rows(p - D.k_off + 1, D.k_split) + clamp_rows(p - D.k_hi + 1, D.sk - D.k_split);
}
// Query rows at positions < p (the rows before the first that may see key position p).
__device__ __forceinline__ int64_t queries_below(const FlashDims& D, int64_t p) {
  if (D.q_split <= 0) return clamp_rows(p - D.q_off, D.sq);
  return clamp_rows(p - D.q_off, D.q_split) + clamp_rows(p - D.q_hi, D.sq - D.q_split);
}

// Tile rows [r0, r0 + kTile) of head `head` of x (b, rows, nh, w) into smem (kTile, kMaxD)
// as fp32, zeros beyond rows and the width w (D.d for q and k, D.dv for v, o and dout).
// Called by the whole block.
template <class S>
__device__ void load_tile(float (*dst)[kMaxD], const S* x, int64_t bi, int64_t r0, int64_t head, int64_t nh,
                          int64_t rows, int64_t w) {
  for (int e = threadIdx.x; e < kTile * kMaxD; e += blockDim.x) {
    const int t = e / kMaxD, c = e % kMaxD;
    const int64_t r = r0 + t;
    dst[t][c] = r < rows && c < w ? load(x[((bi * rows + r) * nh + head) * w + c]) : 0.0f;
  }
}

// This lane's kPer elements of row r of head `head` of x (b, rows, nh, w), zeros beyond w.
template <class S>
__device__ void load_row(float (&out)[kPer], const S* x, int64_t bi, int64_t r, int64_t head, int64_t nh, int64_t rows,
                         int64_t w) {
  const int lane = threadIdx.x & 31;
  for (int c = 0; c < kPer; ++c) {
    const int dim = lane + 32 * c;
    out[c] = dim < w ? load(x[((bi * rows + r) * nh + head) * w + dim]) : 0.0f;
  }
}
template <class S>
__device__ void store_row(S* x, const float (&v)[kPer], float mul, int64_t bi, int64_t r, int64_t head, int64_t nh,
                          int64_t rows, int64_t w) {
  const int lane = threadIdx.x & 31;
  for (int c = 0; c < kPer; ++c) {
    const int dim = lane + 32 * c;
    if (dim < w) x[((bi * rows + r) * nh + head) * w + dim] = store<S>(v[c] * mul);
  }
}

__device__ __forceinline__ float dot_row(const float (&a)[kPer], const float* b_row) {
  const int lane = threadIdx.x & 31;
  float p = 0;
  for (int c = 0; c < kPer; ++c) p += a[c] * b_row[lane + 32 * c];
  return warp_sum(p);
}

// grid (ceil(sq / kWarps), heads, b); warp w of block x owns query row x * kWarps + w.
template <class S>
__global__ void __launch_bounds__(kWarps * 32)
    flash_forward_kernel(const S* q, const S* k, const S* v, const int32_t* doc, S* o, float* lse, FlashDims D) {
  __shared__ float Ks[kTile][kMaxD];
  __shared__ float Vs[kTile][kMaxD];
  __shared__ int32_t docs[kTile];
  const int lane = threadIdx.x & 31;
  const int64_t bi = blockIdx.z, h = blockIdx.y, kh = h / D.group;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kWarps, i = row0 + (threadIdx.x >> 5);
  // causal: no key beyond the block's last query position
  const int64_t kend = keys_upto(D, q_pos(D, min(D.sq, row0 + kWarps) - 1));
  const bool active = i < D.sq;
  const int64_t my_pos = q_pos(D, i);
  float qr[kPer], acc[kPer];
  for (int c = 0; c < kPer; ++c) acc[c] = 0.0f;
  int32_t my_doc = 0;
  if (active) {
    load_row(qr, q, bi, i, h, D.heads, D.sq, D.d);
    if (doc != nullptr) my_doc = doc[bi * D.s + my_pos];
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile(Ks, k, bi, j0, kh, D.kv_heads, D.sk, D.d);
    load_tile(Vs, v, bi, j0, kh, D.kv_heads, D.sk, D.dv);
    if (threadIdx.x < kTile)
      docs[threadIdx.x] = doc != nullptr && j0 + threadIdx.x < D.sk ? doc[bi * D.s + k_pos(D, j0 + threadIdx.x)] : 0;
    __syncthreads();
    if (!active) continue;  // warp-uniform; the warp still meets every barrier
    const int cols = static_cast<int>(min(static_cast<int64_t>(kTile), kend - j0));
    float my_score = -INFINITY;  // lane t: the score of key j0 + t
    for (int t = 0; t < cols; ++t) {
      const float sc = dot_row(qr, Ks[t]) * D.scale;
      const int64_t j = j0 + t;
      const bool ok = sees(D, my_pos, k_pos(D, j)) && (doc == nullptr || docs[t] == my_doc);
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
  if (D.sinks != nullptr) {  // the sink: one more logit of value 0 (cpu/attention.h sinks)
    const float sk = D.sinks[h], m_new = fmaxf(m, sk), corr = expf(m - m_new);
    l = l * corr + expf(sk - m_new);
    for (int c = 0; c < kPer; ++c) acc[c] *= corr;
    m = m_new;
  }
  // A row with no allowed key among those held (a ring step's partial): o = 0, lse = -inf.
  store_row(o, acc, l > 0.0f ? 1.0f / l : 0.0f, bi, i, h, D.heads, D.sq, D.dv);
  if (lane == 0) lse[(bi * D.heads + h) * D.sq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
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
  const int64_t kend = keys_upto(D, q_pos(D, min(D.sq, row0 + kWarps) - 1));
  const bool active = i < D.sq;
  const int64_t my_pos = q_pos(D, i);
  float qr[kPer], dor[kPer], acc[kPer];
  for (int c = 0; c < kPer; ++c) acc[c] = 0.0f;
  int32_t my_doc = 0;
  float Di = 0, lse_i = 0;
  if (active) {
    load_row(qr, q, bi, i, h, D.heads, D.sq, D.d);
    load_row(dor, dout, bi, i, h, D.heads, D.sq, D.dv);
    float orow[kPer];
    load_row(orow, o, bi, i, h, D.heads, D.sq, D.dv);
    float part = 0;
    for (int c = 0; c < kPer; ++c) part += dor[c] * orow[c];
    Di = warp_sum(part);
    const int64_t r = (bi * D.heads + h) * D.sq + i;
    if (lane == 0) dsum[r] = Di;
    lse_i = lse[r];
    if (doc != nullptr) my_doc = doc[bi * D.s + my_pos];
  }
  const bool seen = lse_i != -INFINITY;  // a row that saw no key has no gradient
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();
    load_tile(Ks, k, bi, j0, kh, D.kv_heads, D.sk, D.d);
    load_tile(Vs, v, bi, j0, kh, D.kv_heads, D.sk, D.dv);
    if (threadIdx.x < kTile)
      docs[threadIdx.x] = doc != nullptr && j0 + threadIdx.x < D.sk ? doc[bi * D.s + k_pos(D, j0 + threadIdx.x)] : 0;
    __syncthreads();
    if (!active) continue;
    const int cols = static_cast<int>(min(static_cast<int64_t>(kTile), kend - j0));
    for (int t = 0; t < cols; ++t) {
      const float sc = dot_row(qr, Ks[t]) * D.scale;
      const float dp = dot_row(dor, Vs[t]);
      const int64_t j = j0 + t;
      const bool ok = seen && sees(D, my_pos, k_pos(D, j)) && (doc == nullptr || docs[t] == my_doc);
      const float p = ok ? expf(sc - lse_i) : 0.0f;
      const float ds = p * (dp - Di);
      for (int c = 0; c < kPer; ++c) acc[c] += ds * Ks[t][lane + 32 * c];
    }
  }
  if (active) store_row(dq, acc, D.scale, bi, i, h, D.heads, D.sq, D.d);
}

// dk_j = scale sum_{h in group, i >= j} dS_ij q_i;  dv_j = sum P_ij dO_i.
// grid (ceil(sk / kWarps), kv_heads, b); warp w of block x owns key row x * kWarps + w.
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
  const bool active = j < D.sk;
  const int64_t my_pos = k_pos(D, j);
  float kr[kPer], vr[kPer], dka[kPer], dva[kPer];
  for (int c = 0; c < kPer; ++c) dka[c] = dva[c] = 0.0f;
  int32_t my_doc = 0;
  if (active) {
    load_row(kr, k, bi, j, kh, D.kv_heads, D.sk, D.d);
    load_row(vr, v, bi, j, kh, D.kv_heads, D.sk, D.dv);
    if (doc != nullptr) my_doc = doc[bi * D.s + my_pos];
  }
  // causal: queries at positions >= the block's first key's only
  const int64_t first_query = queries_below(D, k_pos(D, row0)) / kTile * kTile;
  for (int64_t h = kh * D.group; h < (kh + 1) * D.group; ++h) {
    for (int64_t i0 = first_query; i0 < D.sq; i0 += kTile) {
      __syncthreads();
      load_tile(Qs, q, bi, i0, h, D.heads, D.sq, D.d);
      load_tile(dOs, dout, bi, i0, h, D.heads, D.sq, D.dv);
      if (threadIdx.x < kTile) {
        const int64_t i = i0 + threadIdx.x;
        const bool in = i < D.sq;
        const int64_t r = (bi * D.heads + h) * D.sq + i;
        lse_s[threadIdx.x] = in ? lse[r] : -INFINITY;
        D_s[threadIdx.x] = in ? dsum[r] : 0.0f;
        docs[threadIdx.x] = doc != nullptr && in ? doc[bi * D.s + q_pos(D, i)] : 0;
      }
      __syncthreads();
      if (!active) continue;
      const int rows = static_cast<int>(min(static_cast<int64_t>(kTile), D.sq - i0));
      for (int t = 0; t < rows; ++t) {
        const float sc = dot_row(kr, Qs[t]) * D.scale;
        const float dp = dot_row(vr, dOs[t]);
        const int64_t i = i0 + t;
        const bool ok = lse_s[t] != -INFINITY && sees(D, q_pos(D, i), my_pos) && (doc == nullptr || docs[t] == my_doc);
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
  store_row(dk, dka, D.scale, bi, j, kh, D.kv_heads, D.sk, D.d);
  store_row(dv, dva, 1.0f, bi, j, kh, D.kv_heads, D.sk, D.dv);
}

FlashDims flash_dims(const AttentionDims& dm) {
  const int64_t sq = query_rows(dm), sk = key_rows_held(dm);
  // A split outside (0, rows) is one chunk, as on the CPU (cpu/attention.cpp key_chunks).
  auto split = [](int64_t at, int64_t rows) { return at > 0 && at < rows ? at : int64_t{0}; };
  FlashDims D{dm.s, dm.heads, dm.kv_heads, dm.head_dim, dm.heads / dm.kv_heads, score_scale(dm),
              sq, dm.q_offset, split(dm.q_split, sq), dm.q_offset_hi,
              sk, dm.k_rows > 0 ? dm.k_offset : 0, dm.k_rows > 0 ? split(dm.k_split, sk) : 0, dm.k_offset_hi,
              dm.window, value_dim(dm), nullptr};
  return D;
}

// Whether the queries and the keys are whole sequences (no context-parallel slice).
bool whole_sequences(const AttentionDims& dm) {
  return (dm.q_rows <= 0 || dm.q_rows == dm.s) && dm.q_offset == 0 && dm.q_split == 0 && dm.k_rows <= 0;
}

Status check_flash(const AttentionDims& dm) {
  if (Status s = check_dims(dm); !s) return s;
  if (dm.head_dim > kFlashMaxHeadDim || value_dim(dm) > kFlashMaxHeadDim) {
    return Status::bad_input("flash attention on CUDA: head_dim " + std::to_string(dm.head_dim) + " (values " +
                             std::to_string(value_dim(dm)) + ") > " + std::to_string(kFlashMaxHeadDim) +
                             " (use the materialized path)");
  }
  if (dm.b > 65535) return Status::bad_input("flash attention on CUDA: more than 65535 sequences per call");
  return Status::ok();
}

// rows: query rows (forward, dq) or key rows (dk, dv) per sequence.
dim3 flash_grid(const AttentionDims& dm, int64_t rows, int64_t heads) {
  return dim3(static_cast<unsigned>((rows + kWarps - 1) / kWarps), static_cast<unsigned>(heads),
              static_cast<unsigned>(dm.b));
}

// ---------------------------------------------------------------- flash on tensor cores
//
// 16-bit storage with head_dim a multiple of 16 (<= 128): the same algorithm as the kernels
// above with the four products of a tile on tensor cores (WMMA 16x16x16, fp32 accumulate).
// A block takes 64 query rows (forward) or 64 key rows (backward) with 4 warps, each warp 16
// rows; key (query) tiles of 64 rows go through shared memory (rows padded against bank
// conflicts). Forward: S = Q K^T per warp into shared memory, the online-softmax update one
// row at a time with the 32 lanes across the 64 columns, P in the storage type, O (fp32,
// shared memory) = corr O + P V. Backward (FlashAttention-2, Dao 2023): per key block and query tile,
// S = Q K^T and dP = dO V^T, P = exp(scale S - lse), dS = P (dP - D); dV += P^T dO and
// dK += dS^T Q stay in registers across the tiles; dQ += dS K is added atomically into an
// fp32 buffer (the one non-deterministic sum here), cast into dq at the end.
namespace tc {
namespace wmma = nvcuda::wmma;
constexpr int kRows = 64;     // query (forward) or key (backward) rows per block
constexpr int kCols = 64;     // key (forward) or query (backward) rows per tile
constexpr int kThreads = 128; // 4 warps x 16 rows
// Shared-memory row strides, padded so that the 16 rows a WMMA load or a warp's row walk
// touches fall in different banks (unpadded, rows 128 or 256 bytes apart share banks).
__host__ __device__ constexpr int ld_tile(int dp) { return dp + 8; }     // 16-bit tiles (Q, K, V, dO)
constexpr int kLdScore = kCols + 4;                  // fp32 (S, dP)
constexpr int kLdProb = kCols + 8;                   // 16-bit (P, dS)
__host__ __device__ constexpr int ld_acc(int dp) { return dp + 4; }      // fp32 (O, staging)

template <class S> struct Wmma;
template <> struct Wmma<bf16_t> { using T = __nv_bfloat16; };
template <> struct Wmma<f16_t> { using T = __half; };

template <class T> __device__ __forceinline__ T to_t(float x);
template <> __device__ __forceinline__ __nv_bfloat16 to_t<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half to_t<__half>(float x) { return __float2half_rn(x); }

// rows [r0, r0 + 64) of head `head` of x (b, s, nh, d) into dst (64, ld_tile(DP)), zero
// rows beyond s. REQUIRES: d == DP (the dispatch below), so each row is DP / 8 aligned
// 16-byte vectors (d * 2 bytes, a multiple of 32, apart; allocator blocks 256-aligned).
template <class T, int DP>
__device__ void load_rows(T* dst, const T* x, int64_t bi, int64_t r0, int64_t head, int64_t nh, const FlashDims& D) {
  constexpr int kVec = DP / 8;
  for (int e = threadIdx.x; e < kRows * kVec; e += kThreads) {
    const int t = e / kVec, c = (e % kVec) * 8;
    const int64_t r = r0 + t;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (r < D.s) val = *reinterpret_cast<const uint4*>(x + ((bi * D.s + r) * nh + head) * DP + c);
    *reinterpret_cast<uint4*>(dst + t * ld_tile(DP) + c) = val;
  }
}

constexpr size_t fwd_smem(int dp) {
  return 3 * kRows * ld_tile(dp) * 2 + kRows * kLdScore * 4 + kRows * kLdProb * 2 + kRows * ld_acc(dp) * 4 + 2 * kRows * 4;
}
constexpr size_t bwd_smem(int dp) {
  // K, V, Q, dO tiles; S and dP (fp32, also the dQ and final dK/dV staging: see below); P,
  // dS; lse, D, docs.
  return 4 * kRows * ld_tile(dp) * 2 + 2 * kCols * kLdScore * 4 + 2 * kCols * kLdProb * 2 + 4 * kRows * 4;
}
static_assert(kRows * ld_acc(128) <= 2 * kCols * kLdScore, "the staging rows fit in the S and dP space");

template <class T, int DP>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* q, const T* k, const T* v, const int32_t* doc, T* o, float* lse, FlashDims D) {
  constexpr int ND = DP / 16, LT = ld_tile(DP), LO = ld_acc(DP);
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + kRows * LT;
  T* Vs = Ks + kCols * LT;
  float* Ss = reinterpret_cast<float*>(Vs + kCols * LT);
  T* Ps = reinterpret_cast<T*>(Ss + kRows * kLdScore);
  float* Os = reinterpret_cast<float*>(Ps + kRows * kLdProb);
  int32_t* qdoc = reinterpret_cast<int32_t*>(Os + kRows * LO);
  int32_t* kdoc = qdoc + kRows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t bi = blockIdx.z, h = blockIdx.y, kh = h / D.group;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows;
  load_rows<T, DP>(Qs, q, bi, q0, h, D.heads, D);
  for (int e = threadIdx.x; e < kRows * LO; e += kThreads) Os[e] = 0.0f;
  if (threadIdx.x < kRows) qdoc[threadIdx.x] = doc != nullptr && q0 + threadIdx.x < D.s ? doc[bi * D.s + q0 + threadIdx.x] : 0;
  // Row state of this warp's 16 rows, the same in every lane.
  float m_r[16], l_r[16];
  for (int rr = 0; rr < 16; ++rr) {
    m_r[rr] = -INFINITY;
    l_r[rr] = 0.0f;
  }
  const int64_t last = min(D.s, q0 + kRows) - 1;  // causal: no key beyond the block's last row
  for (int64_t j0 = 0; j0 <= last; j0 += kCols) {
    __syncthreads();  // the previous tile is no longer read
    load_rows<T, DP>(Ks, k, bi, j0, kh, D.kv_heads, D);
    load_rows<T, DP>(Vs, v, bi, j0, kh, D.kv_heads, D);
    if (threadIdx.x < kCols) kdoc[threadIdx.x] = doc != nullptr && j0 + threadIdx.x < D.s ? doc[bi * D.s + j0 + threadIdx.x] : 0;
    __syncthreads();
    for (int n = 0; n < kCols / 16; ++n) {  // S rows of this warp = Q_w K^T
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < ND; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, Qs + warp * 16 * LT + kk * 16, LT);
        wmma::load_matrix_sync(fb, Ks + n * 16 * LT + kk * 16, LT);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(Ss + warp * 16 * kLdScore + n * 16, acc, kLdScore, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax, one row at a time, the lanes across the columns (consecutive words).
#pragma unroll
    for (int rr = 0; rr < 16; ++rr) {
      const int row = warp * 16 + rr;
      const int64_t i = q0 + row;
      float sc[2];
      for (int u = 0; u < 2; ++u) {
        const int col = lane + 32 * u;
        const int64_t j = j0 + col;
        const bool ok = i < D.s && j <= i && (doc == nullptr || kdoc[col] == qdoc[row]);
        sc[u] = ok ? Ss[row * kLdScore + col] * D.scale : -INFINITY;
      }
      const float m_new = fmaxf(m_r[rr], warp_max(fmaxf(sc[0], sc[1])));
      float corr = 1.0f, psum = 0.0f;
      if (m_new != -INFINITY) corr = expf(m_r[rr] - m_new);  // 0 while the row had no key yet
      for (int u = 0; u < 2; ++u) {
        const float p = m_new == -INFINITY ? 0.0f : expf(sc[u] - m_new);
        psum += p;
        Ps[row * kLdProb + lane + 32 * u] = to_t<T>(p);
      }
      l_r[rr] = l_r[rr] * corr + warp_sum(psum);
      m_r[rr] = m_new;
      for (int c = lane; c < DP; c += 32) Os[row * LO + c] *= corr;
    }
    __syncwarp();
    for (int n = 0; n < ND; ++n) {  // O_w += P_w V
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, Os + warp * 16 * LO + n * 16, LO, wmma::mem_row_major);
      for (int kk = 0; kk < kCols / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, Ps + warp * 16 * kLdProb + kk * 16, kLdProb);
        wmma::load_matrix_sync(fb, Vs + kk * 16 * LT + n * 16, LT);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(Os + warp * 16 * LO + n * 16, acc, LO, wmma::mem_row_major);
    }
    __syncwarp();
  }
#pragma unroll
  for (int rr = 0; rr < 16; ++rr) {
    const int row = warp * 16 + rr;
    const int64_t i = q0 + row;
    if (i >= D.s) continue;
    const float inv = 1.0f / l_r[rr];
    for (int c = lane; c < D.d; c += 32) o[((bi * D.s + i) * D.heads + h) * D.d + c] = to_t<T>(Os[row * LO + c] * inv);
    if (lane == 0) lse[(bi * D.heads + h) * D.s + i] = m_r[rr] + logf(l_r[rr]);
  }
}

// D_i = dO_i . o_i, one warp per (b, head, i) row.
template <class T>
__global__ void rowdot_kernel(const T* dout, const T* o, float* dsum, FlashDims D, int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int64_t i = r % D.s, h = (r / D.s) % D.heads, bi = r / (D.s * D.heads);
  const int64_t base = ((bi * D.s + i) * D.heads + h) * D.d;
  float acc = 0.0f;
  for (int64_t c = threadIdx.x & 31; c < D.d; c += 32) acc += static_cast<float>(dout[base + c]) * static_cast<float>(o[base + c]);
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) dsum[r] = acc;
}

// grid (ceil(s / 64), kv_heads, b): keys [j0, j0 + 64) of kv head kh, every query head of its group.
template <class T, int DP>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* q, const T* k, const T* v, const int32_t* doc, const float* lse, const T* dout,
                    const float* dsum, float* dq_acc, T* dk, T* dv, FlashDims D) {
  constexpr int ND = DP / 16, LT = ld_tile(DP), LO = ld_acc(DP);
  extern __shared__ __align__(128) unsigned char smem[];
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kRows * LT;
  T* Qs = Vs + kRows * LT;
  T* dOs = Qs + kCols * LT;
  float* Ss = reinterpret_cast<float*>(dOs + kCols * LT);  // (query, key), then staging
  float* dPs = Ss + kCols * kLdScore;
  T* Ps = reinterpret_cast<T*>(dPs + kCols * kLdScore);
  T* dSs = Ps + kCols * kLdProb;
  float* lse_s = reinterpret_cast<float*>(dSs + kCols * kLdProb);
  float* D_s = lse_s + kCols;
  int32_t* qdoc = reinterpret_cast<int32_t*>(D_s + kCols);
  int32_t* kdoc = qdoc + kCols;
  float* stage = Ss;  // (64, LO) fp32 over the S and dP space (static_assert above)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t bi = blockIdx.z, kh = blockIdx.y;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kRows;
  load_rows<T, DP>(Ks, k, bi, j0, kh, D.kv_heads, D);
  load_rows<T, DP>(Vs, v, bi, j0, kh, D.kv_heads, D);
  if (threadIdx.x < kRows) kdoc[threadIdx.x] = doc != nullptr && j0 + threadIdx.x < D.s ? doc[bi * D.s + j0 + threadIdx.x] : 0;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dK[ND], dV[ND];
  for (int n = 0; n < ND; ++n) {
    wmma::fill_fragment(dK[n], 0.0f);
    wmma::fill_fragment(dV[n], 0.0f);
  }
  for (int64_t h = kh * D.group; h < (kh + 1) * D.group; ++h) {
    for (int64_t i0 = j0; i0 < D.s; i0 += kCols) {  // causal: queries i >= j only (blocks aligned: i0 starts at j0)
      __syncthreads();  // the previous tile (and staging) is no longer read
      load_rows<T, DP>(Qs, q, bi, i0, h, D.heads, D);
      load_rows<T, DP>(dOs, dout, bi, i0, h, D.heads, D);
      if (threadIdx.x < kCols) {
        const int64_t i = i0 + threadIdx.x;
        const bool in = i < D.s;
        const int64_t r = (bi * D.heads + h) * D.s + i;
        lse_s[threadIdx.x] = in ? lse[r] : 0.0f;
        D_s[threadIdx.x] = in ? dsum[r] : 0.0f;
        qdoc[threadIdx.x] = doc != nullptr && in ? doc[bi * D.s + i] : 0;
      }
      __syncthreads();
      for (int n = 0; n < kRows / 16; ++n) {  // warp w: query rows 16w.. of S = Q K^T and dP = dO V^T
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_acc, p_acc;
        wmma::fill_fragment(s_acc, 0.0f);
        wmma::fill_fragment(p_acc, 0.0f);
        for (int kk = 0; kk < ND; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
          wmma::load_matrix_sync(fa, Qs + warp * 16 * LT + kk * 16, LT);
          wmma::load_matrix_sync(fb, Ks + n * 16 * LT + kk * 16, LT);
          wmma::mma_sync(s_acc, fa, fb, s_acc);
          wmma::load_matrix_sync(fa, dOs + warp * 16 * LT + kk * 16, LT);
          wmma::load_matrix_sync(fb, Vs + n * 16 * LT + kk * 16, LT);
          wmma::mma_sync(p_acc, fa, fb, p_acc);
        }
        wmma::store_matrix_sync(Ss + warp * 16 * kLdScore + n * 16, s_acc, kLdScore, wmma::mem_row_major);
        wmma::store_matrix_sync(dPs + warp * 16 * kLdScore + n * 16, p_acc, kLdScore, wmma::mem_row_major);
      }
      __syncwarp();
      for (int e = lane; e < 16 * kRows; e += 32) {  // this warp's 16 query rows, lanes across the keys
        const int r = warp * 16 + e / kRows, c = e % kRows;
        const int64_t i = i0 + r, j = j0 + c;
        const bool ok = i < D.s && j < D.s && j <= i && (doc == nullptr || qdoc[r] == kdoc[c]);
        const float p = ok ? expf(Ss[r * kLdScore + c] * D.scale - lse_s[r]) : 0.0f;
        Ps[r * kLdProb + c] = to_t<T>(p);
        dSs[r * kLdProb + c] = to_t<T>(p * (dPs[r * kLdScore + c] - D_s[r]));
      }
      __syncthreads();  // P and dS complete: every warp reads all query rows below
      for (int n = 0; n < ND; ++n) {  // warp w: key rows 16w.. of dV += P^T dO, dK += dS^T Q
        for (int kk = 0; kk < kCols / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
          wmma::load_matrix_sync(fa, Ps + kk * 16 * kLdProb + warp * 16, kLdProb);
          wmma::load_matrix_sync(fb, dOs + kk * 16 * LT + n * 16, LT);
          wmma::mma_sync(dV[n], fa, fb, dV[n]);
          wmma::load_matrix_sync(fa, dSs + kk * 16 * kLdProb + warp * 16, kLdProb);
          wmma::load_matrix_sync(fb, Qs + kk * 16 * LT + n * 16, LT);
          wmma::mma_sync(dK[n], fa, fb, dK[n]);
        }
      }
      for (int n = 0; n < ND; ++n) {  // warp w: query rows 16w.. of dQ += dS K (staged, then added)
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < kRows / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
          wmma::load_matrix_sync(fa, dSs + warp * 16 * kLdProb + kk * 16, kLdProb);
          wmma::load_matrix_sync(fb, Ks + kk * 16 * LT + n * 16, LT);
          wmma::mma_sync(acc, fa, fb, acc);
        }
        // S and dP were last read before the barrier above: their space stages dQ.
        wmma::store_matrix_sync(stage + warp * 16 * LO + n * 16, acc, LO, wmma::mem_row_major);
      }
      __syncwarp();
      for (int e = lane; e < 16 * DP; e += 32) {
        const int r = warp * 16 + e / DP, c = e % DP;
        const int64_t i = i0 + r;
        if (i < D.s && c < D.d) atomicAdd(dq_acc + ((bi * D.s + i) * D.heads + h) * D.d + c, stage[r * LO + c]);
      }
    }
  }
  __syncthreads();
  for (int pass = 0; pass < 2; ++pass) {  // dK (scaled), then dV, through the staging rows of each warp
    for (int n = 0; n < ND; ++n)
      wmma::store_matrix_sync(stage + warp * 16 * LO + n * 16, pass == 0 ? dK[n] : dV[n], LO, wmma::mem_row_major);
    __syncwarp();
    T* dst = pass == 0 ? dk : dv;
    const float mul = pass == 0 ? D.scale : 1.0f;
    for (int e = lane; e < 16 * DP; e += 32) {
      const int r = warp * 16 + e / DP, c = e % DP;
      const int64_t j = j0 + r;
      if (j < D.s && c < D.d) dst[((bi * D.s + j) * D.kv_heads + kh) * D.d + c] = to_t<T>(stage[r * LO + c] * mul);
    }
    __syncwarp();
  }
}

template <class T>
__global__ void dq_cast_kernel(const float* acc, T* dq, float scale, int64_t n) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dq[e] = to_t<T>(acc[e] * scale);
}

template <class S>
constexpr bool kHalf = std::is_same_v<S, bf16_t> || std::is_same_v<S, f16_t>;

// Whether the current device lets a block use `bytes` of shared memory (opt-in): H100/H200
// 227 KiB, A100 163 KiB, but sm_86/89 parts (A10, L40S, RTX 4090) only 99 KiB -- too little
// for head_dim >= 96; those run the SIMT kernels.
bool smem_fits(size_t bytes) {
  int dev = 0, max_optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();  // clear: the caller falls back
    return false;
  }
  return bytes <= static_cast<size_t>(max_optin);
}

// Whole sequences only: context parallel's slices run the SIMT kernels, and so do sliding
// windows (these kernels mask causally).
bool applies(DType st, const AttentionDims& dm) {
  return (st == DType::bf16 || st == DType::f16) && dm.head_dim % 16 == 0 && dm.head_dim <= kFlashMaxHeadDim &&
         whole_sequences(dm) && dm.window <= 0 && value_dim(dm) == dm.head_dim && dm.sinks.empty();
}

template <class T, int DP>
Status forward_dp(CudaContext& ctx, const T* q, const T* k, const T* v, const int32_t* doc, T* o, float* lse,
                  const AttentionDims& dm) {
  const size_t smem = fwd_smem(DP);
  static_assert(fwd_smem(DP) <= 227 * 1024, "shared memory per block");
  cudaFuncSetAttribute(forward_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>((dm.s + kRows - 1) / kRows), static_cast<unsigned>(dm.heads), static_cast<unsigned>(dm.b));
  forward_kernel<T, DP><<<grid, kThreads, smem, ctx.compute_stream()>>>(q, k, v, doc, o, lse, flash_dims(dm));
  return launch_status("flash_forward (tensor cores)");
}

template <class T, int DP>
Status backward_dp(CudaContext& ctx, const T* q, const T* k, const T* v, const int32_t* doc, const float* lse,
                   const T* dout, const float* dsum, float* dq_acc, T* dk, T* dv, const AttentionDims& dm) {
  const size_t smem = bwd_smem(DP);
  static_assert(bwd_smem(DP) <= 227 * 1024, "shared memory per block");
  cudaFuncSetAttribute(backward_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>((dm.s + kRows - 1) / kRows), static_cast<unsigned>(dm.kv_heads),
                  static_cast<unsigned>(dm.b));
  backward_kernel<T, DP><<<grid, kThreads, smem, ctx.compute_stream()>>>(q, k, v, doc, lse, dout, dsum, dq_acc, dk, dv,
                                                                         flash_dims(dm));
  return launch_status("flash_backward (tensor cores)");
}

#define LLMPLAN_TC_DISPATCH(call)                  \
  switch (dm.head_dim) {                           \
    case 16: return call(16);                      \
    case 32: return call(32);                      \
    case 48: return call(48);                      \
    case 64: return call(64);                      \
    case 80: return call(80);                      \
    case 96: return call(96);                      \
    case 112: return call(112);                    \
    default: return call(128);                     \
  }

template <class T>
Status forward(CudaContext& ctx, const T* q, const T* k, const T* v, const int32_t* doc, T* o, float* lse,
               const AttentionDims& dm) {
#define LLMPLAN_FWD(DPV) forward_dp<T, DPV>(ctx, q, k, v, doc, o, lse, dm)
  LLMPLAN_TC_DISPATCH(LLMPLAN_FWD)
#undef LLMPLAN_FWD
}

template <class T>
Status backward(CudaContext& ctx, const T* q, const T* k, const T* v, const int32_t* doc, const T* o,
                const float* lse, const T* dout, T* dq, T* dk, T* dv, const AttentionDims& dm, float* dsum,
                float* dq_acc) {
  const FlashDims D = flash_dims(dm);
  const int64_t rows = dm.b * dm.heads * dm.s;
  rowdot_kernel<T><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, ctx.compute_stream()>>>(dout, o, dsum, D, rows);
  if (Status s = launch_status("flash_backward rowdot"); !s) return s;
  const int64_t nq = dm.b * dm.s * dm.heads * dm.head_dim;
  if (cudaError_t e = cudaMemsetAsync(dq_acc, 0, static_cast<size_t>(nq) * 4, ctx.compute_stream()); e != cudaSuccess)
    return cuda_status(e, "flash_backward dq zero");
  Status st = Status::ok();
#define LLMPLAN_BWD(DPV) backward_dp<T, DPV>(ctx, q, k, v, doc, lse, dout, dsum, dq_acc, dk, dv, dm)
  st = [&]() -> Status { LLMPLAN_TC_DISPATCH(LLMPLAN_BWD) }();
#undef LLMPLAN_BWD
  if (!st) return st;
  const int64_t blocks = std::min<int64_t>((nq + 255) / 256, int64_t{4096});
  dq_cast_kernel<T><<<static_cast<unsigned>(blocks), 256, 0, ctx.compute_stream()>>>(dq_acc, dq, D.scale, nq);
  return launch_status("flash_backward dq cast");
}
#undef LLMPLAN_TC_DISPATCH
}  // namespace tc

}  // namespace

int64_t attention_workspace_bytes(DType st, const AttentionDims& dm, bool flash) {
  if (flash) {
    const int64_t dsum = carved(std::max<int64_t>(1, dm.b * dm.heads * query_rows(dm)) * 4);
    // Tensor-core path: dQ is summed over key blocks in an fp32 buffer.
    return tc::applies(st, dm) ? dsum + carved(dm.b * dm.s * dm.heads * dm.head_dim * 4) : dsum;
  }
  return st == DType::f32 ? materialized_bytes<float>(dm) : materialized_bytes<bf16_t>(dm);  // f16: as bf16
}

template <class S>
Status attention_forward_materialized(CudaContext& ctx, const S* q, const S* k, const S* v, const int32_t* doc,
                                      S* o, S* probs, const AttentionDims& dm, std::span<std::byte> ws, const float* sinks) {
  if (Status st = check_dims(dm); !st) return st;
  if (Status st = check_sinks(dm, sinks); !st) return st;
  if (dm.sinks.empty()) sinks = nullptr;
  if (!whole_sequences(dm)) return materialized_takes_whole_sequences();
  const int64_t b = dm.b, s = dm.s, H = dm.heads, KV = dm.kv_heads, d = dm.head_dim, dv = value_dim(dm), g = H / KV;
  if (b * s == 0) return Status::ok();
  DeviceCarver c(ws);
  S* Qh = c.take<S>(b * H * s * d);
  S* Kh = c.take<S>(b * KV * s * d);
  S* Vh = c.take<S>(b * KV * s * dv);
  S* Oh = c.take<S>(b * H * s * dv);
  float* scores = c.take<float>(b * H * s * s);
  if (!c.ok()) return Status::bad_input("attention: workspace smaller than attention_workspace_bytes()");
  if (Status st = to_head_major(ctx, q, Qh, b, s, H, d); !st) return st;
  if (Status st = to_head_major(ctx, k, Kh, b, s, KV, d); !st) return st;
  if (Status st = to_head_major(ctx, v, Vh, b, s, KV, dv); !st) return st;
  // scores (g s, s) = scale Q_group K^T, per (sequence, kv head)
  if (Status st = group_gemm(ctx, false, true, g * s, s, d, score_scale(dm), Qh, d, g * s * d, Kh, d, s * d, scores,
                             DType::f32, s, g * s * s, b * KV);
      !st)
    return st;
  softmax_forward_kernel<<<static_cast<unsigned>(b * H * s), kSoftmaxThreads, 0, ctx.compute_stream()>>>(
      scores, probs, doc, s, H, dm.window, sinks);
  if (Status st = launch_status("softmax_forward_kernel"); !st) return st;
  // O_group (g s, dv) = P_group (g s, s) V (s, dv)
  if (Status st = group_gemm(ctx, false, false, g * s, dv, s, 1.0f, probs, s, g * s * s, Vh, dv, s * dv, Oh,
                             dtype_of<S>, dv, g * s * dv, b * KV);
      !st)
    return st;
  return from_head_major(ctx, Oh, o, b, s, H, dv);
}

template <class S>
Status attention_backward_materialized(CudaContext& ctx, const S* q, const S* k, const S* v, const S* probs,
                                       const S* dout, S* dq, S* dk, S* dv_out, const AttentionDims& dm,
                                       std::span<std::byte> ws) {
  if (Status st = check_dims(dm); !st) return st;
  if (!whole_sequences(dm)) return materialized_takes_whole_sequences();
  const int64_t b = dm.b, s = dm.s, H = dm.heads, KV = dm.kv_heads, d = dm.head_dim, dv = value_dim(dm), g = H / KV;
  if (b * s == 0) return Status::ok();
  const float scale = score_scale(dm);
  DeviceCarver c(ws);
  S* Qh = c.take<S>(b * H * s * d);
  S* dOh = c.take<S>(b * H * s * dv);
  S* dQh = c.take<S>(b * H * s * d);
  S* Kh = c.take<S>(b * KV * s * d);
  S* Vh = c.take<S>(b * KV * s * dv);
  S* dKh = c.take<S>(b * KV * s * d);
  S* dVh = c.take<S>(b * KV * s * dv);
  float* dP = c.take<float>(b * H * s * s);
  S* dS = c.take<S>(b * H * s * s);
  if (!c.ok()) return Status::bad_input("attention: workspace smaller than attention_workspace_bytes()");
  if (Status st = to_head_major(ctx, q, Qh, b, s, H, d); !st) return st;
  if (Status st = to_head_major(ctx, dout, dOh, b, s, H, dv); !st) return st;
  if (Status st = to_head_major(ctx, k, Kh, b, s, KV, d); !st) return st;
  if (Status st = to_head_major(ctx, v, Vh, b, s, KV, dv); !st) return st;
  // dP (g s, s) = dO_group V^T
  if (Status st = group_gemm(ctx, false, true, g * s, s, dv, 1.0f, dOh, dv, g * s * dv, Vh, dv, s * dv, dP, DType::f32,
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
  if (Status st = group_gemm(ctx, true, false, s, dv, g * s, 1.0f, probs, s, g * s * s, dOh, dv, g * s * dv, dVh, t, dv,
                             s * dv, b * KV);
      !st)
    return st;
  if (Status st = from_head_major(ctx, dQh, dq, b, s, H, d); !st) return st;
  if (Status st = from_head_major(ctx, dKh, dk, b, s, KV, d); !st) return st;
  return from_head_major(ctx, dVh, dv_out, b, s, KV, dv);
}

template <class S>
Status attention_forward_flash(CudaContext& ctx, const S* q, const S* k, const S* v, const int32_t* doc, S* o,
                               float* lse, const AttentionDims& dm, std::span<std::byte> /*ws*/, const float* sinks) {
  if (Status st = check_flash(dm); !st) return st;
  if (Status st = check_sinks(dm, sinks); !st) return st;
  if (dm.b * dm.s == 0) return Status::ok();
  if constexpr (tc::kHalf<S>) {
    if (tc::applies(dtype_of<S>, dm) && tc::smem_fits(tc::fwd_smem(static_cast<int>(dm.head_dim)))) {
      using T = typename tc::Wmma<S>::T;
      return tc::forward<T>(ctx, reinterpret_cast<const T*>(q), reinterpret_cast<const T*>(k),
                            reinterpret_cast<const T*>(v), doc, reinterpret_cast<T*>(o), lse, dm);
    }
  }
  FlashDims D = flash_dims(dm);
  D.sinks = dm.sinks.empty() ? nullptr : sinks;
  flash_forward_kernel<<<flash_grid(dm, query_rows(dm), dm.heads), kWarps * 32, 0, ctx.compute_stream()>>>(
      q, k, v, doc, o, lse, D);
  return launch_status("flash_forward_kernel");
}

template <class S>
Status attention_backward_flash(CudaContext& ctx, const S* q, const S* k, const S* v, const int32_t* doc,
                                const S* o, const float* lse, const S* dout, S* dq, S* dk, S* dv,
                                const AttentionDims& dm, std::span<std::byte> ws) {
  if (Status st = check_flash(dm); !st) return st;
  if (dm.b * dm.s == 0) return Status::ok();
  DeviceCarver c(ws);
  float* dsum = c.take<float>(dm.b * dm.heads * query_rows(dm));
  if (!c.ok()) return Status::bad_input("attention: workspace smaller than attention_workspace_bytes()");
  if constexpr (tc::kHalf<S>) {
    if (tc::applies(dtype_of<S>, dm) && tc::smem_fits(tc::bwd_smem(static_cast<int>(dm.head_dim)))) {
      float* dq_acc = c.take<float>(dm.b * dm.s * dm.heads * dm.head_dim);
      if (!c.ok()) return Status::bad_input("attention: workspace smaller than attention_workspace_bytes()");
      using T = typename tc::Wmma<S>::T;
      return tc::backward<T>(ctx, reinterpret_cast<const T*>(q), reinterpret_cast<const T*>(k),
                             reinterpret_cast<const T*>(v), doc, reinterpret_cast<const T*>(o), lse,
                             reinterpret_cast<const T*>(dout), reinterpret_cast<T*>(dq), reinterpret_cast<T*>(dk),
                             reinterpret_cast<T*>(dv), dm, dsum, dq_acc);
    }
  }
  const FlashDims D = flash_dims(dm);
  flash_backward_dq_kernel<<<flash_grid(dm, D.sq, dm.heads), kWarps * 32, 0, ctx.compute_stream()>>>(
      q, k, v, doc, o, lse, dout, dq, dsum, D);
  if (Status st = launch_status("flash_backward_dq_kernel"); !st) return st;
  flash_backward_dkv_kernel<<<flash_grid(dm, D.sk, dm.kv_heads), kWarps * 32, 0, ctx.compute_stream()>>>(
      q, k, v, doc, lse, dout, dsum, dk, dv, D);
  return launch_status("flash_backward_dkv_kernel");
}

template <class S>
Status attention_merge_partial(CudaContext& ctx, S* o, float* lse, const S* o_part, const float* lse_part,
                               const AttentionDims& dm) {
  if (Status st = check_dims(dm); !st) return st;
  const int64_t sq = query_rows(dm), d = value_dim(dm), H = dm.heads;
  return for_each_index(ctx, dm.b * H * sq, [=] __device__(int64_t r) {  // r: (b, heads, sq) as lse
    const float lp = lse_part[r];
    if (lp == -INFINITY) return;  // the partial saw no key of this row
    const int64_t i = r % sq, h = (r / sq) % H, bi = r / (sq * H);
    const float l = lse[r], mx = fmaxf(l, lp);
    const float w = expf(l - mx), wp = expf(lp - mx), sum = w + wp;
    const int64_t at = ((bi * sq + i) * H + h) * d;
    for (int64_t c = 0; c < d; ++c) o[at + c] = store<S>((load(o[at + c]) * w + load(o_part[at + c]) * wp) / sum);
    lse[r] = mx + logf(sum);
  }, "attention_merge_partial");
}

// One block per head: -sum over the (b, sq) rows of p_sink D (cpu::attention_sink_backward),
// added into gs[h] by thread 0 once the block's sum is made (a fixed order: deterministic).
template <class S, class G>
__global__ void sink_backward_kernel(const S* o, const S* dout, const float* lse, const S* probs, const float* sinks, G* gs,
                                     int64_t b, int64_t sq, int64_t heads, int64_t dv, int64_t keys) {
  const int64_t h = blockIdx.x;
  float acc = 0;
  for (int64_t r = threadIdx.x; r < b * sq; r += blockDim.x) {
    const int64_t bi = r / sq, i = r % sq;
    const int64_t at = ((bi * sq + i) * heads + h) * dv, row = (bi * heads + h) * sq + i;
    float D = 0;
    for (int64_t c = 0; c < dv; ++c) D += load(dout[at + c]) * load(o[at + c]);
    float p;
    if (lse != nullptr) {
      p = lse[row] == -INFINITY ? 0.0f : expf(sinks[h] - lse[row]);
    } else {
      float kept = 0;
      for (int64_t j = 0; j < keys; ++j) kept += load(probs[row * keys + j]);
      p = 1.0f - kept;
    }
    acc -= p * D;
  }
  const float total = block_sum(acc);
  if (threadIdx.x == 0) gs[h] = store<G>(load(gs[h]) + total);
}

template <class S, class G>
Status attention_sink_backward(CudaContext& ctx, const S* o, const S* dout, const float* lse, const S* probs,
                               const AttentionDims& dm, const float* sinks, G* gsinks) {
  if (Status st = check_dims(dm); !st) return st;
  if ((lse == nullptr) == (probs == nullptr))
    return Status::bad_input("attention (cuda): the sinks' gradient reads the flash lse or the probabilities, one of them");
  if (lse != nullptr && sinks == nullptr) return Status::bad_input("attention (cuda): the sinks' gradient from lse needs their logits");
  if (dm.b * query_rows(dm) == 0) return Status::ok();
  sink_backward_kernel<S, G><<<static_cast<unsigned>(dm.heads), kSoftmaxThreads, 0, ctx.compute_stream()>>>(
      o, dout, lse, probs, sinks, gsinks, dm.b, query_rows(dm), dm.heads, value_dim(dm), dm.s);
  return launch_status("sink_backward_kernel");
}

#define INST(S)                                                                                              \
  template Status attention_forward_materialized<S>(CudaContext&, const S*, const S*, const S*, const int32_t*, \
                                                    S*, S*, const AttentionDims&, std::span<std::byte>,      \
                                                    const float*);                                           \
  template Status attention_backward_materialized<S>(CudaContext&, const S*, const S*, const S*, const S*,    \
                                                     const S*, S*, S*, S*, const AttentionDims&,             \
                                                     std::span<std::byte>);                                  \
  template Status attention_forward_flash<S>(CudaContext&, const S*, const S*, const S*, const int32_t*, S*, \
                                             float*, const AttentionDims&, std::span<std::byte>,             \
                                             const float*);                                                  \
  template Status attention_backward_flash<S>(CudaContext&, const S*, const S*, const S*, const int32_t*,    \
                                              const S*, const float*, const S*, S*, S*, S*,                  \
                                              const AttentionDims&, std::span<std::byte>);                   \
  template Status attention_merge_partial<S>(CudaContext&, S*, float*, const S*, const float*,               \
                                             const AttentionDims&);
LLMPLAN_CUDA_FOR_STORAGE(INST)
#undef INST
#define INSTG(S, G)                                                                                                \
  template Status attention_sink_backward<S, G>(CudaContext&, const S*, const S*, const float*, const S*,         \
                                                const AttentionDims&, const float*, G*);
LLMPLAN_CUDA_FOR_STORAGE_GRAD(INSTG)
#undef INSTG

}  // namespace llmplan::exec::cuda
