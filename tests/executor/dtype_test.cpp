// 16-bit float formats: known bit patterns (bf16 RNE, IEEE half from Python's struct 'e'),
// the portable scalar converters against the F16C/AVX2 bulk casts, and round trips.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "executor/cpu/elementwise.h"
#include "executor/dtype.h"

namespace llmplan::exec {
namespace {

uint16_t bf16_bits(float f) { return float_to_bf16(f).bits; }
uint16_t f16_bits(float f) { return float_to_f16(f).bits; }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(Bf16, KnownPatterns) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits(0.1f), 0x3DCD);  // 0x3DCCCCCD rounds up
  EXPECT_EQ(bf16_bits(-2.0f), 0xC000);
  EXPECT_EQ(bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_bits(from_bits(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(bf16_bits(from_bits(0x3F818000)), 0x3F82);  // tie, odd rounds up to even
  EXPECT_EQ(bf16_bits(from_bits(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(bf16_bits(from_bits(0x7F7FFFFF)), 0x7F80);  // max float rounds to inf
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(bf16_bits(from_bits(0x00000001)), 0x0000);  // smallest subnormal -> 0
  const uint16_t nan = bf16_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_t{nan})));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7F800001)))));  // sNaN stays NaN
  EXPECT_EQ(bf16_to_float(bf16_t{0x3F80}), 1.0f);
  EXPECT_EQ(bf16_to_float(bf16_t{0x3DCD}), from_bits(0x3DCD0000));
}

TEST(F16, KnownPatterns) {  // references: Python struct.pack('<e', v), IEEE 754 binary16
  EXPECT_EQ(f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f16_bits(0.1f), 0x2E66);
  EXPECT_EQ(f16_bits(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(f16_bits(-2.5f), 0xC100);
  EXPECT_EQ(f16_bits(65504.0f), 0x7BFF);    // max half
  EXPECT_EQ(f16_bits(65519.0f), 0x7BFF);    // below the tie
  EXPECT_EQ(f16_bits(65520.0f), 0x7C00);    // tie above max -> inf
  EXPECT_EQ(f16_bits(1e-5f), 0x00A8);       // subnormal: 167.77 * 2^-24
  EXPECT_EQ(f16_bits(0x1.0p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_bits(0x1.0p-25f), 0x0000);  // tie to even zero
  EXPECT_EQ(f16_bits(0x1.8p-25f), 0x0001);  // above the tie
  EXPECT_EQ(f16_bits(0x1.8p-24f), 0x0002);  // 1.5 ulp: tie, rounds to even 2
  EXPECT_EQ(f16_bits(0x1.ffcp-15f), 0x0400);  // largest subnormal + carry -> smallest normal
  EXPECT_EQ(f16_bits(0x1.0p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(f16_bits(1.0f + 0x1.0p-11f), 0x3C00);  // tie, even stays
  EXPECT_EQ(f16_bits(1.0f + 0x1.8p-10f), 0x3C02);  // tie, odd rounds up
  EXPECT_EQ(f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f16_bits(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f16_to_float(f16_t{0x0001}), 0x1.0p-24f);
  EXPECT_EQ(f16_to_float(f16_t{0x7BFF}), 65504.0f);
  EXPECT_EQ(f16_to_float(f16_t{0xC100}), -2.5f);
}

// Every 16-bit pattern: scalar decode equals the bulk (F16C / AVX2) decode, and non-NaN
// values survive decode + encode unchanged.
TEST(Float16Formats, AllPatternsRoundTripAndMatchBulk) {
  const int n = 65536;
  std::vector<f16_t> h(n);
  std::vector<bf16_t> b(n);
  for (int i = 0; i < n; ++i) h[i].bits = b[i].bits = static_cast<uint16_t>(i);
  std::vector<float> hf(n), bf(n);
  cpu::cast(h.data(), hf.data(), n);
  cpu::cast(b.data(), bf.data(), n);
  for (int i = 0; i < n; ++i) {
    const float hs = f16_to_float(h[i]), bs = bf16_to_float(b[i]);
    ASSERT_EQ(std::bit_cast<uint32_t>(hs), std::bit_cast<uint32_t>(hf[i])) << "f16 " << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(bs), std::bit_cast<uint32_t>(bf[i])) << "bf16 " << i;
    if (!std::isnan(hs)) {
      ASSERT_EQ(float_to_f16(hs).bits, i) << "f16 " << i;
    }
    if (!std::isnan(bs)) {
      ASSERT_EQ(float_to_bf16(bs).bits, i) << "bf16 " << i;
    }
  }
}

// A million float bit patterns spread over the whole range, plus the neighbours of every
// half-way point between f16 values: scalar encode equals the bulk (F16C / AVX2) encode.
TEST(Float16Formats, ScalarEncodeMatchesBulk) {
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4093) x.push_back(from_bits(static_cast<uint32_t>(b)));
  for (uint32_t h = 0; h < 0x7BFF; ++h) {  // ties between consecutive finite halves
    const float lo = f16_to_float(f16_t{static_cast<uint16_t>(h)});
    const float hi = f16_to_float(f16_t{static_cast<uint16_t>(h + 1)});
    const uint32_t mid = std::bit_cast<uint32_t>((lo + hi) / 2);  // exact in float
    for (uint32_t d : {mid - 1, mid, mid + 1}) {
      x.push_back(from_bits(d));
      x.push_back(-from_bits(d));
    }
  }
  const auto n = static_cast<int64_t>(x.size()) - 3;  // a length that leaves a scalar tail
  std::vector<f16_t> h(x.size());
  std::vector<bf16_t> b(x.size());
  cpu::cast(x.data(), h.data(), n);
  cpu::cast(x.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const auto idx = static_cast<size_t>(i);
    const uint32_t bits = std::bit_cast<uint32_t>(x[idx]);
    if (std::isnan(x[idx])) {
      EXPECT_TRUE(std::isnan(f16_to_float(h[idx])));
      EXPECT_TRUE(std::isnan(bf16_to_float(b[idx])));
      EXPECT_EQ(float_to_f16(x[idx]).bits, h[idx].bits) << std::hex << bits;  // payload as F16C
      EXPECT_EQ(float_to_bf16(x[idx]).bits, b[idx].bits) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(float_to_f16(x[idx]).bits, h[idx].bits) << std::hex << bits;
    ASSERT_EQ(float_to_bf16(x[idx]).bits, b[idx].bits) << std::hex << bits;
  }
}

TEST(Float16Formats, Sizes) {
  EXPECT_EQ(dtype_size(DType::bf16), 2);
  EXPECT_EQ(dtype_size(DType::f16), 2);
  EXPECT_EQ(dtype_size(DType::f32), 4);
  EXPECT_EQ(dtype_size(DType::f64), 8);
  EXPECT_EQ(dtype_size(DType::u8), 1);
  EXPECT_EQ(dtype_size(DType::i32), 4);
  EXPECT_EQ(sizeof(bf16_t), 2u);
  EXPECT_EQ(sizeof(f16_t), 2u);
}

}  // namespace
}  // namespace llmplan::exec
