// Optimizer steps on the GPU over fp32 master parameters: AdamW and SGD with momentum,
// fused multi-tensor (a list of parameter tensors updated by one kernel launch, up to
// kMaxTensorsPerLaunch per launch, more in consecutive launches). The formulas and the
// options are the CPU's (executor/cpu/optimizer.h, as torch.optim): the same
// hyper-parameter arithmetic in double on the host, the update in fp32 on the device.
//
// Optionally fused into the same pass: model_out receives the updated parameter rounded to
// the model's dtype (the bf16/fp16 weights the forward reads), which replaces a separate
// cast (cpu::cast) after the step.
//
// Gradients G: float, bf16_t or f16_t, the same for every tensor of a call. Device
// pointers; tensors may not alias each other. Enqueued on ctx.compute_stream().
// Thread-safety: as CudaContext.
#pragma once

#include <cstdint>
#include <span>

#include "executor/cpu/optimizer.h"
#include "executor/cuda/context.h"
#include "executor/dtype.h"

namespace llmplan::exec::cuda {

inline constexpr int kMaxTensorsPerLaunch = 32;

// One parameter tensor of an AdamW step: p, m, v (n) fp32; g (n) of the call's G.
struct AdamWTensor {
  float* p = nullptr;
  const void* g = nullptr;
  float* m = nullptr;           // first moment, starts at 0
  float* v = nullptr;           // second moment, starts at 0
  void* model_out = nullptr;    // (n) of model_dtype, or nullptr
  int64_t n = 0;
};

// One parameter tensor of an SGD step: p, buf (n) fp32; g (n) of the call's G.
struct SgdTensor {
  float* p = nullptr;
  const void* g = nullptr;
  float* buf = nullptr;         // momentum buffer, starts at 0
  void* model_out = nullptr;
  int64_t n = 0;
};

// AdamW step t >= 1 over every tensor (cpu::adamw_step on each). model_dtype: f32, bf16
// or f16 (used only by tensors with model_out).
template <class G>
Status adamw_step(CudaContext& ctx, std::span<const AdamWTensor> tensors, const cpu::AdamWOptions& o,
                  int64_t step, double grad_scale = 1.0, DType model_dtype = DType::bf16);
// The single-tensor form, with cpu::adamw_step's arguments.
template <class G>
Status adamw_step(CudaContext& ctx, float* p, const G* g, float* m, float* v, int64_t n,
                  const cpu::AdamWOptions& o, int64_t step, double grad_scale = 1.0);

// *acc += sum of g[i]^2 over n elements, in double (the gradient-norm clip; acc is one
// device double the caller zeroes).
template <class G>
Status sum_squares_accumulate(CudaContext& ctx, const G* g, int64_t n, double* acc);

template <class G>
Status sgd_step(CudaContext& ctx, std::span<const SgdTensor> tensors, const cpu::SgdOptions& o,
                double grad_scale = 1.0, DType model_dtype = DType::bf16);
template <class G>
Status sgd_step(CudaContext& ctx, float* p, const G* g, float* buf, int64_t n, const cpu::SgdOptions& o,
                double grad_scale = 1.0);

}  // namespace llmplan::exec::cuda
