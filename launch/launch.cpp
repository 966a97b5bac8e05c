#include "launch/launch.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "launch/formats.h"
#include "planner/spec/spec_json.h"

namespace llmplan {

namespace {
constexpr std::uintmax_t kMaxLaunchFileBytes = 16u << 20;
constexpr const char* kNames[] = {"megatron", "nemo", "deepspeed", "torchtitan", "mindformers"};

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// The format one file's name and text say it is, or -1.
int file_format(const LaunchFile& f) {
  const std::string& t = f.text;
  if (f.name.ends_with(".toml")) return static_cast<int>(LaunchFormat::torchtitan);
  if (f.name.ends_with(".yaml") || f.name.ends_with(".yml")) return static_cast<int>(LaunchFormat::mindformers);
  if (f.name.ends_with(".json") && (contains(t, "\"zero_optimization\"") || contains(t, "\"train_micro_batch_size_per_gpu\"") ||
                                     contains(t, "\"train_batch_size\"")))
    return static_cast<int>(LaunchFormat::deepspeed);
  if (contains(t, "nemo llm ") || contains(t, "trainer.strategy.") || contains(t, "model.tensor_model_parallel_size="))
    return static_cast<int>(LaunchFormat::nemo);
  if (contains(t, "--tensor-model-parallel-size") || contains(t, "--pipeline-model-parallel-size") || contains(t, "pretrain_gpt.py"))
    return static_cast<int>(LaunchFormat::megatron);
  return -1;
}
}  // namespace

const char* to_string(LaunchFormat f) { return kNames[static_cast<int>(f)]; }

bool parse_enum(const std::string& s, LaunchFormat* out) {
  for (int i = 0; i < static_cast<int>(std::size(kNames)); ++i)
    if (s == kNames[i]) {
      *out = static_cast<LaunchFormat>(i);
      return true;
    }
  return false;
}

const FrameworkSpec* framework_for_format(const std::vector<FrameworkSpec>& frameworks, LaunchFormat format) {
  for (const FrameworkSpec& fw : frameworks)
    if (std::find(fw.exports.begin(), fw.exports.end(), to_string(format)) != fw.exports.end()) return &fw;
  return nullptr;
}

Result<ExportResult> export_plan(const PlanFile& f, LaunchFormat to, const ExportOptions& opt) {
  if (opt.framework) {
    const std::string why = framework_refusal_text(*opt.framework, f.model, f.job, f.plan);
    if (!why.empty()) return Status::bad_input("--to " + std::string(to_string(to)) + ": " + why);
  }
  // The formats write a GPT or Llama block with one MLP kind and full attention; a 2024-26
  // block (planner/spec/specs.h) would be exported as another model, so it is refused.
  const ModelSpec& m = f.model;
  if (m.mla.enabled() || m.sliding_window > 0 || m.attention_sinks || m.post_norms || m.mtp_layers > 0 ||
      (m.moe.enabled() && (m.moe.first_dense_layers > 0 || m.moe.layer_freq > 1 || m.moe.expert_bias ||
                           (m.moe.shared_experts > 0 && m.moe.shared_expert_ffn_hidden > 0 && m.moe.shared_expert_ffn_hidden != m.ffn_hidden))))
    return Status::bad_input("--to " + std::string(to_string(to)) + ": model " + m.name +
                             " has latent attention, sliding windows, attention sinks, post-norms, multi-token prediction or mixed dense and "
                             "MoE layers, which llmplan's launch formats do not write yet (expected a GPT- or Llama-family model without them)");
  // Packed documents are a data-pipeline setting (NeMo's packed_sequence_specs with THD
  // attention, torchtitan's block-causal flex attention), which the formats' pre-training
  // launches over whole sequences do not write: exporting it would launch another run.
  if (f.job.packed_documents())
    return Status::bad_input("--to " + std::string(to_string(to)) + ": job.doc_len " + std::to_string(f.job.doc_len) +
                             ": packed documents with per-document attention are not written by llmplan's launch formats "
                             "(expected doc_len 0; set up packing in the framework's data pipeline)");
  switch (to) {
    case LaunchFormat::megatron: return launch_formats::export_megatron(f, opt);
    case LaunchFormat::nemo: return launch_formats::export_nemo(f, opt);
    case LaunchFormat::deepspeed: return launch_formats::export_deepspeed(f, opt);
    case LaunchFormat::torchtitan: return launch_formats::export_torchtitan(f, opt);
    case LaunchFormat::mindformers: return launch_formats::export_mindformers(f, opt);
  }
  return Status::bad_input("--to: unknown format");
}

Result<ImportedConfig> import_files(const std::vector<LaunchFile>& files, LaunchFormat format, const ImportOptions& opt,
                                    const std::string& origin) {
  if (opt.presets == nullptr) return Status::runtime(origin + ": import needs the preset registry");
  if (files.empty()) return Status::bad_input(origin + ": no files to import");
  Result<ImportedConfig> r = [&]() -> Result<ImportedConfig> {
    switch (format) {
      case LaunchFormat::megatron: return launch_formats::import_megatron(files, opt, origin);
      case LaunchFormat::nemo: return launch_formats::import_nemo(files, opt, origin);
      case LaunchFormat::deepspeed: return launch_formats::import_deepspeed(files, opt, origin);
      case LaunchFormat::torchtitan: return launch_formats::import_torchtitan(files, opt, origin);
      case LaunchFormat::mindformers: return launch_formats::import_mindformers(files, opt, origin);
    }
    return Status::bad_input(origin + ": unknown format");
  }();
  if (r) r->format = format;
  return r;
}

Result<LaunchFormat> detect_format(const std::vector<LaunchFile>& files, const std::string& origin) {
  // An export's folder holds one format's files; a launch script beside a config belongs to
  // that config (the config's format wins over the script's).
  int found = -1;
  for (const LaunchFile& f : files) {
    const int k = file_format(f);
    if (k < 0) continue;
    const bool is_config = f.name.ends_with(".toml") || f.name.ends_with(".yaml") || f.name.ends_with(".yml") || f.name.ends_with(".json");
    if (found < 0 || is_config) found = k;
  }
  if (found < 0)
    return Status::bad_input(origin + ": not a launch configuration llmplan reads (expected one of " + kLaunchFormatNames +
                             ": a Megatron argument list or script, NeMo overrides, a DeepSpeed ds_config.json, a torchtitan TOML "
                             "or a MindFormers YAML; --format names it)");
  return static_cast<LaunchFormat>(found);
}

bool is_launch_config_path(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return true;
  if (!path.ends_with(".json")) return true;
  Result<nlohmann::json> j = read_json_file(path);
  return j && j->is_object() && !j->contains("schema");
}

Result<std::vector<LaunchFile>> read_launch_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return Status::bad_input(path + ": cannot open (expected a launch configuration file or an export's folder)");
  std::vector<fs::path> paths;
  if (fs::is_directory(st)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) paths.push_back(e.path());
    if (ec) return Status::bad_input(path + ": cannot list the folder (" + ec.message() + ")");
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) return Status::bad_input(path + ": the folder has no files (expected an export's folder)");
  } else if (fs::is_regular_file(st)) {
    paths.push_back(path);
  } else {
    return Status::bad_input(path + ": not a regular file or folder (expected a launch configuration)");
  }
  std::vector<LaunchFile> out;
  for (const fs::path& p : paths) {
    const std::uintmax_t size = fs::file_size(p, ec);
    if (ec) return Status::bad_input(p.string() + ": cannot read its size");
    if (size > kMaxLaunchFileBytes)
      return Status::bad_input(p.string() + ": " + std::to_string(size) + " bytes, larger than a launch configuration can be (at most 16 MiB)");
    std::ifstream in(p, std::ios::binary);
    if (!in) return Status::bad_input(p.string() + ": cannot open file");
    std::stringstream buf;
    buf << in.rdbuf();
    out.push_back({p.filename().string(), buf.str(), false});
  }
  return out;
}

Status write_launch_files(const std::string& dir, const std::vector<LaunchFile>& files) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::runtime(dir + ": cannot create the folder (" + ec.message() + ")");
  for (const LaunchFile& f : files) {
    const fs::path p = fs::path(dir) / f.name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    if (!out) return Status::runtime(p.string() + ": cannot write");
    out << f.text;
    out.close();
    if (!out) return Status::runtime(p.string() + ": write failed");
    if (f.executable) {
      fs::permissions(p, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add, ec);
      if (ec) return Status::runtime(p.string() + ": cannot make it executable (" + ec.message() + ")");
    }
  }
  return Status::ok();
}

}  // namespace llmplan

namespace llmplan::launch_formats {

std::string file_origin(const std::string& origin, const std::string& name) {
  return origin.ends_with(name) ? origin : origin + "/" + name;
}

}  // namespace llmplan::launch_formats
