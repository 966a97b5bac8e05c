// Elementwise CPU ops: residual add, dtype casts, and the non-finite check used by fp16
// dynamic loss scaling.
//
// Storage types S: float, double, bf16_t, f16_t; math in acc_t<S> (float for the 16-bit
// types, one rounding per stored result). Pointers are to n contiguous elements; outputs
// may alias inputs. No allocation, no failure.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

// Residual add: y (n) = a (n) + b (n). Backward is the identity: da = db = dy.
template <class S> void add(const S* a, const S* b, S* y, int64_t n);
// y (n) += x (n): merges the gradients of a tensor that feeds two branches.
template <class S> void add_inplace(S* y, const S* x, int64_t n);

// y (n) = x (n) converted with round to nearest even. Pairs: float <-> bf16_t, f16_t,
// double; bf16_t, f16_t -> float; and same-type copies of float and double.
template <class Src, class Dst> void cast(const Src* x, Dst* y, int64_t n);

// True when any of x (n) is an infinity or a NaN.
template <class S> bool has_nonfinite(const S* x, int64_t n);

}  // namespace llmplan::exec::cpu
