// ModelImpl's step: pipeline slots, the forward over the stage's layers and head, and the
// backward, with the ZeRO-3 gathers and releases per unit.
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::run(const Batch& b, double loss_scale, double denom, uint64_t seed, bool train) -> Result<double> {
  if (!first_ || !last_) return Status::bad_input("executor: a pipeline stage runs through stage_forward/stage_backward");
  Result<double> r = fwd(b, nullptr, nullptr, loss_scale, denom, seed, train);
  if (r && train) {
    if (Status st = bwd(nullptr, nullptr); !st) r = st;
  }
  if (!r) release_all();  // after OOM: leave nothing of the step live
  return r;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::swap_slot(int k) -> void {
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
  std::swap(wgrad_buf_, sl.wgrad_buf);
  std::swap(wgrad_ops_, sl.wgrad_ops);
  std::swap(awaiting_w_, sl.awaiting_w);
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::stage_forward(int slot, const Batch& b, const void* input, void* output, double loss_scale, double denom, uint64_t seed) -> Result<double> {
  swap_slot(slot);
  Result<double> r = fwd(b, static_cast<const S*>(input), static_cast<S*>(output), loss_scale, denom, seed, true);
  if (!r) release_all();
  swap_slot(slot);
  return r;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::stage_backward(int slot, const Batch&, const void* dout, void* dinput) -> Status {
  swap_slot(slot);
  Status st = bwd(static_cast<const S*>(dout), static_cast<S*>(dinput));
  if (!st) release_all();
  swap_slot(slot);
  return st;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::split_backward_unsupported() const -> std::string {
  // Under TP a MoE layer's expert and router gradients are partial sums reduced inside its
  // backward (moe_bwd's sum_partials); deferred to W they would be reduced before they exist.
  if (moe_ && t_ > 1) return "MoE layers under tensor parallel (expert gradients summed over TP inside the backward)";
  // SP: the column-parallel GEMMs' inputs are all-gathered for the backward and freed; W
  // would need them gathered again.
  if (sp_) return "sequence parallel";
  // ZeRO-2/3's hooks reduce-scatter (and gather) a unit's gradients as its backward ends;
  // under a split backward its weight gradients exist only after W. ZeRO-1 has no hooks.
  if (hooks_ != nullptr)
    return "ZeRO-2/3 partitioned gradients and parameters (plan.zero " + std::to_string(c_.plan.zero) +
           "; plan.zero 1, which shards the optimizer states only, keeps the schedule)";
  for (const Layer& L : layers_)
    if (L.ctx.grad_flows && L.policy == LayerRecompute::full) return "full recompute (its re-run forward would live until W)";
  if (c_.spec.mtp_layers > 0) return "multi-token prediction";
  return {};
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::stage_backward_input(int slot, const Batch&, const void* dout, void* dinput) -> Status {
  if (const std::string why = split_backward_unsupported(); !why.empty())
    return Status::bad_input("executor: a split backward (B then W) does not run with " + why +
                             "; plan.schedule 1f1b or interleaved runs this plan");
  swap_slot(slot);
  Status st = awaiting_w_ ? Status::bad_input("executor: stage_backward_input twice without stage_backward_weight (slot " +
                                              std::to_string(slot) + ")")
                          : Status::ok();
  if (st) {
    split_ = true;
    wgrad_at_ = 0;
    wgrad_ops_.clear();
    st = bwd(static_cast<const S*>(dout), static_cast<S*>(dinput));
    split_ = false;
  }
  if (!st) {
    release_all();
    wgrad_ops_.clear();
    wgrad_buf_.reset();
    awaiting_w_ = false;
  }
  swap_slot(slot);
  return st;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::stage_backward_weight(int slot) -> Status {
  swap_slot(slot);
  Status st = weight_grads();
  if (!st) release_all();
  swap_slot(slot);
  return st;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::weight_grads() -> Status {
  if (!awaiting_w_) return Status::bad_input("executor: stage_backward_weight without a stage_backward_input before it");
  set_where(Phase::backward, -1, "weight gradients");
  for (const DeferredGrad& w : wgrad_ops_) LL_TRY(lin_base_bwd(w.dy, w.x, nullptr, nullptr, w.dw, w.db, w.rows, w.in, w.out));
  wgrad_ops_.clear();
  wgrad_buf_.reset();
  awaiting_w_ = false;
  release_all();
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::fwd(const Batch& b, const S* input, S* output, double loss_scale, double denom, uint64_t seed, bool train) -> Result<double> {
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
  staged_.host_targets = lb.targets;
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
  if (!train && mtp_.empty()) inputs_[static_cast<size_t>(nl)].reset();
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
  for (int k = 0; k < static_cast<int>(mtp_.size()); ++k)
    LL_TRY(mtp_fwd(k, k == 0 ? d(inputs_[static_cast<size_t>(nl)]) : d(mtp_[static_cast<size_t>(k - 1)].fnorm_in), mode, &loss));
  if (!train) release_all();
  return loss;
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::bwd(const S* dout, S* dinput) -> Status {
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
    for (int k = 0; k < static_cast<int>(mtp_.size()); ++k) LL_TRY(mtp_loss_bwd(k));
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
    if (ld == Vl_)  // split: the logits' gradient and the head input stay for the head's W
      LL_TRY(lin_grads(d(logits_), sp_ ? d(gathered) : d(head_in_), d(W), d(dhead), g(gW), nullptr, n, h_, Vl_, true));
    else if (split_)
      return Status::bad_input("executor: a split backward with padded logits rows (this backend's head) is not implemented");
    else
      LL_TRY(ops_.template linear_backward_ld<S, G>(d(logits_), ld, sp_ ? d(gathered) : d(head_in_), d(W), d(dhead), g(gW), n,
                                                    h_, Vl_));
    gathered.reset();
    LL_TRY(tp_reduce_input_grad(d(dhead), dlocal, "head.d_input_local"));  // vocabulary-parallel head: partial sums
    if (!split_) {
      logits_.reset();
      head_in_.reset();
    } else if (head_trainable_) {
      logits_.recategorize(Category::activations);  // now the head's output gradient, kept for W (the planner's W set)
    } else {
      logits_.reset();
    }
    set_where(Phase::backward, -1, "final_norm");
    LL_TRY(norm_bwd(fnorm_, d(inputs_[static_cast<size_t>(nl)]), sp_ ? d(dlocal) : d(dhead), d(dx), false));
    dhead.reset();
    dlocal.reset();
    // Multi-token prediction, last depth first: each adds its previous hidden state's
    // gradient (depth 0: into the main final-norm input's, dx).
    Tensor carry;  // depth k's output gradient from depth k + 1
    for (int k = static_cast<int>(mtp_.size()) - 1; k >= 0; --k) {
      Tensor dprev;
      if (k > 0) {
        Result<Tensor> z = ops_.zeros(Shape{ns * h_}, c_.storage, Category::workspace, "mtp.d_previous");
        if (!z) return z.status();
        dprev = std::move(*z);
      }
      const S* prev = k == 0 ? d(inputs_[static_cast<size_t>(nl)]) : d(mtp_[static_cast<size_t>(k - 1)].fnorm_in);
      LL_TRY(mtp_bwd(k, prev, k == 0 ? d(dx) : d(dprev), carry.defined() ? d(carry) : nullptr));
      carry = std::move(dprev);
    }
    release_weights(head_unit());
    if (head_trainable_) LL_TRY(end_grads(head_unit()));
  } else {
    LL_TRY(ops_.copy(dx.raw(), dout, dx.bytes()));
  }
  if (split_) {  // the output gradients B leaves for W, the recipe's bytes for the stage's layers
    double bytes = 0;
    for (const Layer& L : layers_) bytes += weight_grad_buffer_bytes(m, L.ctx);
    const auto elems = static_cast<int64_t>(bytes) / static_cast<int64_t>(sizeof(S));
    if (elems > 0) LL_TRY(make(a_, wgrad_buf_, elems, c_.storage, Category::activations, "weight_grad.output_grads"));
  } else {
    inputs_[static_cast<size_t>(nl)].reset();
  }
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
    if (!split_) inputs_[static_cast<size_t>(i)].reset();
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
  if (split_) {
    if (wgrad_at_ != wgrad_buf_.numel())
      return Status::runtime("recipe mismatch: the stage's B left " + std::to_string(wgrad_at_) +
                             " output-gradient elements for W, the recipe's weight_grad_buffer_bytes " +
                             std::to_string(wgrad_buf_.numel()));
    awaiting_w_ = true;
    return Status::ok();
  }
  release_all();
  return Status::ok();
}

}  // namespace llmplan::exec::detail
