// The routing moves of a mixture-of-experts MLP (executor/model/moe.h) on the CPU:
// the router's softmax, the dispatch of token rows into the experts' capacity rows, the
// combine back (gated) and the combine's backward. Routing itself -- top-k, gates and the
// capacity slots -- is decided on the host from the probabilities and given here as rows:
// route at = t * k + j (choice j of token t) lands in row rows[at] of the (E, C, h) buffer,
// or nowhere when rows[at] == -1 (dropped past the capacity).
//
// Storage types S: float, double, bf16_t, f16_t; A = acc_t<S> (fp32; fp64 for double):
// probabilities, gates and sums. Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

// probs (T, E) = softmax of each row of logits (T, E), max-shifted.
template <class S>
void moe_router_softmax(const S* logits, acc_t<S>* probs, int64_t T, int64_t E);

// buf[rows[at]] = x[at / k] (h wide) for every kept route; the buffer's other rows are
// untouched (the caller zeroes it: padding rows stay 0).
template <class S>
void moe_dispatch(const S* x, const int32_t* rows, S* buf, int64_t T, int k, int64_t h);

// out (T, h): row t = sum over its kept routes of gate[at] buf[rows[at]] (gates nullptr:
// weight 1, the dispatch's gradient), summed in A in route order, rounded once.
template <class S>
void moe_combine(const S* buf, const int32_t* rows, const acc_t<S>* gates, S* out, int64_t T, int k, int64_t h);

// The gated combine's backward, dy (T, h) the output's gradient: for each kept route
// dbuf[rows[at]] = gate[at] dy[t] and dgate[at] = dy[t] . buf[rows[at]]; dropped routes get
// dgate 0 (dbuf's other rows untouched).
template <class S>
void moe_combine_backward(const S* dy, const S* buf, const int32_t* rows, const acc_t<S>* gates, S* dbuf,
                          acc_t<S>* dgate, int64_t T, int k, int64_t h);

}  // namespace llmplan::exec::cpu
