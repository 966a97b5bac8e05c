// Spec types: what the user gives the planner (model, hardware, training job) and what
// the planner chooses (the parallel plan). Plain structs with units on every field; JSON
// in and out lives in spec_json.h, range checks in plan_check.h.
//
// Thread-safety: plain values, safe to copy and read from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace llmplan {

// ---------------------------------------------------------------- model

enum class Family { gpt, llama };
constexpr const char* kFamilyNames = "gpt, llama";  // GPT: LayerNorm, GELU, biases, learned positions.
                                   // Llama: RMSNorm, SwiGLU, no biases, rotary.

// Biases of the attention projections of a Llama-family block (a GPT block has every bias).
//   none  Llama, Mistral, Qwen3 (HF attention_bias false)
//   qkv   q, k and v, not o: Qwen2 / Qwen2.5 (transformers Qwen2Attention: bias=True on
//         q_proj, k_proj, v_proj; o_proj bias=False)
//   all   q, k, v and o: HF LlamaConfig / GptOssConfig attention_bias true
enum class AttentionBias { none, qkv, all };
constexpr const char* kAttentionBiasNames = "none, qkv, all";

struct MoeSpec {                    // Mixture of experts in the MLP of every MoE layer.
  int experts = 0;                  // routed experts per layer, e.g. 8 (0 = dense model)
  int experts_per_token = 0;        // top-k, e.g. 2 (DeepSeek-V3 and Qwen3-MoE: 8)
  int64_t expert_ffn_hidden = 0;    // inner width of one expert, e.g. 14336
  int shared_experts = 0;           // always-active experts (DeepSeek style), e.g. 0
  double capacity_factor = 1.0;     // tokens an expert buffers = cf * tokens * k / experts
  // Inner width of one shared expert; 0: ffn_hidden (the dense MLP's width). DeepSeek-V2/V3
  // give the shared experts the routed experts' width: n_shared_experts x
  // moe_intermediate_size together (DeepSeek-V3, arXiv 2412.19437, sec. 2.1.2; transformers
  // DeepseekV3MoE: intermediate_size = moe_intermediate_size * n_shared_experts).
  int64_t shared_expert_ffn_hidden = 0;
  // Which layers are MoE: layer i (from 0) when i >= first_dense_layers and i % layer_freq
  // == 0, the others a dense MLP of width ffn_hidden (HF DeepseekV3DecoderLayer:
  // first_k_dense_replace, moe_layer_freq; DeepSeek-V3: 3 dense, then 58 MoE). Defaults:
  // every layer MoE.
  int first_dense_layers = 0;
  int layer_freq = 1;
  // Biases on every expert's projections (its fused gate/up and its down) and on the
  // router: gpt-oss (transformers GptOssExperts gate_up_proj_bias, down_proj_bias;
  // GptOssTopKRouter bias). Default: none (Mixtral, Qwen, DeepSeek).
  bool expert_bias = false;
  // Dropless routing: the hottest expert's tokens over the balanced share tokens * k /
  // experts (1 + MaxVio of Wang et al. 2024, arXiv 2408.15664). 1 is forced balance, the
  // ideal and how MoE benchmarks are usually run; the presets of models trained with a
  // balancing method give its published figure (kMoeLoadImbalanceAuxLoss,
  // kMoeLoadImbalanceLossFree). The memory and time models size the most loaded EP rank's
  // expert rows with it (moe_rank_load_factor, recipe.h). Default: 1.
  double load_imbalance = 1.0;
  bool enabled() const { return experts > 0; }
};

// The hottest expert's load over balanced under the two balancing methods DeepSeek compared
// (Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts",
// arXiv 2408.15664, the MaxVio of its 1B models over the validation set): an auxiliary
// balancing loss leaves the hottest expert 1.72x the balanced share (MaxVio 0.72), the
// auxiliary-loss-free bias (DeepSeek-V3) 1.04x (MaxVio 0.04). Per-batch imbalance is larger.
constexpr double kMoeLoadImbalanceAuxLoss = 1.72;
constexpr double kMoeLoadImbalanceLossFree = 1.04;

// Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, sec. 2.1): queries and keys/
// values go through low-rank latents, c_Q = W_DQ h (q_lora_rank wide, RMS-normed; 0: q is
// projected directly from h, as DeepSeek-V2-Lite) and c_KV = W_DKV h (kv_lora_rank, RMS-
// normed), then W_UQ, W_UK, W_UV expand them per head into qk_nope_head_dim-wide queries and
// keys and v_head_dim-wide values; a decoupled rotary part of qk_rope_head_dim per query head
// (W_QR from c_Q) and one shared by every head for the keys (W_KR from h). Per head the
// query/key width is qk_nope + qk_rope, the value width v_head_dim. The names are the HF
// config's (transformers DeepseekV3Attention: q_a_proj, q_a_layernorm, q_b_proj,
// kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj).
struct MlaSpec {
  int64_t q_lora_rank = 0;       // d_c' (1536 in DeepSeek-V3); 0: no query compression
  int64_t kv_lora_rank = 0;      // d_c (512); 0: not MLA
  int64_t qk_nope_head_dim = 0;  // d_h (128)
  int64_t qk_rope_head_dim = 0;  // d_h^R (64)
  int64_t v_head_dim = 0;        // (128)
  bool enabled() const { return kv_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

struct ModelSpec {
  std::string name;                 // preset id, e.g. "llama2-7b"
  std::string source;               // where the numbers come from (paper, config URL)
  Family family = Family::llama;
  int layers = 0;                   // transformer blocks, e.g. 32
  int64_t hidden = 0;               // model width h, e.g. 4096
  int heads = 0;                    // attention heads a, e.g. 32
  int kv_heads = 0;                 // key/value heads (GQA/MQA); == heads for MHA
  int64_t head_dim = 0;             // per-head width; 0 means hidden / heads
  int64_t ffn_hidden = 0;           // MLP inner width f, e.g. 11008
  int64_t vocab = 0;                // vocabulary V, e.g. 32000
  int64_t max_positions = 0;        // context length the model was built for, e.g. 4096
  bool tied_embeddings = false;     // LM head shares the token-embedding matrix
  bool dropout = false;             // dropout layers present (GPT-style training)
  AttentionBias attention_bias = AttentionBias::none;  // Llama family only; GPT has all
  // RMSNorm over each query and key head (width head_dim, one weight of head_dim shared by
  // the heads) before the rotary embedding: Qwen3 (transformers Qwen3Attention q_norm,
  // k_norm), Megatron-Core --qk-layernorm. Llama family only.
  bool qk_norm = false;
  MoeSpec moe;
  MlaSpec mla;                      // multi-head latent attention on every layer when enabled
  // Sliding-window attention (Beltagy et al. 2020, Longformer; Mistral 7B; gpt-oss; Gemma 2/3):
  // a query attends to the sliding_window most recent positions, itself included. 0: full
  // attention on every layer.
  int64_t sliding_window = 0;
  // With a window, every n-th layer attends to the whole sequence: layer i (from 0) when
  // (i + 1) % n == 0 (transformers Gemma3DecoderLayer: is_sliding = (layer_idx + 1) %
  // sliding_window_pattern; Gemma 3: n = 6, 5 local layers to 1 global; gpt-oss's layer_types
  // alternate sliding, full: n = 2). 0: every layer windowed.
  int global_attention_every = 0;
  // A learned logit per head added to every softmax's denominator (gpt-oss model card,
  // arXiv 2508.10925, sec. 2: "attention sinks"; transformers GptOssAttention.sinks, one
  // per head): `heads` parameters a layer, split by TP with the heads.
  bool attention_sinks = false;
  // RMSNorms on the attention and MLP branches' outputs before the residual add, beside the
  // pre-norms (Gemma 2/3: post_attention_layernorm, post_feedforward_layernorm): four norms a
  // layer instead of two.
  bool post_norms = false;
  // DeepSeek-V3's multi-token prediction (arXiv 2412.19437, sec. 2.2): mtp_layers sequential
  // modules after the last layer, each an RMSNorm of the previous depth's hidden state and
  // one of the next token's embedding, their concatenation projected 2h -> h (eh_proj), one
  // transformer block of the last layer's kind and the shared output head with its own final
  // norm. They share the embedding and the output head with the main model and run on the
  // last pipeline stage. 0: none.
  int mtp_layers = 0;

  int64_t head_width() const {
    if (mla.enabled()) return mla.qk_head_dim();
    return head_dim > 0 ? head_dim : hidden / heads;
  }
  int64_t q_width() const { return head_width() * heads; }      // columns of W_q (MLA: of the up-projected queries)
  int64_t kv_width() const { return head_width() * kv_heads; }  // columns of W_k (= W_v but under MLA)
  // Width of the attention output (the output projection's input): q_width(), but under MLA
  // heads x v_head_dim.
  int64_t v_width() const { return mla.enabled() ? mla.v_head_dim * heads : q_width(); }
  // Inner width of the shared experts together (MoeSpec::shared_expert_ffn_hidden).
  int64_t shared_ffn_width() const { return (moe.shared_expert_ffn_hidden > 0 ? moe.shared_expert_ffn_hidden : ffn_hidden) * moe.shared_experts; }
  // The layer kinds (recipe.h, layer_kind): whether layer i (from 0) has the MoE MLP, and the
  // window of its attention (0: full).
  bool moe_layer(int layer) const {
    return moe.enabled() && layer >= moe.first_dense_layers && (moe.layer_freq <= 1 || layer % moe.layer_freq == 0);
  }
  int64_t attention_window(int layer) const {
    if (sliding_window <= 0) return 0;
    return global_attention_every > 0 && (layer + 1) % global_attention_every == 0 ? 0 : sliding_window;
  }
  bool qkv_bias() const { return family == Family::gpt || attention_bias != AttentionBias::none; }
  bool o_bias() const { return family == Family::gpt || attention_bias == AttentionBias::all; }
};

// ---------------------------------------------------------------- hardware

enum class Dtype { fp32, tf32, fp16, bf16, fp8 };

struct GpuSpec {
  std::string name;                  // preset id, e.g. "a100-80g"
  std::string source;
  double memory_bytes = 0;           // capacity, bytes (80 GB card: 80e9)
  double memory_bandwidth = 0;       // HBM, bytes/s
  double peak_flops[5] = {0, 0, 0, 0, 0};  // dense FLOP/s, indexed by Dtype; 0 = unsupported
  // Fraction of the dense tensor peak that warp-level mma.sync instructions (the Ampere
  // programming model, used by FlashAttention-2 and Triton attention kernels) can reach.
  // 1 up to Ampere/Ada; 2/3 on Hopper, whose full rate needs warpgroup wgmma (Shah et al.
  // 2024, FlashAttention-3, sec. 2.2). Applied to fused attention only: cuBLAS GEMMs use wgmma.
  double mma_sync_fraction = 1.0;
  // Dense 16-bit tensor FLOPs per softmax exponential at the same clock: the SM's tensor
  // FLOP/clock over its SFU's exp2 (MUFU.EX2) results/clock, 16 from Volta to Blackwell
  // (CUDA C++ Programming Guide, arithmetic instruction throughput) and 32 on Blackwell Ultra
  // (NVIDIA, 'Making Softmax More Efficient with NVIDIA Blackwell Ultra': doubled SFU
  // throughput). A100 128, H100 256, B200 512, B300 256. Fused attention needs one
  // exponential per score and 4d tensor FLOPs per score forward (d: head width), so at
  // d = 128 a B200's SFUs take as long as its tensor cores. 0: unknown (no softmax term).
  double tensor_flops_per_exp = 0;
  // Dense FP4 FLOP/s where the GPU has it (Blackwell NVFP4/MXFP4, MI355X). Informational:
  // no FP4 training recipe is modelled, so the time model never reads it.
  double fp4_flops = 0;
  // FP8 GEMMs take operands in any layout (Blackwell, sm_100 and later). Hopper's and Ada's
  // FP8 tensor-core GEMMs take only the "TN" layout, so Transformer Engine keeps a
  // transposed FP8 copy of each weight and of each saved input for the backward GEMMs;
  // on Blackwell it keeps none (TE's is_non_tn_fp8_gemm_supported(): compute capability
  // >= 10.0). Default: false.
  bool fp8_gemm_any_layout = false;
  // Tensor cores that apply per-block scales inside the GEMM: OCP MX formats, MXFP8 with an
  // E8M0 scale per 32 elements (NVIDIA Blackwell; AMD CDNA4 / MI355X). Without them the
  // mxfp8 recipe cannot run. Default: false.
  bool mx_block_scaling = false;
  double peak(Dtype d) const { return peak_flops[static_cast<int>(d)]; }
};

struct ClusterSpec {
  std::string name;                  // preset id, e.g. "dgx-a100"
  std::string source;
  GpuSpec gpu;
  int gpus_per_node = 8;
  int nodes = 1;
  double intra_node_bandwidth = 0;   // per GPU, one direction, bytes/s (NVLink)
  double intra_node_latency = 0;     // s
  double inter_node_bandwidth = 0;   // per GPU, one direction, bytes/s (IB/RoCE)
  double inter_node_latency = 0;     // s
  double host_bandwidth = 25e9;      // GPU<->host (PCIe) per GPU, bytes/s, for offload
  // Host (CPU) memory of one node, bytes: what optimizer and activation offload may fill
  // beside the OS and the framework. 0: not known, not checked.
  double host_memory_bytes = 0;
  // GPUs that share the scale-up (NVLink) fabric, when that is larger than a node: a GB200
  // NVL72 rack joins 18 trays of 4 GPUs in one 72-GPU NVLink domain (NVIDIA GB200 NVL72
  // datasheet), so groups of up to 72 ranks talk at intra_node_bandwidth. 0: the node.
  int nvlink_domain = 0;
  int total_gpus() const { return gpus_per_node * nodes; }
  int scale_up_gpus() const { return nvlink_domain > gpus_per_node ? nvlink_domain : gpus_per_node; }
};

// Nodes that hold `gpus` GPUs at `gpus_per_node` each (the last one possibly partial).
inline int nodes_for(int gpus, int gpus_per_node) {
  const int per = gpus_per_node > 0 ? gpus_per_node : 1;
  return gpus > 0 ? (gpus + per - 1) / per : 1;
}
// The cluster of `c`'s node type holding `gpus` GPUs: whole nodes, or one partial node
// (gpus_per_node = gpus) below a node, as the CLI's and the GUI's --gpus set it.
inline ClusterSpec cluster_with_gpus(const ClusterSpec& c, int gpus) {
  ClusterSpec out = c;
  if (gpus < out.gpus_per_node) out.gpus_per_node = gpus;
  out.nodes = nodes_for(gpus, out.gpus_per_node);
  return out;
}

// ---------------------------------------------------------------- training job

enum class TrainMode { pretrain, finetune, lora };
// How LoRA's frozen base weights are stored. nf4: QLoRA (Dettmers et al. 2023, sec. 3): the
// layers' linear weights in 4-bit NormalFloat, blocks of 64 with an absmax constant each,
// the constants themselves quantized to 8 bits in blocks of 256 (double quantization:
// 8/64 + 32/(64*256) = 0.127 bits per parameter); norms, biases, the embedding and the LM
// head stay 16-bit (bitsandbytes replaces nn.Linear layers only). Weights are dequantized to
// the compute dtype at each use, forward and backward.
enum class BaseQuant { none, nf4 };
// Bytes per NF4-quantized parameter with double quantization: 4 + 8/64 + 32/(64*256) bits.
constexpr double kNf4BytesPerParam = (4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0)) / 8.0;
enum class Precision { fp32, fp16, bf16 };
constexpr const char* kPrecisionNames = "fp32, fp16, bf16";
enum class AmpLevel { O0, O1, O2, O3 };  // MindSpore names; O0 = no AMP (fp32 only)
enum class Optimizer { adamw, sgd_momentum };
constexpr const char* kOptimizerNames = "adamw, sgd";
// The dtype of the optimizer's moment buffers (AdamW's m and v, SGD's momentum): fp32, or
// bf16 as Megatron-Core's precision-aware optimizer keeps them (--use-precision-aware-
// optimizer with --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, Transformer Engine's
// FusedAdam; Megatron-Bridge's DeepSeek-V3 recipe sets both): 4 B/param less with AdamW.
// The fp32 master weights stay fp32.
enum class MomentsDtype { fp32, bf16 };
constexpr const char* kMomentsDtypeNames = "fp32, bf16";
// Bytes of gradients in mixed precision: DeepSpeed keeps 16-bit grads (16 B/param with
// AdamW), Megatron accumulates fp32 main grads (18 B/param).
enum class GradConvention { deepspeed, megatron };

// FP8 training recipes: how the inputs of the linear layers' GEMMs are scaled into
// float8 (E4M3 forward, E5M2 or E4M3 for gradients). What each keeps in memory and costs
// is planner/spec/fp8_recipe.h's.
//   tensorwise  one scale per tensor from its current amax (TE Float8CurrentScaling,
//               torchao Float8LinearConfig "tensorwise")
//   delayed     one scale per tensor from an amax history of past steps (TE DelayedScaling)
//   blockwise   DeepSeek-V3's 1x128 tiles for activations and gradients, 128x128 blocks
//               for weights, fp32 scales (TE Float8BlockScaling)
//   mxfp8       OCP MX: 1x32 blocks with an E8M0 scale, in hardware (TE MXFP8BlockScaling;
//               Blackwell)
enum class Fp8Recipe { none, tensorwise, delayed, blockwise, mxfp8 };
constexpr const char* kFp8RecipeNames = "none, tensorwise, delayed, blockwise, mxfp8";

struct LoraSpec {
  int rank = 8;                                  // r
  double alpha = 16;                             // scaling alpha / r
  std::vector<std::string> targets = {"q", "v"};  // of q k v o gate up down (fc1/fc2 alias up/down)
};

struct TrainingJob {
  TrainMode mode = TrainMode::pretrain;
  LoraSpec lora;                     // used when mode == lora
  BaseQuant base_quant = BaseQuant::none;  // nf4: QLoRA (mode lora only; "--mode qlora")
  bool qlora() const { return mode == TrainMode::lora && base_quant == BaseQuant::nf4; }
  int frozen_layers = 0;             // bottom transformer layers with no trainable weights
  double frozen_fraction = 0;        // alternative to frozen_layers, 0..1 (rounded down)
  int64_t seq_len = 2048;            // tokens per sequence
  // Packed documents (0: none): each sequence holds documents of doc_len tokens, and
  // attention is masked per document (variable-length / THD attention with cu_seqlens,
  // as NeMo's packed SFT and document-masked pre-training run it), so a query sees only
  // its own document's earlier keys. For documents of varying length, the token-weighted
  // span E[d^2] / E[d]. At most seq_len (= one document per sequence).
  int64_t doc_len = 0;
  bool packed_documents() const { return doc_len > 0 && doc_len < seq_len; }
  int64_t attention_span() const { return packed_documents() ? doc_len : seq_len; }
  int64_t global_batch = 512;        // sequences per optimizer step, all DP replicas
  Precision precision = Precision::bf16;
  AmpLevel amp = AmpLevel::O2;       // ignored (O0) for fp32
  Optimizer optimizer = Optimizer::adamw;
  MomentsDtype moments = MomentsDtype::fp32;  // the optimizer's moment buffers
  GradConvention grads = GradConvention::deepspeed;
  Fp8Recipe fp8 = Fp8Recipe::none;   // float8 GEMMs in linear layers by this scaling recipe, 16-bit elsewhere
  bool fp8_linear() const { return fp8 != Fp8Recipe::none; }

  int frozen_layer_count(int layers) const {
    int k = frozen_layers > 0 ? frozen_layers : static_cast<int>(frozen_fraction * layers);
    return k < 0 ? 0 : (k > layers ? layers : k);
  }
};

// The job modes a user names (--mode, job.mode): TrainMode's, and qlora = lora with NF4 base
// weights.
enum class JobMode { pretrain, finetune, lora, qlora };
constexpr const char* kJobModeNames = "pretrain, finetune, lora, qlora";
inline JobMode job_mode(const TrainingJob& j) {
  return j.qlora() ? JobMode::qlora : static_cast<JobMode>(static_cast<int>(j.mode));
}
inline void set_job_mode(JobMode m, TrainingJob* j) {
  j->mode = m == JobMode::qlora ? TrainMode::lora : static_cast<TrainMode>(static_cast<int>(m));
  j->base_quant = m == JobMode::qlora ? BaseQuant::nf4 : BaseQuant::none;
}

// ---------------------------------------------------------------- plan

enum class Recompute { none, selective, full, full_k };  // full_k: k layers per stage full
constexpr const char* kRecomputeNames = "none, selective, full, full_k";
// Pipeline schedules. zb_h1: Qi et al. 2024 (Zero Bubble Pipeline Parallelism, ICLR 2024)
// ZB-H1, each backward split into its input-gradient part (B) and weight-gradient part (W),
// W deferred into the drain; one stage per rank, the order of PyTorch's
// torch.distributed.pipelining ZB1P (_get_1f1b_rank_ops with enable_zero_bubble). zbv: the
// same paper's ZB-V, two chunks per rank placed in a V (rank r holds virtual stages r and
// 2pp-1-r), the order of ScheduleZBVZeroBubble. dualpipev: DeepSeek's DualPipeV
// (deepseek-ai/DualPipe), the V placement with forward and backward chunks of two
// micro-batches paired so that each one's communication overlaps the other's compute, the
// order of ScheduleDualPipeV (pytorch/pytorch 00722e6, schedules.py). dualpipe: DeepSeek's
// original two-direction DualPipe (DeepSeek-V3 Technical Report sec. 3.2.2; deepseek-ai/
// DualPipe dualpipe.py): pp ranks (even), half the micro-batches fed at rank 0 and half at
// rank pp-1; rank r holds stage r of the one direction and stage pp-1-r of the other (two
// copies of the parameters, vpp 2 in the plan), and its step() is DualPipeV's with
// num_ranks -> pp/2, rank -> min(r, pp-1-r) and num_chunks -> num_chunks/2, op for op.
enum class Schedule { gpipe, one_f_one_b, interleaved, zb_h1, zbv, dualpipev, dualpipe };
constexpr const char* kScheduleNames = "gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev, dualpipe";
// Schedules that split the backward into B and W (the W-gradient buffers of memory_model.h).
inline bool splits_backward(Schedule s) {
  return s == Schedule::zb_h1 || s == Schedule::zbv || s == Schedule::dualpipev || s == Schedule::dualpipe;
}
// Schedules that place a rank's two chunks in a V: the first and the last virtual stage (the
// embedding and the LM head) both on rank 0.
// (DualPipe is costed as its rank-equivalent DualPipeV plan, plan_check.h cost_plan.)
inline bool v_shape(Schedule s) { return s == Schedule::zbv || s == Schedule::dualpipev; }
// How context parallel exchanges K and V between the CP ranks. ring: Megatron's ring (two
// K/V chunks in flight, overlapped with attention). all_gather: the executor's (Llama 3's)
// exchange: k and v all-gathered whole into communication buffers before attention, not
// overlapped, and their gradients reduce-scattered in backward; queries stay local.
// Meaningful only when cp > 1.
enum class CpExchange { ring, all_gather };
constexpr const char* kCpExchangeNames = "ring, all_gather";
// How a pipeline's layers are split over its pp * vpp virtual stages. even: as even as
// possible, the remainder on the last stages (vpp > 1 needs pp*vpp to divide the layers).
// account_embedding_loss: Megatron-Core's account_for_embedding_in_pipeline_split and
// account_for_loss_in_pipeline_split (megatron/core/transformer/transformer_config.py):
// the embedding and the loss count as one layer each, so the L + 2 slots are split evenly
// and the first and last virtual stage hold one transformer layer fewer (Llama 3.1 405B's
// 126 layers on pp 8 x vpp 8: 128 slots of 2, chunks of 1, 2, ..., 2, 1 layers).
// custom: the layers of each virtual stage given one by one (ParallelPlan::stage_layers), as
// Megatron-Core's --decoder-first/last-pipeline-num-layers (transformer_config.py: the first
// and last stage's counts, the rest split evenly, each stage's count divisible by vpp) and
// --pipeline-model-parallel-layout (docs/api-guide/pipeline_parallel_layout.md: one entry per
// virtual stage) and MindFormers' per-stage `offset` state it. The embedding stays on virtual
// stage 0 and the head on the last; every virtual stage holds at least one layer.
enum class PipelineSplit { even, account_embedding_loss, custom };
constexpr const char* kPipelineSplitNames = "even, account_embedding_loss, custom";

struct ParallelPlan {
  int dp = 1, tp = 1, pp = 1;
  int vpp = 1;                       // virtual stages per pipeline rank (interleaved when > 1)
  int cp = 1;                        // context parallel (sequence split for attention)
  int ep = 1;                        // expert parallel (MoE), inside dp*cp
  bool sp = false;                   // Megatron sequence parallel (needs tp > 1)
  int micro_batch = 1;               // sequences per micro-batch per DP rank
  int grad_accum = 1;                // micro-batches per step = global / (micro * dp)
  int zero = 0;                      // 0..3
  Recompute recompute = Recompute::none;
  int recompute_layers = 0;          // k for Recompute::full_k (per pipeline stage)
  bool offload_optimizer = false;    // optimizer states and master weights in host memory
  // ZeRO-3 with optimizer offload: the 16-bit parameter shard in host memory too, copied to
  // the GPU for each gather (DeepSpeed ZeRO-Infinity's offload_param device cpu; PyTorch
  // FSDP2's CPUOffloadPolicy, torchtitan's training.enable_cpu_offload).
  bool offload_params = false;
  bool flash_attention = true;       // fused attention: no s*s scores kept
  Schedule schedule = Schedule::one_f_one_b;
  CpExchange cp_exchange = CpExchange::ring;  // plan files without it are ring
  PipelineSplit pipeline_split = PipelineSplit::even;  // plan files without it are even
  // Under PipelineSplit::custom, the layers of virtual stage v = 0 .. pp*vpp-1 in the model's
  // order (v = chunk*pp + stage; a V places chunk_virtual_stage, plan_check.h), summing to the
  // model's layers; empty under the other splits (so copying a plan allocates nothing).
  std::vector<int> stage_layers;
  // Activation offload: the kept activations of the first k layers of each pipeline stage go
  // to host memory after their forward and come back before their backward (Megatron-Core's
  // cpu_offloading_num_layers over Transformer Engine's CPU offload context, double-buffered:
  // two layers' worth stay on the GPU). 0: none.
  int activation_offload_layers = 0;
  int world_size() const { return dp * tp * pp * cp; }
};

// The 16-bit format to train in on this GPU when none is asked for: bf16 where the GPU has
// a bf16 peak, else fp16.
inline Precision default_half_precision(const GpuSpec& g) { return g.peak(Dtype::bf16) > 0 ? Precision::bf16 : Precision::fp16; }

// Short names used in JSON, CLI and tables ("llama", "bf16", "O2", "selective", "1f1b").
const char* to_string(Family v);
const char* to_string(AttentionBias v);
const char* to_string(Dtype v);
const char* to_string(TrainMode v);
const char* to_string(JobMode v);
const char* to_string(Precision v);
const char* to_string(AmpLevel v);
const char* to_string(Optimizer v);
const char* to_string(GradConvention v);
const char* to_string(MomentsDtype v);
const char* to_string(Fp8Recipe v);
const char* to_string(Recompute v);
// A plan's recompute as tables print it: the policy, and for full_k its k ("full_k3").
std::string recompute_text(const ParallelPlan& p);
const char* to_string(Schedule v);
const char* to_string(CpExchange v);
const char* to_string(PipelineSplit v);

// Parse the names above; return false (and leave *out untouched) on an unknown name.
bool parse_enum(const std::string& s, Family* out);
bool parse_enum(const std::string& s, AttentionBias* out);
bool parse_enum(const std::string& s, Dtype* out);
bool parse_enum(const std::string& s, TrainMode* out);
bool parse_enum(const std::string& s, JobMode* out);
bool parse_enum(const std::string& s, Precision* out);
bool parse_enum(const std::string& s, AmpLevel* out);
bool parse_enum(const std::string& s, Optimizer* out);
bool parse_enum(const std::string& s, GradConvention* out);
bool parse_enum(const std::string& s, MomentsDtype* out);
bool parse_enum(const std::string& s, Fp8Recipe* out);
bool parse_enum(const std::string& s, Recompute* out);
bool parse_enum(const std::string& s, Schedule* out);
bool parse_enum(const std::string& s, CpExchange* out);
bool parse_enum(const std::string& s, PipelineSplit* out);

}  // namespace llmplan
