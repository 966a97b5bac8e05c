// The commands of a launch script as the words a shell would hand them, so that a launch
// line (`deepspeed ... pretrain_gpt.py --tensor-model-parallel-size 2 ...`, `torchrun ... -m
// torchtitan.train --job.config_file train.toml`) can be read back. Handles what launch
// scripts use: comments, single and double quotes, backslash escapes and backslash-newline,
// `;` `&&` `||` `|` as separators, here-documents (skipped), NAME=value assignments (also
// after `export`) and NAME=( ... ) arrays, expanded where a later word uses them: $NAME,
// ${NAME}, ${NAME:-default} (unquoted values split on blanks) and "${NAME[@]}" (one word per
// element).
//
// `if`/`elif`/`else`/`fi` with a test of literal words ([ "$X" = "true" ], [ $N -gt 1 ],
// [ -n "$Y" ]) keep only the branch that runs; under any other condition both branches are
// read. Not a shell: no loops, functions, globbing or command substitution. What it cannot expand stays in the word as written (`$(nproc)`,
// `${UNSET}`), so that a reader expecting a number there reports the flag and the text.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/spec/status.h"

namespace llmplan::launch_formats {

struct ShellCommand {
  std::vector<std::string> words;  // after expansion; leading NAME=value words removed
  int line = 0;                    // 1-based line of the command's first word
};

// Every simple command of `text`, in order. bad_input (naming `origin` and the line) for an
// unterminated quote, array or ${...}.
Result<std::vector<ShellCommand>> parse_shell_script(const std::string& text, const std::string& origin);

// The last path component of a word ("/usr/bin/torchrun" -> "torchrun").
std::string shell_basename(const std::string& word);

// An option word split at its first '=' ("--nnodes=2" -> {"--nnodes", "2"}); no '=': the
// word and an empty value, has_value false.
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

// The first command of `commands` that launches through deepspeed or torchrun; none when no
// command does. bad_input naming the option when a node or GPU count is not an integer.
Result<std::optional<LaunchLine>> find_launch_line(const std::vector<ShellCommand>& commands, const std::string& origin);

}  // namespace llmplan::launch_formats
