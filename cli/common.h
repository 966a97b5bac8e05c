// Shared CLI plumbing: the flags that describe a model, cluster, job and plan, turned into
// spec structs; exit-code mapping; small table printers. Only main() exits.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "planner/io/plan_file.h"
#include "planner/io/presets.h"
#include "planner/search/sweep.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"

namespace llmplan::cli {

// Flags for "what to train on what": every command that builds a job from flags.
// An integer flag's value before CLI11 sets it: no one types it, so "not given" is never
// confused with a -1 or a 0 the user typed (which are then refused with the flag's name).
inline constexpr int kUnsetFlag = std::numeric_limits<int>::min();
// bad_input "FLAG: expected <expected>, got V" for a given value below 1; ok when unset.
Status positive_if_given(int64_t v, const char* flag, const char* expected = "a positive integer");

struct JobFlags {
  std::string model;            // preset id or path
  std::string params;           // "7B": nearest preset
  std::string family;           // restricts --params
  std::string gpu = "a100-80g";
  std::string cluster;          // node preset id; overrides --gpu
  int gpus = 8;
  int gpus_per_node = kUnsetFlag;  // the preset's
  int64_t seq = 2048;
  int64_t doc_len = 0;
  int64_t global_batch = 512;
  std::string mode = "pretrain";
  int lora_rank = 8;
  double lora_alpha = 16;
  std::vector<std::string> lora_targets{"q", "v"};
  int frozen_layers = 0;
  double frozen_fraction = 0;
  std::string precision;        // "" = bf16 (or the sweep's choice)
  std::string amp;
  std::string optimizer = "adamw";
  std::string moments = "fp32";
  std::string grads = "deepspeed";
  std::string fp8;  // FP8 recipe name; empty: none
  std::string headroom = "0";
  std::string data_root;        // "" = default_data_root()
  std::string stack;            // training-stack profile id or file; "" = the default (llmplan)
  std::string framework;        // training framework (data/frameworks); "" = any
};

// Flags for a single plan (memory, explain). -1 / "" = not given.
struct PlanFlags {
  // kUnsetFlag: not given (any value a user can type, -1 included, is checked).
  int dp = kUnsetFlag, tp = kUnsetFlag, pp = kUnsetFlag, vpp = kUnsetFlag, cp = kUnsetFlag, ep = kUnsetFlag;
  std::string sp = "off";  // on|off, as the sweep's pins spell them
  int micro_batch = kUnsetFlag;
  int zero = kUnsetFlag;
  std::string recompute;
  int recompute_layers = 0;
  std::string offload = "off";
  int activation_offload_layers = 0;
  std::string flash = "on";
  bool old_no_flash = false;  // --no-flash, refused naming --flash off
  std::string schedule;
  std::vector<int> stage_layers;  // --stage-layers: a custom split, one count per virtual stage
};

// "on" / "off" for a flag such as --sp; empty (a bare flag) or anything else is bad input
// naming the flag and `choices`, the spellings the flag takes (a flag that also takes
// "params" or "both" says so). The sweep's pins and the single-plan commands share this.
Result<bool> parse_on_off(const std::string& v, const char* flag, const char* choices = "on or off");

void add_job_flags(CLI::App* app, JobFlags* f);
void add_plan_flags(CLI::App* app, PlanFlags* f);

struct Setup {
  PresetRegistry presets;
  PlanFile file;             // model, cluster, job (+ plan for plan commands)
  double headroom_bytes = 0;
  std::string model_note;    // e.g. "--params 7B: picked llama2-7b (6.74B parameters)"
  StackProfile stack;        // --stack, else the default profile
  bool stack_given = false;  // --stack was given (else memory is also reported over every stack's conventions)
  std::string data_root;     // the folder the presets came from (--data-root or the default)
  std::optional<FrameworkSpec> framework;  // --framework: only the plans it runs
};

// --framework on top of a setup (after --stack): the framework, and its stack profile when
// --stack was not given.
Status apply_framework_flag(const std::string& framework, Setup* s);


// --stack on top of a setup: the profile, and the job's gradient convention from it.
Status apply_stack_flag(const std::string& stack, Setup* s);

// One plan's peak memory under every known stack's conventions: the range a plan must fit
// in when the stack is not known (planner/cost/stack_profile.h).
struct StackMemoryRange {
  double low = 0, high = 0;          // bytes, worst stage's total
  std::string low_stack, high_stack;
  bool fits_all = true;              // under every stack's conventions
};
StackMemoryRange memory_over_stacks(const PresetRegistry& presets, const PlanFile& f, double headroom_bytes);
void print_memory_over_stacks(const PresetRegistry& presets, const PlanFile& f, double headroom_bytes);

Result<PresetRegistry> load_presets(const std::string& data_root);
// Model, cluster and job from flags; validates sizes (bad_input naming the flag).
Result<Setup> setup_from_flags(const JobFlags& f);
// The plan from flags on top of a setup (dp derived from --gpus when not given).
Status apply_plan_flags(const PlanFlags& pf, Setup* s);

// A setup from a framework's launch configuration (llmplan import's formats; launch/launch.h):
// its model, cluster, job and plan, its framework (and so its stack) unless --framework or
// --stack is given. `gpu` empty: the format's usual GPU. Prints what it read and assumed.
struct ConfigFlags {
  std::string format;  // "" = detected
  std::string model;   // for configs without the model (DeepSpeed)
  std::string gpu;     // "" = the format's usual one
  int gpus_per_node = 0;
};
Result<Setup> setup_from_config(const std::string& path, const ConfigFlags& cf, const JobFlags& f);

// The sweep's options for a setup: its stack's memory and time conventions, the other
// stacks' memory conventions when none is named, its headroom. One place for the sweep,
// budget and explain commands.
SweepOptions sweep_options_for(const Setup& s);

// Prints "llmplan: <message>" on stderr and returns the status's exit code.
int report(const Status& s);

std::string gib(double bytes);  // "12.34 GiB"
std::string plan_summary(const ParallelPlan& p);  // "dp4 tp2 pp1 mb2 ga64 zero1 selective" ("cp2 all_gather" if not ring)

}  // namespace llmplan::cli
