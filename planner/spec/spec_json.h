// JSON in and out for the spec structs. Readers name the file (`origin`), the field and
// the expected form in every error; unknown fields are errors. Model JSON may be an
// llmplan preset (models/*.json) or a Hugging Face config.json (detected by its keys).
//
// Units in JSON: GPU memory in GiB, bandwidths in GB/s, latencies in microseconds, peaks
// in TFLOP/s (what datasheets print); the structs hold bytes, bytes/s, s and FLOP/s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/spec/specs.h"
#include "planner/spec/status.h"

namespace llmplan {

Result<ModelSpec> model_from_json(const nlohmann::json& j, const std::string& origin);
Result<ModelSpec> model_from_hf_config(const nlohmann::json& j, const std::string& origin);
bool looks_like_hf_config(const nlohmann::json& j);
nlohmann::json to_json(const ModelSpec& m);

Result<GpuSpec> gpu_from_json(const nlohmann::json& j, const std::string& origin);
nlohmann::json to_json(const GpuSpec& g);

// A cluster object holds its GPU inline ("gpu": {...}) in plan files; presets name a GPU
// preset id instead, resolved by the preset registry (presets.h).
Result<ClusterSpec> cluster_from_json(const nlohmann::json& j, const std::string& origin);
nlohmann::json to_json(const ClusterSpec& c);

Result<TrainingJob> job_from_json(const nlohmann::json& j, const std::string& origin);
// job.doc_len within 0..seq_len, else bad_input naming the field under `origin`.
Status check_doc_len(const TrainingJob& j, const std::string& origin);
nlohmann::json to_json(const TrainingJob& t);

Result<ParallelPlan> plan_from_json(const nlohmann::json& j, const std::string& origin);
// A pipeline layout's layer counts (plan.stage_layers, and the reference records' own): a
// JSON array of integers each in [1, 10000]. False, `out` untouched and `bad_entry` (when
// given) the first entry out of range, otherwise; its length against pp*vpp and its sum
// against the model are the caller's and check_plan's.
bool layer_counts_from_json(const nlohmann::json& v, std::vector<int>* out, std::string* bad_entry = nullptr);
nlohmann::json to_json(const ParallelPlan& p);

// Reads and parses a JSON file; a missing file or a syntax error names the file (and
// the byte offset of the error). Refused as bad_input, naming the file: anything but a
// regular file (a folder, a FIFO, /dev/zero), more than kMaxJsonFileBytes, nesting of
// kMaxJsonDepth levels or more, a number out of double's range (1e400).
inline constexpr std::uintmax_t kMaxJsonFileBytes = std::uintmax_t{256} << 20;  // reference files are < 1 MiB
inline constexpr int kMaxJsonDepth = 64;                                       // our formats nest < 10 levels
Result<nlohmann::json> read_json_file(const std::string& path);

}  // namespace llmplan
