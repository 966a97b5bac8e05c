// Optimizer steps and gradient-norm clipping on the CPU, over fp32 master parameters.
//
//   AdamW (Loshchilov & Hutter; as torch.optim.AdamW): with g = grad_scale * grad,
//     m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
//     p = p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   SGD with momentum (as torch.optim.SGD, dampening 0): g = grad_scale * grad + wd p,
//     buf = mu buf + g (buf starts at 0, so the first step has buf = g),  p = p - lr buf
//
// grad_scale folds in what multiplies every gradient before the update: 1 / loss scale
// (fp16), the clipping factor (clip_factor), 1 / accumulation steps. Master params T:
// float (double for tests); gradients G: T, or bf16_t/f16_t for 16-bit gradients with
// float T. All arrays have n elements and may not alias. Writing the updated master
// weights back into 16-bit model weights is a cast (elementwise.h).
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <span>

#include "executor/dtype.h"

namespace llmplan::exec::cpu {

struct AdamWOptions {
  double lr = 1e-3;            // learning rate. Default: 1e-3
  double beta1 = 0.9;          // Default: 0.9
  double beta2 = 0.999;        // Default: 0.999
  double eps = 1e-8;           // Default: 1e-8
  double weight_decay = 0.01;  // decoupled, multiplies lr. Default: 0.01
};

struct SgdOptions {
  double lr = 1e-2;            // Default: 1e-2
  double momentum = 0.9;       // Default: 0.9 (0 = plain SGD; buf still holds g)
  double weight_decay = 0.0;   // L2 added to the gradient. Default: 0
};

// p (n) master params, g (n) gradients, m (n), v (n) moments (start at 0); step t >= 1.
template <class T, class G>
void adamw_step(T* p, const G* g, T* m, T* v, int64_t n, const AdamWOptions& o, int64_t step,
                double grad_scale = 1.0);

// p (n), g (n), buf (n) momentum buffer (starts at 0).
template <class T, class G>
void sgd_step(T* p, const G* g, T* buf, int64_t n, const SgdOptions& o, double grad_scale = 1.0);

// One gradient tensor seen untyped, for norms over a model's mixed-dtype gradients.
struct GradRef {
  void* data;    // n elements of dtype: f32, f64, bf16 or f16
  int64_t n;
  DType dtype;
};

// sqrt(sum over all grads of g^2), accumulated in double.
double global_grad_norm(std::span<const GradRef> grads);
// The factor clipping applies: max_norm / (norm + 1e-6) when that is < 1, else 1 (as
// torch.nn.utils.clip_grad_norm_). 1 when norm is not finite: the caller skips the step.
double clip_factor(double norm, double max_norm);
// Scales every gradient in place by clip_factor(global norm, max_norm); returns the norm
// before clipping. (Or fold clip_factor into grad_scale and skip this extra pass.)
double clip_grad_norm(std::span<const GradRef> grads, double max_norm);

}  // namespace llmplan::exec::cpu
