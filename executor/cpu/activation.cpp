#include "executor/cpu/activation.h"

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::load;
using detail::sigmoid;
using detail::store;

namespace {
template <class A> constexpr A kGeluK = A(0.79788456080286535588);  // sqrt(2/pi)
template <class A> constexpr A kGeluC = A(0.044715);
}  // namespace

// 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = k (x + c x^3): the same function, without the
// cancellation of 1 + tanh(u) for negative x, and with an exp that vectorises.
template <class S>
void gelu_forward(const S* x, S* y, int64_t n) {
  using A = acc_t<S>;
  for (int64_t i = 0; i < n; ++i) {
    const A v = load(x[i]);
    const A u = kGeluK<A> * (v + kGeluC<A> * v * v * v);
    y[i] = store<S>(v * sigmoid(A(2) * u));
  }
}

// dy/dx = s + x s (1 - s) 2 du/dx,  s = sigmoid(2u),  du/dx = k (1 + 3 c x^2).
template <class S>
void gelu_backward(const S* x, const S* dy, S* dx, int64_t n) {
  using A = acc_t<S>;
  for (int64_t i = 0; i < n; ++i) {
    const A v = load(x[i]);
    const A s = sigmoid(A(2) * kGeluK<A> * (v + kGeluC<A> * v * v * v));
    const A du = kGeluK<A> * (A(1) + A(3) * kGeluC<A> * v * v);
    dx[i] = store<S>(load(dy[i]) * (s + v * s * (A(1) - s) * A(2) * du));
  }
}

template <class S>
void swiglu_forward(const S* gate, const S* up, S* y, int64_t n) {
  using A = acc_t<S>;
  for (int64_t i = 0; i < n; ++i) {
    const A g = load(gate[i]);
    y[i] = store<S>(g * sigmoid(g) * load(up[i]));
  }
}

// dgate = dy up sigmoid(g) (1 + g (1 - sigmoid(g))),  dup = dy silu(g).
template <class S>
void swiglu_backward(const S* gate, const S* up, const S* dy, S* dgate, S* dup, int64_t n) {
  using A = acc_t<S>;
  for (int64_t i = 0; i < n; ++i) {
    const A g = load(gate[i]);
    const A u = load(up[i]);
    const A d = load(dy[i]);
    const A sg = sigmoid(g);
    dgate[i] = store<S>(d * u * sg * (A(1) + g * (A(1) - sg)));
    dup[i] = store<S>(d * g * sg);
  }
}

#define INST(S)                                                            \
  template void gelu_forward<S>(const S*, S*, int64_t);                    \
  template void gelu_backward<S>(const S*, const S*, S*, int64_t);         \
  template void swiglu_forward<S>(const S*, const S*, S*, int64_t);        \
  template void swiglu_backward<S>(const S*, const S*, const S*, S*, S*, int64_t);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cpu
