#include "launch/launch.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

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

// The formats write GPT and Llama blocks: a model with latent attention, windows, sinks,
// post-norms, multi-token prediction or mixed layers is refused by every format rather than
// exported as another model.
TEST(LaunchFormat, RefusesTheBlocksNoFormatWrites) {
  const testing::NamedPlan np = testing::round_trip_plans()[0];
  for (int k = 0; k < 4; ++k) {
    PlanFile f = np.file;
    if (k == 0) f.model.mla = {0, 64, 64, 32, 64};
    if (k == 1) f.model.sliding_window = 4096, f.model.global_attention_every = 2;
    if (k == 2) f.model.attention_sinks = true;
    if (k == 3) f.model.mtp_layers = 1;
    for (LaunchFormat to : {LaunchFormat::megatron, LaunchFormat::nemo, LaunchFormat::deepspeed, LaunchFormat::torchtitan, LaunchFormat::mindformers}) {
      Result<ExportResult> ex = export_plan(f, to);
      ASSERT_FALSE(ex) << k << " " << to_string(to);
      EXPECT_EQ(ex.status().exit_code(), 2);
      EXPECT_NE(ex.status().message().find("which llmplan's launch formats do not write yet"), std::string::npos) << ex.status().message();
    }
  }
}

}  // namespace
}  // namespace llmplan

namespace llmplan {
namespace {

// The seeds of fuzz_launch_config (tests/fuzz/launch_config/: the first byte picks the
// format, the rest is the file), through the same reader in every build: each is refused
// as bad input naming the file, or read as a legal plan.
TEST(LaunchFuzzSeeds, EachIsABadInputOrALegalPlan) {
  namespace fs = std::filesystem;
  const fs::path corpus = fs::path(LLMPLAN_SOURCE_ROOT) / "tests/fuzz/launch_config";
  const char* names[] = {"launch.sh", "nemo_overrides.sh", "ds_config.json", "train.toml", "config.yaml"};
  const fs::path dir = fs::temp_directory_path() / ("llmplan-launch-seeds-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int seeds = 0, accepted = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(corpus)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(bytes.empty()) << e.path();
    const int kind = static_cast<unsigned char>(bytes[0]) % 5;
    const fs::path file = dir / names[kind];
    std::ofstream(file, std::ios::binary) << bytes.substr(1);
    ++seeds;
    Result<std::vector<LaunchFile>> files = read_launch_files(file.string());
    ASSERT_TRUE(files) << files.status().message();
    ImportOptions opt;
    opt.presets = &testing::shipped_presets();
    opt.model = kind == 2 ? "llama3-8b" : "";
    Result<ImportedConfig> imp = import_files(*files, static_cast<LaunchFormat>(kind), opt, file.string());
    if (!imp) {
      EXPECT_EQ(imp.status().exit_code(), 2) << e.path() << ": " << imp.status().message();
      EXPECT_NE(imp.status().message().find(file.string()), std::string::npos) << imp.status().message();
      continue;
    }
    ++accepted;
    const PlanFile& f = imp->file;
    EXPECT_EQ(check_plan(f.model, f.cluster, f.job, f.plan, f.gpus), RejectReason::none) << e.path();
  }
  fs::remove_all(dir);
  EXPECT_GE(seeds, 11);
  EXPECT_GE(accepted, 8);  // the published configurations
}

}  // namespace
}  // namespace llmplan
