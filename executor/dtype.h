// Element types of executor tensors and the 16-bit float formats.
//
// DType names what a tensor stores; bf16_t and f16_t are 16-bit storage types (no
// arithmetic: convert to float, compute, convert back). The scalar converters here are
// portable integer code, exact and usable from any translation unit: float -> bf16 rounds
// to nearest even (NaN stays a quiet NaN), float -> f16 is IEEE binary16 with round to
// nearest even, overflow to infinity and subnormals; NaNs come out quiet with their top
// payload bits, bit for bit as the F16C instructions do.
// Bulk conversions with F16C live in cpu/elementwise.h (cast).
//
// acc_t<S> is the type math runs in for storage type S: double for double, float for
// everything else ("fp32 accumulation").
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace llmplan::exec {

enum class DType : uint8_t { f32, f64, bf16, f16, u8, i32 };
enum class Device : uint8_t { cpu, cuda };

struct bf16_t { uint16_t bits = 0; };  // bfloat16: 1 sign, 8 exponent, 7 mantissa bits
struct f16_t { uint16_t bits = 0; };   // IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits

// Bytes per element: f32 4, f64 8, bf16 2, f16 2, u8 1, i32 4.
constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}
const char* to_string(DType t);    // "f32", "f64", "bf16", "f16", "u8", "i32"
const char* to_string(Device d);   // "cpu", "cuda"

// The DType of a C++ element type, e.g. dtype_of<bf16_t> == DType::bf16.
template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<bf16_t> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<f16_t> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::i32; };
template <class T> inline constexpr DType dtype_of = DTypeOf<T>::value;

template <class S> using acc_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

// ---------------------------------------------------------------- bf16

inline float bf16_to_float(bf16_t h) { return std::bit_cast<float>(uint32_t{h.bits} << 16); }

inline bf16_t float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return {static_cast<uint16_t>((x >> 16) | 0x0040u)};  // quiet NaN
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest, ties to even; overflow carries to inf
  return {static_cast<uint16_t>(x >> 16)};
}

// ---------------------------------------------------------------- f16

inline float f16_to_float(f16_t h) {
  const uint32_t sign = uint32_t{h.bits & 0x8000u} << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1Fu;
  const uint32_t man = h.bits & 0x3FFu;
  if (exp == 0x1F) {  // inf; NaN made quiet, as F16C does
    return std::bit_cast<float>(sign | 0x7F800000u | (man != 0 ? 0x400000u : 0u) | (man << 13));
  }
  if (exp == 0) {                                                                   // zero, subnormal
    const float v = static_cast<float>(man) * 0x1.0p-24f;                           // exact
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));  // rebias 15 -> 127
}

inline f16_t float_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  auto out = [&](uint32_t v) { return f16_t{static_cast<uint16_t>(sign | v)}; };
  if (ax > 0x7F800000u) return out(0x7E00u | ((ax >> 13) & 0x3FFu));  // NaN: quiet, top payload
  if (ax >= 0x477FF000u) return out(0x7C00u);  // |f| >= 65520 (tie above 65504) -> inf
  if (ax >= 0x38800000u) {                     // normal half: |f| >= 2^-14
    uint32_t r = ax - 0x38000000u;             // rebias exponent 127 -> 15
    r += 0xFFFu + ((r >> 13) & 1u);            // 23 -> 10 mantissa bits, ties to even
    return out(r >> 13);
  }
  if (ax <= 0x33000000u) return out(0);  // |f| <= 2^-25: rounds to zero (the tie goes to even 0)
  // Subnormal half: value = q * 2^-24 with q = mantissa * 2^(e - 126), rounded to even.
  const uint32_t man = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - (ax >> 23);  // 14..24
  uint32_t q = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q may become 0x400: the smallest normal
  return out(q);
}

// ---------------------------------------------------------------- one element, host side

// A storage element as a double, and a double rounded into a storage type (16-bit: to
// nearest even through float, as above).
inline double to_double(float x) { return x; }
inline double to_double(double x) { return x; }
inline double to_double(bf16_t x) { return bf16_to_float(x); }
inline double to_double(f16_t x) { return f16_to_float(x); }
template <class T> T from_double(double x);
template <> inline float from_double<float>(double x) { return static_cast<float>(x); }
template <> inline double from_double<double>(double x) { return x; }
template <> inline bf16_t from_double<bf16_t>(double x) { return float_to_bf16(static_cast<float>(x)); }
template <> inline f16_t from_double<f16_t>(double x) { return float_to_f16(static_cast<float>(x)); }

}  // namespace llmplan::exec
