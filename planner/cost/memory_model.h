// Per-GPU memory model (DESIGN.md "Memory model"): model states by precision scheme and
// ZeRO stage, activations from the recipe times the micro-batches each pipeline stage
// holds under its schedule, and every other buffer that makes real runs OOM as a named
// line. Computed for every pipeline stage; the report keeps the most loaded one, the
// first and the last (they differ: users are burnt by averages).
//
// Pure functions, no allocation (the sweep calls estimate_memory in its hot loop).
// Thread-safety: pure.
#pragma once

#include <array>

#include "planner/cost/plan_check.h"
#include "planner/spec/recipe.h"
#include "planner/spec/specs.h"

namespace llmplan {

enum class MemoryItem {
  weights,            // parameters held by the rank (16-bit or fp32 copy used by compute)
  gradients,
  optimizer_states,   // Adam m and v (or momentum)
  master_weights,     // fp32 copy for mixed precision (O2)
  activations,        // kept between forward and backward, all in-flight micro-batches
  backward_working,   // working set of one layer beside the kept activations: in backward its
                      // re-materialised tensors + activation gradients; at a forward peak the
                      // transient tensors of the layer running its forward
  logits_loss,        // logits and fp32 softmax of the LM head (last stage)
  gathered_params,    // ZeRO-3: full layers gathered for compute (current + prefetch)
  comm_buffers,       // DP buckets, PP send/recv, TP/SP gather buffers, NCCL
  workspace,          // GEMM (cuBLAS) workspace
  cuda_context,       // CUDA context + kernels loaded (outside the allocator)
  fragmentation,      // caching-allocator reserve beyond what is allocated
  kCount
};
constexpr int kMemoryItems = static_cast<int>(MemoryItem::kCount);
const char* to_string(MemoryItem item);  // "optimizer_states"
const char* label(MemoryItem item);      // "optimizer states"

enum class Phase { forward, backward, optimizer };
const char* to_string(Phase p);

// What a "selective" recompute keeps (Recompute::selective).
enum class SelectiveRecompute {
  attention_scores,  // Megatron's (Korthikanti 2022): all but the attention scores; llmplan's executor
  torch_op_sac,      // PyTorch per-operator SAC (torchtitan "op"): SavedTensorSums::op_sac
};

// How a stack keeps the quantized weights of an FP8 recipe (TrainingJob::fp8).
enum class Fp8WeightCopies {
  none,            // not kept: cast at each use and freed, the 16-bit weight saved (torchao Float8Linear)
  cached,          // every layer's copies in both orientations, from a step's first micro-batch to
                   // its end (Transformer Engine's weight cache: `is_first_microbatch`, which
                   // Megatron-Core's TE wrappers pass under gradient accumulation)
  per_microbatch,  // cast at each forward, the dgrad copy saved with the micro-batch's tensors
                   // (TE modules called without is_first_microbatch)
  primary,         // the weights themselves are FP8: Transformer Engine quantized parameters
                   // (Megatron-Core's fp8_param / --fp8-param-gather) hold each linear weight
                   // only in the recipe's orientations, all step, with no 16-bit copy; the
                   // optimizer's fp32 master weights are the high-precision values. Under
                   // ZeRO-3 counted as `cached` (the shards' dtype is not modelled).
};

// Names in stack files ("attention_scores", "torch_op_sac"; "none", "cached",
// "per_microbatch"); parse_enum returns false on an unknown name.
const char* to_string(SelectiveRecompute v);
bool parse_enum(const std::string& s, SelectiveRecompute* out);
const char* to_string(Fp8WeightCopies v);
bool parse_enum(const std::string& s, Fp8WeightCopies* out);

// Framework and hardware constants outside the model. Every default has its reason, and
// the defaults describe llmplan's own executor (tests/executor* hold them byte-exact);
// the other stacks' conventions come from their profiles (planner/cost/stack_profile.h,
// data/stacks/*.json), which `--stack` and `llmplan validate` apply.
struct MemoryOptions {
  // CUDA context with cuBLAS/NCCL kernels loaded, as nvidia-smi shows it for a PyTorch
  // process on A100/H100 with CUDA 12 lazy loading (~0.5-0.8 GiB measured in the field).
  // Default: 0.6 GiB.
  double cuda_context_bytes = 0.6 * 1024 * 1024 * 1024;
  // cuBLAS workspace on Hopper (PyTorch CUBLAS_WORKSPACE_CONFIG :4096:8 = 32 MiB).
  double gemm_workspace_bytes = 32.0 * 1024 * 1024;
  // Data-parallel gradient bucket (PyTorch DDP bucket_cap_mb = 25), double-buffered.
  double dp_bucket_bytes = 25.0 * 1024 * 1024;
  // NCCL's own buffers per communicator a rank is part of (NCCL_BUFFSIZE 4 MiB x channels).
  double nccl_bytes_per_group = 32.0 * 1024 * 1024;
  // Caching-allocator reserve beyond allocated bytes, as a fraction of the dynamic part
  // (activations, working sets, buffers). Default: 5%.
  double fragmentation_fraction = 0.05;
  // What Recompute::selective keeps. Default: attention_scores (the executor's).
  SelectiveRecompute selective = SelectiveRecompute::attention_scores;
  // Bytes per logit element (b*s*V/t) held at the loss's peak on the last stage. 0 means
  // the executor's loss: the 16-bit logits plus their fp32 softmax (act bytes + 4).
  // PyTorch's F.cross_entropy on logits upcast with .float() (torchtitan, HF) peaks in
  // the loss backward with three fp32 tensors: the saved log-probabilities, their
  // gradient and the gradient of the upcast logits = 12; DTensor's loss_parallel
  // cross-entropy under TP holds four (16). Default: 0.
  double loss_bytes_per_logit = 0;
  // The same under tp > 1, where it differs (DTensor's loss_parallel: 16). 0: as above.
  double loss_bytes_per_logit_tp = 0;
  // What the caching allocator holds reserved over the loss beyond loss_bytes_per_logit,
  // per logit: blocks the loss freed that its later, larger requests cannot reuse (the
  // 16-bit logits' block when fp32 tensors follow). From the stack's loss op sequence
  // replayed through the allocator (caching_allocator.h); counted with the logits so that
  // the peak is what torch.cuda.max_memory_reserved() reports. Without TP and under TP.
  // Default: 0 (the executor's own allocator reuses exactly).
  double loss_cached_bytes_per_logit = 0;
  double loss_cached_bytes_per_logit_tp = 0;
  // ZeRO-3 under pipeline parallelism as torchtitan runs it: FSDP2 is applied with
  // reshard_after_forward False when PP is on (torchtitan apply_fsdp: "For PP, do not
  // reshard after forward to avoid per-microbatch all-gathers"), and the pipeline stage
  // skips the gradient reduce-scatter until its last micro-batch
  // (torch.distributed.pipelining stage.py backward_maybe_with_nosync:
  // set_requires_gradient_sync(False), set_reshard_after_backward(False)), so the stage's
  // parameters stay gathered in the compute dtype all step and its gradients accumulate
  // unsharded in the reduce dtype, fp32 (FSDPParam.to_accumulated_grad_if_needed). Default:
  // false (ZeRO-3 gathers and frees each unit per micro-batch, as with pp 1).
  bool zero3_pp_unsharded = false;
  // ZeRO-3 as PyTorch FSDP2 wraps a model (torchtitan: one fully_shard per layer, then the
  // root): the root's parameters -- embedding, final norm, LM head -- are gathered at the
  // root's pre-forward and stay gathered to the end of backward ("the root FSDP state has
  // its value [reshard_after_forward] specially set to False", fully_shard's docstring),
  // beside the current and the prefetched layer. Default: false (the executor gathers the
  // embedding and the head as units in order of use, like the layers).
  bool zero3_root_gathered = false;
  // ZeRO-3 as DeepSpeed runs it: parameters are gathered per submodule, not per layer
  // (PartitionedParameterCoordinator.fetch_sub_module gathers the module's own parameters,
  // then prefetches at most stage3_prefetch_bucket_size elements ahead while fewer than
  // stage3_max_live_parameters are resident), and a released parameter stays gathered when
  // it is used again within stage3_max_reuse_distance elements (deepspeed/runtime/zero/
  // partitioned_param_coordinator.py, config.py v0.16.4). Resident at once: at most the
  // reuse window and the prefetch bucket beside the largest module, and never more than the
  // stage's parameters. Gradients leave autograd one parameter at a time into the
  // persistent contiguous IPG bucket of reduce_bucket_size elements (stage3.py
  // __ipg_bucket_flat_buffer, contiguous_gradients true by default), so the transient is
  // the largest parameter's gradient, not a layer's. Default: false (layer units, FSDP's).
  bool zero3_module_fetch = false;
  // The optimizer step's fp32 gradients (step_grad_copy_bytes): a stack that keeps 16-bit
  // gradients beside fp32 master weights casts the rank's gradient shard to fp32 for the
  // step, a new buffer beside the 16-bit one. DeepSpeed ZeRO 1-2 (stage_1_and_2.py step():
  // single_grad_partition = flatten(averaged_gradients).to(fp32), set as the fp32
  // partition's .grad before the 16-bit gradients are freed; its estimator
  // estimate_zero2_model_states_mem_needs counts "18 = 2_grads_16bit + 4_grads_32bit +
  // 4_params_32bit + 8_optimizer_states_32bit"), ZeRO-3 one sub-group at a time (stage3.py
  // _prepare_fp32_grad_for_sub_group, freed by _release_sub_group), and Megatron-Core's
  // distributed optimizer with 16-bit gradient buffers (_copy_model_grads_to_main_grads:
  // shard_main_param.grad = shard_model_grad.float(), a no-op view on fp32 main grads; the
  // precision-aware optimizer reads the 16-bit ones as decoupled_grad instead). Default:
  // false (the executor's Adam reads its gradients where they are).
  bool step_fp32_grad_copy = false;
  // ZeRO-3 steps sub-group by sub-group, each fp32 copy freed before the next: at most this
  // many elements at once (DeepSpeed's sub_group_size, default 1e9); 0 = the whole shard.
  double step_grad_copy_group_elements = 0;
  // Pipeline parallelism as torch.distributed.pipelining ran it in 2024-25 (torchtitan's
  // pipeline): a stage allocates receive buffers for each micro-batch of each chunk and
  // keeps them (PipelineStage's per-micro-batch activation and gradient receive buffers),
  // the input gradient stays on the activation buffer's .grad to the next step, and the
  // schedule appends every micro-batch's output to output_chunks, cleared at the next
  // step() (the last stage's outputs are its logits, detached but kept). PyTorch changed the
  // last two in 2025 (pull requests 153383 and 164329); kept as the upper end. Default:
  // false (one micro-batch's send and receive buffers, Megatron's and the executor's).
  bool pp_buffers_per_microbatch = false;
  // DeepSpeed's defaults for the above, in parameters (elements): stage3_max_reuse_distance
  // and stage3_max_live_parameters 1e9, stage3_prefetch_bucket_size 5e7, reduce_bucket_size
  // 5e8 (deepspeed/runtime/zero/config.py v0.16.4).
  double zero3_reuse_params = 1e9;
  double zero3_prefetch_params = 5e7;
  double zero3_reduce_bucket_params = 5e8;
  // Sequence parallel by autograd (DTensor, torchtitan): the LM head's all-gathered input
  // is saved for its weight gradient, so it is live from the head forward to the head
  // backward, the loss included. Megatron and the executor free it after the GEMM and
  // gather it again in backward. Default: false.
  bool sp_head_input_saved = false;
  // MoE under TP, where each TP rank routes its own tokens through whole experts: the
  // stack computes a layer's router and routed-expert gradients (LoRA: the experts'
  // adapters) into zeroed partial buffers, sums them over TP and adds them (llmplan's own
  // executor does), so one layer's worth of them is live through its MoE backward.
  // Frameworks that fold the TP sum into the gradient reduction hold none. Default: true.
  bool moe_tp_partial_gradients = true;
  // MoE: the routing probabilities scale the experts' activation (Megatron-Core's
  // TEGroupedMLP, activation_func_with_probs, core_v0.14 megatron/core/transformer/moe/
  // experts.py), so the expert outputs are not kept for the combine's backward
  // (LayerContext::moe_probs_in_activation). Default: false (the executor's combine).
  bool moe_probs_in_activation = false;
  // Scratch a layer GEMM takes beside the backward's activation gradients. llmplan's CPU
  // backend widens 16-bit operands into fp32 tiles (exec::cpu_op_scratch_bytes; the
  // runner sets it); a GPU's cuBLAS workspace is gemm_workspace_bytes instead, held all
  // step long. Default: 0.
  double backward_gemm_scratch_bytes = 0;
  // The same for the LM head's GEMM (forward and backward, last stage), which is wider
  // than a layer's by the vocabulary (exec::cpu_op_scratch_bytes; the runner sets it).
  // Default: 0.
  double head_gemm_scratch_bytes = 0;
  // The attention kernel's workspace at a layer's attention backward moment (llmplan's
  // CPU flash and materialised kernels carve fp32 panels; exec::cpu_op_scratch_bytes,
  // the runner sets it; a GPU's flash kernels keep theirs within the saved tensors and the
  // cuBLAS workspace). Default: 0.
  double attention_scratch_bytes = 0;
  // FP8 recipes: whether the stack saves the linear layers' inputs quantized for their
  // weight gradients (Transformer Engine: Linear and LayerNormLinear save the FP8 input;
  // torchao's Float8Linear saves the high-precision one), and how it keeps the quantized
  // weights. What each recipe's tensors weigh is planner/spec/fp8_recipe.h's. Defaults: the
  // executor's, which has no FP8 tensors (false, none).
  bool fp8_quantized_inputs = false;
  Fp8WeightCopies fp8_weight_copies = Fp8WeightCopies::none;
};

struct StageMemory {
  int stage = 0;
  int layers = 0;                  // transformer layers on this stage
  double inflight_microbatches = 0;  // activation sets held at the peak (1F1B: min(m, p-i))
  std::array<double, kMemoryItems> bytes{};  // at the peak phase
  std::array<double, 3> phase_total{};       // forward, backward, optimizer
  std::array<std::array<double, kMemoryItems>, 3> phase_bytes{};  // each phase's items at its own peak
  std::array<double, kMemoryItems> item_peak{};  // each item's largest value at any moment of the step
  Phase peak_phase = Phase::backward;
  double total = 0;                // max over phases, bytes
  double allocator_peak = 0;       // total without CUDA context (what torch.cuda reports)
  double host_activation_bytes = 0;  // activation offload: this GPU's activations in host memory at its peak
  double weight_grad_buffer_bytes = 0;  // split backward: output gradients waiting for their W (within activations)
  double host_state_bytes = 0;       // optimizer offload: this GPU's optimizer states, master weights and gradients in host memory
  double model_states() const;     // weights + gradients + optimizer + master
};

struct MemoryReport {
  StageMemory worst;   // the stage with the largest total
  StageMemory first;   // stage 0
  StageMemory last;    // stage pp-1 (== first when pp == 1)
  double capacity = 0;   // GPU memory, bytes
  double trainable_params_rank = 0;  // on the worst stage
  double params_rank = 0;            // all parameters on the worst stage's rank
  // Host memory a node's GPUs fill by offload: the largest per-GPU host bytes of any stage
  // (activations + optimizer states) times the GPUs per node, against the node's host
  // memory (ClusterSpec::host_memory_bytes; 0 = not known, not checked).
  double host_bytes_per_node = 0;
  double host_capacity = 0;
  bool host_fits() const { return host_capacity <= 0 || host_bytes_per_node <= host_capacity; }
  bool gpu_fits(double headroom_bytes) const { return worst.total + headroom_bytes <= capacity; }
  bool fits(double headroom_bytes) const { return gpu_fits(headroom_bytes) && host_fits(); }
};

// Bytes of model states for `trainable` and `frozen` parameters held by one rank, before
// any ZeRO split: precision scheme, AMP level, optimizer and gradient convention.
struct BytesPerParam {
  double weights, gradients, optimizer, master, frozen_weights;
};
BytesPerParam bytes_per_param(const TrainingJob& j);

struct ModelStateBytes {
  double weights = 0, gradients = 0, optimizer_states = 0, master_weights = 0;
  double host = 0;  // offload: the states moved to host memory (not in total())
  double total() const { return weights + gradients + optimizer_states + master_weights; }
  ModelStateBytes operator+(const ModelStateBytes& o) const {
    return {weights + o.weights, gradients + o.gradients, optimizer_states + o.optimizer_states, master_weights + o.master_weights,
            host + o.host};
  }
};
// Model states of one rank holding `trainable` + `frozen` parameters, sharded over a
// data-parallel group of `shard_group` ranks by ZeRO stage `zero` (0-3); offload moves
// optimizer states, master weights and gradients to the host. The ZeRO paper's formulas
// (Rajbhandari et al. 2020, Sec. 5) for the DeepSpeed convention.
// frozen_nf4: of `frozen`, the parameters stored in NF4 (QLoRA, kNf4BytesPerParam each).
// offload_params (ZeRO-3) moves the 16-bit parameter shard to the host as well.
ModelStateBytes model_state_bytes(double trainable, double frozen, const TrainingJob& j, int zero, int shard_group, bool offload,
                                  double frozen_nf4 = 0, bool offload_params = false);

// The fp32 gradients the optimizer step makes from 16-bit ones (MemoryOptions::
// step_fp32_grad_copy), bytes: one per fp32 master weight on the GPU (`master_weight_bytes`,
// the shard the rank steps; 0 under offload, O3 or fp32 training), none when the gradients
// are already fp32 or the moments are bf16 (the precision-aware optimizer reads 16-bit
// gradients), ZeRO-3 at most one sub-group's.
double step_grad_copy_bytes(const TrainingJob& j, double master_weight_bytes, int zero, const MemoryOptions& opt);

// The model states one rank of pipeline stage `stage` holds (`pc` = count_params of the
// plan's split): trainable and frozen parameters ZeRO-sharded over dp*cp, a routed expert's
// over the dp*cp/ep ranks that hold it; offload (p.offload_optimizer) moves the fp32 states
// to ModelStateBytes::host. with_frozen = false leaves the frozen parameters out (what a
// LoRA checkpoint writes: planner/cost/goodput.h).
ModelStateBytes stage_state_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, const ParamCounts& pc, int stage,
                                  bool with_frozen = true);

// Micro-batches per step on each pipeline: global / (micro * dp).
int64_t microbatches_per_step(const TrainingJob& j, const ParallelPlan& p);
// Activation sets (micro-batch x stage layers) stage `stage` holds at its peak under the
// plan's schedule: GPipe m; 1F1B min(m, p - stage); interleaved Megatron's warm-up count;
// ZB-H1 min(m, p); ZB-V min(2m, m + 1 + stage, 2p) / 2; DualPipeV (2p + 1) / 2.
double inflight_microbatches(const ParallelPlan& p, int64_t microbatches, int stage);
// Split backward (specs.h splits_backward): the most micro-batch sets (x stage layers)
// whose B has run and W not yet on stage `stage` -- ZB-H1 min(m, stage + 1), ZB-V
// (2 stage + 1) / 2, DualPipeV (stage + 1) / 2 -- and of them those of the LM head's chunk
// (ZB-H1 min(m, p), a V 1: under DualPipeV only at the head's own split pass, whose W
// follows its B at once). 0 for other schedules.
double pending_weight_grad_sets(const ParallelPlan& p, int64_t microbatches, int stage);
// `pending`: pending_weight_grad_sets at the moment in question.
double head_pending_weight_grads(const ParallelPlan& p, int64_t microbatches, double pending);
// The two counts above peak at different moments in a V. The moments at which neither is
// exceeded by another moment (the Pareto front of (in flight, pending) over the order,
// stage sets, current micro-batch included), from PyTorch's orders walked op by op:
//   ZB-V (m >= 2p - 1): (p, 1/2) and, for r >= 1, ((p + r) / 2, (2r + 1) / 2);
//   DualPipeV (m >= 2p): ((2p + 1) / 2, 0), for r < p - 1 (p, 1/2), for r >= 1 (p / 2, (r + 1) / 2).
// Otherwise one moment holding both maxima (exact for ZB-H1, a bound for a V with fewer
// micro-batches). Returns how many of `out` are set (1..3).
struct SplitBackwardCounts {
  double inflight = 0, pending = 0;
};
int split_backward_peak_counts(const ParallelPlan& p, int64_t microbatches, int stage, std::array<SplitBackwardCounts, 3>& out);

// The LayerContext of a plan for layer `global_layer` (trainability from the job, the
// layer's kind from its index: recipe.h layer_kind).
LayerContext layer_context(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int global_layer);
// Recompute policy of stage-local layer `layer_in_stage` of a stage of `layers_in_stage`
// layers (full_k: the first k layers of each model chunk).
LayerRecompute layer_recompute(const ParallelPlan& p, int layer_in_stage, int layers_in_stage);
// Micro-batches whose first-chunk (embedding) / last-chunk (head, logits) tensors a stage
// holds at its peak: GPipe m; 1F1B min(m, p) / 1; interleaved min(m, 2p) / 1.
double first_chunk_sets(const ParallelPlan& p, int64_t microbatches);
double last_chunk_sets(const ParallelPlan& p, int64_t microbatches);

// ---- Pieces of a stage's memory, public so that the simulator replays the same bytes
// over time (one source of truth). Every value is bytes on one rank.

// The stack's memory conventions (opt) on a layer's context from layer_context: its FP8
// inputs saved quantized, its FP8 weight copies per micro-batch, the MoE combine.
void apply_memory_conventions(const TrainingJob& j, const GpuSpec& gpu, const MemoryOptions& opt, LayerContext* lc);
// A layer's kept, re-materialised (0 when no gradient flows) and forward-transient bytes
// under `policy` and the stack's selective kind (torch_op_sac keeps its save list), from
// its saved-tensor sums and, for a frozen layer, those of the layer as if it trained.
struct LayerMemoryBytes {
  double kept = 0, rematerialised = 0, transient = 0;
  // Of rematerialised, what is made again only at the layer's attention backward and gone
  // before its MLP's: latent attention's selective recompute (its q, k, v from the kept
  // latents, and without flash the scores from them), as Megatron-Core re-runs "mla_up_proj"
  // when the attention output's gradient arrives. 0 otherwise (the scores of other
  // layers are recomputed as the backward starts).
  double rematerialised_attention = 0;
};
LayerMemoryBytes layer_memory_bytes(const SavedTensorSums& sums, const SavedTensorSums& as_trainable, bool grad_flows,
                                    LayerRecompute policy, const MemoryOptions& opt);
LayerMemoryBytes layer_memory_bytes(const ModelSpec& m, const LayerContext& lc, LayerRecompute policy, const MemoryOptions& opt);

// Transient bytes of one layer while its forward runs, beside what the layer keeps: every
// intermediate it does not keep (under full recompute, or a frozen layer: all of its saved
// set but the checkpointed input; selective: the attention scores) plus its h-wide output
// branch (the residual branch before the add). The executor's layer forward allocates them
// together at the layer's end, when its output is made. `as_trainable` are the sums of the
// layer as if it trained (used when no gradient flows). layer_memory_bytes takes both.
// Bytes a layer's backward re-materialises beside the kept activations: recompute_working_bytes
// less the checkpointed input, which is kept (full) rather than made again.
double layer_rematerialised_bytes(const SavedTensorSums& sums, LayerRecompute policy);
double layer_forward_transient_bytes(const SavedTensorSums& sums, const SavedTensorSums& as_trainable, LayerRecompute policy);
// Activation gradients live during one layer's backward, at its two widest moments (bytes):
//   mlp        the gradient of the layer's output, of its input, and the widest
//              intermediate gradients of the MLP -- one f-wide gradient for GPT's GELU, two
//              for SwiGLU (the gate and up gradients exist together): (2h + f) or (2h + 2f)
//              x tokens x act_bytes (f/t under TP; under SP the output's h/t, the input's
//              whole-sequence partial h). MoE: the routed experts' backward over the
//              capacity-padded rows, its larger of two moments (see the definition), with
//              mlp_comm the all-to-all buffer live at it; mlp_shared the shared experts'
//              backward that follows (layer output and input gradients, their 1 or 2
//              hidden gradients of tokens x fs/t, their input gradient's two partials).
//   attention  the gradients of the layer's output (tokens x h, h/t under SP), of the
//              attention output and of q, k, v (tokens x (2 qw + 2 kvw)/t) at the attention
//              kernel's backward; under context parallel beside, as an all-gather, the
//              whole-sequence dk, dv partials that are reduce-scattered (2 cp x tokens x
//              kvw/t), or on a ring one step's partial dq, dk, dv (tokens x (qw + 2 kvw)/t).
// What else each moment holds (GEMM scratch and MoE partial gradients at the MLP's, the
// CP all-gather buffers at attention's) is added by stage_memory_extras, which keeps the
// larger sum.
// A MoE model's dense layers (dense_mlp) have the dense MLP's moment; a stage of several
// kinds takes each moment's largest over them. The MoE moment is the most loaded EP rank's
// (MoeSpec::load_imbalance).
struct LayerBackwardMoments {
  double mlp = 0, attention = 0;
  double mlp_comm = 0;    // MoE under EP: the all-to-all buffer live at the MLP's moment (beside mlp)
  double mlp_shared = 0;  // MoE: the shared experts' backward after the routed experts' (0 without)
};
LayerBackwardMoments activation_gradient_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, bool dense_mlp = false);

// Context parallel run as an all-gather (CpExchange::all_gather, Llama 3's CP, Dubey et al.
// 2024 sec. 3.3.2): the most communication-buffer bytes a rank holds for it at
// once. Each gather lands in a raw buffer (b*s/cp tokens from each of the cp ranks, rank-
// major) and is reordered into a whole-sequence one, both b*s*w*act_bytes (w the TP-local
// width); the raw one is freed after the reorder. Forward and backward both gather k then
// v: the peak is k whole + v raw + v whole = 3 b*s*kvw/t*act_bytes. (Backward's reduce-
// scatters of dk and dv use one raw buffer after the gathered k and v are freed; queries
// and the output gradient stay local.) 0 when cp == 1. The buffers live only inside
// attention, so stage_memory_extras counts the larger of them and the SP gather + EP
// all-to-all buffers (MLP / GEMM-input side), never both.
double cp_all_gather_buffer_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p);
// The recompute policy of the multi-token prediction modules' blocks: the plan's (full_k's
// first layers of a chunk are the main model's, so none).
LayerRecompute mtp_recompute(const ParallelPlan& p);
// What the multi-token prediction modules keep per micro-batch on the last stage (DeepSeek-V3
// sec. 2.2): per module its block's kept tensors (a layer of the last layer's kind under
// `policy`), the embedding's norm input, eh_proj's input (the two normed inputs
// concatenated, 2h) and its own final-norm and head inputs: 5 tokens x h beside the block.
double mtp_kept_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, LayerRecompute policy);

// Parameters on a stage's rank: trainable and frozen (layers of each kind, embedding on the
// first stage, LM head and multi-token prediction modules on the last), from count_params.
struct StageParams {
  double trainable = 0, frozen = 0;
  double frozen_nf4 = 0;  // of frozen: QLoRA's 4-bit base weights (the layers' linear weights)
  double expert = 0;  // of trainable: routed-expert parameters (MoE; LoRA: their adapters), ZeRO-sharded over dp*cp/ep
};
StageParams stage_params(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, const ParamCounts& pc, int stage);
StageParams stage_params(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int stage);

// QLoRA: bitsandbytes dequantizes a base weight into a temporary of the compute dtype for
// each matmul (functional.dequantize_4bit in MatMul4Bit), one at a time: the bytes of the
// largest (largest_linear elements: LinearWeights::largest), held in MemoryItem::workspace;
// 0 for any other job. The second form takes the model's largest over its layer kinds.
double qlora_dequantized_weight_bytes(const TrainingJob& j, double largest_linear);
double qlora_dequantized_weight_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p);

// A layer's backward peaks at its MLP or in its attention, never both at once: each side's
// activation gradients (activation_gradient_bytes, with its scratch) and the layer-only
// communication buffers live then (attention: the CP exchange's; MLP: the SP gather and
// the EP all-to-all).
struct BackwardSides {
  double attention = 0, attention_comm = 0;
  double mlp = 0, mlp_comm = 0;
};
struct BackwardMoment {
  double remat = 0, grads = 0, comm = 0;  // re-materialised, activation gradients, layer communication
};
// The larger side with what is re-materialised there: remat_max (the stage's largest
// layer's LayerMemoryBytes::rematerialised) at the attention, remat_mlp_max (the largest
// less its rematerialised_attention) at the MLP. The MLP on a tie.
BackwardMoment backward_moment(const BackwardSides& s, double remat_max, double remat_mlp_max);

// Per-micro-batch and per-phase extras of a stage beside its layers' activations.
struct StageMemoryExtras {
  double first_chunk_set = 0;   // per micro-batch with chunk 0 (stage 0: embedding dropout mask)
  double last_chunk_set = 0;    // per micro-batch with the last chunk (last stage: final-norm + LM-head inputs)
  double head_input = 0;        // of which made after the layers' forward (the LM-head input)
  double logits_set = 0;        // logits + fp32 softmax of one micro-batch (last stage)
  // When a layer of the stage trains (else 0): the working set of a layer's backward beside
  // the kept activations at its largest moment -- activation gradients (activation_gradient_bytes)
  // with, at the MLP's moment, one GEMM's scratch and the MoE TP partial gradients -- and
  // the layer-only communication buffers live at that same moment.
  double activation_grads = 0;
  double backward_layer_comm = 0;
  // The two moments those are the larger of (backward_moment chooses, given the layers'
  // re-materialised bytes at each).
  BackwardSides backward_sides;
  double gathered_pool = 0;     // ZeRO-3: current + prefetched unit gathered at TP-local size (see below)
  double gathered_pool_layer = 0;     // ZeRO-3: the same inside a layer's forward (see below)
  double gathered_pool_backward = 0;  // ZeRO-3: the same inside a layer's backward (see below)
  double gathered_at_loss = 0;        // ZeRO-3: at the end of the head forward (see below)
  double unit_grad_transient = 0;  // ZeRO >= 2: one unit's full-size gradient during its backward (see below)
  double unsharded_gradients = 0;  // ZeRO-3 under PP with MemoryOptions::zero3_pp_unsharded: the stage's fp32 gradient accumulators, held
  double comm_buffers = 0;      // DP buckets, TP/SP gathers, PP send/recv, CP ring or all-gather, EP, NCCL
  // Of comm_buffers, what lives only inside a layer's forward or backward: the SP gather
  // of a layer's input, the EP all-to-all buffer and the CP exchange's (beyond the SP
  // gather they replace). Not held at the loss, nor in the optimizer step.
  double layer_comm_buffers = 0;
  // The CP exchange's buffers in a layer's backward attention kernel, when a layer trains:
  // the all-gather's whole k and v (its raw buffer is freed by then), the ring's two ranks'
  // k, v with their dk, dv accumulators.
  double cp_backward_buffers = 0;
  // The last stage's LM-head GEMMs, two moments beside every kept activation (see below).
  double head_logits = 0;            // one micro-batch's logits (or their gradient) in the compute dtype
  // Split backward: what the LM head's W reads, from its B to its W -- the logits' gradient
  // in the compute dtype (the fp32 softmax is gone after the loss's backward); 0 when the
  // head does not train (LoRA).
  double head_weight_grad = 0;
  double head_forward_working = 0;   // the head forward GEMM's scratch
  double head_backward_working = 0;  // the head backward GEMM's: its scratch + the final norm's output gradient + the layer-output gradient
  double head_gathered_forward = 0;  // ZeRO-3: the head unit
  double head_gathered_backward = 0; // ZeRO-3: the head unit + the stage's last layer, prefetched
  double head_grad_transient = 0;    // ZeRO >= 2: the head unit's full-size gradient
  double head_comm = 0;              // SP: the head's gathered input, in both GEMMs
  double loss_comm = 0;              // SP: the same at the loss (MemoryOptions::sp_head_input_saved)
};
// ZeRO-2/3 work per *unit* -- the embedding (first stage), each layer, the final norm with
// the LM head (last stage; a tied head reads the token table again) -- as FSDP wraps them
// (Zhao et al. 2023, PyTorch FSDP) and the executor is required to:
//   unit_grad_transient  the unit whose backward runs holds its full-size gradient until it
//                        is reduce-scattered into the rank's partition: the largest trainable
//                        unit of the stage x gradient bytes, in backward only.
//   gathered_pool        ZeRO-3 holds the unit in use and the next one prefetched: the largest
//                        sum of two units adjacent in the order of use, in the compute dtype
//                        (4 B fp32, 2 B 16-bit: what the GEMMs read; an O1 fp32 copy is not gathered).
//                        Inside a layer's forward the pool is the layer and the next one,
//                        the head after the last layer: gathered_pool_layer (the embedding
//                        pairs with layer 0 only in its own forward). Inside a layer's
//                        backward it is the layer and the one below it on the stage:
//                        gathered_pool_backward (the head pairs with the last layer only in
//                        the head's own backward, and backward never gathers the embedding:
//                        its gradient needs no weights). At the loss the head is released
//                        again: gathered_at_loss = 0. The optimizer step holds none. With
//                        zero3_root_gathered (FSDP2) all of them are the pool.
// The head's two moments (last stage): its forward GEMM writes the logits in the compute
// dtype (head_logits) with head_forward_working, the head unit gathered, before the loss
// adds its fp32 softmax; its backward GEMM reads their gradient, written over the logits,
// with head_backward_working, head_gathered_backward and head_grad_transient (the loss's
// fp32 softmax is freed by then, and this micro-batch's final-norm and head inputs are
// still held).
StageMemoryExtras stage_memory_extras(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, int stage,
                                      const MemoryOptions& opt = {});

// What estimate_memory needs that depends only on the model, the job and the plan's tp,
// pp, cp, cp_exchange, ep, sp, micro_batch and flash_attention: parameter counts, a
// layer's backward moments, per-layer bytes for
// the two kinds of layer (trainable, frozen) under each recompute policy, and their sums
// over a stage for each distinct stage shape. The sweep computes it once and costs every
// ZeRO stage, offload, recompute and vpp choice of that shape from it.
struct MemoryInputs {
  ParamCounts pc;
  uint32_t kinds = 1;  // layer_kinds_present: bit k when the model has layers of kind k
  // FP8 under Fp8WeightCopies::cached: bytes per layer parameter of the cached copies, and
  // every FP8 module's scaling state (amax histories, scales) per layer.
  double fp8_cached_bytes_per_param = 0;
  double fp8_scaling_bytes_per_layer = 0;
  // Fp8WeightCopies::primary: the 16-bit bytes per cached layer parameter that the FP8
  // weights replace (0 otherwise).
  double fp8_primary_saved_bytes_per_param = 0;
  LayerBackwardMoments backward_moments;        // activation_gradient_bytes of the plan's shape (the main MLP kind)
  LayerBackwardMoments dense_backward_moments;  // the same for a MoE model's dense layers
  // Multi-token prediction: what its modules keep per micro-batch on the last stage, per
  // LayerRecompute of the plan (stage_memory_extras' last_chunk_set share).
  double mtp_kept[3] = {};
  // [kind][frozen][LayerRecompute], for the kinds present (recipe.h layer_kind):
  double layer_bytes[kLayerKinds][2][3] = {};      // kept from forward to backward
  double remat_bytes[kLayerKinds][2][3] = {};      // re-materialised in backward
  double remat_attention_bytes[kLayerKinds][2][3] = {};  // of which at the attention's backward only
  double transient_bytes[kLayerKinds][2][3] = {};  // transient during forward
  double wgrad_bytes[kLayerKinds][2] = {};         // recipe.h weight_grad_buffer_bytes
  // A stage's layers under a policy applied to all of them (not full_k): bytes kept per
  // micro-batch (summed), and the largest re-materialised and forward-transient layer.
  struct StageLayers {
    StageLayerKinds kinds;  // the shape: layers of each kind on the stage, of which frozen
    double kept[3] = {}, remat[3] = {}, transient[3] = {};  // [LayerRecompute], bytes
    double remat_mlp[3] = {};  // the largest layer's remat less its remat_attention_bytes
    double wgrad = 0;  // the stage's weight_grad_buffer_bytes, summed
  };
  // Stages of a plan have at most ~5 shapes (two layer counts x frozen, partly frozen,
  // trainable); a shape not listed here is summed per plan instead.
  std::array<StageLayers, 8> shapes{};
  int shape_count = 0;
  // Runs of consecutive middle stages (neither first nor last) of the same shape, in
  // stage order: estimate_memory costs the first of each (see there). runs_complete is
  // false when they did not fit here; estimate_memory then scans every stage.
  struct StageRun {
    int first = 0, end = 0;  // stages [first, end)
    StageLayerKinds kinds;   // their shape
  };
  std::array<StageRun, 8> runs{};
  int run_count = 0;
  bool runs_complete = false;
};
// `opt` matters only through opt.selective and its FP8 conventions, `gpu` only through
// its FP8 layouts (fp8_recipe.h).
MemoryInputs memory_inputs(const ModelSpec& m, const GpuSpec& gpu, const TrainingJob& j, const ParallelPlan& p,
                           const MemoryOptions& opt = {});

// REQUIRES: check_plan(m, c, j, p, ...) == none.
MemoryReport estimate_memory(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                             const MemoryOptions& opt = {});
// The same from precomputed inputs; results are identical.
// REQUIRES: `in` = memory_inputs(m, c.gpu, j, q, opt) for a plan q that differs from p at most in dp,
// zero, offload_optimizer, recompute, recompute_layers, vpp and schedule (and not in vpp for a
// model of several layer kinds: interleaving changes which kinds a stage holds).
MemoryReport estimate_memory(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                             const MemoryInputs& in, const MemoryOptions& opt = {});
// The worst stage's total, index and peak phase, as estimate_memory's `worst` has them,
// without the per-item breakdown: what the sweep ranks and filters by.
struct MemoryPeak {
  double total = 0;     // bytes, the worst stage at its peak phase
  int stage = 0;
  Phase phase = Phase::backward;
  double capacity = 0;  // GPU memory, bytes
  double host_bytes_per_node = 0, host_capacity = 0;  // as MemoryReport's
  bool host_fits() const { return host_capacity <= 0 || host_bytes_per_node <= host_capacity; }
  bool gpu_fits(double headroom_bytes) const { return total + headroom_bytes <= capacity; }
  bool fits(double headroom_bytes) const { return gpu_fits(headroom_bytes) && host_fits(); }
};
MemoryPeak estimate_memory_peak(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                                const MemoryInputs& in, const MemoryOptions& opt = {});
// Activation offload: the fewest layers per stage k in (from, to] for which fits(k) holds,
// where fits is monotone in k (GPU memory falls with each layer offloaded) and fits(from)
// does not hold; 0 when not even fits(to) does. Bisection: about log2(to - from) calls.
template <class Fits>
int fewest_offload_layers(int from, int to, Fits fits) {
  if (to <= from || !fits(to)) return 0;
  int lo = from, hi = to;  // lo does not fit, hi does
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (fits(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

// One stage only (the sweep and explain use the report; the simulator uses this). Under
// DualPipe (plan_check.h cost_plan) every entry point here costs the rank-equivalent
// DualPipeV plan: stage s of pp/2 stands for ranks s and pp-1-s.
StageMemory estimate_stage_memory(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p,
                                  int stage, const MemoryOptions& opt = {});

}  // namespace llmplan
