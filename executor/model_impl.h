// ModelImpl: the GPT / Llama model of model.h, written once over a backend's op layer.
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
// and fill (host doubles into a tensor), zero, zeros, copy (within the backend's memory),
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
    Tensor lora_z[7];
    void clear() { *this = Saved{}; }
  };
  struct Layer {
    int index = 0;
    LayerContext ctx;
    LayerRecompute policy = LayerRecompute::none;
    SavedTensorList recipe;
    Norm ln1, ln2;
    Linear q, k, v, o, gate, up, down;
    // MoE instead of gate/up/down: the router (E, h), this rank's routed experts
    // (e0_ .. e0_ + El_ - 1, each an MLP of width expert_ffn_hidden) and the shared experts
    // (one MLP of width ffn_hidden * shared_experts).
    struct Moe {
      Tensor router, grouter;
      std::vector<Linear> gate, up, down;
      Linear sgate, sup, sdown;
    } moe;
    Saved sv;
  };

 public:
  ModelImpl(TrackingAllocator& a, ModelConfig c, Ops ops) : a_(a), c_(std::move(c)), ops_(std::move(ops)) {}

  Status init() {
    const ModelSpec& m = c_.spec;
    gpt_ = m.family == Family::gpt;
    h_ = m.hidden;
    cp_ = c_.plan.cp;
    cr_ = cp_ > 1 ? c_.comm->rank(Group::cp) : 0;
    S_ = c_.job.seq_len;
    sl_ = S_ / cp_;
    n_ = static_cast<int64_t>(c_.plan.micro_batch) * sl_;
    V_ = m.vocab;
    f_ = m.ffn_hidden;
    drop_ = m.dropout;
    p_ = c_.options.dropout_p;
    t_ = c_.plan.tp;
    tr_ = t_ > 1 ? c_.comm->rank(Group::tp) : 0;
    qw_ = m.q_width() / t_;
    kvw_ = m.kv_width() / t_;
    f_ = m.ffn_hidden / t_;
    // Under TP the vocabulary is padded to a multiple of tp (as Megatron pads it): each rank
    // holds Vl_ rows, of which the first Vr_ are real tokens; the padded rows' logits are
    // masked out of the loss, so the model computes what the unpadded one does.
    Vl_ = (V_ + t_ - 1) / t_;
    v0_ = tr_ * Vl_;
    Vr_ = std::clamp<int64_t>(V_ - v0_, 0, Vl_);
    sp_ = t_ > 1 && c_.plan.sp;
    ns_ = sp_ ? n_ / t_ : n_;
    if (m.moe.enabled()) {
      moe_ = true;
      E_ = m.moe.experts;
      k_ = m.moe.experts_per_token;
      fe_ = m.moe.expert_ffn_hidden;
      ep_ = std::max(1, c_.plan.ep);
      er_ = ep_ > 1 ? c_.comm->rank(Group::ep) : 0;
      El_ = E_ / ep_;
      e0_ = er_ * El_;
      cap_ = static_cast<int64_t>(moe_expert_capacity(m, static_cast<double>(ns_)));
      rows_ = E_ * cap_;
      fs_ = m.ffn_hidden * m.moe.shared_experts / t_;
    }
    const bool lora = c_.job.mode == TrainMode::lora;
    const int frozen = c_.job.frozen_layer_count(m.layers);
    embed_trainable_ = !lora && frozen == 0;
    head_trainable_ = !lora;
    lora_scale_ = c_.job.lora.rank > 0 ? c_.job.lora.alpha / c_.job.lora.rank : 0;
    // Pipeline stage: its layers; the embedding on the first stage, final norm and head on
    // the last. A tied head on pp > 1 is a copy of the embedding on the last stage (same
    // initial values; its gradient is summed with the first stage's, Megatron).
    // Interleaved (vpp > 1): the same for virtual stage chunk*pp + stage of pp*vpp.
    stage_ = c_.virtual_stage();
    const int nv = c_.virtual_stages();
    first_ = stage_ == 0;
    last_ = stage_ == nv - 1;
    first_layer_ = first_layer_of_virtual_stage(m.layers, c_.plan, stage_);
    const int nl = virtual_stage_layers(m.layers, c_.plan, stage_);
    auto since = [&](size_t at) {  // the params made since `at` (one unit)
      std::vector<int> u;
      for (size_t i = at; i < params_.size(); ++i) u.push_back(static_cast<int>(i));
      return u;
    };
    const int wte_index = static_cast<int>(params_.size());
    if (first_ || (last_ && m.tied_embeddings))
      LL_TRY(param(wte_, gwte_, {0, Vl_ * t_, h_}, "embed.tokens", embed_trainable_, true, c_.options.init_std, 0, !first_));
    if (gpt_ && first_) LL_TRY(param(wpe_, gwpe_, {-1, m.max_positions, h_}, "embed.positions", embed_trainable_, true, c_.options.init_std));
    if (first_) units_.push_back(since(static_cast<size_t>(wte_index)));
    layers_.resize(static_cast<size_t>(nl));
    for (int i = 0; i < nl; ++i) {
      const size_t at = params_.size();
      LL_TRY(init_layer(layers_[static_cast<size_t>(i)], i));
      units_.push_back(since(at));
    }
    if (last_) {
      const size_t at = params_.size();
      LL_TRY(init_norm(fnorm_, "final_norm", head_trainable_));
      if (!m.tied_embeddings) LL_TRY(param(whead_, gwhead_, {0, Vl_ * t_, h_}, "head.weight", head_trainable_, true, c_.options.init_std));
      units_.push_back(since(at));
      if (m.tied_embeddings) units_.back().push_back(wte_index);
    }
    positions_.resize(static_cast<size_t>(n_));
    inputs_.resize(layers_.size() + 1);
    return Status::ok();
  }

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
  Status param(Tensor& w, Tensor& g, TpSplit split, const std::string& name, bool trainable, bool decay, double std,
               double constant = 0, bool shared_copy = false) {
    uint64_t key = 1469598103934665603ull;  // FNV-1a of the name
    for (char ch : name) key = (key ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
    key = cpu::splitmix64_at(c_.options.seed, key);
    const int64_t full = split.rows * split.cols;
    if (t_ == 1) split.dim = -1;
    const int64_t numel = split.dim < 0 ? full : full / t_;
    LL_TRY(make(a_, w, numel, c_.storage, Category::weights, name));
    const int64_t cl = split.dim == 1 ? split.cols / t_ : split.cols;
    auto global_index = [&](int64_t i) {  // local element -> element of the full tensor
      if (split.dim == 0) return tr_ * numel + i;
      if (split.dim == 1) return (i / cl) * split.cols + tr_ * cl + i % cl;
      return i;
    };
    auto unit = [&](int64_t k) {  // uniform in (0, 1]
      return (static_cast<double>(cpu::splitmix64_at(key, static_cast<uint64_t>(k)) >> 11) + 1.0) * 0x1.0p-53;
    };
    // Each value depends on its index only, so large tensors are drawn by several threads
    // (a 7B layer is 200M draws: minutes on one core).
    constexpr int64_t kChunk = 1 << 22;
    const int64_t threads = numel < (int64_t{1} << 18) ? 1 : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
    std::vector<double> v;
    for (int64_t at = 0; at < numel; at += kChunk) {
      v.assign(static_cast<size_t>(std::min(kChunk, numel - at)), constant);
      auto draw = [&](size_t lo, size_t hi) {
        for (size_t j = lo; j < hi; ++j) {
          const int64_t gi = global_index(at + static_cast<int64_t>(j));
          if (std > 0) v[j] = std * std::sqrt(-2.0 * std::log(unit(2 * gi))) * std::cos(6.283185307179586 * unit(2 * gi + 1));
          else if (c_.options.randomize_all) v[j] += unit(2 * gi) - 0.5;
        }
      };
      const size_t per = (v.size() + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
      std::vector<std::thread> pool;
      for (size_t lo = per; lo < v.size(); lo += per) pool.emplace_back(draw, lo, std::min(v.size(), lo + per));
      draw(0, std::min(v.size(), per));
      for (std::thread& t : pool) t.join();
      LL_TRY(ops_.fill(w, v, at));
    }
    if (trainable) {
      Result<Tensor> r = ops_.zeros(Shape{numel}, c_.grad, Category::gradients, name + ".grad");
      if (!r) return r.status();
      g = std::move(*r);
    }
    params_.push_back({name, &w, trainable ? &g : nullptr, decay, split, shared_copy});
    return Status::ok();
  }

  Status init_norm(Norm& nm, const std::string& name, bool trainable) {
    LL_TRY(param(nm.w, nm.gw, {-1, 1, h_}, name + ".weight", trainable, false, 0, 1.0));
    if (gpt_) LL_TRY(param(nm.b, nm.gb, {-1, 1, h_}, name + ".bias", trainable, false, 0, 0.0));
    return Status::ok();
  }

  // in, out: the full widths; column-parallel splits out, row-parallel splits in.
  // name: the parameter's prefix (default "layer<i>.<projection>").
  // adapters: false keeps a LoRA target's projection without them (MoE shared experts).
  Status init_linear(Layer& L, Linear& li, Projection p, Par par, int64_t in, int64_t out, const std::string& name = {},
                     bool adapters = true) {
    li.proj = p;
    li.par = t_ > 1 ? par : Par::none;
    li.in = par == Par::row ? in / t_ : in;
    li.out = par == Par::column ? out / t_ : out;
    const std::string base = name.empty() ? "layer" + std::to_string(L.index) + "." + kProjName[static_cast<int>(p)] : name;
    const bool train = L.ctx.base_trainable;
    LL_TRY(param(li.w, li.gw, {par == Par::column ? 0 : par == Par::row ? 1 : -1, out, in}, base + ".weight", train, true,
                 c_.options.init_std));
    if (gpt_) LL_TRY(param(li.b, li.gb, {par == Par::column ? 1 : -1, 1, out}, base + ".bias", train, false, 0, 0.0));
    if (adapters && (L.ctx.lora_targets & projection_bit(p))) {
      li.lora = true;
      const int64_t r = L.ctx.lora_rank;
      // Under TP (Megatron / PEFT LoraParallelLinear): a column-parallel projection keeps A
      // (r, in) whole and splits B (out, r) by rows like its weight; a row-parallel one splits
      // A by input columns like its weight and keeps B (out, r) whole. The whole ones are
      // replicated (dim -1): their gradients are equal on every TP rank (see lin_bwd).
      LL_TRY(param(li.la, li.gla, {par == Par::row ? 1 : -1, r, in}, base + ".lora_A", true, false,
                   1.0 / std::sqrt(static_cast<double>(in))));
      // B starts at zero (Hu et al. 2021), so the adapted model equals the base one.
      LL_TRY(param(li.lb, li.glb, {par == Par::column ? 0 : -1, out, r}, base + ".lora_B", true, false,
                   c_.options.randomize_all ? 0.02 : 0.0));
    }
    return Status::ok();
  }

  // i: the stage-local index; L.index is the global one.
  Status init_layer(Layer& L, int local) {
    const ModelSpec& m = c_.spec;
    const int i = first_layer_ + local;
    L.index = i;
    L.ctx = model_layer_context(c_, i);
    // The planner numbers a stage's layers across its chunks (full_k: per chunk).
    const int nl = static_cast<int>(layers_.size()), v = std::max(1, c_.plan.vpp);
    L.policy = layer_recompute(c_.plan, c_.chunk * nl + local, nl * v);
    L.recipe = saved_tensors_per_layer(m, L.ctx);
    const std::string pre = "layer" + std::to_string(i);
    LL_TRY(init_norm(L.ln1, pre + ".ln1", L.ctx.base_trainable));
    LL_TRY(init_linear(L, L.q, Projection::q, Par::column, h_, m.q_width()));
    LL_TRY(init_linear(L, L.k, Projection::k, Par::column, h_, m.kv_width()));
    LL_TRY(init_linear(L, L.v, Projection::v, Par::column, h_, m.kv_width()));
    LL_TRY(init_linear(L, L.o, Projection::o, Par::row, m.q_width(), h_));
    LL_TRY(init_norm(L.ln2, pre + ".ln2", L.ctx.base_trainable));
    if (moe_) return init_moe(L);
    if (!gpt_) LL_TRY(init_linear(L, L.gate, Projection::gate, Par::column, h_, m.ffn_hidden));
    LL_TRY(init_linear(L, L.up, Projection::up, Par::column, h_, m.ffn_hidden));
    LL_TRY(init_linear(L, L.down, Projection::down, Par::row, m.ffn_hidden, h_));
    return Status::ok();
  }

  // Router, this rank's experts (named by their global index, so every EP rank's expert e
  // is initialised as a single-rank model's), shared experts.
  Status init_moe(Layer& L) {
    const std::string pre = "layer" + std::to_string(L.index) + ".moe.";
    const bool train = L.ctx.base_trainable;
    auto& mo = L.moe;
    LL_TRY(param(mo.router, mo.grouter, {-1, E_, h_}, pre + "router.weight", train, true, c_.options.init_std));
    mo.gate.resize(static_cast<size_t>(El_));  // sized before param() keeps pointers into them
    mo.up.resize(static_cast<size_t>(El_));
    mo.down.resize(static_cast<size_t>(El_));
    for (int64_t el = 0; el < El_; ++el) {
      const size_t at = params_.size();
      const std::string ex = pre + "expert" + std::to_string(e0_ + el) + ".";
      const auto i = static_cast<size_t>(el);
      if (!gpt_) LL_TRY(init_linear(L, mo.gate[i], Projection::gate, Par::none, h_, fe_, ex + "gate"));
      LL_TRY(init_linear(L, mo.up[i], Projection::up, Par::none, h_, fe_, ex + "up"));
      LL_TRY(init_linear(L, mo.down[i], Projection::down, Par::none, fe_, h_, ex + "down"));
      for (size_t k = at; k < params_.size(); ++k) params_[k].expert = true;
    }
    if (fs_ > 0) {
      const int64_t fs = c_.spec.ffn_hidden * c_.spec.moe.shared_experts;
      // LoRA MLP targets adapt the routed experts only (the planner's count_params).
      if (!gpt_) LL_TRY(init_linear(L, mo.sgate, Projection::gate, Par::column, h_, fs, pre + "shared.gate", false));
      LL_TRY(init_linear(L, mo.sup, Projection::up, Par::column, h_, fs, pre + "shared.up", false));
      LL_TRY(init_linear(L, mo.sdown, Projection::down, Par::row, fs, h_, pre + "shared.down", false));
    }
    return Status::ok();
  }

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
    return it != nullptr && !(L.policy == LayerRecompute::selective && it->attention_scores);
  }
  // A tensor of layer L named as the recipe names it: in activations when kept.
  Status lmake(Layer& L, Tensor& t, const char* name, int64_t numel, DType dt, Mode mode) {
    const bool keep = mode == Mode::keep && kept(L, name);
    if (keep) {
      const SavedTensor* it = recipe_item(L, name);
      if (static_cast<double>(numel) != it->elements)
        return Status::runtime(std::string("recipe mismatch: layer ") + std::to_string(L.index) + " " + name + ": executor " +
                               std::to_string(numel) + " elements, recipe " + std::to_string(it->elements));
    }
    return make(a_, t, numel, dt, keep ? Category::activations : Category::workspace, name);
  }
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

  Status lin_base_fwd(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out) {
    Scratch sc;
    const int64_t rows = chunk_rows(n);
    LL_TRY(scratch(a_, sc, ops_.linear_workspace_bytes(c_.storage, rows, in, out), "linear.workspace"));
    for (int64_t r = 0; r < n; r += rows) {
      const int64_t nr = std::min(rows, n - r);
      LL_TRY(ops_.template linear_forward<S>(x + r * in, w, b, y + r * out, nr, in, out, sc.span()));
    }
    return Status::ok();
  }
  Status lin_base_bwd(const S* dy, const S* x, const S* w, S* dx, G* dw, G* db, int64_t n, int64_t in, int64_t out) {
    Scratch sc;
    const int64_t rows = chunk_rows(n);
    LL_TRY(scratch(a_, sc, ops_.linear_workspace_bytes(c_.storage, rows, in, out), "linear.workspace"));
    for (int64_t r = 0; r < n; r += rows) {
      const int64_t nr = std::min(rows, n - r);
      LL_TRY(ops_.template linear_backward<S, G>(dy + r * out, x ? x + r * in : nullptr, w, dx ? dx + r * in : nullptr, dw, db, nr, in,
                                 out, sc.span()));
    }
    return Status::ok();
  }


  // y (n, out) = x W^T + b (+ LoRA: scale x A^T B^T, z = scale x A^T kept as lora.<p>.z).
  // Row-parallel: the partial outputs are summed over TP (the bias added by TP rank 0 only).
  // With SP, y of a row-parallel projection is this rank's ns_ tokens (reduce-scatter).
  // rows: 0 = n_ (the micro-batch); an MoE expert's block of rows otherwise (no TP), which
  // starts at row row0 of the rank's rows_ expert rows (its LoRA intermediate's offset).
  Status lin_fwd(Layer& L, Linear& li, const S* x, S* y, Mode mode, int64_t rows = 0, int64_t row0 = 0) {
    const bool row = li.par == Par::row;
    const S* bias = !row || tr_ == 0 ? dopt(li.b) : nullptr;
    if (row && sp_) {
      Tensor full;
      LL_TRY(ws(full, n_ * li.out, "row_parallel.partial"));
      LL_TRY(lin_base_fwd(x, d(li.w), bias, d(full), n_, li.in, li.out));
      LL_TRY(c_.comm->reduce_scatter_sum(d(full), y, ns_ * li.out, c_.storage, Group::tp));
    } else {
      LL_TRY(lin_base_fwd(x, d(li.w), bias, y, rows > 0 ? rows : n_, li.in, li.out));
      if (row) LL_TRY(tp_sum(y, n_ * li.out));
    }
    if (li.lora) LL_TRY(lora_fwd(L, li, x, y, mode, rows, row0));
    return Status::ok();
  }
  // y += z B^T with z = scale x A^T (n_, r), kept as lora.<p>.z: n_ * r on every TP rank
  // (the recipe's b*s*r). Column-parallel: x and A are whole, so z is too; B is this rank's
  // rows and so is y. Row-parallel: x A^T over this rank's input columns is partial, summed
  // over TP (n_ * r, the small side: Megatron's RowParallelLinear for A), then B is whole and
  // the product (equal on every rank) is added to the already-reduced y -- under SP to this
  // rank's ns_ tokens only.
  // rows > 0: an MoE expert's block of rows starting at row0 (no TP): the z of every block
  // of the rank's rows_ expert rows is one tensor (the recipe's E * C * r), made by the
  // block at row 0.
  Status lora_fwd(Layer& L, Linear& li, const S* x, S* y, Mode mode, int64_t rows = 0, int64_t row0 = 0) {
    const int64_t r = L.ctx.lora_rank, nr = rows > 0 ? rows : n_;
    const bool row = li.par == Par::row;
    Tensor& z = L.sv.lora_z[static_cast<int>(li.proj)];
    if (row0 == 0) LL_TRY(lmake(L, z, kLoraZ[static_cast<int>(li.proj)], (rows > 0 ? rows_ : n_) * r, c_.storage, mode));
    S* zb = d(z) + row0 * r;
    LL_TRY(lin_base_fwd(x, d(li.la), nullptr, zb, nr, li.in, r));
    if (row) LL_TRY(tp_sum(zb, nr * r));
    LL_TRY(ops_.scale(zb, nr * r, lora_scale_));
    const int64_t out_rows = row && sp_ ? ns_ : nr;
    const S* zr = zb + (row && sp_ ? tr_ * ns_ * r : 0);
    Tensor tmp;
    LL_TRY(ws(tmp, out_rows * li.out, "lora.out"));
    LL_TRY(lin_base_fwd(zr, d(li.lb), nullptr, d(tmp), out_rows, r, li.out));
    return ops_.template add_inplace<S>(y, d(tmp), out_rows * li.out);
  }
  // Sequence parallel: full (n_, h) = the ns_-token slices of every TP rank, in a buffer
  // counted as communication (the planner's TP/SP all-gather line).
  Status sp_gather(Tensor& full, const S* local, const char* name) {
    LL_TRY(make(a_, full, n_ * h_, c_.storage, Category::communication, name));
    return c_.comm->all_gather(local, d(full), ns_ * h_, c_.storage, Group::tp);
  }
  // Column-parallel input gradient: partial (n_, h) summed over TP into local (ns_, h).
  Status tp_reduce_input_grad(S* partial, Tensor& local, const char* name) {
    if (!sp_) {
      LL_TRY(tp_sum(partial, n_ * h_));
      return Status::ok();
    }
    LL_TRY(ws(local, ns_ * h_, name));
    return c_.comm->reduce_scatter_sum(partial, d(local), ns_ * h_, c_.storage, Group::tp);
  }
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
  Status lin_bwd(Layer& L, Linear& li, const S* dy, const S* x, S* dx, int64_t rows = 0, int64_t row0 = 0) {
    const int64_t nr = rows > 0 ? rows : n_;
    Tensor dxl;
    if (li.lora) {  // an expert's block (rows > 0) reads its rows of z; experts have no TP
      const int64_t r = L.ctx.lora_rank;
      Tensor dz;
      LL_TRY(ws(dz, nr * r, "lora.dz"));
      const S* zb = d(L.sv.lora_z[static_cast<int>(li.proj)]) + row0 * r;
      LL_TRY(lin_base_bwd(dy, zb, d(li.lb), d(dz), g(li.glb), nullptr, nr, r, li.out));
      if (li.par == Par::column) LL_TRY(tp_sum(d(dz), nr * r));
      LL_TRY(ops_.scale(d(dz), nr * r, lora_scale_));
      const bool lora_dx = dx != nullptr && (li.par != Par::column || tr_ == 0);
      if (lora_dx) LL_TRY(ws(dxl, nr * li.in, "lora.dx"));
      LL_TRY(lin_base_bwd(d(dz), x, d(li.la), lora_dx ? d(dxl) : nullptr, g(li.gla), nullptr, nr, li.in, r));
    }
    LL_TRY(lin_base_bwd(dy, x, d(li.w), dx, g(li.gw), g(li.gb), nr, li.in, li.out));
    if (dx && dxl.defined()) LL_TRY(ops_.template add_inplace<S>(dx, d(dxl), nr * li.in));
    return Status::ok();
  }

  Status norm_fwd(Norm& nm, const S* x, S* y) {
    if (gpt_) return ops_.template layernorm_forward<S>(x, d(nm.w), d(nm.b), y, ns_, h_, c_.options.norm_eps);
    return ops_.template rmsnorm_forward<S>(x, d(nm.w), y, ns_, h_, c_.options.norm_eps);
  }
  // Over this rank's ns_ tokens. With SP the weight gradients of those tokens are partial:
  // they are computed into zeroed buffers, summed over TP and added (Megatron's all-reduce
  // of sequence-parallel parameters' gradients).
  Status norm_bwd(Norm& nm, const S* x, const S* dy, S* dx, bool accumulate) {
    Scratch sc;
    LL_TRY(scratch(a_, sc, ops_.norm_workspace_bytes(c_.grad, ns_, h_), "norm.workspace"));
    Tensor tw, tb;
    G* gw = g(nm.gw);
    G* gb = g(nm.gb);
    if (sp_ && gw != nullptr) {
      Result<Tensor> r = ops_.zeros(Shape{h_}, c_.grad, Category::workspace, "norm.grad_partial");
      if (!r) return r.status();
      tw = std::move(*r);
      gw = g(tw);
      if (gb != nullptr) {
        Result<Tensor> rb = ops_.zeros(Shape{h_}, c_.grad, Category::workspace, "norm.grad_partial");
        if (!rb) return rb.status();
        tb = std::move(*rb);
        gb = g(tb);
      }
    }
    if (gpt_)
      LL_TRY(ops_.template layernorm_backward<S, G>(x, d(nm.w), dy, dx, gw, gb, ns_, h_, c_.options.norm_eps, accumulate, sc.span()));
    else
      LL_TRY(ops_.template rmsnorm_backward<S, G>(x, d(nm.w), dy, dx, gw, ns_, h_, c_.options.norm_eps, accumulate, sc.span()));
    for (auto [part, grad] : {std::pair{&tw, &nm.gw}, std::pair{&tb, &nm.gb}}) {
      if (!part->defined()) continue;
      LL_TRY(c_.comm->all_reduce_sum(part->raw(), h_, c_.grad, Group::tp));
      LL_TRY(ops_.template add_inplace<G>(g(*grad), g(*part), h_));
    }
    return Status::ok();
  }

  cpu::AttentionDims dims() const {
    cpu::AttentionDims dm;
    dm.b = c_.plan.micro_batch;
    dm.s = c_.job.seq_len;
    dm.heads = c_.spec.heads / t_;
    dm.kv_heads = c_.spec.kv_heads / t_;
    dm.head_dim = c_.spec.head_width();
    return dm;
  }

  // The attention forward the plan selects, for the queries `q` of `dm` (all of the
  // sequence, or a CP rank's) against keys and values k, v with key doc ids `doc`: output o,
  // and into L.sv what the backward reads -- lse (flash), or probs and with dropout the
  // mask and dropped probabilities -- kept or not as `mode` and the recipe say.
  Status attn_fwd_kernel(Layer& L, const S* q, const S* k, const S* v, const int32_t* doc, const cpu::AttentionDims& dm, S* o,
                         Mode mode, uint64_t seed) {
    const int64_t rows = dm.b * dm.heads * cpu::query_rows(dm);  // (b, heads, sq)
    Saved& sv = L.sv;
    Scratch sc;
    if (c_.plan.flash_attention) {
      LL_TRY(lmake(L, sv.lse, "attn.lse", rows, kA, mode));
      LL_TRY(scratch(a_, sc, ops_.attention_workspace_bytes(c_.storage, dm, true, /*backward=*/false), "attention.workspace"));
      return ops_.template attention_forward_flash<S>(q, k, v, doc, o, sv.lse.template data<A>(), dm, sc.span());
    }
    const int64_t ss = rows * dm.s;
    LL_TRY(lmake(L, sv.probs, "attn.probs", ss, c_.storage, mode));
    if (drop_) {
      LL_TRY(lmake(L, sv.probs_mask, "attn.probs_dropout_mask", ss, DType::u8, mode));
      LL_TRY(lmake(L, sv.probs_dropped, "attn.probs_dropped", ss, c_.storage, mode));
      LL_TRY(scratch(a_, sc, ops_.attention_dropout_workspace_bytes(c_.storage, dm), "attention.workspace"));
      return ops_.template attention_forward_dropout<S>(q, k, v, doc, o, d(sv.probs), sv.probs_mask.template data<uint8_t>(),
                                                        d(sv.probs_dropped), dm, p_, site_seed(seed, L.index, 1), sc.span());
    }
    LL_TRY(scratch(a_, sc, ops_.attention_workspace_bytes(c_.storage, dm, false), "attention.workspace"));
    return ops_.template attention_forward_materialized<S>(q, k, v, doc, o, d(sv.probs), dm, sc.span());
  }

  // The attention forward's tensors the backward reads; lse is used only with flash attention,
  // probs only without it, mask and dropped only with attention dropout.
  struct AttnSaved {
    Tensor &q, &k, &v;
    const int32_t* doc;
    Tensor &o, &lse, &probs, &mask, &dropped;
  };
  // The attention backward the plan selects (flash, dropout, materialized), with its workspace.
  Status attn_bwd_kernel(const AttnSaved& t, const S* dout, S* dq, S* dk, S* dv, const cpu::AttentionDims& dm) {
    Scratch sc;
    if (c_.plan.flash_attention) {
      LL_TRY(scratch(a_, sc, ops_.attention_workspace_bytes(c_.storage, dm, true), "attention.workspace"));
      return ops_.template attention_backward_flash<S>(d(t.q), d(t.k), d(t.v), t.doc, d(t.o), t.lse.template data<A>(), dout, dq, dk, dv,
                                                       dm, sc.span());
    }
    if (drop_) {
      LL_TRY(scratch(a_, sc, ops_.attention_dropout_workspace_bytes(c_.storage, dm), "attention.workspace"));
      return ops_.template attention_backward_dropout<S>(d(t.q), d(t.k), d(t.v), d(t.probs), t.mask.template data<uint8_t>(),
                                                         d(t.dropped), dout, dq, dk, dv, dm, p_, sc.span());
    }
    LL_TRY(scratch(a_, sc, ops_.attention_workspace_bytes(c_.storage, dm, false), "attention.workspace"));
    return ops_.template attention_backward_materialized<S>(d(t.q), d(t.k), d(t.v), d(t.probs), dout, dq, dk, dv, dm, sc.span());
  }

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
  cpu::AttentionDims cp_dims() const {
    cpu::AttentionDims dm = dims();  // dm.s = S_: every key
    dm.q_rows = sl_;
    dm.q_split = sl_ / 2;
    dm.q_offset = cp_position(0);
    dm.q_offset_hi = cp_position(sl_ / 2);
    return dm;
  }
  // Copies between rank-major (cp, b, sl_, w) blocks -- a CP collective's layout, block q
  // holding rank q's rows -- and whole sequences (b, S_, w); to_whole picks the direction.
  Status cp_reorder(S* rank_major, S* whole, int64_t w, bool to_whole) {
    const int64_t b = c_.plan.micro_batch, c = sl_ / 2, bytes = c * w * static_cast<int64_t>(sizeof(S));
    for (int q = 0; q < cp_; ++q)
      for (int64_t j = 0; j < b; ++j)
        for (int half = 0; half < 2; ++half) {
          S* rm = rank_major + (q * n_ + j * sl_ + half * c) * w;
          S* wh = whole + (j * S_ + (half == 0 ? q : 2 * cp_ - 1 - q) * c) * w;
          LL_TRY(to_whole ? ops_.copy(wh, rm, bytes) : ops_.copy(rm, wh, bytes));
        }
    return Status::ok();
  }
  // (b, sl_, w) rows of every CP rank -> whole sequences (b, S_, w), in communication buffers.
  Status cp_gather(const S* local, Tensor& full, int64_t w, const char* name) {
    Tensor raw;
    LL_TRY(make(a_, raw, cp_ * n_ * w, c_.storage, Category::communication, name));
    LL_TRY(c_.comm->all_gather(local, d(raw), n_ * w, c_.storage, Group::cp));
    LL_TRY(make(a_, full, cp_ * n_ * w, c_.storage, Category::communication, name));
    return cp_reorder(d(raw), d(full), w, true);
  }
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
    return attn_fwd_kernel(L, d(L.sv.q), d(kv.k), d(kv.v), staged_.whole_doc, cp_dims(), d(L.sv.proj_input), mode, seed);
  }
  // Backward: dout (n_, qw) this rank's output gradient -> dq (n_, qw), dk, dv (n_, kvw) of
  // this rank's tokens. Under selective recompute without flash the scores of this rank's
  // queries are recomputed over the gathered keys first.
  Status cp_attn_bwd(Layer& L, const S* dout, S* dq, S* dk, S* dv, uint64_t seed) {
    if (c_.plan.cp_exchange == CpExchange::ring) return ring_attn_bwd(L, dout, dq, dk, dv);
    const cpu::AttentionDims dm = cp_dims();
    Saved& sv = L.sv;
    CpKeys kv;
    LL_TRY(cp_gather_keys(L, kv));
    Tensor o, dkw, dvw;
    if (L.policy == LayerRecompute::selective && !c_.plan.flash_attention) {
      LL_TRY(ws(o, n_ * qw_, "attn.recompute_out"));
      LL_TRY(attn_fwd_kernel(L, d(sv.q), d(kv.k), d(kv.v), staged_.whole_doc, dm, d(o), Mode::recompute, seed));
      o.reset();
    }
    LL_TRY(ws(dkw, dm.b * S_ * kvw_, "attn.dk.cp_whole"));
    LL_TRY(ws(dvw, dm.b * S_ * kvw_, "attn.dv.cp_whole"));
    LL_TRY(attn_bwd_kernel({sv.q, kv.k, kv.v, staged_.whole_doc, sv.proj_input, sv.lse, sv.probs, sv.probs_mask, sv.probs_dropped}, dout, dq,
                           d(dkw), d(dvw), dm));
    kv = CpKeys{};
    LL_TRY(cp_reduce_scatter(d(dkw), dk, kvw_, "attn.dk.cp_reduce_scatter"));
    return cp_reduce_scatter(d(dvw), dv, kvw_, "attn.dv.cp_reduce_scatter");
  }

  // Context parallel as a ring (CpExchange::ring; Megatron's and TransformerEngine's P2P
  // CP), over the same load-balanced layout. Forward: cp steps; at step i this rank holds
  // the keys and values of rank cr_ - i (its two chunks, AttentionDims k_rows / k_offset /
  // k_split) and passes them on to rank cr_ + 1 while its queries attend to them (flash);
  // the partial outputs are merged by their log-sum-exp. Only two ranks' k and v are ever
  // held: the current and the next. Backward: the same ring with the merged o and lse; the
  // dk, dv of each visiting rank's keys accumulate in a buffer that travels with them and,
  // after a last shift, reaches its owner complete. Flash only (plan_check).
  cpu::AttentionDims ring_dims(int owner) const {
    cpu::AttentionDims dm = cp_dims();
    dm.k_rows = sl_;
    dm.k_split = sl_ / 2;
    dm.k_offset = cp_position(0, owner);
    dm.k_offset_hi = cp_position(sl_ / 2, owner);
    return dm;
  }
  // (k | v) of this rank's tokens into one buffer of 2 n_ kvw (the unit the ring passes).
  Status ring_pack(Tensor& kv, const S* k, const S* v, const char* name) {
    const int64_t w = n_ * kvw_;
    LL_TRY(make(a_, kv, 2 * w, c_.storage, Category::communication, name));
    LL_TRY(ops_.copy(d(kv), k, w * static_cast<int64_t>(sizeof(S))));
    return ops_.copy(d(kv) + w, v, w * static_cast<int64_t>(sizeof(S)));
  }
  Status ring_attn_fwd(Layer& L, Mode mode) {
    Saved& sv = L.sv;
    const int64_t w = n_ * kvw_;
    const cpu::AttentionDims dm0 = ring_dims(cr_);
    const int64_t rows = dm0.b * dm0.heads * cpu::query_rows(dm0);
    LL_TRY(lmake(L, sv.lse, "attn.lse", rows, kA, mode));
    Tensor cur, next, o_part, lse_part;
    LL_TRY(ring_pack(cur, d(sv.k), d(sv.v), "attn.kv.cp_ring"));
    LL_TRY(make(a_, next, 2 * w, c_.storage, Category::communication, "attn.kv.cp_ring"));
    LL_TRY(ws(o_part, n_ * qw_, "attn.out.cp_ring_partial"));
    LL_TRY(make(a_, lse_part, rows, kA, Category::workspace, "attn.lse.cp_ring_partial"));  // ws() maps f32 to storage
    Scratch sc;
    LL_TRY(scratch(a_, sc, ops_.attention_workspace_bytes(c_.storage, dm0, true, /*backward=*/false), "attention.workspace"));
    for (int step = 0; step < cp_; ++step) {
      if (step + 1 < cp_) LL_TRY(c_.comm->ring_shift(d(cur), d(next), 2 * w, c_.storage, Group::cp, 300 + step));
      const cpu::AttentionDims dm = ring_dims((cr_ - step + cp_) % cp_);
      const bool first = step == 0;
      LL_TRY(ops_.template attention_forward_flash<S>(d(sv.q), d(cur), d(cur) + w, staged_.whole_doc, first ? d(sv.proj_input) : d(o_part),
                                                      first ? sv.lse.template data<A>() : lse_part.template data<A>(), dm, sc.span()));
      if (!first)
        LL_TRY(ops_.template attention_merge_partial<S>(d(sv.proj_input), sv.lse.template data<A>(), d(o_part),
                                                        lse_part.template data<A>(), dm));
      std::swap(cur, next);
    }
    return Status::ok();
  }
  Status ring_attn_bwd(Layer& L, const S* dout, S* dq, S* dk, S* dv) {
    Saved& sv = L.sv;
    const int64_t w = n_ * kvw_, bytes_q = n_ * qw_ * static_cast<int64_t>(sizeof(S));
    Tensor cur, next, acc, acc_next, dq_part, dkv_part;
    LL_TRY(ring_pack(cur, d(sv.k), d(sv.v), "attn.kv.cp_ring"));
    LL_TRY(make(a_, next, 2 * w, c_.storage, Category::communication, "attn.kv.cp_ring"));
    LL_TRY(make(a_, acc, 2 * w, c_.storage, Category::communication, "attn.dkv.cp_ring"));
    LL_TRY(make(a_, acc_next, 2 * w, c_.storage, Category::communication, "attn.dkv.cp_ring"));
    LL_TRY(ops_.zero(d(acc), 2 * w * static_cast<int64_t>(sizeof(S))));
    LL_TRY(ws(dq_part, n_ * qw_, "attn.dq.cp_ring_partial"));
    LL_TRY(ws(dkv_part, 2 * w, "attn.dkv.cp_ring_partial"));
    LL_TRY(ops_.zero(dq, bytes_q));
    Scratch sc;
    LL_TRY(scratch(a_, sc, ops_.attention_workspace_bytes(c_.storage, ring_dims(cr_), true), "attention.workspace"));
    for (int step = 0; step < cp_; ++step) {
      if (step + 1 < cp_) LL_TRY(c_.comm->ring_shift(d(cur), d(next), 2 * w, c_.storage, Group::cp, 400 + step));
      const cpu::AttentionDims dm = ring_dims((cr_ - step + cp_) % cp_);
      LL_TRY(ops_.template attention_backward_flash<S>(d(sv.q), d(cur), d(cur) + w, staged_.whole_doc, d(sv.proj_input), sv.lse.template data<A>(),
                                                       dout, d(dq_part), d(dkv_part), d(dkv_part) + w, dm, sc.span()));
      LL_TRY(ops_.template add_inplace<S>(dq, d(dq_part), n_ * qw_));
      LL_TRY(ops_.template add_inplace<S>(d(acc), d(dkv_part), 2 * w));
      // The accumulator of rank cr_ - step's keys moves on with them; after the last
      // shift this rank holds its own, summed over every rank's queries.
      LL_TRY(c_.comm->ring_shift(d(acc), d(acc_next), 2 * w, c_.storage, Group::cp, 500 + step));
      std::swap(cur, next);
      std::swap(acc, acc_next);
    }
    LL_TRY(ops_.copy(dk, d(acc), w * static_cast<int64_t>(sizeof(S))));
    return ops_.copy(dv, d(acc) + w, w * static_cast<int64_t>(sizeof(S)));
  }

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
  Status host_view(const T* p, int64_t n, std::vector<T>& host, const T*& view) {
    if constexpr (Ops::kHostMemory) {
      view = p;
    } else {
      host.resize(static_cast<size_t>(n));
      LL_TRY(ops_.download(host.data(), p, n * static_cast<int64_t>(sizeof(T))));
      view = host.data();
    }
    return Status::ok();
  }
  // host's values where the backend's ops read them: host itself on the CPU (outside the
  // accounting, as the routing's vectors are), else a device workspace tensor `dev`.
  template <class T>
  Status backend_view(const std::vector<T>& host, Tensor& dev, DType dt, const char* name, const T*& view) {
    if constexpr (Ops::kHostMemory) {
      view = host.data();
    } else {
      LL_TRY(make(a_, dev, std::max<int64_t>(1, static_cast<int64_t>(host.size())), dt, Category::workspace, name));
      LL_TRY(ops_.upload(dev.raw(), host.data(), static_cast<int64_t>(host.size() * sizeof(T))));
      view = dev.template data<T>();
    }
    return Status::ok();
  }

  // One micro-batch's routing, re-derived from the kept probabilities in backward (the same
  // numbers give the same choices): choice j of token t is index t*k + j.
  struct Routing {
    std::vector<int32_t> expert, slot;  // slot: row in the expert's C, -1 = dropped
    std::vector<A> gate;
    std::vector<int32_t> row;  // moe_row of the route, -1 = dropped (the ops' rows)
  };
  Routing route(const A* probs, int64_t T) const {
    Routing r;
    const auto tk = static_cast<size_t>(T * k_);
    r.expert.resize(tk);
    r.slot.assign(tk, -1);
    r.gate.resize(tk);
    std::vector<int32_t> idx(static_cast<size_t>(E_));
    for (int64_t t = 0; t < T; ++t) {
      const A* p = probs + t * E_;
      for (int32_t e = 0; e < E_; ++e) idx[static_cast<size_t>(e)] = e;
      std::partial_sort(idx.begin(), idx.begin() + k_, idx.end(), [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      A sum = 0;
      for (int j = 0; j < k_; ++j) sum += p[idx[static_cast<size_t>(j)]];
      for (int j = 0; j < k_; ++j) {
        const auto at = static_cast<size_t>(t * k_ + j);
        r.expert[at] = idx[static_cast<size_t>(j)];
        r.gate[at] = p[idx[static_cast<size_t>(j)]] / sum;
      }
    }
    std::vector<int64_t> used(static_cast<size_t>(E_), 0);
    for (int j = 0; j < k_; ++j)
      for (int64_t t = 0; t < T; ++t) {
        const auto at = static_cast<size_t>(t * k_ + j);
        int64_t& u = used[static_cast<size_t>(r.expert[at])];
        if (u < cap_) r.slot[at] = static_cast<int32_t>(u++);
      }
    r.row.resize(tk);
    for (size_t at = 0; at < tk; ++at) r.row[at] = r.slot[at] < 0 ? -1 : static_cast<int32_t>(moe_row(r, at));
    return r;
  }
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
  Status moe_fwd(Layer& L, S* y, Mode mode) {
    const int64_t T = ns_;
    Saved& sv = L.sv;
    const S* x = d(sv.mlp_input);
    // Shared experts under SP are TP-split like a dense MLP and read the whole sequence:
    // its input is all-gathered first, so that their GEMMs may run beside the token
    // exchange (Megatron-Core's shared-expert overlap); the buffer stays live through the
    // dispatch, which is why the planner adds the TP and EP communication buffers.
    Tensor gathered;
    if (fs_ > 0 && sp_) LL_TRY(sp_gather(gathered, x, "mlp.input.gathered"));
    const S* xs = gathered.defined() ? d(gathered) : x;
    // ---- router
    Tensor logits;
    LL_TRY(ws(logits, T * E_, "moe.router_logits"));
    LL_TRY(lin_base_fwd(x, d(L.moe.router), nullptr, d(logits), T, h_, E_));
    LL_TRY(lmake(L, sv.router_probs, "moe.router_probs", T * E_, kA, mode));
    LL_TRY(ops_.template moe_router_softmax<S>(d(logits), sv.router_probs.template data<A>(), T, E_));
    logits.reset();
    RouteViews rv;
    LL_TRY(route_views(L, rv));
    const int32_t* rows = rv.rows;
    const A* gates = rv.gates;
    // ---- dispatch
    Tensor send;
    Tensor& disp = ep_ > 1 ? send : sv.expert_input;
    if (ep_ > 1) LL_TRY(make(a_, send, rows_ * h_, c_.storage, Category::communication, "moe.dispatch"));
    else LL_TRY(lmake(L, sv.expert_input, "moe.expert_input", rows_ * h_, c_.storage, mode));
    LL_TRY(ops_.zero(disp.raw(), disp.bytes()));
    LL_TRY(ops_.template moe_dispatch<S>(x, rows, d(disp), T, k_, h_));
    if (ep_ > 1) {
      LL_TRY(lmake(L, sv.expert_input, "moe.expert_input", rows_ * h_, c_.storage, mode));
      LL_TRY(c_.comm->all_to_all(d(send), d(sv.expert_input), El_ * cap_ * h_, c_.storage, Group::ep));
      send.reset();
    }
    // ---- experts, block by block (one GEMM over all blocks when the rank has one expert)
    const int64_t nb = ep_ * El_, run = El_ == 1 ? nb : 1, rr = run * cap_;  // blocks of C rows: (source, local expert)
    const int64_t hid = rows_ * fe_;
    LL_TRY(lmake(L, sv.act_out, "mlp.act_out", hid, c_.storage, mode));
    if (gpt_) LL_TRY(lmake(L, sv.fc1_out, "mlp.fc1_out", hid, c_.storage, mode));
    else {
      LL_TRY(lmake(L, sv.gate_out, "mlp.gate_out", hid, c_.storage, mode));
      LL_TRY(lmake(L, sv.up_out, "mlp.up_out", hid, c_.storage, mode));
    }
    for (int64_t b = 0; b < nb; b += run) {
      const auto el = static_cast<size_t>(b % El_);
      const S* xb = d(sv.expert_input) + b * cap_ * h_;
      if (gpt_) {
        LL_TRY(lin_fwd(L, L.moe.up[el], xb, d(sv.fc1_out) + b * cap_ * fe_, mode, rr, b * cap_));
      } else {
        LL_TRY(lin_fwd(L, L.moe.gate[el], xb, d(sv.gate_out) + b * cap_ * fe_, mode, rr, b * cap_));
        LL_TRY(lin_fwd(L, L.moe.up[el], xb, d(sv.up_out) + b * cap_ * fe_, mode, rr, b * cap_));
      }
    }
    if (gpt_) LL_TRY(ops_.template gelu_forward<S>(d(sv.fc1_out), d(sv.act_out), hid));
    else LL_TRY(ops_.template swiglu_forward<S>(d(sv.gate_out), d(sv.up_out), d(sv.act_out), hid));
    // ---- combine: the outputs go back to the routing ranks
    Tensor& out = ep_ > 1 ? send : sv.expert_output;
    if (ep_ > 1) LL_TRY(make(a_, send, rows_ * h_, c_.storage, Category::communication, "moe.combine"));
    else LL_TRY(lmake(L, sv.expert_output, "moe.expert_output", rows_ * h_, c_.storage, mode));
    for (int64_t b = 0; b < nb; b += run)
      LL_TRY(lin_fwd(L, L.moe.down[static_cast<size_t>(b % El_)], d(sv.act_out) + b * cap_ * fe_, d(out) + b * cap_ * h_, mode, rr,
                     b * cap_));
    if (ep_ > 1) {
      LL_TRY(lmake(L, sv.expert_output, "moe.expert_output", rows_ * h_, c_.storage, mode));
      LL_TRY(c_.comm->all_to_all(d(send), d(sv.expert_output), El_ * cap_ * h_, c_.storage, Group::ep));
      send.reset();
    }
    LL_TRY(ops_.template moe_combine<S>(d(sv.expert_output), rows, gates, y, T, k_, h_));
    // ---- shared experts
    if (fs_ > 0) {  // over all n_ tokens, fs_ = this TP rank's columns
      const int64_t sh = n_ * fs_;
      Tensor tmp;
      LL_TRY(lmake(L, sv.sh_act, "moe.shared_act_out", sh, c_.storage, mode));
      if (gpt_) {
        LL_TRY(lmake(L, sv.sh_fc1, "moe.shared_fc1_out", sh, c_.storage, mode));
        LL_TRY(lin_fwd(L, L.moe.sup, xs, d(sv.sh_fc1), mode));
        LL_TRY(ops_.template gelu_forward<S>(d(sv.sh_fc1), d(sv.sh_act), sh));
      } else {
        LL_TRY(lmake(L, sv.sh_gate, "moe.shared_gate_out", sh, c_.storage, mode));
        LL_TRY(lmake(L, sv.sh_up, "moe.shared_up_out", sh, c_.storage, mode));
        LL_TRY(lin_fwd(L, L.moe.sgate, xs, d(sv.sh_gate), mode));
        LL_TRY(lin_fwd(L, L.moe.sup, xs, d(sv.sh_up), mode));
        LL_TRY(ops_.template swiglu_forward<S>(d(sv.sh_gate), d(sv.sh_up), d(sv.sh_act), sh));
      }
      gathered.reset();
      LL_TRY(ws(tmp, T * h_, "moe.shared_out"));  // row-parallel: reduce-scattered to this rank's tokens
      LL_TRY(lin_fwd(L, L.moe.sdown, d(sv.sh_act), d(tmp), mode));
      LL_TRY(ops_.template add_inplace<S>(y, d(tmp), T * h_));
    }
    return Status::ok();
  }

  // MoE under TP (with SP): every TP rank routes its own ns_ tokens through a router and
  // routed experts that are whole on each TP rank (experts are split over EP only), so their
  // weight gradients of one micro-batch are partial sums. They are computed into zeroed
  // buffers swapped in for the gradients, summed over TP and added -- as norm_bwd does for
  // sequence-parallel norms -- so the gradients stay equal on every TP rank. t = 1: none.
  std::vector<Tensor*> tp_partial_grads(Layer& L) {
    std::vector<Tensor*> v;
    if (t_ == 1) return v;
    v.push_back(&L.moe.grouter);
    for (std::vector<Linear>* set : {&L.moe.gate, &L.moe.up, &L.moe.down})
      for (Linear& li : *set)
        for (Tensor* t : {&li.gw, &li.gb, &li.gla, &li.glb}) v.push_back(t);
    std::erase_if(v, [](Tensor* t) { return !t->defined(); });
    return v;
  }
  // Moves each gradient of gs into whole and puts a zeroed tensor of its shape in its place.
  Status swap_in_partials(const std::vector<Tensor*>& gs, std::vector<Tensor>& whole) {
    for (Tensor* t : gs) {
      Result<Tensor> z = ops_.zeros(t->shape(), t->dtype(), Category::workspace, "moe.grad_partial");
      if (!z) return z.status();
      whole.push_back(std::move(*t));
      *t = std::move(*z);
    }
    return Status::ok();
  }
  // Sums each partial over TP, adds it to its gradient and puts the gradient back.
  Status sum_partials(const std::vector<Tensor*>& gs, std::vector<Tensor>& whole) {
    for (size_t i = 0; i < gs.size(); ++i) {
      LL_TRY(c_.comm->all_reduce_sum(gs[i]->raw(), gs[i]->numel(), gs[i]->dtype(), Group::tp));
      LL_TRY(ops_.template add_inplace<G>(g(whole[i]), g(*gs[i]), gs[i]->numel()));
      *gs[i] = std::move(whole[i]);
    }
    whole.clear();
    return Status::ok();
  }

  // dy (ns_, h): the MoE output's gradient -> dx (ns_, h) = its input's (overwritten);
  // weight gradients accumulate. Reverses moe_fwd, with the same exchanges in reverse.
  Status moe_bwd(Layer& L, const S* dy, S* dx) {
    const int64_t T = ns_;
    Saved& sv = L.sv;
    const S* x = dopt(sv.mlp_input);
    RouteViews rv;
    LL_TRY(route_views(L, rv));
    const Routing& r = rv.r;
    const A* probs = rv.probs;
    const int32_t* rows = rv.rows;
    const A* gates = rv.gates;
    Tensor dgate_dev;
    std::vector<Tensor*> partial = tp_partial_grads(L);
    std::vector<Tensor> whole;
    LL_TRY(swap_in_partials(partial, whole));
    // ---- combine: d output rows = g_j dy_t; d gate_j = dy_t . o_j
    std::vector<A> dgate(r.gate.size(), A(0));
    A* dgate_b = dgate.data();  // where the op writes them: the host vector on the CPU
    if constexpr (!Ops::kHostMemory) {
      LL_TRY(make(a_, dgate_dev, std::max<int64_t>(1, static_cast<int64_t>(dgate.size())), kA, Category::workspace, "moe.d_gates"));
      dgate_b = dgate_dev.template data<A>();
    }
    Tensor dcomb, dout;
    LL_TRY(make(a_, dcomb, rows_ * h_, c_.storage, ep_ > 1 ? Category::communication : Category::workspace, "moe.d_combine"));
    LL_TRY(ops_.zero(dcomb.raw(), dcomb.bytes()));
    LL_TRY(ops_.template moe_combine_backward<S>(dy, d(sv.expert_output), rows, gates, d(dcomb), dgate_b, T, k_, h_));
    if constexpr (!Ops::kHostMemory)
      LL_TRY(ops_.download(dgate.data(), dgate_b, static_cast<int64_t>(dgate.size() * sizeof(A))));
    if (ep_ > 1) {
      LL_TRY(ws(dout, rows_ * h_, "moe.d_expert_output"));
      LL_TRY(c_.comm->all_to_all(d(dcomb), d(dout), El_ * cap_ * h_, c_.storage, Group::ep));
      dcomb.reset();
    }
    const S* dob = ep_ > 1 ? d(dout) : d(dcomb);
    // ---- experts, block by block (as in moe_fwd)
    const int64_t nb = ep_ * El_, hid = rows_ * fe_, run = El_ == 1 ? nb : 1, rr = run * cap_;
    Tensor dact, dup, din;
    LL_TRY(ws(dact, hid, "moe.d_act"));
    for (int64_t b = 0; b < nb; b += run)
      LL_TRY(lin_bwd(L, L.moe.down[static_cast<size_t>(b % El_)], dob + b * cap_ * h_, dopt(sv.act_out) + b * cap_ * fe_,
                     d(dact) + b * cap_ * fe_, rr, b * cap_));
    dout.reset();
    dcomb.reset();
    LL_TRY(make(a_, din, rows_ * h_, c_.storage, ep_ > 1 ? Category::communication : Category::workspace, "moe.d_expert_input"));
    Tensor tmp;
    LL_TRY(ws(tmp, rr * h_, "moe.d_expert_input_up"));
    if (gpt_) {
      LL_TRY(ops_.template gelu_backward<S>(d(sv.fc1_out), d(dact), d(dact), hid));
    } else {
      LL_TRY(ws(dup, hid, "moe.d_up"));
      LL_TRY(ops_.template swiglu_backward<S>(d(sv.gate_out), d(sv.up_out), d(dact), d(dact), d(dup), hid));
    }
    for (int64_t b = 0; b < nb; b += run) {
      const auto el = static_cast<size_t>(b % El_);
      const S* xb = dopt(sv.expert_input) ? d(sv.expert_input) + b * cap_ * h_ : nullptr;
      S* db = d(din) + b * cap_ * h_;
      if (gpt_) {
        LL_TRY(lin_bwd(L, L.moe.up[el], d(dact) + b * cap_ * fe_, xb, db, rr, b * cap_));
      } else {
        LL_TRY(lin_bwd(L, L.moe.gate[el], d(dact) + b * cap_ * fe_, xb, db, rr, b * cap_));
        LL_TRY(lin_bwd(L, L.moe.up[el], d(dup) + b * cap_ * fe_, xb, d(tmp), rr, b * cap_));
        LL_TRY(ops_.template add_inplace<S>(db, d(tmp), rr * h_));
      }
    }
    dact.reset();
    dup.reset();
    tmp.reset();
    Tensor dback;  // the dispatch buffer's gradient on the routing rank
    if (ep_ > 1) {
      LL_TRY(ws(dback, rows_ * h_, "moe.d_dispatch"));
      LL_TRY(c_.comm->all_to_all(d(din), d(dback), El_ * cap_ * h_, c_.storage, Group::ep));
      din.reset();
    }
    const S* dd = ep_ > 1 ? d(dback) : d(din);
    // ---- dispatch: dx_t = sum of its routed rows' gradients
    LL_TRY(ops_.template moe_combine<S>(dd, rows, static_cast<const A*>(nullptr), dx, T, k_, h_));
    dback.reset();
    din.reset();
    // ---- router: gates -> top-k probabilities -> softmax -> logits -> Wr, x
    Tensor dlogits;
    LL_TRY(ws(dlogits, T * E_, "moe.d_router_logits"));
    std::vector<S> dlogits_host(static_cast<size_t>(T * E_));  // host arithmetic, then to dlogits
    std::vector<A> dp(static_cast<size_t>(E_));
    for (int64_t t = 0; t < T; ++t) {
      const A* p = probs + t * E_;
      std::fill(dp.begin(), dp.end(), A(0));
      A sum = 0, gdg = 0;  // sum of the top-k probabilities; sum_j g_j dg_j
      for (int j = 0; j < k_; ++j) {
        const auto at = static_cast<size_t>(t * k_ + j);
        sum += p[r.expert[at]];
        gdg += r.gate[at] * dgate[at];
      }
      for (int j = 0; j < k_; ++j) {  // g_j = p_j / sum: dp_j = (dg_j - sum_i g_i dg_i) / sum
        const auto at = static_cast<size_t>(t * k_ + j);
        dp[static_cast<size_t>(r.expert[at])] = (dgate[at] - gdg) / sum;
      }
      A pdp = 0;
      for (int64_t e = 0; e < E_; ++e) pdp += p[e] * dp[static_cast<size_t>(e)];
      for (int64_t e = 0; e < E_; ++e)
        dlogits_host[static_cast<size_t>(t * E_ + e)] = to_storage(p[e] * (dp[static_cast<size_t>(e)] - pdp));
    }
    LL_TRY(ops_.upload(dlogits.raw(), dlogits_host.data(), static_cast<int64_t>(dlogits_host.size() * sizeof(S))));
    LL_TRY(ws(tmp, T * h_, "moe.d_router_input"));
    LL_TRY(lin_base_bwd(d(dlogits), x, d(L.moe.router), d(tmp), g(L.moe.grouter), nullptr, T, h_, E_));
    LL_TRY(ops_.template add_inplace<S>(dx, d(tmp), T * h_));
    dlogits.reset();
    LL_TRY(sum_partials(partial, whole));
    // ---- shared experts: TP-split, over all n_ tokens (dy and x gathered under SP); the
    // column-parallel input gradient is partial and is summed over TP to this rank's tokens
    if (fs_ > 0) {
      const int64_t sh = n_ * fs_;
      Tensor dsa, dsu, gathered, dpart, tmpn, dlocal;
      const S* dys = dy;
      if (sp_) {
        LL_TRY(sp_gather(gathered, dy, "mlp.d_out.gathered"));
        dys = d(gathered);
      }
      LL_TRY(ws(dsa, sh, "moe.d_shared_act"));
      LL_TRY(lin_bwd(L, L.moe.sdown, dys, dopt(sv.sh_act), d(dsa)));
      gathered.reset();
      const S* xs = x;
      if (sp_ && x != nullptr) {
        LL_TRY(sp_gather(gathered, x, "mlp.input.gathered"));
        xs = d(gathered);
      }
      LL_TRY(ws(dpart, n_ * h_, "moe.d_shared_input"));
      if (gpt_) {
        LL_TRY(ops_.template gelu_backward<S>(d(sv.sh_fc1), d(dsa), d(dsa), sh));
        LL_TRY(lin_bwd(L, L.moe.sup, d(dsa), xs, d(dpart)));
      } else {
        LL_TRY(ws(dsu, sh, "moe.d_shared_up"));
        LL_TRY(ops_.template swiglu_backward<S>(d(sv.sh_gate), d(sv.sh_up), d(dsa), d(dsa), d(dsu), sh));
        LL_TRY(lin_bwd(L, L.moe.sgate, d(dsa), xs, d(dpart)));
        LL_TRY(ws(tmpn, n_ * h_, "moe.d_shared_input_up"));
        LL_TRY(lin_bwd(L, L.moe.sup, d(dsu), xs, d(tmpn)));
        LL_TRY(ops_.template add_inplace<S>(d(dpart), d(tmpn), n_ * h_));
      }
      gathered.reset();
      LL_TRY(tp_reduce_input_grad(d(dpart), dlocal, "moe.d_shared_input_local"));
      LL_TRY(ops_.template add_inplace<S>(dx, sp_ ? d(dlocal) : d(dpart), T * h_));
    }
    return Status::ok();
  }

  // ---------------------------------------------------------------- layer forward

  // x (n, h) -> out (n, h) in `out_cat`; the recipe's tensors land in L.sv.
  Status layer_fwd(Layer& L, const S* x, Tensor& out, Category out_cat, Mode mode, uint64_t seed) {
    const ModelSpec& m = c_.spec;
    Saved& sv = L.sv;
    const int64_t n = n_, ns = ns_, qw = qw_, kvw = kvw_;  // ns: tokens of this rank's sequence slice (SP)
    // ---- attention
    LL_TRY(lmake(L, sv.qkv_input, "attn.qkv_input", ns * h_, c_.storage, mode));
    LL_TRY(norm_fwd(L.ln1, x, d(sv.qkv_input)));
    LL_TRY(lmake(L, sv.q, "attn.q", n * qw, c_.storage, mode));
    LL_TRY(lmake(L, sv.k, "attn.k", n * kvw, c_.storage, mode));
    LL_TRY(lmake(L, sv.v, "attn.v", n * kvw, c_.storage, mode));
    Tensor gathered;  // SP: the full-sequence input of the column-parallel GEMMs
    if (sp_) LL_TRY(sp_gather(gathered, d(sv.qkv_input), "attn.qkv_input.gathered"));
    const S* xin = sp_ ? d(gathered) : d(sv.qkv_input);
    LL_TRY(lin_fwd(L, L.q, xin, d(sv.q), mode));
    LL_TRY(lin_fwd(L, L.k, xin, d(sv.k), mode));
    LL_TRY(lin_fwd(L, L.v, xin, d(sv.v), mode));
    gathered.reset();
    if (!gpt_) {
      LL_TRY(ops_.template rope_forward<S>(d(sv.q), staged_.positions, d(sv.q), n, m.heads / t_, m.head_width(), c_.options.rope_theta));
      LL_TRY(ops_.template rope_forward<S>(d(sv.k), staged_.positions, d(sv.k), n, m.kv_heads / t_, m.head_width(), c_.options.rope_theta));
    }
    LL_TRY(lmake(L, sv.proj_input, "attn.proj_input", n * qw, c_.storage, mode));
    if (cp_ > 1) {
      LL_TRY(cp_attn_fwd(L, mode, seed));
    } else {
      LL_TRY(attn_fwd_kernel(L, d(sv.q), d(sv.k), d(sv.v), staged_.doc, dims(), d(sv.proj_input), mode, seed));
    }
    Tensor branch;
    LL_TRY(ws(branch, ns * h_, "attn.out"));
    LL_TRY(lin_fwd(L, L.o, d(sv.proj_input), d(branch), mode));
    if (drop_) {
      LL_TRY(lmake(L, sv.attn_mask, "attn.resid_dropout_mask", ns * h_, DType::u8, mode));
      LL_TRY(ops_.template dropout_forward<S>(d(branch), d(branch), sv.attn_mask.template data<uint8_t>(), ns * h_, p_, site_seed(seed, L.index, 2)));
    }
    LL_TRY(lmake(L, sv.ln2_input, "ln2.input", ns * h_, c_.storage, mode));
    LL_TRY(ops_.template add<S>(x, d(branch), d(sv.ln2_input), ns * h_));
    // ---- MLP
    LL_TRY(lmake(L, sv.mlp_input, "mlp.input", ns * h_, c_.storage, mode));
    LL_TRY(norm_fwd(L.ln2, d(sv.ln2_input), d(sv.mlp_input)));
    if (moe_) {
      LL_TRY(moe_fwd(L, d(branch), mode));
    } else {
      if (sp_) LL_TRY(sp_gather(gathered, d(sv.mlp_input), "mlp.input.gathered"));
      const S* min = sp_ ? d(gathered) : d(sv.mlp_input);
      LL_TRY(lmake(L, sv.act_out, "mlp.act_out", n * f_, c_.storage, mode));
      if (gpt_) {
        LL_TRY(lmake(L, sv.fc1_out, "mlp.fc1_out", n * f_, c_.storage, mode));
        LL_TRY(lin_fwd(L, L.up, min, d(sv.fc1_out), mode));
        LL_TRY(ops_.template gelu_forward<S>(d(sv.fc1_out), d(sv.act_out), n * f_));
      } else {
        LL_TRY(lmake(L, sv.gate_out, "mlp.gate_out", n * f_, c_.storage, mode));
        LL_TRY(lmake(L, sv.up_out, "mlp.up_out", n * f_, c_.storage, mode));
        LL_TRY(lin_fwd(L, L.gate, min, d(sv.gate_out), mode));
        LL_TRY(lin_fwd(L, L.up, min, d(sv.up_out), mode));
        LL_TRY(ops_.template swiglu_forward<S>(d(sv.gate_out), d(sv.up_out), d(sv.act_out), n * f_));
      }
      gathered.reset();
      LL_TRY(lin_fwd(L, L.down, d(sv.act_out), d(branch), mode));
    }
    if (drop_) {
      LL_TRY(lmake(L, sv.mlp_mask, "mlp.resid_dropout_mask", ns * h_, DType::u8, mode));
      LL_TRY(ops_.template dropout_forward<S>(d(branch), d(branch), sv.mlp_mask.template data<uint8_t>(), ns * h_, p_, site_seed(seed, L.index, 3)));
    }
    LL_TRY(make(a_, out, ns * h_, c_.storage, out_cat, &L != &layers_.back() ? "ln1.input" : last_ ? "final_norm.input" : "stage.output"));
    LL_TRY(ops_.template add<S>(d(sv.ln2_input), d(branch), d(out), ns * h_));
    if (mode != Mode::recompute) drop_transients(sv);
    return Status::ok();
  }

  // Frees what the forward made but backward does not keep (everything in workspace).
  static void drop_transients(Saved& sv) {
    for (Tensor* t : {&sv.qkv_input, &sv.q, &sv.k, &sv.v, &sv.lse, &sv.probs, &sv.probs_mask, &sv.probs_dropped,
                      &sv.proj_input, &sv.attn_mask, &sv.ln2_input, &sv.mlp_input, &sv.fc1_out, &sv.gate_out,
                      &sv.up_out, &sv.act_out, &sv.mlp_mask, &sv.router_probs, &sv.expert_input, &sv.expert_output,
                      &sv.sh_fc1, &sv.sh_gate, &sv.sh_up, &sv.sh_act})
      if (t->defined() && t->category() != Category::activations) t->reset();
    for (Tensor& t : sv.lora_z)
      if (t.defined() && t.category() != Category::activations) t.reset();
  }

  // ---------------------------------------------------------------- layer backward

  // dx (n, h): the gradient of the layer output in, of its input out (in place).
  Status layer_bwd(Layer& L, const S* x, S* dx, uint64_t seed) {
    const ModelSpec& m = c_.spec;
    const int64_t n = n_, ns = ns_, qw = qw_, kvw = kvw_;
    if (L.policy == LayerRecompute::full) {  // re-run the forward; its output is discarded
      Tensor out;
      L.sv.clear();
      LL_TRY(layer_fwd(L, x, out, Category::workspace, Mode::recompute, seed));
    } else if (L.policy == LayerRecompute::selective && !c_.plan.flash_attention && cp_ == 1) {  // CP: recomputed below
      Tensor o;
      LL_TRY(ws(o, n * qw, "attn.recompute_out"));
      LL_TRY(attn_fwd_kernel(L, d(L.sv.q), d(L.sv.k), d(L.sv.v), staged_.doc, dims(), d(o), Mode::recompute, seed));
    }
    Saved& sv = L.sv;
    // ---- MLP
    Tensor dbranch, dact, dmid, gathered, dlocal;
    const S* dy = dx;
    if (drop_) {
      LL_TRY(ws(dbranch, ns * h_, "mlp.d_out"));
      LL_TRY(ops_.template dropout_backward<S>(dx, sv.mlp_mask.template data<uint8_t>(), d(dbranch), ns * h_, p_));
      dy = d(dbranch);
    }
    if (sp_ && !moe_) {  // row-parallel backward needs the full-sequence output gradient
      LL_TRY(sp_gather(gathered, dy, "mlp.d_out.gathered"));
      dy = d(gathered);
    }
    if (moe_) {  // this rank's tokens in and out; moe_bwd gathers for the shared experts itself
      LL_TRY(ws(dmid, ns * h_, "mlp.d_input"));
      LL_TRY(moe_bwd(L, dy, d(dmid)));
      dbranch.reset();
    } else {
      LL_TRY(ws(dact, n * f_, "mlp.d_act"));
      LL_TRY(lin_bwd(L, L.down, dy, dopt(sv.act_out), d(dact)));
      dbranch.reset();
      gathered.reset();
      const S* min = dopt(sv.mlp_input);
      if (sp_ && min != nullptr) {
        LL_TRY(sp_gather(gathered, min, "mlp.input.gathered"));
        min = d(gathered);
      }
      LL_TRY(ws(dmid, n * h_, "mlp.d_input"));
      if (gpt_) {
        LL_TRY(ops_.template gelu_backward<S>(d(sv.fc1_out), d(dact), d(dact), n * f_));
        LL_TRY(lin_bwd(L, L.up, d(dact), min, d(dmid)));
        dact.reset();
      } else {
        Tensor dup, tmp;
        LL_TRY(ws(dup, n * f_, "mlp.d_up"));
        LL_TRY(ops_.template swiglu_backward<S>(d(sv.gate_out), d(sv.up_out), d(dact), d(dact), d(dup), n * f_));
        LL_TRY(lin_bwd(L, L.gate, d(dact), min, d(dmid)));
        dact.reset();
        LL_TRY(ws(tmp, n * h_, "mlp.d_input_up"));
        LL_TRY(lin_bwd(L, L.up, d(dup), min, d(tmp)));
        dup.reset();
        LL_TRY(ops_.template add_inplace<S>(d(dmid), d(tmp), n * h_));
      }
    }
    gathered.reset();
    if (!moe_) LL_TRY(tp_reduce_input_grad(d(dmid), dlocal, "mlp.d_input_local"));  // column-parallel: partial sums
    LL_TRY(norm_bwd(L.ln2, d(sv.ln2_input), sp_ && !moe_ ? d(dlocal) : d(dmid), dx, true));
    dmid.reset();
    dlocal.reset();
    // ---- attention
    dy = dx;
    if (drop_) {
      LL_TRY(ws(dbranch, ns * h_, "attn.d_out"));
      LL_TRY(ops_.template dropout_backward<S>(dx, sv.attn_mask.template data<uint8_t>(), d(dbranch), ns * h_, p_));
      dy = d(dbranch);
    }
    if (sp_) {
      LL_TRY(sp_gather(gathered, dy, "attn.d_out.gathered"));
      dy = d(gathered);
    }
    Tensor dproj, dq, dk, dv;
    LL_TRY(ws(dproj, n * qw, "attn.d_proj_input"));
    LL_TRY(lin_bwd(L, L.o, dy, dopt(sv.proj_input), d(dproj)));
    dbranch.reset();
    gathered.reset();
    LL_TRY(ws(dq, n * qw, "attn.dq"));
    LL_TRY(ws(dk, n * kvw, "attn.dk"));
    LL_TRY(ws(dv, n * kvw, "attn.dv"));
    {
      const cpu::AttentionDims dm = dims();
      if (cp_ > 1) {
        LL_TRY(cp_attn_bwd(L, d(dproj), d(dq), d(dk), d(dv), seed));
      } else {
        LL_TRY(attn_bwd_kernel({sv.q, sv.k, sv.v, staged_.doc, sv.proj_input, sv.lse, sv.probs, sv.probs_mask, sv.probs_dropped},
                               d(dproj), d(dq), d(dk), d(dv), dm));
      }
    }
    dproj.reset();
    sv.probs.reset();
    sv.probs_mask.reset();
    sv.probs_dropped.reset();
    if (!gpt_) {
      LL_TRY(ops_.template rope_backward<S>(d(dq), staged_.positions, d(dq), n, m.heads / t_, m.head_width(), c_.options.rope_theta));
      LL_TRY(ops_.template rope_backward<S>(d(dk), staged_.positions, d(dk), n, m.kv_heads / t_, m.head_width(), c_.options.rope_theta));
    }
    Tensor tmp;
    const S* xin = dopt(sv.qkv_input);
    if (sp_ && xin != nullptr) {
      LL_TRY(sp_gather(gathered, xin, "attn.qkv_input.gathered"));
      xin = d(gathered);
    }
    LL_TRY(ws(dmid, n * h_, "attn.d_input"));
    LL_TRY(lin_bwd(L, L.q, d(dq), xin, d(dmid)));
    dq.reset();
    LL_TRY(ws(tmp, n * h_, "attn.d_input_kv"));
    LL_TRY(lin_bwd(L, L.k, d(dk), xin, d(tmp)));
    LL_TRY(ops_.template add_inplace<S>(d(dmid), d(tmp), n * h_));
    dk.reset();
    LL_TRY(lin_bwd(L, L.v, d(dv), xin, d(tmp)));
    LL_TRY(ops_.template add_inplace<S>(d(dmid), d(tmp), n * h_));
    dv.reset();
    tmp.reset();
    gathered.reset();
    LL_TRY(tp_reduce_input_grad(d(dmid), dlocal, "attn.d_input_local"));  // column-parallel q, k, v
    LL_TRY(norm_bwd(L.ln1, x, sp_ ? d(dlocal) : d(dmid), dx, true));
    sv.clear();
    return Status::ok();
  }

  // ---------------------------------------------------------------- vocabulary parallel

  // out (ns_, h) = token (+ GPT position) embeddings. With TP each rank looks up the tokens
  // in its vocabulary range [v0_, v0_ + Vl_) (zeros elsewhere; TP rank 0 adds the positions)
  // and the partial rows are summed over TP: all-reduce, or reduce-scatter to this rank's
  // sequence slice with SP.
  Status embed_fwd(const int32_t* tokens, S* out) {
    if (t_ == 1) {
      LL_TRY(ops_.template embedding_forward<S>(tokens, d(wte_), out, n_, h_));
      if (gpt_) LL_TRY(ops_.template embedding_forward<S>(staged_.positions, d(wpe_), out, n_, h_, true));
      return Status::ok();
    }
    Tensor full;
    S* y = out;
    if (sp_) {
      LL_TRY(ws(full, n_ * h_, "embed.partial"));
      y = d(full);
    }
    LL_TRY(ops_.template embedding_forward_shard<S>(tokens, d(wte_), y, n_, h_, v0_, Vl_));
    if (gpt_ && tr_ == 0) LL_TRY(ops_.template embedding_forward<S>(staged_.positions, d(wpe_), y, n_, h_, true));
    if (sp_) return c_.comm->reduce_scatter_sum(y, out, ns_ * h_, c_.storage, Group::tp);
    return tp_sum(y, n_ * h_);
  }
  Status embed_bwd(const int32_t* tokens, const S* dout) {
    if (t_ == 1) return ops_.template embedding_backward<S, G>(tokens, dout, g(gwte_), n_, h_);
    return ops_.template embedding_backward_shard<S, G>(tokens, dout, g(gwte_), n_, h_, v0_, Vl_);
  }

  // Vocabulary-parallel cross-entropy (Megatron; cpu/cross_entropy.h's three passes): z
  // (n, Vl_) this rank's logits in A. The row maxima (all-gathered), the sums of
  // exponentials and the target logits (all-reduced) give every TP rank the full loss; with
  // train, z becomes this rank's dlogits in place (loss_scale / denom * (softmax - onehot),
  // 0 on ignored rows and padded columns). denom 0: counted rows.
  Result<double> vocab_parallel_ce(A* z, const int32_t* targets, double denom, bool train, double loss_scale) {
    const int64_t n = n_;
    // The statistics, (t_ + 3) n values: host scratch outside the accounting on the CPU, as
    // the planner counts none; on a GPU a device workspace (NCCL moves device buffers), a
    // few hundred KiB beside the logits.
    std::vector<A> host;
    Tensor dev;
    A* mx = nullptr;
    if constexpr (Ops::kHostMemory) {
      host.resize(static_cast<size_t>((t_ + 3) * n));
      mx = host.data();
    } else {
      LL_TRY(make(a_, dev, (t_ + 3) * n, kA, Category::workspace, "loss.vocab_parallel_stats"));
      mx = dev.template data<A>();
    }
    A* all = mx + n;
    A* sums = all + t_ * n;
    LL_TRY(ops_.template vocab_parallel_ce_max<A>(z, n, Vl_, Vr_, mx));
    LL_TRY(c_.comm->all_gather(mx, all, n, kA, Group::tp));
    LL_TRY(ops_.template vocab_parallel_ce_sums<A>(z, targets, all, t_, n, Vl_, Vr_, v0_, mx, sums));
    LL_TRY(c_.comm->all_reduce_sum(sums, 2 * n, kA, Group::tp));
    Result<cpu::VocabCeLoss> l = ops_.template vocab_parallel_ce_loss<A>(targets, mx, sums, n);
    if (!l) return l.status();
    const double dn = denom > 0 ? denom : static_cast<double>(l->counted);
    const double loss = dn > 0 ? l->sum / dn : 0;
    if (train) LL_TRY(ops_.template vocab_parallel_ce_backward<A>(z, targets, mx, sums, n, Vl_, Vr_, v0_, dn > 0 ? loss_scale / dn : 0));
    return loss;
  }

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

  Result<double> run(const Batch& b, double loss_scale, double denom, uint64_t seed, bool train) {
    if (!first_ || !last_) return Status::bad_input("executor: a pipeline stage runs through stage_forward/stage_backward");
    Result<double> r = fwd(b, nullptr, nullptr, loss_scale, denom, seed, train);
    if (r && train) {
      if (Status st = bwd(nullptr, nullptr); !st) r = st;
    }
    if (!r) release_all();  // after OOM: leave nothing of the step live
    return r;
  }

  void release_all() {
    for (Layer& L : layers_) L.sv.clear();
    for (Tensor& t : inputs_) t.reset();
    for (Tensor* t : {&head_in_, &logits_, &sm_, &emb_mask_}) t->reset();
  }

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
  };
  void swap_slot(int k) {
    if (static_cast<size_t>(k) >= slots_.size()) slots_.resize(static_cast<size_t>(k) + 1);
    Slot& sl = slots_[static_cast<size_t>(k)];
    if (sl.inputs.size() != inputs_.size()) {
      sl.inputs.resize(inputs_.size());
      sl.sv.resize(layers_.size());
      sl.positions.resize(positions_.size());
    }
    for (size_t i = 0; i < layers_.size(); ++i) std::swap(layers_[i].sv, sl.sv[i]);
    std::swap(inputs_, sl.inputs);
    std::swap(head_in_, sl.head_in);
    std::swap(logits_, sl.logits);
    std::swap(sm_, sl.sm);
    std::swap(emb_mask_, sl.emb_mask);
    std::swap(positions_, sl.positions);
    std::swap(cp_tok_, sl.cp_tok);  // swapping moves the buffers: staged_'s pointers stay valid
    std::swap(cp_tgt_, sl.cp_tgt);
    std::swap(cp_doc_, sl.cp_doc);
    std::swap(doc_, sl.doc);
    std::swap(staged_, sl.staged);
  }

  Result<double> stage_forward(int slot, const Batch& b, const void* input, void* output, double loss_scale, double denom,
                               uint64_t seed) override {
    swap_slot(slot);
    Result<double> r = fwd(b, static_cast<const S*>(input), static_cast<S*>(output), loss_scale, denom, seed, true);
    if (!r) release_all();
    swap_slot(slot);
    return r;
  }
  Status stage_backward(int slot, const Batch&, const void* dout, void* dinput) override {
    swap_slot(slot);
    Status st = bwd(static_cast<const S*>(dout), static_cast<S*>(dinput));
    if (!st) release_all();
    swap_slot(slot);
    return st;
  }

  // Forward of one micro-batch through this stage. input: the previous stage's output
  // (ns_, h) (nullptr on the first stage: the tokens are embedded); output (ns_, h): this
  // stage's output, filled on every stage but the last. Returns the loss on the last stage
  // (0 elsewhere); with train, what backward needs stays in the members.
  Result<double> fwd(const Batch& b, const S* input, S* output, double loss_scale, double denom, uint64_t seed, bool train) {
    const ModelSpec& m = c_.spec;
    const int64_t n = n_, s = S_;
    const Mode mode = train ? Mode::keep : Mode::discard;
    doc_ = b.doc_ids;
    seed_ = seed;
    loss_scale_ = loss_scale;
    denom_ = denom;
    // Positions restart per sequence and per document, over whole sequences (CP: then this
    // rank's slice of each).
    std::vector<int32_t>& pf = cp_ > 1 ? cp_pos_ : positions_;
    const int64_t nf = static_cast<int64_t>(c_.plan.micro_batch) * s;
    pf.resize(static_cast<size_t>(nf));
    for (int64_t i = 0; i < nf; ++i) {
      const int64_t t = i % s;
      pf[static_cast<size_t>(i)] = (t == 0 || doc_ == nullptr || doc_[i] != doc_[i - 1]) ? 0 : pf[static_cast<size_t>(i - 1)] + 1;
    }
    Batch lb = b;
    if (cp_ > 1) {  // this rank's rows of every sequence (cp_position)
      cp_tok_.resize(static_cast<size_t>(n));
      cp_tgt_.resize(static_cast<size_t>(n));
      cp_doc_.resize(doc_ ? static_cast<size_t>(n) : 0);
      for (int64_t i = 0; i < n; ++i) {
        const auto gi = static_cast<size_t>((i / sl_) * s + cp_position(i % sl_));
        positions_[static_cast<size_t>(i)] = pf[gi];
        cp_tok_[static_cast<size_t>(i)] = b.tokens[gi];
        cp_tgt_[static_cast<size_t>(i)] = b.targets[gi];
        if (doc_) cp_doc_[static_cast<size_t>(i)] = doc_[gi];
      }
      lb = Batch{cp_tok_.data(), cp_tgt_.data(), doc_ ? cp_doc_.data() : nullptr};
    }
    LL_TRY(ops_.stage_batch(lb, positions_.data(), n, cp_ > 1 ? doc_ : nullptr, nf, staged_));
    const int nl = static_cast<int>(layers_.size());
    auto input_cat = [&](int i) {  // layer i's input (i == nl: the final norm's) kept?
      const bool keep = train && (i == nl ? last_ : layers_[static_cast<size_t>(i)].ctx.grad_flows);
      return keep ? Category::activations : Category::workspace;
    };
    const int64_t ns = ns_;  // tokens of this rank's sequence slice (n without SP)
    const char* in_name = nl > 0 ? "ln1.input" : "final_norm.input";
    set_where(Phase::forward, -1, first_ ? "embedding" : "stage input");
    LL_TRY(make(a_, inputs_[0], ns * h_, c_.storage, input_cat(0), in_name));
    if (first_) {  // ---- embedding -> layer 0's ln1.input
      LL_TRY(use_weights(emb_unit(), nl > 0 ? layer_unit(0) : head_unit()));
      LL_TRY(embed_fwd(staged_.tokens, d(inputs_[0])));
      release_weights(emb_unit());
      if (drop_) {
        const bool keep = train && embed_trainable_;
        LL_TRY(make(a_, emb_mask_, ns * h_, DType::u8, keep ? Category::activations : Category::workspace, "embed.dropout_mask"));
        LL_TRY(ops_.template dropout_forward<S>(d(inputs_[0]), d(inputs_[0]), emb_mask_.template data<uint8_t>(), ns * h_, p_, site_seed(seed, -1, 0)));
        if (!keep) emb_mask_.reset();
      }
    } else {
      LL_TRY(ops_.copy(inputs_[0].raw(), input, inputs_[0].bytes()));
    }
    // ---- layers
    for (int i = 0; i < nl; ++i) {
      Layer& L = layers_[static_cast<size_t>(i)];
      set_where(Phase::forward, L.index, "layer");
      LL_TRY(use_weights(layer_unit(i), i + 1 < nl ? layer_unit(i + 1) : head_unit()));
      LL_TRY(layer_fwd(L, d(inputs_[static_cast<size_t>(i)]), inputs_[static_cast<size_t>(i + 1)], input_cat(i + 1), mode, seed));
      release_weights(layer_unit(i));
      if (!train || !L.ctx.grad_flows) inputs_[static_cast<size_t>(i)].reset();
      if (!train) L.sv.clear();
    }
    if (!last_) {  // the next stage's input; nothing of it stays here
      LL_TRY(ops_.copy(output, inputs_[static_cast<size_t>(nl)].raw(), inputs_[static_cast<size_t>(nl)].bytes()));
      inputs_[static_cast<size_t>(nl)].reset();
      return 0.0;
    }
    // ---- final norm, head, loss
    set_where(Phase::forward, -1, "final_norm");
    LL_TRY(make(a_, head_in_, ns * h_, c_.storage, train ? Category::activations : Category::workspace, "head.input"));
    LL_TRY(use_weights(head_unit(), -1));
    LL_TRY(norm_fwd(fnorm_, d(inputs_[static_cast<size_t>(nl)]), d(head_in_)));
    Tensor gathered;  // SP: the head's full-sequence input
    if (sp_) LL_TRY(sp_gather(gathered, d(head_in_), "head.input.gathered"));
    if (!train) inputs_[static_cast<size_t>(nl)].reset();
    set_where(Phase::forward, -1, "head");
    Tensor& W = m.tied_embeddings ? wte_ : whead_;
    // The backend may pad the logits' rows (ld >= Vl_: aligned rows for the GPU's GEMMs).
    const int64_t ld = ops_.logits_row_stride(Vl_);
    LL_TRY(make(a_, logits_, n * ld, c_.storage, Category::logits_loss, "logits"));
    if (ld == Vl_)
      LL_TRY(lin_base_fwd(sp_ ? d(gathered) : d(head_in_), d(W), nullptr, d(logits_), n, h_, Vl_));
    else
      LL_TRY(ops_.template linear_forward_ld<S>(sp_ ? d(gathered) : d(head_in_), d(W), d(logits_), n, h_, Vl_, ld));
    release_weights(head_unit());
    gathered.reset();
    set_where(Phase::forward, -1, "loss");
    LL_TRY(make(a_, sm_, n * Vl_, kA, Category::logits_loss, "loss.softmax_fp32"));
    if (ld == Vl_) LL_TRY(ops_.template cast<S, A>(d(logits_), sm_.template data<A>(), n * Vl_));
    else LL_TRY(ops_.template cast_rows<S, A>(d(logits_), ld, sm_.template data<A>(), Vl_, n, Vl_));
    double loss = 0;
    if (t_ == 1) {
      Result<double> l = ops_.template cross_entropy_forward<A>(sm_.template data<A>(), staged_.targets, n, V_, denom);
      if (!l) return l.status();
      loss = *l;
    } else {
      Result<double> l = vocab_parallel_ce(sm_.template data<A>(), staged_.targets, denom, train, loss_scale);
      if (!l) return l.status();
      loss = *l;
    }
    if (!train) release_all();
    return loss;
  }

  // Backward of the micro-batch fwd kept. dout: the gradient of this stage's output
  // (nullptr on the last stage: the loss); dinput: the gradient of its input, filled on
  // every stage but the first.
  Status bwd(const S* dout, S* dinput) {
    const ModelSpec& m = c_.spec;
    const int64_t n = n_, ns = ns_;
    const int nl = static_cast<int>(layers_.size());
    Tensor dx, gathered;
    // The last stage makes it after the loss's fp32 softmax is freed: never beside it.
    if (!last_) LL_TRY(ws(dx, ns * h_, "layer.d_output"));
    if (last_) {
      set_where(Phase::backward, -1, "loss");
      if (t_ == 1)
        LL_TRY(ops_.template cross_entropy_backward<A>(sm_.template data<A>(), staged_.targets, sm_.template data<A>(), n, V_, loss_scale_, denom_));
      const int64_t ld = ops_.logits_row_stride(Vl_);  // dlogits over the logits
      if (ld == Vl_) LL_TRY(ops_.template cast<A, S>(sm_.template data<A>(), d(logits_), n * Vl_));
      else LL_TRY(ops_.template cast_rows<A, S>(sm_.template data<A>(), Vl_, d(logits_), ld, n, Vl_));
      sm_.reset();
      LL_TRY(ws(dx, ns * h_, "layer.d_output"));
      set_where(Phase::backward, -1, "head");
      Tensor& W = m.tied_embeddings ? wte_ : whead_;
      Tensor& gW = m.tied_embeddings ? gwte_ : gwhead_;
      Tensor dhead, dlocal;
      const int top = nl > 0 && layers_[static_cast<size_t>(nl - 1)].ctx.grad_flows ? layer_unit(nl - 1) : -1;
      LL_TRY(use_weights(head_unit(), top));
      if (head_trainable_) LL_TRY(begin_grads(head_unit()));
      if (sp_) LL_TRY(sp_gather(gathered, d(head_in_), "head.input.gathered"));
      LL_TRY(ws(dhead, n * h_, "head.d_input"));
      if (ld == Vl_)
        LL_TRY(lin_base_bwd(d(logits_), sp_ ? d(gathered) : d(head_in_), d(W), d(dhead), g(gW), nullptr, n, h_, Vl_));
      else
        LL_TRY(ops_.template linear_backward_ld<S, G>(d(logits_), ld, sp_ ? d(gathered) : d(head_in_), d(W), d(dhead), g(gW), n,
                                                      h_, Vl_));
      gathered.reset();
      LL_TRY(tp_reduce_input_grad(d(dhead), dlocal, "head.d_input_local"));  // vocabulary-parallel head: partial sums
      logits_.reset();
      head_in_.reset();
      set_where(Phase::backward, -1, "final_norm");
      LL_TRY(norm_bwd(fnorm_, d(inputs_[static_cast<size_t>(nl)]), sp_ ? d(dlocal) : d(dhead), d(dx), false));
      release_weights(head_unit());
      if (head_trainable_) LL_TRY(end_grads(head_unit()));
    } else {
      LL_TRY(ops_.copy(dx.raw(), dout, dx.bytes()));
    }
    inputs_[static_cast<size_t>(nl)].reset();
    for (int i = nl - 1; i >= 0; --i) {
      Layer& L = layers_[static_cast<size_t>(i)];
      if (!L.ctx.grad_flows) break;
      set_where(Phase::backward, L.index, "layer");
      const int below = i > 0 && layers_[static_cast<size_t>(i - 1)].ctx.grad_flows ? layer_unit(i - 1) : -1;
      LL_TRY(use_weights(layer_unit(i), below));
      LL_TRY(begin_grads(layer_unit(i)));
      LL_TRY(layer_bwd(L, d(inputs_[static_cast<size_t>(i)]), d(dx), seed_));
      release_weights(layer_unit(i));
      LL_TRY(end_grads(layer_unit(i)));
      inputs_[static_cast<size_t>(i)].reset();
    }
    if (!first_) {
      LL_TRY(ops_.copy(dinput, dx.raw(), dx.bytes()));
    } else if (embed_trainable_) {
      set_where(Phase::backward, -1, "embedding");
      if (emb_mask_.defined()) LL_TRY(ops_.template dropout_backward<S>(d(dx), emb_mask_.template data<uint8_t>(), d(dx), ns * h_, p_));
      const S* dfull = d(dx);
      if (sp_) {  // the transpose of the forward's reduce-scatter
        LL_TRY(sp_gather(gathered, d(dx), "embed.d_output.gathered"));
        dfull = d(gathered);
      }
      LL_TRY(begin_grads(emb_unit()));
      LL_TRY(embed_bwd(staged_.tokens, dfull));
      if (gpt_) LL_TRY(ops_.template embedding_backward<S, G>(staged_.positions, dfull, g(gwpe_), n, h_));
      LL_TRY(end_grads(emb_unit()));
    }
    release_all();
    return Status::ok();
  }

  TrackingAllocator& a_;
  ModelConfig c_;
  bool gpt_ = true, drop_ = false, embed_trainable_ = true, head_trainable_ = true;
  int64_t h_ = 0, n_ = 0, V_ = 0, f_ = 0;  // f_: this rank's MLP width (ffn_hidden / t)
  int t_ = 1, tr_ = 0;                      // TP size and this rank's TP index
  bool sp_ = false;                          // sequence parallel (t_ > 1 and plan.sp)
  // MoE (see moe_fwd): E_ routed experts, top-k_, expert width fe_; ep_ ranks of Group::ep,
  // this one (er_) holding experts e0_ .. e0_ + El_ - 1; cap_ rows per expert and routing
  // rank, rows_ = E_ * cap_; fs_: this rank's shared-expert width (0: none).
  bool moe_ = false;
  int E_ = 0, k_ = 0, ep_ = 1, er_ = 0;
  int64_t El_ = 0, e0_ = 0, fe_ = 0, cap_ = 0, rows_ = 0, fs_ = 0;
  int64_t ns_ = 0;                           // tokens in this rank's sequence slice: n_ / t_ with SP, else n_
  int64_t qw_ = 0, kvw_ = 0, Vl_ = 0, v0_ = 0;  // local q / kv widths, vocab rows [v0_, v0_ + Vl_)
  int64_t Vr_ = 0;                              // of which real tokens (the rest pad the vocabulary to a multiple of tp)
  double p_ = 0, lora_scale_ = 0;
  Tensor wte_, gwte_, wpe_, gwpe_, whead_, gwhead_;
  Norm fnorm_;
  std::vector<Layer> layers_;
  std::vector<Tensor> inputs_;  // inputs_[i]: local layer i's ln1.input; inputs_[L]: the stage output / final_norm.input
  Tensor head_in_, logits_, sm_, emb_mask_;  // the micro-batch in flight (see Slot)
  std::vector<Slot> slots_;
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

#undef LL_TRY

}  // namespace llmplan::exec::detail
