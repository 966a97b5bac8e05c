// Row-reduction CUDA ops: LayerNorm and RMSNorm (backward from the saved input only, mean
// and rstd recomputed), cross-entropy over (n, v) with ignore index -1, and the column sums
// behind bias and norm weight gradients. Each mirrors the CPU op of the same name
// (executor/cpu/norm.h, cross_entropy.h): same arguments after the context, same overwrite
// or accumulate semantics.
//
// Reductions run in a fixed order (block trees, per-chunk partial sums added in chunk
// order), so results are deterministic run to run; they differ from the CPU's sequential
// sums only by rounding. Weight-gradient sums are kept in fp32 and rounded once into G.
//
// Storage types S: float, bf16_t, f16_t; gradient types G: S or float. Device pointers;
// `ws` is device workspace of at least the *_workspace_bytes(...) asked for (256-byte
// aligned, as the allocator's blocks are), scratch only. Enqueued on ctx.compute_stream().
// Thread-safety: as CudaContext.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "executor/cuda/context.h"
#include "executor/dtype.h"

namespace llmplan::exec::cuda {

// x (n, h), w (h), b (h) or nullptr -> y (n, h); y may alias x.  (cpu::layernorm_forward)
template <class S>
Status layernorm_forward(CudaContext& ctx, const S* x, const S* w, const S* b, S* y, int64_t n, int64_t h,
                         double eps);
// -> dx (n, h) overwritten (or += with accumulate_dx), dw (h) +=, db (h) += (nullptr skips).
template <class S, class G>
Status layernorm_backward(CudaContext& ctx, const S* x, const S* w, const S* dy, S* dx, G* dw, G* db,
                          int64_t n, int64_t h, double eps, bool accumulate_dx, std::span<std::byte> ws);

template <class S>
Status rmsnorm_forward(CudaContext& ctx, const S* x, const S* w, S* y, int64_t n, int64_t h, double eps);
template <class S, class G>
Status rmsnorm_backward(CudaContext& ctx, const S* x, const S* w, const S* dy, S* dx, G* dw, int64_t n,
                        int64_t h, double eps, bool accumulate_dx, std::span<std::byte> ws);

// Workspace of the norm backwards: per-row statistics and per-chunk column sums.
int64_t norm_workspace_bytes(int64_t n, int64_t h);

// logits (n, v), targets (n) -> *loss (one double on the device) = the mean (or sum/denom)
// of lse - logit[target] over rows whose target is not -1; 0 with no counted rows.
// (cpu::cross_entropy_forward, which returns the value instead)
template <class S>
Status cross_entropy_forward(CudaContext& ctx, const S* logits, const int32_t* targets, double* loss,
                             int64_t n, int64_t v, double denom, std::span<std::byte> ws);
// dlogits (n, v) = dloss / denom (softmax - onehot), ignored rows 0; dlogits may alias
// logits.  (cpu::cross_entropy_backward)
template <class S>
Status cross_entropy_backward(CudaContext& ctx, const S* logits, const int32_t* targets, S* dlogits,
                              int64_t n, int64_t v, double dloss, double denom, std::span<std::byte> ws);
int64_t cross_entropy_workspace_bytes(int64_t n);

// Vocabulary-parallel cross-entropy, the passes of cpu/cross_entropy.h (the caller
// all-gathers mx and all-reduces sums over TP between them). A: float (the GPU's logits
// are cast to fp32 for the loss). One block per row, fixed-order reductions.
template <class A>
Status vocab_parallel_ce_max(CudaContext& ctx, const A* z, int64_t n, int64_t v, int64_t real, A* mx);
template <class A>
Status vocab_parallel_ce_sums(CudaContext& ctx, const A* z, const int32_t* targets, const A* all, int tp, int64_t n,
                              int64_t v, int64_t real, int64_t v0, A* mx, A* sums);
// out (two doubles on the device) = the sum over counted rows of log(sums) + mx - target
// logit, and the number of counted rows.  (cpu::vocab_parallel_ce_loss, which returns them)
template <class A>
Status vocab_parallel_ce_loss(CudaContext& ctx, const int32_t* targets, const A* mx, const A* sums, int64_t n,
                              double* out);
template <class A>
Status vocab_parallel_ce_backward(CudaContext& ctx, A* z, const int32_t* targets, const A* mx, const A* sums, int64_t n,
                                  int64_t v, int64_t real, int64_t v0, double dscale);

// db (out) += column sums of dy (n, out), in fp32, rounded once (the bias gradient).
template <class S, class G>
Status column_sums_accumulate(CudaContext& ctx, const S* dy, G* db, int64_t n, int64_t out,
                              std::span<std::byte> ws);
int64_t column_sums_workspace_bytes(int64_t n, int64_t out);

}  // namespace llmplan::exec::cuda
