// ModelImpl's multi-head latent attention (model_class.h "latent attention"): the down
// projections and latent norms, the up projections into the q, k and v the attention
// kernels read (with values narrower than queries and keys: AttentionDims::v_dim), and the
// backward of all of it.
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::rope_columns(S* x, int64_t heads, int64_t width, int64_t off, int64_t r, bool forward) -> Status {
  constexpr int64_t es = sizeof(S);
  Tensor part;
  LL_TRY(ws(part, n_ * heads * r, "mla.rope_columns"));
  LL_TRY(ops_.copy_2d(d(part), r * es, x + off, width * es, r * es, n_ * heads));
  if (forward)
    LL_TRY(ops_.template rope_forward<S>(d(part), staged_.positions, d(part), n_, heads, r, c_.options.rope_theta));
  else
    LL_TRY(ops_.template rope_backward<S>(d(part), staged_.positions, d(part), n_, heads, r, c_.options.rope_theta));
  return ops_.copy_2d(x + off, width * es, d(part), r * es, r * es, n_ * heads);
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::mla_fwd(Layer& L, Mode mode) -> Status {
  const MlaSpec& a = c_.spec.mla;
  const int64_t ql = a.q_lora_rank, kl = a.kv_lora_rank, r = a.qk_rope_head_dim;
  constexpr int64_t es = sizeof(S);
  Saved& sv = L.sv;
  const S* x = d(sv.qkv_input);  // this rank's ns_ tokens
  if (ql > 0) {
    LL_TRY(lmake(L, sv.q_latent, "mla.q_latent", ns_ * ql, c_.storage, mode));
    LL_TRY(lin_fwd(L, L.qa, x, d(sv.q_latent), mode, ns_));
    LL_TRY(lmake(L, sv.q_latent_norm, "mla.q_latent_norm", ns_ * ql, c_.storage, mode));
    LL_TRY(ops_.template rmsnorm_forward<S>(d(sv.q_latent), d(L.qan.w), d(sv.q_latent_norm), ns_, ql, c_.options.norm_eps));
  }
  // kv_a_proj_with_mqa: the keys' and values' latent beside the (not yet rotated) rotary key.
  Tensor kva, kpe;
  LL_TRY(ws(kva, ns_ * (kl + r), "mla.kv_a_out"));
  LL_TRY(lin_fwd(L, L.kva, x, d(kva), mode, ns_));
  LL_TRY(lmake(L, sv.kv_latent, "mla.kv_latent", ns_ * kl, c_.storage, mode));
  LL_TRY(ops_.copy_2d(d(sv.kv_latent), kl * es, d(kva), (kl + r) * es, kl * es, ns_));
  LL_TRY(ws(kpe, ns_ * r, "mla.k_rope"));
  LL_TRY(ops_.copy_2d(d(kpe), r * es, d(kva) + kl, (kl + r) * es, r * es, ns_));
  kva.reset();
  LL_TRY(lmake(L, sv.kv_latent_norm, "mla.kv_latent_norm", ns_ * kl, c_.storage, mode));
  LL_TRY(ops_.template rmsnorm_forward<S>(d(sv.kv_latent), d(L.kvan.w), d(sv.kv_latent_norm), ns_, kl, c_.options.norm_eps));
  return mla_up(L, d(kpe), mode);
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::mla_up(Layer& L, S* kpe_local, Mode mode) -> Status {
  const auto [hl, ql, kl, r, nope, vd, qk] = mla_widths();
  constexpr int64_t es = sizeof(S);
  Saved& sv = L.sv;
  LL_TRY(lmake(L, sv.q, "attn.q", n_ * hl * qk, c_.storage, mode));
  LL_TRY(lmake(L, sv.k, "attn.k", n_ * hl * qk, c_.storage, mode));
  LL_TRY(lmake(L, sv.v, "attn.v", n_ * hl * vd, c_.storage, mode));
  Tensor gathered, kpe_own;
  // Queries: up from their latent, or straight from x; then their rotary columns.
  const S* qin = ql > 0 ? d(sv.q_latent_norm) : d(sv.qkv_input);
  if (sp_) {
    LL_TRY(gather_rows(gathered, qin, ql > 0 ? ql : h_, "mla.q_input.gathered"));
    qin = d(gathered);
  }
  LL_TRY(lin_fwd(L, L.q, qin, d(sv.q), mode));
  gathered.reset();
  LL_TRY(rope_columns(d(sv.q), hl, qk, nope, r, true));
  // Keys' content part and values, up from the latent.
  const S* kvin = d(sv.kv_latent_norm);
  if (sp_) {
    LL_TRY(gather_rows(gathered, kvin, kl, "mla.kv_latent_norm.gathered"));
    kvin = d(gathered);
  }
  Tensor kvb;
  LL_TRY(ws(kvb, n_ * hl * (nope + vd), "mla.kv_b_out"));
  LL_TRY(lin_fwd(L, L.kvb, kvin, d(kvb), mode));
  gathered.reset();
  LL_TRY(ops_.copy_2d(d(sv.k), qk * es, d(kvb), (nope + vd) * es, nope * es, n_ * hl));
  LL_TRY(ops_.copy_2d(d(sv.v), vd * es, d(kvb) + nope, (nope + vd) * es, vd * es, n_ * hl));
  kvb.reset();
  // The rotary key: x's last r columns of kv_a again when recomputing (those rows of W_kva).
  if (kpe_local == nullptr) {
    LL_TRY(ws(kpe_own, ns_ * r, "mla.k_rope"));
    LL_TRY(lin_base_fwd(d(sv.qkv_input), d(L.kva.w) + kl * h_, nullptr, d(kpe_own), ns_, h_, r));
    kpe_local = d(kpe_own);
  }
  S* kpe = kpe_local;
  if (sp_) {
    LL_TRY(gather_rows(gathered, kpe_local, r, "mla.k_rope.gathered"));
    kpe = d(gathered);
  }
  LL_TRY(ops_.template rope_forward<S>(kpe, staged_.positions, kpe, n_, 1, r, c_.options.rope_theta));
  for (int64_t h = 0; h < hl; ++h) LL_TRY(ops_.copy_2d(d(sv.k) + h * qk + nope, hl * qk * es, kpe, r * es, r * es, n_));
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::replicated_lin_bwd(Layer& L, Linear& li, const S* dy, const S* x, S* dx) -> Status {
  if (!sp_ || !li.gw.defined() || x == nullptr) return lin_bwd(L, li, dy, x, dx, ns_);
  // Under SP each rank holds other tokens: its weight gradient is a partial sum. (A split
  // backward does not run under SP, so nothing is deferred here.)
  const int64_t numel = li.gw.numel();
  Result<Tensor> z = ops_.zeros(Shape{numel}, c_.grad, Category::workspace, "mla.grad_partial");
  if (!z) return z.status();
  Tensor part = std::move(*z);
  LL_TRY(lin_base_bwd(dy, x, d(li.w), dx, g(part), nullptr, ns_, li.in, li.out));
  LL_TRY(c_.comm->all_reduce_sum(part.raw(), numel, c_.grad, Group::tp));
  return ops_.template add_inplace<G>(g(li.gw), g(part), numel);
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::mla_bwd(Layer& L, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dx_local, S* dx_partial) -> Status {
  const auto [hl, ql, kl, r, nope, vd, qk] = mla_widths();
  constexpr int64_t es = sizeof(S);
  Saved& sv = L.sv;
  const S* x = dopt(sv.qkv_input);  // nullptr when no weight of the layer trains
  Tensor gathered, tmp;
  // Keys and values first, so that dk and dv go before the queries' moments: [dk_C | dv]
  // through kv_b, and the rotary key's gradient summed over the heads.
  Tensor dkvb, dkpe, dkvln, dkvln_local, dkpe_local, dkv, dkva;
  LL_TRY(ws(dkvb, n_ * hl * (nope + vd), "mla.d_kv_b_out"));
  LL_TRY(ops_.copy_2d(d(dkvb), (nope + vd) * es, d(dk), qk * es, nope * es, n_ * hl));
  LL_TRY(ops_.copy_2d(d(dkvb) + nope, (nope + vd) * es, d(dv), vd * es, vd * es, n_ * hl));
  dv.reset();
  LL_TRY(ws(dkpe, n_ * r, "mla.d_k_rope"));
  LL_TRY(ops_.copy_2d(d(dkpe), r * es, d(dk) + nope, hl * qk * es, r * es, n_));
  if (hl > 1) LL_TRY(ws(tmp, n_ * r, "mla.d_k_rope.head"));
  for (int64_t h = 1; h < hl; ++h) {
    LL_TRY(ops_.copy_2d(d(tmp), r * es, d(dk) + h * qk + nope, hl * qk * es, r * es, n_));
    LL_TRY(ops_.template add_inplace<S>(d(dkpe), d(tmp), n_ * r));
  }
  tmp.reset();
  dk.reset();
  LL_TRY(ops_.template rope_backward<S>(d(dkpe), staged_.positions, d(dkpe), n_, 1, r, c_.options.rope_theta));
  const S* kvin = dopt(sv.kv_latent_norm);
  if (sp_ && kvin != nullptr) {
    LL_TRY(gather_rows(gathered, kvin, kl, "mla.kv_latent_norm.gathered"));
    kvin = d(gathered);
  }
  LL_TRY(ws(dkvln, n_ * kl, "mla.d_kv_latent_norm"));
  LL_TRY(lin_bwd(L, L.kvb, d(dkvb), kvin, d(dkvln)));
  gathered.reset();
  dkvb.reset();
  const S* dkn = nullptr;
  const S* dkr = nullptr;
  LL_TRY(reduce_rows(d(dkvln), dkvln_local, kl, "mla.d_kv_latent_norm.local", dkn));
  LL_TRY(reduce_rows(d(dkpe), dkpe_local, r, "mla.d_k_rope.local", dkr));
  LL_TRY(ws(dkv, ns_ * kl, "mla.d_kv_latent"));
  LL_TRY(latent_norm_bwd(L.kvan, d(sv.kv_latent), dkn, d(dkv), kl));
  LL_TRY(ws(dkva, ns_ * (kl + r), "mla.d_kv_a_out"));
  LL_TRY(ops_.copy_2d(d(dkva), (kl + r) * es, d(dkv), kl * es, kl * es, ns_));
  LL_TRY(ops_.copy_2d(d(dkva) + kl, (kl + r) * es, dkr, r * es, r * es, ns_));
  dkvln.reset();
  dkvln_local.reset();
  dkpe.reset();
  dkpe_local.reset();
  dkv.reset();
  LL_TRY(ws(dx_local, ns_ * h_, "mla.d_input"));
  LL_TRY(replicated_lin_bwd(L, L.kva, d(dkva), x, d(dx_local)));
  dkva.reset();
  // Queries: through their rotary columns, then q_b and the latent, or the uncompressed q.
  LL_TRY(rope_columns(d(dq), hl, qk, nope, r, false));
  if (ql == 0) {
    const S* xin = x;
    if (sp_ && xin != nullptr) {
      LL_TRY(gather_rows(gathered, xin, h_, "attn.qkv_input.gathered"));
      xin = d(gathered);
    }
    LL_TRY(lin_bwd(L, L.q, d(dq), xin, dx_partial));
    dq.reset();
    return Status::ok();
  }
  const S* qin = dopt(sv.q_latent_norm);
  if (sp_ && qin != nullptr) {
    LL_TRY(gather_rows(gathered, qin, ql, "mla.q_latent_norm.gathered"));
    qin = d(gathered);
  }
  Tensor dqln, dqln_local, dql;
  LL_TRY(ws(dqln, n_ * ql, "mla.d_q_latent_norm"));
  LL_TRY(lin_bwd(L, L.q, d(dq), qin, d(dqln)));
  gathered.reset();
  dq.reset();
  const S* dqn = nullptr;
  LL_TRY(reduce_rows(d(dqln), dqln_local, ql, "mla.d_q_latent_norm.local", dqn));
  LL_TRY(ws(dql, ns_ * ql, "mla.d_q_latent"));
  LL_TRY(latent_norm_bwd(L.qan, d(sv.q_latent), dqn, d(dql), ql));
  dqln.reset();
  dqln_local.reset();
  LL_TRY(ws(tmp, ns_ * h_, "mla.d_input_q"));
  LL_TRY(replicated_lin_bwd(L, L.qa, d(dql), x, d(tmp)));
  return ops_.template add_inplace<S>(d(dx_local), d(tmp), ns_ * h_);
}

}  // namespace llmplan::exec::detail
