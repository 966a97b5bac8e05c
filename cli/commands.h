// The llmplan subcommands. Each registers its flags on a CLI11 subcommand and returns a
// runner; main() holds the one table {name, help, register} that also prints the help.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace llmplan::cli {

using Runner = std::function<int()>;  // returns the process exit code

Runner register_memory(CLI::App* sub);
Runner register_explain(CLI::App* sub);
Runner register_sweep(CLI::App* sub);
Runner register_presets(CLI::App* sub);
Runner register_validate(CLI::App* sub);
Runner register_simulate(CLI::App* sub);
Runner register_execute(CLI::App* sub);   // cmd_execute.cpp
Runner register_profiles(CLI::App* sub);  // cmd_profiles.cpp
Runner register_calibrate(CLI::App* sub);  // cmd_calibrate.cpp
Runner register_budget(CLI::App* sub);     // cmd_budget.cpp
Runner register_export(CLI::App* sub);     // cmd_launch.cpp
Runner register_import(CLI::App* sub);     // cmd_launch.cpp

}  // namespace llmplan::cli
