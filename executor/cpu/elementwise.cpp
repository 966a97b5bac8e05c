#include "executor/cpu/elementwise.h"

#include <cmath>

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::load;
using detail::store;

template <class S>
void add(const S* a, const S* b, S* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = store<S>(load(a[i]) + load(b[i]));
}

template <class S>
void add_inplace(S* y, const S* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = store<S>(load(y[i]) + load(x[i]));
}

template <class Src, class Dst>
void cast(const Src* x, Dst* y, int64_t n) {
  detail::convert(x, y, n);
}

template <class S>
bool has_nonfinite(const S* x, int64_t n) {
  bool bad = false;  // no early exit: the loop vectorises, and the common answer is "no"
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(load(x[i]));
  return bad;
}

#define INST(S)                                         \
  template void add<S>(const S*, const S*, S*, int64_t); \
  template void add_inplace<S>(S*, const S*, int64_t);   \
  template bool has_nonfinite<S>(const S*, int64_t);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

#define CAST(A, B) template void cast<A, B>(const A*, B*, int64_t);
CAST(float, bf16_t) CAST(float, f16_t) CAST(float, double) CAST(double, float)
CAST(bf16_t, float) CAST(f16_t, float) CAST(float, float) CAST(double, double)
#undef CAST

}  // namespace llmplan::exec::cpu
