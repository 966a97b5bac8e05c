// The installed program stands alone: `cmake --install` into a temporary prefix, the prefix
// moved elsewhere (so nothing can lean on the path it was installed to), and the installed
// llmplan runs a sweep and validate from its own share/llmplan -- a preset added only there
// is seen, and the build tree's data is out of its view (a binary outside the build tree
// without share/llmplan is refused, naming the folder it looked for).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

struct CommandRun {
  int exit_code;
  std::string output;  // stdout + stderr
};

// Runs a shell command without LLMPLAN_DATA_DIR, which would override the lookup under test.
CommandRun sh(const std::string& cmd) {
  FILE* p = popen(("unset LLMPLAN_DATA_DIR; " + cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// 'path' for the shell, appended piece by piece: GCC 12 -O3 misreads "'" + std::string&&
// as an overlapping copy (-Werror=restrict, GCC bug 105329).
std::string shell_quoted(const fs::path& p) {
  std::string s(1, '\'');
  s += p.string();
  s += '\'';
  return s;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("llmplan_install_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(Install, MovedPrefixRunsSweepAndValidateFromItsOwnData) {
  const fs::path tmp = fresh_dir("prefix");
  const CommandRun install = sh(shell_quoted(LLMPLAN_CMAKE_COMMAND) + " --install " + shell_quoted(LLMPLAN_BINARY_DIR) + " --prefix " + shell_quoted(tmp / "p1"));
  ASSERT_EQ(install.exit_code, 0) << install.output;
  fs::rename(tmp / "p1", tmp / "moved");
  const fs::path prefix = tmp / "moved", share = prefix / "share" / "llmplan";
  const std::string bin = (prefix / "bin" / "llmplan").string();
  ASSERT_TRUE(fs::exists(bin));
  EXPECT_TRUE(fs::exists(share / "models" / "llama2-7b.json"));
  EXPECT_TRUE(fs::exists(share / "data" / "reference" / "published_runs.json"));
  EXPECT_TRUE(fs::exists(prefix / "share" / "doc" / "llmplan" / "design.md"));
  if (fs::exists(prefix / "bin" / "llmplan-gui")) {
    EXPECT_TRUE(fs::exists(prefix / "share" / "applications" / "llmplan-gui.desktop"));
    EXPECT_TRUE(fs::exists(prefix / "share" / "icons" / "hicolor" / "scalable" / "apps" / "llmplan.svg"));
  }

  // A GPU preset only the installed copy has: seen by the installed binary, so it reads there.
  {
    std::ifstream in(share / "data" / "hardware" / "gpus" / "a100-80g.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string from = "\"name\": \"a100-80g\"";
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos);
    text.replace(at, from.size(), "\"name\": \"only-installed\"");
    std::ofstream(share / "data" / "hardware" / "gpus" / "only-installed.json") << text;
  }
  const CommandRun presets = sh(shell_quoted(bin) + " presets");
  ASSERT_EQ(presets.exit_code, 0) << presets.output;
  EXPECT_NE(presets.output.find("only-installed"), std::string::npos) << presets.output;
  EXPECT_NE(presets.output.find("read from: " + share.string()), std::string::npos) << presets.output;

  const std::string best = (tmp / "best.json").string();
  const CommandRun sweep = sh("cd " + shell_quoted(tmp) + " && " + shell_quoted(bin) + " sweep --gpus 8 --params 7B --gpu only-installed --json " + shell_quoted(best));
  ASSERT_EQ(sweep.exit_code, 0) << sweep.output;
  EXPECT_TRUE(fs::exists(best));
  EXPECT_NE(sweep.output.find("only-installed"), std::string::npos) << sweep.output;

  const CommandRun validate = sh(shell_quoted(bin) + " validate --summary-only");
  ASSERT_EQ(validate.exit_code, 0) << validate.output;
  EXPECT_NE(validate.output.find("Validation of " + (share / "data" / "reference" / "published_runs.json").string()), std::string::npos)
      << validate.output;
}

TEST(Install, BinaryOutsideTheBuildTreeWithoutDataNamesTheFolder) {
  const fs::path tmp = fresh_dir("lone");
  fs::create_directories(tmp / "bin");
  fs::copy_file(std::string(LLMPLAN_BINARY_DIR) + "/cli/llmplan", tmp / "bin" / "llmplan");
  const CommandRun r = sh(shell_quoted(tmp / "bin" / "llmplan") + " presets");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find((tmp / "share" / "llmplan").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LLMPLAN_DATA_DIR"), std::string::npos) << r.output;
}

}  // namespace
