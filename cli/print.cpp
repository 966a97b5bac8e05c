#include "cli/print.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/common.h"
#include "planner/spec/recipe.h"
#include "planner/spec/units.h"

namespace llmplan::cli {

void print_setup(const PlanFile& f) {
  const ParamCounts pc = count_params(f.model, 1, 1, 1, 0, 0);
  std::printf("model    %s (%s, %s parameters, %d layers, hidden %lld, heads %d/%d kv)\n", f.model.name.c_str(), to_string(f.model.family),
              format_count(pc.total).c_str(), f.model.layers, static_cast<long long>(f.model.hidden), f.model.heads, f.model.kv_heads);
  std::printf("cluster  %d x %s (%.1f GiB), %d per node (%s)\n", f.gpus, f.cluster.gpu.name.c_str(), f.cluster.gpu.memory_bytes / kGiB,
              f.cluster.gpus_per_node, f.cluster.name.c_str());
  std::printf("job      %s, seq %lld, global batch %lld, %s %s%s%s, %s\n", to_string(job_mode(f.job)), static_cast<long long>(f.job.seq_len),
              static_cast<long long>(f.job.global_batch), to_string(f.job.precision), to_string(f.job.amp),
              f.job.fp8_linear() ? ", fp8 linears " : "", f.job.fp8_linear() ? to_string(f.job.fp8) : "", to_string(f.job.optimizer));
  std::printf("plan     %s\n", plan_summary(f.plan).c_str());
  if (f.plan.schedule == Schedule::dualpipe)
    std::printf("         dualpipe costs as its rank-equivalent dualpipev plan (pp %d, dp %d): stage s below stands for ranks s and %d-s\n",
                f.plan.pp / 2, f.plan.dp * 2, f.plan.pp - 1);
}

void print_memory(const MemoryReport& r, double headroom_bytes) {
  const bool multi = r.first.stage != r.last.stage;
  std::printf("\nMemory per GPU (GiB)%s\n", multi ? ", first and last pipeline stage" : "");
  if (multi) std::printf("  %-24s %12s %12s\n", "component", "stage 0", ("stage " + std::to_string(r.last.stage)).c_str());
  else std::printf("  %-24s %12s\n", "component", "GiB");
  for (int i = 0; i < kMemoryItems; ++i) {
    const auto item = static_cast<MemoryItem>(i);
    if (multi) std::printf("  %-24s %12.2f %12.2f\n", label(item), r.first.bytes[i] / kGiB, r.last.bytes[i] / kGiB);
    else std::printf("  %-24s %12.2f\n", label(item), r.first.bytes[i] / kGiB);
  }
  if (multi) {
    std::printf("  %-24s %12.2f %12.2f\n", "total (peak)", r.first.total / kGiB, r.last.total / kGiB);
    std::printf("  %-24s %12s %12s\n", "peak phase", to_string(r.first.peak_phase), to_string(r.last.peak_phase));
  } else {
    std::printf("  %-24s %12.2f\n", "total (peak)", r.first.total / kGiB);
    std::printf("  %-24s %12s\n", "peak phase", to_string(r.first.peak_phase));
  }
  if (r.host_bytes_per_node > 0) {
    std::printf("  host memory by offload: %.2f GiB per node (activations %.2f + model states %.2f GiB per GPU on stage %d)",
                r.host_bytes_per_node / kGiB, r.worst.host_activation_bytes / kGiB, r.worst.host_state_bytes / kGiB, r.worst.stage);
    if (r.host_capacity > 0)
      std::printf(" of %.0f GiB: %s\n", r.host_capacity / kGiB, r.host_fits() ? "fits" : "DOES NOT FIT in the node's host memory");
    else
      std::printf("; the node's host memory is not known (cluster host_memory_gib): not checked\n");
  }
  const double budget = r.capacity - headroom_bytes;
  std::printf("\nPeak %s on stage %d (%s, %d layers, %.2f micro-batches in flight); capacity %s%s: %s\n", gib(r.worst.total).c_str(),
              r.worst.stage, to_string(r.worst.peak_phase), r.worst.layers, r.worst.inflight_microbatches, gib(r.capacity).c_str(),
              headroom_bytes > 0 ? (" - headroom " + gib(headroom_bytes)).c_str() : "",
              r.worst.total <= budget ? (r.host_fits() ? "fits, " + gib(budget - r.worst.total) + " free" : std::string("fits on the GPU, but its offload does not fit in host memory")).c_str()
                                      : ("DOES NOT FIT, short by " + gib(r.worst.total - budget)).c_str());
}

void print_time(const StepTime& t, int gpus) {
  std::printf("\nStep time %.3f s: compute %.3f, recompute %.3f, TP %.3f, PP %.3f, DP %.3f, CP %.3f, EP %.3f, offload %.3f, bubble %.3f, optimizer %.3f\n",
              t.total, t.compute, t.recompute, t.tp_comm, t.pp_comm, t.dp_comm, t.cp_comm, t.ep_comm, t.offload, t.bubble, t.optimizer);
  std::printf("Throughput %.0f tokens/s (%.0f per GPU), MFU %.1f%%, HFU %.1f%%\n", t.tokens_per_s, t.tokens_per_s / gpus, 100 * t.mfu,
              100 * t.hfu);
}

void print_explanation(const Explanation& e, const PlanFile& f) {
  const StageMemory& w = e.memory.worst;
  if (e.fits) {
    std::printf("\nThe plan fits: peak %s of %s budget on stage %d (%s), %s to spare.\n", gib(w.total).c_str(), gib(e.budget_bytes).c_str(),
                w.stage, to_string(w.peak_phase), gib(-e.shortfall_bytes).c_str());
  } else if (e.shortfall_bytes <= 0) {
    std::printf("\nThe plan does NOT fit: its GPUs have room (peak %s of %s), but its offload needs %s of host memory per node, "
                "more than the node's %s.\n",
                gib(w.total).c_str(), gib(e.budget_bytes).c_str(), gib(e.memory.host_bytes_per_node).c_str(), gib(e.memory.host_capacity).c_str());
  } else {
    std::printf("\nThe plan does NOT fit: peak %s exceeds the %s budget by %s on stage %d of %d, in the %s phase; the largest component is %s (%s).\n",
                gib(w.total).c_str(), gib(e.budget_bytes).c_str(), gib(e.shortfall_bytes).c_str(), w.stage, f.plan.pp,
                to_string(w.peak_phase), label(e.largest_item), gib(w.bytes[static_cast<int>(e.largest_item)]).c_str());
  }
  for (size_t i = 0; i < e.faster_schedules.size(); ++i) {
    const PlanChange& c = e.faster_schedules[i];
    if (i == 0) std::printf("\nFaster pipeline schedules that fit (their memory is the cost):\n");
    std::printf("  %-36s %+9.2f GiB  peak %.2f GiB  %+.1f%% throughput\n", c.description.c_str(), c.delta_bytes / kGiB, c.peak_bytes / kGiB,
                100 * c.throughput_change);
  }
  if (e.changes.empty()) {
    std::printf("No single change of the plan lowers its memory.\n");
    return;
  }
  std::printf("\n%s single changes (memory and throughput from the model):\n", e.fits ? "Memory-saving" : "Cheapest");
  std::printf("  %-36s %12s %12s %14s %8s\n", "change", "delta GiB", "peak GiB", "tokens/s", "fits");
  for (const PlanChange& c : e.changes) {
    std::printf("  %-36s %+12.2f %12.2f %14.0f %8s   (%+.1f%% throughput)\n", c.description.c_str(), c.delta_bytes / kGiB,
                c.peak_bytes / kGiB, c.tokens_per_s, c.fits ? "yes" : "no", 100 * c.throughput_change);
  }
}

void print_fit_advice(const FitAdvice& a) {
  std::printf("\nWhat would make a plan fit (each change alone; its best plan found by a sweep, %d sweeps):\n", a.sweeps);
  if (a.changes.empty()) {
    std::printf("  nothing tried does: not up to %d GPUs, nor a 128-token sequence, LoRA, QLoRA, FP8 or offload\n", a.max_gpus);
    return;
  }
  std::printf("  %-56s %-52s %9s %12s\n", "change", "best plan", "peak GiB", "tokens/s");
  for (const JobChange& c : a.changes)
    std::printf("  %-56s %-52s %9.2f %12.0f\n", c.description.c_str(), plan_summary(c.plan).c_str(), c.peak_bytes / kGiB, c.tokens_per_s);
  if (a.min_gpus == 0) std::printf("  (no GPU count up to %d fits)\n", a.max_gpus);
}

void print_fit_advice_for(const Setup& s, const SweepSpace& space, const SweepOptions& opt) {
  FitAdviceOptions fo;
  fo.node_gpus = s.presets.node_gpus(s.file.cluster);
  const auto start = std::chrono::steady_clock::now();
  bool printed = false;
  fo.progress = [&](int g) {
    if (std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) return;
    std::fprintf(stderr, "\rfit advice: trying %d GPUs...", g);
    printed = true;
  };
  const FitAdvice a = advise_fit(s.file.model, s.file.cluster, s.file.job, s.file.gpus, space, opt, fo);
  if (printed) std::fprintf(stderr, "\n");
  print_fit_advice(a);
}

}  // namespace llmplan::cli
