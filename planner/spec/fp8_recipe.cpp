#include "planner/spec/fp8_recipe.h"

namespace llmplan {

Fp8RecipeFacts fp8_recipe_facts(Fp8Recipe r, const GpuSpec& g) {
  Fp8RecipeFacts f;
  switch (r) {
    case Fp8Recipe::none:
    case Fp8Recipe::tensorwise:
    case Fp8Recipe::delayed:
      f.activation_bytes = 1;
      f.weight_bytes = 1;
      f.orientations = g.fp8_gemm_any_layout ? 1 : 2;
      // TE DelayedScaling(amax_history_len=1024) is the default recipe's history.
      f.amax_history = r == Fp8Recipe::delayed ? 1024 : 0;
      break;
    case Fp8Recipe::blockwise:
      f.activation_bytes = 1 + 4.0 / 128;          // 1x128 tiles, fp32 scale
      f.weight_bytes = 1 + 4.0 / (128.0 * 128.0);  // 128x128 blocks, fp32 scale
      f.orientations = 2;
      break;
    case Fp8Recipe::mxfp8:
      f.activation_bytes = 1 + 1.0 / 32;  // 32-element blocks, E8M0 scale
      f.weight_bytes = 1 + 1.0 / 32;
      f.orientations = 2;
      break;
  }
  return f;
}

bool fp8_recipe_supported(Fp8Recipe r, const GpuSpec& g) {
  if (r == Fp8Recipe::none) return true;
  if (g.peak(Dtype::fp8) <= 0) return false;
  return r != Fp8Recipe::mxfp8 || g.mx_block_scaling;
}

double fp8_weight_copy_bytes(Fp8Recipe r, const GpuSpec& g) {
  if (r == Fp8Recipe::none) return 0;
  const Fp8RecipeFacts f = fp8_recipe_facts(r, g);
  return f.weight_bytes * f.orientations;
}

double fp8_saved_input_bytes(Fp8Recipe r, const GpuSpec& g) {
  if (r == Fp8Recipe::none) return 0;
  return fp8_recipe_facts(r, g).activation_bytes;
}

double fp8_scaling_state_bytes(Fp8Recipe r, const GpuSpec& g) {
  if (r == Fp8Recipe::none || r == Fp8Recipe::blockwise || r == Fp8Recipe::mxfp8) return 0;  // block scales are in the bytes per element
  const Fp8RecipeFacts f = fp8_recipe_facts(r, g);
  constexpr double kTensors = 5;
  return kTensors * 4.0 * (2 + f.amax_history);
}

}  // namespace llmplan
