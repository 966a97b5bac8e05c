// Reading launch scripts: the shell-word splitting and the little of bash that launch
// scripts use to assemble a command line, so that the Megatron-LM and NeMo importers see
// the arguments the script would pass. Not a bash interpreter: nothing is executed.
//
//   split_shell_lines  text -> commands of words (quotes removed, no expansion): for
//                      argument lists and override files (one key=value per word)
//   read_shell_script  text -> the commands a run of the script would reach, each word
//                      expanded as bash would: `#` comments, backslash-newline, single and
//                      double quotes, `NAME=value` / `export NAME=value`, bash arrays
//                      `NAME=( ... )` / `NAME+=( ... )` (comments allowed inside),
//                      `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME[@]}` (unquoted
//                      expansions are split on blanks, as bash splits them), and
//                      `if / elif / else / fi` on `[[ ... ]]` / `[ ... ]` tests of strings
//                      (=, ==, !=, -z, -n) joined by && and ||.
//
// What is not evaluated is said, never guessed: a variable the script does not set (an
// environment variable, a positional parameter without a default, $(...), $((...)),
// backquotes) is left as written ("$NAME") and named in `unexpanded`; a condition that
// cannot be decided (a file test, an unset variable) reads both branches: a note says so
// when such a branch assigns a variable, and each command there carries the condition. Loops and functions are read
// as straight-line code.
//
// Errors (bad_input, naming the origin and line): an unterminated quote, ${...}, $(...) or
// array literal.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
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

}  // namespace llmplan::shell
