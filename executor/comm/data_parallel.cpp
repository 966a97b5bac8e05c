#include "executor/comm/data_parallel.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "executor/cpu/ops.h"

namespace llmplan::exec {

namespace {

// Visits the pieces of flat range [lo, hi) of the trainable params: fn(param, offset in
// param, count, offset in the range).
void for_each_piece(std::vector<ParamRef>& params, int64_t lo, int64_t hi,
                    const std::function<void(ParamRef&, int64_t, int64_t, int64_t)>& fn) {
  int64_t flat = 0;
  for (ParamRef& p : params) {
    if (!p.grad) continue;
    const int64_t n = p.weight->numel();
    const int64_t a = std::max(lo, flat), b = std::min(hi, flat + n);
    if (a < b) fn(p, a - flat, b - a, a - lo);
    flat += n;
    if (flat >= hi) break;
  }
}

void load(const Tensor& t, int64_t off, float* out, int64_t n) {
  switch (t.dtype()) {
    case DType::f32: std::memcpy(out, t.data<float>() + off, static_cast<size_t>(n) * 4); break;
    case DType::bf16: cpu::cast<bf16_t, float>(t.data<bf16_t>() + off, out, n); break;
    case DType::f16: cpu::cast<f16_t, float>(t.data<f16_t>() + off, out, n); break;
    default: break;
  }
}
void store(const float* in, Tensor& t, int64_t off, int64_t n) {
  switch (t.dtype()) {
    case DType::f32: std::memcpy(t.data<float>() + off, in, static_cast<size_t>(n) * 4); break;
    case DType::bf16: cpu::cast<float, bf16_t>(in, t.data<bf16_t>() + off, n); break;
    case DType::f16: cpu::cast<float, f16_t>(in, t.data<f16_t>() + off, n); break;
    default: break;
  }
}

// Packs flat [lo, hi) of grads (or weights) into buf (zeros beyond N), or unpacks it.
void pack(std::vector<ParamRef>& ps, int64_t lo, int64_t hi, float* buf, bool grads) {
  std::memset(buf, 0, static_cast<size_t>(hi - lo) * 4);
  for_each_piece(ps, lo, hi, [&](ParamRef& p, int64_t off, int64_t c, int64_t at) { load(grads ? *p.grad : *p.weight, off, buf + at, c); });
}
void unpack(std::vector<ParamRef>& ps, int64_t lo, int64_t hi, const float* buf, bool grads) {
  for_each_piece(ps, lo, hi, [&](ParamRef& p, int64_t off, int64_t c, int64_t at) { store(buf + at, grads ? *p.grad : *p.weight, off, c); });
}

}  // namespace

Result<std::unique_ptr<DataParallel>> DataParallel::create(TrackingAllocator& alloc, Model& model, Communicator& comm, int zero,
                                                           int64_t bucket_bytes) {
  std::unique_ptr<DataParallel> d(new DataParallel());
  d->model_ = &model;
  d->comm_ = &comm;
  d->zero_ = zero;
  d->dp_ = comm.size(Group::dp);
  d->rank_ = comm.rank(Group::dp);
  for (const ParamRef& p : model.params())
    if (p.grad) d->n_ += p.weight->numel();
  d->part_ = (d->n_ + d->dp_ - 1) / d->dp_;
  // A bucket holds a multiple of dp elements so reduce-scatter / all-gather split it evenly.
  d->bucket_elems_ = std::max<int64_t>(d->dp_, bucket_bytes / 4 / d->dp_ * d->dp_);
  for (Tensor* t : {&d->a_, &d->b_}) {
    Result<Tensor> r = Tensor::zeros(alloc, Shape{d->bucket_elems_}, DType::f32, Category::communication, "dp.bucket");
    if (!r) return r.status();
    *t = std::move(*r);
  }
  return d;
}

TrainerShard DataParallel::shard() const {
  TrainerShard s;
  s.begin = std::min(n_, rank_ * part_);
  s.end = std::min(n_, (rank_ + 1) * part_);
  Communicator* c = comm_;
  s.reduce_sum = [c](double x) {
    (void)c->all_reduce_sum(&x, 1, DType::f64, Group::dp);
    return x;
  };
  return s;
}

Status DataParallel::sync_grads() {
  std::vector<ParamRef>& ps = model_->params();
  if (dp_ == 1) return Status::ok();
  if (zero_ < 2) {
    // All-reduce, alternating the two buckets (a real backend overlaps one with packing the other).
    bool use_a = true;
    for (int64_t lo = 0; lo < n_; lo += bucket_elems_) {
      const int64_t hi = std::min(n_, lo + bucket_elems_);
      float* buf = (use_a ? a_ : b_).data<float>();
      use_a = !use_a;
      pack(ps, lo, hi, buf, true);
      if (Status s = comm_->all_reduce_sum(buf, hi - lo, DType::f32, Group::dp); !s) return s;
      ++buckets_;
      unpack(ps, lo, hi, buf, true);
    }
    return Status::ok();
  }
  // Reduce-scatter: chunk k of every rank's partition in one bucket (dp slices of K).
  const int64_t k_max = bucket_elems_ / dp_;
  float* in = a_.data<float>();
  float* out = b_.data<float>();
  for (int64_t lo = 0; lo < part_; lo += k_max) {
    const int64_t k = std::min(k_max, part_ - lo);
    for (int r = 0; r < dp_; ++r) {
      const int64_t f = r * part_ + lo;
      std::memset(in + r * k, 0, static_cast<size_t>(k) * 4);
      if (f < n_) pack(ps, f, std::min(n_, f + k), in + r * k, true);
    }
    if (Status s = comm_->reduce_scatter_sum(in, out, k, DType::f32, Group::dp); !s) return s;
    ++buckets_;
    const int64_t f = rank_ * part_ + lo;
    if (f < n_) unpack(ps, f, std::min(n_, f + k), out, true);
  }
  return Status::ok();
}

Status DataParallel::gather_weights() {
  if (zero_ == 0 || dp_ == 1) return Status::ok();
  std::vector<ParamRef>& ps = model_->params();
  const int64_t k_max = bucket_elems_ / dp_;
  float* in = b_.data<float>();
  float* out = a_.data<float>();
  for (int64_t lo = 0; lo < part_; lo += k_max) {
    const int64_t k = std::min(k_max, part_ - lo);
    const int64_t mine = rank_ * part_ + lo;
    std::memset(in, 0, static_cast<size_t>(k) * 4);
    if (mine < n_) pack(ps, mine, std::min(n_, mine + k), in, false);
    if (Status s = comm_->all_gather(in, out, k, DType::f32, Group::dp); !s) return s;
    ++buckets_;
    for (int r = 0; r < dp_; ++r) {
      const int64_t f = r * part_ + lo;
      if (r != rank_ && f < n_) unpack(ps, f, std::min(n_, f + k), out + r * k, false);
    }
  }
  return Status::ok();
}

}  // namespace llmplan::exec
