// Causal self-attention with GQA and a document mask on the GPU: the CPU ops of
// executor/cpu/attention.h (same formulas, layouts, saved tensors and overwrite semantics),
// in two variants whose choice the planner's memory model must know (the plan's
// flash_attention flag: materialized keeps attn.probs, flash keeps attn.lse).
//
//   materialized: q, k, v are copied head-major into workspace; batched cuBLASLt GEMMs make
//     the fp32 scores of one kv-head group at a time (the g query heads that share a kv head
//     are one (g s, d) matrix); a softmax kernel writes probs (b, heads, s, s) in the
//     storage type (0 where masked); o = probs v. Backward: dP = dO v^T (fp32),
//     dS = P (dP - rowsum(P dP)) in the storage type, dq = scale dS k, dk = scale dS^T q,
//     dv = P^T dO, each a batched GEMM over the group. Workspace holds the head-major copies
//     and one (b, heads, s, s) fp32 score matrix (plus dS in the backward).
//   flash: a fused kernel, one warp per query row, key/value tiles of 32 rows in shared
//     memory, online softmax (Dao et al. 2022, Algorithm 1); saves lse (b, heads, s) fp32.
//     Backward recomputes the probabilities: one kernel for dq (a warp per query row, which
//     also stores D_i = dO_i . o_i), one for dk and dv (a warp per key row over the queries of
//     every head in its group); no atomics, deterministic. Workspace: D, b heads s fp32.
//     Written for correctness first: plain fp32 FMAs, not tensor cores. 16-bit storage with
//     head_dim a multiple of 16 runs the tensor-core kernels instead (attention.cu), for
//     whole sequences.
//     REQUIRES: head_dim <= kFlashMaxHeadDim. dims.block is not used (the tile is fixed).
//   Sliding windows (dims.window > 0, cpu/attention.h allowed(i, j)): the materialized
//     softmax and the SIMT flash kernels mask keys outside the window; a windowed flash call
//     runs the SIMT kernels (the tensor-core ones mask causally only).
//   Value heads of another width (dims.v_dim, latent attention): v, o, dout and dv at that
//     width in both variants; such a flash call runs the SIMT kernels (both widths <=
//     kFlashMaxHeadDim).
//   Attention sinks (dims.sinks, host doubles, cpu/attention.h): the forwards read their
//     logits from `sinks`, a device copy of heads floats (bad_input without it), and count
//     one more logit of value 0 per row (the SIMT flash kernels, the materialized softmax;
//     never the tensor-core kernels); the backwards of q, k, v are unchanged (lse and probs
//     include the sink), and attention_sink_backward adds the sinks' gradient.
//   Context parallel (cpu/attention.h's slices: q_rows / q_offset / q_split / q_offset_hi,
//     and for flash k_rows / k_offset / k_split / k_offset_hi): the SIMT flash kernels
//     read positions as the CPU's do (doc ids then (b, s) of the whole sequence); a query
//     row that sees none of the keys held gets o = 0 and lse = -inf, and
//     attention_merge_partial combines a ring's partials. The materialized kernels take
//     whole sequences only (bad_input otherwise).
//
// Storage types S: float, bf16_t, f16_t; lse is fp32 (acc_t<S>). Device pointers; `ws`
// device workspace of attention_workspace_bytes(...). Enqueued on ctx.compute_stream().
// Thread-safety: as CudaContext.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "executor/cpu/attention.h"
#include "executor/cuda/context.h"
#include "executor/dtype.h"

namespace llmplan::exec::cuda {

using cpu::AttentionDims;
inline constexpr int64_t kFlashMaxHeadDim = 128;

template <class S>
Status attention_forward_materialized(CudaContext& ctx, const S* q, const S* k, const S* v, const int32_t* doc,
                                      S* o, S* probs, const AttentionDims& dims, std::span<std::byte> ws,
                                      const float* sinks = nullptr);
template <class S>
Status attention_backward_materialized(CudaContext& ctx, const S* q, const S* k, const S* v, const S* probs,
                                       const S* dout, S* dq, S* dk, S* dv, const AttentionDims& dims,
                                       std::span<std::byte> ws);

template <class S>
Status attention_forward_flash(CudaContext& ctx, const S* q, const S* k, const S* v, const int32_t* doc, S* o,
                               float* lse, const AttentionDims& dims, std::span<std::byte> ws, const float* sinks = nullptr);

// The sinks' gradient added into gsinks (heads, the gradient type G): -sum over rows of
// p_sink D, D = dout . o, p_sink = e^(sink_h - lse) from the flash lse (b, heads, sq) with
// the device sinks, or 1 - the row's sum of probs (b, heads, sq, s) when lse is null
// (cpu::attention_sink_backward, which returns doubles instead).
template <class S, class G>
Status attention_sink_backward(CudaContext& ctx, const S* o, const S* dout, const float* lse, const S* probs,
                               const AttentionDims& dims, const float* sinks, G* gsinks);
template <class S>
Status attention_backward_flash(CudaContext& ctx, const S* q, const S* k, const S* v, const int32_t* doc,
                                const S* o, const float* lse, const S* dout, S* dq, S* dk, S* dv,
                                const AttentionDims& dims, std::span<std::byte> ws);

// Two flash partials of the same queries over disjoint keys -> their attention over the
// union, in place in o and lse.  (cpu::attention_merge_partial)
template <class S>
Status attention_merge_partial(CudaContext& ctx, S* o, float* lse, const S* o_part, const float* lse_part,
                               const AttentionDims& dims);

// Device workspace bytes for storage `s`: the larger of the variant's forward and backward.
// Call it qualified (cuda::attention_workspace_bytes): argument-dependent lookup through
// cpu::AttentionDims also finds cpu::attention_workspace_bytes, of the same signature.
int64_t attention_workspace_bytes(DType s, const AttentionDims& dims, bool flash);

}  // namespace llmplan::exec::cuda
