// ModelImpl's construction: every parameter (and its gradient, LoRA adapters, MoE experts and
// router) allocated by the recipe's names and TP/EP splits, initialised from the seed.
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::init() -> Status {
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
  ow_ = m.v_width() / t_;
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
    fs_ = m.shared_ffn_width() / t_;
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
    // Multi-token prediction's modules, with the head (their block of the last layer's kind,
    // numbered after the main layers; trained with the head, frozen under LoRA).
    mtp_.resize(static_cast<size_t>(std::max(0, m.mtp_layers)));
    for (int k = 0; k < m.mtp_layers; ++k) {
      MtpDepth& md = mtp_[static_cast<size_t>(k)];
      const std::string pre = "mtp" + std::to_string(k) + ".";
      LL_TRY(init_norm(md.hnorm, pre + "hnorm", head_trainable_));
      LL_TRY(init_norm(md.enorm, pre + "enorm", head_trainable_));
      md.block.index = m.layers + k;
      md.block.ctx = model_layer_context(c_, m.layers - 1);
      md.block.ctx.base_trainable = head_trainable_;
      md.block.ctx.lora_targets = 0;
      md.block.policy = mtp_recompute(c_.plan);
      md.block.recipe = saved_tensors_per_layer(m, md.block.ctx);
      LL_TRY(init_linear(md.block, md.eh, Projection::o, Par::none, 2 * h_, h_, pre + "eh_proj", false));
      LL_TRY(init_layer_params(md.block));
      LL_TRY(init_norm(md.fnorm, pre + "final_norm", head_trainable_));
    }
    units_.push_back(since(at));
    if (m.tied_embeddings) units_.back().push_back(wte_index);
  }
  positions_.resize(static_cast<size_t>(n_));
  inputs_.resize(layers_.size() + 1);
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::param(Tensor& w, Tensor& g, TpSplit split, const std::string& name, bool trainable, bool decay, double std, double constant, bool shared_copy, bool nf4) -> Status {
  uint64_t key = 1469598103934665603ull;  // FNV-1a of the name
  for (char ch : name) key = (key ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  key = cpu::splitmix64_at(c_.options.seed, key);
  const int64_t full = split.rows * split.cols;
  if (t_ == 1) split.dim = -1;
  const int64_t numel = split.dim < 0 ? full : full / t_;
  if (nf4) LL_TRY(make(a_, w, cpu::nf4_bytes(numel), DType::u8, Category::weights, name + ".nf4"));
  else LL_TRY(make(a_, w, numel, c_.storage, Category::weights, name));
  std::vector<double> whole;  // nf4: the drawn values, quantized at the end
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
    if (nf4) whole.insert(whole.end(), v.begin(), v.end());
    else LL_TRY(ops_.fill(w, v, at));
  }
  if (nf4) {
    std::vector<uint8_t> q(static_cast<size_t>(w.numel()));
    cpu::nf4_quantize(whole.data(), numel, q.data());
    LL_TRY(ops_.upload(w.raw(), q.data(), w.numel()));
  }
  if (trainable) {
    Result<Tensor> r = ops_.zeros(Shape{numel}, c_.grad, Category::gradients, name + ".grad");
    if (!r) return r.status();
    g = std::move(*r);
  }
  params_.push_back({name, &w, trainable ? &g : nullptr, decay, split, shared_copy});
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::init_linear(Layer& L, Linear& li, Projection p, Par par, int64_t in, int64_t out, const std::string& name, bool adapters) -> Status {
  li.proj = p;
  li.par = t_ > 1 ? par : Par::none;
  li.in = par == Par::row ? in / t_ : in;
  li.out = par == Par::column ? out / t_ : out;
  const std::string base = name.empty() ? "layer" + std::to_string(L.index) + "." + kProjName[static_cast<int>(p)] : name;
  const bool train = L.ctx.base_trainable;
  li.nf4 = c_.job.qlora();  // QLoRA: every base linear of a layer in NF4 (bitsandbytes replaces nn.Linear)
  LL_TRY(param(li.w, li.gw, {par == Par::column ? 0 : par == Par::row ? 1 : -1, out, in}, base + ".weight", train, true,
               c_.options.init_std, 0, false, li.nf4));
  // Biases: every projection of a GPT block; q/k/v (and o) of a Llama-family block with
  // attention_bias (Qwen2's qkv, HF attention_bias true); never on MoE experts otherwise.
  const bool attn = p == Projection::q || p == Projection::k || p == Projection::v;
  const bool bias = gpt_ || (attn && c_.spec.qkv_bias()) || (p == Projection::o && c_.spec.o_bias());
  if (bias) LL_TRY(param(li.b, li.gb, {par == Par::column ? 1 : -1, 1, out}, base + ".bias", train, false, 0, 0.0));
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::init_layer(Layer& L, int local) -> Status {
  const ModelSpec& m = c_.spec;
  const int i = first_layer_ + local;
  L.index = i;
  L.ctx = model_layer_context(c_, i);
  // The planner numbers a stage's layers across its chunks (full_k: per chunk).
  const int nl = static_cast<int>(layers_.size()), v = std::max(1, c_.plan.vpp);
  L.policy = layer_recompute(c_.plan, c_.chunk * nl + local, nl * v);
  L.recipe = saved_tensors_per_layer(m, L.ctx);
  return init_layer_params(L);
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::init_layer_params(Layer& L) -> Status {
  const ModelSpec& m = c_.spec;
  const int i = L.index;
  const std::string pre = "layer" + std::to_string(i);
  LL_TRY(init_norm(L.ln1, pre + ".ln1", L.ctx.base_trainable));
  if (m.mla.enabled()) {
    // transformers DeepseekV3Attention's q_a_proj, q_a_layernorm, q_b_proj (q_proj without
    // query compression), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; no biases, no
    // adapters (check_model_config refuses LoRA on q, k and v here).
    const MlaSpec& a = m.mla;
    const bool train = L.ctx.base_trainable;
    auto latent_norm = [&](Norm& nm, const std::string& name, int64_t width) {
      return param(nm.w, nm.gw, {-1, 1, width}, name, train, false, 0, 1.0);
    };
    if (a.q_lora_rank > 0) {
      LL_TRY(init_linear(L, L.qa, Projection::q, Par::none, h_, a.q_lora_rank, pre + ".q_a", false));
      LL_TRY(latent_norm(L.qan, pre + ".q_a_norm.weight", a.q_lora_rank));
      LL_TRY(init_linear(L, L.q, Projection::q, Par::column, a.q_lora_rank, m.q_width(), pre + ".q_b", false));
    } else {
      LL_TRY(init_linear(L, L.q, Projection::q, Par::column, h_, m.q_width(), pre + ".q", false));
    }
    LL_TRY(init_linear(L, L.kva, Projection::k, Par::none, h_, a.kv_lora_rank + a.qk_rope_head_dim, pre + ".kv_a", false));
    LL_TRY(latent_norm(L.kvan, pre + ".kv_a_norm.weight", a.kv_lora_rank));
    LL_TRY(init_linear(L, L.kvb, Projection::k, Par::column, a.kv_lora_rank, m.heads * (a.qk_nope_head_dim + a.v_head_dim),
                       pre + ".kv_b", false));
  } else {
    LL_TRY(init_linear(L, L.q, Projection::q, Par::column, h_, m.q_width()));
    LL_TRY(init_linear(L, L.k, Projection::k, Par::column, h_, m.kv_width()));
    LL_TRY(init_linear(L, L.v, Projection::v, Par::column, h_, m.kv_width()));
  }
  LL_TRY(init_linear(L, L.o, Projection::o, Par::row, m.v_width(), h_));
  if (m.attention_sinks)  // one logit per head, split by TP with the heads (transformers GptOssAttention.sinks)
    LL_TRY(param(L.sinks, L.gsinks, {1, 1, m.heads}, pre + ".attn.sinks", L.ctx.base_trainable, false, 0, 0.0));
  if (m.qk_norm) {
    LL_TRY(param(L.qn.w, L.qn.gw, {-1, 1, m.head_width()}, pre + ".q_norm.weight", L.ctx.base_trainable, false, 0, 1.0));
    LL_TRY(param(L.kn.w, L.kn.gw, {-1, 1, m.head_width()}, pre + ".k_norm.weight", L.ctx.base_trainable, false, 0, 1.0));
  }
  LL_TRY(init_norm(L.ln2, pre + ".ln2", L.ctx.base_trainable));
  if (m.post_norms) {  // Gemma's post_attention_layernorm and post_feedforward_layernorm
    LL_TRY(init_norm(L.pn1, pre + ".post_attn_norm", L.ctx.base_trainable));
    LL_TRY(init_norm(L.pn2, pre + ".post_mlp_norm", L.ctx.base_trainable));
  }
  if (moe_layer(L)) return init_moe(L);
  if (!gpt_) LL_TRY(init_linear(L, L.gate, Projection::gate, Par::column, h_, m.ffn_hidden));
  LL_TRY(init_linear(L, L.up, Projection::up, Par::column, h_, m.ffn_hidden));
  LL_TRY(init_linear(L, L.down, Projection::down, Par::row, m.ffn_hidden, h_));
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::init_moe(Layer& L) -> Status {
  const std::string pre = "layer" + std::to_string(L.index) + ".moe.";
  const bool train = L.ctx.base_trainable;
  auto& mo = L.moe;
  LL_TRY(param(mo.router, mo.grouter, {-1, E_, h_}, pre + "router.weight", train, true, c_.options.init_std));
  // gpt-oss (moe.expert_bias; transformers GptOssTopKRouter.bias, GptOssExperts
  // gate_up_proj_bias and down_proj_bias): the router's bias and every routed expert's.
  const bool expert_bias = !gpt_ && c_.spec.moe.expert_bias;  // a GPT expert has its biases already
  if (expert_bias) LL_TRY(param(mo.router_bias, mo.grouter_bias, {-1, 1, E_}, pre + "router.bias", train, false, 0, 0.0));
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
    if (expert_bias) {
      LL_TRY(param(mo.gate[i].b, mo.gate[i].gb, {-1, 1, fe_}, ex + "gate.bias", train, false, 0, 0.0));
      LL_TRY(param(mo.up[i].b, mo.up[i].gb, {-1, 1, fe_}, ex + "up.bias", train, false, 0, 0.0));
      LL_TRY(param(mo.down[i].b, mo.down[i].gb, {-1, 1, h_}, ex + "down.bias", train, false, 0, 0.0));
    }
    for (size_t k = at; k < params_.size(); ++k) params_[k].expert = true;
  }
  if (fs_ > 0) {
    const int64_t fs = c_.spec.shared_ffn_width();
    // LoRA MLP targets adapt the routed experts only (the planner's count_params).
    if (!gpt_) LL_TRY(init_linear(L, mo.sgate, Projection::gate, Par::column, h_, fs, pre + "shared.gate", false));
    LL_TRY(init_linear(L, mo.sup, Projection::up, Par::column, h_, fs, pre + "shared.up", false));
    LL_TRY(init_linear(L, mo.sdown, Projection::down, Par::row, fs, h_, pre + "shared.down", false));
  }
  return Status::ok();
}

}  // namespace llmplan::exec::detail
