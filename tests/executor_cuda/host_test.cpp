// What the CUDA layer does without a GPU, run everywhere (CI has no GPU): the device probe
// and the context fail cleanly with a reason, and the host-side size functions (allocator
// size classes, op workspaces) hold their formulas.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "executor/comm/communicator.h"
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/ops.h"
#include "executor/runner.h"

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

// ---- distributed CUDA: what decides the NCCL groups and the device, and what is refused

// The split colours and keys cut the world into exactly the groups of the layout: two
// ranks share a colour iff they differ only in g's coordinates, and the key is the rank's
// index in g (so ncclCommSplit ranks = MPI_Comm_split ranks = coordinates).
TEST(CudaHostDist, GroupSplitColoursAreTheLayoutsGroups) {
  // ep 1 (ep: each rank alone, edp = dp_cp), 2 and 3 (both divide dp * cp = 6).
  for (int ep : {1, 2, 3}) {
    ParallelPlan p;
    p.tp = 2;
    p.cp = 2;
    p.dp = 3;
    p.pp = 2;
    p.ep = ep;
    const int world = p.world_size();
    // The expert groups cut DP x CP (index q = dp * cp + cp) into blocks of ep: ep = one
    // block, edp = the same place in every block (communicator.h).
    auto differ_only_in = [&p](const RankCoords& a, const RankCoords& b, Group g) {
      const int qa = a.dp * p.cp + a.cp, qb = b.dp * p.cp + b.cp;
      if (g == Group::ep) return a.tp == b.tp && a.pp == b.pp && qa / p.ep == qb / p.ep;
      if (g == Group::edp) return a.tp == b.tp && a.pp == b.pp && qa % p.ep == qb % p.ep;
      return (g == Group::tp || a.tp == b.tp) && (g == Group::cp || g == Group::dp_cp || a.cp == b.cp) &&
             (g == Group::dp || g == Group::dp_cp || a.dp == b.dp) && (g == Group::pp || a.pp == b.pp);
    };
    for (Group g : kSubgroups) {
      LocalCommunicator probe(p, 0);
      const int n = probe.size(g);
      const std::string what = std::string(to_string(g)) + " ep" + std::to_string(ep);
      std::set<int> colours;
      for (int a = 0; a < world; ++a) {
        const RankCoords ca = coords_of(p, a);
        const GroupSplit sa = group_split(p, ca, g);
        colours.insert(sa.colour);
        EXPECT_GE(sa.colour, 0) << what;  // ncclCommSplit: negative colours mean "no group"
        EXPECT_EQ(sa.key, LocalCommunicator(p, a).rank(g)) << what << " rank " << a;
        for (int b = 0; b < world; ++b) {
          const RankCoords cb = coords_of(p, b);
          EXPECT_EQ(sa.colour == group_split(p, cb, g).colour, differ_only_in(ca, cb, g)) << what << " ranks " << a << ", " << b;
        }
      }
      EXPECT_EQ(static_cast<int>(colours.size()), world / n) << what;
    }
  }
  ParallelPlan p;
  p.tp = 2;
  p.cp = 2;
  p.dp = 3;
  p.pp = 2;
  const GroupSplit w = group_split(p, coords_of(p, 5), Group::world);
  EXPECT_EQ(w, (GroupSplit{0, 5}));
  // dp2 x cp2 (tp = pp = 1): the dp_cp group is the world, numbered dp-major.
  ParallelPlan q;
  q.dp = 2;
  q.cp = 2;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(group_split(q, coords_of(q, r), Group::dp_cp), (GroupSplit{0, r}));
}

TEST(CudaHostDist, LocalRankFromTheLauncher) {
  const char* vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"};
  for (const char* v : vars)
    if (std::getenv(v)) GTEST_SKIP() << "started by a launcher (" << v << " is set)";
  EXPECT_EQ(launcher_local_rank(), -1);
  setenv("MPI_LOCALRANKID", "3", 1);
  EXPECT_EQ(launcher_local_rank(), 3);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);  // OpenMPI's name comes first
  EXPECT_EQ(launcher_local_rank(), 1);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("MPI_LOCALRANKID");
  setenv("SLURM_LOCALID", "2", 1);  // in an allocation but outside srun: no step, not trusted
  EXPECT_EQ(launcher_local_rank(), -1);
  unsetenv("SLURM_LOCALID");
}

TEST(CudaHostDist, OneGpuPerRank) {
  EXPECT_EQ(*device_for_local_rank(-1, 1), 0);  // not launched: device 0
  EXPECT_EQ(*device_for_local_rank(0, 8), 0);
  EXPECT_EQ(*device_for_local_rank(7, 8), 7);
  Result<int> over = device_for_local_rank(2, 2);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().kind(), ErrorKind::bad_input);
  EXPECT_NE(over.status().message().find("local rank 2 has no GPU of its own: 2 visible"), std::string::npos)
      << over.status().message();
  EXPECT_FALSE(device_for_local_rank(0, 0).ok());
}

// What --backend cuda runs distributed: every parallel dimension (dp with ZeRO 0-3, tp with
// SP, pp, cp with flash attention, ep) and rank proxies of them; the refusals (cp with
// materialized attention; interleaved pipelines over NCCL, not in a proxy) name the field.
TEST(CudaHostDist, RefusalsNameThePlanField) {
  auto plan = [](int dp, int tp, int pp, int cp, int zero) {
    ParallelPlan p;
    p.dp = dp;
    p.tp = tp;
    p.pp = pp;
    p.cp = cp;
    p.zero = zero;
    return p;
  };
  ParallelPlan ep = plan(4, 1, 1, 1, 1);
  ep.ep = 2;
  for (int zero = 0; zero <= 3; ++zero) EXPECT_TRUE(check_distributed_backend("cuda", plan(2, 1, 1, 1, zero), false));
  for (const ParallelPlan& p : {plan(8, 1, 1, 1, 0), plan(2, 2, 1, 1, 0), plan(2, 1, 2, 1, 0), plan(4, 2, 1, 1, 1),
                                plan(1, 2, 2, 1, 0), plan(2, 1, 1, 2, 0), plan(1, 2, 2, 2, 0), ep}) {
    EXPECT_TRUE(check_distributed_backend("cuda", p, false)) << "tp " << p.tp << " pp " << p.pp << " cp " << p.cp;
    EXPECT_TRUE(check_distributed_backend("cuda", p, true)) << "proxy of tp " << p.tp << " pp " << p.pp << " cp " << p.cp;
  }
  ParallelPlan cp_materialized = plan(2, 1, 1, 2, 0), cp4_materialized = plan(1, 2, 1, 4, 0), interleaved = plan(1, 1, 2, 1, 0);
  cp_materialized.flash_attention = cp4_materialized.flash_attention = false;
  interleaved.vpp = 2;
  EXPECT_TRUE(check_distributed_backend("cuda", interleaved, true));  // a proxy sends nothing
  const struct {
    ParallelPlan p;
    bool modelled;
    const char* field;
  } refused[] = {
      {cp_materialized, false, "plan.flash_attention"},
      {cp4_materialized, true, "plan.cp 4"},
      {interleaved, false, "plan.vpp 2"},
  };
  for (const auto& r : refused) {
    const Status s = check_distributed_backend("cuda", r.p, r.modelled);
    ASSERT_FALSE(s) << r.field;
    EXPECT_EQ(s.kind(), ErrorKind::bad_input);
    EXPECT_NE(s.message().find(r.field), std::string::npos) << s.message();
    EXPECT_TRUE(check_distributed_backend("cpu", r.p, r.modelled)) << r.field;  // the CPU runs them all
  }
}

}  // namespace
}  // namespace llmplan::exec::cuda
