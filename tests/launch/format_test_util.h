// Helpers of the per-format launch tests: the framework fixtures, an export written to a
// temporary folder, and the words bash itself passes to a launch script's launcher (the
// reference a launch line is checked against, independent of launch/shell_words.h).
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "launch/launch.h"

namespace llmplan::testing {

inline std::string fixture_path(const std::string& name) { return std::string(LLMPLAN_SOURCE_ROOT) + "/tests/fixtures/frameworks/" + name; }

inline std::string read_fixture(const std::string& name) {
  std::ifstream in(fixture_path(name), std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << name;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline const LaunchFile* find_file(const std::vector<LaunchFile>& files, const std::string& name) {
  for (const LaunchFile& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

// The files written into a fresh temporary folder named `tag`; returns the folder.
inline std::string write_temp(const std::vector<LaunchFile>& files, const std::string& tag) {
  // The process id keeps parallel runs (ctest -j, other checkouts) apart.
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("llmplan_launch_" + std::to_string(getpid()) + "_" + tag);
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(write_launch_files(dir.string(), files).is_ok());
  return dir.string();
}

// The arguments bash passes to `launcher` when it runs `script` (the launcher replaced by a
// function that prints them, one per line); nullopt when bash cannot run it.
inline std::optional<std::vector<std::string>> bash_launch_words(const std::string& script, const std::string& launcher) {
  const std::string cmd = "cd \"$(dirname '" + script + "')\" && bash -c '" + launcher +
                          "() { printf \"%s\\n\" \"$@\"; }; source \"$0\"' '" + script + "' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return std::nullopt;
  std::vector<std::string> words;
  std::stringstream s(out);
  for (std::string line; std::getline(s, line);) words.push_back(line);
  return words;
}

inline bool bash_available() { return std::system("bash -c true >/dev/null 2>&1") == 0; }

}  // namespace llmplan::testing
