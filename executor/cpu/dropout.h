// Dropout on the CPU with a 1-byte keep mask and a counter-based RNG.
//
// Element i keeps with probability 1 - p: it keeps when the uniform draw
// u = dropout_uniform(seed, offset + i) in [0, 1) is >= p. The draw is a pure function of
// (seed, index) -- the index-th output of a splitmix64 stream started at seed -- so a mask
// is reproducible from the seed alone, independent of threads, and a slice of a larger
// tensor (tensor-parallel shard, micro-batch) gets the same bits as the whole when given
// its element offset. Kept elements are scaled by 1 / (1 - p) ("inverted dropout").
//
// Storage types S: float, double, bf16_t, f16_t. REQUIRES: 0 <= p < 1. Outputs may alias
// inputs.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

// x (n) -> y (n) = x * mask / (1 - p), mask (n) u8 in {0, 1} (saved for backward).
template <class S>
void dropout_forward(const S* x, S* y, uint8_t* mask, int64_t n, double p, uint64_t seed,
                     uint64_t offset = 0);

// dy (n), saved mask (n) -> dx (n) = dy * mask / (1 - p).
template <class S>
void dropout_backward(const S* dy, const uint8_t* mask, S* dx, int64_t n, double p);

// splitmix64 output number `index` of the stream seeded with `seed`.
uint64_t splitmix64_at(uint64_t seed, uint64_t index);
// Uniform in [0, 1) with 53 random bits, from splitmix64_at.
double dropout_uniform(uint64_t seed, uint64_t index);

}  // namespace llmplan::exec::cpu
