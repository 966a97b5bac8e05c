// ModelImpl's building blocks: the (tensor-parallel, LoRA-adapted) linear layers forward and
// backward, the norms, and the attention kernels (materialized, flash, fused dropout).
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::lmake(Layer& L, Tensor& t, const char* name, int64_t numel, DType dt, Mode mode) -> Status {
  const bool keep = mode == Mode::keep && kept(L, name);
  if (keep) {
    const SavedTensor* it = recipe_item(L, name);
    if (static_cast<double>(numel) != it->elements)
      return Status::runtime(std::string("recipe mismatch: layer ") + std::to_string(L.index) + " " + name + ": executor " +
                             std::to_string(numel) + " elements, recipe " + std::to_string(it->elements));
  }
  return make(a_, t, numel, dt, keep ? Category::activations : Category::workspace, name);
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::lin_base_fwd(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out) -> Status {
  Scratch sc;
  const int64_t rows = chunk_rows(n);
  LL_TRY(scratch(a_, sc, ops_.linear_workspace_bytes(c_.storage, rows, in, out), "linear.workspace"));
  for (int64_t r = 0; r < n; r += rows) {
    const int64_t nr = std::min(rows, n - r);
    LL_TRY(ops_.template linear_forward<S>(x + r * in, w, b, y + r * out, nr, in, out, sc.span()));
  }
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::lin_base_bwd(const S* dy, const S* x, const S* w, S* dx, G* dw, G* db, int64_t n, int64_t in, int64_t out) -> Status {
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::lin_grads(const S* dy, const S* x, const S* w, S* dx, G* dw, G* db, int64_t n, int64_t in, int64_t out,
                                     bool dy_kept) -> Status {
  if (!split_ || (dw == nullptr && db == nullptr)) return lin_base_bwd(dy, x, w, dx, dw, db, n, in, out);
  if (dx != nullptr) LL_TRY(lin_base_bwd(dy, nullptr, w, dx, nullptr, nullptr, n, in, out));
  const S* kept = dy;
  if (!dy_kept) {  // W reads it after B's workspace is gone: into the slot's buffer
    if (wgrad_at_ + n * out > wgrad_buf_.numel())
      return Status::runtime("recipe mismatch: layer " + std::to_string(where_.layer) + " " + where_.part +
                             ": the output gradients for W exceed the recipe's weight_grad_buffer_bytes (" +
                             std::to_string(wgrad_buf_.numel()) + " elements)");
    S* at = d(wgrad_buf_) + wgrad_at_;
    LL_TRY(ops_.copy(at, dy, n * out * static_cast<int64_t>(sizeof(S))));
    wgrad_at_ += n * out;
    kept = at;
  }
  wgrad_ops_.push_back({kept, x, dw, db, n, in, out});
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::lin_fwd(Layer& L, Linear& li, const S* x, S* y, Mode mode, int64_t rows, int64_t row0) -> Status {
  const bool row = li.par == Par::row;
  const S* bias = !row || tr_ == 0 ? dopt(li.b) : nullptr;
  Tensor wt;
  const S* w = nullptr;
  LL_TRY(weight_of(li, wt, w));
  if (row && sp_) {
    Tensor full;
    LL_TRY(ws(full, n_ * li.out, "row_parallel.partial"));
    LL_TRY(lin_base_fwd(x, w, bias, d(full), n_, li.in, li.out));
    LL_TRY(c_.comm->reduce_scatter_sum(d(full), y, ns_ * li.out, c_.storage, Group::tp));
  } else {
    LL_TRY(lin_base_fwd(x, w, bias, y, rows > 0 ? rows : n_, li.in, li.out));
    if (row) LL_TRY(tp_sum(y, n_ * li.out));
  }
  wt.reset();
  if (li.lora) LL_TRY(lora_fwd(L, li, x, y, mode, rows, row0));
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::lora_fwd(Layer& L, Linear& li, const S* x, S* y, Mode mode, int64_t rows, int64_t row0) -> Status {
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::tp_reduce_input_grad(S* partial, Tensor& local, const char* name) -> Status {
  if (!sp_) {
    LL_TRY(tp_sum(partial, n_ * h_));
    return Status::ok();
  }
  LL_TRY(ws(local, ns_ * h_, name));
  return c_.comm->reduce_scatter_sum(partial, d(local), ns_ * h_, c_.storage, Group::tp);
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::lin_bwd(Layer& L, Linear& li, const S* dy, const S* x, S* dx, int64_t rows, int64_t row0) -> Status {
  const int64_t nr = rows > 0 ? rows : n_;
  Tensor dxl, wt;
  const S* w = nullptr;
  LL_TRY(weight_of(li, wt, w));  // QLoRA: dequantized for the whole backward of the projection
  if (li.lora) {  // an expert's block (rows > 0) reads its rows of z; experts have no TP
    const int64_t r = L.ctx.lora_rank;
    Tensor dz;
    LL_TRY(ws(dz, nr * r, "lora.dz"));
    const S* zb = d(L.sv.lora_z[static_cast<int>(li.proj)]) + row0 * r;
    LL_TRY(lin_grads(dy, zb, d(li.lb), d(dz), g(li.glb), nullptr, nr, r, li.out));
    if (li.par == Par::column) LL_TRY(tp_sum(d(dz), nr * r));
    LL_TRY(ops_.scale(d(dz), nr * r, lora_scale_));
    const bool lora_dx = dx != nullptr && (li.par != Par::column || tr_ == 0);
    if (lora_dx) LL_TRY(ws(dxl, nr * li.in, "lora.dx"));
    LL_TRY(lin_grads(d(dz), x, d(li.la), lora_dx ? d(dxl) : nullptr, g(li.gla), nullptr, nr, li.in, r));
  }
  LL_TRY(lin_grads(dy, x, w, dx, g(li.gw), g(li.gb), nr, li.in, li.out));
  wt.reset();
  if (dx && dxl.defined()) LL_TRY(ops_.template add_inplace<S>(dx, d(dxl), nr * li.in));
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::norm_bwd(Norm& nm, const S* x, const S* dy, S* dx, bool accumulate) -> Status {
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::rmsnorm_bwd_tp(Norm& nm, const S* x, const S* dy, S* dx, int64_t rows, int64_t width, bool partial) -> Status {
  Scratch sc;
  LL_TRY(scratch(a_, sc, ops_.norm_workspace_bytes(c_.grad, rows, width), "norm.workspace"));
  G* gw = g(nm.gw);
  Tensor part;
  if (partial && gw != nullptr) {  // this rank's share of the weight gradient
    Result<Tensor> r = ops_.zeros(Shape{width}, c_.grad, Category::workspace, "norm.grad_partial");
    if (!r) return r.status();
    part = std::move(*r);
    gw = g(part);
  }
  LL_TRY(ops_.template rmsnorm_backward<S, G>(x, d(nm.w), dy, dx, gw, rows, width, c_.options.norm_eps, false, sc.span()));
  if (part.defined()) {
    LL_TRY(c_.comm->all_reduce_sum(part.raw(), width, c_.grad, Group::tp));
    LL_TRY(ops_.template add_inplace<G>(g(nm.gw), g(part), width));
  }
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::dims(const Layer& L) const -> cpu::AttentionDims {
  cpu::AttentionDims dm;
  dm.window = c_.spec.attention_window(L.index);
  dm.sinks = L.sink_logits;  // empty without sinks
  dm.b = c_.plan.micro_batch;
  dm.s = c_.job.seq_len;
  dm.heads = c_.spec.heads / t_;
  dm.kv_heads = c_.spec.kv_heads / t_;
  dm.head_dim = c_.spec.head_width();
  if (c_.spec.mla.enabled()) {  // a key per query head (the shared rotary part copied to each), narrower values
    dm.kv_heads = dm.heads;
    dm.v_dim = c_.spec.mla.v_head_dim;
  }
  return dm;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::attn_fwd_kernel(Layer& L, const S* q, const S* k, const S* v, const int32_t* doc, const cpu::AttentionDims& dm, S* o, Mode mode, uint64_t seed) -> Status {
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::attn_bwd_kernel(const AttnSaved& t, const S* dout, S* dq, S* dk, S* dv, const cpu::AttentionDims& dm) -> Status {
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

}  // namespace llmplan::exec::detail
