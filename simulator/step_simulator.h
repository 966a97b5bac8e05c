// Step simulator (DESIGN.md "simulator"): plays one training step of a plan event by
// event, where the analytic model's closed formulas cannot see: uneven pipeline stages,
// which communication really overlaps which compute, the warm-up and drain of each
// schedule, and memory over time.
//
// What is simulated. One representative rank per pipeline stage: DP replicas and TP/CP
// peers of a rank behave identically, so their collectives complete at the rank's own
// arrival plus the collective's duration, and the simulation costs O(pp * m * layers
// per stage) whatever the number of GPUs. Per rank: a compute stream and one stream per
// communication kind (events.h). Per micro-batch: forward, recompute and backward of
// each layer of each chunk with its blocking TP/SP (CP, EP) collectives; PP sends between
// virtual stages (the compute stream waits for its own sends when `blocking_p2p`, as
// Megatron's non-overlapped p2p does); DP gradient all-reduce (ZeRO-0) or reduce-scatter
// (ZeRO >= 1) by bucket as the last micro-batch's backward of each chunk produces them
// (a layer's gradient bytes appear evenly over its backward, the embedding's after it);
// ZeRO-1/2 parameter all-gathers, issued at the start of the step and awaited by each
// layer's first forward (they overlap the step's first forwards, as the next step's do
// in steady state); ZeRO-3 all-gathers before every layer's forward and backward with
// one layer of prefetch, and a reduce-scatter after every backward; a barrier when every
// stage's gradients are reduced (the global gradient norm), then the optimizer step.
// Transfers crossing the same link tier of a rank share its bandwidth (event_engine.h).
// Schedules: schedule.h. Durations and bytes: sim_costs.h (from the planner).
//
// Not simulated: the tied-embedding gradient all-reduce between the first and last
// stage, the gradient-norm all-reduce's own time, compute slowed down by overlapping
// communication (Efficiency::overlap is an analytic-model fudge the simulator replaces by
// the overlap it plays out), and the embedding lookup's time.
//
// Memory over time, per rank: the static items of estimate_stage_memory (model states,
// the ZeRO-3 gathered-layer pool, comm buffers, workspace, CUDA context) plus, from the
// start of each chunk's forward to the end of its backward, that micro-batch-chunk's
// activations (with the embedding dropout mask on stage 0's chunk 0, the final-norm and
// LM-head inputs and the logits on the last stage's last chunk); during each backward,
// the recompute working set and activation gradients; during the optimizer step, its
// buffers; the fragmentation reserve as a fraction of the dynamic bytes at each moment.
//
// Size: events and tasks grow as pp * m * (layers per stage) -- pp * m * v * (layers per
// chunk) -- plus the gradient buckets, whatever dp and tp are.
//
// Thread-safety: simulate_step is pure (no shared state); run plans on many threads.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "planner/cost/memory_model.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"
#include "planner/cost/time_model.h"
#include "simulator/events.h"
#include "simulator/schedule.h"
#include "simulator/sim_costs.h"

namespace llmplan {

struct SimOptions {
  Efficiency efficiency;      // the time model's constants. Default: planner defaults.
  MemoryOptions memory;       // the memory model's constants. Default: planner defaults.
  // The compute stream waits until its previous operation's pipeline sends are done
  // (Megatron without --overlap-p2p-communication). Default: true; an interleaved plan
  // under a stack with efficiency.pp_p2p_overlap never blocks.
  bool blocking_p2p = true;
  // Transfers crossing the same tier of a rank at the same time share its bandwidth;
  // false gives each transfer the full link. Default: true.
  bool link_sharing = true;
  // Keep every operation in SimResult::events (for the trace); false keeps only the
  // summary (for re-ranking many plans). Default: true.
  bool record_events = true;
  // Keep each stage's memory curve in StageResult::memory. Default: true.
  bool record_memory = true;
};

// Time of one stage's compute stream split by what it was doing or waiting for; the
// parts add up to the step time. Waiting for an activation or gradient in flight counts
// as pp_comm, waiting for another stage to produce it as bubble.
struct SimBreakdown {
  double compute = 0;    // forward + backward (+ LM head), s
  double recompute = 0;  // s
  double tp_comm = 0;    // waiting for blocking TP/SP collectives, s
  double cp_comm = 0;
  double ep_comm = 0;
  double pp_comm = 0;    // waiting for p2p transfers (own sends when blocking, arrivals in flight)
  double dp_comm = 0;    // waiting for DP/ZeRO collectives (parameter gathers, last gradient buckets)
  double bubble = 0;     // waiting for other stages (fill, drain, uneven stages, the final barrier)
  double optimizer = 0;  // optimizer step on the GPU
  double offload = 0;    // host transfers + CPU optimizer step when offloaded
  double total = 0;      // s
};

struct MemorySample {
  double time = 0;   // s
  double bytes = 0;  // total held by the rank from this moment on
};

struct StageResult {
  int stage = 0;
  int layers = 0;
  double busy = 0;          // compute stream running forward, backward, recompute, head, s
  double compute_end = 0;   // end of its last backward, s
  SimBreakdown breakdown;
  // Memory
  double peak_bytes = 0;    // largest total held over the step
  double peak_time = 0;     // first moment it is reached, s
  Phase peak_phase = Phase::forward;
  std::array<double, kMemoryItems> peak_items{};  // the breakdown at that moment
  int peak_microbatch = -1, peak_chunk = -1;      // the pass running at the peak (-1: none)
  double peak_inflight = 0;     // activation sets held at the peak, in micro-batches (chunks / v)
  int64_t max_inflight_chunks = 0;  // most (micro-batch, chunk) sets held at any moment
  std::vector<MemorySample> memory;  // the curve (record_memory)
  StageMemory analytic;     // estimate_stage_memory for this stage, for comparison
};

struct SimResult {
  EffectiveSchedule schedule = EffectiveSchedule::one_f_one_b;
  // DualPipe (two directions) is simulated as its rank-equivalent DualPipeV plan
  // (plan_check.h cost_plan): schedule dualpipev, pp the plan's pp/2, and simulated stage s
  // standing for the plan's ranks s and pp-1-s (ranks_per_stage counts both).
  bool dualpipe = false;
  int pp = 1, vpp = 1;
  int64_t microbatches = 0;      // per pipeline per step
  int ranks_per_stage = 1;       // ranks each simulated stage stands for (dp * tp * cp)
  double total = 0;              // step time, s
  int critical_stage = 0;        // the stage with the most work (compute + in-layer comm); first on ties
  SimBreakdown breakdown;        // of the critical stage
  double bubble_fraction = 0;    // breakdown.bubble / total
  double tokens_per_s = 0;       // global batch tokens / total
  double mfu = 0;                // analytic model FLOPs / (total * gpus * peak)
  std::vector<StageResult> stages;
  std::vector<SimEvent> events;  // every operation of every simulated rank (record_events)
  StepTime analytic;             // estimate_time of the same plan (the planner's costs, even when costs are injected)
  int worst_memory_stage() const;  // stage with the largest peak_bytes
};

// Simulates one step of plan p with the planner's costs (default_costs); a DualPipe plan as
// its rank-equivalent DualPipeV plan (SimResult::dualpipe).
// REQUIRES nothing: an invalid plan gives bad_input (check_plan's message); a schedule
// that cannot complete gives runtime.
Result<SimResult> simulate_step(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                                const SimOptions& opt = {});
// The same with given costs (tests inject durations to check closed forms). `costs` must
// have p.pp stages whose layer counts are layers_in_stage(m.layers, p.pp, s) (of
// cost_plan(p) under DualPipe).
Result<SimResult> simulate_step(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                                const SimCosts& costs, const SimOptions& opt = {});

// Human-readable name of an event ("F mb3 L12", "send act mb3 -> s4", "grad all-reduce 25.0 MiB").
std::string event_name(const SimEvent& e);

}  // namespace llmplan
