// DeviceStandInMemory: the buffer moves of a LocalCommunicator's stand-in collectives
// (communicator.h StandInMemory) for a rank proxy on one GPU, so `execute --proxy-rank R
// --backend cuda` runs rank R's share with its real device memory and kernels while the
// traffic is modelled, as the CPU's proxies do.
//
// Device buffers move with cudaMemcpyAsync / cudaMemsetAsync on the context's compute
// stream, in order with the kernels around them; host buffers (the step's loss, the norm's
// partial sums) with memmove / memset. A move between overlapping device ranges other than
// dst == src (nothing to do) is refused (runtime error): the stand-ins never make one, and
// an asynchronous device copy between overlapping ranges would be undefined.
// Thread-safety: as CudaContext. REQUIRES: ctx outlives this.
#pragma once

#include <memory>

#include "executor/comm/communicator.h"
#include "executor/cuda/context.h"

namespace llmplan::exec::cuda {

class DeviceStandInMemory final : public StandInMemory {
 public:
  explicit DeviceStandInMemory(CudaContext& ctx) : ctx_(ctx) {}
  Status move(void* dst, const void* src, int64_t bytes) override;
  Status zero(void* dst, int64_t bytes) override;

 private:
  CudaContext& ctx_;
};

// A LocalCommunicator standing in for rank `rank` of `plan` on ctx's device.
std::unique_ptr<Communicator> make_device_proxy_communicator(CudaContext& ctx, const ParallelPlan& plan, int rank);

}  // namespace llmplan::exec::cuda
