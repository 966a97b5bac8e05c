#include "executor/cpu/optimizer.h"

#include <cmath>

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::load;
using detail::store;

template <class T, class G>
void adamw_step(T* p, const G* g, T* m, T* v, int64_t n, const AdamWOptions& o, int64_t step,
                double grad_scale) {
  const double t = static_cast<double>(step);
  const T b1 = static_cast<T>(o.beta1), b2 = static_cast<T>(o.beta2);
  const T bc1 = static_cast<T>(1.0 - std::pow(o.beta1, t));  // bias corrections
  const T bc2 = static_cast<T>(1.0 - std::pow(o.beta2, t));
  const T lr = static_cast<T>(o.lr), eps = static_cast<T>(o.eps);
  const T decay = static_cast<T>(1.0 - o.lr * o.weight_decay);
  const T gs = static_cast<T>(grad_scale);
  for (int64_t i = 0; i < n; ++i) {
    const T gi = gs * static_cast<T>(load(g[i]));
    m[i] = b1 * m[i] + (T(1) - b1) * gi;
    v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
    const T mhat = m[i] / bc1;
    const T vhat = v[i] / bc2;
    p[i] = p[i] * decay - lr * mhat / (std::sqrt(vhat) + eps);
  }
}

template <class T, class G>
void sgd_step(T* p, const G* g, T* buf, int64_t n, const SgdOptions& o, double grad_scale) {
  const T mu = static_cast<T>(o.momentum), wd = static_cast<T>(o.weight_decay);
  const T lr = static_cast<T>(o.lr), gs = static_cast<T>(grad_scale);
  for (int64_t i = 0; i < n; ++i) {
    const T gi = gs * static_cast<T>(load(g[i])) + wd * p[i];
    buf[i] = mu * buf[i] + gi;
    p[i] -= lr * buf[i];
  }
}

namespace {
template <class G>
double sum_squares(const G* g, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(load(g[i]));
    s += x * x;
  }
  return s;
}

template <class G>
void scale_inplace(G* g, int64_t n, double factor) {
  const auto f = static_cast<acc_t<G>>(factor);
  for (int64_t i = 0; i < n; ++i) g[i] = store<G>(load(g[i]) * f);
}

// Calls fn(typed pointer) for the dtype of r.
template <class Fn>
void visit(const GradRef& r, Fn&& fn) {
  switch (r.dtype) {
    case DType::f32: fn(static_cast<float*>(r.data)); break;
    case DType::f64: fn(static_cast<double*>(r.data)); break;
    case DType::bf16: fn(static_cast<bf16_t*>(r.data)); break;
    case DType::f16: fn(static_cast<f16_t*>(r.data)); break;
    default: assert(false && "gradients are f32, f64, bf16 or f16");
  }
}
}  // namespace

double global_grad_norm(std::span<const GradRef> grads) {
  double s = 0;
  for (const GradRef& r : grads) visit(r, [&](auto* g) { s += sum_squares(g, r.n); });
  return std::sqrt(s);
}

double clip_factor(double norm, double max_norm) {
  if (!std::isfinite(norm)) return 1.0;
  const double f = max_norm / (norm + 1e-6);
  return f < 1.0 ? f : 1.0;
}

double clip_grad_norm(std::span<const GradRef> grads, double max_norm) {
  const double norm = global_grad_norm(grads);
  const double f = clip_factor(norm, max_norm);
  if (f < 1.0)
    for (const GradRef& r : grads) visit(r, [&](auto* g) { scale_inplace(g, r.n, f); });
  return norm;
}

#define INST(T, G)                                                                           \
  template void adamw_step<T, G>(T*, const G*, T*, T*, int64_t, const AdamWOptions&, int64_t, \
                                 double);                                                    \
  template void sgd_step<T, G>(T*, const G*, T*, int64_t, const SgdOptions&, double);
INST(float, float) INST(float, bf16_t) INST(float, f16_t) INST(double, double)
#undef INST

}  // namespace llmplan::exec::cpu
