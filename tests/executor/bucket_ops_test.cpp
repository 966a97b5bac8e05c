// The data-parallel buckets move memory only through the backend's BucketOps (the CUDA
// backend's are kernels, comm/bucket_ops.h): a backend whose ops count and forward to the
// host loops runs rank proxies of dp2 plans (ZeRO 0-3) bit for bit as the plain CPU
// backend does, and every kind of movement the ZeRO stage needs went through the ops.
// Overlap (Communicator::set_deferred / fence, the NCCL communicator's): a communicator
// that really defers -- outputs poisoned with NaN at the call, the collective applied only
// at fence() -- gives the same bits, so DataParallel never reads a deferred result or
// rewrites a deferred input before fencing. Both hold for expert parallel MoE plans too,
// whose expert gradients and partitions move over edp in collectives of their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/comm/bucket_ops.h"
#include "executor/comm/communicator.h"
#include "executor/runner.h"
#include "tiny_plans.h"

namespace llmplan::exec {
namespace {

struct CountingOps final : BucketOps {
  HostBucketOps host;
  int zero_n = 0, read_n = 0, write_n = 0, add_n = 0, copy_n = 0, sum_n = 0;
  Status zero(void* p, int64_t bytes) override { return ++zero_n, host.zero(p, bytes); }
  Status read_f32(const Tensor& t, int64_t off, float* out, int64_t n) override { return ++read_n, host.read_f32(t, off, out, n); }
  Status write_f32(const float* in, Tensor& t, int64_t off, int64_t n) override { return ++write_n, host.write_f32(in, t, off, n); }
  Status add_f32(const float* in, Tensor& t, int64_t off, int64_t n) override { return ++add_n, host.add_f32(in, t, off, n); }
  Status copy(void* dst, const void* src, int64_t bytes) override { return ++copy_n, host.copy(dst, src, bytes); }
  Status add(DType t, void* y, const void* x, int64_t n) override { return ++sum_n, host.add(t, y, x, n); }
};

// The CPU backend with its bucket movements counted.
class CountingBackend final : public ExecBackend {
 public:
  std::string name() const override { return "cpu"; }
  std::string device_name() const override { return "host"; }
  TrackingAllocator& allocator() override { return cpu_->allocator(); }
  Result<std::unique_ptr<Model>> build_model(const ModelConfig& c) override { return cpu_->build_model(c); }
  Result<std::unique_ptr<Trainer>> create_trainer(Model& m, const TrainingJob& job, const PrecisionScheme& scheme,
                                                  const TrainerOptions& options, const TrainerShard* shard) override {
    return cpu_->create_trainer(m, job, scheme, options, shard);
  }
  Status synchronize() override { return cpu_->synchronize(); }
  DeviceMemoryLines device_memory() override { return cpu_->device_memory(); }
  BucketOps* bucket_ops() override { return &ops; }
  CountingOps ops;

 private:
  std::unique_ptr<ExecBackend> cpu_ = make_cpu_backend();
};

// Runs a proxy of `rank` of f on the plain CPU backend and on the counting one (2 steps),
// expects the same losses bit for bit, and returns what went through the ops.
CountingOps counted_run(const PlanFile& f, int rank, const std::string& what) {
  LocalCommunicator comm(f.plan, rank);
  RunOptions o;
  o.steps = 2;
  o.warmup = 0;
  o.comm = &comm;
  Result<RunReport> plain = run_plan(f, o);
  EXPECT_TRUE(plain.ok()) << what << ": " << plain.status().message();
  CountingBackend counted;
  o.device_backend = &counted;
  Result<RunReport> via = run_plan(f, o);
  EXPECT_TRUE(via.ok()) << what << ": " << via.status().message();
  if (plain.ok() && via.ok()) {
    EXPECT_EQ(plain->steps.size(), via->steps.size()) << what;
    for (size_t i = 0; i < std::min(plain->steps.size(), via->steps.size()); ++i)
      EXPECT_EQ(plain->steps[i].loss, via->steps[i].loss) << what << " step " << i;
  }
  return counted.ops;
}

TEST(BucketOps, DataParallelMovesMemoryOnlyThroughTheBackendsOps) {
  for (int zero = 0; zero <= 3; ++zero) {
    PlanFile f = testing::tiny_plan(Family::gpt, Precision::bf16, Recompute::none, true);
    f.plan.dp = 2;
    f.plan.grad_accum = 1;
    f.plan.zero = zero;
    const CountingOps c = counted_run(f, 1, "ZeRO-" + std::to_string(zero));
    EXPECT_GT(c.zero_n, 0) << "ZeRO-" << zero;
    EXPECT_GT(c.read_n, 0) << "ZeRO-" << zero;
    EXPECT_GT(c.write_n, 0) << "ZeRO-" << zero;  // unpacked or gathered into the model's tensors
    if (zero >= 2) {
      EXPECT_GT(c.add_n, 0) << "ZeRO-" << zero;  // reduce-scatter into the partition
    }
    if (zero == 3) {
      EXPECT_GT(c.copy_n, 0) << "ZeRO-" << zero;  // the initial weight partition
    }
    std::printf("ZeRO-%d: zero %d, read %d, write %d, add %d, copy %d\n", zero, c.zero_n, c.read_n, c.write_n, c.add_n, c.copy_n);
  }
}

// The pipeline sums the tied embedding's gradient between the first and the last stage
// through the backend's ops too (a GPU adds device tensors): a proxy of the first stage of
// a pp2 GPT (tied embeddings) runs bit for bit as on the plain CPU backend, with the sum
// through BucketOps::add.
TEST(BucketOps, PipelineSumsTheTiedEmbeddingThroughTheBackendsOps) {
  PlanFile f = testing::tiny_plan(Family::gpt, Precision::bf16, Recompute::none, true);
  ASSERT_TRUE(f.model.tied_embeddings);
  f.plan.pp = 2;
  f.plan.grad_accum = 2;
  EXPECT_GT(counted_run(f, 0, "pp2 stage 0").sum_n, 0);
}

// A rank proxy's stand-in collectives move memory only through its StandInMemory (a GPU's
// moves device buffers, cuda/device_stand_in.h): with one that counts and forwards to the
// host's, proxies of a TP + SP rank, a pipeline stage (plain and interleaved), a CP ring rank
// and an expert-parallel MoE rank run bit for bit as with the default, and the movements
// went through it.
struct CountingStandIn final : StandInMemory {
  HostStandInMemory host;
  int move_n = 0, zero_n = 0;
  Status move(void* dst, const void* src, int64_t bytes) override { return ++move_n, host.move(dst, src, bytes); }
  Status zero(void* dst, int64_t bytes) override { return ++zero_n, host.zero(dst, bytes); }
};

TEST(StandInMemory, RankProxiesMoveBuffersOnlyThroughIt) {
  enum Kind { tp, pipeline, interleaved, cp_ring, moe_ep };
  for (const Kind kind : {tp, pipeline, interleaved, cp_ring, moe_ep}) {
    PlanFile f = testing::tiny_plan(Family::llama, Precision::bf16, Recompute::none, true);
    f.plan.grad_accum = 2;
    if (kind == pipeline || kind == interleaved) {
      f.plan.pp = 2;
      if (kind == interleaved) {  // 2 x 2 chunks of one layer
        f.model.layers = 4;
        f.plan.vpp = 2;
        f.plan.schedule = Schedule::interleaved;
      }
    } else if (kind == tp) {
      f.plan.tp = 2;
      f.plan.sp = true;
    } else if (kind == cp_ring) {
      f.plan.cp = 2;
    } else {
      f.model = testing::tiny_moe_model(Family::llama, kByteVocab);
      f.plan.dp = f.plan.ep = 2;
      f.plan.grad_accum = 1;
    }
    const int rank = kind == tp ? 0 : 1;  // the last stage receives its input
    RunOptions o;
    o.steps = 2;
    o.warmup = 0;
    LocalCommunicator host_comm(f.plan, rank);
    o.comm = &host_comm;
    Result<RunReport> plain = run_plan(f, o);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    auto mem = std::make_shared<CountingStandIn>();
    LocalCommunicator counted_comm(f.plan, rank, mem);
    o.comm = &counted_comm;
    Result<RunReport> via = run_plan(f, o);
    ASSERT_TRUE(via.ok()) << via.status().message();
    ASSERT_EQ(plain->steps.size(), via->steps.size());
    for (size_t i = 0; i < plain->steps.size(); ++i) EXPECT_EQ(plain->steps[i].loss, via->steps[i].loss) << "kind " << kind;
    if (kind == pipeline || kind == interleaved) EXPECT_GT(mem->zero_n, 0) << "recv: the stand-in's zeros";
    else EXPECT_GT(mem->move_n, 0) << "kind " << kind;  // gathers, reduce-scatters, ring shifts, all-to-alls
  }
}

// A rank proxy's communicator that defers like a GPU's: while deferred, a reduce-scatter or
// all-gather poisons its output and happens only at fence(), reading its input then.
// defer false: a plain proxy (the reference). mirror_peer: a pipeline peer that is not
// silent -- a sendrecv receives what it sends, an f32 recv gets 1e-3 everywhere -- where
// the proxy's stand-in receives zeros.
class DeferringComm final : public Communicator {
 public:
  explicit DeferringComm(LocalCommunicator& c, bool defer = true, bool mirror_peer = false)
      : c_(c), defer_(defer), mirror_peer_(mirror_peer) {}
  int rank(Group g) const override { return c_.rank(g); }
  int size(Group g) const override { return c_.size(g); }
  bool modelled() const override { return c_.modelled(); }
  std::string name() const override { return "deferring"; }
  Status all_reduce_sum(void* buf, int64_t count, DType t, Group g) override { return c_.all_reduce_sum(buf, count, t, g); }
  Status reduce_scatter_sum(const void* in, void* out, int64_t count, DType t, Group g) override {
    if (!later(out, count, t)) return c_.reduce_scatter_sum(in, out, count, t, g);
    queued_.push_back([=, this] { return c_.reduce_scatter_sum(in, out, count, t, g); });
    return Status::ok();
  }
  Status all_gather(const void* in, void* out, int64_t count, DType t, Group g) override {
    if (!later(out, count * size(g), t)) return c_.all_gather(in, out, count, t, g);
    queued_.push_back([=, this] { return c_.all_gather(in, out, count, t, g); });
    return Status::ok();
  }
  Status broadcast(void* buf, int64_t count, DType t, int root, Group g) override { return c_.broadcast(buf, count, t, root, g); }
  // The model's MoE token exchange: never issued deferred (only DataParallel defers), so
  // completed at once.
  Status all_to_all(const void* in, void* out, int64_t count, DType t, Group g) override {
    return c_.all_to_all(in, out, count, t, g);
  }
  Status send(const void* buf, int64_t count, DType t, int peer, Group g, int tag) override { return c_.send(buf, count, t, peer, g, tag); }
  Status recv(void* buf, int64_t count, DType t, int peer, Group g, int tag) override {
    if (!mirror_peer_ || t != DType::f32) return c_.recv(buf, count, t, peer, g, tag);
    std::fill(static_cast<float*>(buf), static_cast<float*>(buf) + count, 1e-3f);
    return Status::ok();
  }
  Status sendrecv(const void* s, void* r, int64_t count, DType t, int peer, Group g, int st, int rt) override {
    if (!mirror_peer_) return c_.sendrecv(s, r, count, t, peer, g, st, rt);
    std::memcpy(r, s, static_cast<size_t>(count * dtype_size(t)));
    return Status::ok();
  }
  Status barrier(Group g) override { return c_.barrier(g); }
  bool can_defer() const override { return defer_; }
  void set_deferred(bool on) override { deferred_ = on; }
  Status fence() override {
    std::vector<std::function<Status()>> q = std::move(queued_);
    queued_.clear();
    for (auto& f : q)
      if (Status s = f(); !s) return s;
    return Status::ok();
  }
  int deferred_calls = 0;
  size_t queued() const { return queued_.size(); }

 private:
  // Whether to defer this call: then its f32 output (n) reads NaN until fence().
  bool later(void* out, int64_t n, DType t) {
    if (!deferred_ || t != DType::f32) return false;
    float* o = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) o[i] = std::numeric_limits<float>::quiet_NaN();
    ++deferred_calls;
    return true;
  }
  LocalCommunicator& c_;
  bool defer_ = true, mirror_peer_ = false;
  bool deferred_ = false;
  std::vector<std::function<Status()>> queued_;
};

// Expert parallel: rank proxies of MoE plans whose units mix dp_cp and edp parameters
// (dp4 ep2: edp of 2; dp2 ep2: edp of 1, the experts unsharded). Every ZeRO stage moves the
// expert parameters through the ops as well, bit for bit as the CPU's host loops, and a
// deferring communicator gives the same bits (each unit's dp_cp collectives are finished
// before its edp ones start; only the last may stay in flight).
TEST(BucketOps, ExpertParallelMovesThroughTheOpsAndDefers) {
  for (const auto& [dp, ep] : {std::pair{4, 2}, std::pair{2, 2}}) {
    for (int zero = 0; zero <= 3; ++zero) {
      PlanFile f = testing::tiny_plan(Family::llama, Precision::bf16, Recompute::none, true);
      f.model = testing::tiny_moe_model(Family::llama, kByteVocab);
      f.plan.dp = dp;
      f.plan.ep = ep;
      f.plan.grad_accum = 2;
      f.job.global_batch = 16 * dp;
      f.plan.zero = zero;
      const std::string what = "dp" + std::to_string(dp) + " ep" + std::to_string(ep) + " ZeRO-" + std::to_string(zero);
      LocalCommunicator local(f.plan, dp - 1);
      RunOptions o;
      o.steps = 2;
      o.warmup = 0;
      o.bucket_bytes = 4096;  // several buckets per unit and group
      o.comm = &local;
      int64_t expert_params = 0;
      o.on_done = [&](Model& m) {
        for (const ParamRef& p : m.params()) expert_params += p.expert;
      };
      Result<RunReport> plain = run_plan(f, o);
      ASSERT_TRUE(plain.ok()) << what << ": " << plain.status().message();
      EXPECT_GT(expert_params, 0) << what;
      o.on_done = nullptr;
      CountingBackend counted;
      o.device_backend = &counted;
      Result<RunReport> via = run_plan(f, o);
      ASSERT_TRUE(via.ok()) << what << ": " << via.status().message();
      o.device_backend = nullptr;
      DeferringComm deferring(local);
      o.comm = &deferring;
      Result<RunReport> deferred = run_plan(f, o);
      ASSERT_TRUE(deferred.ok()) << what << ": " << deferred.status().message();
      ASSERT_EQ(plain->steps.size(), via->steps.size());
      ASSERT_EQ(plain->steps.size(), deferred->steps.size());
      for (size_t i = 0; i < plain->steps.size(); ++i) {
        EXPECT_EQ(plain->steps[i].loss, via->steps[i].loss) << what << " step " << i;
        EXPECT_EQ(plain->steps[i].loss, deferred->steps[i].loss) << what << " step " << i;
        EXPECT_EQ(plain->steps[i].grad_norm, deferred->steps[i].grad_norm) << what << " step " << i;
      }
      const CountingOps& c = counted.ops;
      EXPECT_GT(c.read_n, 0) << what;
      EXPECT_GT(c.write_n, 0) << what;
      if (zero >= 2) {
        EXPECT_GT(c.add_n, 0) << what;
      }
      EXPECT_EQ(deferring.queued(), 0u) << what;
      if (zero >= 1) {
        EXPECT_GT(deferring.deferred_calls, 0) << what;
      }
      std::printf("%s: zero %d, read %d, write %d, add %d, copy %d; %d deferred collectives\n", what.c_str(), c.zero_n, c.read_n,
                  c.write_n, c.add_n, c.copy_n, deferring.deferred_calls);
    }
  }
}

TEST(BucketOps, DeferredCollectivesAreFencedBeforeTheirBuffersAreTouched) {
  // Small buckets: several per unit (the non-last ones are completed at once); the default:
  // one per unit, so each unit's whole result is what stays in flight.
  for (int zero = 0; zero <= 3; ++zero) {
    for (const auto& [prec, bucket] : {std::pair{Precision::fp32, int64_t{4096}}, std::pair{Precision::bf16, int64_t{4096}},
                                       std::pair{Precision::fp32, int64_t{25} << 20}}) {
      PlanFile f = testing::tiny_plan(Family::gpt, prec, Recompute::none, true);
      f.plan.dp = 2;
      f.plan.grad_accum = 2;  // 2 micro-batches per rank: a deferred unit's result across them
      f.job.global_batch = 32;
      f.plan.zero = zero;
      LocalCommunicator local(f.plan, 0);
      RunOptions o;
      o.steps = 2;
      o.warmup = 0;
      o.bucket_bytes = bucket;
      o.comm = &local;
      Result<RunReport> plain = run_plan(f, o);
      ASSERT_TRUE(plain.ok()) << plain.status().message();
      DeferringComm deferring(local);
      o.comm = &deferring;
      Result<RunReport> via = run_plan(f, o);
      ASSERT_TRUE(via.ok()) << via.status().message();
      const std::string what = "ZeRO-" + std::to_string(zero) + " " + (prec == Precision::fp32 ? "fp32" : "bf16") +
                               " bucket " + std::to_string(bucket);
      ASSERT_EQ(plain->steps.size(), via->steps.size());
      for (size_t i = 0; i < plain->steps.size(); ++i) {
        EXPECT_EQ(plain->steps[i].loss, via->steps[i].loss) << what << " step " << i;
        EXPECT_EQ(plain->steps[i].grad_norm, via->steps[i].grad_norm) << what << " step " << i;
      }
      EXPECT_EQ(deferring.queued(), 0u) << what;  // nothing left in flight after the run
      // Every DataParallel collective is issued deferred (those it needs at once it fences
      // at once); the fake defers reduce-scatters and all-gathers, ZeRO >= 1's.
      if (zero >= 1) {
        EXPECT_GT(deferring.deferred_calls, 0) << what;
      }
      std::printf("%s: %d deferred collectives\n", what.c_str(), deferring.deferred_calls);
    }
  }
}

// The pipeline's tied-embedding sum reads the embedding's gradient partition (ZeRO 2, 3),
// which the last unit's deferred reduce-scatter (NCCL) completes only at a fence: the runner
// completes it first. With a peer that sends back the same gradient, a deferring proxy of
// the first stage of a GPT dp2 pp2 run trains the token embedding to the bits of a plain
// one (the first stage has no loss to compare: its weights are compared; fp32 and SGD, so
// that any difference in the gradient shows in them: AdamW's first step moves by the sign).
TEST(BucketOps, TiedEmbeddingSumReadsCompletedPartitions) {
  for (int zero = 2; zero <= 3; ++zero) {
    PlanFile f = testing::tiny_plan(Family::gpt, Precision::fp32, Recompute::none, true);
    ASSERT_TRUE(f.model.tied_embeddings);
    f.job.optimizer = Optimizer::sgd_momentum;
    f.plan.dp = 2;
    f.plan.pp = 2;
    f.plan.zero = zero;
    f.plan.grad_accum = 2;
    f.job.global_batch = 32;
    LocalCommunicator local(f.plan, 1);  // dp rank 1 of the first stage
    RunOptions o;
    o.steps = 2;
    o.warmup = 0;
    std::vector<float> embedding[2];
    int run = 0;
    o.on_done = [&](Model& m) {
      for (ParamRef& p : m.params())
        if (p.name == "embed.tokens") {
          embedding[run].resize(static_cast<size_t>(p.weight->numel()));
          read_f32(*p.weight, 0, embedding[run].data(), p.weight->numel());
        }
    };
    DeferringComm plain_comm(local, false, true), deferring(local, true, true);
    o.comm = &plain_comm;
    Result<RunReport> plain = run_plan(f, o);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    run = 1;
    o.comm = &deferring;
    Result<RunReport> deferred = run_plan(f, o);
    ASSERT_TRUE(deferred.ok()) << deferred.status().message();
    EXPECT_GT(deferring.deferred_calls, 0) << "ZeRO-" << zero;
    ASSERT_FALSE(embedding[0].empty());
    EXPECT_EQ(embedding[0], embedding[1]) << "ZeRO-" << zero;
  }
}

}  // namespace
}  // namespace llmplan::exec
