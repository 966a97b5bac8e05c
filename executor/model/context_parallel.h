// ModelImpl's context parallel attention: the all-gather exchange and the ring (Liu et al.
// 2023, Ring Attention), forward and backward.
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::cp_dims(const Layer& L) const -> cpu::AttentionDims {
  cpu::AttentionDims dm = dims(L);  // dm.s = S_: every key
  dm.q_rows = sl_;
  dm.q_split = sl_ / 2;
  dm.q_offset = cp_position(0);
  dm.q_offset_hi = cp_position(sl_ / 2);
  return dm;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::cp_reorder(S* rank_major, S* whole, int64_t w, bool to_whole) -> Status {
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::cp_gather(const S* local, Tensor& full, int64_t w, const char* name) -> Status {
  Tensor raw;
  LL_TRY(make(a_, raw, cp_ * n_ * w, c_.storage, Category::communication, name));
  LL_TRY(c_.comm->all_gather(local, d(raw), n_ * w, c_.storage, Group::cp));
  LL_TRY(make(a_, full, cp_ * n_ * w, c_.storage, Category::communication, name));
  return cp_reorder(d(raw), d(full), w, true);
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::cp_attn_bwd(Layer& L, const S* dout, S* dq, S* dk, S* dv, uint64_t seed) -> Status {
  if (c_.plan.cp_exchange == CpExchange::ring) return ring_attn_bwd(L, dout, dq, dk, dv);
  const cpu::AttentionDims dm = cp_dims(L);
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::ring_dims(const Layer& L, int owner) const -> cpu::AttentionDims {
  cpu::AttentionDims dm = cp_dims(L);
  dm.k_rows = sl_;
  dm.k_split = sl_ / 2;
  dm.k_offset = cp_position(0, owner);
  dm.k_offset_hi = cp_position(sl_ / 2, owner);
  return dm;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::ring_attn_fwd(Layer& L, Mode mode) -> Status {
  Saved& sv = L.sv;
  const int64_t w = n_ * kvw_;
  const cpu::AttentionDims dm0 = ring_dims(L, cr_);
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
    cpu::AttentionDims dm = ring_dims(L, (cr_ - step + cp_) % cp_);
    const bool first = step == 0;
    if (!first) dm.sinks = {};  // a sink counts once: in the first step's partial
    LL_TRY(ops_.template attention_forward_flash<S>(d(sv.q), d(cur), d(cur) + w, staged_.whole_doc, first ? d(sv.proj_input) : d(o_part),
                                                    first ? sv.lse.template data<A>() : lse_part.template data<A>(), dm, sc.span()));
    if (!first)
      LL_TRY(ops_.template attention_merge_partial<S>(d(sv.proj_input), sv.lse.template data<A>(), d(o_part),
                                                      lse_part.template data<A>(), dm));
    std::swap(cur, next);
  }
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::ring_attn_bwd(Layer& L, const S* dout, S* dq, S* dk, S* dv) -> Status {
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
  LL_TRY(scratch(a_, sc, ops_.attention_workspace_bytes(c_.storage, ring_dims(L, cr_), true), "attention.workspace"));
  for (int step = 0; step < cp_; ++step) {
    if (step + 1 < cp_) LL_TRY(c_.comm->ring_shift(d(cur), d(next), 2 * w, c_.storage, Group::cp, 400 + step));
    const cpu::AttentionDims dm = ring_dims(L, (cr_ - step + cp_) % cp_);
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

}  // namespace llmplan::exec::detail
