#include "executor/comm/pipeline.h"

#include <algorithm>
#include <string>

#include "planner/cost/plan_check.h"
#include "simulator/schedule.h"

namespace llmplan::exec {

#define PP_TRY(expr)           \
  do {                         \
    Status pp_s_ = (expr);     \
    if (!pp_s_) return pp_s_;  \
  } while (0)

int64_t Pipeline::slots(const ParallelPlan& plan, int64_t m, int stage) {
  if (plan.pp == 1) return 1;
  // A split backward frees a micro-batch at its W, which the schedule defers: one slot each.
  if (plan.schedule == Schedule::gpipe || plan.vpp > 1 || splits_backward(plan.schedule)) return m;
  return std::min<int64_t>(m, plan.pp - stage);
}

Result<std::unique_ptr<Pipeline>> Pipeline::create(TrackingAllocator& alloc, Model& model, Communicator& comm, BucketOps* ops) {
  std::unique_ptr<Pipeline> p(new Pipeline());
  p->alloc_ = &alloc;
  p->ops_ = ops != nullptr ? ops : &p->host_ops_;
  p->model_ = &model;
  p->comm_ = &comm;
  const ModelConfig& c = model.config();
  p->dtype_ = c.storage;
  // A stage's output: this rank's tokens of the micro-batch (its CP slice, its SP shard).
  const int64_t tokens = static_cast<int64_t>(c.plan.micro_batch) * (c.job.seq_len / std::max(1, c.plan.cp));
  p->count_ = tokens / (c.plan.sp ? c.plan.tp : 1) * c.spec.hidden;
  if (placed_in_v(c.plan) && c.plan.pp > 1) {  // the V: recv_ and the send buffers the stage uses (see the top)
    const int r = comm.rank(Group::pp), nv = 2 * c.plan.pp;
    for (int fwd = 0; fwd < 2; ++fwd)
      for (int ck = 0; ck < 2; ++ck) {
        const int vs = chunk_virtual_stage(c.plan, r, ck), to = fwd ? vs + 1 : vs - 1;
        if (to < 0 || to >= nv) continue;
        Result<Tensor> t = Tensor::empty(alloc, Shape{p->count_}, p->dtype_, Category::communication,
                                         fwd ? "pipeline.send" : "pipeline.send_grad");
        if (!t) return t.status();
        p->v_send_[fwd][ck] = std::move(*t);
      }
    Result<Tensor> t = Tensor::empty(alloc, Shape{p->count_}, p->dtype_, Category::communication, "pipeline.recv");
    if (!t) return t.status();
    p->recv_ = std::move(*t);
    return p;
  }
  for (Tensor* t : {&p->send_, &p->recv_, &p->send_grad_}) {
    if (t == &p->send_grad_ && model.chunks() == 1) continue;
    Result<Tensor> r = Tensor::empty(alloc, Shape{p->count_}, p->dtype_, Category::communication,
                                     t == &p->send_ ? "pipeline.send" : t == &p->recv_ ? "pipeline.recv" : "pipeline.send_grad");
    if (!r) return r.status();
    *t = std::move(*r);
  }
  return p;
}

Result<double> Pipeline::run_step(int64_t m, const std::function<Batch(int64_t)>& batch,
                                  const std::function<uint64_t(int64_t)>& seed, double loss_scale, double denom) {
  const ParallelPlan& plan = model_->config().plan;
  const bool split = plan.pp > 1 && splits_backward(plan.schedule);
  if (split && model_->chunks() > 1) return run_v(m, batch, seed, loss_scale, denom);
  if (model_->chunks() > 1) return run_interleaved(m, batch, seed, loss_scale, denom);
  Communicator& cm = *comm_;
  Model& md = *model_;
  const int p = cm.size(Group::pp), r = cm.rank(Group::pp);
  const bool first = r == 0, last = r == p - 1;
  std::vector<std::vector<int64_t>> w_after;  // ZB-H1: the W's after each B
  if (split) {
    Result<std::vector<std::vector<int64_t>>> w = zb_h1_weight_passes(p, m, r);
    if (!w) return w.status();
    w_after = std::move(*w);
  }
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
    if (split) return md.stage_backward_input(static_cast<int>(j % nslots), batch(j), last ? nullptr : rb, first ? nullptr : sb);
    return md.stage_backward(static_cast<int>(j % nslots), batch(j), last ? nullptr : rb, first ? nullptr : sb);
  };
  auto weight_passes = [&](int64_t i) -> Status {  // ZB-H1: the W's the schedule puts after B i (its send gone)
    if (!split) return Status::ok();
    for (int64_t j : w_after[static_cast<size_t>(i)]) PP_TRY(md.stage_backward_weight(static_cast<int>(j % nslots)));
    return Status::ok();
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
    PP_TRY(weight_passes(i));
  }
  for (int64_t i = remaining; i < m; ++i) {  // cool-down
    PP_TRY(recv_backward(i));
    PP_TRY(bwd(i));
    PP_TRY(send_backward(i));
    PP_TRY(weight_passes(i));
  }
  return loss;
}

Result<std::vector<std::vector<int64_t>>> Pipeline::zb_h1_weight_passes(int p, int64_t m, int stage) {
  const StageProgram prog = pipeline_schedule(EffectiveSchedule::zb_h1, p, 1, m)[static_cast<size_t>(stage)];
  // 1F1B's order of F and B, the one run_step's loops run.
  std::vector<std::pair<bool, int64_t>> want;
  const StageProgram one_f_one_b = pipeline_schedule(EffectiveSchedule::one_f_one_b, p, 1, m)[static_cast<size_t>(stage)];
  for (const PipelineOp& op : one_f_one_b) want.push_back({op.forward(), op.microbatch});
  std::vector<std::vector<int64_t>> after(static_cast<size_t>(m));
  size_t at = 0;
  int64_t last_b = -1;
  for (const PipelineOp& op : prog) {
    if (op.kind == PassKind::weight_grad) {
      if (last_b < 0) return Status::runtime("zb-h1 schedule: a W before any B on stage " + std::to_string(stage));
      after[static_cast<size_t>(last_b)].push_back(op.microbatch);
      continue;
    }
    const bool fwd = op.kind == PassKind::forward;
    if (at >= want.size() || want[at] != std::pair<bool, int64_t>{fwd, op.microbatch} || (!fwd && op.kind != PassKind::input_grad))
      return Status::runtime("zb-h1 schedule: stage " + std::to_string(stage) + "'s F and B are not 1F1B's at pass " + std::to_string(at));
    if (!fwd) last_b = op.microbatch;
    ++at;
  }
  if (at != want.size()) return Status::runtime("zb-h1 schedule: stage " + std::to_string(stage) + " misses passes");
  return after;
}

Result<double> Pipeline::run_v(int64_t m, const std::function<Batch(int64_t)>& batch, const std::function<uint64_t(int64_t)>& seed,
                               double loss_scale, double denom) {
  Communicator& cm = *comm_;
  const ParallelPlan& plan = model_->config().plan;
  const int p = cm.size(Group::pp), r = cm.rank(Group::pp), nv = 2 * p;
  if (model_->chunks() != 2 || !placed_in_v(plan))
    return Status::bad_input("zbv: a V schedule needs plan.vpp 2 (two model chunks per stage), got " + std::to_string(model_->chunks()));
  auto tag = [&](int64_t j, int vs, bool forward) { return static_cast<int>(2 * (j * nv + vs) + (forward ? 0 : 1)); };
  auto holder = [&](int vs) { return vs < p ? vs : nv - 1 - vs; };  // the stage that holds virtual stage vs
  void* rb = recv_.raw();
  double loss = 0;
  // At the V's turn (stage pp-1) the output stays in the send buffer for the other chunk:
  // the micro-batch whose turn it holds (-1: none).
  int64_t turn_fwd = -1, turn_bwd = -1;
  auto wait = [&](int& handle) -> Status {
    const int h = handle;
    handle = -1;
    return cm.wait_send(h);
  };
  auto send = [&](Tensor& t, int& handle, int peer, int tg) -> Status {
    Result<int> h = cm.isend(t.raw(), count_, dtype_, peer, Group::pp, tg);
    if (!h) return h.status();
    handle = *h;
    return Status::ok();
  };
  auto turn_error = [&](const char* what, int64_t held, int64_t j) {
    return Status::runtime(std::string("zbv stage ") + std::to_string(r) + ": the V's turn " + what + " of micro-batch " +
                           std::to_string(held) + " is not consumed before micro-batch " + std::to_string(j) + " needs its buffer");
  };
  // One pass of chunk c: F (forward), B (input gradient: data flows down the virtual
  // stages) or, `whole`, the whole backward (B and W at once: DualPipeV's overlapped pairs).
  auto pass = [&](bool forward, int c, int64_t j, bool whole = false) -> Status {
    const int vs = chunk_virtual_stage(plan, r, c);
    const int from = forward ? vs - 1 : vs + 1, to = forward ? vs + 1 : vs - 1;
    const bool has_in = from >= 0 && from < nv, has_out = to >= 0 && to < nv;
    Tensor& out_buf = v_send_[forward ? 1 : 0][c];
    int& out_h = v_send_h_[forward ? 1 : 0][c];
    int64_t& turn = forward ? turn_fwd : turn_bwd;  // held in the other chunk's buffer of this direction
    const void* in = nullptr;
    if (has_in && holder(from) == r) {  // the turn: the other chunk's output, left in its buffer
      if (turn != j) return Status::runtime("zbv stage " + std::to_string(r) + ": the V's turn holds no output of micro-batch " + std::to_string(j));
      in = v_send_[forward ? 1 : 0][1 - c].raw();
      turn = -1;
    } else if (has_in) {
      PP_TRY(cm.recv(rb, count_, dtype_, holder(from), Group::pp, tag(j, from, forward)));
      in = rb;
    }
    void* out = nullptr;
    if (has_out) {
      // The turn's buffer is chunk 0's activations and chunk 1's gradients.
      if (turn >= 0 && c == (forward ? 0 : 1)) return turn_error(forward ? "activation" : "gradient", turn, j);
      PP_TRY(wait(out_h));
      out = out_buf.raw();
    }
    Model& ck = model_->chunk(c);
    if (forward) {
      Result<double> l = ck.stage_forward(static_cast<int>(j), batch(j), in, out, loss_scale, denom, seed(j));
      if (!l) return l.status();
      loss += *l;
    } else if (whole) {
      PP_TRY(ck.stage_backward(static_cast<int>(j), batch(j), in, out));
    } else {
      PP_TRY(ck.stage_backward_input(static_cast<int>(j), batch(j), in, out));
    }
    if (!has_out) return Status::ok();
    if (holder(to) == r) {
      turn = j;
      return Status::ok();
    }
    return send(out_buf, out_h, holder(to), tag(j, vs, forward));
  };
  const EffectiveSchedule sched = plan.schedule == Schedule::dualpipev ? EffectiveSchedule::dualpipev : EffectiveSchedule::zbv;
  if (sched == EffectiveSchedule::dualpipev && m < 2 * p)
    return Status::bad_input("dualpipev needs at least 2 * pp = " + std::to_string(2 * p) + " micro-batches per step, got " +
                             std::to_string(m));
  const StageProgram program = pipeline_schedule(sched, p, 2, m)[static_cast<size_t>(r)];
  for (const PipelineOp& op : program) {
    switch (op.kind) {
      case PassKind::forward: PP_TRY(pass(true, op.chunk, op.microbatch)); break;
      case PassKind::input_grad: PP_TRY(pass(false, op.chunk, op.microbatch)); break;
      case PassKind::weight_grad: PP_TRY(model_->chunk(op.chunk).stage_backward_weight(op.microbatch)); break;
      case PassKind::backward: PP_TRY(pass(false, op.chunk, op.microbatch, true)); break;
    }
  }
  for (auto& hs : v_send_h_)
    for (int& h : hs) PP_TRY(wait(h));
  return loss;
}

std::vector<Pipeline::ChunkOp> Pipeline::interleaved_order(int p, int v, int64_t m, int r) {
  const int nv = p * v;
  const int64_t total = m * v;
  const int64_t warmup = std::min<int64_t>(total, (p - r - 1) * 2 + static_cast<int64_t>(v - 1) * p);
  // Virtual micro-batch k: micro-batch (k / (p*v))*p + k % p of chunk (k % (p*v)) / p
  // (backward: the chunks in reverse).
  auto op = [&](int64_t k, bool forward) {
    const int c = static_cast<int>((k % nv) / p);
    return ChunkOp{forward, forward ? c : v - 1 - c, (k / nv) * p + k % p};
  };
  std::vector<ChunkOp> order;
  for (int64_t k = 0; k < warmup; ++k) order.push_back(op(k, true));
  for (int64_t k = 0; k < total - warmup; ++k) {  // steady state: one forward, one backward
    order.push_back(op(warmup + k, true));
    order.push_back(op(k, false));
  }
  for (int64_t k = total - warmup; k < total; ++k) order.push_back(op(k, false));  // cool-down
  return order;
}

Result<double> Pipeline::run_interleaved(int64_t m, const std::function<Batch(int64_t)>& batch,
                                         const std::function<uint64_t(int64_t)>& seed, double loss_scale, double denom) {
  Communicator& cm = *comm_;
  const int p = cm.size(Group::pp), r = cm.rank(Group::pp), v = model_->chunks();
  if (m % p != 0)
    return Status::bad_input("interleaved 1F1B needs micro-batches per step (" + std::to_string(m) + ") divisible by pp " +
                             std::to_string(p));
  const int nv = p * v;
  // Tags: what virtual stage vs sends for micro-batch j, forward (even) or backward (odd).
  auto tag = [&](int64_t j, int vs, bool forward) { return static_cast<int>(2 * (j * nv + vs) + (forward ? 0 : 1)); };
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  void* rb = recv_.raw();
  double loss = 0;
  auto send = [&](Tensor& t, int& handle, int peer, int tg) -> Status {
    Result<int> h = cm.isend(t.raw(), count_, dtype_, peer, Group::pp, tg);
    if (!h) return h.status();
    handle = *h;
    return Status::ok();
  };
  auto wait = [&](int& handle) -> Status {  // the buffer's previous send, before it is rewritten
    const int h = handle;
    handle = -1;
    return cm.wait_send(h);
  };
  auto fwd = [&](int c, int64_t j) -> Status {
    const int vs = c * p + r;
    const bool vfirst = vs == 0, vlast = vs == nv - 1;
    if (!vfirst) PP_TRY(cm.recv(rb, count_, dtype_, prev, Group::pp, tag(j, vs - 1, true)));
    if (!vlast) PP_TRY(wait(send_h_));
    Result<double> l = model_->chunk(c).stage_forward(static_cast<int>(j), batch(j), vfirst ? nullptr : rb,
                                                      vlast ? nullptr : send_.raw(), loss_scale, denom, seed(j));
    if (!l) return l.status();
    loss += *l;
    return vlast ? Status::ok() : send(send_, send_h_, next, tag(j, vs, true));
  };
  auto bwd = [&](int c, int64_t j) -> Status {
    const int vs = c * p + r;
    const bool vfirst = vs == 0, vlast = vs == nv - 1;
    if (!vlast) PP_TRY(cm.recv(rb, count_, dtype_, next, Group::pp, tag(j, vs + 1, false)));
    if (!vfirst) PP_TRY(wait(send_grad_h_));
    PP_TRY(model_->chunk(c).stage_backward(static_cast<int>(j), batch(j), vlast ? nullptr : rb,
                                           vfirst ? nullptr : send_grad_.raw()));
    return vfirst ? Status::ok() : send(send_grad_, send_grad_h_, prev, tag(j, vs, false));
  };
  for (const ChunkOp& op : interleaved_order(p, v, m, r)) PP_TRY(op.forward ? fwd(op.chunk, op.micro_batch) : bwd(op.chunk, op.micro_batch));
  PP_TRY(wait(send_h_));
  PP_TRY(wait(send_grad_h_));
  return loss;
}

Status Pipeline::sync_tied_embedding() {
  const ModelConfig& c = model_->config();
  const int p = comm_->size(Group::pp), r = comm_->rank(Group::pp);
  if (p == 1 || !c.spec.tied_embeddings) return Status::ok();
  if (placed_in_v(c.plan)) {  // the V: the embedding (chunk 0) and the head's copy (chunk 1) are both on stage 0
    if (r != 0) return Status::ok();
    Tensor* g[2] = {nullptr, nullptr};
    for (ParamRef& pr : model_->params())
      if (pr.name == "embed.tokens" && pr.grad != nullptr) g[pr.shared_copy ? 1 : 0] = pr.grad;
    if (g[0] == nullptr || g[1] == nullptr) return Status::ok();
    PP_TRY(ops_->add(g[0]->dtype(), g[0]->raw(), g[1]->raw(), g[0]->numel()));
    return ops_->copy(g[1]->raw(), g[0]->raw(), g[0]->bytes());
  }
  if (r != 0 && r != p - 1) return Status::ok();
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
      PP_TRY(ops_->add(g.dtype(), mine, tmp->raw(), k));
    }
  }
  return Status::ok();
}

}  // namespace llmplan::exec
