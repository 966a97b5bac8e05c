// Helpers of the per-format launch tests, one copy each: the framework fixtures (whole, or
// as the rows of a key list), the import options, an export imported back and compared with
// its plan, bad input checked for the names its message must carry, an export written to a
// temporary folder, and the words bash itself passes to a launch script's launcher (the
// reference a launch line is checked against, independent of launch/shell_words.h).
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "launch/launch.h"
#include "tests/launch/round_trip_plans.h"

namespace llmplan::testing {

// Scanning helpers in place of std::regex: GCC 12 at -O2 with ASan warns
// (-Wmaybe-uninitialized, an error here) inside libstdc++'s regex compiler.

// Whether every character of `s` is in `chars` (and `s` is not empty).
inline bool all_in(const std::string& s, const std::string& chars) {
  return !s.empty() && s.find_first_not_of(chars) == std::string::npos;
}
inline const std::string kLowerDigitUnderscore = "abcdefghijklmnopqrstuvwxyz_0123456789";

// The longest run of characters in `chars` starting at `pos` of `s`.
inline std::string run_of(const std::string& s, size_t pos, const std::string& chars) {
  const size_t end = s.find_first_not_of(chars, pos);
  return s.substr(pos, (end == std::string::npos ? s.size() : end) - pos);
}

// Each text between `open` and the next `close` after it, left to right.
inline std::vector<std::string> between_all(const std::string& s, const std::string& open, const std::string& close) {
  std::vector<std::string> out;
  for (size_t at = s.find(open); at != std::string::npos; at = s.find(open, at)) {
    const size_t from = at + open.size();
    const size_t to = s.find(close, from);
    if (to == std::string::npos) break;
    out.push_back(s.substr(from, to - from));
    at = to + close.size();
  }
  return out;
}

inline std::string fixture_path(const std::string& name) { return std::string(LLMPLAN_SOURCE_ROOT) + "/tests/fixtures/frameworks/" + name; }

inline std::string read_fixture(const std::string& name) {
  std::ifstream in(fixture_path(name), std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << name;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The tab-separated columns of each line of fixture `name` that is neither empty nor a `#`
// comment (the key and option lists: the name first, then what the list says of it).
inline std::vector<std::vector<std::string>> fixture_rows(const std::string& name) {
  std::vector<std::vector<std::string>> rows;
  std::stringstream in(read_fixture(name));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, '\t');) cols.push_back(c);
    rows.push_back(std::move(cols));
  }
  return rows;
}

// The options the imports use: the shipped presets, `gpu` ("": the format's own) and `model`
// ("": the config's).
inline ImportOptions import_options(const std::string& gpu = "h100-sxm", const std::string& model = "") {
  ImportOptions o;
  o.presets = &shipped_presets();
  o.gpu = gpu;
  o.model = model;
  return o;
}

// `files` (an export of `want`) imported back as `format` from `origin`: EXPECTs the same run
// (expect_same_run, traced as `what`). The import, or nullopt when it failed (reported).
inline std::optional<ImportedConfig> expect_round_trip(const PlanFile& want, const std::vector<LaunchFile>& files, LaunchFormat format,
                                                       const ImportOptions& opt, const std::string& origin, const std::string& what) {
  Result<ImportedConfig> im = import_files(files, format, opt, origin);
  EXPECT_TRUE(im) << what << ": " << im.status().message();
  if (!im) return std::nullopt;
  expect_same_run(want, im->file, what);
  return std::move(*im);
}

// EXPECTs `st` to be bad input whose message names each of `names`.
inline void expect_bad_input(const Status& st, std::initializer_list<const char*> names) {
  EXPECT_EQ(st.kind(), ErrorKind::bad_input) << st.message();
  for (const char* n : names) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
}
inline void expect_bad_input(const Result<ImportedConfig>& r, std::initializer_list<const char*> names) {
  ASSERT_FALSE(r);
  expect_bad_input(r.status(), names);
}

// `text` with its first `from` replaced by `to`; EXPECTs `from` in it.
inline std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
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
