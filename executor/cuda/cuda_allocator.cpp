#include "executor/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

namespace llmplan::exec::cuda {

namespace {
constexpr int64_t kSmallLimit = int64_t{1} << 20;  // 1 MiB
constexpr int64_t kSmallRound = 512;
constexpr int64_t kLargeRound = int64_t{2} << 20;  // 2 MiB
}  // namespace

int64_t CudaAllocator::rounded_size(int64_t bytes) {
  const int64_t r = bytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (std::max<int64_t>(bytes, 1) + r - 1) / r * r;
}

CudaAllocator::CudaAllocator(int device) : device_(device) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    mem_.device_total = static_cast<int64_t>(total_b);
    mem_.used_at_start = static_cast<int64_t>(total_b - free_b);
    mem_.used_now = mem_.used_peak = mem_.used_at_start;
  } else {
    cudaGetLastError();  // not sticky; leave no error behind for the next caller
  }
}

CudaAllocator::~CudaAllocator() {
  // Live blocks here break the REQUIRES; free what is known rather than leak it.
  for (auto& [p, size] : held_) cudaFree(p);
  for (auto& [size, p] : free_) cudaFree(p);
}

void CudaAllocator::set_context_lines(int64_t context_bytes, int64_t library_bytes,
                                      int64_t blas_workspace_bytes) {
  mem_.context = context_bytes;
  mem_.libraries = library_bytes;
  mem_.blas_workspace = blas_workspace_bytes;
}

void CudaAllocator::sample_used() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  mem_.used_now = static_cast<int64_t>(total_b - free_b);
  mem_.used_peak = std::max(mem_.used_peak, mem_.used_now);
}

void* CudaAllocator::cuda_malloc(int64_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(bytes));
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: an allocation failure is not a sticky context error
    return nullptr;
  }
  mem_.cuda_mallocs += 1;
  mem_.reserved += bytes;
  mem_.reserved_peak = std::max(mem_.reserved_peak, mem_.reserved);
  sample_used();
  return p;
}

void* CudaAllocator::raw_allocate(int64_t bytes) {
  const int64_t size = rounded_size(bytes);
  // Best fit among cached blocks no more than 1/8 larger than the size class.
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= size + size / 8) {
    void* p = it->second;
    held_.emplace(p, it->first);
    free_.erase(it);
    mem_.cache_hits += 1;
    return p;
  }
  void* p = cuda_malloc(size);
  if (p == nullptr && !free_.empty()) {
    release_cache();
    p = cuda_malloc(size);
  }
  if (p == nullptr) {
    size_t free_b = 0, total_b = 0;
    const bool info = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
    if (!info) cudaGetLastError();
    last_backend_error_ = "cudaMalloc of " + std::to_string(size) + " bytes failed (cudaErrorMemoryAllocation)";
    if (info) {
      last_backend_error_ += " with " + std::to_string(free_b) + " of " + std::to_string(total_b) +
                             " device bytes free; " + std::to_string(mem_.reserved) +
                             " bytes reserved by this allocator";
    }
    return nullptr;
  }
  held_.emplace(p, size);
  return p;
}

void CudaAllocator::raw_free(void* p, int64_t /*bytes*/) {
  auto it = held_.find(p);
  if (it == held_.end()) return;  // not ours: nothing to do (TrackingAllocator never does this)
  free_.emplace(it->second, p);
  held_.erase(it);
}

void CudaAllocator::release_cache() {
  if (free_.empty()) return;
  cudaDeviceSynchronize();  // a cached block may still be read by enqueued work
  for (auto& [size, p] : free_) {
    cudaFree(p);
    mem_.reserved -= size;
  }
  free_.clear();
  cudaGetLastError();
}

CudaAllocator::DeviceMemory CudaAllocator::device_memory() {
  sample_used();
  DeviceMemory m = mem_;
  m.cached = m.reserved - stats().live_total;
  m.other_now = std::max<int64_t>(0, m.used_now - m.used_at_start - m.reserved);
  return m;
}

}  // namespace llmplan::exec::cuda
