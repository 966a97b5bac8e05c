// Rotary position embedding (Llama), rotate-half convention as in Hugging Face Llama:
// element i of a head is paired with element i + d/2 and rotated by the angle
// pos * theta^(-2i/d), i in [0, d/2):
//   y[i]       = x[i] cos - x[i + d/2] sin
//   y[i + d/2] = x[i + d/2] cos + x[i] sin
// Backward applies the inverse rotation (the transpose) to dy. Nothing is saved: the
// angles come from the positions, recomputed in double precision.
//
// Storage types S: float, double, bf16_t, f16_t. Apply once to q (heads = a) and once to k
// (heads = a_kv). y may alias x (in place). REQUIRES: d even.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

// x (tokens, heads, d), positions (tokens) -> y (tokens, heads, d). tokens = b * s; the
// positions restart per sequence (fill_positions) or per packed document.
template <class S>
void rope_forward(const S* x, const int32_t* positions, S* y, int64_t tokens, int64_t heads,
                  int64_t d, double theta = 10000.0);

// dy (tokens, heads, d) -> dx (tokens, heads, d). dx may alias dy.
template <class S>
void rope_backward(const S* dy, const int32_t* positions, S* dx, int64_t tokens, int64_t heads,
                   int64_t d, double theta = 10000.0);

}  // namespace llmplan::exec::cpu
