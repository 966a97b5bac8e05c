#include "planner/search/explain.h"

#include <algorithm>

#include "planner/cost/plan_check.h"

namespace llmplan {

namespace {

std::string recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "no recompute";
    case Recompute::selective: return "selective recompute";
    case Recompute::full: return "full recompute";
    case Recompute::full_k: return "full recompute of k layers";
  }
  return "?";
}

// Every single-knob change worth trying, in the field report's order of remedies:
// precision and recompute, then ZeRO/offload, then smaller micro-batches, then model
// parallelism. Invalid ones are filtered by check_plan afterwards.
std::vector<PlanChange> candidate_changes(const TrainingJob& j, const ParallelPlan& p) {
  std::vector<PlanChange> out;
  auto add = [&](std::string d, TrainingJob nj, ParallelPlan np) {
    np.grad_accum = static_cast<int>(nj.global_batch / (static_cast<int64_t>(np.micro_batch) * np.dp));
    // A custom split names one count per virtual stage: a change of stages splits evenly.
    if (np.pp != p.pp || np.vpp != p.vpp || np.pipeline_split != PipelineSplit::custom) np.stage_layers.clear();
    if (np.stage_layers.empty() && np.pipeline_split == PipelineSplit::custom) np.pipeline_split = PipelineSplit::even;
    // The schedule follows vpp unless the change is the schedule itself or keeps a
    // split-backward one (check_plan drops a change whose shape it no longer takes).
    if (np.schedule == p.schedule && !splits_backward(p.schedule))
      np.schedule = np.vpp > 1 ? Schedule::interleaved : (p.schedule == Schedule::gpipe ? Schedule::gpipe : Schedule::one_f_one_b);
    PlanChange c;
    c.description = std::move(d);
    c.job = nj;
    c.plan = np;
    out.push_back(c);
  };
  if (j.precision == Precision::fp32) {
    TrainingJob nj = j;
    nj.precision = Precision::bf16;
    nj.amp = AmpLevel::O2;
    add("precision fp32 -> bf16 (O2)", nj, p);
  } else if (j.amp == AmpLevel::O1) {
    TrainingJob nj = j;
    nj.amp = AmpLevel::O2;
    add("AMP O1 -> O2", nj, p);
  }
  // Fine-tuning can train less: LoRA adapters instead of every weight, then QLoRA's 4-bit
  // base weights (Dettmers et al. 2023) instead of 16-bit ones. (A pretraining job cannot.)
  if (j.mode == TrainMode::finetune) {
    TrainingJob nj = j;
    set_job_mode(JobMode::lora, &nj);
    add("full fine-tune -> LoRA r" + std::to_string(nj.lora.rank), nj, p);
  } else if (j.mode == TrainMode::lora && !j.qlora()) {
    TrainingJob nj = j;
    set_job_mode(JobMode::qlora, &nj);
    add("LoRA -> QLoRA (NF4 base weights)", nj, p);
  }
  for (Recompute r : {Recompute::selective, Recompute::full}) {
    if (static_cast<int>(r) <= static_cast<int>(p.recompute) && p.recompute != Recompute::full_k) continue;
    ParallelPlan np = p;
    np.recompute = r;
    add(recompute_name(p.recompute) + " -> " + recompute_name(r), j, np);
  }
  if (!p.flash_attention) {
    ParallelPlan np = p;
    np.flash_attention = true;
    add("flash attention on", j, np);
  }
  if (p.tp > 1 && !p.sp) {
    ParallelPlan np = p;
    np.sp = true;
    add("sequence parallel on", j, np);
  }
  for (int z = p.zero + 1; z <= 3; ++z) {
    ParallelPlan np = p;
    np.zero = z;
    add("ZeRO-" + std::to_string(p.zero) + " -> " + std::to_string(z), j, np);
  }
  if (!p.offload_optimizer) {
    ParallelPlan np = p;
    np.offload_optimizer = true;
    if (np.zero == 0) np.zero = 1;
    add("optimizer offload to host", j, np);
  }
  // ZeRO-Infinity / FSDP CPU offload: the parameter shard to host memory as well (ZeRO-3
  // with optimizer offload, no pipeline).
  if (!p.offload_params && p.pp == 1) {
    ParallelPlan np = p;
    np.zero = 3;
    np.offload_optimizer = np.offload_params = true;
    add("parameter and optimizer offload to host (ZeRO-3)", j, np);
  }
  // AdamW's moments in bf16 beside the fp32 master weights (Megatron-Core's precision-aware
  // optimizer, --exp-avg-dtype/--exp-avg-sq-dtype bf16): 4 B/param less before sharding,
  // with the distributed optimizer it needs.
  if (j.optimizer == Optimizer::adamw && j.moments == MomentsDtype::fp32 && j.precision != Precision::fp32 && j.amp == AmpLevel::O2) {
    TrainingJob nj = j;
    nj.moments = MomentsDtype::bf16;
    ParallelPlan np = p;
    if (np.zero == 0) np.zero = 1;
    add("AdamW moments fp32 -> bf16 (precision-aware optimizer)", nj, np);
  }
  for (int mb = p.micro_batch / 2; mb >= 1; mb /= 2) {
    ParallelPlan np = p;
    np.micro_batch = mb;
    add("micro-batch " + std::to_string(p.micro_batch) + " -> " + std::to_string(mb), j, np);
    if (mb == 1) break;
  }
  // The pipeline schedule: a zero-bubble order trades the bubble for W-gradient buffers
  // (ZB-H1 and ZB-V hold 1F1B's activations, DualPipeV one chunk more; DualPipe on the same
  // ranks holds two stages' parameters for half the pipeline's bubble); back to 1F1B frees
  // those buffers. Each is costed like any change; explain prints what it costs.
  if (p.pp > 1) {
    ParallelPlan np = p;
    if (splits_backward(p.schedule)) {
      np.schedule = Schedule::one_f_one_b;
      np.vpp = 1;
      add(std::string("schedule ") + to_string(p.schedule) + " -> 1f1b", j, np);
    } else {
      for (Schedule sc : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev, Schedule::dualpipe}) {
        np = p;
        np.schedule = sc;
        np.vpp = sc == Schedule::zb_h1 ? 1 : 2;
        np.pipeline_split = PipelineSplit::even;
        add(std::string("schedule ") + to_string(p.schedule) + " -> " + to_string(sc), j, np);
      }
    }
  }
  if (p.dp % 2 == 0) {
    ParallelPlan np = p;
    np.dp /= 2;
    np.tp *= 2;
    np.micro_batch = std::max(1, p.micro_batch);
    add("tp " + std::to_string(p.tp) + " -> " + std::to_string(np.tp) + " (dp " + std::to_string(p.dp) + " -> " + std::to_string(np.dp) + ")", j, np);
    np = p;
    np.dp /= 2;
    np.pp *= 2;
    add("pp " + std::to_string(p.pp) + " -> " + std::to_string(np.pp) + " (dp " + std::to_string(p.dp) + " -> " + std::to_string(np.dp) + ")", j, np);
  }
  return out;
}

}  // namespace

Explanation explain_plan(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, int gpus,
                         double headroom_bytes, const MemoryOptions& mo, const Efficiency& e, const FrameworkSpec* framework) {
  Explanation ex;
  if (framework) ex.framework_refusal = framework_refusal_text(*framework, m, j, p);
  ex.memory = estimate_memory(m, c, j, p, mo);
  ex.time = estimate_time(m, c, j, p, e);
  ex.headroom_bytes = headroom_bytes;
  ex.budget_bytes = c.gpu.memory_bytes - headroom_bytes;
  ex.shortfall_bytes = ex.memory.worst.total - ex.budget_bytes;
  ex.fits = ex.shortfall_bytes <= 0 && ex.memory.host_fits();
  int largest = 0;
  for (int i = 1; i < kMemoryItems; ++i)
    if (ex.memory.worst.bytes[i] > ex.memory.worst.bytes[largest]) largest = i;
  ex.largest_item = static_cast<MemoryItem>(largest);

  std::vector<PlanChange> candidates = candidate_changes(j, p);
  // Activation offload of the fewest layers per stage that make the plan fit on the GPU
  // (bisection: memory falls with each layer offloaded, the host link's time grows), or of
  // every layer but the double buffer when none does.
  const int stage_layers = pp_stage_layers(m.layers, cost_plan(p), 0);  // DualPipe: its two stages
  if (ex.shortfall_bytes > 0 && p.activation_offload_layers < stage_layers && stage_layers >= 3) {
    auto gpu_fits = [&](int k) {
      ParallelPlan q = p;
      q.activation_offload_layers = k;
      return estimate_memory(m, c, j, q, mo).worst.total <= ex.budget_bytes;
    };
    int k = fewest_offload_layers(std::max(2, p.activation_offload_layers), stage_layers, gpu_fits);
    if (k == 0) k = stage_layers;
    PlanChange ch;
    ch.description = "activation offload " + std::to_string(p.activation_offload_layers) + " -> " + std::to_string(k) + " layers";
    ch.job = j;
    ch.plan = p;
    ch.plan.activation_offload_layers = k;
    candidates.push_back(ch);
  }
  for (PlanChange& ch : candidates) {
    if (check_plan(m, c, ch.job, ch.plan, gpus, /*tp_across_nodes=*/false) != RejectReason::none) continue;
    if (framework && framework_refusal(*framework, m, ch.job, ch.plan) >= 0) continue;
    const MemoryReport mr = estimate_memory(m, c, ch.job, ch.plan, mo);
    const StepTime st = estimate_time(m, c, ch.job, ch.plan, e);
    ch.peak_bytes = mr.worst.total;
    ch.delta_bytes = mr.worst.total - ex.memory.worst.total;
    ch.tokens_per_s = st.tokens_per_s;
    ch.throughput_change = st.tokens_per_s / ex.time.tokens_per_s - 1;
    ch.fits = mr.worst.total <= ex.budget_bytes && mr.host_fits();
    if (ch.delta_bytes < -1) ex.changes.push_back(ch);  // only changes that save memory
    // A pipeline schedule that is faster and fits, whatever it costs in memory.
    else if (ch.plan.schedule != p.schedule && ch.fits && ch.throughput_change > 1e-3) ex.faster_schedules.push_back(ch);
  }
  std::stable_sort(ex.faster_schedules.begin(), ex.faster_schedules.end(),
                   [](const PlanChange& a, const PlanChange& b) { return a.tokens_per_s > b.tokens_per_s; });
  std::stable_sort(ex.changes.begin(), ex.changes.end(), [](const PlanChange& a, const PlanChange& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.tokens_per_s > b.tokens_per_s;
    return a.peak_bytes < b.peak_bytes;
  });
  return ex;
}

}  // namespace llmplan
