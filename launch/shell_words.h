// Reading launch scripts: the shell-word splitting and the little of bash that launch
// scripts use to assemble a command line, so that every importer (Megatron-LM, NeMo,
// DeepSpeed, torchtitan, MindFormers' msrun line) sees the arguments the script would pass.
// Not a bash interpreter: nothing is executed. The one shell reader of llmplan_launch.
//
//   split_shell_lines  text -> commands of words (quotes removed, no expansion): for
//                      argument lists and override files (one key=value per word)
//   read_shell_script  text -> the commands a run of the script would reach, each word
//                      expanded as bash would: `#` comments, backslash-newline, single and
//                      double quotes, `$'...'`, `NAME=value` / `export NAME=value`, bash
//                      arrays `NAME=( ... )` / `NAME+=( ... )` (comments allowed inside),
//                      `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME[@]}`, `${NAME[*]}`
//                      (unquoted expansions are split on blanks, as bash splits them),
//                      here-documents (their bodies skipped), redirections (dropped), and
//                      `if / elif / else / fi` on `[[ ... ]]` / `[ ... ]` / `test` of
//                      strings (=, ==, !=, -z, -n) and integers (-eq, -ne, -lt, -le, -gt,
//                      -ge), negated with `!`, joined by && and ||.
//   find_launch_line   those commands -> the distributed launch line (deepspeed, torchrun,
//                      python -m torch.distributed.run): node and GPU counts, the program
//                      and its arguments
//
// What is not evaluated is said, never guessed: a variable the script does not set (an
// environment variable, a positional parameter without a default, $(...), $((...)),
// backquotes) is left as written ("$NAME", "${NAME}", "$(nproc)") and named in
// `unexpanded`; a condition that cannot be decided (a file test, an unset variable, a
// command) reads both branches: a note says so when such a branch assigns a variable, and
// each command there carries the condition. Loops and functions are read as straight-line
// code.
//
// Errors (bad_input, naming the origin and line): an unterminated quote, ${...}, $(...) or
// array literal; a launch line whose node or GPU count is not an integer.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "planner/spec/status.h"

namespace llmplan::shell {

struct Command {
  std::vector<std::string> words;  // expanded (read_shell_script) or literal (split_shell_lines)
  int line = 0;                    // 1-based line of the first word
  // Reached only if a condition the reader cannot decide holds: those conditions as
  // written ("line 12: '-f pretrain_gpt.py'"); empty when the command is certainly reached.
  std::string undecided;
};

// Commands of literal words, split at newlines, `;`, `&&`, `||`, `|`; quotes removed,
// `$...` kept as written. Array literals are read as their elements.
Result<std::vector<Command>> split_shell_lines(const std::string& text, const std::string& origin);

struct Script {
  std::vector<Command> commands;                             // reached, in order; assignments excluded
  std::map<std::string, std::string> variables;              // at the end of the script
  std::map<std::string, std::vector<std::string>> arrays;    // at the end of the script
  std::vector<std::string> array_order;                      // arrays by first assignment
  std::set<std::string> unexpanded;                          // names left as "$NAME"
  std::vector<std::string> notes;                            // undecided conditions
};

Result<Script> read_shell_script(const std::string& text, const std::string& origin);

// `s` quoted for bash when it needs quoting (single quotes), else as is.
std::string quote(const std::string& s);

// `s` split on blanks (space, tab, newline) as bash splits an unquoted expansion.
std::vector<std::string> split_blanks(const std::string& s);

// The last path component of a word ("/usr/bin/torchrun" -> "torchrun").
std::string file_name(const std::string& word);

// An option word split at its first '=' ("--nnodes=2" -> {"--nnodes", "2"}); no '=' (or not
// an option): the word and an empty value, has_value false.
struct OptionWord {
  std::string name;
  std::string value;
  bool has_value = false;
};
OptionWord split_option_word(const std::string& word);

// `word` as an integer in [min, max], else bad_input "<origin>: line N: <key>: expected an
// integer in [min, max], got '<word>'".
Result<int64_t> parse_integer_word(const std::string& word, int64_t min, int64_t max, const std::string& key, const std::string& origin,
                                   int line);

// A distributed launch line: `deepspeed` (DeepSpeed v0.16.4 deepspeed/launcher/runner.py),
// `torchrun` or `python -m torch.distributed.run` (torch/distributed/run.py), the program it
// starts and that program's arguments.
struct LaunchLine {
  std::string launcher;               // "deepspeed" or "torchrun"
  int line = 0;
  std::optional<int> nodes;           // --num_nodes / --nnodes
  std::optional<int> gpus_per_node;   // --num_gpus / --nproc_per_node
  std::string program;                // the script or module it runs
  std::vector<std::string> args;      // the program's arguments
  std::vector<std::string> unused;    // other launcher options, as spelled
};

// The first of `commands` (read_shell_script's) that launches through deepspeed or torchrun;
// none when no command does. bad_input naming the option when a node or GPU count is not an
// integer.
Result<std::optional<LaunchLine>> find_launch_line(const std::vector<Command>& commands, const std::string& origin);

}  // namespace llmplan::shell
