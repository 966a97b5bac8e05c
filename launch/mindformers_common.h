// Facts about MindSpore Transformers (MindFormers) v1.5.0 that the mindformers exporter
// (launch/mindformers.cpp) and importer (launch/mindformers_import.cpp) share: the names of
// Llama's projections, the dtype names, and how a pipeline's layers map to `offset` and to
// the per-stage recompute lists. Internal to llmplan_launch.
//
// Virtual stages are numbered as llmplan numbers them (v = chunk * pp + stage,
// planner/cost/plan_check.h), which is also MindFormers' order: LayerSetting builds its
// layer_list with shape (pp_interleave_num, pp) and hands the layers out chunk by chunk,
// stage by stage (MindFormers v1.5.0 mindformers/models/utils.py L165-175).
//
// Thread-safety: pure functions and constants.
#pragma once

#include <string>
#include <vector>

#include "planner/spec/specs.h"

namespace llmplan::launch_formats::mindformers {

constexpr const char* kVersion = "MindFormers v1.5.0";

// "1, 2, 3": a list of layer counts as the YAML's lists and the messages print them.
std::string join_ints(const std::vector<int>& v);

// llmplan's LoRA target names and the Linear cells of MindFormers v1.5.0's Llama block that
// carry them: attention wq wk wv wo (mindformers/models/llama/llama_transformer.py L263-306),
// SwiGLU w1 (gate), w3 (up, the `hidden` branch) and w2 (down) (llama_layer.py L370-440:
// output = w2(silu(w1(x)) * w3(x))). GPT's fc1/fc2 alias up/down (planner/spec/recipe.h).
struct LoraName {
  const char* llmplan;
  const char* cell;
};
constexpr LoraName kLoraNames[] = {{"q", "wq"}, {"k", "wk"}, {"v", "wv"}, {"o", "wo"},
                                   {"gate", "w1"}, {"up", "w3"}, {"down", "w2"}, {"fc1", "w3"}, {"fc2", "w2"}};
// The MindFormers cell of an llmplan target name, or "" for none.
std::string lora_cell(const std::string& target);
// The llmplan target name of a MindFormers cell name (wq -> q, w3 -> up), or "".
std::string lora_target(const std::string& cell);

// dtype names MindFormers' convert_mstype reads (mindformers/models/utils.py L43-57).
const char* dtype_name(Precision p);  // "bfloat16", "float16", "float32"

// MindFormers' `offset` for those layers: layers of (chunk, stage) = layers // (pp * chunks)
// + offset[chunk][stage], and sum(offset) == layers % (pp * chunks) (models/utils.py L165-170,
// L559-569). Row per chunk, one entry per stage.
std::vector<std::vector<int>> offsets_for(int layers, int pp, int chunks, const std::vector<int>& per_stage);


// Gigabytes (GiB: MindSpore's "GB") of device memory to let MindSpore take on a device of
// `memory_bytes`: the device less 6 GiB for the runtime, as the published Atlas 800T A2
// (64 GiB) configs allow 58GB (configs/llama2/pretrain_llama2_7b.yaml L125 @v1.5.0).
int max_device_memory_gb(double memory_bytes);

}  // namespace llmplan::launch_formats::mindformers
