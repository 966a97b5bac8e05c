#include "planner/search/fit_advice.h"

#include <algorithm>
#include <cstdio>

namespace llmplan {

namespace {

// The best plan of a job variant, or false when none fits.
bool best_of(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, int gpus, const SweepSpace& space, const SweepOptions& opt,
             FitAdvice* advice, JobChange* out) {
  ++advice->sweeps;
  const SweepResult r = run_sweep(m, c, j, gpus, space, opt);
  if (r.top.empty()) return false;
  out->gpus = gpus;
  out->job = job_for(j, r.top.front());
  out->plan = r.top.front().plan;
  out->peak_bytes = r.top.front().peak_bytes;
  out->tokens_per_s = r.top.front().tokens_per_s;
  return true;
}

}  // namespace

FitAdvice advise_fit(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, int gpus, const SweepSpace& space, SweepOptions opt,
                     const FitAdviceOptions& fo) {
  FitAdvice a;
  opt.top_k = 1;
  opt.keep_all = false;
  opt.progress = nullptr;
  char text[160];
  // ---- more GPUs: every count within a node, then whole nodes.
  const int node = std::max(fo.node_gpus > 0 ? fo.node_gpus : c.gpus_per_node, 1);
  a.max_gpus = fo.max_gpus > 0 ? fo.max_gpus : std::min(65536, std::max(1024, 64 * gpus));
  for (int g = gpus + 1; g <= a.max_gpus; g = g < node ? g + 1 : (g / node + 1) * node) {
    if (g > node && g % node != 0) continue;
    if (fo.progress) fo.progress(g);
    ClusterSpec cg = c;
    cg.gpus_per_node = node;
    cg = cluster_with_gpus(cg, g);
    JobChange ch;
    if (best_of(m, cg, j, g, space, opt, &a, &ch)) {
      a.min_gpus = g;
      if (g >= node) std::snprintf(text, sizeof text, "%d GPUs (%d nodes of %d; from %d)", g, g / node, node, gpus);
      else std::snprintf(text, sizeof text, "%d GPUs (from %d)", g, gpus);
      ch.description = text;
      a.changes.push_back(ch);
      break;
    }
  }
  // ---- a shorter sequence on the same GPUs: bisection over multiples of 128 (memory grows
  // with the sequence).
  {
    int64_t lo = 0, hi = j.seq_len / 128 + (j.seq_len % 128 ? 1 : 0);  // lo fits (0: none known), hi does not
    JobChange best;
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      TrainingJob js = j;
      js.seq_len = mid * 128;
      JobChange ch;
      if (best_of(m, c, js, gpus, space, opt, &a, &ch)) lo = mid, best = ch;
      else hi = mid;
    }
    if (lo > 0 && lo * 128 < j.seq_len) {
      a.max_seq = lo * 128;
      std::snprintf(text, sizeof text, "sequence %lld (from %lld)", static_cast<long long>(a.max_seq), static_cast<long long>(j.seq_len));
      best.description = text;
      a.changes.push_back(best);
    }
  }
  // ---- adapters on the base model
  if (j.mode == TrainMode::pretrain || j.mode == TrainMode::finetune) {
    for (JobMode mode : {JobMode::lora, JobMode::qlora}) {
      TrainingJob jl = j;
      set_job_mode(mode, &jl);
      jl.lora = LoraSpec{};
      JobChange ch;
      if (best_of(m, c, jl, gpus, space, opt, &a, &ch)) {
        ch.description = mode == JobMode::lora ? "LoRA r8 on q,v (frozen 16-bit base)" : "QLoRA r8 on q,v (frozen NF4 base)";
        a.changes.push_back(ch);
        break;  // QLoRA only when LoRA does not fit
      }
    }
  }
  // ---- FP8 linear layers
  if (!j.fp8_linear() && c.gpu.peak(Dtype::fp8) > 0) {
    TrainingJob jf = j;
    jf.fp8 = Fp8Recipe::tensorwise;
    JobChange ch;
    if (best_of(m, c, jf, gpus, space, opt, &a, &ch)) {
      ch.description = "FP8 linear layers (tensorwise scaling)";
      a.changes.push_back(ch);
    }
  }
  // ---- offload, where the space kept it out
  const bool optimizer_offload_tried = space.offload.empty() || std::count(space.offload.begin(), space.offload.end(), 1) > 0;
  if (!space.activation_offload || !optimizer_offload_tried) {
    SweepSpace so = space;
    so.activation_offload = true;
    so.offload.clear();
    JobChange ch;
    if (best_of(m, c, j, gpus, so, opt, &a, &ch)) {
      ch.description = ch.plan.activation_offload_layers > 0 ? "activation offload (" + std::to_string(ch.plan.activation_offload_layers) +
                                                                   " layers per stage to host memory)"
                                                             : "optimizer offload to host memory";
      a.changes.push_back(ch);
    }
  }
  return a;
}

}  // namespace llmplan
