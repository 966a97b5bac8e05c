#include "executor/cpu/cross_entropy.h"

#include <cmath>

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

#define INST(S)                                                                               \
  template double cross_entropy_forward<S>(const S*, const int32_t*, int64_t, int64_t, double); \
  template void cross_entropy_backward<S>(const S*, const int32_t*, S*, int64_t, int64_t,     \
                                          double, double);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cpu
