// The caching-allocator replay (planner/cost/caching_allocator.h) on sequences whose
// reserved and allocated peaks are worked out by hand, the torchtitan loss sequences
// derived from its source, and the stack conventions it feeds: the loss's reserved
// surplus and ZeRO-3 under PP with the stage gathered and fp32 gradients unsharded.
#include "planner/cost/caching_allocator.h"

#include <gtest/gtest.h>

#include "planner/cost/memory_model.h"
#include "planner/cost/stack_profile.h"
#include "planner/cost/time_model.h"
#include "planner/spec/recipe.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

AllocatorPeaks replay(const std::vector<std::string>& text) {
  Result<std::vector<AllocatorOp>> ops = parse_allocator_ops(text, "ops");
  EXPECT_TRUE(ops) << ops.status().message();
  return ops ? replay_caching_allocator(*ops) : AllocatorPeaks{};
}

TEST(CachingAllocator, ReusesFreedBlocksThatHoldTheRequestAndNoOthers) {
  // Equal sizes: every request reuses the freed block; nothing beyond the allocated peak.
  AllocatorPeaks p = replay({"+a 4", "-a", "+b 4", "-b", "+c 4"});
  EXPECT_DOUBLE_EQ(p.allocated, 4);
  EXPECT_DOUBLE_EQ(p.reserved, 4);
  // A larger request after a free cannot use the smaller block: 2 + 4 reserved, 4 allocated.
  p = replay({"+a 2", "-a", "+b 4"});
  EXPECT_DOUBLE_EQ(p.allocated, 4);
  EXPECT_DOUBLE_EQ(p.reserved, 6);
  // A smaller request splits a freed block; the rest serves the next one.
  p = replay({"+a 4", "-a", "+b 1", "+c 3"});
  EXPECT_DOUBLE_EQ(p.allocated, 4);
  EXPECT_DOUBLE_EQ(p.reserved, 4);
  // Best fit: the 3 goes to the free 3, not the free 5, so the 5 still holds the next 5.
  p = replay({"+a 5", "+b 3", "-a", "-b", "+c 3", "+d 5"});
  EXPECT_DOUBLE_EQ(p.reserved, 8);
  // Split pieces merge back when both are free: the whole 4 holds a 4 again.
  p = replay({"+a 4", "-a", "+b 2", "+c 2", "-b", "-c", "+d 4"});
  EXPECT_DOUBLE_EQ(p.reserved, 4);
  // Blocks of different segments never merge: two freed 2s do not hold a 4.
  p = replay({"+a 2", "+b 2", "-a", "-b", "+c 4"});
  EXPECT_DOUBLE_EQ(p.reserved, 8);
}

TEST(CachingAllocator, BadOpsNameTheField) {
  for (const auto& [ops, what] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"+a"}, "expected a positive size"},
           {{"+a -2"}, "expected a positive size"},
           {{"-a"}, "freed but not live"},
           {{"+a 1", "+a 1"}, "allocated again while live"},
           {{"a 1"}, "expected \"+NAME SIZE\""},
           {{"+a 1 2"}, "unexpected '2'"}}) {
    Result<std::vector<AllocatorOp>> r = parse_allocator_ops(ops, "memory.loss_ops");
    ASSERT_FALSE(r) << ops.front();
    EXPECT_NE(r.status().message().find("memory.loss_ops["), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  }
}

// torchtitan's loss, as its stack file gives it. Hand derivation, in bytes per logit:
// without TP, forward holds the bf16 logits (2), their fp32 upcast (4) and log_softmax's
// output (4); the step deletes the logits and the upcast is not saved; backward allocates
// nll's gradient (4, into the upcast's freed block) and log_softmax_backward's (4: the
// logits' freed 2 cannot hold it, a new block) beside the saved output: 12 allocated, 14
// reserved. Under TP's loss_parallel, forward holds logits, upcast, shifted and exp (14),
// backward the saved output with zeros_like, exp(x) and their sum (16), the sum needing a
// new block: 18 reserved.
TEST(CachingAllocator, TorchtitanLossKeepsTwoBytesPerLogitReservedBeyondItsPeak) {
  const StackProfile tt = *testing::shipped_presets().stack("torchtitan");
  EXPECT_DOUBLE_EQ(tt.loss_bytes_per_logit, 12);
  EXPECT_DOUBLE_EQ(tt.loss_cached_bytes_per_logit, 2);
  EXPECT_DOUBLE_EQ(tt.loss_bytes_per_logit_tp, 16);
  EXPECT_DOUBLE_EQ(tt.loss_cached_bytes_per_logit_tp, 2);
}

// ZeRO-3 under PP as torchtitan runs it (MemoryOptions::zero3_pp_unsharded): Llama 3 8B on
// pp 2, stage 0 holds 16 layers of 218,112,000 parameters (attention 4096 x (4096 + 2 x
// 1024) + 4096 x 4096, SwiGLU 3 x 4096 x 14336, two norms of 4096) and the 128,256 x 4096
// embedding, gathered in bf16; its gradients add the same count in fp32 to the sharded
// ones; and the gathers run once per step, not per micro-batch.
TEST(CachingAllocator, PipelinedZero3KeepsTheStageGatheredAndItsGradientsUnsharded) {
  const PresetRegistry& reg = testing::shipped_presets();
  const ModelSpec m = *reg.model("llama3-8b");
  const ClusterSpec c = cluster_with_gpus(*reg.cluster_for_gpu("h100-sxm"), 16);
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 8, p.pp = 2, p.zero = 3, p.micro_batch = 1, p.grad_accum = 8, p.recompute = Recompute::full;
  const StackProfile tt = *reg.stack("torchtitan");
  MemoryOptions off = stack_memory_options(tt, {});
  off.zero3_pp_unsharded = false;
  const MemoryOptions on = stack_memory_options(tt, {});
  ASSERT_TRUE(on.zero3_pp_unsharded);
  const MemoryReport a = estimate_memory(m, c, stack_job(tt, j), p, off), b = estimate_memory(m, c, stack_job(tt, j), p, on);
  const double stage0 = 16.0 * 218112000 + 128256.0 * 4096;
  const int gathered = static_cast<int>(MemoryItem::gathered_params), grads = static_cast<int>(MemoryItem::gradients);
  EXPECT_DOUBLE_EQ(b.first.bytes[gathered], stage0 * 2);
  // The sharded states as ZeRO-3 keeps them, plus the unsharded fp32 accumulators (no unit's
  // transient gradient beside them).
  const TrainingJob jt = stack_job(tt, j);
  const ModelStateBytes sharded = stage_state_bytes(m, jt, p, count_params(m, p.tp, p.pp, p.ep, 0, 0), 0);
  EXPECT_DOUBLE_EQ(b.first.bytes[grads], sharded.gradients + stage0 * 4);
  EXPECT_GT(a.first.bytes[grads], sharded.gradients);  // there, the largest unit's transient gradient
  // Time: the per-micro-batch gathers of ZeRO-3 become one per step.
  const Efficiency e = tt.efficiency;
  Efficiency per_mb = e;
  per_mb.zero3_pp_gather_once = 0;
  EXPECT_LT(estimate_time(m, c, j, p, e).dp_comm, estimate_time(m, c, j, p, per_mb).dp_comm);
  // Without PP nothing changes.
  p.pp = 1, p.dp = 16, p.grad_accum = 4;
  EXPECT_DOUBLE_EQ(estimate_memory(m, c, stack_job(tt, j), p, off).worst.total, estimate_memory(m, c, stack_job(tt, j), p, on).worst.total);
}

}  // namespace
}  // namespace llmplan
