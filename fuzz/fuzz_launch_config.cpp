// Framework launch configurations (`llmplan import FILE`, `explain FILE`, `sweep --from`):
// read_launch_files then import_files (launch/launch.h) for one format, chosen by the
// input's first byte: a Megatron-LM script, NeMo overrides, a DeepSpeed ds_config.json, a
// torchtitan TOML or a MindFormers YAML (yaml-cpp, toml++, nlohmann-json and the shell
// reader all see hostile text). An accepted configuration is costed like `explain` costs it.
#include "fuzz/fuzz_util.h"
#include "launch/launch.h"
#include "planner/cost/plan_check.h"
#include "planner/search/explain.h"

using namespace llmplan;

namespace {

const PresetRegistry& presets() {
  static const PresetRegistry r = [] {
    Result<PresetRegistry> reg = PresetRegistry::load(default_data_root());
    if (!reg) fuzz::violated("the presets do not load: " + reg.status().message());
    return std::move(*reg);
  }();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  struct Kind {
    LaunchFormat format;
    const char* file;
  };
  constexpr Kind kKinds[] = {{LaunchFormat::megatron, "launch.sh"},
                             {LaunchFormat::nemo, "nemo_overrides.sh"},
                             {LaunchFormat::deepspeed, "ds_config.json"},
                             {LaunchFormat::torchtitan, "train.toml"},
                             {LaunchFormat::mindformers, "config.yaml"}};
  const Kind& k = kKinds[data[0] % 5];
  const std::string path = fuzz::write_input(data + 1, size - 1, k.file);
  Result<std::vector<LaunchFile>> files = read_launch_files(path);
  if (!files) {
    fuzz::expect_clear_error(files.status(), path);
    return 0;
  }
  ImportOptions opt;
  opt.presets = &presets();
  opt.model = k.format == LaunchFormat::deepspeed ? "llama3-8b" : "";
  Result<ImportedConfig> imp = import_files(*files, k.format, opt, path);
  if (!imp) {
    fuzz::expect_clear_error(imp.status(), path);
    return 0;
  }
  const PlanFile& f = imp->file;
  // An accepted configuration is a legal plan (what explain REQUIRES), costed to finite numbers.
  if (check_plan(f.model, f.cluster, f.job, f.plan, f.gpus) != RejectReason::none)
    fuzz::violated("an accepted configuration is not a legal plan: " + std::string(describe(check_plan(f.model, f.cluster, f.job, f.plan, f.gpus))));
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  fuzz::expect_finite(e.memory.worst.total, "explain.memory.worst.total");
  fuzz::expect_finite(e.time.total, "explain.time.total");
  return 0;
}
