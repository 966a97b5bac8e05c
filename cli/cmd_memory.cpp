// llmplan memory / explain: one plan's memory breakdown, and why it does (not) fit with
// the cheapest fixes. Both accept either flags or a plan file.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/print.h"
#include "launch/launch.h"
#include "planner/search/explain.h"
#include "planner/spec/spec_json.h"
#include "planner/spec/units.h"

namespace llmplan::cli {

namespace {

struct PlanCommand {
  JobFlags job;
  PlanFlags plan;
  std::string plan_file;
  std::string json_out;
  std::string format;     // of a launch configuration given as the plan
  bool gpu_given = false; // --gpu typed (a launch configuration names no GPU)
};

// The plan from a plan file (positional), a framework's launch configuration, or flags.
Result<Setup> load_setup(const PlanCommand& c) {
  if (!c.plan_file.empty() && is_launch_config_path(c.plan_file)) {
    ConfigFlags cf;
    cf.format = c.format;
    cf.model = c.job.model;
    cf.gpu = c.gpu_given ? c.job.gpu : "";
    cf.gpus_per_node = c.job.gpus_per_node == kUnsetFlag ? 0 : c.job.gpus_per_node;
    return setup_from_config(c.plan_file, cf, c.job);
  }
  if (!c.plan_file.empty()) {
    Result<PlanFile> f = read_plan_file(c.plan_file);
    if (!f) return f.status();
    Result<PresetRegistry> reg = load_presets(c.job.data_root);
    if (!reg) return reg.status();
    Setup s{std::move(*reg), *f, 0, "", {}, false, c.job.data_root.empty() ? default_data_root() : c.job.data_root, std::nullopt};
    Result<double> head = parse_bytes(c.job.headroom, "--headroom");
    if (!head) return head.status();
    s.headroom_bytes = *head;
    if (Status st = apply_stack_flag(c.job.stack, &s); !st) return st;
    if (Status st = apply_framework_flag(c.job.framework, &s); !st) return st;
    return s;
  }
  Result<Setup> s = setup_from_flags(c.job);
  if (!s) return s;
  if (Status st = apply_plan_flags(c.plan, &*s); !st) return st;
  return s;
}

}  // namespace

Runner register_memory(CLI::App* sub) {
  auto c = std::make_shared<PlanCommand>();
  add_job_flags(sub, &c->job);
  add_plan_flags(sub, &c->plan);
  sub->add_option("plan", c->plan_file, "plan JSON, or a framework's launch configuration (as llmplan import reads), instead of flags");
  sub->add_option("--format", c->format, "the launch configuration's format (default: detected)");
  sub->add_option("--json", c->json_out, "also write the breakdown as JSON to this file ('-' = stdout only JSON)");
  return [c, sub]() {
    c->gpu_given = sub->get_option("--gpu")->count() > 0;
    Result<Setup> s = load_setup(*c);
    if (!s) return report(s.status());
    const PlanFile& f = s->file;
    const MemoryOptions mo = stack_memory_options(s->stack, MemoryOptions{});
    const MemoryReport mem = estimate_memory(f.model, f.cluster, f.job, f.plan, mo);
    const StepTime time = estimate_time(f.model, f.cluster, f.job, f.plan, s->stack.efficiency);
    if (c->json_out == "-") {
      std::printf("%s\n", plan_file_to_json(f, mem, time).dump(2).c_str());
      return 0;
    }
    if (!s->model_note.empty()) std::printf("%s\n", s->model_note.c_str());
    print_setup(f);
    print_memory(mem, s->headroom_bytes);
    if (!s->stack_given) print_memory_over_stacks(s->presets, f, s->headroom_bytes);
    if (!c->json_out.empty()) {
      if (Status st = write_json_file(c->json_out, plan_file_to_json(f, mem, time)); !st) return report(st);
      std::printf("wrote %s\n", c->json_out.c_str());
    }
    return 0;
  };
}

Runner register_explain(CLI::App* sub) {
  auto c = std::make_shared<PlanCommand>();
  add_job_flags(sub, &c->job);
  add_plan_flags(sub, &c->plan);
  sub->add_option("plan", c->plan_file,
                  "plan JSON, or a framework's launch configuration (Megatron script, NeMo overrides, ds_config.json, torchtitan "
                  "TOML, MindFormers YAML, or an llmplan export folder) instead of flags");
  sub->add_option("--format", c->format, "the launch configuration's format (default: detected)");
  return [c, sub]() {
    c->gpu_given = sub->get_option("--gpu")->count() > 0;
    Result<Setup> s = load_setup(*c);
    if (!s) return report(s.status());
    const PlanFile& f = s->file;
    const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, s->headroom_bytes,
                                       stack_memory_options(s->stack, MemoryOptions{}), s->stack.efficiency,
                                       s->framework ? &*s->framework : nullptr);
    if (!s->model_note.empty()) std::printf("%s\n", s->model_note.c_str());
    print_setup(f);
    print_memory(e.memory, s->headroom_bytes);
    if (!s->stack_given) print_memory_over_stacks(s->presets, f, s->headroom_bytes);
    print_time(e.time, f.gpus);
    if (!e.framework_refusal.empty()) std::printf("\n%s.\n", e.framework_refusal.c_str());
    else if (s->framework) std::printf("\n%s runs this plan (%s).\n", s->framework->name.c_str(), s->framework->version.c_str());
    print_explanation(e, f);
    // No single change fits: what change of the job lets some plan fit.
    if (!e.fits && std::none_of(e.changes.begin(), e.changes.end(), [](const PlanChange& c) { return c.fits; })) {
      SweepSpace space;
      space.precision = {f.job.precision};
      print_fit_advice_for(*s, space, sweep_options_for(*s));
    }
    return 0;
  };
}

}  // namespace llmplan::cli
