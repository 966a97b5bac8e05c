// Linear layer on the CPU: y = x W^T + b, GEMMs through CBLAS with fp32 (or fp64)
// accumulation.
//
// Storage types S: float and double call sgemm/dgemm directly on the arguments and need no
// workspace. bf16_t and f16_t widen their operands into fp32 tiles of at most 512 x 1024
// (so the workspace is a few MiB for any layer), run sgemm on the tiles, accumulate each
// output tile in fp32 over the whole inner dimension and round it once into S. Weight
// gradients G: S itself, or float ("fp32 main grads") for 16-bit S.
// Workspace: `ws` must be 64-byte aligned with at least linear_workspace_bytes(...) bytes
// (0 for float and double, where an empty span is fine); it is scratch only, the same size
// serves forward and backward.
// Thread-safety: pure functions of their arguments; OpenBLAS threads the GEMMs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

// x (n, in), w (out, in), b (out) or nullptr -> y (n, out) = x w^T + b.
template <class S>
void linear_forward(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out,
                    std::span<std::byte> ws);

// dy (n, out), saved x (n, in), w (out, in) ->
//   dx (n, in) = dy w              (overwritten; nullptr skips, e.g. for the first layer)
//   dw (out, in) += dy^T x         (accumulated; nullptr skips: frozen weight)
//   db (out) += sum over rows dy   (accumulated; nullptr skips: no bias)
template <class S, class G>
void linear_backward(const S* dy, const S* x, const S* w, S* dx, G* dw, G* db, int64_t n,
                     int64_t in, int64_t out, std::span<std::byte> ws);

// Workspace bytes for linear_forward/backward with storage `s` (0 for f32 and f64).
int64_t linear_workspace_bytes(DType s, int64_t n, int64_t in, int64_t out);

}  // namespace llmplan::exec::cpu
