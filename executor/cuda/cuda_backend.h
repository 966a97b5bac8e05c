// The CUDA backend of the runner (executor/backend.h): one GPU through a CudaContext, the
// model of executor/cuda/cuda_model.h, and a trainer whose optimizer runs on the device.
//
// Trainer on the GPU: the precision schemes of trainer.h that keep fp32 optimizer states --
// fp32 (the weights are the parameters), O2/O0 (fp32 master in Category::master_weights,
// the updated master rounded into the 16-bit weights in the same kernel) and O1 (an fp32
// copy of every weight in Category::weights) -- with AdamW or SGD-momentum, fused
// multi-tensor launches (executor/cuda/optimizer.h), global gradient-norm clipping (sum of
// squares in double on the device, one 8-byte read back per step) and fp16 dynamic loss
// scaling (a non-finite norm skips the step). ZeRO shards (trainer.h TrainerShard) as on
// the CPU: states and masters for this rank's ranges only, the norm's squares summed over
// DP. O3 (16-bit optimizer states) is CPU-only (bad_input).
//
// Distributed (world size > 1): one GPU per rank; the runner's communicator is then an
// NcclCommunicator (executor/cuda/nccl_communicator.h) on this backend's context, and the
// data-parallel buckets move device memory through bucket_ops() (CudaBucketOps).
//
// Memory outside the allocator's categories (DeviceMemoryLines) comes from the allocator's
// cudaMemGetInfo samples: the context, the libraries, the cuBLASLt workspace, the reserved
// and used peaks.
// Thread-safety: one thread drives the backend.
#pragma once

#include <memory>

#include "executor/backend.h"
#include "executor/cuda/context.h"
#include "planner/spec/status.h"

namespace llmplan::exec::cuda {

// Errors: runtime without a usable device (the probe's reason in the message).
Result<std::unique_ptr<ExecBackend>> make_cuda_backend(const CudaOptions& options = {});
// The context of a backend made by make_cuda_backend (its NCCL communicator runs on that
// context's streams); nullptr for any other backend.
CudaContext* context_of(ExecBackend& backend);

// One GPU per rank: the device ordinal for the process with launcher-local rank
// `local_rank` (communicator.h launcher_local_rank; -1 when not launched, = device 0) on a
// node with `device_count` visible devices. Errors: bad_input when the node runs more
// ranks than it has GPUs (ranks would share a device, which NCCL refuses).
Result<int> device_for_local_rank(int local_rank, int device_count);

}  // namespace llmplan::exec::cuda
