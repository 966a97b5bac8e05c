#include "executor/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::load;
using detail::store;

namespace {
// Log-sum-exp of one row x (v) kept as max + log(sum exp(x - max)), the two parts apart so
// that lse - x_t = (max - x_t) + log_sum does not lose digits to a large max.
template <class S>
struct RowLse {
  acc_t<S> max;
  acc_t<S> log_sum;
};
template <class S>
RowLse<S> row_lse(const S* x, int64_t v) {
  const acc_t<S> m = detail::max_of(x, v);
  return {m, std::log(detail::sum_exp(x, v, m))};
}

double count_targets(const int32_t* targets, int64_t n) {
  int64_t c = 0;
  for (int64_t r = 0; r < n; ++r) c += targets[r] != kIgnoreIndex;
  return static_cast<double>(c);
}
}  // namespace

template <class S>
double cross_entropy_forward(const S* logits, const int32_t* targets, int64_t n, int64_t v,
                             double denom) {
  if (denom == 0) denom = count_targets(targets, n);
  if (denom == 0) return 0.0;
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int32_t t = targets[r];
    if (t == kIgnoreIndex) continue;
    assert(t >= 0 && t < v);
    const S* row = logits + r * v;
    const RowLse<S> lse = row_lse(row, v);
    total += static_cast<double>((lse.max - load(row[t])) + lse.log_sum);
  }
  return total / denom;
}

template <class S>
void cross_entropy_backward(const S* logits, const int32_t* targets, S* dlogits, int64_t n,
                            int64_t v, double dloss, double denom) {
  using A = acc_t<S>;
  if (denom == 0) denom = count_targets(targets, n);
  const A scale = denom == 0 ? A(0) : static_cast<A>(dloss / denom);
  for (int64_t r = 0; r < n; ++r) {
    const int32_t t = targets[r];
    S* drow = dlogits + r * v;
    if (t == kIgnoreIndex) {
      for (int64_t j = 0; j < v; ++j) drow[j] = store<S>(A(0));
      continue;
    }
    const S* row = logits + r * v;
    const RowLse<S> lse = row_lse(row, v);  // before drow (which may be row) is written
    auto grad = [&](int64_t j, A z) {       // dloss/denom * (softmax - onehot)
      return store<S>(scale * (detail::exp_acc((z - lse.max) - lse.log_sum) - (j == t ? A(1) : A(0))));
    };
    if (drow == row) {  // one pointer: the loop vectorises without a run-time overlap check
      for (int64_t j = 0; j < v; ++j) drow[j] = grad(j, load(drow[j]));
    } else {
      for (int64_t j = 0; j < v; ++j) drow[j] = grad(j, load(row[j]));
    }
  }
}

template <class A>
void vocab_parallel_ce_max(const A* z, int64_t n, int64_t v, int64_t real, A* mx) {
  for (int64_t i = 0; i < n; ++i) mx[i] = real > 0 ? *std::max_element(z + i * v, z + i * v + real) : -std::numeric_limits<A>::infinity();
}

template <class A>
void vocab_parallel_ce_sums(const A* z, const int32_t* targets, const A* all, int tp, int64_t n, int64_t v,
                            int64_t real, int64_t v0, A* mx, A* sums) {
  for (int64_t i = 0; i < n; ++i) {
    A m = all[i];
    for (int r = 1; r < tp; ++r) m = std::max(m, all[r * n + i]);
    mx[i] = m;
    const A* zi = z + i * v;
    A se = 0;
    for (int64_t j = 0; j < real; ++j) se += std::exp(zi[j] - m);
    sums[i] = se;
    const int64_t local = static_cast<int64_t>(targets[i]) - v0;
    sums[n + i] = targets[i] != kIgnoreIndex && local >= 0 && local < v ? zi[local] : A(0);
  }
}

template <class A>
VocabCeLoss vocab_parallel_ce_loss(const int32_t* targets, const A* mx, const A* sums, int64_t n) {
  VocabCeLoss l;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] == kIgnoreIndex) continue;
    ++l.counted;
    l.sum += std::log(static_cast<double>(sums[i])) + static_cast<double>(mx[i]) - static_cast<double>(sums[n + i]);
  }
  return l;
}

template <class A>
void vocab_parallel_ce_backward(A* z, const int32_t* targets, const A* mx, const A* sums, int64_t n, int64_t v,
                                int64_t real, int64_t v0, double dscale) {
  for (int64_t i = 0; i < n; ++i) {
    A* zi = z + i * v;
    if (targets[i] == kIgnoreIndex) {
      std::fill(zi, zi + v, A(0));
      continue;
    }
    const A inv = A(1) / sums[i];
    for (int64_t j = 0; j < real; ++j) zi[j] = static_cast<A>(dscale * static_cast<double>(std::exp(zi[j] - mx[i]) * inv));
    std::fill(zi + real, zi + v, A(0));
    const int64_t local = static_cast<int64_t>(targets[i]) - v0;
    if (local >= 0 && local < v) zi[local] = static_cast<A>(zi[local] - dscale);
  }
}

#define INSTA(A)                                                                                                   \
  template void vocab_parallel_ce_max<A>(const A*, int64_t, int64_t, int64_t, A*);                                \
  template void vocab_parallel_ce_sums<A>(const A*, const int32_t*, const A*, int, int64_t, int64_t, int64_t,     \
                                          int64_t, A*, A*);                                                       \
  template VocabCeLoss vocab_parallel_ce_loss<A>(const int32_t*, const A*, const A*, int64_t);                   \
  template void vocab_parallel_ce_backward<A>(A*, const int32_t*, const A*, const A*, int64_t, int64_t, int64_t, \
                                              int64_t, double);
INSTA(float)
INSTA(double)
#undef INSTA

#define INST(S)                                                                               \
  template double cross_entropy_forward<S>(const S*, const int32_t*, int64_t, int64_t, double); \
  template void cross_entropy_backward<S>(const S*, const int32_t*, S*, int64_t, int64_t,     \
                                          double, double);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cpu
