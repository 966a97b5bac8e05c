// What the CUDA layer does without a GPU, run everywhere (CI has no GPU): the device probe
// and the context fail cleanly with a reason, and the host-side size functions (allocator
// size classes, op workspaces) hold their formulas.
#include <gtest/gtest.h>

#include <string>

#include "executor/cuda/ops.h"

namespace llmplan::exec::cuda {
namespace {

TEST(CudaHost, ProbeNeverFailsAndSaysWhyThereIsNoDevice) {
  const DeviceProbe p = probe_devices();
  EXPECT_GE(p.count, 0);
  EXPECT_EQ(p.count == 0, !p.reason.empty()) << p.reason;
}

TEST(CudaHost, ContextWithoutDeviceIsARuntimeStatus) {
  if (probe_devices().count > 0) GTEST_SKIP() << "a CUDA device is present";
  Result<std::unique_ptr<CudaContext>> c = CudaContext::create();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().kind(), ErrorKind::runtime);
  EXPECT_EQ(c.status().message().rfind("no CUDA device: ", 0), 0u) << c.status().message();
}

TEST(CudaHost, AllocatorSizeClasses) {
  EXPECT_EQ(CudaAllocator::rounded_size(0), 512);
  EXPECT_EQ(CudaAllocator::rounded_size(1), 512);
  EXPECT_EQ(CudaAllocator::rounded_size(512), 512);
  EXPECT_EQ(CudaAllocator::rounded_size(513), 1024);
  EXPECT_EQ(CudaAllocator::rounded_size((1 << 20) - 1), 1 << 20);
  EXPECT_EQ(CudaAllocator::rounded_size(1 << 20), 2 << 20);
  EXPECT_EQ(CudaAllocator::rounded_size(3 << 20), 4 << 20);
}

TEST(CudaHost, WorkspaceSizes) {
  AttentionDims dm;
  dm.b = 2;
  dm.s = 1024;
  dm.heads = 32;
  dm.kv_heads = 8;
  dm.head_dim = 128;
  const int64_t scores = dm.b * dm.heads * dm.s * dm.s;
  // Materialized: one fp32 score matrix plus dS in the storage type, and head-major copies.
  EXPECT_GE(cuda::attention_workspace_bytes(DType::bf16, dm, false), scores * (4 + 2));
  EXPECT_GE(cuda::attention_workspace_bytes(DType::f32, dm, false), scores * (4 + 4));
  // Flash: D = dO . o per row, fp32; on tensor cores (16-bit, head_dim a multiple of 16)
  // also the fp32 dQ that the key blocks add into.
  EXPECT_EQ(cuda::attention_workspace_bytes(DType::f32, dm, true), dm.b * dm.heads * dm.s * 4);
  EXPECT_EQ(cuda::attention_workspace_bytes(DType::bf16, dm, true),
            dm.b * dm.heads * dm.s * 4 + dm.b * dm.s * dm.heads * dm.head_dim * 4);
  dm.head_dim = 72;  // not a multiple of 16: the fp32-FMA kernels, no dQ buffer
  EXPECT_EQ(cuda::attention_workspace_bytes(DType::bf16, dm, true), dm.b * dm.heads * dm.s * 4);
  EXPECT_EQ(cross_entropy_workspace_bytes(1000), 4096 + 256);
  EXPECT_GE(norm_workspace_bytes(4096, 4096), 4096 * 8);
  EXPECT_EQ(linear_workspace_bytes(4096, 4096), column_sums_workspace_bytes(4096, 4096));
  EXPECT_EQ(column_sums_workspace_bytes(10, 100), 2 * 512);  // one chunk of 100 floats, twice, 256-aligned
}

}  // namespace
}  // namespace llmplan::exec::cuda
