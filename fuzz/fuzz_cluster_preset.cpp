// Cluster (node) presets (data/hardware/clusters/*.json): the input is the only cluster
// preset of a data root holding four shipped GPU presets, read by PresetRegistry::load
// (planner/io/presets.h) as every command's preset load does; an accepted cluster is then
// looked up as `--cluster ID` is.
#include "fuzz/fuzz_util.h"
#include "planner/io/presets.h"
#include "planner/spec/spec_json.h"

using namespace llmplan;
namespace fs = std::filesystem;

namespace {
const fs::path& root() {
  static const fs::path r = [] {
    const fs::path p = fuzz::scratch_dir() / "root";
    fs::create_directories(p / "models");
    fs::create_directories(p / "data" / "hardware" / "clusters");
    fs::create_directories(p / "data" / "hardware" / "gpus");
    // The GPUs the seed clusters name; all 21 shipped ones would make each run 5x slower.
    for (const char* gpu : {"a100-80g", "gb200", "h100-sxm", "h200"})
      fs::copy_file(fs::path(default_data_root()) / "data" / "hardware" / "gpus" / (std::string(gpu) + ".json"),
                    p / "data" / "hardware" / "gpus" / (std::string(gpu) + ".json"));
    return p;
  }();
  return r;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file(root() / "data" / "hardware" / "clusters" / "fuzz.json", data, size);
  Result<PresetRegistry> reg = PresetRegistry::load(root().string());
  if (!reg) {
    fuzz::expect_clear_error(reg.status(), path);
    return 0;
  }
  for (const std::string& id : reg->cluster_ids()) {
    Result<ClusterPreset> c = reg->cluster(id);
    if (!c) fuzz::violated("a loaded cluster id is unknown: " + id);
    // Plan files hold the cluster with its GPU inline: what is written must read back.
    Result<ClusterSpec> again = cluster_from_json(to_json(c->cluster), "written cluster");
    if (!again) fuzz::violated("a written cluster does not read back: " + again.status().message());
  }
  return 0;
}
