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

}  // namespace llmplan::exec::cpu
