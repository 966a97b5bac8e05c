#include "executor/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::load;
using detail::store;

template <class S>
void moe_router_softmax(const S* logits, acc_t<S>* probs, int64_t T, int64_t E) {
  using A = acc_t<S>;
  for (int64_t t = 0; t < T; ++t) {
    const S* z = logits + t * E;
    A* p = probs + t * E;
    A mx = load(z[0]), sum = 0;
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, A(load(z[e])));
    for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(A(load(z[e])) - mx);
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
  }
}

template <class S>
void moe_dispatch(const S* x, const int32_t* rows, S* buf, int64_t T, int k, int64_t h) {
  const auto bytes = static_cast<size_t>(h) * sizeof(S);
  for (int64_t at = 0; at < T * k; ++at)
    if (rows[at] >= 0) std::memcpy(buf + static_cast<int64_t>(rows[at]) * h, x + at / k * h, bytes);
}

template <class S>
void moe_combine(const S* buf, const int32_t* rows, const acc_t<S>* gates, S* out, int64_t T, int k, int64_t h) {
  using A = acc_t<S>;
  std::vector<A> acc(static_cast<size_t>(h));
  for (int64_t t = 0; t < T; ++t) {
    std::fill(acc.begin(), acc.end(), A(0));
    for (int j = 0; j < k; ++j) {
      const int64_t at = t * k + j;
      if (rows[at] < 0) continue;
      const S* row = buf + static_cast<int64_t>(rows[at]) * h;
      const A w = gates != nullptr ? gates[at] : A(1);
      for (int64_t i = 0; i < h; ++i) acc[static_cast<size_t>(i)] += w * load(row[i]);
    }
    for (int64_t i = 0; i < h; ++i) out[t * h + i] = store<S>(acc[static_cast<size_t>(i)]);
  }
}

template <class S>
void moe_combine_backward(const S* dy, const S* buf, const int32_t* rows, const acc_t<S>* gates, S* dbuf,
                          acc_t<S>* dgate, int64_t T, int k, int64_t h) {
  using A = acc_t<S>;
  for (int64_t at = 0; at < T * k; ++at) {
    dgate[at] = A(0);
    if (rows[at] < 0) continue;
    const S* dyt = dy + at / k * h;
    const S* o = buf + static_cast<int64_t>(rows[at]) * h;
    S* dc = dbuf + static_cast<int64_t>(rows[at]) * h;
    A dot = 0;
    for (int64_t i = 0; i < h; ++i) {
      dot += A(load(dyt[i])) * A(load(o[i]));
      dc[i] = store<S>(gates[at] * A(load(dyt[i])));
    }
    dgate[at] = dot;
  }
}

#define INST(S)                                                                                                  \
  template void moe_router_softmax<S>(const S*, acc_t<S>*, int64_t, int64_t);                                   \
  template void moe_dispatch<S>(const S*, const int32_t*, S*, int64_t, int, int64_t);                           \
  template void moe_combine<S>(const S*, const int32_t*, const acc_t<S>*, S*, int64_t, int, int64_t);           \
  template void moe_combine_backward<S>(const S*, const S*, const int32_t*, const acc_t<S>*, S*, acc_t<S>*,     \
                                        int64_t, int, int64_t);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cpu
