#include "executor/cpu/dropout.h"

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::load;
using detail::store;

uint64_t splitmix64_at(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;  // state after index+1 steps
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double dropout_uniform(uint64_t seed, uint64_t index) {
  return static_cast<double>(splitmix64_at(seed, index) >> 11) * 0x1.0p-53;
}

template <class S>
void dropout_forward(const S* x, S* y, uint8_t* mask, int64_t n, double p, uint64_t seed,
                     uint64_t offset) {
  using A = acc_t<S>;
  const A scale = static_cast<A>(1.0 / (1.0 - p));
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = dropout_uniform(seed, offset + static_cast<uint64_t>(i)) >= p;
    mask[i] = keep ? 1 : 0;
    y[i] = store<S>(keep ? load(x[i]) * scale : A(0));
  }
}

template <class S>
void dropout_backward(const S* dy, const uint8_t* mask, S* dx, int64_t n, double p) {
  using A = acc_t<S>;
  const A scale = static_cast<A>(1.0 / (1.0 - p));
  for (int64_t i = 0; i < n; ++i) dx[i] = store<S>(mask[i] ? load(dy[i]) * scale : A(0));
}

#define INST(S)                                                                           \
  template void dropout_forward<S>(const S*, S*, uint8_t*, int64_t, double, uint64_t,     \
                                   uint64_t);                                             \
  template void dropout_backward<S>(const S*, const uint8_t*, S*, int64_t, double);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cpu
