// ModelImpl's vocabulary-parallel embedding and cross entropy (Megatron: the table and the
// head split by rows over TP, the softmax's max and sum all-reduced).
#pragma once

#include "executor/model/model_class.h"

namespace llmplan::exec::detail {

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::embed_fwd(const int32_t* tokens, S* out) -> Status {
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

template <class S, class G, class Ops>
auto ModelImpl<S, G, Ops>::vocab_parallel_ce(A* z, const int32_t* targets, double denom, bool train, double loss_scale) -> Result<double> {
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

}  // namespace llmplan::exec::detail
