// ModelImpl's mixture-of-experts MLP: top-k routing with capacity (GShard / Switch), the
// dispatch and combine (all-to-all under expert parallel), forward and backward.
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
template <class T>
auto ModelImpl<S, G, Ops>::host_view(const T* p, int64_t n, std::vector<T>& host, const T*& view) -> Status {
  if constexpr (Ops::kHostMemory) {
    view = p;
  } else {
    host.resize(static_cast<size_t>(n));
    LL_TRY(ops_.download(host.data(), p, n * static_cast<int64_t>(sizeof(T))));
    view = host.data();
  }
  return Status::ok();
}

template <class S, class G, class Ops>
template <class T>
auto ModelImpl<S, G, Ops>::backend_view(const std::vector<T>& host, Tensor& dev, DType dt, const char* name, const T*& view) -> Status {
  if constexpr (Ops::kHostMemory) {
    view = host.data();
  } else {
    LL_TRY(make(a_, dev, std::max<int64_t>(1, static_cast<int64_t>(host.size())), dt, Category::workspace, name));
    LL_TRY(ops_.upload(dev.raw(), host.data(), static_cast<int64_t>(host.size() * sizeof(T))));
    view = dev.template data<T>();
  }
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::route(const A* probs, int64_t T) const -> Routing {
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::moe_fwd(Layer& L, S* y, Mode mode) -> Status {
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
  LL_TRY(lin_base_fwd(x, d(L.moe.router), dopt(L.moe.router_bias), d(logits), T, h_, E_));
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::tp_partial_grads(Layer& L) -> std::vector<Tensor*> {
  std::vector<Tensor*> v;
  if (t_ == 1) return v;
  v.push_back(&L.moe.grouter);
  v.push_back(&L.moe.grouter_bias);
  for (std::vector<Linear>* set : {&L.moe.gate, &L.moe.up, &L.moe.down})
    for (Linear& li : *set)
      for (Tensor* t : {&li.gw, &li.gb, &li.gla, &li.glb}) v.push_back(t);
  std::erase_if(v, [](Tensor* t) { return !t->defined(); });
  return v;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::swap_in_partials(const std::vector<Tensor*>& gs, std::vector<Tensor>& whole) -> Status {
  for (Tensor* t : gs) {
    Result<Tensor> z = ops_.zeros(t->shape(), t->dtype(), Category::workspace, "moe.grad_partial");
    if (!z) return z.status();
    whole.push_back(std::move(*t));
    *t = std::move(*z);
  }
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::sum_partials(const std::vector<Tensor*>& gs, std::vector<Tensor>& whole) -> Status {
  for (size_t i = 0; i < gs.size(); ++i) {
    LL_TRY(c_.comm->all_reduce_sum(gs[i]->raw(), gs[i]->numel(), gs[i]->dtype(), Group::tp));
    LL_TRY(ops_.template add_inplace<G>(g(whole[i]), g(*gs[i]), gs[i]->numel()));
    *gs[i] = std::move(whole[i]);
  }
  whole.clear();
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::moe_bwd(Layer& L, const S* dy, S* dx) -> Status {
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
  LL_TRY(lin_grads(d(dlogits), x, d(L.moe.router), d(tmp), g(L.moe.grouter), g(L.moe.grouter_bias), T, h_, E_));  // split: W deferred
  LL_TRY(ops_.template add_inplace<S>(dx, d(tmp), T * h_));
  dlogits.reset();
  tmp.reset();  // not beside the shared experts' gradients
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

}  // namespace llmplan::exec::detail
