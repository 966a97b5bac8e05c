// torchtitan v0.2.2's job config schema and model flavors, as the torchtitan format reads and
// writes them: the JobConfig fields (torchtitan/config/job_config.py; torchtitan refuses a TOML
// field outside them, config/manager.py L160-171) and the flavors of the model families
// llmplan has presets for (torchtitan/models/llama3/__init__.py, models/qwen3/__init__.py).
// The tests check both against tests/fixtures/frameworks/ (torchtitan_keys.txt and verbatim
// copies of the two __init__.py files).
//
// Thread-safety: immutable data.
#pragma once

#include <cstdint>
#include <span>

namespace llmplan::launch_formats {

struct TorchtitanField {
  const char* path;  // "section.field" or "section.sub.field", e.g. "parallelism.tensor_parallel_degree"
  const char* type;  // the Python annotation, e.g. "int", "str | None", "list[str]"
};
std::span<const TorchtitanField> torchtitan_job_config_fields();
// The nested dataclasses (TOML tables), e.g. "quantize.linear.float8".
std::span<const char* const> torchtitan_job_config_sections();

// One flavor: torchtitan's model arguments as llmplan's shape. The llama3 flavors' MLP width is
// FeedForward's (torchtitan/models/llama3/model/model.py L326-336) from 4*dim, multiple_of and
// ffn_dim_multiplier; Qwen3-MoE flavors' ffn is the expert width (moe_inter_dim), as llmplan's
// presets hold it.
struct TorchtitanFlavor {
  const char* model;   // [model] name: "llama3", "qwen3"
  const char* flavor;  // [model] flavor: "8B", "30B-A3B", ...
  int layers;          // n_layers
  int64_t hidden;      // dim
  int heads;           // n_heads
  int kv_heads;        // n_kv_heads
  int64_t head_dim;    // head_dim (llama3: dim / n_heads)
  int64_t ffn_hidden;
  int64_t vocab;       // vocab_size
  int64_t max_seq_len; // the flavor's max_seq_len (training.seq_len replaces it at run time)
  bool tied;           // enable_weight_tying (qwen3); llama3 never ties
  bool qk_norm;
  int experts;         // moe_args.num_experts when moe_enabled, else 0
  int experts_per_token;
};
std::span<const TorchtitanFlavor> torchtitan_flavors();

}  // namespace llmplan::launch_formats
