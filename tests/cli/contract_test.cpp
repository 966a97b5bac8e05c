// The CLI's contract, subcommand by subcommand (cli/main.cpp, docs/design.md "Error
// handling"): exit 0 on success with --help on stdout; exit 2 on bad input -- an unknown
// flag, an out-of-range value, a missing or unreadable file -- with a message on stderr
// that names the flag or file and nothing on stdout; exit 1 on a runtime failure, said on
// stderr. Every subcommand of the table is exercised, so a new one must add its cases.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

struct Streams {
  int exit_code = -1;
  std::string out, err;
};

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "/llmplan_contract_" + name; }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs llmplan with `args`, stdout and stderr captured apart, stdin empty. (ctest runs
// each case in its own process, in parallel: the capture files are the process's own.)
Streams llmplan(const std::string& args) {
  const std::string id = std::to_string(::getpid());
  const std::string out = temp_path("stdout." + id), err = temp_path("stderr." + id);
  const std::string cmd = std::string(LLMPLAN_BINARY_DIR) + "/cli/llmplan " + args + " > " + out + " 2> " + err + " < /dev/null";
  const int status = std::system(cmd.c_str());
  Streams s;
  s.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  s.out = slurp(out);
  s.err = slurp(err);
  return s;
}

struct BadInput {
  std::string args;   // after the subcommand
  std::string names;  // what stderr must name (the flag, the file)
};

struct SubcommandContract {
  std::string name;
  std::vector<BadInput> bad;
};

const std::string kMissing = "/nonexistent/llmplan_contract_plan.json";

// A small valid plan, written once by the sweep.
const std::string& plan_file() {
  static const std::string path = [] {
    const std::string p = temp_path("plan." + std::to_string(::getpid()) + ".json");
    const Streams s = llmplan("sweep --model gpt2-124m --gpus 1 --json " + p);
    EXPECT_EQ(s.exit_code, 0) << s.err;
    return p;
  }();
  return path;
}

std::vector<SubcommandContract> contracts() {
  const std::string db = temp_path("empty." + std::to_string(::getpid()) + ".db"), plan = plan_file();
  return {
      {"sweep", {{"--bogus-flag", "--bogus-flag"}, {"--gpus 0", "--gpus"}, {"--params 7B --gpus 8 --micro-batch -1", "--micro-batch"}}},
      {"simulate", {{kMissing, kMissing}, {plan + " --bogus-flag", "--bogus-flag"}}},
      {"memory", {{"--params 7B --gpus 8 --tp 3", "--tp"}, {"--params 7B --gpus 8 --zero -1", "--zero"}, {"--bogus-flag", "--bogus-flag"}}},
      {"explain", {{kMissing, kMissing}, {plan + " --bogus-flag", "--bogus-flag"}}},
      {"validate", {{"--data " + kMissing, kMissing}, {"--bogus-flag", "--bogus-flag"}}},
      {"presets", {{"stray-argument", "stray-argument"}, {"--bogus-flag", "--bogus-flag"}}},
      {"execute", {{kMissing, kMissing}, {plan + " --steps -3", "--steps"}, {plan + " --lr nan", "--lr"}, {plan + " --layers 0", "--layers"}}},
      {"profiles", {{"show 999 --db " + db, db}, {"list --bogus-flag", "--bogus-flag"}}},
      {"calibrate", {{"--db " + db, db}, {"--bogus-flag", "--bogus-flag"}}},
  };
}

TEST(CliContract, HelpIsExitZeroOnStdout) {
  for (const SubcommandContract& c : contracts()) {
    SCOPED_TRACE(c.name);
    const Streams s = llmplan(c.name + " --help");
    EXPECT_EQ(s.exit_code, 0) << s.err;
    EXPECT_NE(s.out.find(c.name), std::string::npos) << s.out;
    EXPECT_EQ(s.err, "");
  }
}

TEST(CliContract, BadInputIsExitTwoWithTheFlagOrFileNamedOnStderr) {
  std::remove(temp_path("empty." + std::to_string(::getpid()) + ".db").c_str());
  for (const SubcommandContract& c : contracts()) {
    for (const BadInput& b : c.bad) {
      SCOPED_TRACE(c.name + " " + b.args);
      const Streams s = llmplan(c.name + " " + b.args);
      EXPECT_EQ(s.exit_code, 2) << s.out << s.err;
      EXPECT_NE(s.err.find(b.names), std::string::npos) << s.err;
      EXPECT_EQ(s.out, "") << "bad input must not print a result";
      // One short message, not a dump.
      EXPECT_LT(s.err.size(), 2000u) << s.err;
    }
  }
}

TEST(CliContract, UnknownSubcommandIsExitTwoNamingIt) {
  const Streams s = llmplan("sweeep --gpus 8");
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_NE(s.err.find("unknown subcommand 'sweeep'"), std::string::npos) << s.err;
  EXPECT_EQ(s.out, "");
}

// A runtime failure: a request that is well formed but cannot be met.
TEST(CliContract, RuntimeFailureIsExitOneSaidOnStderr) {
  const Streams s = llmplan("sweep --model llama3-405b --gpus 8 --gpu a100-40g");
  EXPECT_EQ(s.exit_code, 1) << s.err;
  EXPECT_NE(s.err.find("no plan fits"), std::string::npos) << s.err;
}

}  // namespace
