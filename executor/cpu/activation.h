// MLP activations on the CPU.
//
//   GELU (tanh approximation, as GPT-2): y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),
//     k = sqrt(2/pi), computed as x sigmoid(2 k (x + 0.044715 x^3)), the same function.
//     Backward from the saved input x.
//   SwiGLU (Llama): y = silu(gate) * up, silu(g) = g sigmoid(g). Backward from the saved
//     gate and up.
//
// Storage types S: float, double, bf16_t, f16_t (math in acc_t<S>). Outputs may alias the
// same-index input (elementwise). Activation gradients are overwritten.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

// x (n) -> y (n).
template <class S> void gelu_forward(const S* x, S* y, int64_t n);
// x (n) saved input, dy (n) -> dx (n).
template <class S> void gelu_backward(const S* x, const S* dy, S* dx, int64_t n);

// gate (n), up (n) -> y (n). n = tokens * ffn_hidden; gate and up are separate buffers.
template <class S> void swiglu_forward(const S* gate, const S* up, S* y, int64_t n);
// gate (n), up (n) saved, dy (n) -> dgate (n), dup (n).
template <class S>
void swiglu_backward(const S* gate, const S* up, const S* dy, S* dgate, S* dup, int64_t n);

}  // namespace llmplan::exec::cpu
