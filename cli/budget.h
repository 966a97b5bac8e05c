// The flags and printers of goodput, cost and energy, shared by `sweep --tokens` and
// `budget`: failure data, checkpoint storage, restart time, price, power, PUE and grid
// intensity, turned into the planner's GoodputOptions and EnergySpec with the data
// folder's defaults (planner/io/economics.h), each default named with its source.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/common.h"
#include "planner/cost/goodput.h"
#include "planner/cost/train_budget.h"
#include "planner/io/economics.h"
#include "planner/search/sweep.h"

namespace llmplan::cli {

struct BudgetFlags {
  std::string tokens;  // token budget, e.g. "15T"; "" = none
  double price_per_gpu_hour = 0;
  std::string failure_source;  // id in data/reliability/failures.json; "" = its default
  double mtbf_hours = 0;
  double restart_minutes = 10;
  double storage_write_gbs = 10, storage_read_gbs = 0, storage_aggregate_gbs = 0;
  bool async_checkpoint = false;
  double checkpoint_minutes = 0;
  double gpu_power_w = 0, pue = 0, grid_intensity = 0;
  // Which of the optional numbers were typed (their zero is then checked, not "unset").
  CLI::Option *price_opt = nullptr, *mtbf_opt = nullptr, *read_opt = nullptr, *aggregate_opt = nullptr, *interval_opt = nullptr,
              *power_opt = nullptr, *pue_opt = nullptr, *grid_opt = nullptr;
};
void add_budget_flags(CLI::App* app, BudgetFlags* f, bool with_tokens = true);

// The flags resolved against the data folder for one setup's GPU and node.
struct BudgetSetup {
  EconomicsData data;
  GoodputOptions goodput;
  EnergySpec energy;
  double tokens = 0;              // 0 = no --tokens
  double price_per_gpu_hour = 0;  // 0 = not known
  std::string price_note;         // where the price comes from
  std::string failure_note;       // which failure source and its rates
};
// The typed numbers' ranges alone (bad_input naming the flag), without reading any data.
Status check_budget_flags(const BudgetFlags& f);
// Checks the flags and reads the data folder's reliability, price and power files.
Result<BudgetSetup> budget_setup(const BudgetFlags& f, const Setup& s);
// The same GPU and node data for another setup of the same flags (another GPU count).
void retarget_budget(const Setup& s, const BudgetFlags& f, BudgetSetup* b);

// "Training 15T tokens: ..." with goodput, GPU-hours, money, energy and CO2 lines.
void print_training_budget(const TrainingBudget& b, const Goodput& g, const BudgetSetup& bs, int gpus);

// "1.5 d", "3.2 h", "14 min": a duration in the unit that reads best.
std::string duration_text(double seconds);
// "$1.23M", "$4,560": money.
std::string money_text(double usd);

}  // namespace llmplan::cli
