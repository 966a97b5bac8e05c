// read_json_file (planner/spec/spec_json.h), the one loader under plans, presets, stack
// profiles, reference runs and calibrations: hostile files are bad input naming the file,
// never a crash, an abort or a read that never ends.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "planner/calibrate/calibration.h"
#include "planner/io/plan_file.h"
#include "planner/io/presets.h"
#include "planner/spec/recipe.h"
#include "planner/spec/spec_json.h"

namespace llmplan {
namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string p = ::testing::TempDir() + "/llmplan_json_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

void expect_bad_input(const Status& s, const std::string& path, const std::string& what) {
  EXPECT_EQ(s.kind(), ErrorKind::bad_input) << s.message();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
}

TEST(JsonFile, DeepNestingIsRefusedNotAStackOverflow) {
  const std::string p = temp_file("deep.json", std::string(100000, '['));
  Result<nlohmann::json> j = read_json_file(p);
  ASSERT_FALSE(j);
  expect_bad_input(j.status(), p, "nested deeper than 64 levels");
  // The plan reader is on the same loader.
  Result<PlanFile> f = read_plan_file(p);
  ASSERT_FALSE(f);
  expect_bad_input(f.status(), p, "nested deeper");
}

TEST(JsonFile, NestingOurFormatsUseIsRead) {
  // 63 levels of arrays around a number: below the limit, parsed whole.
  const std::string p = temp_file("ok.json", std::string(63, '[') + "1" + std::string(63, ']'));
  Result<nlohmann::json> j = read_json_file(p);
  ASSERT_TRUE(j) << j.status().message();
  const nlohmann::json* at = &*j;
  for (int i = 0; i < 63; ++i) at = &(*at)[0];
  EXPECT_EQ(at->get<int>(), 1);
}

TEST(JsonFile, NumberOutOfRangeIsMalformedNotAnAbort) {
  const std::string p = temp_file("huge.json", R"({"plan": {"dp": 1e400}})");
  Result<nlohmann::json> j = read_json_file(p);
  ASSERT_FALSE(j);
  expect_bad_input(j.status(), p, "malformed JSON");
}

TEST(JsonFile, OnlyRegularFiles) {
  const std::string dir = ::testing::TempDir() + "/llmplan_json_dir_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Result<nlohmann::json> j = read_json_file(dir);
  ASSERT_FALSE(j);
  expect_bad_input(j.status(), dir, "not a regular file (expected a JSON file, got a folder)");
  j = read_json_file("/dev/zero");
  ASSERT_FALSE(j);
  expect_bad_input(j.status(), "/dev/zero", "not a regular file");
  Result<Calibration> c = read_calibration_file("/dev/zero");
  ASSERT_FALSE(c);
  expect_bad_input(c.status(), "/dev/zero", "not a regular file");
  j = read_json_file(dir + "/missing.json");
  ASSERT_FALSE(j);
  expect_bad_input(j.status(), "missing.json", "cannot open file");
}

}  // namespace
}  // namespace llmplan

namespace llmplan {
namespace {

// A Hugging Face config's shape errors name the config's own keys, not llmplan's fields.
TEST(HfConfig, ShapeErrorsNameTheConfigsKeys) {
  const nlohmann::json llama = {{"hidden_size", 4096}, {"num_hidden_layers", 32}, {"num_attention_heads", 32},
                                {"num_key_value_heads", 5}, {"intermediate_size", 11008}, {"vocab_size", 32000}};
  Result<ModelSpec> m = model_from_hf_config(llama, "config.json");
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("config.json: field 'num_key_value_heads': expected a divisor of num_attention_heads (32), got 5"),
            std::string::npos)
      << m.status().message();
  const nlohmann::json gpt2 = {{"n_embd", 768}, {"n_layer", 12}, {"n_head", 7}, {"vocab_size", 50257}};
  m = model_from_hf_config(gpt2, "gpt2.json");
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("gpt2.json: field 'n_head': expected a divisor of n_embd (768)"), std::string::npos)
      << m.status().message();
  // A real config reads: Llama 2 7B's published config.json (meta-llama/Llama-2-7b-hf).
  nlohmann::json ok = llama;
  ok["num_key_value_heads"] = 32;
  m = model_from_hf_config(ok, "config.json");
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ(m->kv_heads, 32);
}

// The 2024-26 architectures' config.json files in examples/hf/ read as their presets (the same
// parameters to the one), and the architectures the recipe cannot describe yet are refused
// with what they need.
TEST(HfConfig, QwenAndMixtralConfigsReadAsTheirPresets) {
  const PresetRegistry reg = std::move(PresetRegistry::load(LLMPLAN_SOURCE_ROOT)).value();
  for (auto [file, preset] : {std::pair{"qwen2.5-7b-config.json", "qwen2.5-7b"}, std::pair{"qwen3-8b-config.json", "qwen3-8b"},
                              std::pair{"qwen3-30b-a3b-config.json", "qwen3-30b-a3b"}, std::pair{"mixtral-8x22b-config.json", "mixtral-8x22b"}}) {
    SCOPED_TRACE(file);
    const Result<ModelSpec> hf = reg.resolve_model(std::string(LLMPLAN_SOURCE_ROOT) + "/examples/hf/" + file, "--model");
    ASSERT_TRUE(hf) << hf.status().message();
    const ModelSpec p = *reg.model(preset);
    const ParamCounts a = count_params(*hf, 2, 1, 1, 0, 0), b = count_params(p, 2, 1, 1, 0, 0);
    EXPECT_EQ(a.total, b.total);
    EXPECT_EQ(a.per_layer_rank, b.per_layer_rank);
    EXPECT_EQ(a.active_per_token, b.active_per_token);
    EXPECT_EQ(hf->qk_norm, p.qk_norm);
    EXPECT_EQ(hf->attention_bias, p.attention_bias);
    EXPECT_EQ(hf->head_width(), p.head_width());
    // Keys it did not read are named (none of these configs has one that matters).
    EXPECT_EQ(hf->source.find("keys not read"), std::string::npos) << hf->source;
  }
}

TEST(HfConfig, ArchitecturesTheRecipeCannotDescribeAreRefusedWithWhatTheyNeed) {
  nlohmann::json ds = {{"architectures", {"Qwen2MoeForCausalLM"}}, {"hidden_size", 2048}, {"num_hidden_layers", 24},
                       {"num_attention_heads", 16}, {"vocab_size", 151936}, {"shared_expert_intermediate_size", 5632}};
  Result<ModelSpec> m = model_from_hf_config(ds, "ds.json");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.status().exit_code(), 2);
  EXPECT_NE(m.status().message().find("ds.json: field 'architectures': Qwen2MoeForCausalLM needs the shared expert's sigmoid gate"), std::string::npos)
      << m.status().message();
  // DeepSeek-V3 is read now, and one without its latent-attention widths is refused naming them.
  ds["architectures"] = {"DeepseekV3ForCausalLM"};
  m = model_from_hf_config(ds, "ds.json");
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("ds.json: field 'kv_lora_rank': missing"), std::string::npos) << m.status().message();
  nlohmann::json unknown = ds;
  unknown["architectures"] = {"FalconForCausalLM"};
  m = model_from_hf_config(unknown, "f.json");
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("FalconForCausalLM is not an architecture llmplan reads (expected one of GPT2LMHeadModel, LlamaForCausalLM"),
            std::string::npos)
      << m.status().message();
  // Qwen3-MoE with dense layers between the MoE ones, and a switched-on sliding window.
  nlohmann::json q3 = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"hidden_size", 2048},
                       {"num_hidden_layers", 4}, {"num_attention_heads", 32}, {"num_key_value_heads", 4}, {"head_dim", 128},
                       {"vocab_size", 1000}, {"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 64},
                       {"mlp_only_layers", {0}}};
  m = model_from_hf_config(q3, "q3.json");
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("dense layers between the MoE ones"), std::string::npos) << m.status().message();
  q3["mlp_only_layers"] = nlohmann::json::array();
  q3["use_sliding_window"] = true;
  m = model_from_hf_config(q3, "q3.json");
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("'use_sliding_window': true needs sliding-window attention"), std::string::npos) << m.status().message();
  // A key the planner does not know is listed in the model's source, not dropped silently.
  q3["use_sliding_window"] = false;
  q3["first_k_dense_replace"] = 3;
  m = model_from_hf_config(q3, "q3.json");
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_TRUE(m->qk_norm);
  EXPECT_NE(m->source.find("keys not read: first_k_dense_replace"), std::string::npos) << m->source;
}

}  // namespace
}  // namespace llmplan
