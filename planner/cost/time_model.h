// Per-step time model (DESIGN.md "Time model"): compute from the recipe's FLOPs over a
// roofline with a size-dependent efficiency, communication per tier with an alpha-beta
// model, the pipeline bubble, overlap of DP/ZeRO traffic with backward, and the
// optimizer step bound by memory bandwidth. The per-operation pieces are public so that
// the simulator times its events with the same functions (one source of truth).
//
// Pure functions, no allocation. Thread-safety: pure.
#pragma once

#include "planner/spec/recipe.h"
#include "planner/spec/specs.h"

namespace llmplan {

// Efficiency constants: the only tunables of the model, all in one place. The defaults
// below are the output of `llmplan validate --fit` (planner/validate/validate.h): Nelder-Mead from
// fit_prior() on the even half of each group's fully specified throughput records in
// data/reference/published_runs.json (77 records, mostly llm-foundry MPT sweeps, plus
// Narayanan 2021, torchtitan and llm.c); the odd half is held out. Re-run it after a
// change to the model and paste the printed values here (a test checks they are still
// the fit's optimum). `network`, `kernel_launch_s` and `loss_bytes_per_logit` are not
// fitted (see their lines).
// Calibration from measured profiles replaces the defaults per machine.
struct Efficiency {
  // GEMMs: time = 2mnk / (peak * gemm * d/(d + gemm_half_dim)) + 2mnk * gemm_traffic / bw,
  // d = the smallest of m, n, k. The first term is the tensor-core work at the sustained
  // fraction of peak, lowered for thin GEMMs (tile and wave quantization, the prologue of
  // each K loop); the second is the HBM traffic of operand tiles re-read from memory
  // that the kernel does not hide, which costs more on GPUs with a high peak/bandwidth
  // ratio (H100: 295 FLOP/B against A100's 153). Fitted: a large bf16 GEMM reaches
  // 1/(1/0.95 + 0.00223*peak/bw) of peak: 0.72 on A100-80GB, 0.58 on H100 SXM (`gemm`
  // sits at its bound, 0.95, and the thin-GEMM term near 0: the traffic term carries both).
  double gemm = 0.95;               // fraction of dense peak, before the traffic term
  double gemm_half_dim = 4.74737;   // elements: efficiency is half of `gemm` at this dimension
  double gemm_traffic = 0.0022313; // bytes of unhidden HBM traffic per GEMM FLOP (16-bit operands)
  // Fused (flash) attention: causal FLOPs (forward + 2.5x backward) at attention *
  // d/(d + gemm_half_dim) * s/(s + attention_half_seq) of the mma.sync peak (d head width,
  // s keys; GpuSpec::mma_sync_fraction x dense peak: 2/3 of it on Hopper), plus the K/V
  // tiles each query block streams: FLOPs * attention_traffic / bw. Fitted, head width 128
  // and very long sequences: 0.33 of peak on A100-80GB (106 TFLOP/s), 0.23 on H100 SXM
  // (224); at 8k keys 0.91 of that, at 1k keys 0.55 (the traffic term at 0).
  double attention = 0.343523;        // fraction of the mma.sync peak at long sequences and wide heads
  double attention_half_seq = 804.746;  // keys: efficiency is halved here
  double attention_traffic = 1.01189e-07;  // bytes of unhidden HBM/L2 traffic per attention FLOP
  // Whether the stack's fused attention runs on warp-level mma.sync, so that the GPU's
  // mma_sync_fraction applies (1: FlashAttention-2 and Triton kernels, PyTorch SDPA), or
  // on the full-rate warpgroup instructions (0: cuDNN's fused attention, which Transformer
  // Engine calls, and FlashAttention-3 on Hopper; Shah et al. 2024 sec. 2.2). Stack data,
  // not fitted.
  double attention_mma_sync = 1;
  // The fraction of the softmax's exponentials (one per score, forward and backward, on the
  // SFUs: GpuSpec::tensor_flops_per_exp) that the stack's fused attention does not hide
  // behind its MMAs, in the same kernel efficiency. 1: serialised, as NVIDIA describes
  // cuDNN's attention loop on Blackwell (BMM2 waits for the softmax of BMM1's scores);
  // 0: fully hidden (the default: no softmax term). Stack data, not fitted.
  double attention_exp_serial = 0;
  double memory = 0.867043;          // fraction of HBM bandwidth reached by elementwise kernels
  // Not fitted: it trades off exactly against the overlaps on these records; nccl-tests
  // reach 0.8-0.95 of the link (and of the node's NICs across nodes).
  double network = 0.80;            // fraction of link bandwidth reached by NCCL collectives
  double kernel_launch_s = 4e-6;    // fixed cost per GEMM/collective kernel, s (not fitted)
  // Gradient reduction has no consumer until the optimizer step and hides behind
  // backward. Fitted: 0.007 (weakly determined: on these records it trades against
  // gather_overlap -- a start from the priors lands at overlap 1, gather_overlap 0.01 at
  // the same objective -- tp_overlap and the GEMM terms). A stack whose code overlaps the
  // reduction bucket by bucket (StackProfile::overlaps_grad_reduce: Megatron-Core) sets
  // it to 1, not fitted; what hides still costs its HBM traffic (dp_exposed_time).
  double overlap = 0.00664203;      // fraction of backward compute that can hide gradient reduction
  // Parameter all-gathers gate the next layer's compute (ZeRO-3 before every layer, every
  // micro-batch; ZeRO-1/2 after the step), so only prefetch can hide them. Fitted: 0.42
  // on these runs (FSDP1 with rate-limited all-gathers; weakly determined, see overlap).
  // 1 for a stack that prefetches bucket by bucket (overlaps_param_gather).
  double gather_overlap = 0.422673;  // fraction of compute that can hide parameter all-gathers
  // TP collectives hidden behind the GEMMs. Fitted: 0.22 on the generic records (torchtitan's
  // TP is vanilla DTensor, not overlapped; the objective is flat in it between 0.2 and 0.7).
  // It was 0.70 while sequence parallelism's h-wide elementwise work was charged unsplit:
  // that overcharge stood in for the TP traffic. Megatron-Bridge's own fit, with its
  // tp_comm_overlap, is 0.90.
  double tp_overlap = 0.237458;      // fraction of TP traffic hidden behind GEMMs
  // FP8 linear GEMMs versus 16-bit at equal efficiency, for every FP8 recipe: an effective
  // figure with the recipe's casts in it. Fitted at its bound, the peak ratio 2 (2.0;
  // Megatron-Bridge's own fit 1.69): the FP8 records run faster than the model has them
  // even so, and charging the casts'
  // traffic explicitly (fused into the producing kernels: the FP8 writes of each
  // orientation, current scaling's amax read) only widened that gap. Recipes are not told
  // apart in time: the published same-plan pairs (Megatron-Bridge 25.09, B200/GB200) have
  // MXFP8 1.5-6% slower than per-tensor current scaling, the opposite of what the formats'
  // traffic says, so the difference lies in kernels this model does not describe.
  double fp8_gemm_speedup = 2.0;
  // Cross-entropy over the logits: HBM bytes per logit that the loss kernels move in one
  // forward + backward of a trained head, outside the LM-head GEMMs (which write and read
  // the 16-bit logits and their gradient). Counted from the kernels, not fitted. The
  // default is PyTorch's aten loss on fp32-upcast logits: forward upcast (2 read + 4
  // written), log-softmax (4 + 4); backward nll (4 written), log-softmax backward (4 + 4
  // read, 4 written), downcast (4 + 2): 36 in all. A fused classifier on the 16-bit logits
  // that writes their gradient in place over them (llm.c's fused_classifier_kernel5: one
  // read for the row's max and sum, a second read and the in-place write of softmax -
  // one-hot) moves 3 x 2 = 6. `llmplan validate` sets it per framework
  // (framework_efficiency); head_times splits it 1/3 forward, 2/3 backward.
  double loss_bytes_per_logit = 36;
  // ZeRO-3 under pipeline parallelism gathers the stage's parameters once per step and
  // reduce-scatters its gradients once, after the last micro-batch (1), or per micro-batch
  // as with pp 1 (0): the stack's MemoryOptions::zero3_pp_unsharded, a fact of its code
  // and not fitted (set from the stack file's memory section). Default: 0.
  double zero3_pp_gather_once = 0;
  // The dtype the data-parallel gradient reduction moves: 1 = fp32 whatever the gradient
  // buffer holds (PyTorch FSDP's MixedPrecision reduce_dtype float32: torchtitan's
  // mixed_precision_reduce default, Composer's DEFAULT policy), 0 = the gradient buffer's
  // own dtype (Megatron-Core reduces its main_grad buffer in place, fp32 or 16-bit as
  // grad_reduce_in_fp32 sets it; DeepSpeed and llm.c their 16-bit gradients; this
  // project's executor its gradient storage). The stack's memory.grad_reduce_fp32, a fact
  // of its code and not fitted. Default: 0.
  double grad_reduce_fp32 = 0;
  // The interleaved pipeline's point-to-point sends run asynchronously under the next
  // chunk's compute (1) or block the stage (0). Megatron-Core's interleaved schedule with
  // overlap_p2p_comm posts each send and receive without waiting and waits only before the
  // chunk that reads the tensor (megatron/core/pipeline_parallel/schedules.py,
  // forward_backward_pipelining_with_interleaving); Megatron-Bridge and NeMo 2.0 turn it on
  // whenever vpp > 1 (CommOverlapConfig._get_model_comm_overlap_cfgs: overlap_p2p_comm
  // True, batch_p2p_comm False) and use blocking batched sends otherwise. The stack's
  // overlap.pp_p2p, a fact of its code and not fitted. Default: 0.
  double pp_p2p_overlap = 0;
};

// Which link a collective crosses, from the rank layout (TP innermost, then CP, DP, PP).
// A group inside one node uses NVLink. A group that spans nodes with k ranks in each
// node runs its NCCL rings over k channels that leave the node through k different
// NICs, so its bus bandwidth per rank is k x the per-GPU NIC bandwidth (nccl-tests on
// 8-GPU nodes with 4 x 200 Gb/s NICs reach about 91-96 GB/s busbw, i.e. the node's
// aggregate); PP sends and the CP ring are point-to-point and use one NIC (k = 1).
// The latency is per ring step, averaged so that (n-1) steps cost (k-1) NVLink hops and
// (nodes-1) network hops, as a hierarchical ring does.
// Which link a group's transfers cross: inside one NVLink domain (the node, or an NVL72
// rack) or out through the node's NICs. The simulator shares a tier's bandwidth between
// the transfers that cross it at once.
enum class LinkTier : uint8_t { intra_node, inter_node };
struct Link {
  double bandwidth = 0;  // bytes/s per GPU, one direction
  double latency = 0;    // s per hop
  LinkTier tier = LinkTier::intra_node;
};
enum class Group { tp, cp, dp, pp, ep };
Link group_link(const ClusterSpec& c, const ParallelPlan& p, Group g);

// Alpha-beta collectives over n ranks moving `bytes` per rank (ring algorithms):
// all-reduce 2(n-1)/n * bytes / bw + 2(n-1) * lat; all-gather and reduce-scatter half that.
double allreduce_time(double bytes, int n, const Link& l, const Efficiency& e);
double allgather_time(double bytes, int n, const Link& l, const Efficiency& e);  // = reduce-scatter
double alltoall_time(double bytes, int n, const Link& l, const Efficiency& e);
double p2p_time(double bytes, const Link& l, const Efficiency& e);
// The alpha (latency) terms of the same: what a transfer costs however wide its link, and
// what does not stretch when transfers share a link (the simulator's split of each one).
double allreduce_latency(double bytes, int n, const Link& l);
double allgather_latency(double bytes, int n, const Link& l);  // = reduce-scatter, all-to-all
double p2p_latency(double bytes, const Link& l);

// Roofline time of one (m x k) * (k x n) GEMM with `elem_bytes` operands.
double gemm_time(double m, double n, double k, double elem_bytes, double peak_flops, double bandwidth, const Efficiency& e);

// Times of one transformer layer for one micro-batch on one rank.
struct LayerTimes {
  double forward = 0;          // compute, s
  double backward = 0;         // compute, s
  double weight_grad = 0;      // of backward, the weight-gradient GEMMs (a split backward's W), s
  double recompute = 0;        // extra forward work during backward under the policy, s
  double tp_comm = 0;          // TP/SP collectives, fwd + bwd, s (before overlap)
  double cp_comm_exposed = 0;  // CP ring exchange not hidden behind attention (all-gather: all of it), s
  double cp_comm_forward = 0;  // of cp_comm_exposed, the forward's part under all-gather; 0 for the ring (a third)
  double ep_comm = 0;          // MoE all-to-all dispatch + combine, fwd + bwd, s
  // Of tp_comm and ep_comm, the alpha terms and kernel launches (the rest is the beta term:
  // bytes over the link's bandwidth). The CP exchange's exposed time is a remainder behind
  // attention and has no such split.
  double tp_comm_latency = 0, ep_comm_latency = 0;  // s
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

// ---- Pieces of estimate_time that the simulator schedules itself (one source of truth).

// LM head + cross-entropy of one micro-batch on the last stage: the head GEMM forward,
// its input and weight gradients backward, and the loss kernels' traffic
// (Efficiency::loss_bytes_per_logit), 1/3 of it forward and 2/3 backward (the split the
// model has always used: backward twice the forward). With multi-token prediction
// (ModelSpec::mtp_layers), each module's block under the plan's recompute (full_k: none),
// eh_proj and another head pass and loss.
struct HeadTimes {
  double forward = 0;   // s
  double backward = 0;  // s (input gradient only under LoRA, where the head is frozen)
};
HeadTimes head_times(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const Efficiency& e);

// The optimizer step of one rank holding `trainable` parameters (sharded over DP x CP
// with ZeRO >= 1): on the GPU, bound by the bytes it reads and writes; or, offloaded,
// the host transfers plus DeepSpeed's CPU Adam.
struct OptimizerTime {
  double optimizer = 0;  // s on the GPU (0 when offloaded)
  double offload = 0;    // s of host transfers and CPU step (0 unless offloaded)
  double total() const { return optimizer + offload; }
};
OptimizerTime optimizer_time(const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const Efficiency& e, double trainable);

// How layer_times' per-layer collective sums split over the passes of one micro-batch
// (forward, backward, recompute): TP 2 collectives forward, 2 backward (when gradients
// flow), 2 more under full recompute; EP 2 + 2 all-to-alls; CP's exposed ring time
// 1/3 forward, 2/3 backward (the ring runs once forward, twice backward). The latency
// parts (LayerTimes::tp_comm_latency, ep_comm_latency) split the same way.
struct LayerCommByPass {
  double tp[3] = {0, 0, 0};
  double cp[3] = {0, 0, 0};
  double ep[3] = {0, 0, 0};
  double tp_latency[3] = {0, 0, 0};  // of tp
  double ep_latency[3] = {0, 0, 0};  // of ep
};
LayerCommByPass layer_comm_by_pass(const LayerTimes& lt, LayerRecompute policy, bool grad_flows);

// Bytes of one micro-batch's activation (or its gradient) sent between pipeline stages.
double pp_boundary_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p);

// ---- DP / ZeRO collectives of one optimizer step on one rank of a stage. Gradients are
// reduced over DP x CP (both hold replicas of the stage's weights), over that group's link.
Link dp_group_link(const ClusterSpec& c, const ParallelPlan& p);

// PyTorch DDP's bucket_cap_mb (25 MiB): ZeRO-0 all-reduces gradients in buckets this size.
constexpr double kDdpBucketBytes = 25.0 * 1024 * 1024;
// Megatron-Core's distributed optimizer (ZeRO-1) buckets: max(40M, 1M x dp) parameters.
double zero1_bucket_params(int dp_group);

enum class DpKind { allreduce, reduce_scatter, allgather };
// `count` collectives of `bytes` each (per rank), `duration` seconds in all (each pays
// its own ring latency). FSDP/ZeRO-2/3 issue one per layer (the wrapping unit, plus the
// embedding/head), DDP one per 25 MiB bucket, ZeRO-1 one per zero1_bucket_params().
struct DpCollective {
  DpKind kind = DpKind::allreduce;
  double bytes = 0;     // per collective, per rank
  double count = 0;
  double duration = 0;  // s, all `count` of them
  double host_copy = 0;  // s of `duration`: parameter offload's copies from host memory (with_param_fetch in dp_step)
};
struct DpStep {
  int group = 1;                      // dp * cp
  Link link;                          // dp_group_link
  double grad_bytes_per_param = 0;    // bytes per gradient the reduction moves (Efficiency::grad_reduce_fp32)
  double weight_bytes_per_param = 0;  // gathered parameters
  // Bucket sizes the collectives are cut into (bytes; 0: one per layer unit).
  double grad_bucket_bytes = 0, gather_bucket_bytes = 0;
  DpCollective grads;   // per step; ZeRO-3: per micro-batch
  DpCollective params;  // ZeRO-1/2: after the optimizer step; ZeRO-3: per micro-batch, before forward and again before backward
  double last_bucket = 0;  // s: the last gradient bucket, produced at the end of backward, never hidden
  bool per_microbatch = false;  // ZeRO-3
  double hbm_bandwidth = 0;     // B/s of the GPU's memory, which hidden collectives share with compute (0: not charged)
  double host_bandwidth = 0;    // B/s of the host link the parameter copies use (ClusterSpec::host_bandwidth; 0: none)
};
// The collectives of a rank holding `trainable` parameters, `all_params` in all, in
// `layers` layers. trainable == 0, or group == 1 below ZeRO-3: no collectives. A one-rank
// ZeRO-3 still visits each unit (free, unless its parameters come from the host).
DpStep dp_step(const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const Efficiency& e, double trainable,
               double all_params, int layers);
// ZeRO-3 with parameter offload (ParallelPlan::offload_params): the time to copy the rank's
// shard of a gathered unit of `unit_bytes` (whole, 16-bit) from host memory before its
// all-gather, over the GPU's host link (ClusterSpec::host_bandwidth: PCIe, or NVLink-C2C on
// Grace parts) at the collectives' efficiency.
double param_fetch_time(double unit_bytes, int shard_group, double host_bandwidth, const Efficiency& e);
// Exposed DP time of the analytic model: `overlap` x backward hides gradient reductions,
// `gather_overlap` x forward (and backward) hides parameter gathers; fwd/bwd are one
// micro-batch's compute on the stage (bwd with recompute). A hidden collective is not
// free: the bytes it receives are written to and read from HBM beside the compute's own
// traffic (collective_hbm_traffic), which slows the compute it hides behind by that
// traffic's time at the memory's bandwidth.
double dp_exposed_time(const DpStep& d, double microbatches, double fwd, double bwd, const Efficiency& e);
// HBM bytes a ring collective moves per byte it receives over the link: an all-gather
// writes each arriving chunk into its output and reads it again to forward it (2); a
// reduce-scatter writes the arriving chunk, reads it and its own chunk to add them (3);
// an all-reduce is one of each (2.5 per byte of its two halves). NCCL's ring algorithm
// (NCCL documentation, "Collective operations": ring all-gather, reduce-scatter; the
// reduction reads both operands and writes the sum).
double collective_hbm_traffic(DpKind kind);

// REQUIRES: check_plan(m, c, j, p, ...) == none.
StepTime estimate_time(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                       const Efficiency& e = {});

// ---- estimate_time in two halves, for the sweep. Its inner loops cost many plans that
// differ only in ZeRO stage, offload, recompute policy and virtual stages; the per-layer
// times and the pipeline's critical stage do not depend on those, so they are computed
// once per plan shape. estimate_time above is the composition of the two halves, so the
// results are the same to the last bit.

// The slowest pipeline stage for one micro-batch under a recompute policy.
struct CriticalStage {
  double max_stage = 0;  // s: compute + recompute + in-layer communication of the slowest stage
  double sum_stage = 0;  // s: the same summed over every stage (the bubble is the rest)
  double compute = 0;    // s: forward + backward of the slowest stage
  double recompute = 0;  // s
  double tp = 0, cp = 0, ep = 0;  // s: its in-layer communication
  double fwd = 0;        // s: its forward (hides parameter gathers)
  double bwd = 0;        // s: its backward with recompute (hides gradient reduction)
  double wgrad = 0;      // s: of bwd, the weight-gradient GEMMs (LayerTimes::weight_grad)
};

// The pipeline's fill and drain on the critical path, s, from its stages' per-micro-batch
// work `w`: (sum - max) / vpp (equal stages: (p-1) T / v; Narayanan et al. 2021), scaled for
// a split-backward schedule by max(F, F + B - W) / (F + B + W) with F = w.fwd, W = w.wgrad
// and B the rest of the critical stage's work (see the definition for the sources). 0
// without a pipeline.
double pipeline_bubble(const ParallelPlan& p, const CriticalStage& w);

// Exposed pipeline point-to-point time per step, s, for one send of `hop` s per stage
// boundary: 2 (pp - 2) hops of the fill and drain, plus one send each way per micro-batch
// per chunk -- blocking, or, with Efficiency::pp_p2p_overlap and an interleaved schedule,
// only the part of each that outlasts the next chunk's forward (w.fwd / vpp) or backward
// (w.bwd / vpp). 0 without a pipeline.
double pp_exposed_time(const ParallelPlan& p, double microbatches, double hop, const CriticalStage& w, const Efficiency& e);

// What estimate_time needs that depends only on the model, cluster, job, efficiency and
// the plan's dp, tp, pp, cp, cp_exchange, ep, sp, micro_batch and flash_attention.
struct StepTimeInputs {
  LayerTimes kinds[kLayerKinds][2][3];  // [layer kind][frozen layer][LayerRecompute]: one layer, one micro-batch (kinds present)
  uint32_t layer_kinds = 1;   // recipe.h layer_kinds_present
  HeadTimes head;             // LM head on the last stage (with MTP blocks not recomputed: full_k's)
  CriticalStage uniform[3];   // for Recompute::none, selective, full (full_k depends on vpp)
  int frozen = 0;             // frozen bottom layers
  double microbatches = 0;    // per step per pipeline
  double peak = 0;            // FLOP/s of the compute dtype
  double pp_hop = 0;          // s: one activation send between stages (0 when pp == 1)
  double trainable = 0;       // parameters trained on the first stage's rank
  double all_params_rank = 0; // all parameters on that rank
  int layers0 = 0;            // layers of the first stage
  DpStep dp[4];               // dp_step of that rank for ZeRO stage 0..3
  double step_tokens = 0;     // tokens per step, all GPUs
  double model_flops = 0;     // per step, all GPUs
  double layer_activation_bytes[3] = {0, 0, 0};  // kept by one layer for one micro-batch, per LayerRecompute (activation offload)
};
// REQUIRES: check_plan(m, c, j, p, ...) == none.
StepTimeInputs step_time_inputs(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                                const Efficiency& e = {});
// REQUIRES: `in` = step_time_inputs(m, c, j, q, e) for a plan q that differs from p at most
// in zero, offload_optimizer, offload_params, recompute, recompute_layers, vpp and schedule (and not in vpp
// for a model of several layer kinds, whose stages' kinds interleaving changes).
StepTime estimate_time(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                       const StepTimeInputs& in, const Efficiency& e = {});

}  // namespace llmplan
