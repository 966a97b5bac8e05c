// Trainer: the optimizer side of a model -- precision scheme (master weights, gradient and
// optimizer-state dtypes as planner bytes_per_param defines them), AdamW or SGD-momentum
// with weight decay, gradient-norm clipping and fp16 dynamic loss scaling.
//
//   fp32        weights f32, grads f32, optimizer f32 (no master)        16 B/param (AdamW)
//   O2 (and O0) weights 16-bit, grads 16-bit (deepspeed) or f32 (megatron), f32 master
//               in Category::master_weights, optimizer f32
//   O1          16-bit compute weights + an f32 copy of every weight (Category::weights,
//               4 + 2 B), grads f32, optimizer f32, no master
//   O3          weights, grads and optimizer moments all 16-bit, no master
// Frozen parameters (ParamRef::grad == nullptr) get no optimizer state and no master.
// Optimizer states and master weights are allocated at creation (the planner counts them
// in every phase).
//
// Loss scaling (fp16 only): the model's backward is multiplied by loss_scale(); step()
// checks every gradient for inf/NaN, and on overflow skips the update and multiplies the
// scale by `backoff`; after `growth_interval` clean steps it doubles the scale.
// Thread-safety: none.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "executor/allocator.h"
#include "executor/model.h"
#include "executor/tensor.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"

namespace llmplan::exec {

// Storage dtypes of a job's precision scheme.
struct PrecisionScheme {
  DType storage = DType::f32;    // weights used by compute, activations
  DType grad = DType::f32;       // weight gradients
  DType optimizer = DType::f32;  // Adam moments / momentum
  bool master = false;           // f32 master copy in Category::master_weights (O2)
  bool f32_weight_copy = false;  // f32 copy of every weight in Category::weights (O1)
  bool loss_scaling = false;     // fp16 dynamic loss scaling
};
// From precision, amp and grads; f64 = true gives the float64 mode of the gradient tests.
PrecisionScheme precision_scheme(const TrainingJob& job, bool f64 = false);

struct TrainerOptions {
  double lr = 1e-3;               // Default: 1e-3
  double beta1 = 0.9;             // Default: 0.9
  double beta2 = 0.95;            // Default: 0.95 (GPT-3 / Llama pre-training)
  double eps = 1e-8;              // Default: 1e-8
  double weight_decay = 0.1;      // on matrices only (ParamRef::decay). Default: 0.1
  double momentum = 0.9;          // SGD. Default: 0.9
  double clip_norm = 1.0;         // global gradient-norm clip; 0 = off. Default: 1.0
  double initial_loss_scale = 65536.0;  // fp16. Default: 2^16
  int growth_interval = 2000;     // clean steps before the scale doubles. Default: 2000
  double backoff = 0.5;           // scale factor on overflow. Default: 0.5
};

// ZeRO >= 1: this rank owns a range of every trainable parameter (model.params() order,
// frozen ones skipped; comm/data_parallel.h says which); optimizer states and master
// weights exist only for those ranges, step() updates only them (for ZeRO 1-2 the caller
// all-gathers the updated weights), and the gradient norm is the square root of the sum of
// every rank's partial sum of squares, summed by `reduce_sum` (an all-reduce over DP).
// Where the range's elements sit: ZeRO-2/3 gradients and ZeRO-3 weights are the partition
// itself (offset 0), full-size tensors hold them at the range's offset in the parameter.
struct ShardRange {
  int64_t weight_offset = 0;  // elements into *ParamRef::weight
  int64_t grad_offset = 0;    // elements into *ParamRef::grad
  int64_t count = 0;          // elements (0: this rank owns none of the parameter)
};
struct TrainerShard {
  std::vector<ShardRange> ranges;                    // one per trainable parameter
  std::function<double(double)> reduce_sum;          // REQUIRES: non-null
};

struct StepOutcome {
  bool skipped = false;       // overflow: no update was applied
  double grad_norm = 0;       // of the unscaled gradients (inf/NaN when skipped)
  double loss_scale = 1;      // the scale the step's backward used
};

// The optimizer side of one rank: the CPU implementation below (Trainer::create), or the
// CUDA one (CudaTrainer in executor/cuda/cuda_backend.cpp) with the same contract.
class Trainer {
 public:
  virtual ~Trainer() = default;
  // Allocates master weights / fp32 copies and optimizer states for `model`'s params, in
  // host memory (CPU backend). REQUIRES: model and alloc outlive the trainer. Errors:
  // runtime (OOM).
  static Result<std::unique_ptr<Trainer>> create(TrackingAllocator& alloc, Model& model, const TrainingJob& job,
                                                 const PrecisionScheme& scheme, const TrainerOptions& options,
                                                 const TrainerShard* shard = nullptr);
  // The loss scale to pass to Model::forward_backward (1 without loss scaling).
  virtual double loss_scale() const = 0;
  // Applies the accumulated gradients (call zero_grads on the model afterwards).
  virtual StepOutcome step() = 0;
  virtual int64_t updates() const = 0;
  // A device failure in the last step() (which then reported it as skipped); ok on the CPU.
  virtual Status last_error() const { return Status::ok(); }
  // Model parallel (TP, PP, EP): f(split_sq, expert_sq, replicated_sq) returns the gradient
  // norm's sum of squares over this rank's model-parallel group: split_sq over TP-split
  // parameters (ParamRef::split.dim >= 0, summed over TP), expert_sq over routed experts
  // (ParamRef::expert: whole on every TP rank, so summed over EP only, when ep > 1 without
  // ZeRO), replicated_sq over the others (equal on every TP rank, counted once), all summed
  // over the pipeline stages. Shared copies (ParamRef::shared_copy) are left out.
  // Unset: split_sq + expert_sq + replicated_sq.
  virtual void set_norm_reduce(std::function<double(double, double, double)> f) = 0;
};

// The loss-scale and clipping policy every backend shares: from the gradient norm of the
// scaled gradients (raw_norm), whether to skip, the factor to multiply gradients by, and
// the next loss scale. good_steps counts clean steps since the last change.
struct ScalePolicy {
  bool skip = false;
  double grad_scale = 1;  // clip / loss_scale
  double norm = 0;        // of the unscaled gradients
};
ScalePolicy apply_scale_policy(double raw_norm, const PrecisionScheme& scheme, const TrainerOptions& opt,
                               double* loss_scale, int* good_steps);
// After an applied (not skipped) update: fp16 doubles its loss scale every growth_interval
// clean steps.
void note_applied_step(const PrecisionScheme& scheme, const TrainerOptions& opt, double* loss_scale, int* good_steps);

}  // namespace llmplan::exec
