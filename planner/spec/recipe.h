// The transformer recipe: one source of truth for what a GPT or Llama layer owns,
// computes and keeps for its backward pass. The memory model sums it, the time model
// counts its FLOPs, and the executor allocates exactly the tensors it names (the names
// below are the executor's too), so that prediction and measurement can be diffed.
//
// A model is a sequence of layer kinds (layer_kind): a MoE model's layers may have a dense
// MLP (MoeSpec::first_dense_layers, layer_freq) and a model's attention may be windowed on
// some layers (ModelSpec::sliding_window, global_attention_every). Every per-layer function
// below takes the kind from its LayerContext (layer_context sets it from the layer's index);
// the parameter counts give both MLP kinds. Latent attention (MlaSpec), attention sinks,
// post-norms and multi-token prediction are model-wide.
//
// Notation (Korthikanti et al. 2022): b micro-batch, s sequence (per rank, after CP),
// h hidden, a heads, f FFN width, t tensor-parallel size. All results are per rank and
// per micro-batch. Pure functions over fixed-size arrays: no allocation, so the sweep
// can call them in its hot loop.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "planner/spec/specs.h"

namespace llmplan {

// Linear projections of a block; LoRA targets name them. GPT's fc1/fc2 are up/down.
enum class Projection : uint8_t { q, k, v, o, gate, up, down };
constexpr uint32_t projection_bit(Projection p) { return 1u << static_cast<int>(p); }
// Bitmask of LoRA targets from names ("q", "fc1", ...); unknown names are ignored
// (job_from_json rejects them earlier).
uint32_t lora_target_mask(const LoraSpec& lora, Family family);
// True for the names a LoRA target may have: q k v o gate up down (fc1/fc2 alias up/down).
bool is_lora_target_name(const std::string& name);
constexpr const char* kLoraTargetNames = "q, k, v, o, gate, up, down, fc1, fc2";

// How TP/SP divide a saved tensor (Korthikanti's 10sbh replicated part is `sequence`).
enum class Region : uint8_t {
  sequence,    // outside the TP region: replicated under TP, split by t under SP
  tensor,      // inside the TP region (between column- and row-parallel GEMMs): split by t
  replicated,  // never split by t (LoRA low-rank activations)
};

struct SavedTensor {
  const char* name = "";      // e.g. "attn.q"; the executor's tensor of the same name
  double elements = 0;        // per rank per micro-batch, after t/sp/cp division
  double bytes_per_element = 2;  // activation dtype, 1 for dropout masks, 4 for fp32 stats, ~1 for FP8 (scales included)
  bool attention_scores = false;  // an s*s tensor: dropped by selective recompute
  // Latent attention's up-projected queries, keys and values: selective recompute keeps the
  // cached latents instead and re-runs the up projections in backward (Megatron-Core's
  // recompute_modules "mla_up_proj").
  bool latent_derived = false;
  double bytes() const { return elements * bytes_per_element; }
};

constexpr int kMaxSavedTensors = 40;
struct SavedTensorList {
  std::array<SavedTensor, kMaxSavedTensors> items{};
  int count = 0;
  void add(const SavedTensor& t) { items[count++] = t; }
  double bytes() const;
};

// Everything about one layer's situation that changes what it keeps.
struct LayerContext {
  int64_t b = 1;                  // micro-batch, sequences
  int64_t s = 2048;               // tokens per sequence on this rank (seq_len / cp)
  int64_t s_kv = 2048;            // keys each query attends to (seq_len)
  // Packed documents (TrainingJob::doc_len): a fused kernel visits only each query's own
  // document, span_kv <= s_kv keys; materialised scores still span s_kv (the mask is
  // applied to whole-sequence scores). 0: s_kv.
  int64_t span_kv = 0;
  double fused_keys() const { return static_cast<double>(span_kv > 0 && span_kv < s_kv ? span_kv : s_kv); }
  int t = 1;                      // tensor-parallel size
  bool sp = false;                // sequence parallel
  int ep = 1;                     // expert parallel (MoE)
  int act_bytes = 2;              // activation element size: 2 (fp16/bf16) or 4 (fp32)
  bool flash = true;              // fused attention keeps logsumexp, not probabilities
  bool grad_flows = true;         // false for frozen layers below every trainable weight
  bool base_trainable = true;     // base weights receive gradients (not LoRA, not frozen)
  uint32_t lora_targets = 0;      // projection_bit()s with LoRA adapters
  int lora_rank = 0;
  // FP8 recipes under a stack that saves the linear layers' inputs quantized for their
  // weight gradients (Transformer Engine): bytes per element of such an input
  // (fp8_saved_input_bytes), or 0 when they are kept in the activation dtype (torchao's
  // Float8Linear saves its high-precision input; llmplan's executor has no FP8). Applies
  // to the inputs of base projections that train; LoRA adapters read the 16-bit input.
  double fp8_input_bytes = 0;
  // FP8 recipes under a stack that quantizes the weights at every forward and keeps the
  // copy the input-gradient GEMM reads with the micro-batch's saved tensors (TE without
  // its weight cache): bytes per layer parameter on the rank, or 0.
  double fp8_weight_bytes = 0;
  // QLoRA: bytes moved per base linear weight on the rank to dequantize it for one use
  // (read NF4 + constants, write the 16-bit copy), or 0.
  double dequant_bytes_per_param = 0;
  // The layer's kind (layer_kind): a dense MLP in a MoE model, and the attention window in
  // tokens (0: full attention). layer_context sets them from the layer's index; the
  // defaults are the model's MoE (or dense) MLP under full attention.
  bool dense_mlp = false;
  int64_t window = 0;
  // MoE: the routing probabilities scale the experts' activation output (Megatron-Core's
  // TEGroupedMLP activation_func_with_probs), so the combine sums the expert outputs
  // unweighted and keeps none of them; false: the combine weights them (the executor,
  // Hugging Face), keeping them for the probabilities' gradient. (MemoryOptions.)
  bool moe_probs_in_activation = false;
};

// ---------------------------------------------------------------- layer kinds

// Kind k of a layer: bit 0 set when the MLP is dense in a MoE model, bit 1 when the
// attention is windowed. A model without mixed layers has every layer of kind 0; the memory
// and time models compute each per-layer quantity once per kind present and sum a stage's
// layers by kind.
constexpr int kLayerKinds = 4;
int layer_kind(const ModelSpec& m, int layer);
// Bit k set when some layer of the model (0 .. layers-1) is of kind k. 1 for a model of one kind.
uint32_t layer_kinds_present(const ModelSpec& m);
// True when the model describes no mixed layers (every layer kind 0), in O(1): no dense
// layers among MoE ones and no window. (A model with them may still have one kind.)
inline bool uniform_layers(const ModelSpec& m) {
  return (!m.moe.enabled() || (m.moe.first_dense_layers <= 0 && m.moe.layer_freq <= 1)) && m.sliding_window <= 0;
}
// Sets c's dense_mlp and window for kind k of model m.
void set_layer_kind(const ModelSpec& m, int kind, LayerContext* c);
inline bool kind_dense_mlp(int kind) { return (kind & 1) != 0; }

// Keys a query attends to on average, over the s_kv positions of a causal sequence with a
// window of w tokens (0: full): s_kv / 2 for full attention, w - w^2 / (2 s_kv) for w < s_kv
// (positions before w see fewer keys). The causal half of the attention core's FLOPs.
double causal_keys_per_query(double s_kv, int64_t window);

// MoE capacity (GShard, Lepikhin et al. 2020): the rows one routed expert takes from the
// `tokens` tokens of one routing rank, C = ceil(capacity_factor * tokens * k / experts);
// tokens routed to an expert beyond C are dropped. moe_expert_rows = experts * C: the
// rows a rank's experts compute per micro-batch (E/ep experts x C rows from each of ep
// ranks), the size of the dispatch buffers. 0 for a dense model.
double moe_expert_capacity(const ModelSpec& m, double tokens);
double moe_expert_rows(const ModelSpec& m, double tokens);
// The most loaded EP rank's routed rows over balanced, under MoeSpec::load_imbalance = rho:
// the rank holds the hottest expert at rho times its share and its other E/ep - 1 experts at
// the mean load of the rest, (E - rho) / (E - 1):
//   (rho + (E/ep - 1) (E - rho) / (E - 1)) / (E/ep)
// rho with one expert per rank (ep = E), 1 with every expert on one rank (ep = 1). Exactly 1
// under forced balance (rho = 1).
double moe_rank_load_factor(const ModelSpec& m, int ep);
// moe_expert_rows of the most loaded EP rank: moe_expert_rows(m, tokens) x moe_rank_load_factor(m, ep).
double moe_expert_rows(const ModelSpec& m, double tokens, int ep);

// The tensors one layer keeps for backward with no recompute (policy none). Tensors a
// layer does not need — e.g. the input of a frozen projection — are left out.
SavedTensorList saved_tensors_per_layer(const ModelSpec& m, const LayerContext& c);

enum class LayerRecompute { none, selective, full };
// Bytes one layer keeps between its forward and backward under a recompute policy:
// none -> all of saved_tensors_per_layer; selective -> without the attention-score
// tensors (and, under latent attention, without the up-projected q, k, v that the cached
// latents give back); full -> only the layer input (sbh, /t under SP).
double activation_bytes_per_layer(const ModelSpec& m, const LayerContext& c, LayerRecompute policy);

// The three sums every recompute policy is made of, from one walk over the recipe (the
// sweep's hot path asks for several policies of the same layer).
struct SavedTensorSums {
  bool grad_flows = true;  // false: a frozen layer below every trainable weight keeps nothing
  double all = 0;          // bytes of every tensor of saved_tensors_per_layer
  double scores = 0;       // bytes of its attention-score tensors
  double latent = 0;       // bytes of its latent-derived tensors (SavedTensor::latent_derived)
  double input = 0;        // the layer input a full recompute keeps: b*s*h (/t under SP), act dtype
  // What PyTorch's per-operator selective checkpointing keeps (torchtitan's
  // selective_ac_option "op", torch.utils.checkpoint with a save list of matmuls and SDPA):
  // the layer input, the fused-attention output and its logsumexp, and the output of every
  // other matmul in call order (q, k, v, o, gate|fc1, up, down: q, v, gate|fc1 and, for
  // SwiGLU, down). Under TP the row-parallel outputs' reduce-scatters are kept too; not
  // counted (the records that use this policy run tp = 1). Not what llmplan's executor
  // does: the memory model uses it only when MemoryOptions::selective says so.
  double op_sac = 0;
};
SavedTensorSums sum_saved_tensors(const ModelSpec& m, const LayerContext& c);
double activation_bytes_per_layer(const SavedTensorSums& s, LayerRecompute policy);
double recompute_working_bytes(const SavedTensorSums& s, LayerRecompute policy);
// Bytes re-materialised during one layer's backward by its recompute (the extra working
// set at the backward peak): the whole layer for full, the score tensors for selective.
double recompute_working_bytes(const ModelSpec& m, const LayerContext& c, LayerRecompute policy);

// Bytes one layer holds from its input-gradient pass (B) to its weight-gradient pass (W)
// under a schedule that splits them (specs.h splits_backward): the gradient of the output
// of every linear whose weight trains, which W multiplies with the saved input (Qi et al.
// 2024, Sec. 2: W needs the output gradient B produced; PyTorch's stage_backward_input keeps
// each parameter group's output gradient for stage_backward_weight). Per rank per
// micro-batch in the activation dtype: q|k|v and the MLP's up projections split by t, the
// row-parallel outputs (o, down) whole, a MoE layer's routed experts over their
// capacity-padded rows and its router; latent attention's down projections over the
// rank's tokens; LoRA only the adapters (r and the target's width). 0 when no weight of
// the layer trains or no gradient reaches it.
double weight_grad_buffer_bytes(const ModelSpec& m, const LayerContext& c);

// ---------------------------------------------------------------- parameters

// Vocabulary rows one TP rank holds: the vocabulary padded to a multiple of tp (as
// Megatron and the executor pad it; the padded rows' logits are masked out of the loss).
inline double vocab_rows_per_rank(const ModelSpec& m, int tp) {
  return static_cast<double>((m.vocab + tp - 1) / tp);
}

// One layer's parameters (the fields of ParamCounts of the same names).
struct LayerParams {
  double per_layer = 0, per_layer_rank = 0;
  double lora_per_layer = 0, lora_per_layer_rank = 0;
  double expert_per_layer_rank = 0, lora_expert_per_layer_rank = 0;
};

struct ParamCounts {
  // Per layer: a layer of the model's main kind, the MoE MLP in a MoE model (its dense layers
  // are `dense` below).
  double per_layer = 0;       // one transformer layer, whole model (no TP/EP split)
  double per_layer_rank = 0;  // one layer on one rank (TP and EP split)
  double embedding = 0;       // token (+ position) embedding, whole model
  double embedding_rank = 0;  // on the first stage's rank (vocab split by t)
  double head = 0;            // final norm + LM head weight not shared with the embedding
  double head_rank = 0;       // on the last stage's rank (a tied head on pp > 1 stores a copy)
  double lora_per_layer = 0;       // adapter parameters, one layer, whole model
  double lora_per_layer_rank = 0;  // adapter parameters, one layer, one rank
  double total = 0;           // whole model (tied head counted once), excluding LoRA
  double active_per_token = 0;  // parameters that touch a token (MoE: top-k experts only)
  // MoE: the routed experts' share of per_layer_rank (experts/ep of them). Their replicas are
  // the dp*cp/ep ranks holding the same experts, so ZeRO partitions them over that many.
  double expert_per_layer_rank = 0;
  // LoRA: the routed experts' adapters' share of lora_per_layer_rank, partitioned likewise.
  double lora_expert_per_layer_rank = 0;
  // A layer with a dense MLP of width ffn_hidden: a MoE model's dense layers
  // (MoeSpec::first_dense_layers, layer_freq); equal to the main kind's for a dense model.
  LayerParams dense;
  // Multi-token prediction (ModelSpec::mtp_layers): the modules' own parameters (each a block
  // of the last layer's kind, eh_proj 2h x h, two input RMSNorms and its final norm), whole
  // model and on the last stage's rank, and of the latter the routed experts' share. The
  // embedding and output head they share are the main model's; on pp > 1 the last stage
  // keeps a copy of the token embedding for them (Megatron-Core GPTModel builds the
  // embedding where mtp_process), which mtp_rank includes (memory, not a parameter). Not in
  // total nor active_per_token, which are the main model's (DeepSeek-V3's 671B / 37B).
  double mtp = 0, mtp_rank = 0, mtp_expert_rank = 0;
  LayerParams layer(bool dense_mlp) const {
    return dense_mlp ? dense
                     : LayerParams{per_layer, per_layer_rank, lora_per_layer, lora_per_layer_rank, expert_per_layer_rank, lora_expert_per_layer_rank};
  }
};

// The nn.Linear weights of one layer on one rank (no biases, norms): q k v o, the MLP's
// matrices, the router, the rank's routed experts and the shared experts. QLoRA quantizes
// these and dequantizes them one at a time, so it needs their sum and the largest.
struct LinearWeights {
  double total = 0;
  double largest = 0;
};
LinearWeights linear_weights_per_layer_rank(const ModelSpec& m, int t, int ep, bool dense_mlp = false);

// Latent attention: the down projections (q_a, kv_a) and the latent norms are replicated
// under TP (Megatron-Core MLASelfAttention's linear_q_down_proj / linear_kv_down_proj,
// "duplicated"), the up projections column-parallel, o row-parallel. Attention sinks: one
// per head, split with the heads. Post-norms: two more norms of h.
// REQUIRES: t divides heads and kv_heads (callers validate the plan first).
ParamCounts count_params(const ModelSpec& m, int t, int pp, int ep, uint32_t lora_targets, int lora_rank);

// ---------------------------------------------------------------- FLOPs

// Forward FLOPs of one layer (or the head) on one rank for one micro-batch, split by
// kind, because their efficiencies differ and backward treats them differently.
struct LayerFlops {
  double gemm_base = 0;        // projections with base weights (2mnk each)
  double gemm_lora = 0;        // LoRA adapter GEMMs
  double attention = 0;        // QK^T and PV, full s*s (not halved for the causal mask; windowed: s*w)
  double attention_causal = 0; // the same, counting only the causal half (the window's keys) that runs
  double router = 0;           // MoE router
  double elementwise_bytes = 0;  // memory traffic of norms/activations/softmax (bandwidth-bound)
  // QLoRA: the traffic of dequantizing the layer's base weights once (read NF4, write 16
  // bits); paid in forward and once more in backward (the input gradient's GEMMs), not twice
  // like the elementwise work's backward.
  double dequant_bytes = 0;
};

LayerFlops forward_flops_per_layer(const ModelSpec& m, const LayerContext& c, double moe_capacity_tokens_factor);
// LM head forward FLOPs (2 * b*s * V/t * h) on the last stage.
double head_forward_flops(const ModelSpec& m, const LayerContext& c);

// Model FLOPs per step with the conventions of the literature, for MFU:
// forward+backward (3x forward), attention not halved (a windowed layer over its window),
// LM head included, and the multi-token prediction modules' work with their head.
double model_flops_per_token(const ModelSpec& m, int64_t seq_len);

}  // namespace llmplan
