// FP8 training recipes (specs.h Fp8Recipe): what each one stores, on a given GPU. One
// source for the memory model and the stack profiles; every number below is a format
// fact, not a fit. (The time model runs FP8 linears at one fitted effective speed-up for
// every recipe: see Efficiency::fp8_gemm_speedup for why.)
//
// A quantized tensor is its 1-byte FP8 data plus its scales:
//   tensorwise, delayed  one fp32 scale per tensor (negligible per element): 1 B/element.
//                        Delayed scaling adds an amax history of amax_history_len steps per
//                        FP8 tensor (TE DelayedScaling, default 1024).
//   blockwise            DeepSeek-V3 (arXiv 2412.19437, sec. 3.3.2): activations and
//                        gradients in 1x128 tiles, weights in 128x128 blocks, fp32 scales:
//                        1 + 4/128 = 1.03125 B/element, weights 1 + 4/16384.
//   mxfp8                OCP Microscaling Formats v1.0: 32-element blocks with one E8M0
//                        (1-byte) scale: 1 + 1/32 = 1.03125 B/element.
// A GEMM reads an FP8 operand along its K dimension. The forward GEMM needs the weight and
// the input row-wise; the backward needs the weight column-wise (dgrad) and the input and
// the output gradient column-wise (wgrad). So a quantized tensor is kept in the orientations
// its GEMMs need:
//   - per-tensor scaling on a GPU whose FP8 GEMM takes any layout (Blackwell): one copy
//     serves both;
//   - per-tensor scaling on a TN-only GPU (Hopper, Ada): a second, transposed copy (TE's
//     cast_transpose keeps both: Transformer Engine docs, "Using FP8 with Transformer
//     Engine", and Float8Tensor's _transpose);
//   - block scaling on any GPU: the blocks run along K, so the other orientation is a
//     second quantization with its own scales (TE MXFP8Tensor / Float8BlockwiseQTensor keep
//     rowwise and columnwise data).
//
// Thread-safety: pure functions.
#pragma once

#include "planner/spec/specs.h"

namespace llmplan {

struct Fp8RecipeFacts {
  double activation_bytes = 0;  // B per element of a quantized input or gradient, one orientation, scales included
  double weight_bytes = 0;      // B per element of a quantized weight, one orientation, scales included
  int orientations = 1;         // copies a tensor that both directions read is kept in (1 or 2)
  int amax_history = 0;         // steps of fp32 amax history per FP8 tensor (delayed scaling)
};

// REQUIRES: r != none.
Fp8RecipeFacts fp8_recipe_facts(Fp8Recipe r, const GpuSpec& g);

// Whether the GPU can run the recipe: FP8 tensor cores (a positive fp8 peak), and for
// mxfp8 the block-scaled (MX) ones.
bool fp8_recipe_supported(Fp8Recipe r, const GpuSpec& g);

// Bytes per linear-layer weight parameter of a weight's quantized copies kept for both
// directions (Transformer Engine's weight cache under gradient accumulation):
// weight_bytes x orientations.
double fp8_weight_copy_bytes(Fp8Recipe r, const GpuSpec& g);
// Bytes per element of a GEMM input kept, quantized, for its weight gradient: the
// column-wise copy only (the row-wise one is freed after the forward GEMM).
double fp8_saved_input_bytes(Fp8Recipe r, const GpuSpec& g);
// Bytes of one FP8 linear module's scaling state outside its tensors: TE's fp8_meta holds,
// for each of its five FP8 tensors (input, weight, output; output gradient, input
// gradient), an fp32 scale and scale_inv, and under delayed scaling an fp32 amax history.
double fp8_scaling_state_bytes(Fp8Recipe r, const GpuSpec& g);

}  // namespace llmplan
