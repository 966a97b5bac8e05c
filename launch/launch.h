// From plan to launch: a plan (model, cluster, job, parallel plan: planner/io/plan_file.h)
// written as what a training framework runs, and such a configuration read back.
//
//   export_plan   PlanFile -> the files of one format (launch script, config), each key with
//                 a comment giving its meaning and source where the format has comments
//   import_files  those files (or a user's own) -> PlanFile, with every key the reader did
//                 not use listed, never silently dropped
//
// Formats (one source file each under launch/, the option names checked against each
// framework's own option list in tests/launch/):
//   megatron     Megatron-LM pretrain_gpt.py arguments and a torchrun / Slurm launch script
//   nemo         NeMo 2 recipe overrides (`nemo llm pretrain --factory ... key=value`) and
//                Megatron-Bridge overrides for the same plan
//   deepspeed    ds_config.json and the `deepspeed` launcher line (the model is not in the
//                config: import takes it from ImportOptions::model)
//   torchtitan   the job TOML (torchtitan v0.2.x JobConfig) and its torchrun line
//   mindformers  the MindSpore Transformers YAML (parallel_config, recompute_config,
//                model_config, ...) and the msrun line
//
// What a format cannot express is refused (bad_input) naming the plan field; contradictory
// keys in an imported file are bad input naming the key.
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include <string>
#include <vector>

#include "planner/io/plan_file.h"
#include "planner/io/presets.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"

namespace llmplan {

enum class LaunchFormat { megatron, nemo, deepspeed, torchtitan, mindformers };
constexpr const char* kLaunchFormatNames = "megatron, nemo, deepspeed, torchtitan, mindformers";
const char* to_string(LaunchFormat f);
bool parse_enum(const std::string& s, LaunchFormat* out);

// One file of a launch configuration: its name relative to the output folder and its text.
struct LaunchFile {
  std::string name;          // e.g. "launch.sh", "ds_config.json"
  std::string text;
  bool executable = false;   // a script: written with mode 0755
};

struct ExportOptions {
  // The framework's entry point the launch line runs, e.g. Megatron-LM's "pretrain_gpt.py";
  // empty: each format's usual one.
  std::string entry_point;
  // Where the data and tokenizer are: written as given (placeholders by default, which the
  // user replaces; the export's notes say so).
  std::string data_path = "/path/to/dataset_text_document";
  std::string tokenizer = "/path/to/tokenizer";
  int train_steps = 1000;   // iterations the launch runs (training length is not the plan's)
  // The framework the format runs on (data/frameworks: the one whose `exports` lists the
  // format, framework_for_format): a plan it refuses is refused, naming its rule. nullptr:
  // the format's own checks only. Must outlive the call.
  const FrameworkSpec* framework = nullptr;
};

// The framework of `presets` whose exports list `format`, or nullptr.
const FrameworkSpec* framework_for_format(const std::vector<FrameworkSpec>& frameworks, LaunchFormat format);

struct ExportResult {
  std::vector<LaunchFile> files;
  std::vector<std::string> notes;  // what the user must know or edit (placeholders, assumptions)
};

// REQUIRES: f passed read_plan_file's checks (check_plan is none).
Result<ExportResult> export_plan(const PlanFile& f, LaunchFormat to, const ExportOptions& opt = {});

struct ImportOptions {
  // The registry the model and GPU come from (a config names a model preset, as torchtitan's
  // flavors and NeMo's factories do, or no GPU at all). Must outlive the call.
  const PresetRegistry* presets = nullptr;
  // The model when the config does not describe it (DeepSpeed): a preset id or a path, as
  // --model takes it. Where the config does describe it, given is a check: a mismatch of
  // any shape field is bad input naming the field.
  std::string model;
  std::string gpu;       // GPU preset id; empty: the format's own (MindFormers: Ascend) or h100-sxm
  int gpus_per_node = 0; // 0: from the config's launch line, else the GPU's usual node
};

struct ImportedConfig {
  PlanFile file;
  LaunchFormat format = LaunchFormat::megatron;
  std::vector<std::string> unknown_keys;  // keys (flags) read but not used by llmplan, as spelled
  std::vector<std::string> notes;         // defaults assumed for what the config left out
};

// Reads `files` as `format`. The names matter only to tell files apart (launch script vs
// config); `origin` names the source in messages (a folder or file path).
Result<ImportedConfig> import_files(const std::vector<LaunchFile>& files, LaunchFormat format, const ImportOptions& opt,
                                    const std::string& origin);

// The format of a file or folder from its name and contents: *.toml torchtitan, *.yaml /
// *.yml MindFormers, a JSON with zero_optimization or train_micro_batch_size_per_gpu
// DeepSpeed, a script or argument list with --tensor-model-parallel-size Megatron, one with
// `nemo llm` or trainer.strategy. NeMo; a folder: the files an export wrote. bad_input when
// none matches, naming the path and the formats tried.
Result<LaunchFormat> detect_format(const std::vector<LaunchFile>& files, const std::string& origin);

// True when `path` is a launch configuration rather than an llmplan plan file: a folder, a
// file not ending in .json, or a JSON document without the plan file's "schema".
bool is_launch_config_path(const std::string& path);

// The files at `path`: a regular file, or every regular file directly inside a folder (as
// an export writes them). Size-limited (16 MiB a file); errors name the path.
Result<std::vector<LaunchFile>> read_launch_files(const std::string& path);
// Writes `files` into `dir` (created if missing); errors name the file.
Status write_launch_files(const std::string& dir, const std::vector<LaunchFile>& files);

}  // namespace llmplan
