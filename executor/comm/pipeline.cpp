#include "executor/comm/pipeline.h"

#include <algorithm>
#include <type_traits>

namespace llmplan::exec {

#define PP_TRY(expr)           \
  do {                         \
    Status pp_s_ = (expr);     \
    if (!pp_s_) return pp_s_;  \
  } while (0)

namespace {

template <class T>
void add_typed(T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bf16_t>) y[i] = float_to_bf16(bf16_to_float(y[i]) + bf16_to_float(x[i]));
    else if constexpr (std::is_same_v<T, f16_t>) y[i] = float_to_f16(f16_to_float(y[i]) + f16_to_float(x[i]));
    else y[i] += x[i];
  }
}
void add_into(DType t, void* y, const void* x, int64_t n) {
  switch (t) {
    case DType::f32: return add_typed(static_cast<float*>(y), static_cast<const float*>(x), n);
    case DType::f64: return add_typed(static_cast<double*>(y), static_cast<const double*>(x), n);
    case DType::bf16: return add_typed(static_cast<bf16_t*>(y), static_cast<const bf16_t*>(x), n);
    case DType::f16: return add_typed(static_cast<f16_t*>(y), static_cast<const f16_t*>(x), n);
    default: return;
  }
}

}  // namespace

int64_t Pipeline::slots(const ParallelPlan& plan, int64_t m, int stage) {
  if (plan.pp == 1) return 1;
  if (plan.schedule == Schedule::gpipe) return m;
  return std::min<int64_t>(m, plan.pp - stage);
}

Result<std::unique_ptr<Pipeline>> Pipeline::create(TrackingAllocator& alloc, Model& model, Communicator& comm) {
  std::unique_ptr<Pipeline> p(new Pipeline());
  p->alloc_ = &alloc;
  p->model_ = &model;
  p->comm_ = &comm;
  const ModelConfig& c = model.config();
  p->dtype_ = c.storage;
  const int64_t tokens = static_cast<int64_t>(c.plan.micro_batch) * c.job.seq_len;
  p->count_ = tokens / (c.plan.sp ? c.plan.tp : 1) * c.spec.hidden;
  for (Tensor* t : {&p->send_, &p->recv_}) {
    Result<Tensor> r = Tensor::empty(alloc, Shape{p->count_}, p->dtype_, Category::communication,
                                     t == &p->send_ ? "pipeline.send" : "pipeline.recv");
    if (!r) return r.status();
    *t = std::move(*r);
  }
  return p;
}

Result<double> Pipeline::run_step(int64_t m, const std::function<Batch(int64_t)>& batch,
                                  const std::function<uint64_t(int64_t)>& seed, double loss_scale, double denom) {
  Communicator& cm = *comm_;
  Model& md = *model_;
  const int p = cm.size(Group::pp), r = cm.rank(Group::pp);
  const bool first = r == 0, last = r == p - 1;
  const ParallelPlan& plan = md.config().plan;
  const int64_t nslots = slots(plan, m, r);
  const int64_t warmup = plan.schedule == Schedule::gpipe ? m : std::min<int64_t>(p - r - 1, m);
  const int64_t remaining = m - warmup;
  auto ftag = [](int64_t j) { return static_cast<int>(2 * j); };
  auto btag = [](int64_t j) { return static_cast<int>(2 * j + 1); };
  void* sb = send_.raw();
  void* rb = recv_.raw();
  double loss = 0;

  auto fwd = [&](int64_t j) -> Status {
    Result<double> l = md.stage_forward(static_cast<int>(j % nslots), batch(j), first ? nullptr : rb, last ? nullptr : sb,
                                        loss_scale, denom, seed(j));
    if (!l) return l.status();
    loss += *l;
    return Status::ok();
  };
  auto bwd = [&](int64_t j) {
    return md.stage_backward(static_cast<int>(j % nslots), batch(j), last ? nullptr : rb, first ? nullptr : sb);
  };
  auto recv_forward = [&](int64_t j) { return first ? Status::ok() : cm.recv(rb, count_, dtype_, r - 1, Group::pp, ftag(j)); };
  auto send_forward = [&](int64_t j) { return last ? Status::ok() : cm.send(sb, count_, dtype_, r + 1, Group::pp, ftag(j)); };
  auto recv_backward = [&](int64_t j) { return last ? Status::ok() : cm.recv(rb, count_, dtype_, r + 1, Group::pp, btag(j)); };
  auto send_backward = [&](int64_t j) { return first ? Status::ok() : cm.send(sb, count_, dtype_, r - 1, Group::pp, btag(j)); };
  // The pairs: the send's buffer was consumed before, the receive's is needed next.
  auto send_forward_recv_backward = [&](int64_t jf, int64_t jb) {
    return last ? Status::ok() : cm.sendrecv(sb, rb, count_, dtype_, r + 1, Group::pp, ftag(jf), btag(jb));
  };
  auto send_backward_recv_forward = [&](int64_t jb, int64_t jf) {
    return first ? Status::ok() : cm.sendrecv(sb, rb, count_, dtype_, r - 1, Group::pp, btag(jb), ftag(jf));
  };

  for (int64_t j = 0; j < warmup; ++j) {
    PP_TRY(recv_forward(j));
    PP_TRY(fwd(j));
    PP_TRY(send_forward(j));
  }
  if (remaining > 0) PP_TRY(recv_forward(warmup));
  for (int64_t i = 0; i < remaining; ++i) {  // steady state: one forward, one backward
    const int64_t j = warmup + i;
    PP_TRY(fwd(j));
    PP_TRY(send_forward_recv_backward(j, i));
    PP_TRY(bwd(i));
    if (i == remaining - 1) PP_TRY(send_backward(i));
    else PP_TRY(send_backward_recv_forward(i, j + 1));
  }
  for (int64_t i = remaining; i < m; ++i) {  // cool-down
    PP_TRY(recv_backward(i));
    PP_TRY(bwd(i));
    PP_TRY(send_backward(i));
  }
  return loss;
}

Status Pipeline::sync_tied_embedding() {
  const ModelConfig& c = model_->config();
  const int p = comm_->size(Group::pp), r = comm_->rank(Group::pp);
  if (p == 1 || !c.spec.tied_embeddings || (r != 0 && r != p - 1)) return Status::ok();
  for (ParamRef& pr : model_->params()) {
    if (pr.name != "embed.tokens" || pr.grad == nullptr) continue;
    Tensor& g = *pr.grad;
    const int64_t n = g.numel(), chunk = std::min<int64_t>(n, int64_t{1} << 20);
    Result<Tensor> tmp = Tensor::empty(*alloc_, Shape{chunk}, g.dtype(), Category::workspace, "pipeline.tied_grad");
    if (!tmp) return tmp.status();
    const int64_t es = dtype_size(g.dtype());
    const int peer = r == 0 ? p - 1 : 0;
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t k = std::min(chunk, n - at);
      char* mine = static_cast<char*>(g.raw()) + at * es;
      PP_TRY(comm_->sendrecv(mine, tmp->raw(), k, g.dtype(), peer, Group::pp, 7000, 7000));
      // IEEE addition commutes, so both stages' sums are bit-equal.
      add_into(g.dtype(), mine, tmp->raw(), k);
    }
  }
  return Status::ok();
}

}  // namespace llmplan::exec
