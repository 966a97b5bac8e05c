// LayerNorm (GPT) and RMSNorm (Llama) over the last dimension h, on the CPU.
//
//   LayerNorm: y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), var biased
//   RMSNorm:   y = x * rstd * w,               rstd = 1 / sqrt(mean(x^2) + eps)
//
// Backward needs only the saved input x (as the planner's recipe saves): mean and rstd are
// recomputed per row, never stored. Weight gradients accumulate (+=); dx is overwritten,
// or accumulated with accumulate_dx (the residual stream's gradient, which the norm's input
// also feeds, can be merged without another buffer).
//
// Storage types S: float, double, bf16_t, f16_t (math in acc_t<S>); weight gradients G: S,
// or float for 16-bit S. With 16-bit G the row sums are accumulated in fp32 workspace and
// rounded once: `ws` needs norm_workspace_bytes(G, h) bytes, 64-byte aligned (0 otherwise;
// an empty span is fine).
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

// x (n, h), w (h), b (h) or nullptr -> y (n, h). y may alias x.
template <class S>
void layernorm_forward(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t h, double eps);

// x (n, h) saved input, w (h), dy (n, h) -> dx (n, h), dw (h) +=, db (h) += (nullptr skips
// dw/db: frozen or bias-free).
template <class S, class G>
void layernorm_backward(const S* x, const S* w, const S* dy, S* dx, G* dw, G* db, int64_t n,
                        int64_t h, double eps, bool accumulate_dx, std::span<std::byte> ws);

// x (n, h), w (h) -> y (n, h). y may alias x.
template <class S>
void rmsnorm_forward(const S* x, const S* w, S* y, int64_t n, int64_t h, double eps);

// x (n, h) saved input, w (h), dy (n, h) -> dx (n, h), dw (h) += (nullptr skips).
template <class S, class G>
void rmsnorm_backward(const S* x, const S* w, const S* dy, S* dx, G* dw, int64_t n, int64_t h,
                      double eps, bool accumulate_dx, std::span<std::byte> ws);

// Workspace bytes of the backward passes for weight-gradient dtype g and width h.
int64_t norm_workspace_bytes(DType g, int64_t h);

}  // namespace llmplan::exec::cpu
