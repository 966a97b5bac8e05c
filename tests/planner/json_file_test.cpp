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
