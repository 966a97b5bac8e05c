#include "executor/cuda/cuda_backend.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "executor/cpu/optimizer.h"
#include "executor/cuda/cuda_bucket_ops.h"
#include "executor/cuda/cuda_model.h"
#include "executor/cuda/ops.h"

namespace llmplan::exec::cuda {
namespace {

template <class G>
Status adamw_or_sgd(CudaContext& ctx, bool adam, std::span<const AdamWTensor> t, std::span<const SgdTensor> s,
                    const cpu::AdamWOptions& ao, const cpu::SgdOptions& so, int64_t step, double grad_scale, DType model) {
  return adam ? adamw_step<G>(ctx, t, ao, step, grad_scale, model) : sgd_step<G>(ctx, s, so, grad_scale, model);
}

class CudaTrainer final : public Trainer {
 public:
  static Result<std::unique_ptr<Trainer>> create(CudaContext& ctx, Model& model, const TrainingJob& job,
                                                 const PrecisionScheme& scheme, const TrainerOptions& options,
                                                 const TrainerShard* shard) {
    if (scheme.optimizer != DType::f32)
      return Status::bad_input("trainer (cuda): 16-bit optimizer states (AMP O3) are CPU-only");
    std::unique_ptr<CudaTrainer> t(new CudaTrainer(ctx));
    t->job_ = job;
    t->scheme_ = scheme;
    t->opt_ = options;
    t->loss_scale_ = scheme.loss_scaling ? options.initial_loss_scale : 1.0;
    const bool adam = job.optimizer == Optimizer::adamw;
    if (shard) t->shard_ = *shard;
    size_t trainable = 0;  // index of this param among the trainable ones (the shard's ranges)
    for (ParamRef& p : model.params()) {
      int64_t n = p.weight->numel();
      if (p.grad == nullptr) {
        if (scheme.f32_weight_copy) {  // O1 keeps an fp32 copy of frozen weights too (planner: 6 B)
          Result<Tensor> c = Tensor::empty(ctx.allocator(), Shape{n}, DType::f32, Category::weights, p.name + ".f32");
          if (!c) return c.status();
          if (Status s = t->to_f32(*p.weight, 0, n, *c); !s) return s;
          t->frozen_copies_.push_back(std::move(*c));
        }
        continue;
      }
      State st;
      st.param = &p;
      st.count = n;
      if (shard) {  // ZeRO: only this rank's range of the parameter (trainer.h ShardRange)
        if (trainable >= shard->ranges.size())
          return Status::runtime("trainer (cuda): the ZeRO shard lists fewer parameters than the model trains");
        const ShardRange& r = shard->ranges[trainable++];
        if (r.count == 0) continue;
        st.offset = r.weight_offset;
        st.grad_offset = r.grad_offset;
        st.count = n = r.count;
      }
      if (scheme.master || scheme.f32_weight_copy) {
        const Category c = scheme.master ? Category::master_weights : Category::weights;
        Result<Tensor> m = Tensor::empty(ctx.allocator(), Shape{n}, DType::f32, c, p.name + (scheme.master ? ".master" : ".f32"));
        if (!m) return m.status();
        st.master = std::move(*m);
        if (Status s = t->to_f32(*p.weight, st.offset, n, st.master); !s) return s;
      } else if (p.weight->dtype() != DType::f32) {
        return Status::bad_input("trainer (cuda): 16-bit weights need fp32 master weights or an fp32 copy");
      }
      Result<Tensor> m = zeros(ctx, Shape{n}, DType::f32, Category::optimizer_states, p.name + (adam ? ".exp_avg" : ".momentum"));
      if (!m) return m.status();
      st.m = std::move(*m);
      if (adam) {
        Result<Tensor> v = zeros(ctx, Shape{n}, DType::f32, Category::optimizer_states, p.name + ".exp_avg_sq");
        if (!v) return v.status();
        st.v = std::move(*v);
      }
      t->states_.push_back(std::move(st));
    }
    Result<Tensor> acc = zeros(ctx, Shape{3}, DType::f64, Category::workspace, "optimizer.grad_norm");
    if (!acc) return acc.status();
    t->norm_acc_ = std::move(*acc);
    return std::unique_ptr<Trainer>(std::move(t));
  }

  double loss_scale() const override { return loss_scale_; }
  int64_t updates() const override { return updates_; }
  Status last_error() const override { return error_; }
  void set_norm_reduce(std::function<double(double, double, double)> f) override { norm_reduce_ = std::move(f); }

  StepOutcome step() override {
    StepOutcome out;
    out.loss_scale = loss_scale_;
    error_ = Status::ok();  // last_error() is about this step
    Result<double> raw = raw_norm();
    if (!raw) {  // a device failure is not an overflow: report it, leave the loss scale alone
      error_ = raw.status();
      out.skipped = true;
      return out;
    }
    const ScalePolicy sp = apply_scale_policy(*raw, scheme_, opt_, &loss_scale_, &good_steps_);
    out.grad_norm = sp.norm;
    if (sp.skip) {
      out.skipped = true;
      return out;
    }
    if (Status s = update(sp.grad_scale); !s) {
      error_ = s;
      out.skipped = true;
      return out;
    }
    ++updates_;
    note_applied_step(scheme_, opt_, &loss_scale_, &good_steps_);
    return out;
  }

 private:
  struct State {
    ParamRef* param = nullptr;
    int64_t offset = 0, grad_offset = 0, count = 0;  // elements: the range of weight and grad updated (ZeRO shard)
    Tensor master;  // f32 (O2 master, O1 weight copy); undefined for fp32 weights
    Tensor m, v;
  };
  explicit CudaTrainer(CudaContext& ctx) : ctx_(ctx) {}

  // out (n) = w[off, off + n) as f32.
  Status to_f32(const Tensor& w, int64_t off, int64_t n, Tensor& out) {
    switch (w.dtype()) {
      case DType::f32: return copy_on_device(ctx_, out.raw(), w.data<float>() + off, n * 4);
      case DType::bf16: return cast<bf16_t, float>(ctx_, w.data<bf16_t>() + off, out.data<float>(), n);
      case DType::f16: return cast<f16_t, float>(ctx_, w.data<f16_t>() + off, out.data<float>(), n);
      default: return Status::bad_input("trainer (cuda): no " + std::string(to_string(w.dtype())) + " weights on the GPU");
    }
  }

  // sqrt of the sum of squares of every gradient (TP-split, replicated and routed-expert
  // apart, for set_norm_reduce, as the CPU trainer), scaled by the loss scale.
  Result<double> raw_norm() {
    if (Status s = fill_bytes(ctx_, norm_acc_.raw(), 0, norm_acc_.bytes()); !s) return s;
    double* acc = norm_acc_.data<double>();
    for (State& s : states_) {
      if (s.param->shared_copy) continue;
      const Tensor& g = *s.param->grad;
      const int64_t o = s.grad_offset, n = s.count;
      double* slot = acc + (s.param->expert ? 2 : s.param->split.dim >= 0 ? 0 : 1);
      Status st = g.dtype() == DType::f32    ? sum_squares_accumulate<float>(ctx_, g.data<float>() + o, n, slot)
                  : g.dtype() == DType::bf16 ? sum_squares_accumulate<bf16_t>(ctx_, g.data<bf16_t>() + o, n, slot)
                                             : sum_squares_accumulate<f16_t>(ctx_, g.data<f16_t>() + o, n, slot);
      if (!st) return st;
    }
    double host[3] = {0, 0, 0};  // split, replicated, expert
    if (Status s = copy_to_host(ctx_, host, acc, sizeof(host)); !s) return s;
    const double raw =
        norm_reduce_ ? std::sqrt(norm_reduce_(host[0], host[2], host[1])) : std::sqrt(host[0] + host[2] + host[1]);
    // ZeRO: every DP rank holds a share of the gradients; their squares add (as the CPU trainer).
    return shard_ ? std::sqrt(shard_->reduce_sum(raw * raw)) : raw;
  }

  // Two launches per kernel family: with and without weight decay (the options differ).
  Status update(double grad_scale) {
    const bool adam = job_.optimizer == Optimizer::adamw;
    const int64_t step = updates_ + 1;
    if (states_.empty()) return Status::ok();
    const DType gdt = states_.front().param->grad->dtype();
    const DType model_dt = states_.front().param->weight->dtype();
    for (int decay = 0; decay < 2; ++decay) {
      std::vector<AdamWTensor> at;
      std::vector<SgdTensor> st;
      for (State& s : states_) {
        if (s.param->decay != (decay == 1)) continue;
        const bool master = s.master.defined();
        Tensor& w = *s.param->weight;
        float* p = master ? s.master.data<float>() : w.data<float>() + s.offset;
        void* model_out = master ? static_cast<char*>(w.raw()) + s.offset * dtype_size(w.dtype()) : nullptr;
        void* g = static_cast<char*>(s.param->grad->raw()) + s.grad_offset * dtype_size(s.param->grad->dtype());
        const int64_t n = s.count;
        if (adam) at.push_back({p, g, s.m.data<float>(), s.v.data<float>(), model_out, n});
        else st.push_back({p, g, s.m.data<float>(), model_out, n});
      }
      if (at.empty() && st.empty()) continue;
      const double wd = decay ? opt_.weight_decay : 0.0;
      const cpu::AdamWOptions ao{opt_.lr, opt_.beta1, opt_.beta2, opt_.eps, wd};
      const cpu::SgdOptions so{opt_.lr, opt_.momentum, wd};
      Status s = gdt == DType::f32    ? adamw_or_sgd<float>(ctx_, adam, at, st, ao, so, step, grad_scale, model_dt)
                 : gdt == DType::bf16 ? adamw_or_sgd<bf16_t>(ctx_, adam, at, st, ao, so, step, grad_scale, model_dt)
                                      : adamw_or_sgd<f16_t>(ctx_, adam, at, st, ao, so, step, grad_scale, model_dt);
      if (!s) return s;
    }
    return Status::ok();
  }

  CudaContext& ctx_;
  TrainingJob job_;
  PrecisionScheme scheme_;
  TrainerOptions opt_;
  std::vector<State> states_;
  std::optional<TrainerShard> shard_;  // ZeRO >= 1 with dp > 1
  std::vector<Tensor> frozen_copies_;
  Tensor norm_acc_;  // 3 doubles: TP-split, replicated and routed-expert sums of squares
  std::function<double(double, double, double)> norm_reduce_;  // (split, expert, replicated)
  double loss_scale_ = 1;
  int good_steps_ = 0;
  int64_t updates_ = 0;
  Status error_ = Status::ok();
};

class CudaBackend final : public ExecBackend {
 public:
  explicit CudaBackend(std::unique_ptr<CudaContext> ctx) : ctx_(std::move(ctx)), buckets_(*ctx_) {}
  CudaContext& context() { return *ctx_; }
  std::string name() const override { return "cuda"; }
  std::string device_name() const override { return ctx_->device_name(); }
  TrackingAllocator& allocator() override { return ctx_->allocator(); }
  Result<std::unique_ptr<Model>> build_model(const ModelConfig& c) override { return build_cuda_model(*ctx_, c); }
  Result<std::unique_ptr<Trainer>> create_trainer(Model& m, const TrainingJob& job, const PrecisionScheme& scheme,
                                                  const TrainerOptions& options, const TrainerShard* shard) override {
    return CudaTrainer::create(*ctx_, m, job, scheme, options, shard);
  }
  Status synchronize() override { return ctx_->synchronize(); }
  DeviceMemoryLines device_memory() override {
    const CudaAllocator::DeviceMemory d = ctx_->allocator().device_memory();
    DeviceMemoryLines l;
    l.measured = true;
    l.context = d.context;
    l.libraries = d.libraries;
    l.blas_workspace = d.blas_workspace;
    l.reserved_peak = d.reserved_peak;
    l.used_peak = d.used_peak;
    l.used_at_start = d.used_at_start;
    return l;
  }
  BucketOps* bucket_ops() override { return &buckets_; }

 private:
  std::unique_ptr<CudaContext> ctx_;
  CudaBucketOps buckets_;
};

}  // namespace

Result<int> device_for_local_rank(int local_rank, int device_count) {
  const int r = local_rank < 0 ? 0 : local_rank;
  if (device_count < 1) return Status::bad_input("no CUDA device visible to this rank");
  if (r >= device_count)
    return Status::bad_input("local rank " + std::to_string(r) + " has no GPU of its own: " + std::to_string(device_count) +
                             " visible on this node (CUDA_VISIBLE_DEVICES); --backend cuda runs one rank per GPU, so start "
                             "at most " + std::to_string(device_count) + " ranks per node");
  return r;
}

CudaContext* context_of(ExecBackend& b) {
  CudaBackend* c = dynamic_cast<CudaBackend*>(&b);
  return c != nullptr ? &c->context() : nullptr;
}

Result<std::unique_ptr<ExecBackend>> make_cuda_backend(const CudaOptions& options) {
  const DeviceProbe probe = probe_devices();
  if (probe.count == 0) return Status::runtime("--backend cuda: no usable CUDA device: " + probe.reason);
  Result<std::unique_ptr<CudaContext>> ctx = CudaContext::create(options);
  if (!ctx) return ctx.status();
  return std::unique_ptr<ExecBackend>(std::make_unique<CudaBackend>(std::move(*ctx)));
}

}  // namespace llmplan::exec::cuda
