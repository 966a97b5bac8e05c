// Per-step time model (DESIGN.md "Time model"): compute from the recipe's FLOPs over a
// roofline with a size-dependent efficiency, communication per tier with an alpha-beta
// model, the pipeline bubble, overlap of DP/ZeRO traffic with backward, and the
// optimizer step bound by memory bandwidth. The per-operation pieces are public so that
// the simulator times its events with the same functions (one source of truth).
//
// Pure functions, no allocation. Thread-safety: pure.
#pragma once

#include "planner/recipe.h"
#include "planner/specs.h"

namespace llmplan {

// Efficiency constants: the only tunables of the model, all in one place. Defaults are
// fitted to the published runs in data/reference by `llmplan validate --fit` (see
// README "Validation"); calibration from measured profiles replaces them per machine.
struct Efficiency {
  double gemm = 0.80;          // fraction of dense peak a large GEMM reaches
  double attention = 0.55;     // fused (flash) attention fraction of peak, fwd+bwd average
  double memory = 0.75;        // fraction of HBM bandwidth reached by elementwise kernels
  double network = 0.80;       // fraction of link bandwidth reached by NCCL collectives
  double kernel_launch_s = 4e-6;  // fixed cost per GEMM/collective kernel
  double overlap = 0.90;       // fraction of DP/ZeRO traffic that overlap can hide
  double tp_overlap = 0.0;     // fraction of TP traffic hidden behind GEMMs
  double fp8_gemm_speedup = 1.5;  // fp8 linear layers versus bf16 (GEMM-only)
};

// Which link a collective crosses, from the rank layout (TP innermost, then CP, DP, PP).
struct Link {
  double bandwidth = 0;  // bytes/s per GPU, one direction
  double latency = 0;    // s per hop
};
enum class Group { tp, cp, dp, pp, ep };
Link group_link(const ClusterSpec& c, const ParallelPlan& p, Group g);

// Alpha-beta collectives over n ranks moving `bytes` per rank (ring algorithms):
// all-reduce 2(n-1)/n * bytes / bw + 2(n-1) * lat; all-gather and reduce-scatter half that.
double allreduce_time(double bytes, int n, const Link& l, const Efficiency& e);
double allgather_time(double bytes, int n, const Link& l, const Efficiency& e);  // = reduce-scatter
double alltoall_time(double bytes, int n, const Link& l, const Efficiency& e);
double p2p_time(double bytes, const Link& l, const Efficiency& e);

// Roofline time of one (m x k) * (k x n) GEMM with `elem_bytes` operands.
double gemm_time(double m, double n, double k, double elem_bytes, double peak_flops, double bandwidth, const Efficiency& e);

// Times of one transformer layer for one micro-batch on one rank.
struct LayerTimes {
  double forward = 0;          // compute, s
  double backward = 0;         // compute, s
  double recompute = 0;        // extra forward work during backward under the policy, s
  double tp_comm = 0;          // TP/SP collectives, fwd + bwd, s (before overlap)
  double cp_comm_exposed = 0;  // CP ring exchange not hidden behind attention, s
  double ep_comm = 0;          // MoE all-to-all dispatch + combine, fwd + bwd, s
};
LayerTimes layer_times(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const LayerContext& lc,
                       LayerRecompute policy, const Efficiency& e);

struct StepTime {
  // Breakdown of one optimizer step on the critical (slowest) pipeline stage, s.
  double compute = 0;        // forward + backward of every micro-batch
  double recompute = 0;
  double tp_comm = 0;        // exposed
  double pp_comm = 0;        // exposed
  double dp_comm = 0;        // exposed DP/ZeRO (after overlap with backward)
  double cp_comm = 0;        // exposed
  double ep_comm = 0;        // exposed
  double offload = 0;        // host transfers and CPU optimizer
  double bubble = 0;         // pipeline fill and drain
  double optimizer = 0;      // optimizer step on the GPU
  double total = 0;          // s per step
  double tokens_per_s = 0;   // global, all GPUs
  double model_flops = 0;    // per step, all GPUs (6N + attention convention)
  double hardware_flops = 0; // per step, all GPUs, with recompute
  double mfu = 0;            // model FLOPs / (total * gpus * peak)
  double hfu = 0;
  double bubble_fraction() const { return total > 0 ? bubble / total : 0; }
};

// Compute dtype of the job's GEMMs (bf16/fp16; fp32 runs use tf32 tensor cores if the
// GPU has them).
Dtype compute_dtype(const TrainingJob& j, const GpuSpec& g);

// REQUIRES: check_plan(m, c, j, p, ...) == none.
StepTime estimate_time(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                       const Efficiency& e = {});

}  // namespace llmplan
