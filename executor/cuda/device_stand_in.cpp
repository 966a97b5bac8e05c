#include "executor/cuda/device_stand_in.h"

#include <cstring>

namespace llmplan::exec::cuda {

Status DeviceStandInMemory::move(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0 || dst == src) return Status::ok();
  const bool dev = is_device_memory(dst), sdev = is_device_memory(src);
  if (!dev && !sdev) {
    std::memmove(dst, src, static_cast<size_t>(bytes));
    return Status::ok();
  }
  if (dev != sdev)
    return Status::runtime("rank proxy (cuda): a stand-in collective between host and device buffers (a caller mixed them)");
  const auto* d = static_cast<const char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (d < s + bytes && s < d + bytes)
    return Status::runtime("rank proxy (cuda): a stand-in collective between overlapping device buffers");
  return copy_on_device(ctx_, dst, src, bytes);
}

Status DeviceStandInMemory::zero(void* dst, int64_t bytes) {
  if (bytes <= 0) return Status::ok();
  if (!is_device_memory(dst)) {
    std::memset(dst, 0, static_cast<size_t>(bytes));
    return Status::ok();
  }
  return fill_bytes(ctx_, dst, 0, bytes);
}

std::unique_ptr<Communicator> make_device_proxy_communicator(CudaContext& ctx, const ParallelPlan& plan, int rank) {
  return std::make_unique<LocalCommunicator>(plan, rank, std::make_shared<DeviceStandInMemory>(ctx));
}

}  // namespace llmplan::exec::cuda
