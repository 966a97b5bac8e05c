// TrackingAllocator and Tensor accounting: live and peak bytes per category and per phase
// equal the sums of the requested bytes of a scripted sequence; over-limit requests fail
// with an OOM status naming phase and category; storage is freed by RAII.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "executor/allocator.h"
#include "executor/tensor.h"

namespace llmplan::exec {
namespace {

int idx(Category c) { return static_cast<int>(c); }
int idx(Phase p) { return static_cast<int>(p); }

Block must(Result<Block> r) {
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

TEST(Allocator, ScriptedSequenceIsCountedToTheByte) {
  CpuAllocator alloc;
  alloc.set_phase(Phase::forward);
  Block w = must(alloc.allocate(1000, Category::weights));
  Block act = must(alloc.allocate(333, Category::activations));
  alloc.set_phase(Phase::backward);
  Block g = must(alloc.allocate(77, Category::gradients));  // overall peak: 1000 + 333 + 77
  act.reset();
  Block ws = must(alloc.allocate(200, Category::workspace));
  alloc.set_phase(Phase::optimizer);  // entered with 1000 + 77 + 200 live
  g.reset();
  Block opt = must(alloc.allocate(64, Category::optimizer_states));

  const MemoryStats& st = alloc.stats();
  EXPECT_EQ(st.live_total, 1000 + 200 + 64);
  EXPECT_EQ(st.live[idx(Category::weights)], 1000);
  EXPECT_EQ(st.live[idx(Category::workspace)], 200);
  EXPECT_EQ(st.live[idx(Category::optimizer_states)], 64);
  EXPECT_EQ(st.live[idx(Category::activations)], 0);
  EXPECT_EQ(st.live[idx(Category::gradients)], 0);

  EXPECT_EQ(st.peak_total, 1000 + 333 + 77);
  EXPECT_EQ(st.peak_phase, Phase::backward);
  CategoryBytes at_peak{};
  at_peak[idx(Category::weights)] = 1000;
  at_peak[idx(Category::activations)] = 333;
  at_peak[idx(Category::gradients)] = 77;
  EXPECT_EQ(st.at_peak, at_peak);

  CategoryBytes own_peak{};
  own_peak[idx(Category::weights)] = 1000;
  own_peak[idx(Category::activations)] = 333;
  own_peak[idx(Category::gradients)] = 77;
  own_peak[idx(Category::workspace)] = 200;
  own_peak[idx(Category::optimizer_states)] = 64;
  EXPECT_EQ(st.peak, own_peak);

  const PhasePeak& fwd = st.phase[idx(Phase::forward)];
  EXPECT_TRUE(fwd.seen);
  EXPECT_EQ(fwd.total, 1000 + 333);
  EXPECT_EQ(fwd.at_peak[idx(Category::activations)], 333);
  const PhasePeak& bwd = st.phase[idx(Phase::backward)];
  EXPECT_EQ(bwd.total, 1000 + 333 + 77);
  EXPECT_EQ(bwd.at_peak, at_peak);
  const PhasePeak& optp = st.phase[idx(Phase::optimizer)];
  EXPECT_EQ(optp.total, 1000 + 77 + 200);  // what was live on entry
  EXPECT_EQ(optp.at_peak[idx(Category::gradients)], 77);
  EXPECT_EQ(optp.at_peak[idx(Category::workspace)], 200);
  EXPECT_EQ(optp.at_peak[idx(Category::optimizer_states)], 0);
  EXPECT_EQ(st.allocations, 5);
  EXPECT_EQ(st.frees, 2);

  w.reset();
  ws.reset();
  opt.reset();
  EXPECT_EQ(alloc.stats().live_total, 0);
  EXPECT_EQ(alloc.stats().peak_total, 1000 + 333 + 77);
}

TEST(Allocator, MemoryIsAlignedAndWritable) {
  CpuAllocator alloc;
  for (int64_t bytes : {1, 3, 63, 64, 65, 4097}) {
    Block b = must(alloc.allocate(bytes, Category::workspace));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    std::memset(b.data(), 0xAB, static_cast<size_t>(bytes));
    EXPECT_EQ(alloc.stats().live_total, bytes);  // exact, not rounded to 64
  }
  Block zero = must(alloc.allocate(0, Category::workspace));
  EXPECT_EQ(zero.data(), nullptr);
  EXPECT_EQ(alloc.stats().live_total, 0);
}

TEST(Allocator, OverLimitFailsWithAnOomReport) {
  CpuAllocator alloc;
  alloc.set_limit(1500);
  alloc.set_phase(Phase::forward);
  Block w = must(alloc.allocate(1000, Category::weights));
  alloc.set_phase(Phase::backward);
  Block g = must(alloc.allocate(264, Category::gradients));
  const MemoryStats before = alloc.stats();

  Result<Block> r = alloc.allocate(300, Category::activations, "layer3.attn.probs");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::runtime);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("backward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("activations"), std::string::npos) << msg;
  EXPECT_NE(msg.find("300 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1264 bytes live"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1500"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer3.attn.probs"), std::string::npos) << msg;

  ASSERT_TRUE(alloc.last_oom().has_value());
  const OomReport& oom = *alloc.last_oom();
  EXPECT_EQ(oom.phase, Phase::backward);
  EXPECT_EQ(oom.category, Category::activations);
  EXPECT_EQ(oom.requested, 300);
  EXPECT_EQ(oom.live_total, 1264);
  EXPECT_EQ(oom.limit, 1500);
  EXPECT_EQ(oom.live[idx(Category::weights)], 1000);
  EXPECT_EQ(oom.live[idx(Category::gradients)], 264);

  // Nothing changed, and the limit itself is still reachable.
  EXPECT_EQ(alloc.stats().live_total, before.live_total);
  EXPECT_EQ(alloc.stats().peak_total, before.peak_total);
  EXPECT_EQ(alloc.stats().allocations, before.allocations);
  Block last = must(alloc.allocate(236, Category::activations));
  EXPECT_EQ(alloc.stats().live_total, 1500);
  EXPECT_FALSE(alloc.allocate(1, Category::workspace).ok());
}

TEST(Allocator, ResetPeaksRestartsFromLive) {
  CpuAllocator alloc;
  alloc.set_phase(Phase::forward);
  Block a = must(alloc.allocate(500, Category::activations));
  Block w = must(alloc.allocate(100, Category::weights));
  a.reset();
  alloc.reset_peaks();
  EXPECT_EQ(alloc.stats().peak_total, 100);
  EXPECT_EQ(alloc.stats().peak[idx(Category::activations)], 0);
  EXPECT_EQ(alloc.stats().phase[idx(Phase::forward)].total, 100);
  EXPECT_FALSE(alloc.stats().phase[idx(Phase::backward)].seen);
  alloc.set_phase(Phase::backward);
  Block g = must(alloc.allocate(40, Category::gradients));
  EXPECT_EQ(alloc.stats().peak_total, 140);
  EXPECT_EQ(alloc.stats().peak_phase, Phase::backward);
}

TEST(Allocator, BlocksMoveWithoutDoubleCounting) {
  CpuAllocator alloc;
  Block a = must(alloc.allocate(128, Category::weights));
  void* p = a.data();
  Block b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(alloc.stats().live_total, 128);
  Block c = must(alloc.allocate(8, Category::weights));
  c = std::move(b);  // frees c's 8 bytes
  EXPECT_EQ(alloc.stats().live_total, 128);
  EXPECT_EQ(alloc.stats().frees, 1);
}

TEST(Tensor, BytesAreNumelTimesDtypeSize) {
  CpuAllocator alloc;
  {
    Result<Tensor> t = Tensor::empty(alloc, {2, 3, 5}, DType::bf16, Category::activations, "x");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->numel(), 30);
    EXPECT_EQ(t->bytes(), 60);
    EXPECT_EQ(t->device(), Device::cpu);
    EXPECT_EQ(t->category(), Category::activations);
    EXPECT_EQ(alloc.stats().live[idx(Category::activations)], 60);

    Result<Tensor> m = Tensor::zeros(alloc, {7}, DType::u8, Category::activations, "mask");
    ASSERT_TRUE(m.ok());
    for (int i = 0; i < 7; ++i) EXPECT_EQ(m->data<uint8_t>()[i], 0);
    Tensor moved = std::move(*m);
    EXPECT_EQ(alloc.stats().live[idx(Category::activations)], 67);
    moved.reset();
    EXPECT_FALSE(moved.defined());
    EXPECT_EQ(alloc.stats().live[idx(Category::activations)], 60);

    EXPECT_TRUE(t->reshape({6, 5}).is_ok());
    EXPECT_EQ(t->dim(0), 6);
    EXPECT_FALSE(t->reshape({7, 5}).is_ok());
  }
  EXPECT_EQ(alloc.stats().live_total, 0);
  EXPECT_EQ(alloc.stats().peak_total, 67);
}

TEST(Tensor, OomNamesTheTensor) {
  CpuAllocator alloc;
  alloc.set_limit(1024);
  alloc.set_phase(Phase::forward);
  Result<Tensor> t = Tensor::empty(alloc, {16, 1024}, DType::f32, Category::logits_loss, "logits");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("logits"), std::string::npos);
  EXPECT_NE(t.status().message().find("65536 bytes of logits_loss"), std::string::npos)
      << t.status().message();
  EXPECT_EQ(alloc.stats().live_total, 0);
}

}  // namespace
}  // namespace llmplan::exec
