#include "executor/cpu/nf4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "executor/cpu/kernel_util.h"
#include "executor/dtype.h"

namespace llmplan::exec::cpu {

int64_t nf4_blocks(int64_t n) { return (n + kNf4Block - 1) / kNf4Block; }
int64_t nf4_groups(int64_t n) { return (nf4_blocks(n) + kNf4Group - 1) / kNf4Group; }
int64_t nf4_bytes(int64_t n) { return (n + 1) / 2 + nf4_blocks(n) + 4 * nf4_groups(n); }

namespace {

// The index of the level nearest x in [-1, 1] (ties to the lower level).
uint8_t nearest_level(double x) {
  int best = 0;
  double d = std::fabs(x - kNf4Levels[0]);
  for (int i = 1; i < 16; ++i) {
    const double e = std::fabs(x - kNf4Levels[static_cast<size_t>(i)]);
    if (e < d) best = i, d = e;
  }
  return static_cast<uint8_t>(best);
}

}  // namespace

void nf4_quantize(const double* w, int64_t n, uint8_t* q) {
  const int64_t blocks = nf4_blocks(n), groups = nf4_groups(n);
  uint8_t* packed = q;
  uint8_t* codes = q + (n + 1) / 2;
  uint8_t* scales = codes + blocks;  // fp32, unaligned: memcpy
  std::fill(packed, packed + (n + 1) / 2, uint8_t{0});
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t b0 = g * kNf4Group, b1 = std::min(blocks, b0 + kNf4Group);
    float scale = 0;  // the group's largest absmax
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) scale = std::max(scale, static_cast<float>(std::fabs(w[i])));
    std::memcpy(scales + 4 * g, &scale, 4);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kNf4Block, i1 = std::min(n, i0 + kNf4Block);
      double absmax = 0;
      for (int64_t i = i0; i < i1; ++i) absmax = std::max(absmax, std::fabs(w[i]));
      codes[b] = scale > 0 ? static_cast<uint8_t>(std::lround(255.0 * absmax / scale)) : uint8_t{0};
      for (int64_t i = i0; i < i1; ++i) {
        const uint8_t level = absmax > 0 ? nearest_level(w[i] / absmax) : uint8_t{7};  // level 7 is 0
        packed[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? level : level << 4);
      }
    }
  }
}

template <class S>
void nf4_dequantize(const uint8_t* q, int64_t n, S* w) {
  const int64_t blocks = nf4_blocks(n);
  const uint8_t* packed = q;
  const uint8_t* codes = q + (n + 1) / 2;
  const uint8_t* scales = codes + blocks;
  for (int64_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, scales + 4 * (b / kNf4Group), 4);
    const double absmax = codes[b] * static_cast<double>(scale) / 255.0;
    for (int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
      const int level = i % 2 == 0 ? packed[i / 2] & 0xF : packed[i / 2] >> 4;
      w[i] = from_double<S>(kNf4Levels[static_cast<size_t>(level)] * absmax);
    }
  }
}

#define INST(S) template void nf4_dequantize<S>(const uint8_t*, int64_t, S*);
LLMPLAN_FOR_STORAGE(INST)
#undef INST

}  // namespace llmplan::exec::cpu
