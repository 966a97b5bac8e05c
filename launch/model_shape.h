// What a launch configuration states about the model, and the presets that fit it. Configs
// state a model partly (Megatron-DeepSpeed's arguments give the layers and widths but not the
// vocabulary, which comes from the tokenizer) or by name (torchtitan's flavor); an importer
// collects what is stated into a ModelShape and finds the presets with that shape, or checks
// the model the user named (ImportOptions::model) against it. Every format's importer
// compares shapes here (Megatron-LM, NeMo, DeepSpeed, torchtitan, MindFormers), each naming
// a mismatched field by its own key.
//
// The fields are those tests/launch/round_trip_plans.h's expect_same_run compares.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/io/presets.h"
#include "planner/spec/specs.h"

namespace llmplan::launch_formats {

struct ModelShape {  // each field unset where the config is silent
  std::optional<Family> family;
  std::optional<int> layers;
  std::optional<int64_t> hidden;
  std::optional<int> heads;
  std::optional<int> kv_heads;
  std::optional<int64_t> head_width;  // per-head width (ModelSpec::head_width())
  std::optional<int64_t> ffn_hidden;
  std::optional<int64_t> vocab;
  std::optional<int64_t> max_positions;
  std::optional<bool> tied_embeddings;
  std::optional<AttentionBias> attention_bias;
  std::optional<bool> qk_norm;
  std::optional<int> experts;            // 0: dense
  std::optional<int> experts_per_token;
  std::optional<int64_t> expert_ffn_hidden;
  std::optional<int> shared_experts;
};

// A field in which a model differs from a shape: its name (ModelSpec's: "layers",
// "moe.experts", ...) and both values as text.
struct ShapeMismatch {
  std::string field;
  std::string stated;
  std::string model;
};

// The first stated field `m` differs in, or none. MoE routing fields (experts_per_token,
// expert_ffn_hidden, shared_experts) are compared only when `m` has experts: a dense model
// has no routing.
std::optional<ShapeMismatch> shape_mismatch(const ModelShape& stated, const ModelSpec& m);

// A mismatch as "field: stated vs model" ("layers: 32 vs 80"), for messages.
std::string mismatch_text(const ShapeMismatch& d);

// Every shape field of `m` (for tables of known models).
ModelShape shape_of(const ModelSpec& m);

// The ids of the registry's presets that have the stated shape, in id order. With
// shape_of(m): the presets that are `m` but for its name, source, dropout and capacity factor.
std::vector<std::string> presets_with_shape(const PresetRegistry& reg, const ModelShape& stated);

}  // namespace llmplan::launch_formats
