// llmplan: plan, simulate and execute LLM training. One table of subcommands
// {name, help, register}; each command lives in its own cmd_*.cpp. Only main exits:
// 0 success, 1 runtime failure (including "no plan fits"), 2 bad input.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  const char* help;
  llmplan::cli::Runner (*register_fn)(CLI::App*);
};

constexpr Command kCommands[] = {
    {"sweep", "evaluate every parallel plan, rank them, write the best as plan JSON", llmplan::cli::register_sweep},
    {"simulate", "play one step of a plan event by event; Chrome trace for Perfetto", llmplan::cli::register_simulate},
    {"memory", "per-GPU memory breakdown of one plan (flags or plan JSON)", llmplan::cli::register_memory},
    {"explain", "does a plan fit, by how much, and the cheapest changes that make it fit", llmplan::cli::register_explain},
    {"validate", "predict published training runs and report the errors", llmplan::cli::register_validate},
    {"presets", "list model, GPU and node presets", llmplan::cli::register_presets},
    {"execute", "run a plan for N steps on this machine and compare measured with predicted", llmplan::cli::register_execute},
    {"profiles", "list, show, export or delete recorded runs (profile database)", llmplan::cli::register_profiles},
    {"calibrate", "fit a device's reached speed from recorded runs; execute --calibration applies it", llmplan::cli::register_calibrate},
    {"budget", "days, GPU-hours, cost and energy of a token budget with goodput; compute-optimal size for --days/--dollars; GPUs for --days",
     llmplan::cli::register_budget},
    {"export", "write a plan as a framework's launch configuration (Megatron-LM, NeMo, DeepSpeed, torchtitan, MindFormers)",
     llmplan::cli::register_export},
    {"import", "read a framework's launch configuration into a plan file (then explain it)", llmplan::cli::register_import},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"llmplan: plan, simulate and execute LLM training on limited hardware"};
  app.set_version_flag("--version", std::string("llmplan ") + LLMPLAN_VERSION);
  app.require_subcommand(1);
  std::map<std::string, llmplan::cli::Runner> runners;
  for (const Command& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners[c.name] = c.register_fn(sub);
  }
  // An unknown first word is a mistyped subcommand: say so and list them (CLI11 alone says
  // only "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-' && std::none_of(std::begin(kCommands), std::end(kCommands), [&](const Command& c) {
        return std::strcmp(c.name, argv[1]) == 0;
      })) {
    std::string names;
    for (const Command& c : kCommands) names += std::string(names.empty() ? "" : ", ") + c.name;
    std::fprintf(stderr, "llmplan: unknown subcommand '%s' (expected one of %s; llmplan --help)\n", argv[1], names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Bad flags are bad input: exit 2 with CLI11's message naming the flag.
    app.exit(e);
    return 2;
  }
  for (CLI::App* sub : app.get_subcommands()) return runners[sub->get_name()]();
  return 2;
}
