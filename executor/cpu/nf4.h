// 4-bit NormalFloat (NF4) weights with double quantization, as QLoRA stores a frozen base
// model (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs", sec. 3):
//
//   blocks of 64 weights share one absmax a_b; each weight is the index of the NF4 level
//   nearest w / a_b (the 16 levels below: quantiles of N(0, 1) scaled to [-1, 1] with an
//   exact 0, as bitsandbytes' get_4bit_type("nf4")), two indices a byte, the first in the
//   low nibble;
//   the absmaxes themselves are quantized to 8 bits in groups of 256 blocks (double
//   quantization): code c_b = round(255 a_b / s_g) with s_g the group's largest absmax,
//   stored as fp32; a_b is read back as c_b s_g / 255. (bitsandbytes subtracts the
//   absmaxes' mean and codes them with its dynamic 8-bit map; this linear unsigned code
//   has the same size -- 8 bits a block, 32 a group -- and rounds the constants
//   differently.)
//   w' = NF4[index] x a_b'  (dequantization, at each use).
//
// One tensor of n weights is nf4_bytes(n) bytes: the packed indices (ceil(n / 2)), the
// block codes (one a block) and the group scales (4 bytes a group), in that order: n/2 +
// n/64 + n/4096 bytes as n grows, the 4 + 8/64 + 32/(64*256) bits a weight the planner
// counts (kNf4BytesPerParam).
// Thread-safety: pure functions of their arguments.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace llmplan::exec::cpu {

inline constexpr int64_t kNf4Block = 64;   // weights per absmax (QLoRA's block size)
inline constexpr int64_t kNf4Group = 256;  // absmaxes per fp32 scale (double quantization)

// bitsandbytes functional.py get_4bit_type("nf4"), the levels of Dettmers et al. 2023
// appendix E.
inline constexpr std::array<float, 16> kNf4Levels = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f, -0.18477343022823334f,
    -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

int64_t nf4_blocks(int64_t n);
int64_t nf4_groups(int64_t n);
int64_t nf4_bytes(int64_t n);

// w (n values) -> q (nf4_bytes(n) bytes).
void nf4_quantize(const double* w, int64_t n, uint8_t* q);

// q (nf4_bytes(n) bytes of n weights) -> w (n values of S: float, double, bf16_t, f16_t).
template <class S>
void nf4_dequantize(const uint8_t* q, int64_t n, S* w);

}  // namespace llmplan::exec::cpu
