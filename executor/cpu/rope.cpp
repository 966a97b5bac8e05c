#include "executor/cpu/rope.h"

#include <cmath>

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::load;
using detail::store;

namespace {
// Rotates every head of every token by +angle (sign = 1) or -angle (sign = -1).
template <class S>
void rotate(const S* x, const int32_t* positions, S* y, int64_t tokens, int64_t heads, int64_t d,
            double theta, double sign) {
  using A = acc_t<S>;
  const int64_t half = d / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    const double pos = positions[t];
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const A c = static_cast<A>(std::cos(angle));
      const A s = static_cast<A>(sign * std::sin(angle));
      for (int64_t hd = 0; hd < heads; ++hd) {
        const int64_t base = (t * heads + hd) * d;
        const A x1 = load(x[base + i]);
        const A x2 = load(x[base + i + half]);
        y[base + i] = store<S>(x1 * c - x2 * s);
        y[base + i + half] = store<S>(x2 * c + x1 * s);
      }
    }
  }
}
}  // namespace

template <class S>
void rope_forward(const S* x, const int32_t* positions, S* y, int64_t tokens, int64_t heads,
                  int64_t d, double theta) {
  rotate(x, positions, y, tokens, heads, d, theta, 1.0);
}

template <class S>
void rope_backward(const S* dy, const int32_t* positions, S* dx, int64_t tokens, int64_t heads,
                   int64_t d, double theta) {
  rotate(dy, positions, dx, tokens, heads, d, theta, -1.0);  // R(angle)^T = R(-angle)
}

#define INST(S)                                                                              \
  template void rope_forward<S>(const S*, const int32_t*, S*, int64_t, int64_t, int64_t,     \
                                double);                                                     \
  template void rope_backward<S>(const S*, const int32_t*, S*, int64_t, int64_t, int64_t, double);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cpu
