// Embedding lookups on the CPU: token embeddings (GPT, Llama) and learned position
// embeddings (GPT) are the same gather with different ids.
//
// Storage types S: float, double, bf16_t, f16_t; table gradients G: S, or float for 16-bit
// S. ids are int32; REQUIRES 0 <= ids[i] < rows of the table (checked by assert only:
// validate token files where they are read). With 16-bit G every scatter-add rounds once,
// so keep embedding gradients in fp32 when a token repeats often.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

// ids (n), table (rows, h) -> out (n, h) = table[ids]; with accumulate, out += table[ids]
// (GPT: token lookup, then position lookup with accumulate).
template <class S>
void embedding_forward(const int32_t* ids, const S* table, S* out, int64_t n, int64_t h,
                       bool accumulate = false);

// ids (n), dout (n, h) -> dtable (rows, h) += scatter-add of dout rows at ids.
template <class S, class G>
void embedding_backward(const int32_t* ids, const S* dout, G* dtable, int64_t n, int64_t h);

// Vocabulary-parallel (Megatron's VocabParallelEmbedding): the table holds only rows
// [v0, v0 + rows) of the vocabulary, a tensor-parallel rank's shard. out (n, h): row i =
// table[ids[i] - v0] where ids[i] is in the shard, zeros where another rank holds it (the
// ranks' partial rows are then summed over TP).
template <class S>
void embedding_forward_shard(const int32_t* ids, const S* table, S* out, int64_t n, int64_t h, int64_t v0,
                             int64_t rows);
// dtable (rows, h) += dout rows at ids[i] - v0 for the ids in the shard; the rest skipped.
template <class S, class G>
void embedding_backward_shard(const int32_t* ids, const S* dout, G* dtable, int64_t n, int64_t h, int64_t v0,
                              int64_t rows);

// positions (b, s) = 0, 1, ..., s-1 for every sequence: the ids of learned positions.
void fill_positions(int32_t* positions, int64_t b, int64_t s);

}  // namespace llmplan::exec::cpu
