// GPT and Llama language models for the executor, built from the planner's recipe.
//
// Parameters are exactly those of planner count_params (GPT: LayerNorm, GELU MLP with
// biases, learned positions, tied head; Llama: RMSNorm, SwiGLU, no biases, rotary, GQA,
// untied head unless tied_embeddings). Between forward and backward every layer keeps
// EXACTLY the tensors that planner saved_tensors_per_layer() lists for it (same names,
// element counts and dtypes), allocated in Category::activations under the recipe's name;
// recompute policies drop them as the recipe says and re-run the forward in backward:
//   none       all listed tensors
//   selective  without the attention-score tensors (probs, probs_dropout_mask,
//              probs_dropped); the scores are recomputed from the saved q, k
//   full       only the layer input ("ln1.input"); the layer forward is re-run in backward
// Chain of ownership: the embedding output is layer 0's "ln1.input", layer i's output is
// layer i+1's "ln1.input", the last layer's output is "final_norm.input", the final norm's
// output "head.input" (the planner's 2*tokens*h on the last stage). Logits (activation
// dtype) and the fp32 softmax (b*s*V each) are in Category::logits_loss, the planner's
// b*s*V*(act+4). Everything transient (activation gradients, recomputed tensors, op
// scratch) is in Category::workspace; weights, gradients in theirs. Master weights and
// optimizer states belong to the Trainer (trainer.h).
//
// Pipeline parallel: a model is one stage (ModelConfig::stage) holding layers
// first_layer_of_virtual_stage .. + virtual_stage_layers (planner/cost/plan_check.h); the embedding lives on
// the first stage, final norm, head and loss on the last; a tied head on pp > 1 is a copy of
// the embedding on the last stage (ParamRef::shared_copy). Stages run micro-batches through
// stage_forward / stage_backward, one slot per micro-batch in flight (executor/comm/pipeline.h
// drives them); forward_backward / forward_loss need pp = 1.
//
// Tensor parallel (Megatron-LM, Shoeybi et al. 2019), plan.tp = t > 1 with a communicator:
// q, k, v, gate, up are column-parallel (rows of W and the bias split by t: heads/t query
// heads, kv_heads/t kv heads, f/t MLP columns; the input gradient is all-reduced over TP in
// backward); o and down are row-parallel (columns of W split; the output is all-reduced
// over TP in forward, the bias added once); the embedding is vocabulary-parallel (rows
// [tp*V/t, (tp+1)*V/t), output all-reduced); the head is column-parallel over the
// vocabulary and the cross-entropy is vocabulary-parallel (row max, sum of exponentials and
// target logit combined over TP), so logits are b*s*V/t as the planner counts. Norms,
// position embeddings and row-parallel biases are replicated; their gradients are equal on
// every TP rank. Initialisation draws the full tensor from the same RNG sequence as a
// single-rank model and keeps this rank's slice, so a TP run equals a single-rank run.
// Not implemented with t > 1: sequence parallel, LoRA. pp = 1 and cp = 1 are required.
//
// Context parallel, plan.cp > 1 with a communicator (CPU backend): the model is given the
// micro-batch's whole sequences, cut into 2cp chunks, and keeps chunks c and 2cp-1-c of each
// on CP rank c (Llama 3's load-balanced layout: causal attention costs every rank alike;
// positions, RoPE angles and document restarts are those of the whole sequence). Every
// per-token tensor, the saved ones included, is for these b*s/cp tokens, as the planner's
// recipe counts them (attention scores and probabilities: the local queries against all s
// keys). Attention all-gathers k and v over CP into buffers counted as communication and
// runs the rank's own queries over them; backward gathers k and v again, computes this
// rank's queries' share of the whole-sequence dk, dv and reduce-scatters them, so each rank
// gets its rows summed over every query (the planner's CpExchange::all_gather). The loss
// is the rank's tokens' share of the global mean; gradients are summed over DP x CP by
// DataParallel (Group::dp_cp).
//
// Mixture of experts (spec.moe; CPU backend): the MLP of every layer is a router, top-k
// routed experts with capacity-padded buffers and optional shared experts (executor/model/moe.h,
// moe_fwd, states the conventions). Expert parallel, plan.ep > 1 with a communicator: this
// rank holds experts [ep_rank*E/ep, (ep_rank+1)*E/ep) (ParamRef::expert), and tokens travel
// to their experts' ranks and back by all-to-all over Group::ep, forward and backward.
// Under TP (which needs SP, as in the planner's recipe): each TP rank routes its own
// sequence shard (ns tokens) through the router and its EP rank's experts, which are whole
// on every TP rank (EP groups are per TP rank); their gradients are summed over TP per
// micro-batch. Shared experts are TP-split like a dense MLP (input all-gathered, output
// reduce-scattered).
//
// Errors: out-of-memory from the allocator is returned as its Status (runtime); where()
// says which phase and layer were running. Thread-safety: none; one thread drives a model.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/allocator.h"
#include "executor/comm/communicator.h"
#include "executor/op_time_log.h"
#include "executor/tensor.h"
#include "planner/cost/plan_check.h"
#include "planner/spec/recipe.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"

namespace llmplan::exec {

struct ModelOptions {
  double dropout_p = 0.1;       // probability for every dropout site when spec.dropout. Default: 0.1
  double norm_eps = 1e-5;       // LayerNorm / RMSNorm epsilon. Default: 1e-5
  double rope_theta = 10000.0;  // Default: 10000
  double init_std = 0.02;       // N(0, std) for matrices; norms 1, biases 0. Default: 0.02
  uint64_t seed = 1234;         // initialisation. Default: 1234
  bool randomize_all = false;   // tests: random norms, biases and LoRA B too. Default: false
  // Multi-token prediction: the weight of the modules' mean loss beside the main one,
  // lambda (DeepSeek-V3, arXiv 2412.19437, eq. 25: 0.3, then 0.1; Megatron-Core's
  // mtp_loss_scaling_factor default). Default: 0.1
  double mtp_loss_scale = 0.1;
};

// What one rank builds: the job and plan (micro_batch, recompute, flash_attention, tp, pp)
// and the storage dtypes (weights/activations, weight gradients).
struct ModelConfig {
  ModelSpec spec;
  TrainingJob job;
  ParallelPlan plan;
  int stage = 0;                 // pipeline stage (rank in the PP group): layers first_layer_of_pp_stage.. (planner/cost/plan_check.h)
  // Interleaved 1F1B (plan.vpp = v > 1): the model chunk c of the stage, i.e. virtual stage
  // c*pp + stage of pp*v, holding layers first_layer_of_virtual_stage(layers, plan, c*pp + stage)..;
  // the embedding lives on virtual stage 0, the head and loss on virtual stage pp*v - 1.
  // build_model builds every chunk of the stage (chunk is set for each; see Model::chunk).
  int chunk = 0;
  // Under a V schedule (ZB-V: plan_check.h placed_in_v) chunk 0 is virtual stage `stage`
  // and chunk 1 is 2*pp - 1 - stage, so stage 0 holds the embedding and the head.
  int virtual_stage() const { return chunk_virtual_stage(plan, stage, chunk); }
  int virtual_stages() const { return plan.pp * std::max(1, plan.vpp); }
  DType storage = DType::f32;    // weights and activations: f32, f64, bf16, f16
  DType grad = DType::f32;       // weight gradients: storage, or f32 for 16-bit storage
  ModelOptions options;
  Communicator* comm = nullptr;  // TP collectives; REQUIRES: non-null when plan.tp > 1
  // CPU backend: every op's wall time goes here (op_time_log.h); nullptr: not timed.
  // Outlives the model. Other backends ignore it.
  OpTimeLog* op_times = nullptr;
};

// One micro-batch, (b, s) row-major int32 each. targets -1 = ignored. doc_ids (nullable):
// packed documents; attention is masked to the document and positions restart with it.
struct Batch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  const int32_t* doc_ids = nullptr;
};

// How a parameter is split over the TP group: the full tensor is (rows, cols) row-major;
// dim 0: this rank holds rows [tp*rows/t, (tp+1)*rows/t); dim 1: those columns; -1: all
// (replicated: equal on every TP rank, counted once in the gradient norm).
struct TpSplit {
  int dim = -1;
  int64_t rows = 0, cols = 0;  // of the full tensor
};

struct ParamRef {
  std::string name;      // "layer3.attn.q.weight", "embed.tokens", "lora.layer0.q.A"
  Tensor* weight = nullptr;
  Tensor* grad = nullptr;  // nullptr: frozen (no gradient, no optimizer state)
  bool decay = true;       // weight decay applies (matrices), not norms and biases
  TpSplit split;           // dim -1 unless plan.tp > 1
  bool shared_copy = false;  // the last stage's copy of a tied embedding (pp > 1): not in the gradient norm
  // A routed expert's weight (MoE): held by the ep ranks that own that expert only, so its
  // gradient is summed (and ZeRO-partitioned) over the replicas holding the same experts
  // (Group::edp), not over all of DP (comm/data_parallel.h).
  bool expert = false;
};

struct Where {
  Phase phase = Phase::other;
  int layer = -1;          // global layer index, -1 outside the layers
  std::string part;        // "embedding", "layer", "final_norm", "head", "loss"
};

// ZeRO-2/3 act per *unit*: the parameters one piece of the network reads together -- the
// embedding (token and position tables, first stage), each transformer layer, and the final
// norm with the LM head (last stage; a tied head is the token table again, so that table is
// in two units). Model::units() lists them in forward order as indices into params().
// The model calls the hooks around each unit's use, in the order of use:
//   use_weights(u, next)  before u's weights are read (forward; backward, which also re-runs
//                          a recomputed forward); `next` is the unit read after u (-1: none),
//                          which a ZeRO-3 implementation prefetches (current + next gathered)
//   release_weights(u)    after that use
//   begin_grads(u)        before u's backward accumulates into its gradients
//   end_grads(u)          after it (a ZeRO-2/3 implementation reduce-scatters them here)
// Between calls a hook owner may replace the contents of *ParamRef::weight / *ParamRef::grad
// (ZeRO-3: the weights are this rank's partition between uses; ZeRO-2/3: so are the
// gradients); inside a use they are full-size. The embedding's backward reads no weights,
// so it has begin/end_grads only.
class ParamHooks {
 public:
  virtual ~ParamHooks() = default;
  virtual Status use_weights(int unit, int next) = 0;
  virtual void release_weights(int unit) = 0;
  virtual Status begin_grads(int unit) = 0;
  virtual Status end_grads(int unit) = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Forward and backward of one micro-batch; weight gradients accumulate (+=). Returns the
  // loss sum / denom (denom: counted target tokens of the whole step; 0 = this batch's).
  // loss_scale multiplies the backward (fp16 dynamic loss scaling). dropout_seed fixes
  // every dropout mask of this micro-batch.
  virtual Result<double> forward_backward(const Batch& b, double loss_scale, double denom, uint64_t dropout_seed) = 0;
  // Forward only (nothing kept): the same loss.
  virtual Result<double> forward_loss(const Batch& b, double denom, uint64_t dropout_seed) = 0;
  // Pipeline parallel: one micro-batch through this stage, its state kept in `slot` (one
  // slot per in-flight micro-batch) until stage_backward(slot). input / output / dout /
  // dinput: (b*s/t_sp, h) in the storage dtype; input nullptr on the first stage (tokens),
  // output unused on the last (returns the loss there, 0 elsewhere); dout nullptr on the
  // last stage, dinput unused on the first.
  virtual Result<double> stage_forward(int slot, const Batch& b, const void* input, void* output, double loss_scale,
                                       double denom, uint64_t dropout_seed) = 0;
  virtual Status stage_backward(int slot, const Batch& b, const void* dout, void* dinput) = 0;
  // Split backward (zero-bubble schedules: ZB-H1, ZB-V, DualPipeV; Qi et al. 2024, "Zero Bubble
  // Pipeline Parallelism", Sec. 2): stage_backward_input is stage_backward's input-gradient
  // part (B): the recompute, the activation gradients, the norms' weight gradients and
  // in-layer communication, dinput filled as stage_backward fills it. It leaves the slot's
  // activations and, in one buffer allocated at its layers' start in Category::activations,
  // the output gradient of every trained linear (the recipe's weight_grad_buffer_bytes of
  // the stage's layers; on the head's stage the logits' gradient, counted from then on as
  // activations) for stage_backward_weight(slot) (W), which runs the weight-gradient GEMMs
  // and frees all of the slot. The gradients equal stage_backward's. MoE layers defer their
  // routed experts' and router's GEMMs too (EP all-to-alls stay in F and B); context
  // parallel's exchanges stay in B. Errors: bad_input for what the split does not run (MoE
  // under TP, sequence parallel, full recompute, ZeRO-2/3 hooks, latent attention / MTP; W
  // before B); runtime as stage_backward.
  virtual Status stage_backward_input(int slot, const Batch& b, const void* dout, void* dinput) = 0;
  virtual Status stage_backward_weight(int slot) = 0;
  virtual std::vector<ParamRef>& params() = 0;
  virtual void zero_grads() = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const Where& where() const = 0;
  // Units in forward order, each a list of indices into params() (see ParamHooks).
  virtual const std::vector<std::vector<int>>& units() const = 0;
  // REQUIRES: hooks (nullable) outlives the model's steps.
  virtual void set_param_hooks(ParamHooks* hooks) = 0;
  // Interleaved 1F1B (plan.vpp > 1): the stage's model chunks (virtual stages stage,
  // stage + pp, ...), each a Model of its own that runs stage_forward / stage_backward;
  // this Model then presents them as one for params(), units(), zero_grads(), hooks (their
  // params and units concatenated in chunk order) and where() (of the chunk last handed
  // out). Without interleaving: one chunk, the model itself.
  virtual int chunks() const { return 1; }
  virtual Model& chunk(int c) { (void)c; return *this; }
};

// Builds the model's weights (initialised) and gradients in `alloc`. Errors: bad_input
// for what is not implemented (MoE with tp > 1 without sp; storage/grad pairs), runtime
// for OOM.
// REQUIRES: alloc outlives the model.
Result<std::unique_ptr<Model>> build_model(TrackingAllocator& alloc, const ModelConfig& config);

// The recipe's context of global layer `layer` for this config (act_bytes from storage).
LayerContext model_layer_context(const ModelConfig& config, int layer);

// The scratch the CPU backend's ops take beside the tensors the planner counts. GEMMs with
// 16-bit `storage` widen their operands to fp32 tiles over chunks of rows (cpu/linear.h). layer: the largest over every shape a
// transformer layer runs on a rank of plan `p` (attention and MLP projections, MoE experts
// and router), live beside a layer's backward working set
// (MemoryOptions::backward_gemm_scratch_bytes). head: the LM head's (vocabulary / tp
// wide), live beside the logits in the head's forward and backward
// (MemoryOptions::head_gemm_scratch_bytes). Bytes; 0 for f32 and f64, whose GEMMs need none.
// attention: the attention backward's workspace (cpu/attention.h: fp32 or f64 panels of
// one head, any storage; the dropout kernels' under materialised attention with dropout),
// live at a layer's attention moment (MemoryOptions::attention_scratch_bytes).
struct CpuOpScratch {
  int64_t layer = 0, head = 0, attention = 0;
};
CpuOpScratch cpu_op_scratch_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, DType storage);

}  // namespace llmplan::exec
