// The data-parallel buckets move memory only through the backend's BucketOps (the CUDA
// backend's are kernels, comm/bucket_ops.h): a backend whose ops count and forward to the
// host loops runs rank proxies of dp2 plans (ZeRO 0-3) bit for bit as the plain CPU
// backend does, and every kind of movement the ZeRO stage needs went through the ops.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "executor/backend.h"
#include "executor/comm/bucket_ops.h"
#include "executor/comm/communicator.h"
#include "executor/runner.h"
#include "tiny_plans.h"

namespace llmplan::exec {
namespace {

struct CountingOps final : BucketOps {
  HostBucketOps host;
  int zero_n = 0, read_n = 0, write_n = 0, add_n = 0, copy_n = 0;
  Status zero(void* p, int64_t bytes) override { return ++zero_n, host.zero(p, bytes); }
  Status read_f32(const Tensor& t, int64_t off, float* out, int64_t n) override { return ++read_n, host.read_f32(t, off, out, n); }
  Status write_f32(const float* in, Tensor& t, int64_t off, int64_t n) override { return ++write_n, host.write_f32(in, t, off, n); }
  Status add_f32(const float* in, Tensor& t, int64_t off, int64_t n) override { return ++add_n, host.add_f32(in, t, off, n); }
  Status copy(void* dst, const void* src, int64_t bytes) override { return ++copy_n, host.copy(dst, src, bytes); }
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

TEST(BucketOps, DataParallelMovesMemoryOnlyThroughTheBackendsOps) {
  for (int zero = 0; zero <= 3; ++zero) {
    PlanFile f = testing::tiny_plan(Family::gpt, Precision::bf16, Recompute::none, true);
    f.plan.dp = 2;
    f.plan.grad_accum = 1;
    f.plan.zero = zero;
    LocalCommunicator comm(f.plan, 1);
    RunOptions o;
    o.steps = 2;
    o.warmup = 0;
    o.comm = &comm;
    Result<RunReport> plain = run_plan(f, o);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    CountingBackend counted;
    o.device_backend = &counted;
    Result<RunReport> via = run_plan(f, o);
    ASSERT_TRUE(via.ok()) << via.status().message();
    ASSERT_EQ(plain->steps.size(), via->steps.size());
    for (size_t i = 0; i < plain->steps.size(); ++i) EXPECT_EQ(plain->steps[i].loss, via->steps[i].loss) << "ZeRO-" << zero;
    const CountingOps& c = counted.ops;
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

}  // namespace
}  // namespace llmplan::exec
