// Internal to cpu/attention.cpp and cpu/attention_dropout.cpp (see kernel_util.h): per-head
// views of the (b, s, heads, d) q/k/v layout and the attention score scale.
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>

#include "executor/cpu/attention.h"
#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu::detail {

// Index helpers over the (b, s, heads, d) layout of one sequence `bi` and one head `hd`.
struct HeadView {
  int64_t bi, hd, heads, s, d;
  int64_t at(int64_t t) const { return ((bi * s + t) * heads + hd) * d; }
};

// dst (s, d) = that head's rows, in the math type.
template <class S, class A>
void gather(const S* x, A* dst, const HeadView& v) {
  for (int64_t t = 0; t < v.s; ++t)
    for (int64_t c = 0; c < v.d; ++c) dst[t * v.d + c] = load(x[v.at(t) + c]);
}

// That head's rows of x = src (s, d), rounded into the storage type.
template <class S, class A>
void scatter(const A* src, S* x, const HeadView& v) {
  for (int64_t t = 0; t < v.s; ++t)
    for (int64_t c = 0; c < v.d; ++c) x[v.at(t) + c] = store<S>(src[t * v.d + c]);
}

template <class A>
A score_scale(const AttentionDims& dm) {
  return static_cast<A>(dm.scale != 0 ? dm.scale : 1.0 / std::sqrt(static_cast<double>(dm.head_dim)));
}

// The mask of one sequence (attention.h's allowed(i, j)), on sequence positions: docs is
// that sequence's (s) doc ids or nullptr, window dims.window.
struct Mask {
  const int32_t* docs;
  int64_t window;
  bool allowed(int64_t i, int64_t j) const {
    return j <= i && (window <= 0 || i - j < window) && (docs == nullptr || docs[j] == docs[i]);
  }
  // The first key position query position i may see.
  int64_t first_key(int64_t i) const { return window > 0 ? std::max<int64_t>(0, i - window + 1) : 0; }
};

// One score row's softmax denominator: row[0, n) (masked entries -inf, none allowed past
// `visible`) becomes e^(score - max) and the sum is returned, with head h's sink logit
// (dims.sinks) in the max and the sum when there are sinks.
template <class A>
A exp_row_with_sink(A* row, int64_t n, int64_t visible, const AttentionDims& dm, int64_t h) {
  const A mx = max_of(row, visible);
  if (dm.sinks.empty()) return exp_shifted(row, n, mx);
  const A sink = static_cast<A>(dm.sinks[static_cast<size_t>(h)]);
  const A m = std::max(mx, sink);
  return exp_shifted(row, n, m) + exp_acc(sink - m);
}

// Query heads per kv head (GQA).
inline int64_t group(const AttentionDims& dm) {
  assert(dm.kv_heads > 0 && dm.heads % dm.kv_heads == 0);
  return dm.heads / dm.kv_heads;
}

}  // namespace llmplan::exec::cpu::detail
