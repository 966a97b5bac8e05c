#include "executor/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "executor/cpu/attention_util.h"
#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::Carver;
using detail::carved_bytes;
using detail::exp_acc;
using detail::exp_shifted;
using detail::gather;
using detail::gemm;
using detail::group;
using detail::HeadView;
using detail::load;
using detail::Mask;
using detail::max_of;
using detail::scatter;
using detail::score_scale;
using detail::store;

namespace {
template <class A>
void zero(A* p, int64_t n) {
  std::fill(p, p + n, A(0));
}

// Scores row (cols) of query i against keys j0 .. j0 + cols - 1: -inf where not allowed,
// so that e^(score - max) is 0 there.
template <class A>
void mask_row(A* row, int64_t i, int64_t j0, int64_t cols, const Mask& mask) {
  const A neg_inf = -std::numeric_limits<A>::infinity();
  for (int64_t c = 0; c < cols; ++c) row[c] = mask.allowed(i, j0 + c) ? row[c] : neg_inf;
}

int64_t tile(const AttentionDims& dm) { return std::max<int64_t>(1, std::min(dm.block, dm.s)); }

// Keys any query of the slice may see: causal, none past the last query's position.
int64_t key_rows(const AttentionDims& dm) { return std::min(dm.s, query_position(dm, query_rows(dm) - 1) + 1); }

// The key rows held (flash): one or two chunks of contiguous positions.
struct KeyChunk {
  int64_t row, rows, position;  // first row in k / v, row count, sequence position of that row
};
int key_chunks(const AttentionDims& dm, KeyChunk (&out)[2]) {
  if (dm.k_rows <= 0) {
    out[0] = {0, key_rows(dm), 0};
    return 1;
  }
  if (dm.k_split <= 0 || dm.k_split >= dm.k_rows) {
    out[0] = {0, dm.k_rows, dm.k_offset};
    return 1;
  }
  out[0] = {0, dm.k_split, dm.k_offset};
  out[1] = {dm.k_split, dm.k_rows - dm.k_split, dm.k_offset_hi};
  return 2;
}

// Calls f(row, position, cols) for every tile of at most B key rows that a query tile whose
// positions run from `first` to `last` may see (causal; from first_key(first) on under a
// window: the tiles wholly before it are skipped, as FlashAttention-2's window_size does),
// chunk by chunk.
template <class F>
void for_key_tiles(const KeyChunk* chunks, int n, int64_t first, int64_t last, int64_t B, const Mask& mask, F&& f) {
  const int64_t lo = mask.first_key(first);
  for (int c = 0; c < n; ++c) {
    const KeyChunk& k = chunks[c];
    const int64_t visible = std::min(k.rows, last - k.position + 1);
    for (int64_t j0 = 0; j0 < visible; j0 += B) {
      const int64_t cols = std::min(B, visible - j0);
      if (k.position + j0 + cols <= lo) continue;  // every key of the tile is before the window
      f(k.row + j0, k.position + j0, cols);
    }
  }
}

template <class A>
int64_t workspace_bytes(const AttentionDims& dm, bool flash) {
  const int64_t sq = query_rows(dm), kr = flash ? key_rows_held(dm) : dm.s;
  // Key-side and query-side panels of width d (K, Q and their gradients) and of width dv
  // (V, O, dO and dV).
  const int64_t kd = carved_bytes<A>(kr * dm.head_dim), qd = carved_bytes<A>(sq * dm.head_dim);
  const int64_t kv = carved_bytes<A>(kr * value_dim(dm)), qv = carved_bytes<A>(sq * value_dim(dm));
  if (flash) {
    const int64_t t = carved_bytes<A>(tile(dm) * tile(dm));
    const int64_t fwd = kd + kv + qd + qv + t + 2 * carved_bytes<A>(sq);               // K V, Q O, a tile, m and l
    const int64_t bwd = 2 * kd + 2 * kv + 2 * qd + qv + 2 * t + carved_bytes<A>(sq);  // K V dK dV, Q dO dQ, P dP, D
    return std::max(fwd, bwd);
  }
  const int64_t ss = carved_bytes<A>(sq * dm.s);
  return std::max(kd + kv + qd + qv + ss, 2 * kd + 2 * kv + 2 * qd + qv + 2 * ss);  // K V Q O P; backward: K V dK dV Q dO dQ P dP
}
}  // namespace

int64_t attention_workspace_bytes(DType st, const AttentionDims& dm, bool flash) {
  return st == DType::f64 ? workspace_bytes<double>(dm, flash) : workspace_bytes<float>(dm, flash);
}

// ---------------------------------------------------------------- materialized

// Scores are (sq, s) with leading dimension s; only the first kl columns are computed (the
// rest are masked for every query of the slice) and stored as 0.
template <class S>
void attention_forward_materialized(const S* q, const S* k, const S* v, const int32_t* doc, S* o,
                                    S* probs, const AttentionDims& dm, std::span<std::byte> ws) {
  using A = acc_t<S>;
  const int64_t s = dm.s, sq = query_rows(dm), kl = key_rows(dm), d = dm.head_dim, vd = value_dim(dm), g = group(dm);
  const A scale = score_scale<A>(dm);
  Carver c(ws);
  A* K = c.take<A>(s * d);
  A* V = c.take<A>(s * vd);
  A* Q = c.take<A>(sq * d);
  A* O = c.take<A>(sq * vd);
  A* P = c.take<A>(sq * s);
  for (int64_t bi = 0; bi < dm.b; ++bi) {
    const Mask mask{doc != nullptr ? doc + bi * s : nullptr, dm.window};
    for (int64_t kh = 0; kh < dm.kv_heads; ++kh) {
      gather(k, K, HeadView{bi, kh, dm.kv_heads, s, d});
      gather(v, V, HeadView{bi, kh, dm.kv_heads, s, vd});
      for (int64_t h = kh * g; h < (kh + 1) * g; ++h) {
        const HeadView qv{bi, h, dm.heads, sq, d}, ov{bi, h, dm.heads, sq, vd};
        gather(q, Q, qv);
        gemm(false, true, sq, kl, d, scale, Q, d, K, d, A(0), P, s);  // P (sq, kl) = scale Q K^T
        S* probs_h = probs + (bi * dm.heads + h) * sq * s;
        for (int64_t i = 0; i < sq; ++i) {  // row softmax over the allowed keys (and the sink)
          const int64_t gi = query_position(dm, i);
          A* row = P + i * s;
          mask_row(row, gi, 0, kl, mask);
          const A sum = detail::exp_row_with_sink(row, kl, gi + 1, dm, h);  // keys after gi are masked
          const A inv = A(1) / sum;
          for (int64_t j = 0; j < kl; ++j) {
            row[j] *= inv;
            probs_h[i * s + j] = store<S>(row[j]);
          }
          for (int64_t j = kl; j < s; ++j) probs_h[i * s + j] = store<S>(A(0));
        }
        gemm(false, false, sq, vd, kl, A(1), P, s, V, vd, A(0), O, vd);  // O (sq, vd) = P V
        scatter(O, o, ov);
      }
    }
  }
}

// dP = dO V^T;  dS = P (dP - rowsum(P dP));  dQ = scale dS K;  dK += scale dS^T Q;  dV += P^T dO.
template <class S>
void attention_backward_materialized(const S* q, const S* k, const S* v, const S* probs,
                                     const S* dout, S* dq, S* dk, S* dv, const AttentionDims& dm,
                                     std::span<std::byte> ws) {
  using A = acc_t<S>;
  const int64_t s = dm.s, sq = query_rows(dm), kl = key_rows(dm), d = dm.head_dim, vd = value_dim(dm), g = group(dm);
  const A scale = score_scale<A>(dm);
  Carver c(ws);
  A* K = c.take<A>(s * d);
  A* V = c.take<A>(s * vd);
  A* dK = c.take<A>(s * d);
  A* dV = c.take<A>(s * vd);
  A* Q = c.take<A>(sq * d);
  A* dO = c.take<A>(sq * vd);
  A* dQ = c.take<A>(sq * d);
  A* P = c.take<A>(sq * s);
  A* dP = c.take<A>(sq * s);
  for (int64_t bi = 0; bi < dm.b; ++bi) {
    for (int64_t kh = 0; kh < dm.kv_heads; ++kh) {
      const HeadView kview{bi, kh, dm.kv_heads, s, d}, vview{bi, kh, dm.kv_heads, s, vd};
      gather(k, K, kview);
      gather(v, V, vview);
      zero(dK, s * d);
      zero(dV, s * vd);
      for (int64_t h = kh * g; h < (kh + 1) * g; ++h) {
        const HeadView qv{bi, h, dm.heads, sq, d};
        gather(q, Q, qv);
        gather(dout, dO, HeadView{bi, h, dm.heads, sq, vd});
        const S* probs_h = probs + (bi * dm.heads + h) * sq * s;
        for (int64_t i = 0; i < sq; ++i)
          for (int64_t j = 0; j < kl; ++j) P[i * s + j] = load(probs_h[i * s + j]);
        gemm(false, true, sq, kl, vd, A(1), dO, vd, V, vd, A(0), dP, s);  // dP (sq, kl) = dO V^T
        for (int64_t i = 0; i < sq; ++i) {
          A D = 0;
          for (int64_t j = 0; j < kl; ++j) D += P[i * s + j] * dP[i * s + j];
          for (int64_t j = 0; j < kl; ++j) dP[i * s + j] = P[i * s + j] * (dP[i * s + j] - D);  // dS
        }
        gemm(false, false, sq, d, kl, scale, dP, s, K, d, A(0), dQ, d);  // dQ = scale dS K
        gemm(true, false, kl, d, sq, scale, dP, s, Q, d, A(1), dK, d);   // dK += scale dS^T Q
        gemm(true, false, kl, vd, sq, A(1), P, s, dO, vd, A(1), dV, vd);  // dV += P^T dO
        scatter(dQ, dq, qv);
      }
      scatter(dK, dk, kview);
      scatter(dV, dv, vview);
    }
  }
}

// ---------------------------------------------------------------- flash

// Online softmax over key tiles (Dao et al. 2022, FlashAttention, Algorithm 1), per row i:
// m = running max, l = running sum of exp(score - m), O = running sum of exp(score - m) v.
template <class S>
void attention_forward_flash(const S* q, const S* k, const S* v, const int32_t* doc, S* o,
                             acc_t<S>* lse, const AttentionDims& dm, std::span<std::byte> ws) {
  using A = acc_t<S>;
  const int64_t s = dm.s, sq = query_rows(dm), kr = key_rows_held(dm), d = dm.head_dim, vd = value_dim(dm), g = group(dm), B = tile(dm);
  KeyChunk chunks[2];
  const int nchunks = key_chunks(dm, chunks);
  const A scale = score_scale<A>(dm);
  const A neg_inf = -std::numeric_limits<A>::infinity();
  Carver c(ws);
  A* K = c.take<A>(kr * d);
  A* V = c.take<A>(kr * vd);
  A* Q = c.take<A>(sq * d);
  A* O = c.take<A>(sq * vd);
  A* T = c.take<A>(B * B);  // scores, then probabilities, of one tile (rows, cols), ld B
  A* m = c.take<A>(sq);
  A* l = c.take<A>(sq);
  for (int64_t bi = 0; bi < dm.b; ++bi) {
    const Mask mask{doc != nullptr ? doc + bi * s : nullptr, dm.window};
    for (int64_t kh = 0; kh < dm.kv_heads; ++kh) {
      gather(k, K, HeadView{bi, kh, dm.kv_heads, kr, d});
      gather(v, V, HeadView{bi, kh, dm.kv_heads, kr, vd});
      for (int64_t h = kh * g; h < (kh + 1) * g; ++h) {
        gather(q, Q, HeadView{bi, h, dm.heads, sq, d});
        zero(O, sq * vd);
        if (dm.sinks.empty()) {
          std::fill(m, m + sq, neg_inf);
          zero(l, sq);
        } else {  // the sink as a first key of value 0: m = sink, l = e^0
          std::fill(m, m + sq, static_cast<A>(dm.sinks[static_cast<size_t>(h)]));
          std::fill(l, l + sq, A(1));
        }
        for (int64_t i0 = 0; i0 < sq; i0 += B) {
          const int64_t rows = std::min(B, sq - i0), first = query_position(dm, i0), last = query_position(dm, i0 + rows - 1);
          for_key_tiles(chunks, nchunks, first, last, B, mask, [&](int64_t j0, int64_t pos, int64_t cols) {  // causal: left of the diagonal
            gemm(false, true, rows, cols, d, scale, Q + i0 * d, d, K + j0 * d, d, A(0), T, B);
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t i = i0 + r;
              A* t = T + r * B;
              mask_row(t, query_position(dm, i), pos, cols, mask);
              const A mx = max_of(t, cols);
              if (mx == neg_inf) {  // no allowed key in this tile: contributes nothing
                std::fill(t, t + cols, A(0));
                continue;
              }
              const A m_new = std::max(m[i], mx);
              const A corr = exp_acc(m[i] - m_new);  // 0 while m[i] is still -inf
              l[i] = l[i] * corr + exp_shifted(t, cols, m_new);
              m[i] = m_new;
              for (int64_t cc = 0; cc < vd; ++cc) O[i * vd + cc] *= corr;
            }
            gemm(false, false, rows, vd, cols, A(1), T, B, V + j0 * vd, vd, A(1), O + i0 * vd, vd);
          });
        }
        A* lse_h = lse + (bi * dm.heads + h) * sq;
        for (int64_t i = 0; i < sq; ++i) {
          if (!(l[i] > 0)) {  // no allowed key among those held (a ring step's partial)
            lse_h[i] = neg_inf;
            continue;  // O's row is still 0
          }
          for (int64_t cc = 0; cc < vd; ++cc) O[i * vd + cc] /= l[i];
          lse_h[i] = m[i] + std::log(l[i]);
        }
        scatter(O, o, HeadView{bi, h, dm.heads, sq, vd});
      }
    }
  }
}

// Per tile: P = exp(scale Q K^T - lse) on allowed entries, dP = dO V^T, dS = P (dP - D),
// D_i = dO_i . O_i;  dQ += scale dS K,  dK += scale dS^T Q,  dV += P^T dO (FlashAttention-2
// backward, Dao 2023, Algorithm 2).
template <class S>
void attention_backward_flash(const S* q, const S* k, const S* v, const int32_t* doc, const S* o,
                              const acc_t<S>* lse, const S* dout, S* dq, S* dk, S* dv,
                              const AttentionDims& dm, std::span<std::byte> ws) {
  using A = acc_t<S>;
  const int64_t s = dm.s, sq = query_rows(dm), kr = key_rows_held(dm), d = dm.head_dim, vd = value_dim(dm), g = group(dm), B = tile(dm);
  KeyChunk chunks[2];
  const int nchunks = key_chunks(dm, chunks);
  const A scale = score_scale<A>(dm);
  Carver c(ws);
  A* K = c.take<A>(kr * d);
  A* V = c.take<A>(kr * vd);
  A* dK = c.take<A>(kr * d);
  A* dV = c.take<A>(kr * vd);
  A* Q = c.take<A>(sq * d);
  A* dO = c.take<A>(sq * vd);
  A* dQ = c.take<A>(sq * d);
  A* P = c.take<A>(B * B);   // tile (rows, cols), ld B
  A* dP = c.take<A>(B * B);  // tile, then dS
  A* D = c.take<A>(sq);
  for (int64_t bi = 0; bi < dm.b; ++bi) {
    const Mask mask{doc != nullptr ? doc + bi * s : nullptr, dm.window};
    for (int64_t kh = 0; kh < dm.kv_heads; ++kh) {
      const HeadView kview{bi, kh, dm.kv_heads, kr, d}, vview{bi, kh, dm.kv_heads, kr, vd};
      gather(k, K, kview);
      gather(v, V, vview);
      zero(dK, kr * d);
      zero(dV, kr * vd);
      for (int64_t h = kh * g; h < (kh + 1) * g; ++h) {
        const HeadView qv{bi, h, dm.heads, sq, d}, ov{bi, h, dm.heads, sq, vd};
        gather(q, Q, qv);
        gather(dout, dO, ov);
        for (int64_t i = 0; i < sq; ++i) {
          A acc = 0;
          for (int64_t cc = 0; cc < vd; ++cc) acc += dO[i * vd + cc] * load(o[ov.at(i) + cc]);
          D[i] = acc;
        }
        zero(dQ, sq * d);
        const A* lse_h = lse + (bi * dm.heads + h) * sq;
        for (int64_t i0 = 0; i0 < sq; i0 += B) {
          const int64_t rows = std::min(B, sq - i0), first = query_position(dm, i0), last = query_position(dm, i0 + rows - 1);
          for_key_tiles(chunks, nchunks, first, last, B, mask, [&](int64_t j0, int64_t pos, int64_t cols) {
            gemm(false, true, rows, cols, d, scale, Q + i0 * d, d, K + j0 * d, d, A(0), P, B);
            gemm(false, true, rows, cols, vd, A(1), dO + i0 * vd, vd, V + j0 * vd, vd, A(0), dP, B);
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t i = i0 + r;
              A* p = P + r * B;
              A* dp = dP + r * B;
              mask_row(p, query_position(dm, i), pos, cols, mask);
              for (int64_t cc = 0; cc < cols; ++cc) {
                p[cc] = exp_acc(p[cc] - lse_h[i]);  // 0 where masked
                dp[cc] = p[cc] * (dp[cc] - D[i]);
              }
            }
            gemm(false, false, rows, d, cols, scale, dP, B, K + j0 * d, d, A(1), dQ + i0 * d, d);
            gemm(true, false, cols, d, rows, scale, dP, B, Q + i0 * d, d, A(1), dK + j0 * d, d);
            gemm(true, false, cols, vd, rows, A(1), P, B, dO + i0 * vd, vd, A(1), dV + j0 * vd, vd);
          });
        }
        scatter(dQ, dq, qv);
      }
      scatter(dK, dk, kview);
      scatter(dV, dv, vview);
    }
  }
}

template <class S>
void attention_sink_backward(const S* o, const S* dout, const acc_t<S>* lse, const S* probs, const AttentionDims& dm,
                             double* dsinks) {
  const int64_t sq = query_rows(dm), d = value_dim(dm), s = dm.s;
  for (int64_t bi = 0; bi < dm.b; ++bi)
    for (int64_t h = 0; h < dm.heads; ++h) {
      const double sink = dm.sinks[static_cast<size_t>(h)];
      double acc = 0;
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t at = ((bi * sq + i) * dm.heads + h) * d;
        double D = 0;
        for (int64_t c = 0; c < d; ++c) D += static_cast<double>(load(dout[at + c])) * static_cast<double>(load(o[at + c]));
        double p_sink;
        if (lse != nullptr) {
          p_sink = std::exp(sink - static_cast<double>(lse[(bi * dm.heads + h) * sq + i]));
        } else {
          const S* row = probs + ((bi * dm.heads + h) * sq + i) * s;
          double sum = 0;
          for (int64_t j = 0; j < s; ++j) sum += static_cast<double>(load(row[j]));
          p_sink = 1 - sum;
        }
        acc += p_sink * D;
      }
      dsinks[h] -= acc;
    }
}

template <class S>
void attention_merge_partial(S* o, acc_t<S>* lse, const S* o_part, const acc_t<S>* lse_part, const AttentionDims& dm) {
  using A = acc_t<S>;
  const int64_t sq = query_rows(dm), d = value_dim(dm);
  for (int64_t bi = 0; bi < dm.b; ++bi)
    for (int64_t h = 0; h < dm.heads; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        A& l = lse[(bi * dm.heads + h) * sq + i];
        const A lp = lse_part[(bi * dm.heads + h) * sq + i];
        if (lp == -std::numeric_limits<A>::infinity()) continue;  // the partial saw no key of this row
        const A mx = std::max(l, lp);
        const A w = exp_acc(l - mx), wp = exp_acc(lp - mx), sum = w + wp;
        const int64_t at = ((bi * sq + i) * dm.heads + h) * d;
        for (int64_t cc = 0; cc < d; ++cc) o[at + cc] = store<S>((load(o[at + cc]) * w + load(o_part[at + cc]) * wp) / sum);
        l = mx + std::log(sum);
      }
}

#define INST(S)                                                                                 \
  template void attention_forward_materialized<S>(const S*, const S*, const S*, const int32_t*, \
                                                  S*, S*, const AttentionDims&,                 \
                                                  std::span<std::byte>);                        \
  template void attention_backward_materialized<S>(const S*, const S*, const S*, const S*,      \
                                                   const S*, S*, S*, S*, const AttentionDims&,  \
                                                   std::span<std::byte>);                       \
  template void attention_forward_flash<S>(const S*, const S*, const S*, const int32_t*, S*,    \
                                           acc_t<S>*, const AttentionDims&,                     \
                                           std::span<std::byte>);                               \
  template void attention_backward_flash<S>(const S*, const S*, const S*, const int32_t*,       \
                                            const S*, const acc_t<S>*, const S*, S*, S*, S*,    \
                                            const AttentionDims&, std::span<std::byte>);         \
  template void attention_merge_partial<S>(S*, acc_t<S>*, const S*, const acc_t<S>*, const AttentionDims&);          \
  template void attention_sink_backward<S>(const S*, const S*, const acc_t<S>*, const S*, const AttentionDims&, double*);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cpu
