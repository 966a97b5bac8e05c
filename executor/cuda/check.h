// CUDA, cuBLASLt errors as Status values (internal to executor/cuda/; include only from
// its .cpp and .cu files). No exception crosses the API: a failed runtime call becomes a
// runtime Status naming the call, the code's name and its message.
//
// Thread-safety: pure functions.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "planner/spec/status.h"

namespace llmplan::exec::cuda {

// "what: cudaErrorMemoryAllocation (out of memory)"; ok for cudaSuccess.
inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status::runtime(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// After a kernel launch: the launch's own error (bad configuration, no kernel image for
// this GPU). Errors of the kernel's execution surface later, at a synchronisation.
inline Status launch_status(const char* kernel) { return cuda_status(cudaGetLastError(), kernel); }

}  // namespace llmplan::exec::cuda

// Returns the Status of a failed runtime call from the enclosing function.
#define LLMPLAN_CUDA_TRY(call)                                            \
  do {                                                                    \
    if (::llmplan::Status s_ = ::llmplan::exec::cuda::cuda_status((call), #call); !s_) return s_; \
  } while (0)
