// main() of executor_cuda_tests: without a usable CUDA device the whole binary is skipped
// (exit 77, ctest's SKIP_RETURN_CODE) with the reason; otherwise one CudaContext serves
// every test, and the run's seed is printed first.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "cuda_test_util.h"

namespace llmplan::exec::cuda::testing {
CudaContext* g_context = nullptr;
}

int main(int argc, char** argv) {
  using llmplan::exec::cuda::CudaContext;
  namespace ct = llmplan::exec::cuda::testing;
  const llmplan::exec::cuda::DeviceProbe probe = llmplan::exec::cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("no CUDA device: %s -- skipping executor_cuda_tests\n", probe.reason.c_str());
    return 77;
  }
  llmplan::Result<std::unique_ptr<CudaContext>> created = CudaContext::create();
  if (!created.ok()) {
    std::printf("CUDA context: %s\n", created.status().message().c_str());
    return 1;
  }
  ct::g_context = created->get();
  std::printf("executor_cuda_tests on %s (%d SMs, compute capability %d.%d); seed %llu "
              "(LLMPLAN_TEST_SEED=%llu reproduces)\n",
              ct::g_context->device_name().c_str(), ct::g_context->sm_count(),
              ct::g_context->compute_capability()[0], ct::g_context->compute_capability()[1],
              static_cast<unsigned long long>(ct::run_seed()),
              static_cast<unsigned long long>(ct::run_seed()));
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const llmplan::Status sync = ct::g_context->synchronize();
  if (!sync) std::printf("CUDA error after the tests: %s\n", sync.message().c_str());
  ct::g_context = nullptr;
  created->reset();
  return sync ? rc : 1;
}
