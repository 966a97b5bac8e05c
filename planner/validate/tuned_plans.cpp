#include "planner/validate/tuned_plans.h"

#include "planner/search/sweep.h"
#include "planner/cost/time_model.h"

namespace llmplan {

std::vector<TunedPlanGap> tuned_plan_gaps(const ReferenceSet& set, const PresetRegistry& presets, const ValidationOptions& opt,
                                          const std::function<void(int, int, const std::string&)>& progress) {
  std::vector<const ReferenceRecord*> records;
  for (const ReferenceRecord& r : set.records)
    if (is_throughput_record(r)) records.push_back(&r);
  std::vector<TunedPlanGap> out;
  for (size_t i = 0; i < records.size(); ++i) {
    const ReferenceRecord& r = *records[i];
    if (progress) progress(static_cast<int>(i), static_cast<int>(records.size()), r.id);
    TunedPlanGap g;
    g.id = r.id;
    g.group = r.group;
    const PreparedRecord p = prepare_record(r, presets, opt);
    g.stack = p.stack;
    if (!p.skip.empty()) g.skip = p.skip;
    else if (!p.has_architecture || !p.hardware_known) g.skip = "no architecture or no GPU preset";
    else if (!p.sweep_knobs.empty()) g.skip = "plan knobs missing: not a fully specified tuned plan";
    if (!g.skip.empty()) {
      out.push_back(g);
      continue;
    }
    g.published_plan = plan_text(p.plan);
    g.published_step_s = estimate_time(p.model, p.cluster, p.job, p.plan, p.efficiency).total;
    SweepSpace space;
    space.precision = {p.job.precision};
    space.activation_offload = true;  // the recipes offload activations; the sweep may too
    SweepOptions so;
    so.threads = opt.sweep_threads;
    so.top_k = 1;
    so.memory = p.memory;
    so.efficiency = p.efficiency;
    // Only the plans the record's framework runs, where a framework file knows it (a tuned
    // recipe cannot have picked what its framework refuses).
    Result<FrameworkSpec> framework = presets.framework(r.framework);
    if (framework) {
      so.framework = &*framework;
      g.framework = framework->name;
    }
    const SweepResult sr = run_sweep(p.model, p.cluster, p.job, p.gpus, space, so);
    g.plans_evaluated = sr.evaluated;
    if (sr.top.empty()) {
      g.skip = "no plan fits (sweep)";
    } else {
      g.best_plan = plan_text(sr.top.front().plan);
      g.best_step_s = sr.top.front().step_time_s;
      g.speedup = g.published_step_s / g.best_step_s;
    }
    out.push_back(g);
  }
  return out;
}

}  // namespace llmplan
