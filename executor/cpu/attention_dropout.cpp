#include "executor/cpu/attention_dropout.h"

#include <cmath>
#include <limits>

#include "executor/cpu/attention_util.h"
#include "executor/cpu/dropout.h"
#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::Carver;
using detail::carved_bytes;
using detail::gather;
using detail::gemm;
using detail::group;
using detail::HeadView;
using detail::load;
using detail::scatter;
using detail::score_scale;
using detail::store;

namespace {
template <class A>
int64_t ws_bytes(const AttentionDims& dm) {
  const int64_t sq = query_rows(dm);
  const int64_t vd = value_dim(dm);  // K dK Q dQ of width d; V dV O|dO of width dv
  return 2 * carved_bytes<A>(dm.s * dm.head_dim) + 2 * carved_bytes<A>(dm.s * vd) + 2 * carved_bytes<A>(sq * dm.head_dim) +
         carved_bytes<A>(sq * vd) + 3 * carved_bytes<A>(sq * dm.s);
}
}  // namespace

int64_t attention_dropout_workspace_bytes(DType st, const AttentionDims& dm) {
  return st == DType::f64 ? ws_bytes<double>(dm) : ws_bytes<float>(dm);
}

// Scores are (sq, s), ld s, over all s keys (the dropout draw is per element of the whole
// sequence's probs, so masked keys are kept as zeros rather than skipped).
template <class S>
void attention_forward_dropout(const S* q, const S* k, const S* v, const int32_t* doc, S* o, S* probs,
                               uint8_t* mask, S* dropped, const AttentionDims& dm, double p, uint64_t seed,
                               std::span<std::byte> ws) {
  using A = acc_t<S>;
  const int64_t s = dm.s, sq = query_rows(dm), d = dm.head_dim, vd = value_dim(dm), g = group(dm);
  const A scale = score_scale<A>(dm);
  const A keep_scale = static_cast<A>(1.0 / (1.0 - p));
  const A neg_inf = -std::numeric_limits<A>::infinity();
  Carver c(ws);
  A* K = c.take<A>(s * d);
  A* V = c.take<A>(s * vd);
  A* Q = c.take<A>(sq * d);
  A* O = c.take<A>(sq * vd);
  A* P = c.take<A>(sq * s);
  for (int64_t bi = 0; bi < dm.b; ++bi) {
    const detail::Mask allowed{doc != nullptr ? doc + bi * s : nullptr, dm.window};
    for (int64_t kh = 0; kh < dm.kv_heads; ++kh) {
      gather(k, K, HeadView{bi, kh, dm.kv_heads, s, d});
      gather(v, V, HeadView{bi, kh, dm.kv_heads, s, vd});
      for (int64_t h = kh * g; h < (kh + 1) * g; ++h) {
        gather(q, Q, HeadView{bi, h, dm.heads, sq, d});
        gemm(false, true, sq, s, d, scale, Q, d, K, d, A(0), P, s);
        const int64_t base = (bi * dm.heads + h) * sq * s;      // this slice's rows
        const int64_t whole = (bi * dm.heads + h) * s * s;      // the whole sequence's, for the draw
        for (int64_t i = 0; i < sq; ++i) {
          const int64_t gi = query_position(dm, i);
          A* row = P + i * s;
          for (int64_t j = 0; j < s; ++j)
            if (!allowed.allowed(gi, j)) row[j] = neg_inf;
          const A sum = detail::exp_row_with_sink(row, s, gi + 1, dm, h);
          const A inv = A(1) / sum;
          for (int64_t j = 0; j < s; ++j) {
            const int64_t e = base + i * s + j;
            const A pr = row[j] * inv;
            probs[e] = store<S>(pr);
            const bool keep = dropout_uniform(seed, static_cast<uint64_t>(whole + gi * s + j)) >= p;
            mask[e] = keep ? 1 : 0;
            row[j] = keep ? pr * keep_scale : A(0);
            dropped[e] = store<S>(row[j]);
          }
        }
        gemm(false, false, sq, vd, s, A(1), P, s, V, vd, A(0), O, vd);  // O = D V
        scatter(O, o, HeadView{bi, h, dm.heads, sq, vd});
      }
    }
  }
}

template <class S>
void attention_backward_dropout(const S* q, const S* k, const S* v, const S* probs, const uint8_t* mask,
                                const S* dropped, const S* dout, S* dq, S* dk, S* dv, const AttentionDims& dm,
                                double p, std::span<std::byte> ws) {
  using A = acc_t<S>;
  const int64_t s = dm.s, sq = query_rows(dm), d = dm.head_dim, vd = value_dim(dm), g = group(dm);
  const A scale = score_scale<A>(dm);
  const A keep_scale = static_cast<A>(1.0 / (1.0 - p));
  Carver c(ws);
  A* K = c.take<A>(s * d);
  A* V = c.take<A>(s * vd);
  A* dK = c.take<A>(s * d);
  A* dV = c.take<A>(s * vd);
  A* Q = c.take<A>(sq * d);
  A* dO = c.take<A>(sq * vd);
  A* dQ = c.take<A>(sq * d);
  A* P = c.take<A>(sq * s);
  A* D = c.take<A>(sq * s);
  A* dP = c.take<A>(sq * s);
  for (int64_t bi = 0; bi < dm.b; ++bi) {
    for (int64_t kh = 0; kh < dm.kv_heads; ++kh) {
      gather(k, K, HeadView{bi, kh, dm.kv_heads, s, d});
      gather(v, V, HeadView{bi, kh, dm.kv_heads, s, vd});
      std::fill(dK, dK + s * d, A(0));
      std::fill(dV, dV + s * vd, A(0));
      for (int64_t h = kh * g; h < (kh + 1) * g; ++h) {
        gather(q, Q, HeadView{bi, h, dm.heads, sq, d});
        gather(dout, dO, HeadView{bi, h, dm.heads, sq, vd});
        const int64_t base = (bi * dm.heads + h) * sq * s;
        for (int64_t i = 0; i < sq * s; ++i) {
          P[i] = load(probs[base + i]);
          D[i] = load(dropped[base + i]);
        }
        gemm(true, false, s, vd, sq, A(1), D, s, dO, vd, A(1), dV, vd);  // dV += D^T dO
        gemm(false, true, sq, s, vd, A(1), dO, vd, V, vd, A(0), dP, s);  // dD = dO V^T
        for (int64_t i = 0; i < sq; ++i) {
          A* row = dP + i * s;
          A sum = 0;
          for (int64_t j = 0; j < s; ++j) {
            row[j] = mask[base + i * s + j] ? row[j] * keep_scale : A(0);  // dP
            sum += P[i * s + j] * row[j];
          }
          for (int64_t j = 0; j < s; ++j) row[j] = P[i * s + j] * (row[j] - sum);  // dS
        }
        gemm(false, false, sq, d, s, scale, dP, s, K, d, A(0), dQ, d);  // dQ = scale dS K
        gemm(true, false, s, d, sq, scale, dP, s, Q, d, A(1), dK, d);   // dK += scale dS^T Q
        scatter(dQ, dq, HeadView{bi, h, dm.heads, sq, d});
      }
      scatter(dK, dk, HeadView{bi, kh, dm.kv_heads, s, d});
      scatter(dV, dv, HeadView{bi, kh, dm.kv_heads, s, vd});
    }
  }
}

#define INST(S)                                                                                                    \
  template void attention_forward_dropout<S>(const S*, const S*, const S*, const int32_t*, S*, S*, uint8_t*, S*,   \
                                             const AttentionDims&, double, uint64_t, std::span<std::byte>);        \
  template void attention_backward_dropout<S>(const S*, const S*, const S*, const S*, const uint8_t*, const S*,    \
                                              const S*, S*, S*, S*, const AttentionDims&, double,                  \
                                              std::span<std::byte>);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cpu
