// GEMMs through cuBLASLt, and the linear layer on them (cpu::linear_* on the GPU).
//
// Precision: bf16 and fp16 operands run on tensor cores with fp32 accumulation
// (CUBLAS_COMPUTE_32F) and one rounding of each output; fp32 operands run in full fp32, or
// with TF32 inputs when ctx.tf32() (CUBLAS_COMPUTE_32F_FAST_TF32). The output type may be
// wider than the operands (bf16 x bf16 -> fp32: fp32 main gradients, attention scores).
//
// Layout: row-major throughout, as the CPU ops (the column-major cuBLASLt call computes the
// transpose, C^T = op(B)^T op(A)^T, with the operands swapped).
// Workspace: the context's cuBLASLt workspace for the GEMM itself; linear_backward's bias
// gradient needs `ws` of linear_workspace_bytes(...) device bytes (0 without a bias).
// Every call enqueues on ctx.compute_stream(); the algorithm for a shape is chosen once by
// cuBLASLt's heuristic and cached in the context.
// Thread-safety: as CudaContext.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "executor/cuda/context.h"
#include "executor/dtype.h"

namespace llmplan::exec::cuda {

// C (m, n) = alpha op(A) op(B) + beta C [+ bias (n) on every row], row-major; op(A) is
// (m, k), op(B) is (k, n); leading dimensions in elements. With batch > 1, matrix i of A,
// B and C starts stride_a/b/c elements after matrix i - 1.
// REQUIRES: a_type == b_type, one of f32, bf16, f16; c_type f32 or a_type; bias of c_type.
struct GemmArgs {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  DType a_type = DType::f32;
  int64_t lda = 0;
  const void* b = nullptr;
  DType b_type = DType::f32;
  int64_t ldb = 0;
  void* c = nullptr;
  DType c_type = DType::f32;
  int64_t ldc = 0;
  const void* bias = nullptr;  // (n) or nullptr; not with batch > 1
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};
Status gemm(CudaContext& ctx, const GemmArgs& g);

// x (n, in), w (out, in), b (out) or nullptr -> y (n, out) = x w^T + b, the bias added in
// the GEMM's epilogue (one rounding, as the CPU op).  (cpu::linear_forward)
// ld_y > 0: y's rows are ld_y elements apart (>= out), e.g. logits whose row stride is
// padded to a multiple of 8 so that cuBLASLt can use its tensor-core kernels (an odd
// vocabulary such as GPT-2's 50257 makes every row misaligned: measured 124 TFLOP/s against
// 711 on an H200 for 16384 x 50257 x 768).
template <class S>
Status linear_forward(CudaContext& ctx, const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in,
                      int64_t out, int64_t ld_y = 0);

// dx (n, in) = dy w (overwritten; nullptr skips), dw (out, in) += dy^T x (accumulated in
// the GEMM, beta = 1: fp32 sum, one rounding into G), db (out) += column sums of dy
// (nullptr skips).  (cpu::linear_backward)
// ld_dy > 0: dy's row stride, as linear_forward's ld_y (no bias gradient then).
template <class S, class G>
Status linear_backward(CudaContext& ctx, const S* dy, const S* x, const S* w, S* dx, G* dw, G* db, int64_t n,
                       int64_t in, int64_t out, std::span<std::byte> ws, int64_t ld_dy = 0);

// Device workspace bytes for linear_backward (the bias gradient's partial sums).
int64_t linear_workspace_bytes(int64_t n, int64_t out);

}  // namespace llmplan::exec::cuda
