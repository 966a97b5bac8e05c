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
// runs, ZeRO-2/3 (Megatron-FSDP) without pipeline parallelism, attention biases it can express, the sequence within max_positions, context
// parallel with fused attention, expert parallel without fp16.
Status refuse_for_megatron_core(const PlanFile& f, const std::string& to);

// Megatron-Core's uneven stages (transformer_config.py, core_v0.13.0): stage 0 holds `first`
// layers and the last stage `last` (0 = not given), the other stages the rest evenly, each
// stage's layers in vpp equal chunks. The split as plan.stage_layers (virtual stage order), or
// bad_input saying what Megatron-Core asserts (counts that do not divide, nothing left for a
// middle stage). `flag_first` / `flag_last` name the fields in the message.
Result<std::vector<int>> first_last_stage_layers(int layers, int pp, int vpp, int first, int last, const std::string& flag_first,
                                                 const std::string& flag_last);
// The reverse for a plan's split (any kind): {first, last} (0 = equal to the middle stages)
// when first_last_stage_layers gives the plan's split back, else false.
bool split_as_first_last(int layers, const ParallelPlan& p, int* first, int* last);

// Megatron-Core's --pipeline-model-parallel-layout (docs/api-guide/pipeline_parallel_layout.md;
// PipelineParallelLayerLayout.parse_str_to_list): virtual stages split by '|' in the order
// v = vpp_rank * pp + pp_rank, 'E' the embedding, 't' a decoder layer, 'm' an MTP layer, 'L'
// the loss, "x*n" and "(...)*n" repeat, commas are cosmetic. Read as plan.stage_layers (its
// length / pp is vpp) when llmplan's model can hold it: 'E' at the start of the first
// stage, 'L' at the end of the last, the MTP layers (as many as the model's) on the last, and
// no stage without a decoder layer; else bad_input naming `flag`.
Result<std::vector<int>> parse_pipeline_layout(const std::string& layout, int pp, int mtp_layers, const std::string& flag);
// The plan's split written as such a layout (t*n per stage, E first, m's and L last).
std::string pipeline_layout_text(const ModelSpec& m, const ParallelPlan& p);

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
