// Causal self-attention core on the CPU, with grouped-query attention (GQA) and an
// optional document mask for packed sequences.
//
//   o[b, i, h] = sum_j P[b, h, i, j] v[b, j, h / g],  g = heads / kv_heads
//   P[b, h, i, :] = softmax_j (scale * q[b, i, h] . k[b, j, h / g])  over allowed j
//     and, with sinks (dims.sinks, attention sinks: gpt-oss model card, arXiv 2508.10925,
//     sec. 2; transformers GptOssAttention), one more logit sink[h] per row whose value is
//     zero: P[b, h, i, j] = e^score_ij / (e^sink_h + sum_allowed e^score), so a row sums to
//     1 - p_sink. lse and probs include it; the backward of q, k, v is unchanged (the sink's
//     value is 0), and attention_sink_backward gives the sinks' gradient.
//   allowed(i, j): j <= i, i - j < window when dims.window > 0 (sliding-window attention:
//     the window most recent positions, the query's own included; Beltagy et al. 2020,
//     Longformer, as transformers' sliding_window), and doc[b, j] == doc[b, i] when doc ids
//     are given
//
// Queries may be a slice of the sequence, against all s keys (context parallel with gathered
// keys and values, where each rank keeps its own queries): q_rows rows, row i at sequence
// position pos(i) = q_offset + i for i < q_split and q_offset_hi + (i - q_split) from
// q_split on (two chunks: the load-balanced CP layout, which gives rank r chunks r and
// 2cp-1-r of 2cp). Every allowed(i, j) above reads pos(i) for i. Keys past the last query's
// position are masked for every query and skipped; their dk and dv rows are 0. Defaults
// (q_rows 0, q_offset 0, q_split 0): the whole sequence, ordinary causal self-attention.
//
// The flash variant also takes keys and values that are a slice of the sequence (context
// parallel as a ring, where each step brings one rank's keys): k_rows rows, at positions
// given by k_offset, k_split and k_offset_hi as for the queries (two chunks). doc then
// still holds the whole sequence's ids (b, s), read at positions. A query row with no
// allowed key among them gets o = 0 and lse = -inf, which attention_merge_partial weighs
// as nothing. Defaults (k_rows 0): the keys are the whole sequence.
//
// Query head h reads key/value head h / g (as Hugging Face repeat_kv). Two variants with
// the same results:
//   materialized: forward saves probs P (b, heads, s, s) in the storage type (0 where not
//     allowed); backward reads P and needs no softmax recomputation.
//   flash: forward saves only the output o and the per-row log-sum-exp of the scaled
//     scores, lse (b, heads, s) in acc_t<S> (fp32; fp64 for double); backward recomputes
//     the scores block by block (dims.block rows and columns at a time).
// Both backwards also need q, k, v (the caller keeps them) and overwrite dq, dk, dv.
//
// Storage types S: float, double, bf16_t, f16_t; math in acc_t<S>, GEMMs through CBLAS on
// one (batch, head) at a time gathered into contiguous workspace. `ws` must be 64-byte
// aligned with attention_workspace_bytes(...) bytes (a few (s, d) panels plus an (s, s)
// matrix for the materialized variant or two (block, block) tiles for flash).
// REQUIRES: kv_heads divides heads; every doc id run is contiguous in practice (the mask
// itself only compares ids).
// Thread-safety: pure functions of their arguments; OpenBLAS threads the GEMMs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

struct AttentionDims {
  int64_t b = 0;          // sequences in the micro-batch
  int64_t s = 0;          // sequence length
  int64_t heads = 0;      // query heads a
  int64_t kv_heads = 0;   // key/value heads a_kv (== heads without GQA)
  int64_t head_dim = 0;   // d: of queries and keys
  double scale = 0;       // score scale; 0 means 1 / sqrt(d). Default: 0
  int64_t block = 64;     // flash tile size (query and key rows). Default: 64
  int64_t q_rows = 0;     // query rows per sequence; 0 means s. Default: 0
  int64_t q_offset = 0;   // sequence position of query row 0. Default: 0
  int64_t q_split = 0;    // rows of the first chunk; 0: one chunk of q_rows rows. Default: 0
  int64_t q_offset_hi = 0;  // sequence position of row q_split (> the first chunk's). Default: 0
  int64_t k_rows = 0;     // flash only: key rows per sequence; 0 means s. Default: 0
  int64_t k_offset = 0;   // sequence position of key row 0. Default: 0
  int64_t k_split = 0;    // rows of the first key chunk; 0: one chunk of k_rows rows. Default: 0
  int64_t k_offset_hi = 0;  // sequence position of key row k_split. Default: 0
  int64_t window = 0;     // sliding window in positions (> 0), or 0: full causal. Default: 0
  // The heads' sink logits (heads values), or empty: none. A flash call over part of the keys
  // (a CP ring step) counts them only if given; give them to one step. Default: empty
  std::span<const double> sinks{};
  // Width of a value (and output) head; 0 means head_dim. Multi-head latent attention
  // (DeepSeek-V2, arXiv 2405.04434) has 192-wide queries and keys and 128-wide values.
  // Below, the v, o, dout and dv shapes' last dimension is this dv. Default: 0
  int64_t v_dim = 0;
};

// dv: the width of a value head (dims.v_dim, or head_dim when 0).
inline int64_t value_dim(const AttentionDims& dm) { return dm.v_dim > 0 ? dm.v_dim : dm.head_dim; }

// sq: the query rows per sequence (dims.q_rows, or s when 0). Below, shapes with sq are
// per query row, shapes with s per key.
inline int64_t query_rows(const AttentionDims& dm) { return dm.q_rows > 0 ? dm.q_rows : dm.s; }
// The sequence position of query row i (increasing in i).
inline int64_t query_position(const AttentionDims& dm, int64_t i) {
  return dm.q_split > 0 && i >= dm.q_split ? dm.q_offset_hi + (i - dm.q_split) : dm.q_offset + i;
}

// q (b, sq, heads, d), k (b, s, kv_heads, d), v (b, s, kv_heads, dv), doc (b, s, of the
// keys) or nullptr -> o (b, sq, heads, dv), probs (b, heads, sq, s).
template <class S>
void attention_forward_materialized(const S* q, const S* k, const S* v, const int32_t* doc, S* o,
                                    S* probs, const AttentionDims& dims, std::span<std::byte> ws);

// q, k, v, probs as saved; dout (b, sq, heads, dv) -> dq (b, sq, heads, d), dk (b, s,
// kv_heads, d), dv (b, s, kv_heads, dv): the gradient through these queries. (The mask is already in probs.)
template <class S>
void attention_backward_materialized(const S* q, const S* k, const S* v, const S* probs,
                                     const S* dout, S* dq, S* dk, S* dv, const AttentionDims& dims,
                                     std::span<std::byte> ws);

// Key rows per sequence in k and v (dims.k_rows, or s when 0).
inline int64_t key_rows_held(const AttentionDims& dm) { return dm.k_rows > 0 ? dm.k_rows : dm.s; }

// q, k, v, doc as above -> o (b, sq, heads, dv), lse (b, heads, sq).
template <class S>
void attention_forward_flash(const S* q, const S* k, const S* v, const int32_t* doc, S* o,
                             acc_t<S>* lse, const AttentionDims& dims, std::span<std::byte> ws);

// q, k, v, doc, o, lse as saved; dout -> dq, dk, dv (shapes as above).
template <class S>
void attention_backward_flash(const S* q, const S* k, const S* v, const int32_t* doc, const S* o,
                              const acc_t<S>* lse, const S* dout, S* dq, S* dk, S* dv,
                              const AttentionDims& dims, std::span<std::byte> ws);

// Two flash partials of the same queries over disjoint keys -> their attention over the
// union: lse' = log(e^lse + e^lse_part), o' = o e^(lse - lse') + o_part e^(lse_part - lse')
// (o, lse updated in place; shapes as attention_forward_flash's; a row at -inf in both
// stays o = 0, lse = -inf).
template <class S>
void attention_merge_partial(S* o, acc_t<S>* lse, const S* o_part, const acc_t<S>* lse_part, const AttentionDims& dims);

// The sinks' gradient, added into dsinks (heads): dL/dsink_h = -sum over rows of p_sink D,
// D = dout . o (the row's dP . P over its keys), p_sink = e^(sink_h - lse) from the flash
// lse (b, heads, sq), or 1 - the row's sum of probs (b, heads, sq, s) when lse is null.
// o, dout (b, sq, heads, dv) as the forward's.
template <class S>
void attention_sink_backward(const S* o, const S* dout, const acc_t<S>* lse, const S* probs, const AttentionDims& dims,
                             double* dsinks);

// Workspace bytes for storage `s` (f32 or f64 math width follows it); the larger of the
// variant's forward and backward needs.
int64_t attention_workspace_bytes(DType s, const AttentionDims& dims, bool flash);

}  // namespace llmplan::exec::cpu
