// The caching device allocator and the context: accounting identical to the CPU
// allocator's, block reuse, OOM as a Status with phase/category/tensor, the measured lines
// outside the allocator, copies and fills.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "executor/cuda/cuda_allocator.h"

namespace llmplan::exec::cuda::testing {
namespace {

// The same allocation sequence (categories, phases, frees) on a CPU and a CUDA allocator
// leaves identical statistics: the accounting is the base class's, not the backend's.
TEST(CudaAllocator, AccountsExactlyLikeTheCpuAllocator) {
  auto run = [](TrackingAllocator& a) {
    std::vector<Block> keep;
    a.set_phase(Phase::forward);
    keep.push_back(std::move(a.allocate(1000, Category::weights, "w")).value());
    keep.push_back(std::move(a.allocate(3 << 20, Category::activations, "act")).value());
    {
      Block tmp = std::move(a.allocate(777, Category::workspace, "tmp")).value();
    }
    a.set_phase(Phase::backward);
    keep.push_back(std::move(a.allocate(5000, Category::gradients, "g")).value());
    keep.erase(keep.begin() + 1);  // activations freed in backward
    a.set_phase(Phase::optimizer);
    keep.push_back(std::move(a.allocate(8000, Category::optimizer_states, "m")).value());
    keep.push_back(std::move(a.allocate(0, Category::optimizer_states, "empty")).value());
    MemoryStats s = a.stats();
    keep.clear();
    return s;
  };
  CpuAllocator cpu;
  CudaAllocator gpu(ctx().device());
  const MemoryStats c = run(cpu), g = run(gpu);
  EXPECT_EQ(g.live, c.live);
  EXPECT_EQ(g.peak, c.peak);
  EXPECT_EQ(g.live_total, c.live_total);
  EXPECT_EQ(g.peak_total, c.peak_total);
  EXPECT_EQ(g.at_peak, c.at_peak);
  EXPECT_EQ(g.peak_phase, c.peak_phase);
  for (int p = 0; p < kPhases; ++p) {
    EXPECT_EQ(g.phase[p].total, c.phase[p].total) << to_string(static_cast<Phase>(p));
    EXPECT_EQ(g.phase[p].at_peak, c.phase[p].at_peak) << to_string(static_cast<Phase>(p));
    EXPECT_EQ(g.phase[p].seen, c.phase[p].seen);
  }
  EXPECT_EQ(g.allocations, c.allocations);
  EXPECT_EQ(g.frees, c.frees);
  EXPECT_EQ(gpu.stats().live_total, 0);
}

TEST(CudaAllocator, ReusesFreedBlocksWithoutCudaMalloc) {
  CudaAllocator a(ctx().device());
  void* first = nullptr;
  {
    Block b = std::move(a.allocate(100000, Category::activations, "x")).value();
    first = b.data();
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 256, 0u);
  }
  const CudaAllocator::DeviceMemory before = a.device_memory();
  EXPECT_EQ(before.cuda_mallocs, 1);
  EXPECT_EQ(before.reserved, CudaAllocator::rounded_size(100000));
  EXPECT_EQ(before.cached, before.reserved);  // nothing live: all of it is cache
  Block again = std::move(a.allocate(99999, Category::activations, "y")).value();  // same size class
  EXPECT_EQ(again.data(), first);
  const CudaAllocator::DeviceMemory after = a.device_memory();
  EXPECT_EQ(after.cuda_mallocs, 1);
  EXPECT_EQ(after.cache_hits, 1);
  EXPECT_EQ(after.cached, after.reserved - 99999);
  again.reset();
  a.release_cache();
  EXPECT_EQ(a.device_memory().reserved, 0);
}

TEST(CudaAllocator, OutOfMemoryIsAStatusWithPhaseCategoryAndName) {
  CudaAllocator a(ctx().device());
  Block small = std::move(a.allocate(4096, Category::weights, "w")).value();
  a.set_phase(Phase::backward);
  const int64_t huge = int64_t{1} << 50;  // 1 PiB: no GPU has it
  Result<Block> r = a.allocate(huge, Category::gradients, "layer3.mlp.fc1.dw");
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_EQ(r.status().kind(), ErrorKind::runtime);
  EXPECT_NE(m.find("out of memory in phase backward"), std::string::npos) << m;
  EXPECT_NE(m.find("gradients"), std::string::npos) << m;
  EXPECT_NE(m.find("(layer3.mlp.fc1.dw)"), std::string::npos) << m;
  EXPECT_NE(m.find("the backend refused"), std::string::npos) << m;
  ASSERT_TRUE(a.last_oom().has_value());
  EXPECT_EQ(a.last_oom()->phase, Phase::backward);
  EXPECT_EQ(a.last_oom()->category, Category::gradients);
  EXPECT_EQ(a.last_oom()->requested, huge);
  EXPECT_EQ(a.last_oom()->live_total, 4096);
  EXPECT_NE(a.last_backend_error().find("cudaMalloc"), std::string::npos) << a.last_backend_error();
  EXPECT_EQ(a.stats().live_total, 4096);  // nothing changed
  // No sticky error: the device still works.
  Result<Block> after = a.allocate(4096, Category::gradients, "dw");
  EXPECT_TRUE(after.ok()) << after.status().message();
  EXPECT_TRUE(ctx().synchronize());
}

TEST(CudaAllocator, LimitFailsBeforeTheDeviceIsAsked) {
  CudaAllocator a(ctx().device());
  a.set_limit(10000);
  Block ok = std::move(a.allocate(6000, Category::activations, "a")).value();
  Result<Block> r = a.allocate(6000, Category::activations, "b");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("10000-byte limit"), std::string::npos) << r.status().message();
  EXPECT_EQ(a.device_memory().cuda_mallocs, 1);
}

TEST(CudaAllocator, MeasuresTheLinesOutsideTheAccounting) {
  CudaAllocator& a = ctx().allocator();
  const CudaAllocator::DeviceMemory m0 = a.device_memory();
  EXPECT_GT(m0.device_total, 0);
  EXPECT_GT(m0.context, 0);  // the CUDA context occupies device memory
  EXPECT_GE(m0.used_at_start, m0.context);
  EXPECT_EQ(m0.blas_workspace, ctx().blas_workspace_bytes());
  EXPECT_GE(a.stats().live[static_cast<int>(Category::workspace)], m0.blas_workspace);
  EXPECT_GE(m0.reserved, a.stats().live_total);
  EXPECT_EQ(m0.cached, m0.reserved - a.stats().live_total);
  EXPECT_GE(m0.used_peak, m0.used_now);
  {
    const int64_t bytes = int64_t{256} << 20;
    testing::Dev<uint8_t> big(bytes);
    const CudaAllocator::DeviceMemory m1 = a.device_memory();
    EXPECT_GE(m1.reserved - m0.reserved, 0);
    if (m1.cuda_mallocs > m0.cuda_mallocs) {  // not served from the cache: the device saw it
      EXPECT_GE(m1.used_now - m0.used_now, bytes - (int64_t{2} << 20));
      EXPECT_GE(m1.used_peak, m1.used_now);
    }
  }
}

TEST(CudaContext, StreamsCopiesAndFills) {
  EXPECT_NE(ctx().compute_stream(), nullptr);
  EXPECT_NE(ctx().comm_stream(), nullptr);
  EXPECT_NE(ctx().compute_stream(), ctx().comm_stream());
  std::vector<int32_t> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int32_t>(i * 7);
  testing::Dev<int32_t> d(host);
  testing::Dev<int32_t> e(static_cast<int64_t>(host.size()));
  check(copy_on_device(ctx(), e.p(), d.p(), 4000));
  EXPECT_EQ(e.download(), host);
  check(fill_bytes(ctx(), e.p(), 0, 4000));
  EXPECT_EQ(e.download(), std::vector<int32_t>(1000, 0));
  check(ctx().order_after(ctx().comm_stream(), ctx().compute_stream()));
  EXPECT_TRUE(ctx().synchronize());

  Result<Tensor> z = zeros(ctx(), Shape{3, 5}, DType::f32, Category::activations, "z");
  ASSERT_TRUE(z.ok()) << z.status().message();
  EXPECT_EQ(z->device(), Device::cuda);
  std::vector<float> zh(15, 1.0f);
  check(copy_to_host(ctx(), zh.data(), z->raw(), z->bytes()));
  EXPECT_EQ(zh, std::vector<float>(15, 0.0f));
}

}  // namespace
}  // namespace llmplan::exec::cuda::testing
