// What the Megatron-LM and the NeMo 2 / Megatron-Bridge formats share: both run
// Megatron-Core, so the same plan fields are refused for the same reasons, an imported
// model is matched to a preset the same way, and an imported run gets its cluster and its
// final checks the same way. Internal to llmplan_launch (launch/megatron.cpp, nemo.cpp).
//
// Version: Megatron-LM / Megatron-Core core_v0.13.0 (megatron/training/arguments.py,
// megatron/core/transformer/transformer_config.py, megatron/core/model_parallel_config.py).
//
// Thread-safety: pure functions.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "launch/launch.h"

namespace llmplan::launch_formats {

// Megatron-Core's FP8 scaling recipes, the --fp8-recipe choices (arguments.py L1184) that
// NeMo's fp8_recipe passes through: llmplan's Fp8Recipe names (to_string, parse_enum).
inline constexpr std::initializer_list<const char*> kMegatronFp8Recipes = {"tensorwise", "delayed", "mxfp8", "blockwise"};

// The refusals every Megatron-Core export shares; bad_input naming the plan field, `to`
// ("--to megatron") prefixing the message. Checks: the cluster is whole nodes (torchrun and
// NeMo start the same number of processes on every node), a pipeline schedule Megatron-Core
// runs, ZeRO-2/3 (Megatron-FSDP) without pipeline parallelism, a pipeline split it can
// express, attention biases it can express, the sequence within max_positions, context
// parallel with fused attention, expert parallel without fp16.
Status refuse_for_megatron_core(const PlanFile& f, const std::string& to);

// Even split of `layers` over `pp` stages (vpp 1) as Megatron's uneven-stage arguments say
// it: {first, last} stage layer counts (0 = not given), or false when llmplan's even split
// (the remainder on the last stages, plan_check.h layers_in_stage) has no such form.
bool even_split_as_first_last(int layers, int pp, int* first, int* last);
// The reverse: the pipeline split Megatron builds from first/last (0 = not given), compared
// with llmplan's even split; true when they are the same.
bool first_last_is_even_split(int layers, int pp, int first, int last);

// Names the imported model: --model's preset when given (a shape mismatch is bad_input
// naming the field, launch/model_shape.h), else the first preset with the same shape, else
// `fallback_name`.
// Fills name and source; keeps the config's shape.
Status name_imported_model(const ImportOptions& opt, const std::string& origin, const std::string& fallback_name,
                           const std::string& described_by, ModelSpec* m, std::vector<std::string>* notes);

// The cluster of an imported run: ImportOptions::gpu's node (h100-sxm when empty) holding
// `world` GPUs, `gpus_per_node` per node (0: the GPU's node) on `nodes` nodes (0: as many as
// needed).
Result<ClusterSpec> imported_cluster(const ImportOptions& opt, int world, int gpus_per_node, int nodes, const std::string& origin);

// The final checks of an imported plan: input bounds and check_plan, naming `origin`.
Status check_imported(const PlanFile& f, const std::string& origin);

// "1", "2", ... and "1.5": numbers as configs write them.
std::string number_text(double v);

}  // namespace llmplan::launch_formats
