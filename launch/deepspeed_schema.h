// DeepSpeed v0.16.4's schema of the ds_config sections it validates strictly: zero_optimization
// and its offload_optimizer / offload_param objects are pydantic models with extra="forbid"
// and populate_by_name=True (deepspeed/runtime/config_utils.py L105-113), so DeepSpeed
// refuses any other key there and accepts both a field's name and its alias
// (stage3_prefetch_bucket_size or prefetch_bucket_size). The deepspeed importer uses these
// lists to tell a key DeepSpeed itself would refuse (bad input) from one llmplan does not use
// (listed); the tests check them against tests/fixtures/frameworks/deepspeed_keys.txt.
//
// Thread-safety: immutable data.
#pragma once

#include <span>

namespace llmplan::launch_formats {

// DeepSpeedZeroConfig's fields and aliases (deepspeed/runtime/zero/config.py L86-344).
std::span<const char* const> deepspeed_zero_optimization_keys();
// DeepSpeedZeroOffloadOptimizerConfig (deepspeed/runtime/zero/offload_config.py L52-93).
std::span<const char* const> deepspeed_offload_optimizer_keys();
// DeepSpeedZeroOffloadParamConfig (offload_config.py L21-45).
std::span<const char* const> deepspeed_offload_param_keys();

}  // namespace llmplan::launch_formats
