// Materialised causal attention with dropout on the probabilities (GPT's attn_pdrop), on
// the CPU. The fused ops in attention.h have no dropout inside; this variant inserts it
// between the softmax and the PV product, as GPT-2 (HF GPT2Attention) does:
//
//   P = softmax(scale q k^T, causal + document mask)      saved: probs (b, heads, s, s)
//   D = P * mask / (1 - p),  mask[i] = (u_i >= p)           saved: mask (u8), dropped D
//   o = D v
//
// u_i = dropout_uniform(seed, i) with i the element's index in the whole sequence's
// (b, heads, s, s) probs tensor (query row query_position(dims, r) for local row r), so a
// recomputation with the same seed reproduces the mask bit for bit, and a slice of the
// queries (AttentionDims::q_rows, context parallel) draws the whole run's mask rows.
// Backward (from the saved P, mask, D and q, k, v):
//   dV += D^T dO;  dD = dO V^T;  dP = dD * mask / (1 - p);  dS = P (dP - rowsum(P dP));
//   dQ = scale dS K;  dK += scale dS^T Q.
//
// Storage types S: float, double, bf16_t, f16_t (math in acc_t<S>). `ws`: 64-byte aligned,
// attention_dropout_workspace_bytes(...) bytes. REQUIRES: kv_heads divides heads, 0 <= p < 1.
// Thread-safety: pure functions of their arguments; OpenBLAS threads the GEMMs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "executor/cpu/attention.h"
#include "executor/dtype.h"

namespace llmplan::exec::cpu {

// q (b, sq, heads, d), k, v (b, s, kv_heads, d), doc (b, s) or nullptr -> o (b, sq, heads, d),
// probs, dropped (b, heads, sq, s) in S, mask (b, heads, sq, s) u8 (sq: query_rows(dims)).
template <class S>
void attention_forward_dropout(const S* q, const S* k, const S* v, const int32_t* doc, S* o, S* probs,
                               uint8_t* mask, S* dropped, const AttentionDims& dims, double p, uint64_t seed,
                               std::span<std::byte> ws);

// Saved q, k, v, probs, mask, dropped; dout -> dq, dk, dv (overwritten).
template <class S>
void attention_backward_dropout(const S* q, const S* k, const S* v, const S* probs, const uint8_t* mask,
                                const S* dropped, const S* dout, S* dq, S* dk, S* dv, const AttentionDims& dims,
                                double p, std::span<std::byte> ws);

int64_t attention_dropout_workspace_bytes(DType s, const AttentionDims& dims);

}  // namespace llmplan::exec::cpu
