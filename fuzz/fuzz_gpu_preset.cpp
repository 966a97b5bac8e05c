// GPU presets (data/hardware/gpus/*.json): the input is the only GPU preset of a data root
// that PresetRegistry::load reads (planner/io/presets.h), as every command's preset load
// does; an accepted GPU is then looked up as `--gpu ID` is.
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
    fs::create_directories(p / "data" / "hardware" / "gpus");
    return p;
  }();
  return r;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file(root() / "data" / "hardware" / "gpus" / "fuzz.json", data, size);
  Result<PresetRegistry> reg = PresetRegistry::load(root().string());
  if (!reg) {
    fuzz::expect_clear_error(reg.status(), path);
    return 0;
  }
  for (const std::string& id : reg->gpu_ids()) {
    Result<GpuSpec> g = reg->gpu(id);
    if (!g) fuzz::violated("a loaded GPU id is unknown: " + id);
    if (!reg->cluster_for_gpu(id)) fuzz::violated("no cluster for a loaded GPU: " + id);
    // Plan files hold the GPU inline: what is written must read back.
    Result<GpuSpec> again = gpu_from_json(to_json(*g), "written GPU");
    if (!again) fuzz::violated("a written GPU does not read back: " + again.status().message());
  }
  return 0;
}
