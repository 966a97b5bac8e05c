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

// Efficiency constants: the only tunables of the model, all in one place. The defaults
// are fitted to the published runs in data/reference by `llmplan validate --fit` (fit
// on the even half of each group's fully specified throughput records, odd half held
// out; see planner/validate.h); calibration from measured profiles replaces them per
// machine. Fields the fit does not tune keep a physical default stated on the line.
struct Efficiency {
  // GEMMs: time = 2mnk / (peak * gemm * d/(d + gemm_half_dim)) + 2mnk * gemm_traffic / bw,
  // d = the smallest of m, n, k. The first term is the tensor-core work at the sustained
  // fraction of peak, lowered for thin GEMMs (tile and wave quantization, the prologue of
  // each K loop); the second is the HBM traffic of operand tiles re-read from memory
  // that the kernel does not hide, which costs more on GPUs with a high peak/bandwidth
  // ratio (H100: 295 FLOP/B against A100's 153).
  double gemm = 0.80;            // fraction of dense peak a large GEMM sustains
  double gemm_half_dim = 64;     // elements: efficiency is half of `gemm` at this dimension
  double gemm_traffic = 0;       // bytes of unhidden HBM traffic per GEMM FLOP
  // Fused (flash) attention: causal FLOPs (forward + 2.5x backward) at attention *
  // d/(d + gemm_half_dim) * s/(s + attention_half_seq) of peak (d head width, s keys),
  // plus the K/V tiles each query block streams: FLOPs * attention_traffic / bw.
  double attention = 0.55;       // fraction of peak at long sequences and wide heads
  double attention_half_seq = 0; // keys: efficiency is halved at this sequence length
  double attention_traffic = 0;  // bytes of unhidden HBM/L2 traffic per attention FLOP
  double memory = 0.75;          // fraction of HBM bandwidth reached by elementwise kernels
  double network = 0.80;         // fraction of link bandwidth reached by NCCL collectives
  double kernel_launch_s = 4e-6; // fixed cost per GEMM/collective kernel, s
  double overlap = 0.90;         // fraction of compute that can hide DP/ZeRO traffic
  double tp_overlap = 0.0;       // fraction of TP traffic hidden behind GEMMs
  double fp8_gemm_speedup = 1.5; // fp8 linear layers versus bf16 (GEMM-only)
};

// Which link a collective crosses, from the rank layout (TP innermost, then CP, DP, PP).
// A group inside one node uses NVLink. A group that spans nodes with k ranks in each
// node runs its NCCL rings over k channels that leave the node through k different
// NICs, so its bus bandwidth per rank is k x the per-GPU NIC bandwidth (nccl-tests on
// 8-GPU nodes with 4 x 200 Gb/s NICs reach about 91-96 GB/s busbw, i.e. the node's
// aggregate); PP sends and the CP ring are point-to-point and use one NIC (k = 1).
// The latency is per ring step, averaged so that (n-1) steps cost (k-1) NVLink hops and
// (nodes-1) network hops, as a hierarchical ring does.
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
