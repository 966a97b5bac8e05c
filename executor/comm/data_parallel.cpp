#include "executor/comm/data_parallel.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

#include "executor/cpu/ops.h"

namespace llmplan::exec {

namespace {

// Visits the pieces of flat range [lo, hi) of the params `ids` (trainable, laid end to
// end): fn(param, offset in param, count, offset in the range).
void for_each_piece(std::vector<ParamRef>& params, const std::vector<int>& ids, int64_t lo, int64_t hi,
                    const std::function<void(ParamRef&, int64_t, int64_t, int64_t)>& fn) {
  int64_t flat = 0;
  for (int i : ids) {
    ParamRef& p = params[static_cast<size_t>(i)];
    const int64_t n = p.weight->numel();
    const int64_t a = std::max(lo, flat), b = std::min(hi, flat + n);
    if (a < b) fn(p, a - flat, b - a, a - lo);
    flat += n;
    if (flat >= hi) break;
  }
}

// Packs flat [lo, hi) of grads (or weights) into buf (zeros beyond N), or unpacks it.
Status pack(BucketOps& ops, std::vector<ParamRef>& ps, const std::vector<int>& ids, int64_t lo, int64_t hi, float* buf, bool grads) {
  if (Status s = ops.zero(buf, (hi - lo) * 4); !s) return s;
  Status st = Status::ok();
  for_each_piece(ps, ids, lo, hi, [&](ParamRef& p, int64_t off, int64_t c, int64_t at) {
    if (st) st = ops.read_f32(grads ? *p.grad : *p.weight, off, buf + at, c);
  });
  return st;
}
Status unpack(BucketOps& ops, std::vector<ParamRef>& ps, const std::vector<int>& ids, int64_t lo, int64_t hi, const float* buf, bool grads) {
  Status st = Status::ok();
  for_each_piece(ps, ids, lo, hi, [&](ParamRef& p, int64_t off, int64_t c, int64_t at) {
    if (st) st = ops.write_f32(buf + at, grads ? *p.grad : *p.weight, off, c);
  });
  return st;
}

int64_t clamp0(int64_t x, int64_t hi) { return std::max<int64_t>(0, std::min(x, hi)); }

}  // namespace

// ---- HostBucketOps

Status HostBucketOps::zero(void* p, int64_t bytes) {
  if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
  return Status::ok();
}
Status HostBucketOps::read_f32(const Tensor& t, int64_t off, float* out, int64_t n) {
  exec::read_f32(t, off, out, n);
  return Status::ok();
}
Status HostBucketOps::write_f32(const float* in, Tensor& t, int64_t off, int64_t n) {
  exec::write_f32(in, t, off, n);
  return Status::ok();
}
// A 16-bit partition rounds once per micro-batch, as a 16-bit gradient accumulating in
// place does.
Status HostBucketOps::add_f32(const float* in, Tensor& t, int64_t off, int64_t n) {
  if (n <= 0) return Status::ok();
  if (t.dtype() == DType::f32) {
    float* g = t.data<float>() + off;
    for (int64_t i = 0; i < n; ++i) g[i] += in[i];
    return Status::ok();
  }
  constexpr int64_t kChunk = 1024;
  float tmp[kChunk];
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t c = std::min(kChunk, n - at);
    exec::read_f32(t, off + at, tmp, c);
    for (int64_t i = 0; i < c; ++i) tmp[i] += in[at + i];
    exec::write_f32(tmp, t, off + at, c);
  }
  return Status::ok();
}
Status HostBucketOps::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  return Status::ok();
}
namespace {
template <class T>
void add_typed(T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bf16_t>) y[i] = float_to_bf16(bf16_to_float(y[i]) + bf16_to_float(x[i]));
    else if constexpr (std::is_same_v<T, f16_t>) y[i] = float_to_f16(f16_to_float(y[i]) + f16_to_float(x[i]));
    else y[i] += x[i];
  }
}
}  // namespace
Status HostBucketOps::add(DType t, void* y, const void* x, int64_t n) {
  switch (t) {
    case DType::f32: add_typed(static_cast<float*>(y), static_cast<const float*>(x), n); return Status::ok();
    case DType::f64: add_typed(static_cast<double*>(y), static_cast<const double*>(x), n); return Status::ok();
    case DType::bf16: add_typed(static_cast<bf16_t*>(y), static_cast<const bf16_t*>(x), n); return Status::ok();
    case DType::f16: add_typed(static_cast<f16_t*>(y), static_cast<const f16_t*>(x), n); return Status::ok();
    default: return Status::bad_input(std::string("HostBucketOps::add: no sum of ") + to_string(t) + " tensors");
  }
}

// ---- DataParallel

Result<std::unique_ptr<DataParallel>> DataParallel::create(TrackingAllocator& alloc, Model& model, Communicator& comm, int zero,
                                                           int64_t bucket_bytes, BucketOps* ops) {
  std::unique_ptr<DataParallel> d(new DataParallel());
  d->ops_ = ops != nullptr ? ops : &d->host_ops_;
  d->alloc_ = &alloc;
  d->model_ = &model;
  d->comm_ = &comm;
  d->zero_ = zero;
  d->dp_ = comm.size(Group::dp_cp);
  d->rank_ = comm.rank(Group::dp_cp);
  const bool ep = model.config().plan.ep > 1;
  d->groups_[0] = {Group::dp_cp, d->dp_, d->rank_, {}, 0};
  d->groups_[1] = {Group::edp, ep ? comm.size(Group::edp) : d->dp_, ep ? comm.rank(Group::edp) : d->rank_, {}, 0};
  std::vector<ParamRef>& ps = model.params();
  d->parts_.resize(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    Part& pt = d->parts_[i];
    pt.group = ep && ps[i].expert ? 1 : 0;
    const GroupShare& gs = d->groups_[pt.group];
    pt.n = ps[i].weight->numel();
    pt.chunk = (pt.n + gs.size - 1) / gs.size;
    pt.lo = gs.rank * pt.chunk;
    pt.count = clamp0(pt.n - pt.lo, pt.chunk);
    if (ps[i].grad) {
      d->n_ += pt.n;
      d->trainable_.push_back(static_cast<int>(i));
      d->groups_[pt.group].ids.push_back(static_cast<int>(i));
      d->groups_[pt.group].n += pt.n;
    }
  }
  // A bucket holds a multiple of both groups' sizes so reduce-scatter / all-gather split it
  // evenly (edp's size divides dp_cp's).
  d->bucket_elems_ = std::max<int64_t>(d->dp_, bucket_bytes / 4 / d->dp_ * d->dp_);
  for (Tensor* t : {&d->a_, &d->b_}) {
    Result<Tensor> r = Tensor::empty(alloc, Shape{d->bucket_elems_}, DType::f32, Category::communication, "dp.bucket");
    if (!r) return r.status();
    *t = std::move(*r);
    if (Status s = d->ops_->zero(t->raw(), t->bytes()); !s) return s;
  }
  if (zero < 2 || d->dp_ == 1) return d;
  // Shrink to the partition: the model was built full-size (its initialisation draws the
  // full tensors); from here on only the slices persist.
  for (size_t i = 0; i < ps.size(); ++i) {
    Part& pt = d->parts_[i];
    ParamRef& p = ps[i];
    if (p.grad) {
      Result<Tensor> g = Tensor::empty(alloc, Shape{pt.count}, p.grad->dtype(), Category::gradients, p.name + ".grad.partition");
      if (!g) return g.status();
      *p.grad = std::move(*g);
      if (Status s = d->zero_tensor(*p.grad); !s) return s;
    }
    if (zero >= 3) {
      Result<Tensor> w = Tensor::empty(alloc, Shape{pt.count}, p.weight->dtype(), Category::weights, p.name + ".partition");
      if (!w) return w.status();
      if (pt.count > 0)
        if (Status s = d->ops_->copy(w->raw(), static_cast<const char*>(p.weight->raw()) + pt.lo * dtype_size(p.weight->dtype()),
                                     w->bytes());
            !s)
          return s;
      *p.weight = std::move(*w);
    }
  }
  const std::vector<std::vector<int>>& units = model.units();
  d->unit_gathered_.assign(units.size(), 0);
  d->unit_grads_.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u)
    for (int i : units[u])
      if (ps[static_cast<size_t>(i)].grad) d->unit_grads_[u].push_back(i);
  model.set_param_hooks(d.get());
  return d;
}

// Tensor::zeros memsets on the host; a device tensor is zeroed through the ops.
Status DataParallel::zero_tensor(Tensor& t) { return ops_->zero(t.raw(), t.bytes()); }

DataParallel::~DataParallel() {
  if (pending_) (void)comm_->fence();  // an unfinished step: its result is not needed, the buckets must be idle
  if (zero_ >= 2 && dp_ > 1) model_->set_param_hooks(nullptr);
}

TrainerShard DataParallel::shard() const {
  TrainerShard s;
  for (int i : trainable_) {
    const Part& pt = parts_[static_cast<size_t>(i)];
    ShardRange r;
    r.count = pt.count;
    r.weight_offset = zero_ >= 3 && dp_ > 1 ? 0 : pt.lo;
    r.grad_offset = zero_ >= 2 && dp_ > 1 ? 0 : pt.lo;
    s.ranges.push_back(r);
  }
  Communicator* c = comm_;
  s.reduce_sum = [c](double x) {
    (void)c->all_reduce_sum(&x, 1, DType::f64, Group::dp_cp);
    return x;
  };
  return s;
}

Status DataParallel::complete(std::function<Status()> unpack, bool defer) {
  pending_ = std::move(unpack);
  return defer && comm_->can_defer() ? Status::ok() : finish();
}

Status DataParallel::finish() {
  if (!pending_) return Status::ok();
  std::function<Status()> unpack = std::move(pending_);
  pending_ = nullptr;
  if (Status s = comm_->fence(); !s) return s;
  return unpack();
}

template <class F>
Status DataParallel::collective(F&& f) {
  const bool defer = comm_->can_defer();
  if (defer) comm_->set_deferred(true);  // only this call: the model's and the runner's stay ordered
  Status s = f();
  if (defer) comm_->set_deferred(false);
  return s;
}

Status DataParallel::sync_grads() {
  std::vector<ParamRef>& ps = model_->params();
  if (Status s = finish(); !s) return s;  // the last unit's reduce-scatter (ZeRO 2, 3)
  if (dp_ == 1 || zero_ >= 2) return Status::ok();
  // All-reduce, alternating the two buckets, each completed at once (after the backward:
  // nothing to overlap with but the packing of the next bucket); expert parameters (ep > 1)
  // over the ranks holding the same experts (edp), the rest over dp_cp.
  bool use_a = true;
  for (const GroupShare& gs : groups_) {
    if (gs.size == 1) continue;
    for (int64_t lo = 0; lo < gs.n; lo += bucket_elems_) {
      const int64_t hi = std::min(gs.n, lo + bucket_elems_);
      float* buf = (use_a ? a_ : b_).data<float>();
      use_a = !use_a;
      if (Status s = pack(*ops_, ps, gs.ids, lo, hi, buf, true); !s) return s;
      if (Status s = collective([&] { return comm_->all_reduce_sum(buf, hi - lo, DType::f32, gs.group); }); !s) return s;
      ++buckets_;
      if (Status s = complete([this, &gs, lo, hi, buf] { return unpack(*ops_, model_->params(), gs.ids, lo, hi, buf, true); }, false);
          !s)
        return s;
    }
  }
  return Status::ok();
}

// The slices of `ids` laid end to end ("slice space", each parameter `chunk` elements) are
// moved k <= bucket / dp at a time: a bucket holds rank r's k elements at [r * k, (r + 1) * k).
// fn(params() index, offset in the slice, count, offset in the bucket piece).
namespace {
template <class Parts, class Fn>
void for_each_slice(const Parts& parts, const std::vector<int>& ids, int64_t lo, int64_t hi, Fn fn) {
  int64_t at = 0;
  for (size_t j = 0; j < ids.size() && at < hi; ++j) {
    const int64_t c = parts[static_cast<size_t>(ids[j])].chunk;
    const int64_t a = std::max(lo, at), b = std::min(hi, at + c);
    if (a < b) fn(ids[j], a - at, b - a, a - lo);
    at += c;
  }
}
}  // namespace

std::vector<int> DataParallel::in_group(const std::vector<int>& ids, int group) const {
  std::vector<int> v;
  for (int i : ids)
    if (parts_[static_cast<size_t>(i)].group == group) v.push_back(i);
  return v;
}

Status DataParallel::reduce_scatter(const std::vector<int>& ids, bool defer) {
  // The non-expert group first, then the expert one; only the very last bucket's unpack may
  // stay pending (the expert group's first bucket finishes the other group's last one).
  const std::vector<int> mine[2] = {in_group(ids, 0), in_group(ids, 1)};
  for (int g = 0; g < 2; ++g)
    if (!mine[g].empty())
      if (Status s = reduce_scatter(mine[g], g, defer && (g == 1 || mine[1].empty())); !s) return s;
  return Status::ok();
}

Status DataParallel::reduce_scatter(const std::vector<int>& ids, int group, bool defer) {
  std::vector<ParamRef>& ps = model_->params();
  const int dp = groups_[group].size;
  int64_t total = 0;
  for (int i : ids) total += parts_[static_cast<size_t>(i)].chunk;
  const int64_t k_max = bucket_elems_ / dp;
  float* in = a_.data<float>();
  float* out = b_.data<float>();
  for (int64_t lo = 0; lo < total; lo += k_max) {
    const int64_t k = std::min(k_max, total - lo);
    if (Status s = finish(); !s) return s;  // both buckets free, the previous result in place
    Status st = ops_->zero(in, k * dp * 4);
    for (int r = 0; r < dp; ++r)
      for_each_slice(parts_, ids, lo, lo + k, [&](int i, int64_t off, int64_t c, int64_t at) {
        const Part& pt = parts_[static_cast<size_t>(i)];
        const int64_t e = r * pt.chunk + off;  // element of the full gradient
        if (st) st = ops_->read_f32(*ps[static_cast<size_t>(i)].grad, e, in + r * k + at, clamp0(pt.n - e, c));
      });
    if (!st) return st;
    if (Status s = collective([&] { return comm_->reduce_scatter_sum(in, out, k, DType::f32, groups_[group].group); }); !s) return s;
    ++buckets_;
    // Added into the partition: in the stash while the full gradient is in the model (now,
    // or when a later micro-batch's begin_grads moved it there), in the model after end_grads.
    const bool last = lo + k >= total;
    Status c = complete(
        [this, ids, lo, k, out] {
          std::vector<ParamRef>& ps = model_->params();
          Status r = Status::ok();
          for_each_slice(parts_, ids, lo, lo + k, [&](int i, int64_t off, int64_t c, int64_t at) {
            Part& pt = parts_[static_cast<size_t>(i)];
            Tensor& part = pt.gstash.defined() ? pt.gstash : *ps[static_cast<size_t>(i)].grad;
            if (r) r = ops_->add_f32(out + at, part, off, clamp0(pt.count - off, c));
          });
          return r;
        },
        defer && last);
    if (!c) return c;
  }
  return Status::ok();
}

// All-gathers the slices of `ids` into the model's full-size weights: from the stashed
// partition (ZeRO-3), or from this rank's slice of the full weight (ZeRO 1-2, after the step).
// REQUIRES: every one of `ids` is partitioned over groups_[group].
Status DataParallel::gather(const std::vector<int>& ids, bool from_partition, int group, bool defer) {
  std::vector<ParamRef>& ps = model_->params();
  const int dp = groups_[group].size, rank = groups_[group].rank;
  const Group grp = groups_[group].group;
  int64_t total = 0;
  for (int i : ids) total += parts_[static_cast<size_t>(i)].chunk;
  const int64_t k_max = bucket_elems_ / dp;
  float* in = b_.data<float>();
  float* out = a_.data<float>();
  for (int64_t lo = 0; lo < total; lo += k_max) {
    const int64_t k = std::min(k_max, total - lo);
    if (Status s = finish(); !s) return s;  // both buckets free, the previous result in place
    Status st = ops_->zero(in, k * 4);
    for_each_slice(parts_, ids, lo, lo + k, [&](int i, int64_t off, int64_t c, int64_t at) {
      const Part& pt = parts_[static_cast<size_t>(i)];
      const int64_t valid = clamp0(pt.count - off, c);
      if (!st) return;
      if (from_partition) st = ops_->read_f32(pt.wstash, off, in + at, valid);
      else st = ops_->read_f32(*ps[static_cast<size_t>(i)].weight, pt.lo + off, in + at, valid);
    });
    if (!st) return st;
    if (Status s = collective([&] { return comm_->all_gather(in, out, k, DType::f32, grp); }); !s) return s;
    ++buckets_;
    const bool last = lo + k >= total;
    Status c = complete(
        [this, ids, lo, k, out, from_partition, dp, rank] {
          std::vector<ParamRef>& ps = model_->params();
          Status w = Status::ok();
          for (int r = 0; r < dp; ++r) {
            if (r == rank && !from_partition) continue;  // already there
            for_each_slice(parts_, ids, lo, lo + k, [&](int i, int64_t off, int64_t c, int64_t at) {
              const Part& pt = parts_[static_cast<size_t>(i)];
              const int64_t e = r * pt.chunk + off;
              if (w) w = ops_->write_f32(out + r * k + at, *ps[static_cast<size_t>(i)].weight, e, clamp0(pt.n - e, c));
            });
          }
          return w;
        },
        defer && last);
    if (!c) return c;
  }
  return Status::ok();
}

Status DataParallel::gather_weights() {
  if (zero_ == 0 || zero_ >= 3 || dp_ == 1) return Status::ok();
  // Each group in its own all-gathers (dp_cp, then edp); nothing is left pending.
  for (int g = 0; g < 2; ++g)
    if (groups_[g].size > 1 && !groups_[g].ids.empty())
      if (Status s = gather(groups_[g].ids, false, g, false); !s) return s;
  return Status::ok();
}

Status DataParallel::gather_unit(int unit, bool defer) {
  if (unit < 0 || unit_gathered_[static_cast<size_t>(unit)]) return Status::ok();
  std::vector<ParamRef>& ps = model_->params();
  std::vector<int> todo;  // not already gathered by another unit (a tied embedding)
  for (int i : model_->units()[static_cast<size_t>(unit)]) {
    Part& pt = parts_[static_cast<size_t>(i)];
    if (pt.refs++ > 0) continue;
    ParamRef& p = ps[static_cast<size_t>(i)];
    Result<Tensor> full = Tensor::empty(*alloc_, Shape{pt.n}, p.weight->dtype(), Category::gathered_params, p.name + ".gathered");
    if (!full) return full.status();
    pt.wstash = std::move(*p.weight);
    *p.weight = std::move(*full);
    todo.push_back(i);
  }
  unit_gathered_[static_cast<size_t>(unit)] = 1;
  // As reduce_scatter: only the last group's last bucket may stay pending.
  const std::vector<int> mine[2] = {in_group(todo, 0), in_group(todo, 1)};
  for (int g = 0; g < 2; ++g)
    if (!mine[g].empty())
      if (Status s = gather(mine[g], true, g, defer && (g == 1 || mine[1].empty())); !s) return s;
  return Status::ok();
}

void DataParallel::release_unit(int unit) {
  if (unit < 0 || !unit_gathered_[static_cast<size_t>(unit)]) return;
  std::vector<ParamRef>& ps = model_->params();
  for (int i : model_->units()[static_cast<size_t>(unit)]) {
    Part& pt = parts_[static_cast<size_t>(i)];
    if (--pt.refs > 0) continue;
    *ps[static_cast<size_t>(i)].weight = std::move(pt.wstash);  // frees the gathered tensor
  }
  unit_gathered_[static_cast<size_t>(unit)] = 0;
}

Status DataParallel::use_weights(int unit, int next) {
  if (zero_ < 3) return Status::ok();
  if (Status s = finish(); !s) return s;  // u's weights, prefetched by the previous call, in place
  if (Status s = gather_unit(unit, false); !s) return s;
  // Prefetch: the next unit's all-gather is issued now and, where the communicator can
  // defer, runs beside u's compute (finished by the next call); the memory held (current +
  // next unit) is the same either way.
  return gather_unit(next, true);
}

void DataParallel::release_weights(int unit) {
  if (zero_ >= 3) release_unit(unit);
}

Status DataParallel::begin_grads(int unit) {
  std::vector<ParamRef>& ps = model_->params();
  for (int i : unit_grads_[static_cast<size_t>(unit)]) {
    Part& pt = parts_[static_cast<size_t>(i)];
    ParamRef& p = ps[static_cast<size_t>(i)];
    Result<Tensor> full = Tensor::empty(*alloc_, Shape{pt.n}, p.grad->dtype(), Category::gradients, p.name + ".grad");
    if (!full) return full.status();
    if (Status s = zero_tensor(*full); !s) return s;
    pt.gstash = std::move(*p.grad);
    *p.grad = std::move(*full);
  }
  return Status::ok();
}

Status DataParallel::end_grads(int unit) {
  const std::vector<int>& ids = unit_grads_[static_cast<size_t>(unit)];
  // Deferrable: the full gradients are read into the bucket before the collective, and the
  // result is added into the partition by the next call that needs the buckets or the
  // partitions (sync_grads before the optimizer) -- the next unit's backward runs meanwhile.
  Status s = reduce_scatter(ids, true);
  std::vector<ParamRef>& ps = model_->params();
  for (int i : ids) *ps[static_cast<size_t>(i)].grad = std::move(parts_[static_cast<size_t>(i)].gstash);  // frees the full one
  return s;
}

Status DataParallel::unshard_weights() {
  if (Status s = finish(); !s) return s;
  if (zero_ < 3 || dp_ == 1) return Status::ok();
  const size_t units = model_->units().size();
  for (size_t u = 0; u < units; ++u)
    if (Status s = gather_unit(static_cast<int>(u), false); !s) return s;
  if (Status s = finish(); !s) return s;
  // Keep the full tensors: drop the partitions and forget that the units were gathered.
  for (Part& pt : parts_) {
    pt.wstash.reset();
    pt.refs = 0;
  }
  std::fill(unit_gathered_.begin(), unit_gathered_.end(), 0);
  model_->set_param_hooks(nullptr);  // no more steps: the model is an ordinary full replica now
  return Status::ok();
}

}  // namespace llmplan::exec
