// Cross-entropy over the vocabulary on the CPU, from logits and integer targets.
//
//   loss = (1 / denom) * sum over rows r with targets[r] != -1 of (lse_r - logits[r, t_r])
//   lse_r = log sum_j exp(logits[r, j])   (max-shifted, in acc_t<S>: fp32 or fp64)
//
// denom defaults to the number of non-ignored rows (a mean); pass the global count when a
// batch is split into micro-batches or data-parallel shards so that the pieces add up to
// the global mean. With no counted rows the loss and the gradient are 0. Nothing is saved
// between the passes: backward recomputes each row's log-sum-exp from the logits.
//
// Storage types S: float, double, bf16_t, f16_t. REQUIRES: targets[r] == -1 or in [0, v).
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

inline constexpr int32_t kIgnoreIndex = -1;

// logits (n, v), targets (n) -> the loss (a scalar, accumulated in double).
template <class S>
double cross_entropy_forward(const S* logits, const int32_t* targets, int64_t n, int64_t v,
                             double denom = 0);

// logits (n, v), targets (n), dloss (the loss's upstream gradient, e.g. the fp16 loss
// scale) -> dlogits (n, v) = dloss / denom * (softmax(logits) - onehot(t)); ignored rows 0.
// dlogits may alias logits (the gradient overwrites the logits buffer in place).
template <class S>
void cross_entropy_backward(const S* logits, const int32_t* targets, S* dlogits, int64_t n,
                            int64_t v, double dloss, double denom = 0);

// ---- vocabulary-parallel cross-entropy (Megatron-LM's VocabParallelCrossEntropy)
//
// A tensor-parallel rank holds the logits z (n, v) of vocabulary columns [v0, v0 + v), of
// which the first `real` are tokens (the rest pad the vocabulary to a multiple of tp and
// count for nothing). The loss needs three row statistics over every rank; the caller
// exchanges them over the TP group between the passes, so every rank gets the whole loss:
//   1. vocab_parallel_ce_max:  mx (n) = each row's max over this rank's real columns
//                              (-inf with none)          -> all-gather mx into all (tp, n)
//   2. vocab_parallel_ce_sums: mx (n) = the max over the ranks (all); sums (2, n) = the sum
//                              of exp(z - mx) over real columns, and the target's logit
//                              where this rank holds the target (else 0) -> all-reduce sums
//   3. vocab_parallel_ce_loss: the sum over counted rows of log(sums) + mx - target logit,
//                              and the number of counted rows (targets != -1);
//      vocab_parallel_ce_backward: z = dscale * (softmax - onehot) in place, 0 on ignored
//                              rows and padded columns (dscale = dloss / denom).
// A: float or double (the loss's accumulation type). REQUIRES: 0 <= real <= v; mx, all
// and sums do not overlap z.
struct VocabCeLoss {
  double sum = 0;       // over counted rows of (lse - target logit)
  int64_t counted = 0;  // rows whose target is not kIgnoreIndex
};
template <class A>
void vocab_parallel_ce_max(const A* z, int64_t n, int64_t v, int64_t real, A* mx);
template <class A>
void vocab_parallel_ce_sums(const A* z, const int32_t* targets, const A* all, int tp, int64_t n, int64_t v,
                            int64_t real, int64_t v0, A* mx, A* sums);
template <class A>
VocabCeLoss vocab_parallel_ce_loss(const int32_t* targets, const A* mx, const A* sums, int64_t n);
template <class A>
void vocab_parallel_ce_backward(A* z, const int32_t* targets, const A* mx, const A* sums, int64_t n, int64_t v,
                                int64_t real, int64_t v0, double dscale);

}  // namespace llmplan::exec::cpu
