#include "planner/io/presets.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "planner/spec/json_fields.h"
#include "planner/spec/recipe.h"
#include "planner/spec/spec_json.h"

namespace llmplan {

namespace fs = std::filesystem;
using nlohmann::json;

std::string default_data_root() {
  if (const char* env = std::getenv("LLMPLAN_DATA_DIR"); env && *env) return env;
  // An installed binary (cmake --install, the .deb) reads P/share/llmplan beside P/bin; a
  // binary outside the build tree never reads the source tree it was built from, which
  // may have changed or be gone.
  std::error_code ec;
  const fs::path exe = fs::weakly_canonical(fs::read_symlink("/proc/self/exe", ec), ec);
  if (!exe.empty()) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "llmplan";
    if (fs::is_directory(installed / "models", ec)) return installed.string();
    const fs::path build_root = fs::weakly_canonical(LLMPLAN_BUILD_ROOT, ec);
    const auto [end, at] = std::mismatch(build_root.begin(), build_root.end(), exe.begin(), exe.end());
    if (end != build_root.end()) return installed.string();
  }
  return LLMPLAN_SOURCE_ROOT;
}

namespace {

std::vector<std::string> json_files(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<ClusterPreset> cluster_preset_from_json(const json& j, const std::string& origin,
                                               const std::map<std::string, std::pair<GpuSpec, std::string>>& gpus) {
  ClusterPreset cp;
  json with_gpu = j;
  if (!j.is_object() || !j.contains("gpu") || !j["gpu"].is_string())
    return Status::bad_input(origin + ": field 'gpu': expected a GPU preset id (string)");
  cp.gpu_id = j["gpu"].get<std::string>();
  auto it = gpus.find(cp.gpu_id);
  if (it == gpus.end()) return Status::bad_input(origin + ": field 'gpu': unknown GPU preset '" + cp.gpu_id + "'");
  with_gpu["gpu"] = to_json(it->second.first);
  Result<ClusterSpec> c = cluster_from_json(with_gpu, origin);
  if (!c) return c.status();
  cp.cluster = *c;
  cp.cluster.nodes = 1;
  return cp;
}

template <class T>
Status insert_unique(std::map<std::string, std::pair<T, std::string>>& map, const std::string& id, T value,
                     const std::string& origin, const char* kind) {
  auto it = map.find(id);
  if (it != map.end())
    return Status::bad_input(std::string("duplicate ") + kind + " preset '" + id + "' in " + it->second.second + " and " + origin);
  map.emplace(id, std::make_pair(std::move(value), origin));
  return Status::ok();
}

template <class T>
std::vector<std::string> keys(const std::map<std::string, T>& map) {
  std::vector<std::string> out;
  for (const auto& [k, v] : map) out.push_back(k);
  return out;
}

// A preset id or a file: anything with '/' or ending in .json is a path.
bool looks_like_path(const std::string& id_or_path) {
  return id_or_path.find('/') != std::string::npos ||
         (id_or_path.size() > 5 && id_or_path.substr(id_or_path.size() - 5) == ".json");
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

Result<ModelSpec> load_model_file(const std::string& path) {
  Result<json> j = read_json_file(path);
  if (!j) return j.status();
  return model_from_json(*j, path);
}

Result<PresetRegistry> PresetRegistry::load(const std::string& root) {
  PresetRegistry reg;
  const fs::path base(root);
  if (!fs::is_directory(base / "models"))
    return Status::bad_input(root + ": no models/ folder here (set LLMPLAN_DATA_DIR or --data-root to a folder with models/ and data/, e.g. an install's share/llmplan or the source tree)");
  for (const std::string& f : json_files(base / "models")) {
    Result<ModelSpec> m = load_model_file(f);
    if (!m) return m.status();
    if (Status s = reg.add_model(*m, f); !s) return s;
  }
  for (const std::string& f : json_files(base / "data" / "hardware" / "gpus")) {
    Result<json> j = read_json_file(f);
    if (!j) return j.status();
    Result<GpuSpec> g = gpu_from_json(*j, f);
    if (!g) return g.status();
    if (Status s = insert_unique(reg.gpus_, g->name, *g, f, "GPU"); !s) return s;
  }
  for (const std::string& f : json_files(base / "data" / "hardware" / "clusters")) {
    Result<json> j = read_json_file(f);
    if (!j) return j.status();
    Result<ClusterPreset> c = cluster_preset_from_json(*j, f, reg.gpus_);
    if (!c) return c.status();
    if (Status s = insert_unique(reg.clusters_, c->cluster.name, *c, f, "cluster"); !s) return s;
  }
  for (const std::string& f : json_files(base / "data" / "stacks")) {
    Result<StackProfile> st = load_stack_file(f);
    if (!st) return st.status();
    if (Status s = insert_unique(reg.stacks_, st->name, *st, f, "stack"); !s) return s;
  }
  {
    std::vector<StackProfile*> all;
    for (auto& [id, entry] : reg.stacks_) all.push_back(&entry.first);
    if (Status s = resolve_shared_efficiency(all); !s) return s.with_context((base / "data" / "stacks").string());
  }
  // Frameworks: a file that extends another is read after the one it extends.
  std::vector<std::pair<std::string, json>> pending;
  for (const std::string& f : json_files(base / "data" / "frameworks")) {
    Result<json> j = read_json_file(f);
    if (!j) return j.status();
    pending.emplace_back(f, std::move(*j));
  }
  while (!pending.empty()) {
    bool progress = false;
    for (auto it = pending.begin(); it != pending.end();) {
      const std::string base_name = framework_extends(it->second);
      const FrameworkSpec* base_spec = nullptr;
      if (!base_name.empty()) {
        auto b = reg.frameworks_.find(base_name);
        if (b == reg.frameworks_.end()) {
          ++it;
          continue;  // its base is not read yet (or does not exist: reported below)
        }
        base_spec = &b->second.first;
      }
      Result<FrameworkSpec> fw = framework_from_json(it->second, it->first, base_spec);
      if (!fw) return fw.status();
      if (Status s = insert_unique(reg.frameworks_, fw->name, *fw, it->first, "framework"); !s) return s;
      it = pending.erase(it);
      progress = true;
    }
    if (!progress)
      return Status::bad_input(pending.front().first + ": field 'extends': '" + framework_extends(pending.front().second) +
                               "' is not a framework file here (or the files extend each other in a loop)");
  }
  for (const auto& [id, entry] : reg.frameworks_)
    for (const std::string& a : entry.first.aliases)
      if (reg.frameworks_.count(a) || reg.framework_aliases_.count(a))
        return Status::bad_input(entry.second + ": field 'aliases': '" + a + "' is already the name or an alias of another framework");
      else
        reg.framework_aliases_[a] = id;
  return reg;
}

Status PresetRegistry::add_model(const ModelSpec& m, const std::string& origin) {
  return insert_unique(models_, m.name, m, origin, "model");
}

Result<ModelSpec> PresetRegistry::model(const std::string& id) const {
  auto it = models_.find(id);
  if (it == models_.end()) return Status::bad_input("unknown model preset '" + id + "' (known: " + join(model_ids()) + ")");
  return it->second.first;
}

Result<GpuSpec> PresetRegistry::gpu(const std::string& id) const {
  auto it = gpus_.find(id);
  if (it == gpus_.end()) return Status::bad_input("unknown GPU preset '" + id + "' (known: " + join(gpu_ids()) + ")");
  return it->second.first;
}

Result<ClusterPreset> PresetRegistry::cluster(const std::string& id) const {
  auto it = clusters_.find(id);
  if (it == clusters_.end()) return Status::bad_input("unknown cluster preset '" + id + "' (known: " + join(cluster_ids()) + ")");
  return it->second.first;
}

Result<ClusterSpec> PresetRegistry::cluster_for_gpu(const std::string& gpu_id) const {
  Result<GpuSpec> g = gpu(gpu_id);
  if (!g) return g.status();
  for (const auto& [id, entry] : clusters_) {
    if (entry.first.gpu_id == gpu_id) return entry.first.cluster;
  }
  // No node preset for this GPU: a PCIe-class box of 8 (conservative bandwidths).
  ClusterSpec c;
  c.name = gpu_id + "-generic-node";
  c.source = "generic node: 8 GPUs, 64 GB/s per GPU in the node, 25 GB/s across (no preset for this GPU)";
  c.gpu = *g;
  c.gpus_per_node = 8;
  c.intra_node_bandwidth = 64e9;
  c.intra_node_latency = 10e-6;
  c.inter_node_bandwidth = 25e9;
  c.inter_node_latency = 15e-6;
  return c;
}

Result<ModelSpec> PresetRegistry::resolve_model(const std::string& id_or_path, const std::string& what) const {
  if (looks_like_path(id_or_path)) return load_model_file(id_or_path);
  Result<ModelSpec> m = model(id_or_path);
  if (!m) return m.status().with_context(what);
  return m;
}

int PresetRegistry::node_gpus(const ClusterSpec& c) const {
  if (c.nodes > 1) return c.gpus_per_node;
  Result<ClusterPreset> preset = cluster(c.name);
  return preset ? std::max(preset->cluster.gpus_per_node, c.gpus_per_node) : c.gpus_per_node;
}

Result<ModelSpec> PresetRegistry::nearest_model(double params, const std::string& family, bool dense_only) const {
  const ModelSpec* best = nullptr;
  double best_score = 1e300;
  for (const auto& [id, entry] : models_) {
    const ModelSpec& m = entry.first;
    const bool preferred = id.rfind("llama2-", 0) == 0 || id.rfind("llama3-", 0) == 0;
    if (!family.empty() && id.rfind(family, 0) != 0 && family != to_string(m.family)) continue;
    if (dense_only && m.moe.enabled()) continue;
    const double n = count_params(m, 1, 1, 1, 0, 0).total;
    // Log distance; the default family breaks near-ties (llama2-7b over mistral-7b).
    double score = std::fabs(std::log(n / params));
    if (family.empty() && !preferred) score += 0.05;
    if (score < best_score) {
      best_score = score;
      best = &m;
    }
  }
  if (!best) return Status::bad_input("no model preset of family '" + family + "'");
  return *best;
}

Result<StackProfile> PresetRegistry::stack(const std::string& id_or_path, const std::string& what) const {
  if (looks_like_path(id_or_path)) {
    Result<StackProfile> s = load_stack_file(id_or_path);
    if (!s) return s.status().with_context(what);
    // A file that shares a shipped stack's efficiency takes it from the registry's.
    if (!s->efficiency_from.empty()) {
      std::vector<StackProfile*> pair{&*s};
      StackProfile from;
      if (auto it = stacks_.find(s->efficiency_from); it != stacks_.end()) from = it->second.first, pair.push_back(&from);
      if (Status st = resolve_shared_efficiency(pair); !st) return st.with_context(what + ": " + id_or_path);
    }
    return s;
  }
  auto it = stacks_.find(id_or_path);
  if (it == stacks_.end())
    return Status::bad_input(what + ": unknown stack '" + id_or_path + "' (known: " + join(stack_ids()) + "; or a stack file path)");
  return it->second.first;
}

StackProfile PresetRegistry::default_stack() const {
  auto it = stacks_.find("llmplan");
  if (it != stacks_.end()) return it->second.first;
  StackProfile s;
  s.name = "llmplan";
  s.source = "compiled-in defaults (planner/cost/time_model.h Efficiency, planner/cost/memory_model.h MemoryOptions)";
  return s;
}

StackProfile PresetRegistry::stack_for_framework(const std::string& framework) const {
  for (const auto& [id, entry] : stacks_)
    for (const std::string& f : entry.first.frameworks)
      if (f == framework) return entry.first;
  return default_stack();
}

std::vector<StackProfile> PresetRegistry::stacks() const {
  std::vector<StackProfile> out;
  for (const auto& [id, entry] : stacks_) out.push_back(entry.first);
  return out;
}

std::vector<std::string> PresetRegistry::stack_ids() const { return keys(stacks_); }

Result<FrameworkSpec> PresetRegistry::framework(const std::string& name, const std::string& what) const {
  auto it = frameworks_.find(name);
  if (it == frameworks_.end()) {
    auto a = framework_aliases_.find(name);
    if (a != framework_aliases_.end()) it = frameworks_.find(a->second);
  }
  if (it == frameworks_.end())
    return Status::bad_input(what + ": unknown framework '" + name + "' (known: " + join(framework_ids()) + ")");
  return it->second.first;
}

std::vector<FrameworkSpec> PresetRegistry::frameworks() const {
  std::vector<FrameworkSpec> out;
  for (const auto& [id, entry] : frameworks_) out.push_back(entry.first);
  return out;
}

std::vector<std::string> PresetRegistry::framework_ids() const { return keys(frameworks_); }

std::vector<std::string> PresetRegistry::model_ids() const { return keys(models_); }
std::vector<std::string> PresetRegistry::gpu_ids() const { return keys(gpus_); }
std::vector<std::string> PresetRegistry::cluster_ids() const { return keys(clusters_); }

}  // namespace llmplan
