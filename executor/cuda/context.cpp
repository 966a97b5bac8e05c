#include "executor/cuda/context.h"

#include <utility>

#include "executor/cuda/check.h"

namespace llmplan::exec::cuda {

namespace {
int64_t device_used_bytes() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<int64_t>(total_b - free_b);
}

Status blas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status::runtime(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}
}  // namespace

DeviceProbe probe_devices() {
  DeviceProbe p;
  const cudaError_t e = cudaGetDeviceCount(&p.count);
  if (e != cudaSuccess) {
    p.count = 0;
    p.reason = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
    cudaGetLastError();
  } else if (p.count == 0) {
    p.reason = "cudaGetDeviceCount returned 0 devices";
  }
  return p;
}

Result<std::unique_ptr<CudaContext>> CudaContext::create(const CudaOptions& o) {
  const DeviceProbe probe = probe_devices();
  if (probe.count == 0) return Status::runtime("no CUDA device: " + probe.reason);
  if (o.device < 0 || o.device >= probe.count) {
    return Status::bad_input("CUDA device " + std::to_string(o.device) + " does not exist (" +
                             std::to_string(probe.count) + " found)");
  }
  std::unique_ptr<CudaContext> c(new CudaContext());
  c->options_ = o;
  LLMPLAN_CUDA_TRY(cudaSetDevice(o.device));
  LLMPLAN_CUDA_TRY(cudaFree(nullptr));  // initialise the primary context now
  const int64_t used_context = device_used_bytes();

  cudaDeviceProp prop{};
  LLMPLAN_CUDA_TRY(cudaGetDeviceProperties(&prop, o.device));
  c->name_ = prop.name;
  c->sm_count_ = prop.multiProcessorCount;
  c->cc_major_ = prop.major;
  c->cc_minor_ = prop.minor;

  LLMPLAN_CUDA_TRY(cudaStreamCreateWithFlags(&c->compute_, cudaStreamNonBlocking));
  LLMPLAN_CUDA_TRY(cudaStreamCreateWithFlags(&c->comm_, cudaStreamNonBlocking));
  if (Status s = blas_status(cublasLtCreate(&c->blas_), "cublasLtCreate"); !s) return s;
  const int64_t used_libraries = device_used_bytes();

  c->allocator_ = std::make_unique<CudaAllocator>(o.device);
  if (o.blas_workspace_bytes > 0) {
    Result<Block> ws = c->allocator_->allocate(o.blas_workspace_bytes, Category::workspace, "cublaslt_workspace");
    if (!ws.ok()) return ws.status();
    c->workspace_ = std::move(ws).value();
  }
  c->allocator_->set_context_lines(used_context, std::max<int64_t>(0, used_libraries - used_context),
                                   c->workspace_.bytes());
  return c;
}

CudaContext::~CudaContext() {
  if (compute_ != nullptr) cudaStreamSynchronize(compute_);
  if (comm_ != nullptr) cudaStreamSynchronize(comm_);
  workspace_.reset();
  allocator_.reset();
  if (blas_ != nullptr) cublasLtDestroy(blas_);
  if (comm_ != nullptr) cudaStreamDestroy(comm_);
  if (compute_ != nullptr) cudaStreamDestroy(compute_);
}

Status CudaContext::synchronize() {
  LLMPLAN_CUDA_TRY(cudaStreamSynchronize(compute_));
  LLMPLAN_CUDA_TRY(cudaStreamSynchronize(comm_));
  return cuda_status(cudaGetLastError(), "after synchronize");
}

Status CudaContext::order_after(cudaStream_t to, cudaStream_t from) {
  cudaEvent_t ev = nullptr;
  LLMPLAN_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  Status s = cuda_status(cudaEventRecord(ev, from), "cudaEventRecord");
  if (s) s = cuda_status(cudaStreamWaitEvent(to, ev, 0), "cudaStreamWaitEvent");
  cudaEventDestroy(ev);  // released once the wait has been satisfied
  return s;
}

// ---------------------------------------------------------------- copies and fills

Status copy_to_device(CudaContext& ctx, void* dst, const void* src, int64_t bytes) {
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                     ctx.compute_stream()),
                     "copy_to_device");
}

Status copy_to_host(CudaContext& ctx, void* dst, const void* src, int64_t bytes) {
  if (bytes == 0) return Status::ok();
  LLMPLAN_CUDA_TRY(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                   ctx.compute_stream()));
  return cuda_status(cudaStreamSynchronize(ctx.compute_stream()), "copy_to_host");
}

bool is_device_memory(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // older runtimes fail for plain host pointers: clear the sticky error
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

Status copy_on_device(CudaContext& ctx, void* dst, const void* src, int64_t bytes) {
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                                     ctx.compute_stream()),
                     "copy_on_device");
}

Status copy_2d_on_device(CudaContext& ctx, void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width,
                         int64_t rows) {
  if (width == 0 || rows == 0) return Status::ok();
  return cuda_status(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                                       static_cast<size_t>(width), static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                                       ctx.compute_stream()),
                     "copy_2d_on_device");
}

Status fill_bytes(CudaContext& ctx, void* dst, int byte_value, int64_t bytes) {
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemsetAsync(dst, byte_value, static_cast<size_t>(bytes), ctx.compute_stream()),
                     "fill_bytes");
}

Result<Tensor> zeros(CudaContext& ctx, Shape shape, DType dtype, Category c, std::string name) {
  Result<Tensor> t = Tensor::empty(ctx.allocator(), shape, dtype, c, std::move(name));
  if (!t.ok()) return t;
  if (Status s = fill_bytes(ctx, t->raw(), 0, t->bytes()); !s) return s;
  return t;
}

}  // namespace llmplan::exec::cuda
