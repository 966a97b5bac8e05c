// Preset registry: model presets (models/*.json), GPU presets (data/hardware/gpus/*.json),
// node/interconnect presets (data/hardware/clusters/*.json), training-stack profiles
// (data/stacks/*.json, planner/cost/stack_profile.h) and training frameworks
// (data/frameworks/*.json, planner/cost/framework.h), looked up by id. Ids are
// unique: a second file with the same id is an error naming both files. Wherever a model
// is accepted, a path to a preset-style JSON or a Hugging Face config.json works too.
//
// Thread-safety: immutable after load(); concurrent lookups are safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner/spec/specs.h"
#include "planner/cost/framework.h"
#include "planner/cost/stack_profile.h"
#include "planner/spec/status.h"

namespace llmplan {

// The folder holding models/ and data/: $LLMPLAN_DATA_DIR if set; else <exe>/../share/llmplan
// when it has models/ (an installed binary); else, for a binary inside the build tree, the
// source tree it was built from. A binary elsewhere gets <exe>/../share/llmplan, which the
// loader then reports missing.
std::string default_data_root();

struct ClusterPreset {
  ClusterSpec cluster;     // with nodes = 1 and the GPU resolved
  std::string gpu_id;
};

class PresetRegistry {
 public:
  // Loads every preset under `root` (models/, data/hardware/gpus/, data/hardware/clusters/).
  static Result<PresetRegistry> load(const std::string& root);

  // Adds one model preset; fails when the id exists (message names both origins).
  Status add_model(const ModelSpec& m, const std::string& origin);

  Result<ModelSpec> model(const std::string& id) const;
  Result<GpuSpec> gpu(const std::string& id) const;
  Result<ClusterPreset> cluster(const std::string& id) const;
  // GPUs per node of `c`'s node type: c's own when it spans nodes, else (one node, perhaps
  // a partial one, as cluster_with_gpus makes it) the larger of its preset's and c's.
  int node_gpus(const ClusterSpec& c) const;

  // A cluster for `gpu_id` with its usual node: the cluster preset whose GPU it is (first
  // by id), else a generic node with that GPU. nodes = 1.
  Result<ClusterSpec> cluster_for_gpu(const std::string& gpu_id) const;

  // A model id, or a path to a preset JSON / HF config.json (anything with '/' or ending
  // in .json is a path). `what` names the flag for messages.
  Result<ModelSpec> resolve_model(const std::string& id_or_path, const std::string& what) const;

  // The preset of `family` ("" = llama2/llama3 first, then any) whose parameter count is
  // nearest (in log scale) to `params`; dense_only skips mixture-of-experts presets.
  Result<ModelSpec> nearest_model(double params, const std::string& family, bool dense_only = false) const;

  // A stack profile id, or a path to a stack file (anything with '/' or ending in .json,
  // e.g. what `llmplan calibrate` writes). `what` names the flag for messages.
  Result<StackProfile> stack(const std::string& id_or_path, const std::string& what = "--stack") const;
  // The planner's default stack ("llmplan"; the compiled-in constants when the data
  // folder has no stacks/).
  StackProfile default_stack() const;
  // The stack whose `frameworks` lists `framework` (a reference record's), else the default.
  StackProfile stack_for_framework(const std::string& framework) const;
  std::vector<StackProfile> stacks() const;

  // A training framework by name or alias (data/frameworks; framework.h). `what` names the
  // flag for messages.
  Result<FrameworkSpec> framework(const std::string& name, const std::string& what = "--framework") const;
  std::vector<FrameworkSpec> frameworks() const;  // by name
  std::vector<std::string> framework_ids() const;

  std::vector<std::string> model_ids() const;
  std::vector<std::string> gpu_ids() const;
  std::vector<std::string> cluster_ids() const;
  std::vector<std::string> stack_ids() const;

 private:
  std::map<std::string, std::pair<ModelSpec, std::string>> models_;  // id -> (spec, origin)
  std::map<std::string, std::pair<GpuSpec, std::string>> gpus_;
  std::map<std::string, std::pair<ClusterPreset, std::string>> clusters_;
  std::map<std::string, std::pair<StackProfile, std::string>> stacks_;
  std::map<std::string, std::pair<FrameworkSpec, std::string>> frameworks_;
  std::map<std::string, std::string> framework_aliases_;  // alias -> name
};

// A model preset id or file, loaded alone (for tools that need no registry).
Result<ModelSpec> load_model_file(const std::string& path);

}  // namespace llmplan
