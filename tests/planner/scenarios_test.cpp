// Scenario checks from the field report in DESIGN.md and the issue, on the shipped presets.
#include <gtest/gtest.h>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/io/presets.h"
#include "planner/spec/recipe.h"
#include "planner/spec/units.h"

namespace llmplan {
namespace {

PresetRegistry presets() {
  Result<PresetRegistry> r = PresetRegistry::load(LLMPLAN_SOURCE_ROOT);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

// Field report: 7B in full mixed-precision AdamW training needs ~16 bytes/param of
// model states (> 112 GB) and cannot fit on one 80 GB card without sharding.
// Mistral-7B (7.24B parameters) is the 7B model here; llama2-7b has 6.74B.
TEST(FieldReport, SevenBFullTrainingDoesNotFitOnOneCard) {
  const PresetRegistry reg = presets();
  const ModelSpec m = *reg.model("mistral-7b");
  ClusterSpec c = *reg.cluster_for_gpu("a100-80g");
  c.gpus_per_node = 1;
  TrainingJob j;
  j.seq_len = 2048;
  j.global_batch = 8;
  ParallelPlan p;
  p.micro_batch = 1;
  p.recompute = Recompute::full;
  ASSERT_EQ(check_plan(m, c, j, p, 1), RejectReason::none);
  const MemoryReport r = estimate_memory(m, c, j, p);
  EXPECT_NEAR(r.worst.model_states(), 16 * count_params(m, 1, 1, 1, 0, 0).total, 1.0);  // ZeRO paper: 16 B/param
  EXPECT_GT(r.worst.model_states(), 112e9);
  EXPECT_FALSE(r.fits(0));
}

// Field report: 7B LoRA (r = 8 on q/v) with bf16 base weights, recompute, micro-batch 2,
// seq 2048 fits on a 64 GB card (Ascend 910B), on 8 data-parallel cards.
TEST(FieldReport, SevenBLoraFitsOn64GB) {
  const PresetRegistry reg = presets();
  const ModelSpec m = *reg.model("llama2-7b");
  const ClusterSpec c = reg.cluster("ascend-910b-server")->cluster;
  EXPECT_NEAR(c.gpu.memory_bytes / kGiB, 64, 1);
  TrainingJob j;
  j.mode = TrainMode::lora;
  j.lora.rank = 8;
  j.lora.targets = {"q", "v"};
  j.precision = Precision::bf16;
  j.amp = AmpLevel::O2;
  j.seq_len = 2048;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 8;
  p.micro_batch = 2;
  p.recompute = Recompute::full;
  p.grad_accum = 4;
  ASSERT_EQ(check_plan(m, c, j, p, 8), RejectReason::none);
  const MemoryReport r = estimate_memory(m, c, j, p);
  EXPECT_TRUE(r.fits(0)) << r.worst.total / kGiB << " GiB";
  // LoRA keeps no optimizer state for the 6.7B base weights: adapters are ~4M params.
  EXPECT_LT(r.worst.bytes[static_cast<int>(MemoryItem::optimizer_states)], 0.1 * kGiB);
}

TEST(Presets, ParamCountsMatchPublishedSizes) {
  const PresetRegistry reg = presets();
  // Hugging Face parameter counts of the released checkpoints.
  EXPECT_DOUBLE_EQ(count_params(*reg.model("gpt2-124m"), 1, 1, 1, 0, 0).total, 124439808);
  EXPECT_DOUBLE_EQ(count_params(*reg.model("llama2-7b"), 1, 1, 1, 0, 0).total, 6738415616);
  EXPECT_DOUBLE_EQ(count_params(*reg.model("llama2-70b"), 1, 1, 1, 0, 0).total, 68976648192);
  EXPECT_DOUBLE_EQ(count_params(*reg.model("llama3-8b"), 1, 1, 1, 0, 0).total, 8030261248);
  // Mixtral 8x7B: 46.7B total, 12.9B active per token (Jiang et al. 2024).
  const ParamCounts mx = count_params(*reg.model("mixtral-8x7b"), 1, 1, 1, 0, 0);
  EXPECT_NEAR(mx.total / 1e9, 46.7, 0.05);
  EXPECT_NEAR(mx.active_per_token / 1e9, 12.9, 0.05);
}

TEST(Presets, AtLeastSixteenModelsAndTheRequiredHardware) {
  const PresetRegistry reg = presets();
  EXPECT_GE(reg.model_ids().size(), 16u);
  for (const char* g : {"v100-32g", "a100-40g", "a100-80g", "h100-sxm", "h200", "l40s", "rtx-4090", "mi250x", "mi300x", "ascend-910b"})
    EXPECT_TRUE(reg.gpu(g).ok()) << g;
  for (const char* c : {"dgx-a100", "dgx-h100", "pcie-a100", "ascend-910b-server"}) EXPECT_TRUE(reg.cluster(c).ok()) << c;
}

TEST(Presets, NearestModelToSevenBIsLlama2) {
  const PresetRegistry reg = presets();
  EXPECT_EQ(reg.nearest_model(7e9, "").value().name, "llama2-7b");
  EXPECT_EQ(reg.nearest_model(69e9, "").value().name, "llama2-70b");
  EXPECT_EQ(reg.nearest_model(125e6, "gpt2").value().name, "gpt2-124m");
}

TEST(Presets, DuplicateModelIdIsAnErrorNamingBothFiles) {
  PresetRegistry reg = presets();
  ModelSpec m = *reg.model("llama2-7b");
  const Status s = reg.add_model(m, "/tmp/other/llama2-7b.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.exit_code(), 2);
  EXPECT_NE(s.message().find("models/llama2-7b.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/tmp/other/llama2-7b.json"), std::string::npos) << s.message();
}

TEST(Presets, HuggingFaceConfigLoadsLikeThePreset) {
  const PresetRegistry reg = presets();
  const Result<ModelSpec> hf = reg.resolve_model(std::string(LLMPLAN_SOURCE_ROOT) + "/examples/hf/llama2-7b-config.json", "--model");
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  EXPECT_EQ(count_params(*hf, 1, 1, 1, 0, 0).total, count_params(*reg.model("llama2-7b"), 1, 1, 1, 0, 0).total);
  EXPECT_EQ(hf->family, Family::llama);
  const Result<ModelSpec> gpt2 = reg.resolve_model(std::string(LLMPLAN_SOURCE_ROOT) + "/examples/hf/gpt2-config.json", "--model");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().message();
  EXPECT_EQ(count_params(*gpt2, 1, 1, 1, 0, 0).total, 124439808);
}

TEST(Units, ParseCountsAndBytes) {
  EXPECT_DOUBLE_EQ(*parse_count("7B", "x"), 7e9);
  EXPECT_DOUBLE_EQ(*parse_count("1.3e9", "x"), 1.3e9);
  EXPECT_DOUBLE_EQ(*parse_count("350M", "x"), 350e6);
  EXPECT_DOUBLE_EQ(*parse_count("1T", "x"), 1e12);
  EXPECT_FALSE(parse_count("-7B", "x").ok());
  EXPECT_FALSE(parse_count("7Q", "x").ok());
  EXPECT_FALSE(parse_count("nan", "x").ok());
  EXPECT_DOUBLE_EQ(*parse_bytes("4GiB", "x"), 4 * kGiB);
  EXPECT_DOUBLE_EQ(*parse_bytes("80GB", "x"), 80e9);
  EXPECT_FALSE(parse_bytes("4 parsecs", "x").ok());
}

}  // namespace
}  // namespace llmplan
