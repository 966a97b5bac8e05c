#include "gui/plan_details.h"

#include <cstdio>

namespace llmplan::gui {

PlanDetails compute_plan_details(const SweepContext& ctx, const PlanResult& r) {
  PlanDetails d;
  d.file = ctx.base;
  d.file.plan = r.plan;
  d.file.job = job_for(ctx.base.job, r);
  // The breakdown under the convention that sets the plan's peak, so that its total is the
  // table's peak (the upper end over the stacks' conventions).
  MemoryOptions mo = ctx.memory;
  if (r.peak_convention >= 0 && static_cast<size_t>(r.peak_convention) < ctx.also_fit.size()) {
    const MemoryConvention& c = ctx.also_fit[static_cast<size_t>(r.peak_convention)];
    mo = c.memory;
    d.file.job.grads = c.grads;
  }
  d.explanation = explain_plan(d.file.model, d.file.cluster, d.file.job, d.file.plan, d.file.gpus, ctx.headroom_bytes, mo, ctx.efficiency,
                               ctx.framework.get());
  d.memory = d.explanation.memory;
  d.time = d.explanation.time;
  d.timeline = simulated_timeline(d.file);
  return d;
}

PlanResult evaluate_plan(const PlanFile& f, double headroom_bytes, const MemoryOptions& mo, const Efficiency& e) {
  PlanResult r;
  r.plan = f.plan;
  r.precision = f.job.precision;
  r.amp = f.job.amp;
  const MemoryReport mem = estimate_memory(f.model, f.cluster, f.job, f.plan, mo);
  const StepTime st = estimate_time(f.model, f.cluster, f.job, f.plan, e);
  r.peak_bytes = mem.worst.total;
  r.peak_stage = mem.worst.stage;
  r.peak_phase = mem.worst.peak_phase;
  r.step_time_s = st.total;
  r.tokens_per_s = st.tokens_per_s;
  r.mfu = st.mfu;
  r.gpu_hours_per_1b_tokens = f.gpus * 1e9 / st.tokens_per_s / 3600.0;
  r.host_bytes_per_node = mem.host_bytes_per_node;
  r.reason = mem.fits(headroom_bytes)       ? RejectReason::none
             : mem.gpu_fits(headroom_bytes) ? RejectReason::host_does_not_fit
                                            : RejectReason::does_not_fit;
  return r;
}

std::string plan_summary(const ParallelPlan& p) {
  std::string s = "dp" + std::to_string(p.dp) + " tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp);
  if (p.vpp > 1) s += " vpp" + std::to_string(p.vpp);
  if (p.cp > 1) s += " cp" + std::to_string(p.cp);
  if (p.ep > 1) s += " ep" + std::to_string(p.ep);
  if (p.sp) s += " sp";
  s += " mb" + std::to_string(p.micro_batch) + " ga" + std::to_string(p.grad_accum) + " zero" + std::to_string(p.zero) + " " +
       recompute_text(p);
  if (p.offload_optimizer) s += p.offload_params ? " offload (optimizer, parameters)" : " offload";
  if (!p.flash_attention) s += " no-flash";
  return s;
}

}  // namespace llmplan::gui
