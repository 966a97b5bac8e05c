// What the sweep form asks for, turned into the planner's inputs exactly as `llmplan
// sweep` turns its flags into them (cli/common.cpp setup_from_flags + cli/cmd_sweep.cpp),
// so that the GUI and the CLI rank the same plans in the same order. cli_args() gives the
// equivalent command line; the GUI shows it and the tests run it.
//
// Qt-free. Thread-safety: pure functions over plain values.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "planner/io/plan_file.h"
#include "planner/io/presets.h"
#include "planner/spec/status.h"
#include "planner/search/sweep.h"

namespace llmplan::gui {

// The form's values, with the CLI's flag names and defaults. Empty strings mean "not
// given" (the CLI's default applies).
struct SweepInputs {
  std::string model = "llama2-7b";  // --model: preset id, or a path to a model JSON / HF config.json
  std::string gpu = "a100-80g";     // --gpu
  std::string cluster;              // --cluster: node preset id; "" = the GPU's usual node
  int gpus = 8;                     // --gpus
  int64_t seq = 2048;               // --seq, tokens
  int64_t global_batch = 512;       // --global-batch, sequences per optimizer step
  std::string mode = "pretrain";    // --mode: pretrain, finetune, lora, qlora
  int lora_rank = 8;                // --lora-rank
  std::vector<std::string> lora_targets{"q", "v"};  // --lora-targets
  std::string precision;            // --precision: "" (bf16 where the GPU has it), fp32, fp16, bf16
  std::string amp;                  // --amp: "" (O2, O0 for fp32), O1, O2, O3
  int max_tp = 0;                   // --max-tp, 0 = no bound
  std::string schedules;            // --schedules: "" (1F1B and interleaved), "all" (with ZB-H1, ZB-V, DualPipeV, DualPipe)
  double headroom_gib = 0;          // --headroom, GiB kept free on every GPU
  std::string framework;            // --framework: "" = any (data/frameworks); its stack's conventions
  std::string objective = "tokens-per-s";  // --objective: tokens-per-s, memory, cost
  int top = 100;                    // --top: plans ranked by the objective
};

// Everything run_sweep needs, plus what the GUI needs to cost a selected plan.
struct SweepRequest {
  PlanFile base;              // model, cluster, job (precision as the sweep uses it), gpus; plan unset
  SweepSpace space;
  SweepOptions options;       // objective, headroom, top_k; progress/cancel left empty
  double headroom_bytes = 0;
  // The cost objective ranks by GPU-hours at each plan's goodput, as `llmplan sweep
  // --objective cost` does with the data folder's defaults; options.goodput points here.
  std::shared_ptr<const GoodputOptions> goodput;
  // The framework the sweep is restricted to; options.framework points here. nullptr: any.
  std::shared_ptr<const FrameworkSpec> framework;
};

// Validates like the CLI (bad_input with a message naming the field); REQUIRES nothing.
Result<SweepRequest> make_sweep_request(const SweepInputs& in, const PresetRegistry& presets);

// The `llmplan sweep` arguments (without the program and "sweep") for the same inputs.
std::vector<std::string> cli_args(const SweepInputs& in);
// The same as one shell-quoted line, "llmplan sweep --model llama2-7b ...".
std::string cli_command_line(const SweepInputs& in);

}  // namespace llmplan::gui
