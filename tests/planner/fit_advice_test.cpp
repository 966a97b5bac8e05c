// advise_fit (planner/search/fit_advice.h): when no plan fits, the job changes after
// which one does, checked against sweeps of the changed jobs themselves.
#include <gtest/gtest.h>

#include "planner/search/fit_advice.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

using llmplan::testing::shipped_presets;

struct Job {
  ModelSpec m;
  ClusterSpec node;  // one whole node of the type
  TrainingJob j;
};

Job llama2_70b_on_a100(int64_t seq) {
  const PresetRegistry& reg = shipped_presets();
  Job x{*reg.model("llama2-70b"), reg.cluster("dgx-a100")->cluster, {}};
  x.j.seq_len = seq;
  x.j.global_batch = 64;
  return x;
}

bool some_plan_fits(const Job& x, const TrainingJob& j, int gpus) {
  SweepOptions opt;
  opt.top_k = 1;
  return !run_sweep(x.m, cluster_with_gpus(x.node, gpus), j, gpus, SweepSpace{}, opt).top.empty();
}

// Llama 3.1 405B pre-training on one A100 80GB (which no plan fits: with ZeRO-3 parameter
// offload its 6.5 TB of states overflow the node's host memory): the fewest GPUs is the
// first count of a scan over counts (within a node each count, then whole nodes) at which
// the sweep finds a plan.
TEST(FitAdvice, FewestGpusIsTheFirstCountAtWhichASweepFindsAPlan) {
  Job x = llama2_70b_on_a100(4096);
  x.m = *shipped_presets().model("llama3.1-405b");
  ASSERT_FALSE(some_plan_fits(x, x.j, 1));
  SweepOptions opt;
  FitAdviceOptions fo;
  fo.node_gpus = 8;
  fo.max_gpus = 64;
  const FitAdvice a = advise_fit(x.m, cluster_with_gpus(x.node, 1), x.j, 1, SweepSpace{}, opt, fo);
  int first = 0;
  for (int g = 2; g <= 64 && first == 0; g = g < 8 ? g + 1 : g + 8)
    if (some_plan_fits(x, x.j, g)) first = g;
  ASSERT_GT(first, 0);
  EXPECT_EQ(a.min_gpus, first);
  ASSERT_FALSE(a.changes.empty());
  EXPECT_EQ(a.changes.front().gpus, first);
  EXPECT_LE(a.changes.front().peak_bytes, x.node.gpu.memory_bytes);
}

// On 8 A100 40GB with 128K sequences: the longest sequence that fits is a multiple of 128 at
// which a plan fits, and 128 more does not.
TEST(FitAdvice, LongestSequenceFitsAnd128MoreDoesNot) {
  const PresetRegistry& reg = shipped_presets();
  Job x = llama2_70b_on_a100(131072);
  x.node = reg.cluster("dgx-a100-40g")->cluster;
  x.j.global_batch = 8;
  ASSERT_FALSE(some_plan_fits(x, x.j, 8));
  FitAdviceOptions fo;
  fo.max_gpus = 8;  // no GPU scan: the sequence alone
  const FitAdvice a = advise_fit(x.m, x.node, x.j, 8, SweepSpace{}, SweepOptions{}, fo);
  ASSERT_GT(a.max_seq, 0);
  EXPECT_EQ(a.max_seq % 128, 0);
  TrainingJob j = x.j;
  j.seq_len = a.max_seq;
  EXPECT_TRUE(some_plan_fits(x, j, 8));
  j.seq_len = a.max_seq + 128;
  EXPECT_FALSE(some_plan_fits(x, j, 8));
}

// Full fine-tuning of Llama 2 13B on one A100 40GB does not fit (16 bytes a parameter);
// LoRA does, and is offered with its plan.
TEST(FitAdvice, LoraIsOfferedWhereItFits) {
  const PresetRegistry& reg = shipped_presets();
  Job x{*reg.model("llama2-13b"), reg.cluster("dgx-a100-40g")->cluster, {}};
  set_job_mode(JobMode::finetune, &x.j);
  x.j.seq_len = 2048;
  x.j.global_batch = 8;
  const ClusterSpec one = cluster_with_gpus(x.node, 1);
  FitAdviceOptions fo;
  fo.node_gpus = 8;
  fo.max_gpus = 1;
  const FitAdvice a = advise_fit(x.m, one, x.j, 1, SweepSpace{}, SweepOptions{}, fo);
  const JobChange* lora = nullptr;
  for (const JobChange& c : a.changes)
    if (c.job.mode == TrainMode::lora) lora = &c;
  ASSERT_NE(lora, nullptr);
  EXPECT_FALSE(lora->job.qlora());  // LoRA fits, so QLoRA is not needed
  EXPECT_LE(lora->peak_bytes, one.gpu.memory_bytes);
}

}  // namespace
}  // namespace llmplan
