// The sweep: enumerate every parallel plan of a job on N GPUs (tp, pp, vpp, cp, ep, sp,
// micro-batch, recompute, ZeRO, offload, flash attention; precision when not pinned),
// reject what does not divide or does not fit (counted per reason), rank the rest by
// the objective and keep the memory-throughput Pareto front.
//
// The hot loop works on plain structs with no allocation per configuration; threads
// split the (tp, pp, cp) space. Thread-safety: run_sweep is reentrant; the progress
// callback is called from worker threads (it must be thread-safe).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/cost/framework.h"
#include "planner/cost/goodput.h"
#include "planner/cost/memory_model.h"
#include "planner/cost/stack_profile.h"
#include "planner/cost/plan_check.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"
#include "planner/cost/time_model.h"

namespace llmplan {

enum class Objective { tokens_per_s, memory, cost };
const char* to_string(Objective o);
bool parse_enum(const std::string& s, Objective* out);

// Which values each dimension may take. Empty vector = the sweep's default range;
// a single value pins the dimension.
struct SweepSpace {
  std::vector<int> tp, pp, vpp, cp, ep, micro_batch, zero;
  std::vector<Recompute> recompute;
  std::vector<int> sp;               // 0/1
  std::vector<int> offload;          // 0 none, 1 optimizer, 2 optimizer and parameters (ZeRO-3)
  std::vector<int> flash;            // 0/1
  std::vector<CpExchange> cp_exchange;  // for cp > 1; default: ring and all_gather
  std::vector<Precision> precision;  // default: the job's precision
  // Pipeline schedules to try where pp > 1. Empty (default): the classic ones the simulator
  // and executor run, 1F1B and interleaved 1F1B (gpipe is never better). Listing zb-h1,
  // zbv or dualpipev adds them on the shapes they take (check_plan's schedule_shape); a
  // list without 1f1b / interleaved leaves those out where pp > 1 (pp 1 plans stay).
  std::vector<Schedule> schedule;
  int max_tp = 0, max_pp = 0;        // bounds (0 = none)
  int max_micro_batch = 64;
  bool tp_across_nodes = false;
  // Activation offload (Megatron's cpu_offloading_num_layers): a plan that does not fit
  // offloads the activations of the fewest first layers per stage that make it fit (the
  // host link's time is charged; more layers would only be slower). Off by default: it
  // costs up to log2(layers) more evaluations per plan that does not fit.
  bool activation_offload = false;
};

// SweepSpace::schedule from names (`sweep --schedules`, the GUI's form): each one of
// kScheduleNames, or "all" (1F1B, interleaved and the three split-backward schedules).
// bad_input naming `field` on another name.
Status parse_sweep_schedules(const std::vector<std::string>& names, const std::string& field, std::vector<Schedule>* out);

struct SweepOptions {
  Objective objective = Objective::tokens_per_s;
  double headroom_bytes = 0;          // keep this much of each GPU free
  int threads = 0;                    // 0 = hardware concurrency
  int top_k = 10;
  bool keep_all = false;              // fill SweepResult::all (for --csv)
  MemoryOptions memory;
  Efficiency efficiency;
  // Memory conventions a plan must fit under beside `memory` (the job's own): when the
  // training stack is not known, the other known stacks' (distinct_memory_conventions).
  // A plan fits only when it fits under every one; PlanResult::peak_bytes is then the
  // largest peak (the upper end, by which the memory objective ranks) and peak_low_bytes
  // the smallest. Empty: the own convention alone.
  std::vector<MemoryConvention> also_fit;
  // Goodput (failures, checkpoints, restarts) of each fitting plan: PlanResult::goodput,
  // and gpu_hours_per_1b_tokens (the cost objective) counts it. nullptr: not modelled
  // (goodput 1). Must outlive run_sweep.
  const GoodputOptions* goodput = nullptr;
  // Only the plans this framework runs: the others are rejected as framework_refuses and
  // counted per rule in SweepResult::framework_rejected. nullptr: every plan. Must outlive
  // run_sweep.
  const FrameworkSpec* framework = nullptr;
  // The frameworks each reported plan (top, Pareto front, closest, all) is marked with:
  // PlanResult::frameworks bit i = mark_frameworks[i] runs it. At most 32.
  std::vector<FrameworkSpec> mark_frameworks;
  // Called about every 0.1 s with (evaluated so far, total estimate); may be empty.
  std::function<void(int64_t, int64_t)> progress;
  const std::atomic<bool>* cancel = nullptr;  // stop early when set
};

// One evaluated plan (fitting or not), small and copyable.
struct PlanResult {
  ParallelPlan plan;
  Precision precision = Precision::bf16;
  AmpLevel amp = AmpLevel::O2;
  RejectReason reason = RejectReason::none;  // none, does_not_fit or host_does_not_fit for evaluated plans
  double peak_bytes = 0;       // worst stage (with SweepOptions::also_fit: the largest over the conventions)
  double peak_low_bytes = 0;   // the smallest over the conventions (= peak_bytes without also_fit)
  double host_bytes_per_node = 0;  // offloaded states and activations of the node's GPUs (MemoryReport::host_bytes_per_node)
  int peak_convention = -1;    // which convention sets peak_bytes: -1 the own, else an index into also_fit
  int peak_stage = 0;
  Phase peak_phase = Phase::backward;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double gpu_hours_per_1b_tokens = 0;  // wall-clock GPU-hours, at the plan's goodput when SweepOptions::goodput is set
  double goodput = 1;                  // productive fraction of wall-clock time (SweepOptions::goodput)
  double bubble_fraction = 0;          // of the step, the pipeline bubble (StepTime::bubble_fraction)
  double exposed_comm_s = 0;           // s per step of communication not hidden (TP + PP + DP + CP + EP)
  uint32_t frameworks = 0;             // bit i: SweepOptions::mark_frameworks[i] runs it
};

struct SweepResult {
  int64_t enumerated = 0;    // plans generated
  int64_t evaluated = 0;     // passed structural checks and were costed
  int64_t fitting = 0;       // (these three do not count the full_k variants the sweep searches: sweep.cpp)
  std::array<int64_t, static_cast<int>(RejectReason::kCount)> rejected{};  // by reason
  std::vector<int64_t> framework_rejected;  // framework_refuses by rule of SweepOptions::framework (its rules' order)
  std::vector<PlanResult> top;      // fitting, best first by the objective
  std::vector<PlanResult> pareto;   // fitting, increasing memory, increasing tokens/s
  std::vector<PlanResult> all;      // every enumerated plan (keep_all only)
  bool has_closest = false;
  PlanResult closest;               // the non-fitting plan with the smallest shortfall (closer_miss)
  double seconds = 0;
  bool cancelled = false;
};

// Of two plans that do not fit, whether a is closer to fitting than b: one that fits the GPU
// and misses only host memory before one that does not fit the GPU; among the former the
// least host memory, among the latter the smallest peak.
bool closer_miss(const PlanResult& a, const PlanResult& b);

// The job with a plan's precision applied (the sweep may vary precision).
TrainingJob job_for(const TrainingJob& j, const PlanResult& r);

SweepResult run_sweep(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, int gpus, const SweepSpace& space,
                      const SweepOptions& opt);

}  // namespace llmplan
