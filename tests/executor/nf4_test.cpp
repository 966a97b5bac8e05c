// QLoRA's NF4 storage (cpu/nf4.h): the 16 levels against their construction from the
// normal distribution's quantiles (Dettmers et al. 2023, sec. 3 and appendix E, as
// bitsandbytes' create_normal_map builds them), the byte count against the closed form,
// and every dequantized weight equal to the nearest level times its block's
// double-quantized absmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "executor/cpu/nf4.h"
#include "executor/dtype.h"
#include "test_util.h"

namespace llmplan::exec {
namespace {

// The standard normal's quantile by bisection on its CDF, 0.5 erfc(-x / sqrt 2).
double normal_quantile(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// NF4 (Dettmers et al. 2023): 8 positive levels from the quantiles at 8 evenly spaced
// probabilities from `offset` down to 1/2 (its last, 0, dropped), 7 negative ones likewise
// from 7 (for an exact zero between them), and 0; scaled so the largest magnitude is 1.
// offset = (1 - 1/(2 * 15) + 1 - 1/(2 * 16)) / 2 = 0.9677083 (bitsandbytes create_normal_map).
TEST(Nf4, LevelsAreTheNormalQuantileConstruction) {
  const double offset = 0.9677083;
  std::vector<double> v;
  for (int i = 0; i < 8; ++i) v.push_back(normal_quantile(offset + (0.5 - offset) * i / 8.0));  // linspace(offset, 0.5, 9)[:-1]
  for (int i = 0; i < 7; ++i) v.push_back(-normal_quantile(offset + (0.5 - offset) * i / 7.0));  // linspace(offset, 0.5, 8)[:-1]
  v.push_back(0.0);
  double mx = 0;
  for (double x : v) mx = std::max(mx, std::fabs(x));
  for (double& x : v) x /= mx;
  std::sort(v.begin(), v.end());
  ASSERT_EQ(v.size(), cpu::kNf4Levels.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(cpu::kNf4Levels[i], v[i], 1e-6) << "level " << i;
  EXPECT_EQ(cpu::kNf4Levels[7], 0.0f);
}

// n / 2 + n / 64 + 4 per 256 blocks: 4.127 bits a weight as n grows (the planner's
// kNf4BytesPerParam); ragged tails round up.
TEST(Nf4, BytesAreTheClosedForm) {
  EXPECT_EQ(cpu::nf4_bytes(64), 32 + 1 + 4);
  EXPECT_EQ(cpu::nf4_bytes(65), 33 + 2 + 4);
  EXPECT_EQ(cpu::nf4_bytes(64 * 256), 8192 + 256 + 4);
  EXPECT_EQ(cpu::nf4_bytes(64 * 256 + 1), 8193 + 257 + 8);
  const int64_t n = int64_t{4096} * 4096;
  EXPECT_NEAR(static_cast<double>(cpu::nf4_bytes(n)) / n, (4.0 + 8.0 / 64 + 32.0 / (64 * 256)) / 8, 1e-12);
}

// Random weights (a ragged last block and group): each dequantized value is a level times
// its block's absmax as read back from the 8-bit code, that level is the nearest to w / absmax,
// and the read-back absmax is within half a code step of the true one.
TEST(Nf4, DequantizedWeightsAreTheNearestLevelTimesTheBlockAbsmax) {
  testing::Rng rng(testing::test_seed());
  const int64_t n = 64 * 300 + 17;
  std::vector<double> w = rng.vec(n, -0.05, 0.05);
  w[100] = 0.5;  // one block with an outlier: its neighbours' codes are coarse
  std::vector<uint8_t> q(static_cast<size_t>(cpu::nf4_bytes(n)));
  cpu::nf4_quantize(w.data(), n, q.data());
  std::vector<double> back(static_cast<size_t>(n));
  cpu::nf4_dequantize<double>(q.data(), n, back.data());
  std::vector<float> back32(static_cast<size_t>(n));
  cpu::nf4_dequantize<float>(q.data(), n, back32.data());
  const int64_t blocks = cpu::nf4_blocks(n);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i0 = b * 64, i1 = std::min(n, i0 + 64);
    double absmax = 0, group_max = 0;
    for (int64_t i = i0; i < i1; ++i) absmax = std::max(absmax, std::fabs(w[i]));
    for (int64_t i = (b / 256) * 256 * 64; i < std::min(n, (b / 256 + 1) * 256 * 64); ++i) group_max = std::max(group_max, std::fabs(w[i]));
    float scale;
    std::memcpy(&scale, q.data() + (n + 1) / 2 + blocks + 4 * (b / 256), 4);
    EXPECT_EQ(scale, static_cast<float>(group_max));
    const double read = q[static_cast<size_t>((n + 1) / 2 + b)] * static_cast<double>(scale) / 255.0;
    EXPECT_LE(std::fabs(read - absmax), 0.5 * scale / 255.0 + 1e-12) << "block " << b;
    for (int64_t i = i0; i < i1; ++i) {
      int nearest = 0;
      for (int k = 1; k < 16; ++k)
        if (std::fabs(w[i] / absmax - cpu::kNf4Levels[k]) < std::fabs(w[i] / absmax - cpu::kNf4Levels[nearest])) nearest = k;
      EXPECT_DOUBLE_EQ(back[static_cast<size_t>(i)], static_cast<double>(cpu::kNf4Levels[nearest]) * read) << "weight " << i;
      EXPECT_EQ(back32[static_cast<size_t>(i)], static_cast<float>(back[static_cast<size_t>(i)]));
    }
  }
}

}  // namespace
}  // namespace llmplan::exec
