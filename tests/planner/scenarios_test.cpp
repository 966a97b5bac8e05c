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

// The 2024-26 presets against the totals their publishers print (model cards, papers), to
// the precision printed: the recipe (count_params) must reproduce every one of them, and
// the active parameters of the MoE models.
TEST(Presets, ParamCountsOfThe2024To2026ModelsMatchTheirCards) {
  const PresetRegistry reg = presets();
  struct Published {
    const char* id;
    double total, active, precision;  // parameters; active 0 = dense; precision: +- of the printed figure's last digit
    const char* where;
  };
  const Published published[] = {
      {"llama3.1-8b", 8030261248, 0, 0.5, "HF meta-llama/Llama-3.1-8B safetensors"},
      {"llama3.1-70b", 70553706496, 0, 0.5, "HF meta-llama/Llama-3.1-70B safetensors"},
      {"llama3.1-405b", 405853388800, 0, 0.5, "HF meta-llama/Llama-3.1-405B safetensors"},
      {"llama3.3-70b", 70553706496, 0, 0.5, "HF meta-llama/Llama-3.3-70B-Instruct safetensors"},
      {"qwen2-7b", 7615616512, 0, 0.5, "HF Qwen/Qwen2-7B safetensors (with the q/k/v biases)"},
      {"qwen2.5-7b", 7615616512, 0, 0.5, "HF Qwen/Qwen2.5-7B safetensors (the card rounds it to 7.61B)"},
      {"qwen2.5-72b", 72.7e9, 0, 0.05e9, "Qwen2.5-72B model card: 72.7B"},
      {"qwen3-8b", 8.2e9, 0, 0.05e9, "Qwen3-8B model card: 8.2B"},
      {"qwen3-32b", 32.8e9, 0, 0.05e9, "Qwen3-32B model card: 32.8B"},
      // The Qwen cards round some figures and cut others to the printed digit (7.61B for
      // 7,615,616,512): one unit of the last digit either way.
      {"qwen3-30b-a3b", 30.5e9, 3.3e9, 0.1e9, "Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"},
      {"qwen3-235b-a22b", 235e9, 22e9, 0.5e9, "Qwen3-235B-A22B model card: 235B total, 22B activated"},
      {"mixtral-8x22b", 141e9, 39e9, 0.5e9, "Mistral AI announcement: 141B parameters, 39B active"},
  };
  for (const Published& p : published) {
    SCOPED_TRACE(std::string(p.id) + " vs " + p.where);
    const Result<ModelSpec> m = reg.model(p.id);
    ASSERT_TRUE(m.ok()) << m.status().message();
    const ParamCounts pc = count_params(*m, 1, 1, 1, 0, 0);
    EXPECT_NEAR(pc.total, p.total, p.precision);
    if (p.active > 0) {
      EXPECT_NEAR(pc.active_per_token, p.active, p.precision);
    }
  }
  // The non-embedding counts the Qwen3 cards print beside the totals (6.95B, 31.2B, 29.9B):
  // the q/k norms and head_dim-wide queries are in them, the two vocabulary matrices are not.
  for (auto [id, non_embedding] : {std::pair{"qwen3-8b", 6.95e9}, std::pair{"qwen3-32b", 31.2e9}, std::pair{"qwen3-30b-a3b", 29.9e9}}) {
    const ModelSpec m = *reg.model(id);
    const ParamCounts pc = count_params(m, 1, 1, 1, 0, 0);
    EXPECT_NEAR(pc.total - pc.embedding - static_cast<double>(m.vocab) * m.hidden, non_embedding, 0.05e9) << id;
  }
}

// Qwen3's per-head RMSNorms and Qwen2's q/k/v biases, by hand for one layer of Qwen3-8B and
// Qwen2-7B: 2 x head_dim norm weights; q + 2 kv bias elements, split by TP with their GEMMs.
TEST(Presets, QkNormAndAttentionBiasParameters) {
  const PresetRegistry reg = presets();
  ModelSpec q3 = *reg.model("qwen3-8b");
  const double with_norm = count_params(q3, 1, 1, 1, 0, 0).per_layer;
  q3.qk_norm = false;
  EXPECT_DOUBLE_EQ(with_norm - count_params(q3, 1, 1, 1, 0, 0).per_layer, 2 * 128);
  ModelSpec q2 = *reg.model("qwen2-7b");
  const double biased = count_params(q2, 2, 1, 1, 0, 0).per_layer_rank;
  q2.attention_bias = AttentionBias::none;
  EXPECT_DOUBLE_EQ(biased - count_params(q2, 2, 1, 1, 0, 0).per_layer_rank, (3584 + 2 * 512) / 2.0);
  q2.attention_bias = AttentionBias::all;  // and o's bias, replicated under TP
  EXPECT_DOUBLE_EQ(count_params(q2, 2, 1, 1, 0, 0).per_layer_rank - biased, 3584);
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
