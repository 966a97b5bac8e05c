#include "launch/launch.h"

#include <gtest/gtest.h>

#include "tests/launch/round_trip_plans.h"

namespace llmplan {
namespace {

TEST(LaunchFormat, NamesRoundTrip) {
  for (const char* n : {"megatron", "nemo", "deepspeed", "torchtitan", "mindformers"}) {
    LaunchFormat f{};
    ASSERT_TRUE(parse_enum(n, &f)) << n;
    EXPECT_STREQ(to_string(f), n);
  }
  LaunchFormat f{};
  EXPECT_FALSE(parse_enum("megatron-lm", &f));
}

TEST(LaunchFormat, DetectsEachFormatFromItsFile) {
  auto detect = [](const std::string& name, const std::string& text) -> int {
    Result<LaunchFormat> r = detect_format({{name, text, false}}, name);
    return r ? static_cast<int>(*r) : -1;
  };
  EXPECT_EQ(detect("train.toml", "[job]\n"), static_cast<int>(LaunchFormat::torchtitan));
  EXPECT_EQ(detect("llama.yaml", "parallel_config:\n"), static_cast<int>(LaunchFormat::mindformers));
  EXPECT_EQ(detect("ds_config.json", "{\"zero_optimization\": {\"stage\": 1}}"), static_cast<int>(LaunchFormat::deepspeed));
  EXPECT_EQ(detect("run.sh", "torchrun pretrain_gpt.py --tensor-model-parallel-size 2"), static_cast<int>(LaunchFormat::megatron));
  EXPECT_EQ(detect("run.sh", "nemo llm pretrain --factory llama3_8b trainer.strategy.tensor_model_parallel_size=2"),
            static_cast<int>(LaunchFormat::nemo));
  EXPECT_EQ(detect("notes.txt", "hello"), -1);
}

// The round-trip matrix itself is legal (every plan passes check_plan), so that a format's
// failure to round-trip one is the format's fault.
TEST(RoundTripPlans, AreLegalAndCoverEveryDimension) {
  const std::vector<testing::NamedPlan> plans = testing::round_trip_plans();
  bool tp = false, pp = false, vpp = false, cp = false, ep = false, uneven = false, lora = false, fp8 = false;
  int zero_mask = 0;
  for (const testing::NamedPlan& np : plans) {
    const ParallelPlan& p = np.file.plan;
    tp |= p.tp > 1, pp |= p.pp > 1, vpp |= p.vpp > 1, cp |= p.cp > 1, ep |= p.ep > 1;
    uneven |= p.pipeline_split != PipelineSplit::even;
    lora |= np.file.job.mode == TrainMode::lora;
    fp8 |= np.file.job.fp8_linear();
    zero_mask |= 1 << p.zero;
  }
  EXPECT_TRUE(tp && pp && vpp && cp && ep && uneven && lora && fp8);
  EXPECT_EQ(zero_mask, 0xF);
}

}  // namespace
}  // namespace llmplan
