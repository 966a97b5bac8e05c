// CudaAllocator: a caching device allocator on cudaMalloc, with the accounting of
// TrackingAllocator (per category, per phase, limit, OOM report), identical to the CPU's.
//
// Caching: a freed block goes back to a free list by its rounded size and is handed out
// again for a request of the same rounded size (best fit up to 1/8 larger); cudaMalloc is
// called only when no cached block fits, and when it fails the cache is released
// (cudaFree of every cached block) and the cudaMalloc tried once more. Sizes round up to
// 512 bytes below 1 MiB and to 2 MiB above, so a training step's repeating sizes reuse
// blocks exactly. No managed memory, ever (the device notes: it can hang the GPU).
//
// What the accounting counts: the exact requested bytes (TrackingAllocator), so the
// categories compare with the planner's recipe. What the process really holds on the GPU
// -- what nvidia-smi shows -- is in device_memory(): the CUDA context, the libraries, the
// reserved (cudaMalloc'ed) bytes including the cache and the rounding (the planner's
// "fragmentation" line), and the device's used bytes sampled with cudaMemGetInfo after
// every cudaMalloc and at every device_memory() call.
//
// Out of memory (cudaMalloc failing even after the cache was released) is reported as on
// the CPU: allocate() returns a runtime Status "out of memory in phase <phase>: allocating
// <n> bytes of <category> (<tensor name>) ... the backend refused", last_oom() keeps the
// facts, and last_backend_error() adds the CUDA error and the free bytes at that moment.
//
// Stream semantics: a freed block is reused at once by the next allocation, which is safe
// when all work on this memory is ordered on one stream (the context's compute stream).
// REQUIRES: memory used on another stream (communication) is not freed before that stream
// has been ordered after, or synchronised with, the compute stream.
// REQUIRES: constructed with the device current on the calling thread; every Block freed
// before the allocator is destroyed.
// Thread-safety: none (as TrackingAllocator).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "executor/allocator.h"

namespace llmplan::exec::cuda {

class CudaAllocator final : public TrackingAllocator {
 public:
  // Device memory outside the per-category accounting, bytes. Every line is measured.
  struct DeviceMemory {
    int64_t device_total = 0;      // cudaMemGetInfo total
    int64_t used_at_start = 0;     // total - free when the allocator was created: context, libraries,
                                   // and any other process on the device
    int64_t context = 0;           // the CUDA context: used right after its initialisation (an
                                   // estimate: includes other processes; grows with lazily loaded kernels)
    int64_t libraries = 0;         // cuBLASLt handle, streams (and NCCL when it joins), measured
                                   // around their creation
    int64_t blas_workspace = 0;    // cuBLASLt workspace (also counted under Category::workspace)
    int64_t reserved = 0;          // held from cudaMalloc now: live blocks (rounded) + the cache
    int64_t reserved_peak = 0;
    int64_t cached = 0;            // reserved minus live requested bytes: cache + rounding
                                   // (the planner's "fragmentation" line)
    int64_t used_now = 0;          // total - free at this call
    int64_t used_peak = 0;         // max of total - free over the samples (after each cudaMalloc)
    int64_t other_now = 0;         // used_now - used_at_start - reserved: lazily loaded modules,
                                   // library allocations after start (0 when negative)
    int64_t cuda_mallocs = 0;      // cudaMalloc calls that succeeded
    int64_t cache_hits = 0;        // allocations served from the cache
  };

  explicit CudaAllocator(int device);
  ~CudaAllocator() override;
  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  Device device() const override { return Device::cuda; }
  int device_ordinal() const { return device_; }

  // Frees every cached (unused) block with cudaFree; live blocks stay. Synchronises the device.
  void release_cache();
  // Samples cudaMemGetInfo and returns all lines.
  DeviceMemory device_memory();
  // Set by CudaContext from its own measurements.
  void set_context_lines(int64_t context_bytes, int64_t library_bytes, int64_t blas_workspace_bytes);
  // The CUDA error and free bytes of the last failed cudaMalloc ("" when none failed).
  const std::string& last_backend_error() const { return last_backend_error_; }

  // The size class a request of `bytes` is rounded to (exposed for tests).
  static int64_t rounded_size(int64_t bytes);

 protected:
  void* raw_allocate(int64_t bytes) override;
  void raw_free(void* p, int64_t bytes) override;

 private:
  void sample_used();
  void* cuda_malloc(int64_t bytes);

  int device_;
  std::multimap<int64_t, void*> free_;          // rounded size -> cached block
  std::unordered_map<void*, int64_t> held_;     // live block -> its reserved size
  DeviceMemory mem_;
  std::string last_backend_error_;
};

}  // namespace llmplan::exec::cuda
