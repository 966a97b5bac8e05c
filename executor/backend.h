// ExecBackend: where a run's tensors live and its ops execute -- the CPU (CpuBackend,
// runner.cpp) or a GPU (executor/cuda/cuda_backend.h). The runner drives every backend
// through this one interface, so the training loop, the data, the parallel wrappers and the
// comparison with the planner are the same code on both.
//
// A backend owns its TrackingAllocator (every tensor of the run comes from it), builds the
// model and the trainer over it, and says what the device holds outside the allocator's
// categories (the CUDA context, libraries, the caching allocator's reserve), which the CPU
// does not have. Thread-safety: one thread drives a backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "executor/allocator.h"
#include "executor/comm/bucket_ops.h"
#include "executor/model.h"
#include "executor/trainer.h"
#include "planner/spec/status.h"

namespace llmplan::exec {

// Device memory outside the per-category accounting, bytes (all 0 on the CPU).
struct DeviceMemoryLines {
  bool measured = false;         // the backend measures these (a GPU)
  int64_t context = 0;           // CUDA context (+ lazily loaded modules)
  int64_t libraries = 0;         // cuBLASLt handle, streams
  int64_t blas_workspace = 0;    // cuBLASLt workspace (also inside Category::workspace)
  int64_t reserved_peak = 0;     // peak bytes held from cudaMalloc (live + cache + rounding)
  int64_t used_peak = 0;         // peak device bytes in use (what nvidia-smi shows)
  int64_t used_at_start = 0;     // in use before the allocator existed (context, libraries, others)
};

class ExecBackend {
 public:
  virtual ~ExecBackend() = default;
  virtual std::string name() const = 0;         // "cpu", "cuda"
  virtual std::string device_name() const = 0;  // "host", "NVIDIA H200"
  virtual TrackingAllocator& allocator() = 0;
  virtual Result<std::unique_ptr<Model>> build_model(const ModelConfig& c) = 0;
  virtual Result<std::unique_ptr<Trainer>> create_trainer(Model& m, const TrainingJob& job, const PrecisionScheme& scheme,
                                                          const TrainerOptions& options, const TrainerShard* shard) = 0;
  // Waits for all queued work; returns the first asynchronous error (step timing ends here).
  virtual Status synchronize() = 0;
  virtual DeviceMemoryLines device_memory() = 0;
  // How the data-parallel buckets move this backend's memory (comm/bucket_ops.h);
  // nullptr: host memory (the default, the CPU).
  virtual BucketOps* bucket_ops() { return nullptr; }
};

// The host backend: CpuAllocator, build_model, Trainer::create.
std::unique_ptr<ExecBackend> make_cpu_backend();

}  // namespace llmplan::exec
