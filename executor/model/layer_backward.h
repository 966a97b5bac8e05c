// ModelImpl's transformer layer backward: recomputes what the policy dropped, then the
// gradients of the MLP and attention halves.
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::layer_bwd(Layer& L, const S* x, S* dx, uint64_t seed) -> Status {
  const ModelSpec& m = c_.spec;
  const int64_t n = n_, ns = ns_, qw = qw_, kvw = kvw_;
  if (L.policy == LayerRecompute::full) {  // re-run the forward; its output is discarded
    Tensor out;
    L.sv.clear();
    LL_TRY(layer_fwd(L, x, out, Category::workspace, Mode::recompute, seed));
  } else if (L.policy == LayerRecompute::selective && !c_.plan.flash_attention && cp_ == 1 && !m.mla.enabled()) {
    // (CP: recomputed below; latent attention: its q, k and v first, below)
    LL_TRY(recompute_scores(L, seed));
  }
  Saved& sv = L.sv;
  // ---- MLP
  Tensor dbranch, dact, dmid, gathered, dlocal, dpost;
  const S* dy = dx;
  if (m.post_norms) LL_TRY(post_norm_bwd(L.pn2, sv.mlp_post_in, dx, dpost, "mlp.d_post_norm_input", dy));
  if (drop_) {
    LL_TRY(ws(dbranch, ns * h_, "mlp.d_out"));
    LL_TRY(ops_.template dropout_backward<S>(dy, sv.mlp_mask.template data<uint8_t>(), d(dbranch), ns * h_, p_));
    dy = d(dbranch);
  }
  const bool moe = moe_layer(L);
  if (sp_ && !moe) {  // row-parallel backward needs the full-sequence output gradient
    LL_TRY(sp_gather(gathered, dy, "mlp.d_out.gathered"));
    dy = d(gathered);
  }
  if (moe) {  // this rank's tokens in and out; moe_bwd gathers for the shared experts itself
    LL_TRY(ws(dmid, ns * h_, "mlp.d_input"));
    LL_TRY(moe_bwd(L, dy, d(dmid)));
    dbranch.reset();
    dpost.reset();
  } else {
    LL_TRY(ws(dact, n * f_, "mlp.d_act"));
    LL_TRY(lin_bwd(L, L.down, dy, dopt(sv.act_out), d(dact)));
    dbranch.reset();
    dpost.reset();
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
  if (!moe) LL_TRY(tp_reduce_input_grad(d(dmid), dlocal, "mlp.d_input_local"));  // column-parallel: partial sums
  LL_TRY(norm_bwd(L.ln2, d(sv.ln2_input), sp_ && !moe ? d(dlocal) : d(dmid), dx, true));
  dmid.reset();
  dlocal.reset();
  // ---- attention
  dy = dx;
  if (m.post_norms) LL_TRY(post_norm_bwd(L.pn1, sv.attn_post_in, dx, dpost, "attn.d_post_norm_input", dy));
  if (drop_) {
    LL_TRY(ws(dbranch, ns * h_, "attn.d_out"));
    LL_TRY(ops_.template dropout_backward<S>(dy, sv.attn_mask.template data<uint8_t>(), d(dbranch), ns * h_, p_));
    dy = d(dbranch);
  }
  if (sp_) {
    LL_TRY(sp_gather(gathered, dy, "attn.d_out.gathered"));
    dy = d(gathered);
  }
  Tensor dproj, dq, dk, dv;
  LL_TRY(ws(dproj, n * ow_, "attn.d_proj_input"));
  LL_TRY(lin_bwd(L, L.o, dy, dopt(sv.proj_input), d(dproj)));
  dbranch.reset();
  dpost.reset();
  gathered.reset();
  const bool mla = m.mla.enabled();
  if (mla && L.policy == LayerRecompute::selective) {  // q, k, v from the kept latents (mla_up_proj)
    LL_TRY(mla_up(L, nullptr, Mode::recompute));
    if (!c_.plan.flash_attention) LL_TRY(recompute_scores(L, seed));
  }
  LL_TRY(ws(dq, n * qw, "attn.dq"));
  LL_TRY(ws(dk, n * (mla ? qw : kvw), "attn.dk"));
  LL_TRY(ws(dv, n * (mla ? ow_ : kvw), "attn.dv"));
  {
    const cpu::AttentionDims dm = dims(L);
    if (cp_ > 1) {
      LL_TRY(cp_attn_bwd(L, d(dproj), d(dq), d(dk), d(dv), seed));
    } else {
      LL_TRY(attn_bwd_kernel({sv.q, sv.k, sv.v, staged_.doc, sv.proj_input, sv.lse, sv.probs, sv.probs_mask, sv.probs_dropped},
                             d(dproj), d(dq), d(dk), d(dv), dm));
    }
    if (m.attention_sinks && L.gsinks.defined()) LL_TRY(sinks_bwd(L, cp_ > 1 ? cp_dims(L) : dm, d(dproj)));
  }
  dproj.reset();
  sv.probs.reset();
  sv.probs_mask.reset();
  sv.probs_dropped.reset();
  if (mla) {
    if (L.policy == LayerRecompute::selective) {  // re-made for the kernel only: not left for a split backward's W
      sv.q.reset();
      sv.k.reset();
      sv.v.reset();
    }
    Tensor ddown;  // (ns, h): through the down projections, whole on this rank's tokens
    if (m.mla.q_lora_rank == 0) LL_TRY(ws(dmid, n * h_, "attn.d_input"));
    LL_TRY(mla_bwd(L, dq, dk, dv, ddown, dopt(dmid)));
    const S* dln1 = d(ddown);
    if (dmid.defined()) {  // the uncompressed q projection's TP-partial part, then the rest
      LL_TRY(tp_reduce_input_grad(d(dmid), dlocal, "attn.d_input_local"));
      S* whole = sp_ ? d(dlocal) : d(dmid);
      LL_TRY(ops_.template add_inplace<S>(whole, d(ddown), ns * h_));
      dln1 = whole;
    }
    LL_TRY(norm_bwd(L.ln1, x, dln1, dx, true));
    if (!split_) sv.clear();
    return Status::ok();
  }
  if (!gpt_) {
    LL_TRY(ops_.template rope_backward<S>(d(dq), staged_.positions, d(dq), n, m.heads / t_, m.head_width(), c_.options.rope_theta));
    LL_TRY(ops_.template rope_backward<S>(d(dk), staged_.positions, d(dk), n, m.kv_heads / t_, m.head_width(), c_.options.rope_theta));
  }
  if (m.qk_norm) {  // through the per-head RMSNorms to the projections' outputs
    Tensor dq_in, dk_in;
    LL_TRY(ws(dq_in, n * qw, "attn.dq_norm_input"));
    LL_TRY(head_norm_bwd(L.qn, d(sv.q_norm_input), d(dq), d(dq_in), m.heads / t_));
    dq = std::move(dq_in);
    LL_TRY(ws(dk_in, n * kvw, "attn.dk_norm_input"));
    LL_TRY(head_norm_bwd(L.kn, d(sv.k_norm_input), d(dk), d(dk_in), m.kv_heads / t_));
    dk = std::move(dk_in);
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
  if (!split_) sv.clear();  // a split backward's W reads the linears' saved inputs
  return Status::ok();
}

}  // namespace llmplan::exec::detail
