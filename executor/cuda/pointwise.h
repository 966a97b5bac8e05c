// Elementwise CUDA ops: residual add, casts, the non-finite check, GELU and SwiGLU,
// dropout, embeddings and rotary embeddings. Each mirrors the CPU op of the same name in
// executor/cpu/ (same arguments after the context, same formulas, same overwrite or
// accumulate semantics); the CPU header is the reference for the math.
//
// Storage types S: float, bf16_t, f16_t (no double on the GPU); math in fp32, one rounding
// per stored result. Gradient types G: S, or float for 16-bit S. All pointers are device
// pointers; ids and positions are int32 on the device. Outputs may alias the same-index
// input where the CPU op allows it.
// Every function enqueues on ctx.compute_stream() and returns at once; the Status reports
// a launch failure only (execution errors surface at the next synchronisation).
// Thread-safety: as CudaContext.
#pragma once

#include <cstdint>

#include "executor/cuda/context.h"
#include "executor/dtype.h"

namespace llmplan::exec::cuda {

// y (n) = a (n) + b (n).  (cpu::add)
template <class S> Status add(CudaContext& ctx, const S* a, const S* b, S* y, int64_t n);
// y (n) += x (n).  (cpu::add_inplace)
template <class S> Status add_inplace(CudaContext& ctx, S* y, const S* x, int64_t n);
// y (n) += b (out) on every row of y (rows, out): the bias, where a GEMM epilogue cannot.
template <class S> Status add_row_bias(CudaContext& ctx, S* y, const S* b, int64_t rows, int64_t out);

// x (n) *= s, the factor rounded to fp32 once (the LoRA scale alpha / r).
template <class S> Status scale(CudaContext& ctx, S* x, int64_t n, double s);

// y (n) = x (n) converted, round to nearest even. Pairs: float -> bf16_t, f16_t, float;
// bf16_t, f16_t -> float.  (cpu::cast)
template <class Src, class Dst> Status cast(CudaContext& ctx, const Src* x, Dst* y, int64_t n);
// The same over rows of a strided matrix: y[r * ld_y + c] = x[r * ld_x + c], c < cols.
template <class Src, class Dst>
Status cast_rows(CudaContext& ctx, const Src* x, int64_t ld_x, Dst* y, int64_t ld_y, int64_t rows, int64_t cols);

// *flag = 1 when any of x (n) is an infinity or a NaN; *flag is left alone otherwise, so
// one zeroed flag can collect many tensors (fp16 loss scaling checks all gradients, then
// reads the flag once).  (cpu::has_nonfinite, with the answer kept on the device)
template <class S> Status has_nonfinite(CudaContext& ctx, const S* x, int64_t n, int32_t* flag);

// QLoRA's frozen NF4 base weight q (cpu::nf4_bytes(n) bytes, cpu/nf4.h's layout) -> w (n
// values), each value NF4[index] x the block's absmax read back from its 8-bit code and the
// group's fp32 scale, in double and rounded once into S as the CPU op does, so the bits
// agree.  (cpu::nf4_dequantize)
template <class S> Status nf4_dequantize(CudaContext& ctx, const uint8_t* q, int64_t n, S* w);

// GELU, tanh approximation, and its backward from the saved input.  (cpu::gelu_*)
template <class S> Status gelu_forward(CudaContext& ctx, const S* x, S* y, int64_t n);
template <class S> Status gelu_backward(CudaContext& ctx, const S* x, const S* dy, S* dx, int64_t n);
// SwiGLU y = silu(gate) up, and its backward from the saved gate and up.  (cpu::swiglu_*)
template <class S> Status swiglu_forward(CudaContext& ctx, const S* gate, const S* up, S* y, int64_t n);
template <class S>
Status swiglu_backward(CudaContext& ctx, const S* gate, const S* up, const S* dy, S* dgate, S* dup, int64_t n);

// Dropout with the CPU op's counter-based RNG: element i keeps when
// cpu::dropout_uniform(seed, offset + i) >= p, so the mask bits equal the CPU's for the
// same (seed, offset).  (cpu::dropout_*)
template <class S>
Status dropout_forward(CudaContext& ctx, const S* x, S* y, uint8_t* mask, int64_t n, double p,
                       uint64_t seed, uint64_t offset = 0);
template <class S>
Status dropout_backward(CudaContext& ctx, const S* dy, const uint8_t* mask, S* dx, int64_t n, double p);

// ids (n), table (rows, h) -> out (n, h) = table[ids], or += with accumulate.
// (cpu::embedding_forward)
template <class S>
Status embedding_forward(CudaContext& ctx, const int32_t* ids, const S* table, S* out, int64_t n,
                         int64_t h, bool accumulate = false);
// dtable (rows, h) += scatter-add of dout (n, h) at ids, with atomic adds: in fp32 for
// G = float; for 16-bit G with the GPU's 16-bit atomics, each add rounded once as the CPU
// op does (the order of repeated ids differs).  (cpu::embedding_backward)
template <class S, class G>
Status embedding_backward(CudaContext& ctx, const int32_t* ids, const S* dout, G* dtable, int64_t n, int64_t h);
// The tensor-parallel shard of the table, rows [v0, v0 + rows) of the vocabulary: out row i
// = table[ids[i] - v0] for ids in the shard, zeros for the rest; dtable += the rows of the
// ids in the shard.  (cpu::embedding_forward_shard, cpu::embedding_backward_shard)
template <class S>
Status embedding_forward_shard(CudaContext& ctx, const int32_t* ids, const S* table, S* out, int64_t n, int64_t h,
                               int64_t v0, int64_t rows);
template <class S, class G>
Status embedding_backward_shard(CudaContext& ctx, const int32_t* ids, const S* dout, G* dtable, int64_t n, int64_t h,
                                int64_t v0, int64_t rows);
// Mixture of experts: the router's softmax (probs in fp32), the dispatch of token rows to
// the routes' rows, the combine (gates nullptr: weight 1) and its backward; rows[t k + j]
// = -1 for a dropped route. dgate: one warp per route.  (cpu/moe.h)
template <class S>
Status moe_router_softmax(CudaContext& ctx, const S* logits, float* probs, int64_t T, int64_t E);
template <class S>
Status moe_dispatch(CudaContext& ctx, const S* x, const int32_t* rows, S* buf, int64_t T, int k, int64_t h);
template <class S>
Status moe_combine(CudaContext& ctx, const S* buf, const int32_t* rows, const float* gates, S* out, int64_t T, int k,
                   int64_t h);
template <class S>
Status moe_combine_backward(CudaContext& ctx, const S* dy, const S* buf, const int32_t* rows, const float* gates, S* dbuf,
                            float* dgate, int64_t T, int k, int64_t h);
// positions (b, s) = 0 .. s-1 per sequence.  (cpu::fill_positions)
Status fill_positions(CudaContext& ctx, int32_t* positions, int64_t b, int64_t s);

// Rotary embedding, rotate-half, angles in double from the positions. y may alias x,
// dx may alias dy.  (cpu::rope_*)
template <class S>
Status rope_forward(CudaContext& ctx, const S* x, const int32_t* positions, S* y, int64_t tokens,
                    int64_t heads, int64_t d, double theta = 10000.0);
template <class S>
Status rope_backward(CudaContext& ctx, const S* dy, const int32_t* positions, S* dx, int64_t tokens,
                     int64_t heads, int64_t d, double theta = 10000.0);

}  // namespace llmplan::exec::cuda
