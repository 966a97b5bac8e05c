// CudaContext: one GPU as the executor uses it -- the device, a compute stream and a
// communication stream, the cuBLASLt handle and its workspace, and the caching device
// allocator every tensor of the run comes from.
//
// Every CUDA op (executor/cuda/ops.h) takes the context and enqueues its work on the
// compute stream; nothing synchronises except where a function says so. Collectives (the
// NCCL communicator, executor/cuda/nccl_comm.h) run on the communication stream; ordering
// between the two streams is the caller's (record_event/wait_event).
//
// Creation order is also the measurement order of the memory lines that live outside the
// allocator (CudaAllocator::DeviceMemory): the context is initialised first (device memory
// used then = the CUDA context estimate), then the streams and the cuBLASLt handle (their
// growth = library bytes), then the allocator, which then allocates the cuBLASLt workspace
// under Category::workspace (the planner's "workspace" line).
//
// REQUIRES: one thread uses a context (and its allocator) at a time; the context outlives
// every tensor allocated from it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "executor/allocator.h"
#include "executor/cuda/cuda_allocator.h"
#include "executor/tensor.h"
#include "planner/spec/status.h"

namespace llmplan::exec::cuda {

// Whether a CUDA device can be used, and why not. Never fails; safe without a driver.
struct DeviceProbe {
  int count = 0;        // usable devices (0 without a driver or GPU)
  std::string reason;   // empty when count > 0, else e.g. "cudaErrorNoDevice (no CUDA-capable device is detected)"
};
DeviceProbe probe_devices();

struct CudaOptions {
  int device = 0;  // CUDA device ordinal. Default: 0
  // fp32 GEMMs on tensor cores with TF32 inputs (10-bit mantissa, fp32 accumulation), as
  // torch.backends.cuda.matmul.allow_tf32. Only fp32 storage is affected. Default: false
  bool tf32 = false;
  // cuBLASLt workspace, bytes (the planner's MemoryOptions::gemm_workspace_bytes).
  // Default: 32 MiB
  int64_t blas_workspace_bytes = int64_t{32} << 20;
};

class CudaContext {
 public:
  // Makes `o.device` current on this thread, creates the streams, the cuBLASLt handle, the
  // allocator and the workspace. Fails (runtime) without a device or when any step fails.
  static Result<std::unique_ptr<CudaContext>> create(const CudaOptions& o = {});
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return options_.device; }
  const std::string& device_name() const { return name_; }
  int sm_count() const { return sm_count_; }
  std::array<int, 2> compute_capability() const { return {cc_major_, cc_minor_}; }

  cudaStream_t compute_stream() const { return compute_; }
  cudaStream_t comm_stream() const { return comm_; }
  CudaAllocator& allocator() { return *allocator_; }

  bool tf32() const { return options_.tf32; }
  void set_tf32(bool on) { options_.tf32 = on; }

  // cuBLASLt state (used by executor/cuda/linear.cpp).
  cublasLtHandle_t blas() const { return blas_; }
  void* blas_workspace() const { return workspace_.data(); }
  int64_t blas_workspace_bytes() const { return workspace_.bytes(); }
  // Chosen algorithm per GEMM shape (key built by linear.cpp), so the heuristic runs once.
  using GemmKey = std::array<int64_t, 24>;
  std::map<GemmKey, cublasLtMatmulAlgo_t>& gemm_algos() { return gemm_algos_; }

  // Waits for both streams; returns the first error of any work enqueued so far (kernel
  // faults surface here).
  Status synchronize();

  // Stream ordering: work enqueued on `to` after this call waits for the work enqueued on
  // `from` before it.
  Status order_after(cudaStream_t to, cudaStream_t from);

 private:
  CudaContext() = default;
  CudaOptions options_;
  std::string name_;
  int sm_count_ = 0, cc_major_ = 0, cc_minor_ = 0;
  cudaStream_t compute_ = nullptr;
  cudaStream_t comm_ = nullptr;
  cublasLtHandle_t blas_ = nullptr;
  std::unique_ptr<CudaAllocator> allocator_;
  Block workspace_;  // cuBLASLt workspace; destroyed before the allocator
  std::map<GemmKey, cublasLtMatmulAlgo_t> gemm_algos_;
};

// ---------------------------------------------------------------- copies and fills
// All enqueue on the compute stream. Host buffers are pageable: the copies to the host
// return after the data has arrived (they synchronise the stream); the copies to the
// device may return earlier but the source may be reused at once.

Status copy_to_device(CudaContext& ctx, void* dst, const void* src, int64_t bytes);
Status copy_to_host(CudaContext& ctx, void* dst, const void* src, int64_t bytes);
Status copy_on_device(CudaContext& ctx, void* dst, const void* src, int64_t bytes);
// rows rows of `width` bytes, each at its own pitch (bytes) in dst and src (cudaMemcpy2DAsync).
Status copy_2d_on_device(CudaContext& ctx, void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width,
                         int64_t rows);
// Every byte of dst (bytes) set to `value` (0: zero in every float format; 0xFF: NaN in
// f32, bf16 and f16 -- the tests' poison).
Status fill_bytes(CudaContext& ctx, void* dst, int byte_value, int64_t bytes);

// Whether p is memory the GPU owns (device or managed); anything else is the host's.
bool is_device_memory(const void* p);

// As Tensor::zeros for device tensors (Tensor::zeros itself memsets on the host, which a
// device pointer does not allow).
Result<Tensor> zeros(CudaContext& ctx, Shape shape, DType dtype, Category c, std::string name = {});

}  // namespace llmplan::exec::cuda
