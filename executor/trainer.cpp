#include "executor/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "executor/cpu/ops.h"

namespace llmplan::exec {

PrecisionScheme precision_scheme(const TrainingJob& j, bool f64) {
  PrecisionScheme p;
  if (f64) {
    p.storage = p.grad = p.optimizer = DType::f64;
    return p;
  }
  if (j.precision == Precision::fp32) return p;
  const DType half = j.precision == Precision::bf16 ? DType::bf16 : DType::f16;
  p.storage = half;
  p.loss_scaling = j.precision == Precision::fp16;
  if (j.qlora()) {  // QLoRA's trainer (bytes_per_param): 16-bit adapters and gradients, fp32 AdamW states, no master
    p.grad = half;
    return p;
  }
  switch (j.amp) {
    case AmpLevel::O1:
      p.grad = DType::f32;
      p.f32_weight_copy = true;
      break;
    case AmpLevel::O3:
      p.grad = half;
      p.optimizer = half;
      break;
    case AmpLevel::O0:
    case AmpLevel::O2:
      p.grad = j.grads == GradConvention::megatron ? DType::f32 : half;
      p.master = true;
      break;
  }
  return p;
}

namespace {

Status make(TrackingAllocator& a, Tensor& t, int64_t n, DType dt, Category c, const std::string& name) {
  Result<Tensor> r = Tensor::zeros(a, Shape{n}, dt, c, name);
  if (!r) return r.status();
  t = std::move(*r);
  return Status::ok();
}

class CpuTrainer final : public Trainer {
 public:
  double loss_scale() const override { return loss_scale_; }
  StepOutcome step() override;
  int64_t updates() const override { return updates_; }
  void set_norm_reduce(std::function<double(double, double, double)> f) override { norm_reduce_ = std::move(f); }

 private:
  friend class Trainer;
  struct State {
    ParamRef* param = nullptr;
    Tensor master;  // f32 (O2 master, O1 weight copy); undefined otherwise
    Tensor m, v;    // optimizer states (v unused by SGD)
    int64_t offset = 0, count = 0;  // elements: where the range starts in the weight, its length (ZeRO shard)
    int64_t grad_offset = 0;        // elements: where it starts in the gradient
  };
  void update(State& s, double grad_scale);

  Model* model_ = nullptr;
  TrainingJob job_;
  PrecisionScheme scheme_;
  TrainerOptions opt_;
  std::vector<State> states_;
  std::optional<TrainerShard> shard_;
  std::function<double(double, double, double)> norm_reduce_;
  std::vector<Tensor> frozen_copies_;  // O1: f32 copies of frozen weights (planner counts 6 B)
  double loss_scale_ = 1;
  int good_steps_ = 0;
  int64_t updates_ = 0;
};

}  // namespace

ScalePolicy apply_scale_policy(double raw_norm, const PrecisionScheme& scheme, const TrainerOptions& opt,
                               double* loss_scale, int* good_steps) {
  ScalePolicy p;
  p.norm = raw_norm / *loss_scale;
  if (!std::isfinite(p.norm)) {
    p.skip = true;
    if (scheme.loss_scaling) {
      *loss_scale *= opt.backoff;
      *good_steps = 0;
    }
    return p;
  }
  const double clip = opt.clip_norm > 0 ? cpu::clip_factor(p.norm, opt.clip_norm) : 1.0;
  p.grad_scale = clip / *loss_scale;
  return p;
}

void note_applied_step(const PrecisionScheme& scheme, const TrainerOptions& opt, double* loss_scale, int* good_steps) {
  if (scheme.loss_scaling && ++*good_steps >= opt.growth_interval) {
    *loss_scale *= 2;
    *good_steps = 0;
  }
}

Result<std::unique_ptr<Trainer>> Trainer::create(TrackingAllocator& a, Model& model, const TrainingJob& job,
                                                 const PrecisionScheme& scheme, const TrainerOptions& options,
                                                 const TrainerShard* shard) {
  std::unique_ptr<CpuTrainer> t(new CpuTrainer());
  t->model_ = &model;
  t->job_ = job;
  t->scheme_ = scheme;
  t->opt_ = options;
  t->loss_scale_ = scheme.loss_scaling ? options.initial_loss_scale : 1.0;
  const bool adam = job.optimizer == Optimizer::adamw;
  if (shard) t->shard_ = *shard;
  size_t trainable = 0;  // index of this param among the trainable ones
  for (ParamRef& p : model.params()) {
    int64_t n = p.weight->numel();
    if (p.grad == nullptr) {
      if (scheme.f32_weight_copy) {
        Tensor c;
        if (Status s = make(a, c, n, DType::f32, Category::weights, p.name + ".f32"); !s) return s;
        read_f32(*p.weight, 0, c.data<float>(), n);
        t->frozen_copies_.push_back(std::move(c));
      }
      continue;
    }
    CpuTrainer::State st;
    st.param = &p;
    st.count = n;
    if (shard) {
      if (trainable >= shard->ranges.size()) return Status::runtime("trainer: the ZeRO shard lists fewer parameters than the model trains");
      const ShardRange& r = shard->ranges[trainable++];
      if (r.count == 0) continue;
      st.offset = r.weight_offset;
      st.grad_offset = r.grad_offset;
      st.count = n = r.count;
    }
    if (scheme.master || scheme.f32_weight_copy) {
      const Category c = scheme.master ? Category::master_weights : Category::weights;
      if (Status s = make(a, st.master, n, DType::f32, c, p.name + (scheme.master ? ".master" : ".f32")); !s) return s;
      read_f32(*p.weight, st.offset, st.master.data<float>(), n);
    }
    if (Status s = make(a, st.m, n, scheme.optimizer, Category::optimizer_states, p.name + (adam ? ".exp_avg" : ".momentum")); !s)
      return s;
    if (adam)
      if (Status s = make(a, st.v, n, scheme.optimizer, Category::optimizer_states, p.name + ".exp_avg_sq"); !s) return s;
    t->states_.push_back(std::move(st));
  }
  return std::unique_ptr<Trainer>(std::move(t));
}

void CpuTrainer::update(State& s, double grad_scale) {
  const bool adam = job_.optimizer == Optimizer::adamw;
  ParamRef& p = *s.param;
  const int64_t n = s.count, o = s.offset, go = s.grad_offset;
  cpu::AdamWOptions ao{opt_.lr, opt_.beta1, opt_.beta2, opt_.eps, p.decay ? opt_.weight_decay : 0.0};
  cpu::SgdOptions so{opt_.lr, opt_.momentum, p.decay ? opt_.weight_decay : 0.0};
  const int64_t step = updates_ + 1;
  // f64 / f32 weights: gradients and optimizer state share the weights' type.
  auto same_type = [&]<class T>(T) {
    T* w = p.weight->data<T>() + o;
    const T* g = p.grad->data<T>() + go;
    if (adam) cpu::adamw_step<T, T>(w, g, s.m.data<T>(), s.v.data<T>(), n, ao, step, grad_scale);
    else cpu::sgd_step<T, T>(w, g, s.m.data<T>(), n, so, grad_scale);
  };
  if (p.weight->dtype() == DType::f64) return same_type(double{});
  if (p.weight->dtype() == DType::f32) return same_type(float{});
  if (s.master.defined()) {  // O1 / O2: update the f32 copy, round into the 16-bit weights
    float* w = s.master.data<float>();
    float* m = s.m.data<float>();
    float* v = adam ? s.v.data<float>() : nullptr;
    switch (p.grad->dtype()) {
      case DType::f32:
        if (adam) cpu::adamw_step<float, float>(w, p.grad->data<float>() + go, m, v, n, ao, step, grad_scale);
        else cpu::sgd_step<float, float>(w, p.grad->data<float>() + go, m, n, so, grad_scale);
        break;
      case DType::bf16:
        if (adam) cpu::adamw_step<float, bf16_t>(w, p.grad->data<bf16_t>() + go, m, v, n, ao, step, grad_scale);
        else cpu::sgd_step<float, bf16_t>(w, p.grad->data<bf16_t>() + go, m, n, so, grad_scale);
        break;
      case DType::f16:
        if (adam) cpu::adamw_step<float, f16_t>(w, p.grad->data<f16_t>() + go, m, v, n, ao, step, grad_scale);
        else cpu::sgd_step<float, f16_t>(w, p.grad->data<f16_t>() + go, m, n, so, grad_scale);
        break;
      default: break;
    }
    write_f32(w, *p.weight, o, n);
    return;
  }
  // O3: everything 16-bit; update in f32 chunks (stack scratch, 4 x 16 KiB).
  constexpr int64_t kChunk = 4096;
  float w[kChunk], g[kChunk], m[kChunk], v[kChunk];
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t c = std::min(kChunk, n - off);
    read_f32(*p.weight, o + off, w, c);
    read_f32(*p.grad, go + off, g, c);
    read_f32(s.m, off, m, c);
    if (adam) {
      read_f32(s.v, off, v, c);
      cpu::adamw_step<float, float>(w, g, m, v, c, ao, step, grad_scale);
      write_f32(v, s.v, off, c);
    } else {
      cpu::sgd_step<float, float>(w, g, m, c, so, grad_scale);
    }
    write_f32(m, s.m, off, c);
    write_f32(w, *p.weight, o + off, c);
  }
}

StepOutcome CpuTrainer::step() {
  StepOutcome out;
  out.loss_scale = loss_scale_;
  std::vector<cpu::GradRef> grads, split, expert;  // split: TP-split parameters; expert: routed experts
  for (State& s : states_) {
    if (s.param->shared_copy) continue;  // its twin on the first stage counts
    const int64_t es = dtype_size(s.param->grad->dtype());
    const cpu::GradRef g{static_cast<char*>(s.param->grad->raw()) + s.grad_offset * es, s.count, s.param->grad->dtype()};
    (s.param->expert ? expert : s.param->split.dim >= 0 ? split : grads).push_back(g);
  }
  const double rn = cpu::global_grad_norm(grads), sn = cpu::global_grad_norm(split), en = cpu::global_grad_norm(expert);
  double raw_norm = norm_reduce_ ? std::sqrt(norm_reduce_(sn * sn, en * en, rn * rn)) : std::sqrt(sn * sn + en * en + rn * rn);
  if (shard_) raw_norm = std::sqrt(shard_->reduce_sum(raw_norm * raw_norm));
  const ScalePolicy sp = apply_scale_policy(raw_norm, scheme_, opt_, &loss_scale_, &good_steps_);
  out.grad_norm = sp.norm;
  if (sp.skip) {
    out.skipped = true;
    return out;
  }
  for (State& s : states_) update(s, sp.grad_scale);
  ++updates_;
  note_applied_step(scheme_, opt_, &loss_scale_, &good_steps_);
  return out;
}

}  // namespace llmplan::exec
