// launch/shell_words.h: the words of a launch script's commands, checked against what bash
// itself passes (the reference) and on the forms launch scripts use.
#include "launch/shell_words.h"

#include <gtest/gtest.h>

#include "tests/launch/format_test_util.h"

namespace llmplan::shell {
namespace {

// A script in the style of published launch scripts: variables with defaults, a quoted
// option string split unquoted, arrays with comments, line continuations, a here-document.
constexpr const char* kScript = R"SH(#!/bin/bash
set -ex
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NNODES=2
TP=4   # tensor parallel
DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES"
cat <<EOT > /dev/null
{ "train_batch_size": 8, "it's": "a here-document" }
EOT
ARGS=(
  # model parallel
  --tensor-model-parallel-size $TP
  --data-path "/data/my corpus"   # a path with a space
)
ARGS+=(--lr 3e-4)
activation_checkpoint="false"
if [ "${activation_checkpoint}" = "true" ]; then
  ARGS+=(--recompute-granularity full)
elif [ $TP -gt 2 ]; then
  ARGS+=(--sequence-parallel)
else
  ARGS+=(--never)
fi
if [ -z "$UNSET_VAR" ]; then EXTRA="--bf16"; fi
torchrun $DISTRIBUTED_ARGS \
    pretrain_gpt.py \
    "${ARGS[@]}" $EXTRA --seq-length=4096 --name 'single quoted "x"' \
    --empty ""
)SH";

TEST(ShellScript, ReadsTheWordsBashPasses) {
  Result<Script> script = read_shell_script(kScript, "run.sh");
  ASSERT_TRUE(script) << script.status().message();
  Result<std::optional<LaunchLine>> line = find_launch_line(script->commands, "run.sh");
  ASSERT_TRUE(line && line->has_value());
  const LaunchLine& l = **line;
  EXPECT_EQ(l.launcher, "torchrun");
  EXPECT_EQ(l.line, 25);
  EXPECT_EQ(l.nodes, 2);
  EXPECT_EQ(l.gpus_per_node, 8);
  EXPECT_EQ(l.program, "pretrain_gpt.py");
  const std::vector<std::string> args = {"--tensor-model-parallel-size", "4", "--data-path", "/data/my corpus", "--lr", "3e-4",
                                         "--sequence-parallel", "--bf16", "--seq-length=4096", "--name", "single quoted \"x\"", "--empty", ""};
  EXPECT_EQ(l.args, args);
  if (!testing::bash_available()) GTEST_SKIP() << "no bash to compare with";
  const std::string dir = testing::write_temp({{"run.sh", kScript, true}}, "shell");
  std::optional<std::vector<std::string>> words = testing::bash_launch_words(dir + "/run.sh", "torchrun");
  ASSERT_TRUE(words.has_value());
  std::vector<std::string> ours = {"--nproc_per_node", "8", "--nnodes", "2", "pretrain_gpt.py"};
  ours.insert(ours.end(), args.begin(), args.end());
  EXPECT_EQ(*words, ours);
}

TEST(ShellScript, FindsEachLauncherForm) {
  auto launch = [](const std::string& text) {
    Result<Script> script = read_shell_script(text, "x.sh");
    EXPECT_TRUE(script);
    if (!script) return std::optional<LaunchLine>();
    Result<std::optional<LaunchLine>> l = find_launch_line(script->commands, "x.sh");
    EXPECT_TRUE(l);
    return l ? *l : std::optional<LaunchLine>();
  };
  std::optional<LaunchLine> ds = launch("deepspeed --num_nodes 1 --num_gpus 4 --master_port 29600 train.py --x 1\n");
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->launcher, "deepspeed");
  EXPECT_EQ(ds->gpus_per_node, 4);
  EXPECT_EQ(ds->unused, std::vector<std::string>{"--master_port"});
  EXPECT_EQ(ds->args, (std::vector<std::string>{"--x", "1"}));
  std::optional<LaunchLine> py = launch("python3 -m torch.distributed.run --nproc-per-node=2 -m torchtitan.train --job.config_file a.toml");
  ASSERT_TRUE(py);
  EXPECT_EQ(py->gpus_per_node, 2);
  EXPECT_EQ(py->program, "torchtitan.train");
  EXPECT_FALSE(launch("echo deepspeed\npython train.py\n").has_value());
}

TEST(ShellScript, BadScriptsAreBadInputNamingTheLine) {
  Result<Script> r = read_shell_script("A=1\nB=\"open\ntorchrun x\n", "bad.sh");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().kind(), ErrorKind::bad_input);
  EXPECT_NE(r.status().message().find("bad.sh: line 2"), std::string::npos) << r.status().message();
  Result<Script> arr = read_shell_script("ARGS=(\n --a 1\n", "arr.sh");
  ASSERT_FALSE(arr);
  EXPECT_NE(arr.status().message().find("ARGS"), std::string::npos);
  Result<Script> ok = read_shell_script("torchrun --nnodes $(nproc) x.py\n", "n.sh");
  ASSERT_TRUE(ok);
  Result<std::optional<LaunchLine>> l = find_launch_line(ok->commands, "n.sh");
  ASSERT_FALSE(l);  // $(nproc) is kept as written, and is not a number
  EXPECT_NE(l.status().message().find("--nnodes"), std::string::npos);
  EXPECT_NE(l.status().message().find("$(nproc)"), std::string::npos);
}


// The forms one of the two former readers lacked, read as bash reads them: integer tests,
// `true` / `false`, redirections (not arguments), "$@" (no word when the script is read as a
// file), "${A[*]}" (one word), `export NAME` (no command), a heredoc body (not commands).
constexpr const char* kForms = R"SH(#!/bin/bash
N=4
export N
ARR=(a "b c")
if [ $N -ge 8 ]; then N=8; elif [[ $N -lt 2 ]]; then N=1; else M=3; fi
if true; then T=on; fi
if ! false; then U=on; fi
cat <<-'END' | tee /dev/null > /dev/null
	torchrun --nnodes 99 never.py
	END
torchrun --nproc_per_node "$N" train.py "$@" "${ARR[*]}" ${ARR[*]} --m "$M" --t "$T$U" 2>&1 | tee log.txt
)SH";

TEST(ShellScript, ReadsIntegerTestsRedirectionsAndSpecialExpansionsAsBashDoes) {
  Result<Script> script = read_shell_script(kForms, "forms.sh");
  ASSERT_TRUE(script) << script.status().message();
  EXPECT_TRUE(script->notes.empty()) << script->notes.front();  // every condition decided
  Result<std::optional<LaunchLine>> line = find_launch_line(script->commands, "forms.sh");
  ASSERT_TRUE(line && line->has_value());
  EXPECT_EQ((*line)->line, 11);
  EXPECT_EQ((*line)->gpus_per_node, 4);
  const std::vector<std::string> args = {"a b c", "a", "b", "c", "--m", "3", "--t", "onon"};
  EXPECT_EQ((*line)->args, args);
  for (const Command& c : script->commands) EXPECT_NE(c.words.front(), "N") << "export N is no command";
  if (!testing::bash_available()) GTEST_SKIP() << "no bash to compare with";
  const std::string dir = testing::write_temp({{"forms.sh", kForms, true}}, "shell_forms");
  std::optional<std::vector<std::string>> words = testing::bash_launch_words(dir + "/forms.sh", "torchrun");
  ASSERT_TRUE(words.has_value());
  std::vector<std::string> ours = {"--nproc_per_node", "4", "train.py"};
  ours.insert(ours.end(), args.begin(), args.end());
  EXPECT_EQ(*words, ours);
}

// What cannot be decided is said: a command as a condition reads both branches (noted, and
// the commands there carry it); a variable the script does not set stays as written, in
// read_shell_script's words and split_shell_lines' alike.
TEST(ShellScript, LeavesWhatItCannotEvaluateAsWritten) {
  Result<Script> script = read_shell_script(
      "if command -v srun; then L=srun; else L=torchrun; fi\n$L --nnodes $NODES ${DIR:-.}/x.py ${GPUS}\n", "u.sh");
  ASSERT_TRUE(script) << script.status().message();
  ASSERT_EQ(script->notes.size(), 2u);
  EXPECT_NE(script->notes[0].find("command -v srun"), std::string::npos) << script->notes[0];
  ASSERT_EQ(script->commands.size(), 1u);  // the launch line (a condition is not read as a command)
  EXPECT_EQ(script->commands[0].words, (std::vector<std::string>{"torchrun", "--nnodes", "$NODES", "./x.py", "${GPUS}"}));
  EXPECT_EQ(script->unexpanded, (std::set<std::string>{"$GPUS", "$NODES"}));
  Result<std::vector<Command>> lines = split_shell_lines("a=$X b=${Y:-1} 'c=$Z'\n", "o.txt");
  ASSERT_TRUE(lines);
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_EQ((*lines)[0].words, (std::vector<std::string>{"a=$X", "b=${Y:-1}", "c=$Z"}));
}

}  // namespace
}  // namespace llmplan::shell
