// ModelImpl's class: the GPT / Llama model of model.h, written once over a backend's op layer.
// Its longer members are defined, one concern per file, in the headers beside this one;
// model_impl.h includes them all (include that, not this).
//
// Internal to the executor: model.cpp instantiates it over the CPU ops (CpuOps), and
// executor/cuda/cuda_model.cpp over the CUDA ops (CudaOps), so both backends run the same
// forward, backward, recompute, tensor- and pipeline-parallel code and allocate exactly the
// same tensors, by the same names and categories, in the same order (the planner's recipe;
// see model.h for the contract). What differs per backend is behind Ops: where memory
// lives, how an op is launched, and each op's scratch size.
//
// An Ops type provides, all returning Status (or Result) and taking the cpu:: ops'
// arguments: linear_forward/backward, layernorm/rmsnorm forward/backward, attention
// (materialized, flash, and the fused-dropout variant), dropout, gelu, swiglu, rope,
// embedding, add, add_inplace, cast, cross_entropy_forward (Result<double>, the loss on the
// host) and backward; the tensor-parallel shards of these: embedding_forward/backward_shard
// and vocab_parallel_ce_max/sums/backward with vocab_parallel_ce_loss (Result<VocabCeLoss>);
// the MoE moves of cpu/moe.h (moe_router_softmax, moe_dispatch, moe_combine and its
// backward); download / upload (between the backend's memory and the host's); the
// scratch sizes linear/norm/attention/attention_dropout _workspace_bytes and chunk_rows;
// and fill (host doubles into a tensor), zero, zeros, copy (within the backend's memory) and copy_2d (rows at pitches),
// scale, stage_batch (a host Batch, positions and, under CP, the whole sequences' doc ids
// to where the ops read them); logits_row_stride(v) (>= v: the backend's padded row of the
// logits) with the strided head ops linear_forward_ld, linear_backward_ld and cast_rows,
// used only where the stride differs from v. kHostMemory: whether tensors are host memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "executor/cpu/attention.h"
#include "executor/cpu/cross_entropy.h"
#include "executor/cpu/dropout.h"
#include "executor/cpu/nf4.h"
#include "executor/model.h"
#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"

namespace llmplan::exec::detail {

#define LL_TRY(...)               \
  do {                            \
    Status ll_s_ = (__VA_ARGS__); \
    if (!ll_s_) return ll_s_;     \
  } while (0)

// One micro-batch where the backend's ops read it: host pointers on the CPU (the Batch's
// own), device copies on a GPU. Each pipeline slot has its own (Slot::staged), so the
// copies live in `buffers`, which the backend fills and keeps from one micro-batch to the
// next of the same slot.
struct StagedBatch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  const int32_t* doc = nullptr;        // nullptr: no document mask
  const int32_t* positions = nullptr;  // (b * s): restart per sequence and document
  const int32_t* whole_doc = nullptr;  // CP: the whole sequences' doc ids (attention reads keys' positions)
  const int32_t* host_targets = nullptr;  // the same targets in host memory (MTP shifts them there)
  std::vector<Tensor> buffers;         // the backend's copies (a GPU's), empty on the CPU
};


enum class Mode { keep, discard, recompute };  // training forward / loss only / backward's re-run

inline Status make(TrackingAllocator& a, Tensor& t, int64_t numel, DType dt, Category c, const std::string& name) {
  Result<Tensor> r = Tensor::empty(a, Shape{numel}, dt, c, name);
  if (!r) return r.status();
  t = std::move(*r);
  return Status::ok();
}

// Scratch bytes for an op's workspace, counted under Category::workspace.
struct Scratch {
  Block block;
  std::span<std::byte> span() { return {static_cast<std::byte*>(block.data()), static_cast<size_t>(block.bytes())}; }
};
inline Status scratch(TrackingAllocator& a, Scratch& s, int64_t bytes, const char* what) {
  s.block.reset();
  if (bytes <= 0) return Status::ok();
  Result<Block> b = a.allocate(bytes, Category::workspace, what);
  if (!b) return b.status();
  s.block = std::move(*b);
  return Status::ok();
}

inline constexpr const char* kLoraZ[] = {"lora.q.z", "lora.k.z", "lora.v.z", "lora.o.z", "lora.gate.z", "lora.up.z", "lora.down.z"};
inline constexpr const char* kProjName[] = {"q", "k", "v", "o", "gate", "up", "down"};

// S: storage type, G: weight-gradient type; Ops: the backend's op layer (CpuOps in
// model.cpp, CudaOps in cuda/cuda_model.cpp): the functions of executor/cpu/ops.h by the
// same names and arguments, each returning a Status, plus the memory movements a model
// needs (fill, zero, zeros, copy, scale, stage_batch) and the workspace sizes of its ops.
// Ops::kHostMemory says whether tensors are host memory: where not, the host reads and
// writes them through download / upload (MoE routing, host_view and backend_view).
template <class S, class G, class Ops>
class ModelImpl final : public Model {
  using A = acc_t<S>;  // math type; also the softmax buffer's type (fp32, fp64 for double)
  static constexpr DType kA = dtype_of<A>;

  enum class Par { none, column, row };  // tensor-parallel kind of a projection
  struct Linear {
    Projection proj{};
    Par par = Par::none;
    int64_t in = 0, out = 0;  // this rank's (local) widths
    Tensor w, b, gw, gb;
    bool nf4 = false;  // QLoRA: w holds the weight's NF4 bytes (cpu/nf4.h), dequantized at each use (weight_of)
    bool lora = false;
    Tensor la, lb, gla, glb;  // A (r, in), B (out, r)
  };
  struct Norm {
    Tensor w, b, gw, gb;
  };
  // The recipe's tensors of one layer (ln1.input is inputs_[layer]).
  struct Saved {
    Tensor qkv_input, q, k, v, lse, probs, probs_mask, probs_dropped, proj_input, attn_mask, ln2_input, mlp_input,
        fc1_out, gate_out, up_out, act_out, mlp_mask;
    // MoE (fc1/gate/up/act_out above are then the routed experts' rows).
    Tensor router_probs, expert_input, expert_output, sh_fc1, sh_gate, sh_up, sh_act;
    Tensor q_norm_input, k_norm_input;  // QK-norm: the q and k projections' outputs
    Tensor attn_post_in, mlp_post_in;   // post-norms: the branches' outputs, the norms' inputs
    // Latent attention: the down projections' outputs and their RMSNorms' outputs.
    Tensor q_latent, q_latent_norm, kv_latent, kv_latent_norm;
    Tensor lora_z[7];
    void clear() { *this = Saved{}; }
  };
  struct Layer {
    int index = 0;
    LayerContext ctx;
    LayerRecompute policy = LayerRecompute::none;
    SavedTensorList recipe;
    Norm ln1, ln2;
    Norm qn, kn;  // QK-norm: RMSNorm weights of head_dim, shared by the rank's heads
    Norm pn1, pn2;  // post-norms (Gemma 2/3): on the attention and MLP branches' outputs
    // Attention sinks (gpt-oss): this rank's heads' logits (heads / t), and as doubles for
    // the kernels (AttentionDims::sinks), read at each forward.
    Tensor sinks, gsinks;
    std::vector<double> sink_logits;
    Linear q, k, v, o, gate, up, down;
    // Latent attention (mla_fwd) instead of k and v: q is the queries' up projection (q_b;
    // from x when the queries are not compressed), qa their down projection, kva the keys'
    // and values' down projection with the rotary key (kv_a_proj_with_mqa), kvb their up
    // projection (kv_b); qan and kvan the latents' RMSNorms.
    Linear qa, kva, kvb;
    Norm qan, kvan;
    // MoE instead of gate/up/down: the router (E, h), this rank's routed experts
    // (e0_ .. e0_ + El_ - 1, each an MLP of width expert_ffn_hidden) and the shared experts
    // (one MLP of width ffn_hidden * shared_experts).
    struct Moe {
      Tensor router, grouter;
      Tensor router_bias, grouter_bias;  // gpt-oss (moe.expert_bias): the router's bias (E)
      std::vector<Linear> gate, up, down;
      Linear sgate, sup, sdown;
    } moe;
    Saved sv;
  };

 public:
  ModelImpl(TrackingAllocator& a, ModelConfig c, Ops ops) : a_(a), c_(std::move(c)), ops_(std::move(ops)) {}

  Status init();

  // ---------------------------------------------------------------- Model

  Result<double> forward_backward(const Batch& b, double loss_scale, double denom, uint64_t seed) override {
    return run(b, loss_scale, denom, seed, true);
  }
  Result<double> forward_loss(const Batch& b, double denom, uint64_t seed) override {
    return run(b, 1.0, denom, seed, false);
  }
  std::vector<ParamRef>& params() override { return params_; }
  void zero_grads() override {
    for (ParamRef& p : params_)
      if (p.grad != nullptr) (void)ops_.zero(p.grad->raw(), p.grad->bytes());  // cannot fail: memset / cudaMemsetAsync
  }
  const ModelConfig& config() const override { return c_; }
  const Where& where() const override { return where_; }
  const std::vector<std::vector<int>>& units() const override { return units_; }
  void set_param_hooks(ParamHooks* hooks) override { hooks_ = hooks; }

 private:
  // ---------------------------------------------------------------- parameters

  // The full (split.rows, split.cols) tensor is drawn as a single-rank model draws it; this
  // rank keeps its TP slice (split.dim, see TpSplit).
  // Values are a function of (seed, name, element index in the full tensor) only -- a
  // counter-based draw (splitmix64, Box-Muller) -- so every stage and TP slice computes its
  // own elements as a single-rank model would, without drawing the rest.
  // nf4: QLoRA's frozen base weight, stored as its NF4 bytes (cpu/nf4.h; a u8 tensor of
  // nf4_bytes(numel), no gradient) quantized from the same draw.
  Status param(Tensor& w, Tensor& g, TpSplit split, const std::string& name, bool trainable, bool decay, double std, double constant = 0,
               bool shared_copy = false, bool nf4 = false);

  Status init_norm(Norm& nm, const std::string& name, bool trainable) {
    LL_TRY(param(nm.w, nm.gw, {-1, 1, h_}, name + ".weight", trainable, false, 0, 1.0));
    if (gpt_) LL_TRY(param(nm.b, nm.gb, {-1, 1, h_}, name + ".bias", trainable, false, 0, 0.0));
    return Status::ok();
  }

  // in, out: the full widths; column-parallel splits out, row-parallel splits in.
  // name: the parameter's prefix (default "layer<i>.<projection>").
  // adapters: false keeps a LoRA target's projection without them (MoE shared experts).
  Status init_linear(Layer& L, Linear& li, Projection p, Par par, int64_t in, int64_t out, const std::string& name = {}, bool adapters = true);

  // i: the stage-local index; L.index is the global one.
  Status init_layer(Layer& L, int local);
  // L's parameters, from its index, context and policy (set by the caller).
  Status init_layer_params(Layer& L);

  // Router, this rank's experts (named by their global index, so every EP rank's expert e
  // is initialised as a single-rank model's), shared experts.
  Status init_moe(Layer& L);

  // ---------------------------------------------------------------- helpers

  const SavedTensor* recipe_item(const Layer& L, const char* name) const {
    for (int i = 0; i < L.recipe.count; ++i)
      if (std::string_view(L.recipe.items[static_cast<size_t>(i)].name) == name) return &L.recipe.items[static_cast<size_t>(i)];
    return nullptr;
  }
  // Kept between forward and backward: listed by the recipe and not dropped by the policy.
  bool kept(const Layer& L, const char* name) const {
    if (!L.ctx.grad_flows || L.policy == LayerRecompute::full) return false;
    const SavedTensor* it = recipe_item(L, name);
    return it != nullptr && !(L.policy == LayerRecompute::selective && (it->attention_scores || it->latent_derived));
  }
  // A tensor of layer L named as the recipe names it: in activations when kept.
  Status lmake(Layer& L, Tensor& t, const char* name, int64_t numel, DType dt, Mode mode);
  Status ws(Tensor& t, int64_t numel, const char* name, DType dt = DType::f32) {
    return make(a_, t, numel, dt == DType::f32 ? c_.storage : dt, Category::workspace, name);
  }
  static S* d(Tensor& t) { return t.data<S>(); }
  static S* dopt(Tensor& t) { return t.defined() ? t.data<S>() : nullptr; }
  static G* g(Tensor& t) { return t.defined() ? t.data<G>() : nullptr; }
  int64_t chunk_rows(int64_t n) const { return ops_.chunk_rows(n); }

  uint64_t site_seed(uint64_t seed, int layer, int site) const {
    return cpu::splitmix64_at(seed, static_cast<uint64_t>(layer + 1) * 16 + static_cast<uint64_t>(site));
  }

  Status lin_base_fwd(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out);
  // The linear's weight as its GEMMs read it: its tensor, or under QLoRA its NF4 bytes
  // dequantized into `tmp` (workspace; one weight at a time, as bitsandbytes' MatMul4Bit
  // dequantizes for each matmul, forward and backward).
  Status weight_of(Linear& li, Tensor& tmp, const S*& w) {
    if (!li.nf4) {
      w = d(li.w);
      return Status::ok();
    }
    const int64_t n = li.in * li.out;
    LL_TRY(ws(tmp, n, "qlora.dequantized_weight"));
    LL_TRY(ops_.template nf4_dequantize<S>(li.w.template data<uint8_t>(), n, d(tmp)));
    w = d(tmp);
    return Status::ok();
  }
  Status lin_base_bwd(const S* dy, const S* x, const S* w, S* dx, G* dw, G* db, int64_t n, int64_t in, int64_t out);


  // y (n, out) = x W^T + b (+ LoRA: scale x A^T B^T, z = scale x A^T kept as lora.<p>.z).
  // Row-parallel: the partial outputs are summed over TP (the bias added by TP rank 0 only).
  // With SP, y of a row-parallel projection is this rank's ns_ tokens (reduce-scatter).
  // rows: 0 = n_ (the micro-batch); an MoE expert's block of rows otherwise (no TP), which
  // starts at row row0 of the rank's rows_ expert rows (its LoRA intermediate's offset).
  Status lin_fwd(Layer& L, Linear& li, const S* x, S* y, Mode mode, int64_t rows = 0, int64_t row0 = 0);
  // y += z B^T with z = scale x A^T (n_, r), kept as lora.<p>.z: n_ * r on every TP rank
  // (the recipe's b*s*r). Column-parallel: x and A are whole, so z is too; B is this rank's
  // rows and so is y. Row-parallel: x A^T over this rank's input columns is partial, summed
  // over TP (n_ * r, the small side: Megatron's RowParallelLinear for A), then B is whole and
  // the product (equal on every rank) is added to the already-reduced y -- under SP to this
  // rank's ns_ tokens only.
  // rows > 0: an MoE expert's block of rows starting at row0 (no TP): the z of every block
  // of the rank's rows_ expert rows is one tensor (the recipe's E * C * r), made by the
  // block at row 0.
  Status lora_fwd(Layer& L, Linear& li, const S* x, S* y, Mode mode, int64_t rows = 0, int64_t row0 = 0);
  // Sequence parallel: full (n_, h) = the ns_-token slices of every TP rank, in a buffer
  // counted as communication (the planner's TP/SP all-gather line).
  Status sp_gather(Tensor& full, const S* local, const char* name) {
    LL_TRY(make(a_, full, n_ * h_, c_.storage, Category::communication, name));
    return c_.comm->all_gather(local, d(full), ns_ * h_, c_.storage, Group::tp);
  }
  // Column-parallel input gradient: partial (n_, h) summed over TP into local (ns_, h).
  Status tp_reduce_input_grad(S* partial, Tensor& local, const char* name);
  // In place: x (count) = sum over the TP group (nothing with t = 1).
  Status tp_sum(S* x, int64_t count) {
    if (t_ == 1) return Status::ok();
    return c_.comm->all_reduce_sum(x, count, c_.storage, Group::tp);
  }
  // dx (n, in) = dy W (+ LoRA); weight gradients accumulate. x may be nullptr when the
  // base weight is frozen and the projection has no adapter.
  // LoRA under TP: column-parallel, dz = dy B over this rank's rows of B is partial and is
  // summed over TP (n_ * r; Megatron's ColumnParallelLinear for B all-reduces its input
  // gradient), so dA = dz^T x is whole and equal on every rank; the adapter's part of dx is
  // then whole too and is added by TP rank 0 only, because the caller sums dx over TP.
  // Row-parallel: dy is whole (gathered under SP) and z was summed in forward, so dB and dz
  // are equal on every rank and dA, dx are this rank's input columns: no communication.
  // rows, row0: an MoE expert's block, as in lin_fwd.
  Status lin_bwd(Layer& L, Linear& li, const S* dy, const S* x, S* dx, int64_t rows = 0, int64_t row0 = 0);

  Status norm_fwd(Norm& nm, const S* x, S* y) {
    if (gpt_) return ops_.template layernorm_forward<S>(x, d(nm.w), d(nm.b), y, ns_, h_, c_.options.norm_eps);
    return ops_.template rmsnorm_forward<S>(x, d(nm.w), y, ns_, h_, c_.options.norm_eps);
  }
  // Attention sinks: the layer's logits (this rank's heads) read into L.sink_logits before a
  // forward (through the backend's download: a copy on the CPU, a device read on a GPU),
  // which the attention ops take as AttentionDims::sinks; after the backward, their gradient
  // over this rank's query rows `dm` added into L.gsinks by the backend
  // (attention_sink_grad: cpu::attention_sink_backward, or its CUDA twin).
  Status load_sinks(Layer& L) {
    const int64_t n = L.sinks.numel();
    std::vector<S> w(static_cast<size_t>(n));
    LL_TRY(ops_.download(w.data(), d(L.sinks), n * static_cast<int64_t>(sizeof(S))));
    L.sink_logits.resize(static_cast<size_t>(n));
    for (size_t h = 0; h < L.sink_logits.size(); ++h) L.sink_logits[h] = to_double(w[h]);
    return Status::ok();
  }
  Status sinks_bwd(Layer& L, const cpu::AttentionDims& dm, const S* dout) {
    if (!L.sv.proj_input.defined()) return Status::runtime("executor: attention sinks' gradient needs the attention output");
    const bool flash = c_.plan.flash_attention;
    return ops_.template attention_sink_grad<S, G>(d(L.sv.proj_input), dout, flash ? L.sv.lse.template data<A>() : nullptr,
                                                   flash ? nullptr : d(L.sv.probs), dm, L.gsinks.template data<G>());
  }
  // Post-norms (Gemma 2/3: x + norm(branch)): branch (ns_, h) is kept as `keep` (the
  // recipe's `name`) and normalised in place. Backward: dy the residual's gradient ->
  // dbranch (a workspace of `name`) the branch output's, and dy points at it.
  Status post_norm_fwd(Layer& L, Norm& nm, Tensor& keep, const char* name, S* branch, Mode mode) {
    LL_TRY(lmake(L, keep, name, ns_ * h_, c_.storage, mode));
    LL_TRY(ops_.copy(d(keep), branch, ns_ * h_ * static_cast<int64_t>(sizeof(S))));
    return norm_fwd(nm, d(keep), branch);
  }
  Status post_norm_bwd(Norm& nm, Tensor& kept, const S* dout, Tensor& dbranch, const char* name, const S*& dy) {
    LL_TRY(ws(dbranch, ns_ * h_, name));
    LL_TRY(norm_bwd(nm, d(kept), dout, d(dbranch), false));
    dy = d(dbranch);
    return Status::ok();
  }

  // QK-norm: RMSNorm over each of `heads` heads of n_ rows (width head_dim), in place of
  // nothing the planner splits: the weight is replicated, its gradient summed over TP (each
  // rank normalises its own heads) into nm.gw.
  Status head_norm_fwd(Norm& nm, const S* x, S* y, int heads) {
    const int64_t hd = c_.spec.head_width();
    return ops_.template rmsnorm_forward<S>(x, d(nm.w), y, n_ * heads, hd, c_.options.norm_eps);
  }
  Status head_norm_bwd(Norm& nm, const S* x, const S* dy, S* dx, int heads) {
    return rmsnorm_bwd_tp(nm, x, dy, dx, n_ * heads, c_.spec.head_width(), t_ > 1);
  }
  // An RMSNorm of `width` over `rows` rows whose weight is replicated under TP; partial: this
  // rank's rows are its own (its heads, its sequence shard), so its weight gradient is
  // computed into a zeroed buffer, summed over TP and added.
  Status rmsnorm_bwd_tp(Norm& nm, const S* x, const S* dy, S* dx, int64_t rows, int64_t width, bool partial);

  // ---------------------------------------------------------------- latent attention
  //
  // Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, sec. 2.1; transformers
  // DeepseekV3Attention; Megatron-Core MLASelfAttention), as the recipe keeps it:
  //   c_Q = RMSNorm(x W_qa^T)                  "mla.q_latent" (its input), "mla.q_latent_norm"
  //   q   = c_Q W_qb^T (heads x (nope + rope)) "attn.q", rotary on each head's last rope columns
  //   [c_KV | k_R] = x W_kva^T                  "mla.kv_latent" = c_KV; k_R the rotary key
  //   c'_KV = RMSNorm(c_KV)                     "mla.kv_latent_norm"
  //   [k_C | v] = c'_KV W_kvb^T (heads x (nope + v_head_dim))
  //   k   = [k_C | rope(k_R)] per head          "attn.k" (k_R shared by every head), "attn.v"
  // x is ln1's output on this rank's tokens (ns_ rows). The down projections and the latent
  // norms are replicated under TP and run on the rank's own tokens (under SP its sequence
  // shard, whose weight gradients are partial and summed over TP; without SP every rank
  // computes the same); the up projections are column-parallel over the gathered latents.
  // Without query compression (q_lora_rank 0) q = x W_q^T, column-parallel over the gathered x.
  // Selective recompute keeps the latents and re-makes q, k and v (mla_up) in backward
  // (Megatron-Core's recompute_modules "mla_up_proj"; SavedTensor::latent_derived).

  // The other blocks' q, k, v from ln1's output (QK-norm, then rotary on the Llama family),
  // kept as the recipe says.
  Status qkv_fwd(Layer& L, Mode mode);
  // Latent attention's widths on this rank: its heads, the query and key/value latents, the
  // rotary and content parts of a query/key head, a value head, and a whole query/key head.
  struct MlaWidths {
    int64_t heads, q_latent, kv_latent, rope, nope, value, qk;
  };
  MlaWidths mla_widths() const {
    const MlaSpec& a = c_.spec.mla;
    return {c_.spec.heads / t_, a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim, a.qk_head_dim()};
  }
  // The down half: the latents (kept as the recipe says), then mla_up.
  Status mla_fwd(Layer& L, Mode mode);
  // q, k, v into L.sv from the kept latents; kpe: the rotary key (ns_, rope) before its
  // rotation, or nullptr to project it again from x (recompute).
  Status mla_up(Layer& L, S* kpe, Mode mode);
  // dq, dk, dv (n_ rows, this rank's heads; each freed once read, so that none outlives the
  // attention kernel's moment) -> the gradient of x: dx_local (ns_, h) through the down
  // projections, whole on this rank's tokens; with uncompressed queries also dx_partial
  // (n_, h), the q projection's TP-partial part (as q/k/v's).
  Status mla_bwd(Layer& L, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dx_local, S* dx_partial);
  // The rotary embedding on columns [off, off + r) of every one of `heads` heads of width
  // `width` in x (n_ rows), forward or backward.
  Status rope_columns(S* x, int64_t heads, int64_t width, int64_t off, int64_t r, bool forward);
  // (n_, w) from this rank's (ns_, w) rows under SP (a communication buffer), else nothing.
  Status gather_rows(Tensor& full, const S* local, int64_t w, const char* name) {
    LL_TRY(make(a_, full, n_ * w, c_.storage, Category::communication, name));
    return c_.comm->all_gather(local, d(full), ns_ * w, c_.storage, Group::tp);
  }
  // In place over TP: x (n_, w) partial sums -> whole on every rank, or under SP this
  // rank's (ns_, w) rows of the sum into `local` (x itself otherwise).
  Status reduce_rows(S* x, Tensor& local, int64_t w, const char* name, const S*& out) {
    if (!sp_) {
      LL_TRY(tp_sum(x, n_ * w));
      out = x;
      return Status::ok();
    }
    LL_TRY(ws(local, ns_ * w, name));
    out = d(local);
    return c_.comm->reduce_scatter_sum(x, d(local), ns_ * w, c_.storage, Group::tp);
  }
  // A latent RMSNorm of `width` over this rank's ns_ tokens; its weight gradient summed over
  // TP under SP (as norm_bwd's).
  Status latent_norm_bwd(Norm& nm, const S* x, const S* dy, S* dx, int64_t width) {
    return rmsnorm_bwd_tp(nm, x, dy, dx, ns_, width, sp_);
  }
  // A replicated down projection over this rank's ns_ tokens: lin_bwd, with its weight
  // gradient summed over TP under SP.
  Status replicated_lin_bwd(Layer& L, Linear& li, const S* dy, const S* x, S* dx);
  // Over this rank's ns_ tokens. With SP the weight gradients of those tokens are partial:
  // they are computed into zeroed buffers, summed over TP and added (Megatron's all-reduce
  // of sequence-parallel parameters' gradients).
  Status norm_bwd(Norm& nm, const S* x, const S* dy, S* dx, bool accumulate);

  // Layer L's attention over one rank's whole sequences (its window: ModelSpec::attention_window).
  cpu::AttentionDims dims(const Layer& L) const;

  // The attention forward the plan selects, for the queries `q` of `dm` (all of the
  // sequence, or a CP rank's) against keys and values k, v with key doc ids `doc`: output o,
  // and into L.sv what the backward reads -- lse (flash), or probs and with dropout the
  // mask and dropped probabilities -- kept or not as `mode` and the recipe say.
  Status attn_fwd_kernel(Layer& L, const S* q, const S* k, const S* v, const int32_t* doc, const cpu::AttentionDims& dm, S* o, Mode mode, uint64_t seed);
  // Selective recompute without flash: L's scores (probabilities, and the dropout tensors)
  // from its saved q, k, v again, as workspace; the re-made output is dropped.
  Status recompute_scores(Layer& L, uint64_t seed) {
    Tensor o;
    LL_TRY(ws(o, n_ * ow_, "attn.recompute_out"));
    return attn_fwd_kernel(L, d(L.sv.q), d(L.sv.k), d(L.sv.v), staged_.doc, dims(L), d(o), Mode::recompute, seed);
  }

  // The attention forward's tensors the backward reads; lse is used only with flash attention,
  // probs only without it, mask and dropped only with attention dropout.
  struct AttnSaved {
    Tensor &q, &k, &v;
    const int32_t* doc;
    Tensor &o, &lse, &probs, &mask, &dropped;
  };
  // The attention backward the plan selects (flash, dropout, materialized), with its workspace.
  Status attn_bwd_kernel(const AttnSaved& t, const S* dout, S* dq, S* dk, S* dv, const cpu::AttentionDims& dm);

  // ---------------------------------------------------------------- context parallel
  //
  // Context parallel as an all-gather of keys and values (Llama 3's CP; the planner's
  // CpExchange::all_gather). The sequence is cut into 2cp chunks and rank cr_ keeps chunks
  // cr_ and 2cp-1-cr_ of every sequence (its sl_ rows, cp_position), so that causal
  // attention costs every CP rank the same. Forward gathers k and v whole and this rank's
  // queries attend over them (AttentionDims q_rows / q_offset / q_split): scores, lse and
  // output are this rank's rows only. Backward gathers k and v again; this rank's queries'
  // contributions to the whole-sequence dk, dv are summed over the CP group by a
  // reduce-scatter that hands each rank its own rows.

  // The sequence position of CP rank `rank`'s row t of a sequence (0 <= t < sl_).
  int64_t cp_position(int64_t t, int rank) const {
    const int64_t c = sl_ / 2;
    return t < c ? rank * c + t : (2 * cp_ - 1 - rank) * c + (t - c);
  }
  int64_t cp_position(int64_t t) const { return cp_position(t, cr_); }
  cpu::AttentionDims cp_dims(const Layer& L) const;
  // Copies between rank-major (cp, b, sl_, w) blocks -- a CP collective's layout, block q
  // holding rank q's rows -- and whole sequences (b, S_, w); to_whole picks the direction.
  Status cp_reorder(S* rank_major, S* whole, int64_t w, bool to_whole);
  // (b, sl_, w) rows of every CP rank -> whole sequences (b, S_, w), in communication buffers.
  Status cp_gather(const S* local, Tensor& full, int64_t w, const char* name);
  // Whole-sequence partial sums (b, S_, w) of every CP rank -> this rank's rows of the sum.
  Status cp_reduce_scatter(S* whole, S* local, int64_t w, const char* name) {
    Tensor raw;
    LL_TRY(make(a_, raw, cp_ * n_ * w, c_.storage, Category::communication, name));
    LL_TRY(cp_reorder(d(raw), whole, w, false));
    return c_.comm->reduce_scatter_sum(d(raw), local, n_ * w, c_.storage, Group::cp);
  }
  struct CpKeys {
    Tensor k, v;  // (b, S_, kvw): every rank's keys and values
  };
  Status cp_gather_keys(Layer& L, CpKeys& kv) {
    LL_TRY(cp_gather(d(L.sv.k), kv.k, kvw_, "attn.k.cp_gathered"));
    return cp_gather(d(L.sv.v), kv.v, kvw_, "attn.v.cp_gathered");
  }
  // Forward: this rank's queries' output into sv.proj_input, their lse / probs (and dropout
  // tensors; the masks drawn as a single-rank run draws those rows) into sv.
  Status cp_attn_fwd(Layer& L, Mode mode, uint64_t seed) {
    if (c_.plan.cp_exchange == CpExchange::ring) return ring_attn_fwd(L, mode);
    CpKeys kv;
    LL_TRY(cp_gather_keys(L, kv));
    return attn_fwd_kernel(L, d(L.sv.q), d(kv.k), d(kv.v), staged_.whole_doc, cp_dims(L), d(L.sv.proj_input), mode, seed);
  }
  // Backward: dout (n_, qw) this rank's output gradient -> dq (n_, qw), dk, dv (n_, kvw) of
  // this rank's tokens. Under selective recompute without flash the scores of this rank's
  // queries are recomputed over the gathered keys first.
  Status cp_attn_bwd(Layer& L, const S* dout, S* dq, S* dk, S* dv, uint64_t seed);

  // Context parallel as a ring (CpExchange::ring; Megatron's and TransformerEngine's P2P
  // CP), over the same load-balanced layout. Forward: cp steps; at step i this rank holds
  // the keys and values of rank cr_ - i (its two chunks, AttentionDims k_rows / k_offset /
  // k_split) and passes them on to rank cr_ + 1 while its queries attend to them (flash);
  // the partial outputs are merged by their log-sum-exp. Only two ranks' k and v are ever
  // held: the current and the next. Backward: the same ring with the merged o and lse; the
  // dk, dv of each visiting rank's keys accumulate in a buffer that travels with them and,
  // after a last shift, reaches its owner complete. Flash only (plan_check).
  cpu::AttentionDims ring_dims(const Layer& L, int owner) const;
  // (k | v) of this rank's tokens into one buffer of 2 n_ kvw (the unit the ring passes).
  Status ring_pack(Tensor& kv, const S* k, const S* v, const char* name) {
    const int64_t w = n_ * kvw_;
    LL_TRY(make(a_, kv, 2 * w, c_.storage, Category::communication, name));
    LL_TRY(ops_.copy(d(kv), k, w * static_cast<int64_t>(sizeof(S))));
    return ops_.copy(d(kv) + w, v, w * static_cast<int64_t>(sizeof(S)));
  }
  Status ring_attn_fwd(Layer& L, Mode mode);
  Status ring_attn_bwd(Layer& L, const S* dout, S* dq, S* dk, S* dv);

  // ---------------------------------------------------------------- mixture of experts
  //
  // The MoE MLP, for the ns_ tokens x of this rank (the ln2 output,
  // "mlp.input"; under TP with SP its sequence shard: router and routed experts are whole
  // on every TP rank, see tp_partial_grads):
  //   router   logits = x Wr^T (E, no bias) in the storage dtype; probs = softmax in fp32
  //            ("moe.router_probs", kept: its backward and the top-k are re-derived from it)
  //   top-k    each token's k most probable experts (ties to the lower index), gates
  //            renormalised over them, g_j = p_j / sum_{i<k} p_i -- Mixtral's convention
  //            (softmax over the top-k logits is the same numbers)
  //   capacity C = ceil(cf * ns_ * k / E) rows per expert and routing rank (GShard); rows
  //            are given out to first choices of all tokens before second choices, in
  //            token order; a choice past C is dropped and contributes zero
  //   dispatch the routed token rows into a zero-padded (E, C, h) buffer, laid out by the
  //            expert's owner (EP rank j owns experts [j*El, (j+1)*El)); with ep > 1 an
  //            all-to-all over Group::ep delivers (ep sources, El, C, h) to each owner:
  //            "moe.expert_input", block b = src*El + el holds expert el's rows from src
  //   experts  the model family's MLP per block (GPT: fc1, GELU, fc2 with biases; Llama:
  //            SwiGLU gate/up/down), over the padding rows too (their gradient is zero)
  //   combine  the outputs go back the same way ("moe.expert_output", (E, C, h) on the
  //            routing rank, kept: the gates' gradient is dy . output), y_t = sum_j g_j o_j
  //   shared   shared experts: one dense MLP of width ffn_hidden * shared_experts on every
  //            token, added to y; TP-split (column, row) like the dense MLP, over the
  //            all-gathered sequence under SP
  // The all-to-all send buffers are Category::communication; what arrives is the tensor it
  // becomes (the recipe's kept tensors, or workspace gradients). ep = 1: no exchange; the
  // dispatch buffer is the expert input and the experts write the output in place.
  // Backends: the routing decisions (top-k, gates, capacity slots; the router's backward)
  // are host arithmetic on the probabilities -- a GPU copies them to the host and the
  // routes' rows and gates back (host_view, backend_view) -- and the moves over token rows
  // (softmax, dispatch, combine and its backward) are backend ops (cpu/moe.h).

  static S to_storage(A x) {
    if constexpr (std::is_same_v<S, bf16_t>) return float_to_bf16(x);
    else if constexpr (std::is_same_v<S, f16_t>) return float_to_f16(x);
    else return x;
  }
  // n values of T at p (backend memory) readable on the host: p itself on the CPU, else a
  // copy in `host` (the copy waits for the work before it).
  template <class T>

  Status host_view(const T* p, int64_t n, std::vector<T>& host, const T*& view);
  // host's values where the backend's ops read them: host itself on the CPU (outside the
  // accounting, as the routing's vectors are), else a device workspace tensor `dev`.
  template <class T>

  Status backend_view(const std::vector<T>& host, Tensor& dev, DType dt, const char* name, const T*& view);

  // One micro-batch's routing, re-derived from the kept probabilities in backward (the same
  // numbers give the same choices): choice j of token t is index t*k + j.
  struct Routing {
    std::vector<int32_t> expert, slot;  // slot: row in the expert's C, -1 = dropped
    std::vector<A> gate;
    std::vector<int32_t> row;  // moe_row of the route, -1 = dropped (the ops' rows)
  };
  Routing route(const A* probs, int64_t T) const;
  // A micro-batch's routing from the kept router probabilities (forward and backward alike),
  // with the routes' rows and gates where the backend's ops read them.
  struct RouteViews {
    std::vector<A> probs_host;
    const A* probs = nullptr;  // (T, E), readable on the host
    Routing r;
    Tensor rows_dev, gates_dev;     // the GPU's copies
    const int32_t* rows = nullptr;  // r.row for the ops
    const A* gates = nullptr;       // r.gate for the ops
  };
  Status route_views(Layer& L, RouteViews& v) {
    LL_TRY(host_view(L.sv.router_probs.template data<A>(), ns_ * E_, v.probs_host, v.probs));
    v.r = route(v.probs, ns_);
    LL_TRY(backend_view(v.r.row, v.rows_dev, DType::i32, "moe.route_rows", v.rows));
    return backend_view(v.r.gate, v.gates_dev, kA, "moe.route_gates", v.gates);
  }
  // Row of (expert e, slot) in a routing rank's (E, C, h) buffer.
  int64_t moe_row(const Routing& r, size_t at) const { return static_cast<int64_t>(r.expert[at]) * cap_ + r.slot[at]; }
  // y (ns_, h) = the MoE MLP of sv.mlp_input (routed + shared experts).
  Status moe_fwd(Layer& L, S* y, Mode mode);

  // MoE under TP (with SP): every TP rank routes its own ns_ tokens through a router and
  // routed experts that are whole on each TP rank (experts are split over EP only), so their
  // weight gradients of one micro-batch are partial sums. They are computed into zeroed
  // buffers swapped in for the gradients, summed over TP and added -- as norm_bwd does for
  // sequence-parallel norms -- so the gradients stay equal on every TP rank. t = 1: none.
  std::vector<Tensor*> tp_partial_grads(Layer& L);
  // Moves each gradient of gs into whole and puts a zeroed tensor of its shape in its place.
  Status swap_in_partials(const std::vector<Tensor*>& gs, std::vector<Tensor>& whole);
  // Sums each partial over TP, adds it to its gradient and puts the gradient back.
  Status sum_partials(const std::vector<Tensor*>& gs, std::vector<Tensor>& whole);

  // dy (ns_, h): the MoE output's gradient -> dx (ns_, h) = its input's (overwritten);
  // weight gradients accumulate. Reverses moe_fwd, with the same exchanges in reverse.
  Status moe_bwd(Layer& L, const S* dy, S* dx);

  // ---------------------------------------------------------------- layer forward

  // x (n, h) -> out (n, h) in `out_cat`; the recipe's tensors land in L.sv.
  Status layer_fwd(Layer& L, const S* x, Tensor& out, Category out_cat, Mode mode, uint64_t seed);

  // Frees what the forward made but backward does not keep (everything in workspace).
  static void drop_transients(Saved& sv);

  // ---------------------------------------------------------------- layer backward

  // dx (n, h): the gradient of the layer output in, of its input out (in place).
  Status layer_bwd(Layer& L, const S* x, S* dx, uint64_t seed);

  // ---------------------------------------------------------------- vocabulary parallel

  // out (ns_, h) = token (+ GPT position) embeddings. With TP each rank looks up the tokens
  // in its vocabulary range [v0_, v0_ + Vl_) (zeros elsewhere; TP rank 0 adds the positions)
  // and the partial rows are summed over TP: all-reduce, or reduce-scatter to this rank's
  // sequence slice with SP.
  Status embed_fwd(const int32_t* tokens, S* out);
  Status embed_bwd(const int32_t* tokens, const S* dout) {
    if (t_ == 1) return ops_.template embedding_backward<S, G>(tokens, dout, g(gwte_), n_, h_);
    return ops_.template embedding_backward_shard<S, G>(tokens, dout, g(gwte_), n_, h_, v0_, Vl_);
  }

  // Vocabulary-parallel cross-entropy (Megatron; cpu/cross_entropy.h's three passes): z
  // (n, Vl_) this rank's logits in A. The row maxima (all-gathered), the sums of
  // exponentials and the target logits (all-reduced) give every TP rank the full loss; with
  // train, z becomes this rank's dlogits in place (loss_scale / denom * (softmax - onehot),
  // 0 on ignored rows and padded columns). denom 0: counted rows.
  Result<double> vocab_parallel_ce(A* z, const int32_t* targets, double denom, bool train, double loss_scale);

  // ---------------------------------------------------------------- the step

  // Unit numbers (units_ order): the embedding on the first stage, the layers, the head on the last.
  int emb_unit() const { return first_ ? 0 : -1; }
  int layer_unit(int i) const { return (first_ ? 1 : 0) + i; }
  int head_unit() const { return last_ ? static_cast<int>(units_.size()) - 1 : -1; }
  Status use_weights(int u, int next) { return hooks_ ? hooks_->use_weights(u, next) : Status::ok(); }
  void release_weights(int u) {
    if (hooks_) hooks_->release_weights(u);
  }
  Status begin_grads(int u) { return hooks_ ? hooks_->begin_grads(u) : Status::ok(); }
  Status end_grads(int u) { return hooks_ ? hooks_->end_grads(u) : Status::ok(); }

  void set_where(Phase ph, int layer, const char* part) {
    a_.set_phase(ph);
    where_ = {ph, layer, part};
  }

  Result<double> run(const Batch& b, double loss_scale, double denom, uint64_t seed, bool train);

  void release_all() {
    for (Layer& L : layers_) L.sv.clear();
    for (Tensor& t : inputs_) t.reset();
    for (Tensor* t : {&head_in_, &logits_, &sm_, &emb_mask_}) t->reset();
    for (MtpDepth& md : mtp_) {
      md.block.sv.clear();
      for (Tensor* t : {&md.embed_out, &md.eh_in, &md.block_in, &md.fnorm_in, &md.head_in, &md.logits, &md.sm}) t->reset();
    }
  }

  // Split backward: one linear's weight-gradient GEMM, deferred from B to W. dy: its output
  // gradient (in wgrad_buf_, or the logits kept for the head); x: its input (a saved tensor
  // of the slot, alive until W).
  struct DeferredGrad {
    const S* dy = nullptr;
    const S* x = nullptr;
    G* dw = nullptr;
    G* db = nullptr;
    int64_t rows = 0, in = 0, out = 0;
  };
  // dx = dy w now; dw += dy^T x and db += sum dy now, or under split_ deferred to W (dy
  // copied into wgrad_buf_ unless dy_kept: it stays alive until W as it is).
  Status lin_grads(const S* dy, const S* x, const S* w, S* dx, G* dw, G* db, int64_t n, int64_t in, int64_t out, bool dy_kept = false);

  // Pipeline slots: the state of one in-flight micro-batch (every layer's saved tensors,
  // the stage's layer inputs, the head's input and logits, positions) is swapped in and
  // out of the members the forward and backward work on.
  struct Slot {
    std::vector<Saved> sv;
    std::vector<Tensor> inputs;
    Tensor head_in, logits, sm, emb_mask;
    std::vector<int32_t> positions, cp_tok, cp_tgt, cp_doc;
    const int32_t* doc = nullptr;
    StagedBatch staged;
    Tensor wgrad_buf;
    std::vector<DeferredGrad> wgrad_ops;
    bool awaiting_w = false;
  };
  void swap_slot(int k);

  Result<double> stage_forward(int slot, const Batch& b, const void* input, void* output, double loss_scale, double denom, uint64_t seed) override;
  Status stage_backward(int slot, const Batch&, const void* dout, void* dinput) override;
  Status stage_backward_input(int slot, const Batch&, const void* dout, void* dinput) override;
  Status stage_backward_weight(int slot) override;
  // Why this stage cannot split its backward (empty: it can).
  std::string split_backward_unsupported() const;

  // Forward of one micro-batch through this stage. input: the previous stage's output
  // (ns_, h) (nullptr on the first stage: the tokens are embedded); output (ns_, h): this
  // stage's output, filled on every stage but the last. Returns the loss on the last stage
  // (0 elsewhere); with train, what backward needs stays in the members.
  Result<double> fwd(const Batch& b, const S* input, S* output, double loss_scale, double denom, uint64_t seed, bool train);

  // Backward of the micro-batch fwd kept. dout: the gradient of this stage's output
  // (nullptr on the last stage: the loss); dinput: the gradient of its input, filled on
  // every stage but the first.
  Status bwd(const S* dout, S* dinput);
  // W of a split backward: the deferred GEMMs, then everything of the slot is freed.
  Status weight_grads();

  TrackingAllocator& a_;
  ModelConfig c_;
  bool gpt_ = true, drop_ = false, embed_trainable_ = true, head_trainable_ = true;
  int64_t h_ = 0, n_ = 0, V_ = 0, f_ = 0;  // f_: this rank's MLP width (ffn_hidden / t)
  int t_ = 1, tr_ = 0;                      // TP size and this rank's TP index
  bool sp_ = false;                          // sequence parallel (t_ > 1 and plan.sp)
  // MoE (see moe_fwd): E_ routed experts, top-k_, expert width fe_; ep_ ranks of Group::ep,
  // this one (er_) holding experts e0_ .. e0_ + El_ - 1; cap_ rows per expert and routing
  // rank, rows_ = E_ * cap_; fs_: this rank's shared-expert width (0: none). moe_: the
  // model has experts; moe_layer(L): layer L's MLP is the routed one (ModelSpec::moe_layer:
  // DeepSeek's first dense layers, Qwen-MoE's every n-th), the others the dense MLP of
  // ffn_hidden.
  bool moe_ = false;
  bool moe_layer(const Layer& L) const { return moe_ && c_.spec.moe_layer(L.index); }
  int E_ = 0, k_ = 0, ep_ = 1, er_ = 0;
  int64_t El_ = 0, e0_ = 0, fe_ = 0, cap_ = 0, rows_ = 0, fs_ = 0;
  int64_t ns_ = 0;                           // tokens in this rank's sequence slice: n_ / t_ with SP, else n_
  int64_t qw_ = 0, kvw_ = 0, Vl_ = 0, v0_ = 0;  // local q / kv widths, vocab rows [v0_, v0_ + Vl_)
  int64_t ow_ = 0;  // local width of the attention output (the o projection's input): qw_, or heads x v_head_dim under MLA
  int64_t Vr_ = 0;                              // of which real tokens (the rest pad the vocabulary to a multiple of tp)
  double p_ = 0, lora_scale_ = 0;
  Tensor wte_, gwte_, wpe_, gwpe_, whead_, gwhead_;
  Norm fnorm_;
  // Multi-token prediction (ModelSpec::mtp_layers; DeepSeek-V3, arXiv 2412.19437, sec. 2.2),
  // on the last stage after the main loss. Depth k (from 0) predicts the token k + 2 ahead:
  //   e = Emb(t_{i+k+1})                          "mtp.embed_output" (enorm's input)
  //   u = [RMSNorm_h(h^{k-1}_i) ; RMSNorm_e(e)]    "mtp.eh_input" (2h; h^{-1}: the main
  //                                                 model's final-norm input)
  //   h^k = Block(u W_eh^T)                        the block's own tensors; its output
  //                                                 "mtp.final_norm.input"
  //   logits = RMSNorm_f(h^k) W_head^T             "mtp.head.input"; the shared head and
  //                                                 embedding, each depth's logits and fp32
  //                                                 softmax kept until the backward
  // and the objective is the main loss + mtp_loss_scale x the depths' mean loss (eq. 25).
  struct MtpDepth {
    Norm hnorm, enorm, fnorm;
    Linear eh;
    Layer block;
    Tensor embed_out, eh_in, block_in, fnorm_in, head_in, logits, sm;
    std::vector<int32_t> tokens, targets;  // t_{i+k+1} (0 past the end) and t_{i+k+2} (-1 past it)
    // Their device copies on a GPU (Ops::kHostMemory false); undefined on the CPU, whose
    // ops read the vectors.
    Tensor tokens_dev, targets_dev;
    const int32_t* op_tokens() const { return tokens_dev.defined() ? tokens_dev.template data<int32_t>() : tokens.data(); }
    const int32_t* op_targets() const { return targets_dev.defined() ? targets_dev.template data<int32_t>() : targets.data(); }
  };
  std::vector<MtpDepth> mtp_;
  // Depth k's forward from the previous hidden state (k = 0: the main final-norm input), its
  // loss added to *loss; backward in reverse depth order: dprev += the gradient of the
  // previous hidden state (dprev: ns_ x h).
  // dout: the gradient of depth k's output hidden state from depth k + 1 (nullptr for the last).
  Status mtp_fwd(int k, const S* prev, Mode mode, double* loss);
  Status mtp_bwd(int k, const S* prev, S* dprev, const S* dout);
  // Depth k's loss backward: its fp32 softmax into the logits' gradient (compute dtype), as
  // the main loss's, before the main head's backward (the planner's head moment holds every
  // depth's logits so).
  Status mtp_loss_bwd(int k);
  std::vector<Layer> layers_;
  std::vector<Tensor> inputs_;  // inputs_[i]: local layer i's ln1.input; inputs_[L]: the stage output / final_norm.input
  Tensor head_in_, logits_, sm_, emb_mask_;  // the micro-batch in flight (see Slot)
  std::vector<Slot> slots_;
  // Split backward (see stage_backward_input): B is running; the slot's deferred GEMMs and
  // their output gradients (wgrad_at_ elements of wgrad_buf_ used); a B done, W not yet.
  bool split_ = false;
  Tensor wgrad_buf_;
  std::vector<DeferredGrad> wgrad_ops_;
  int64_t wgrad_at_ = 0;
  bool awaiting_w_ = false;
  uint64_t seed_ = 0;
  double loss_scale_ = 1, denom_ = 0;
  int stage_ = 0, first_layer_ = 0;
  bool first_ = true, last_ = true;  // this stage holds the embedding / the final norm, head and loss
  std::vector<int32_t> positions_;
  const int32_t* doc_ = nullptr;   // host: positions restart at document starts (whole sequences)
  int cp_ = 1, cr_ = 0;            // CP size and this rank's CP index
  int64_t S_ = 0, sl_ = 0;         // seq_len, and this rank's tokens of each sequence (S_ / cp_)
  std::vector<int32_t> cp_pos_, cp_tok_, cp_tgt_, cp_doc_;  // CP: whole-sequence positions; this rank's slice
  StagedBatch staged_;   // the micro-batch where the ops read it (host or device)
  Ops ops_;
  std::vector<ParamRef> params_;
  std::vector<std::vector<int>> units_;  // see ParamHooks
  ParamHooks* hooks_ = nullptr;
  Where where_;
};


// Builds and initialises a ModelImpl over `ops`.
template <class S, class G, class Ops>
Result<std::unique_ptr<Model>> build_model_with(TrackingAllocator& a, const ModelConfig& c, Ops ops) {
  auto m = std::make_unique<ModelImpl<S, G, Ops>>(a, c, std::move(ops));
  if (Status s = m->init(); !s) return s;
  return std::unique_ptr<Model>(std::move(m));
}

// The checks every backend shares (model.h build_model's bad_input cases).
Status check_model_config(const ModelConfig& c);

// A pipeline stage's model from a backend's builder of one model chunk: the chunk itself
// (plan.vpp 1), or the stage's vpp chunks (config.chunk 0 .. vpp-1) as one Model for
// interleaved 1F1B (model.h chunks()). Errors: the builder's.
Result<std::unique_ptr<Model>> build_stage(const ModelConfig& c,
                                           const std::function<Result<std::unique_ptr<Model>>(const ModelConfig&)>& chunk);

}  // namespace llmplan::exec::detail
