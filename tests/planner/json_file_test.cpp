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

}  // namespace
}  // namespace llmplan
