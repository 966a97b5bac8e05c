// ModelImpl's transformer layer forward: keeps exactly the recipe's saved tensors for the
// layer's recompute policy.
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::qkv_fwd(Layer& L, Mode mode) -> Status {
  const ModelSpec& m = c_.spec;
  Saved& sv = L.sv;
  const int64_t n = n_, qw = qw_, kvw = kvw_;
  Tensor gathered;  // SP: the full-sequence input of the column-parallel GEMMs
  LL_TRY(lmake(L, sv.q, "attn.q", n * qw, c_.storage, mode));
  LL_TRY(lmake(L, sv.k, "attn.k", n * kvw, c_.storage, mode));
  LL_TRY(lmake(L, sv.v, "attn.v", n * kvw, c_.storage, mode));
  if (sp_) LL_TRY(sp_gather(gathered, d(sv.qkv_input), "attn.qkv_input.gathered"));
  const S* xin = sp_ ? d(gathered) : d(sv.qkv_input);
  if (m.qk_norm) {  // project, then normalise each head (Qwen3): attn.q/k hold the normalised heads
    LL_TRY(lmake(L, sv.q_norm_input, "attn.q_norm_input", n * qw, c_.storage, mode));
    LL_TRY(lmake(L, sv.k_norm_input, "attn.k_norm_input", n * kvw, c_.storage, mode));
    LL_TRY(lin_fwd(L, L.q, xin, d(sv.q_norm_input), mode));
    LL_TRY(lin_fwd(L, L.k, xin, d(sv.k_norm_input), mode));
    LL_TRY(head_norm_fwd(L.qn, d(sv.q_norm_input), d(sv.q), m.heads / t_));
    LL_TRY(head_norm_fwd(L.kn, d(sv.k_norm_input), d(sv.k), m.kv_heads / t_));
  } else {
    LL_TRY(lin_fwd(L, L.q, xin, d(sv.q), mode));
    LL_TRY(lin_fwd(L, L.k, xin, d(sv.k), mode));
  }
  LL_TRY(lin_fwd(L, L.v, xin, d(sv.v), mode));
  gathered.reset();
  if (!gpt_) {
    LL_TRY(ops_.template rope_forward<S>(d(sv.q), staged_.positions, d(sv.q), n, m.heads / t_, m.head_width(), c_.options.rope_theta));
    LL_TRY(ops_.template rope_forward<S>(d(sv.k), staged_.positions, d(sv.k), n, m.kv_heads / t_, m.head_width(), c_.options.rope_theta));
  }
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::layer_fwd(Layer& L, const S* x, Tensor& out, Category out_cat, Mode mode, uint64_t seed) -> Status {
  const ModelSpec& m = c_.spec;
  Saved& sv = L.sv;
  const int64_t n = n_, ns = ns_;  // ns: tokens of this rank's sequence slice (SP)
  // ---- attention
  if (m.attention_sinks) LL_TRY(load_sinks(L));
  LL_TRY(lmake(L, sv.qkv_input, "attn.qkv_input", ns * h_, c_.storage, mode));
  LL_TRY(norm_fwd(L.ln1, x, d(sv.qkv_input)));
  LL_TRY(m.mla.enabled() ? mla_fwd(L, mode) : qkv_fwd(L, mode));
  Tensor gathered;  // SP: the full-sequence input of the MLP's column-parallel GEMMs
  LL_TRY(lmake(L, sv.proj_input, "attn.proj_input", n * ow_, c_.storage, mode));
  if (cp_ > 1) {
    LL_TRY(cp_attn_fwd(L, mode, seed));
  } else {
    LL_TRY(attn_fwd_kernel(L, d(sv.q), d(sv.k), d(sv.v), staged_.doc, dims(L), d(sv.proj_input), mode, seed));
  }
  Tensor branch;
  LL_TRY(ws(branch, ns * h_, "attn.out"));
  LL_TRY(lin_fwd(L, L.o, d(sv.proj_input), d(branch), mode));
  if (drop_) {
    LL_TRY(lmake(L, sv.attn_mask, "attn.resid_dropout_mask", ns * h_, DType::u8, mode));
    LL_TRY(ops_.template dropout_forward<S>(d(branch), d(branch), sv.attn_mask.template data<uint8_t>(), ns * h_, p_, site_seed(seed, L.index, 2)));
  }
  if (m.post_norms) LL_TRY(post_norm_fwd(L, L.pn1, sv.attn_post_in, "attn.post_norm_input", d(branch), mode));
  LL_TRY(lmake(L, sv.ln2_input, "ln2.input", ns * h_, c_.storage, mode));
  LL_TRY(ops_.template add<S>(x, d(branch), d(sv.ln2_input), ns * h_));
  // ---- MLP
  LL_TRY(lmake(L, sv.mlp_input, "mlp.input", ns * h_, c_.storage, mode));
  LL_TRY(norm_fwd(L.ln2, d(sv.ln2_input), d(sv.mlp_input)));
  if (moe_layer(L)) {
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
  if (m.post_norms) LL_TRY(post_norm_fwd(L, L.pn2, sv.mlp_post_in, "mlp.post_norm_input", d(branch), mode));
  LL_TRY(make(a_, out, ns * h_, c_.storage, out_cat, &L != &layers_.back() ? "ln1.input" : last_ ? "final_norm.input" : "stage.output"));
  LL_TRY(ops_.template add<S>(d(sv.ln2_input), d(branch), d(out), ns * h_));
  if (mode != Mode::recompute) drop_transients(sv);
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::drop_transients(Saved& sv) -> void {
  for (Tensor* t : {&sv.qkv_input, &sv.q, &sv.k, &sv.v, &sv.lse, &sv.probs, &sv.probs_mask, &sv.probs_dropped,
                    &sv.proj_input, &sv.attn_mask, &sv.ln2_input, &sv.mlp_input, &sv.fc1_out, &sv.gate_out,
                    &sv.up_out, &sv.act_out, &sv.mlp_mask, &sv.router_probs, &sv.expert_input, &sv.expert_output,
                    &sv.sh_fc1, &sv.sh_gate, &sv.sh_up, &sv.sh_act, &sv.q_norm_input, &sv.k_norm_input, &sv.attn_post_in,
                    &sv.mlp_post_in, &sv.q_latent, &sv.q_latent_norm, &sv.kv_latent, &sv.kv_latent_norm})
    if (t->defined() && t->category() != Category::activations) t->reset();
  for (Tensor& t : sv.lora_z)
    if (t.defined() && t.category() != Category::activations) t.reset();
}

}  // namespace llmplan::exec::detail
