// executor_cuda_nccl_tests: the NcclCommunicator on a GPU.
//   NcclWorld1.*    a world-size-1 communicator (NCCL runs 1-rank communicators): every
//                   collective and point-to-point call on device buffers against the values
//                   it must produce, in every DType, on the NCCL world group and on a group
//                   of one (the local copies); host buffers routed to the host communicator;
//                   a mixed call refused; all_to_all (world: send/recv pairs to itself;
//                   ep: a group of one); ordering against the compute stream, and
//                   deferred calls completed by fence().
//   NcclDist.TwoRankPlansMatchCpu  2 ranks, one GPU each, one mpirun per plan: fp32
//                   training on --backend cuda over NCCL -- dp2 with ZeRO 0, 1, 2 and 3,
//                   tp2 with SP, pp2 1F1B (GPT: the tied embedding summed between the
//                   stages), cp2 as a ring and as an all-gather, and MoE with ep2 -- each
//                   against the single-process CPU run of the same global batch (losses
//                   within 1e-4 relative). Runs only with >= 2 GPUs and an mpirun; skips
//                   and says why otherwise.
// main: without a usable CUDA device the binary exits 77 (ctest's SKIP) with the reason.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/communicator.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/nccl_communicator.h"
#include "executor/cuda/ops.h"
#include "executor/runner.h"
#include "../executor/tiny_plans.h"

namespace llmplan::exec::cuda {
namespace {

std::string g_self;  // this binary, for mpirun

void check(const Status& s) {
  if (!s) throw std::runtime_error(s.message());
}

struct World1 {
  ParallelPlan plan;  // 1 rank
  std::unique_ptr<CudaContext> ctx;
  std::unique_ptr<LocalCommunicator> host;
  std::unique_ptr<Communicator> nccl;
  World1() {
    Result<std::unique_ptr<CudaContext>> c = CudaContext::create();
    if (!c) throw std::runtime_error(c.status().message());
    ctx = std::move(*c);
    host = std::make_unique<LocalCommunicator>(plan, 0);
    Result<std::unique_ptr<Communicator>> n = create_nccl_communicator(*ctx, *host);
    if (!n) throw std::runtime_error(n.status().message());
    nccl = std::move(*n);
  }
  // A device tensor holding bytes `v`, written on the compute stream.
  Tensor device(const std::vector<unsigned char>& v) {
    Result<Tensor> t = Tensor::empty(ctx->allocator(), Shape{static_cast<int64_t>(v.size())}, DType::u8, Category::workspace, "t");
    if (!t) throw std::runtime_error(t.status().message());
    check(copy_to_device(*ctx, t->raw(), v.data(), static_cast<int64_t>(v.size())));
    return std::move(*t);
  }
  std::vector<unsigned char> host_copy(const Tensor& t) {
    std::vector<unsigned char> v(static_cast<size_t>(t.bytes()));
    check(copy_to_host(*ctx, v.data(), t.raw(), t.bytes()));
    return v;
  }
};

// Bytes of `n` elements of t whose values are 1, 2, 3, ... (small integers are exact in
// every DType, so a one-rank sum must give them back bit for bit).
std::vector<unsigned char> ramp(DType t, int64_t n, int first) {
  std::vector<unsigned char> b(static_cast<size_t>(n * dtype_size(t)));
  for (int64_t i = 0; i < n; ++i) {
    const int x = first + static_cast<int>(i % 100);
    void* p = b.data() + i * dtype_size(t);
    switch (t) {
      case DType::f32: *static_cast<float*>(p) = static_cast<float>(x); break;
      case DType::f64: *static_cast<double*>(p) = x; break;
      case DType::bf16: *static_cast<bf16_t*>(p) = float_to_bf16(static_cast<float>(x)); break;
      case DType::f16: *static_cast<f16_t*>(p) = float_to_f16(static_cast<float>(x)); break;
      case DType::i32: *static_cast<int32_t*>(p) = x; break;
      case DType::u8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(x); break;
    }
  }
  return b;
}

constexpr DType kAll[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::u8};

TEST(NcclWorld1, EveryCollectiveOnDeviceBuffers) {
  World1 w;
  EXPECT_EQ(w.nccl->name(), "nccl");
  EXPECT_FALSE(w.nccl->modelled());
  const int64_t n = 1000;
  // world: the NCCL communicator; dp: a group of one (local copies on the comm stream).
  for (Group g : {Group::world, Group::dp}) {
    for (DType t : kAll) {
      const std::string what = std::string(to_string(g)) + " " + to_string(t);
      const std::vector<unsigned char> a = ramp(t, n, 1), b = ramp(t, n, 7);
      Tensor x = w.device(a);
      check(w.nccl->all_reduce_sum(x.raw(), n, t, g));  // the sum over one rank
      EXPECT_EQ(w.host_copy(x), a) << what << " all_reduce_sum";
      Tensor y = w.device(b);
      check(w.nccl->reduce_scatter_sum(x.raw(), y.raw(), n, t, g));  // this rank's slice = all of it
      EXPECT_EQ(w.host_copy(y), a) << what << " reduce_scatter_sum";
      Tensor z = w.device(b);
      check(w.nccl->all_gather(x.raw(), z.raw(), n, t, g));
      EXPECT_EQ(w.host_copy(z), a) << what << " all_gather";
      check(w.nccl->broadcast(x.raw(), n, t, 0, g));
      EXPECT_EQ(w.host_copy(x), a) << what << " broadcast";
      check(w.nccl->barrier(g));
    }
  }
}

// A collective given one host and one device buffer is bad input, and says so.
void expect_mixed_buffers_refused(const Status& mixed) {
  ASSERT_FALSE(mixed);
  EXPECT_EQ(mixed.kind(), ErrorKind::bad_input);
  EXPECT_NE(mixed.message().find("one buffer in device and one in host memory"), std::string::npos) << mixed.message();
}

// all_to_all (MoE dispatch/combine): on the world group one ncclSend/ncclRecv pair to the
// rank itself inside an NCCL group; on ep (a group of one with ep = 1) a local copy; host
// buffers go to the host communicator (LocalCommunicator: out = in). Every DType, bit for
// bit, and the output is complete for the compute stream's next kernel (no fence).
TEST(NcclWorld1, AllToAllOnDeviceAndHostBuffers) {
  World1 w;
  EXPECT_EQ(w.nccl->size(Group::ep), 1);
  EXPECT_EQ(w.nccl->size(Group::edp), 1);
  const int64_t n = 777;
  for (Group g : {Group::world, Group::ep}) {
    for (DType t : kAll) {
      const std::string what = std::string(to_string(g)) + " " + to_string(t);
      const std::vector<unsigned char> a = ramp(t, n, 2), b = ramp(t, n, 40);
      Tensor x = w.device(a), y = w.device(b);
      check(w.nccl->all_to_all(x.raw(), y.raw(), n, t, g));
      EXPECT_EQ(w.host_copy(y), a) << what << " all_to_all";
    }
  }
  std::vector<float> in(6, 4.5f), out(6, 0.f);
  check(w.nccl->all_to_all(in.data(), out.data(), 6, DType::f32, Group::ep));
  EXPECT_EQ(out, in);
  Tensor d = w.device(ramp(DType::f32, 6, 1));
  expect_mixed_buffers_refused(w.nccl->all_to_all(in.data(), d.raw(), 6, DType::f32, Group::world));
}

// NCCL sends to the rank itself inside a group (sendrecv, ring_shift); a lone send to
// itself would wait for ever, so only the paired calls are tried.
TEST(NcclWorld1, SendrecvToItself) {
  World1 w;
  for (DType t : kAll) {
    const std::vector<unsigned char> a = ramp(t, 333, 3), b = ramp(t, 333, 50);
    Tensor s = w.device(a), r = w.device(b);
    check(w.nccl->sendrecv(s.raw(), r.raw(), 333, t, 0, Group::world, 1, 1));
    EXPECT_EQ(w.host_copy(r), a) << to_string(t);
  }
  // The ring's shift: to and from itself on the world (one NCCL group), a copy in a
  // group of one.
  for (Group g : {Group::world, Group::cp}) {
    const std::vector<unsigned char> a = ramp(DType::bf16, 129, 7), b = ramp(DType::bf16, 129, 90);
    Tensor s = w.device(a), r = w.device(b);
    check(w.nccl->ring_shift(s.raw(), r.raw(), 129, DType::bf16, g, 300));
    EXPECT_EQ(w.host_copy(r), a) << to_string(g);
  }
  // In a group of one there is no NCCL communicator: point-to-point is refused.
  Tensor s = w.device(ramp(DType::f32, 4, 1));
  const Status st = w.nccl->send(s.raw(), 4, DType::f32, 0, Group::pp, 0);
  EXPECT_EQ(st.kind(), ErrorKind::bad_input) << st.message();
}

TEST(NcclWorld1, HostBuffersGoToTheHostCommunicator) {
  World1 w;
  double loss = 2.5;
  check(w.nccl->all_reduce_sum(&loss, 1, DType::f64, Group::dp_cp));  // LocalCommunicator: unchanged
  EXPECT_EQ(loss, 2.5);
  std::vector<float> in(8, 1.5f), out(8, 0.f);
  check(w.nccl->all_gather(in.data(), out.data(), 8, DType::f32, Group::world));
  EXPECT_EQ(out, in);
  Tensor d = w.device(ramp(DType::f32, 8, 1));
  expect_mixed_buffers_refused(w.nccl->all_gather(in.data(), d.raw(), 8, DType::f32, Group::world));
}

// The collective waits for the kernels enqueued before it on the compute stream, and the
// kernels after it wait for the collective: fill on compute, all-gather on the comm
// stream, cast back on compute, with no synchronisation in between.
TEST(NcclWorld1, OrderedAgainstTheComputeStream) {
  World1 w;
  const int64_t n = int64_t{1} << 22;  // large enough that an unordered read would see poison
  Result<Tensor> a = Tensor::empty(w.ctx->allocator(), Shape{n}, DType::f32, Category::workspace, "a");
  Result<Tensor> b = Tensor::empty(w.ctx->allocator(), Shape{n}, DType::f32, Category::workspace, "b");
  Result<Tensor> c = Tensor::empty(w.ctx->allocator(), Shape{n}, DType::bf16, Category::workspace, "c");
  ASSERT_TRUE(a && b && c);
  check(fill_bytes(*w.ctx, b->raw(), 0xFF, b->bytes()));  // NaN poison
  check(fill_bytes(*w.ctx, a->raw(), 0, a->bytes()));
  check(w.nccl->all_gather(a->raw(), b->raw(), n, DType::f32, Group::world));
  check(cast<float, bf16_t>(*w.ctx, b->data<float>(), c->data<bf16_t>(), n));
  std::vector<bf16_t> h(static_cast<size_t>(n));
  check(copy_to_host(*w.ctx, h.data(), c->raw(), c->bytes()));
  size_t bad = 0;
  for (const bf16_t& x : h) bad += x.bits != 0;
  EXPECT_EQ(bad, 0u);
  check(w.ctx->synchronize());
}

// Deferred (DataParallel's overlap): no compute wait after the call, fence() adds it.
TEST(NcclWorld1, DeferredCollectivesCompleteAtTheFence) {
  World1 w;
  ASSERT_TRUE(w.nccl->can_defer());
  const int64_t n = int64_t{1} << 22;
  Result<Tensor> a = Tensor::empty(w.ctx->allocator(), Shape{n}, DType::f32, Category::workspace, "a");
  Result<Tensor> b = Tensor::empty(w.ctx->allocator(), Shape{n}, DType::f32, Category::workspace, "b");
  Result<Tensor> c = Tensor::empty(w.ctx->allocator(), Shape{n}, DType::bf16, Category::workspace, "c");
  ASSERT_TRUE(a && b && c);
  check(fill_bytes(*w.ctx, b->raw(), 0xFF, b->bytes()));
  check(fill_bytes(*w.ctx, a->raw(), 0, a->bytes()));
  w.nccl->set_deferred(true);
  check(w.nccl->all_gather(a->raw(), b->raw(), n, DType::f32, Group::world));
  w.nccl->set_deferred(false);
  check(w.nccl->fence());
  check(cast<float, bf16_t>(*w.ctx, b->data<float>(), c->data<bf16_t>(), n));
  std::vector<bf16_t> h(static_cast<size_t>(n));
  check(copy_to_host(*w.ctx, h.data(), c->raw(), c->bytes()));
  size_t bad = 0;
  for (const bf16_t& x : h) bad += x.bits != 0;
  EXPECT_EQ(bad, 0u);
}

// ---- 2 ranks

// The 2-rank plans (the tiny GPT or Llama, fp32, flash), by name; global batch 16 = 8 x 2
// micro-batches in every one.
const char* const kTwoRankPlans[] = {"dp2_zero0", "dp2_zero1", "dp2_zero2", "dp2_zero3", "tp2_sp",
                                     "pp2",       "cp2_ring",  "cp2_all_gather", "moe_dp2_ep2"};

Result<PlanFile> two_rank_plan(const std::string& name) {
  const bool llama = name == "tp2_sp" || name == "cp2_ring" || name == "moe_dp2_ep2";
  PlanFile f = exec::testing::tiny_plan(llama ? Family::llama : Family::gpt, Precision::fp32, Recompute::none, true);
  f.plan.grad_accum = 2;
  if (name.starts_with("dp2_zero")) {
    f.plan.dp = 2;
    f.plan.zero = name.back() - '0';
    f.plan.grad_accum = 1;
  } else if (name == "tp2_sp") {
    f.plan.tp = 2;
    f.plan.sp = true;
  } else if (name == "pp2") {
    f.plan.pp = 2;
  } else if (name == "cp2_ring" || name == "cp2_all_gather") {
    f.plan.cp = 2;
    f.plan.cp_exchange = name == "cp2_ring" ? CpExchange::ring : CpExchange::all_gather;
  } else if (name == "moe_dp2_ep2") {
    f.model = exec::testing::tiny_moe_model(Family::llama, exec::kByteVocab);
    f.plan.dp = f.plan.ep = 2;
    f.plan.grad_accum = 1;
  } else {
    return Status::bad_input("no 2-rank plan named " + name);
  }
  f.cluster.gpus_per_node = f.plan.world_size();
  return f;
}

// One rank of a 2-rank run (started by mpirun): plan `name` on CUDA over NCCL; rank 0 then
// runs the CPU reference in-process and compares. Exit 0 = they agree.
int child_plan(const std::string& name) {
  Result<PlanFile> f = two_rank_plan(name);
  if (!f) return std::printf("%s\n", f.status().message().c_str()), 1;
  Result<std::unique_ptr<Communicator>> mpi = create_mpi_communicator(f->plan, 300);
  if (!mpi) return std::printf("mpi: %s\n", mpi.status().message().c_str()), 1;
  const int me = (*mpi)->rank(Group::world);
  int local = mpi_node_local_rank();
  if (local < 0) local = launcher_local_rank();
  Result<int> dev = device_for_local_rank(local, probe_devices().count);
  if (!dev) return std::printf("rank %d: %s\n", me, dev.status().message().c_str()), 1;
  CudaOptions co;
  co.device = *dev;
  Result<std::unique_ptr<ExecBackend>> be = make_cuda_backend(co);
  if (!be) return std::printf("rank %d: %s\n", me, be.status().message().c_str()), 1;
  Result<std::unique_ptr<Communicator>> nccl = create_nccl_communicator(*context_of(**be), **mpi);
  if (!nccl) return std::printf("rank %d: %s\n", me, nccl.status().message().c_str()), 1;
  RunOptions o;
  o.steps = 6;
  o.warmup = 0;
  o.trainer.lr = 3e-3;
  o.backend = "cuda";
  o.device_backend = be->get();
  o.comm = nccl->get();
  Result<RunReport> g = run_plan(*f, o);
  if (!g) return std::printf("rank %d: cuda %s run: %s\n", me, name.c_str(), g.status().message().c_str()), 1;
  nccl->reset();
  if (me != 0) return 0;
  RunOptions oc = o;
  oc.backend = "cpu";
  oc.device_backend = nullptr;
  oc.comm = nullptr;  // the single-process equivalent of the same global batch
  Result<RunReport> c = run_plan(*f, oc);
  if (!c) return std::printf("cpu reference: %s\n", c.status().message().c_str()), 1;
  int bad = c->steps.size() != g->steps.size();
  for (size_t i = 0; i < c->steps.size() && i < g->steps.size(); ++i) {
    const double a = c->steps[i].loss, b = g->steps[i].loss, rel = std::abs(b - a) / std::abs(a);
    std::printf("%s step %zu: cpu one process %.6f, cuda 2 ranks (nccl) %.6f, relative %.2e\n", name.c_str(), i, a, b, rel);
    bad += !(rel <= 1e-4);
  }
  return bad == 0 ? 0 : 1;
}

TEST(NcclDist, TwoRankPlansMatchCpu) {
#ifndef LLMPLAN_MPIEXEC
  GTEST_SKIP() << "no mpirun (or no MPI) in this build: the 2-rank NCCL run needs one";
#else
  const int gpus = probe_devices().count;
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs (one per rank), " << gpus << " visible";
  if (!mpi_built()) GTEST_SKIP() << "this build has no MPI";
  // The build machine's mpirun, or LLMPLAN_MPIEXEC on a machine the binary was carried to.
  const char* env = std::getenv("LLMPLAN_MPIEXEC");
  const std::string mpiexec = env && *env ? env : LLMPLAN_MPIEXEC;
  if (!std::filesystem::exists(mpiexec)) GTEST_SKIP() << "no " << mpiexec << " on this machine (set LLMPLAN_MPIEXEC)";
  for (const char* name : kTwoRankPlans) {
    char session_base[] = "/tmp/llmplan-mpi-XXXXXX";  // private TMPDIR: see tests/executor_dist
    ASSERT_NE(::mkdtemp(session_base), nullptr);
    const std::string cmd = "TMPDIR=" + std::string(session_base) + " " + mpiexec +
                            " --allow-run-as-root --oversubscribe -np 2 " + g_self + " --child-plan " + name;
    const int rc = std::system(cmd.c_str());
    std::error_code ignored;
    std::filesystem::remove_all(session_base, ignored);
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd << ": exit " << rc;
  }
#endif
}

}  // namespace
}  // namespace llmplan::exec::cuda

int main(int argc, char** argv) {
  namespace cu = llmplan::exec::cuda;
  cu::g_self = std::filesystem::absolute(argv[0]).string();
  if (argc == 3 && std::string(argv[1]) == "--child-plan") return cu::child_plan(argv[2]);
  const cu::DeviceProbe probe = cu::probe_devices();
  if (probe.count == 0) {
    std::printf("no CUDA device: %s -- skipping executor_cuda_nccl_tests\n", probe.reason.c_str());
    return 77;
  }
  std::printf("executor_cuda_nccl_tests: %d CUDA device(s)\n", probe.count);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
