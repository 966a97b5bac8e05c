// llmplan export / import: a plan written as a training framework's launch configuration,
// and such a configuration read back into a plan file (launch/launch.h).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/print.h"
#include "launch/launch.h"

namespace llmplan::cli {

namespace {

struct ExportCommand {
  std::string plan_file;
  std::string to;
  std::string out_dir;
  std::string data_root;
  ExportOptions options;
};

struct ImportCommand {
  std::string path;
  std::string format;
  std::string model;
  std::string gpu;
  int gpus_per_node = kUnsetFlag;
  std::string out = "imported.json";
  std::string data_root;
};

}  // namespace

Runner register_export(CLI::App* sub) {
  auto c = std::make_shared<ExportCommand>();
  sub->add_option("plan", c->plan_file, "plan JSON (best.json from llmplan sweep)")->required();
  sub->add_option("--to", c->to, std::string("the framework's format: ") + kLaunchFormatNames)->required();
  sub->add_option("-o,--out", c->out_dir, "folder to write the files into (default: launch-<format>)");
  sub->add_option("--entry-point", c->options.entry_point, "the training script the launch line runs (default: the framework's usual one)");
  sub->add_option("--data-path", c->options.data_path, "dataset path written into the config")->capture_default_str();
  sub->add_option("--tokenizer", c->options.tokenizer, "tokenizer path written into the config")->capture_default_str();
  sub->add_option("--train-steps", c->options.train_steps, "training iterations the launch runs")->capture_default_str();
  sub->add_option("--data-root", c->data_root, "folder with models/ and data/ (default: $LLMPLAN_DATA_DIR or the source tree)");
  return [c]() {
    LaunchFormat to{};
    if (!parse_enum(c->to, &to))
      return report(Status::bad_input("--to: expected one of " + std::string(kLaunchFormatNames) + ", got '" + c->to + "'"));
    if (c->options.train_steps < 1)
      return report(Status::bad_input("--train-steps: expected a positive integer, got " + std::to_string(c->options.train_steps)));
    Result<PlanFile> f = read_plan_file(c->plan_file);
    if (!f) return report(f.status());
    Result<PresetRegistry> reg = load_presets(c->data_root);
    if (!reg) return report(reg.status());
    const std::vector<FrameworkSpec> frameworks = reg->frameworks();
    ExportOptions options = c->options;
    options.framework = framework_for_format(frameworks, to);
    Result<ExportResult> r = export_plan(*f, to, options);
    if (!r) return report(r.status().with_context(c->plan_file));
    const std::string dir = c->out_dir.empty() ? std::string("launch-") + to_string(to) : c->out_dir;
    if (Status st = write_launch_files(dir, r->files); !st) return report(st);
    for (const LaunchFile& lf : r->files) std::printf("wrote %s/%s\n", dir.c_str(), lf.name.c_str());
    for (const std::string& n : r->notes) std::printf("note: %s\n", n.c_str());
    return 0;
  };
}

Runner register_import(CLI::App* sub) {
  auto c = std::make_shared<ImportCommand>();
  sub->add_option("config", c->path, "a launch configuration file, or the folder llmplan export wrote")->required();
  sub->add_option("--format", c->format, std::string("the configuration's format (default: detected): ") + kLaunchFormatNames);
  sub->add_option("--model", c->model, "model preset id or file, for configs that do not describe the model (DeepSpeed)");
  sub->add_option("--gpu", c->gpu, "GPU preset id (configs do not name the GPU; default: the format's usual one)");
  sub->add_option("--gpus-per-node", c->gpus_per_node, "GPUs per node (default: the config's launch line, else the GPU's node)");
  sub->add_option("-o,--out", c->out, "plan JSON to write")->capture_default_str();
  sub->add_option("--data-root", c->data_root, "folder with models/ and data/ (default: $LLMPLAN_DATA_DIR or the source tree)");
  return [c]() {
    if (Status st = positive_if_given(c->gpus_per_node, "--gpus-per-node"); !st) return report(st);
    Result<PresetRegistry> reg = load_presets(c->data_root);
    if (!reg) return report(reg.status());
    Result<std::vector<LaunchFile>> files = read_launch_files(c->path);
    if (!files) return report(files.status());
    LaunchFormat format{};
    if (!c->format.empty()) {
      if (!parse_enum(c->format, &format))
        return report(Status::bad_input("--format: expected one of " + std::string(kLaunchFormatNames) + ", got '" + c->format + "'"));
    } else {
      Result<LaunchFormat> d = detect_format(*files, c->path);
      if (!d) return report(d.status());
      format = *d;
    }
    ImportOptions opt;
    opt.presets = &*reg;
    opt.model = c->model;
    opt.gpu = c->gpu;
    opt.gpus_per_node = c->gpus_per_node == kUnsetFlag ? 0 : c->gpus_per_node;
    Result<ImportedConfig> imp = import_files(*files, format, opt, c->path);
    if (!imp) return report(imp.status());
    std::printf("read %s as %s\n", c->path.c_str(), to_string(format));
    print_setup(imp->file);
    for (const std::string& n : imp->notes) std::printf("assumed: %s\n", n.c_str());
    if (!imp->unknown_keys.empty()) {
      std::printf("not used by llmplan (%zu):", imp->unknown_keys.size());
      for (const std::string& k : imp->unknown_keys) std::printf(" %s", k.c_str());
      std::printf("\n");
    }
    const MemoryReport mem = estimate_memory(imp->file.model, imp->file.cluster, imp->file.job, imp->file.plan);
    const StepTime time = estimate_time(imp->file.model, imp->file.cluster, imp->file.job, imp->file.plan);
    if (Status st = write_json_file(c->out, plan_file_to_json(imp->file, mem, time)); !st) return report(st);
    std::printf("wrote %s (llmplan explain %s: does it fit, how fast, what to change)\n", c->out.c_str(), c->out.c_str());
    return 0;
  };
}

}  // namespace llmplan::cli
