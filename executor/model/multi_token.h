// ModelImpl's multi-token prediction modules (model_class.h MtpDepth; DeepSeek-V3, arXiv
// 2412.19437, sec. 2.2): each depth's forward after the main loss, and its backward before
// the main model's layers, on the last (here the only) stage.
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::mtp_fwd(int k, const S* prev, Mode mode, double* loss) -> Status {
  const ModelSpec& m = c_.spec;
  MtpDepth& md = mtp_[static_cast<size_t>(k)];
  const int64_t n = n_, s = S_;
  constexpr int64_t es = sizeof(S);
  const Category cat = mode == Mode::keep ? Category::activations : Category::workspace;
  set_where(Phase::forward, md.block.index, "mtp");
  // Depth k reads t_{i+k+1} and predicts t_{i+k+2}: the main targets shifted by k (and k + 1)
  // within each sequence.
  md.tokens.resize(static_cast<size_t>(n));
  md.targets.resize(static_cast<size_t>(n));
  const int32_t* tg = staged_.host_targets;
  if (tg == nullptr) return Status::runtime("executor: multi-token prediction needs the micro-batch's targets");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = i % s;
    md.tokens[static_cast<size_t>(i)] = pos + k < s && tg[i + k] >= 0 ? tg[i + k] : 0;
    md.targets[static_cast<size_t>(i)] = pos + k + 1 < s ? tg[i + k + 1] : -1;
  }
  if constexpr (!Ops::kHostMemory) {  // a GPU: the shifted ids where its kernels read them
    LL_TRY(make(a_, md.tokens_dev, n, DType::i32, Category::workspace, "mtp.tokens"));
    LL_TRY(make(a_, md.targets_dev, n, DType::i32, Category::workspace, "mtp.targets"));
    LL_TRY(ops_.upload(md.tokens_dev.raw(), md.tokens.data(), n * 4));
    LL_TRY(ops_.upload(md.targets_dev.raw(), md.targets.data(), n * 4));
  }
  LL_TRY(make(a_, md.embed_out, n * h_, c_.storage, cat, "mtp.embed_output"));
  LL_TRY(embed_fwd(md.op_tokens(), d(md.embed_out)));
  LL_TRY(make(a_, md.eh_in, n * 2 * h_, c_.storage, cat, "mtp.eh_input"));
  {
    Tensor normed;
    LL_TRY(ws(normed, n * h_, "mtp.normed"));
    LL_TRY(norm_fwd(md.hnorm, prev, d(normed)));
    LL_TRY(ops_.copy_2d(d(md.eh_in), 2 * h_ * es, d(normed), h_ * es, h_ * es, n));
    LL_TRY(norm_fwd(md.enorm, d(md.embed_out), d(normed)));
    LL_TRY(ops_.copy_2d(d(md.eh_in) + h_, 2 * h_ * es, d(normed), h_ * es, h_ * es, n));
  }
  LL_TRY(make(a_, md.block_in, n * h_, c_.storage, cat, "ln1.input"));
  LL_TRY(lin_fwd(md.block, md.eh, d(md.eh_in), d(md.block_in), mode));
  LL_TRY(layer_fwd(md.block, d(md.block_in), md.fnorm_in, cat, mode, seed_));
  LL_TRY(make(a_, md.head_in, n * h_, c_.storage, cat, "mtp.head.input"));
  LL_TRY(norm_fwd(md.fnorm, d(md.fnorm_in), d(md.head_in)));
  // The shared head and the loss, as the main one's (tp 1).
  Tensor& W = m.tied_embeddings ? wte_ : whead_;
  LL_TRY(make(a_, md.logits, n * Vl_, c_.storage, Category::logits_loss, "mtp.logits"));
  LL_TRY(lin_base_fwd(d(md.head_in), d(W), nullptr, d(md.logits), n, h_, Vl_));
  LL_TRY(make(a_, md.sm, n * Vl_, kA, Category::logits_loss, "mtp.loss.softmax_fp32"));
  LL_TRY(ops_.template cast<S, A>(d(md.logits), md.sm.template data<A>(), n * Vl_));
  Result<double> l = ops_.template cross_entropy_forward<A>(md.sm.template data<A>(), md.op_targets(), n, V_, denom_);
  if (!l) return l.status();
  *loss += c_.options.mtp_loss_scale / m.mtp_layers * *l;
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::mtp_loss_bwd(int k) -> Status {
  MtpDepth& md = mtp_[static_cast<size_t>(k)];
  const double w = c_.options.mtp_loss_scale / c_.spec.mtp_layers;
  LL_TRY(ops_.template cross_entropy_backward<A>(md.sm.template data<A>(), md.op_targets(), md.sm.template data<A>(), n_, V_,
                                                  loss_scale_ * w, denom_));
  LL_TRY(ops_.template cast<A, S>(md.sm.template data<A>(), d(md.logits), n_ * Vl_));
  md.sm.reset();
  return Status::ok();
}

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::mtp_bwd(int k, const S* prev, S* dprev, const S* dout) -> Status {
  const ModelSpec& m = c_.spec;
  MtpDepth& md = mtp_[static_cast<size_t>(k)];
  const int64_t n = n_;
  constexpr int64_t es = sizeof(S);
  set_where(Phase::backward, md.block.index, "mtp");
  Tensor& W = m.tied_embeddings ? wte_ : whead_;
  Tensor& gW = m.tied_embeddings ? gwte_ : gwhead_;
  Tensor dhead, dy;
  LL_TRY(ws(dhead, n * h_, "mtp.d_head_input"));
  LL_TRY(lin_base_bwd(d(md.logits), d(md.head_in), d(W), d(dhead), g(gW), nullptr, n, h_, Vl_));
  md.logits.reset();
  md.head_in.reset();
  LL_TRY(ws(dy, n * h_, "mtp.d_output"));
  LL_TRY(norm_bwd(md.fnorm, d(md.fnorm_in), d(dhead), d(dy), false));
  dhead.reset();
  md.fnorm_in.reset();  // (depth k + 1, which read it as its previous state, is done)
  if (dout != nullptr) LL_TRY(ops_.template add_inplace<S>(d(dy), dout, n * h_));  // the next depth's, through its hnorm
  // the block (dy becomes its input's gradient), then eh_proj
  LL_TRY(layer_bwd(md.block, d(md.block_in), d(dy), seed_));
  md.block.sv.clear();
  Tensor deh;
  LL_TRY(ws(deh, n * 2 * h_, "mtp.d_eh_input"));
  LL_TRY(lin_bwd(md.block, md.eh, d(dy), d(md.eh_in), d(deh)));
  dy.reset();
  md.block_in.reset();
  md.eh_in.reset();
  // the two normed halves: the previous hidden state's gradient, then the embedding's
  Tensor half, dn;
  LL_TRY(ws(half, n * h_, "mtp.d_normed"));
  LL_TRY(ops_.copy_2d(d(half), h_ * es, d(deh), 2 * h_ * es, h_ * es, n));
  LL_TRY(norm_bwd(md.hnorm, prev, d(half), dprev, true));
  LL_TRY(ops_.copy_2d(d(half), h_ * es, d(deh) + h_, 2 * h_ * es, h_ * es, n));
  deh.reset();
  LL_TRY(ws(dn, n * h_, "mtp.d_embed_output"));
  LL_TRY(norm_bwd(md.enorm, d(md.embed_out), d(half), d(dn), false));
  half.reset();
  md.embed_out.reset();
  if (embed_trainable_) LL_TRY(embed_bwd(md.op_tokens(), d(dn)));
  md.tokens_dev.reset();
  md.targets_dev.reset();
  return Status::ok();
}

}  // namespace llmplan::exec::detail
