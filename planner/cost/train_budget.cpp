#include "planner/cost/train_budget.h"

namespace llmplan {

TrainingBudget training_budget(double tokens, int gpus, int gpus_per_node, const StepTime& t, double goodput_fraction,
                               double price_per_gpu_hour, const EnergySpec& e) {
  TrainingBudget b;
  b.tokens = tokens;
  b.productive_s = tokens / t.tokens_per_s;
  b.wall_s = b.productive_s / goodput_fraction;
  b.gpu_hours = b.wall_s * gpus / 3600.0;
  b.cost = b.gpu_hours * price_per_gpu_hour;
  if (e.gpu_tdp_w > 0) {
    const double busy = 1 - t.bubble_fraction();
    b.gpu_power_w = e.gpu_tdp_w * (e.idle_fraction + (1 - e.idle_fraction) * busy);
    b.it_power_w = b.gpu_power_w * gpus + e.node_overhead_w * nodes_for(gpus, gpus_per_node);
    b.energy_kwh = b.it_power_w * e.pue * b.wall_s / 3.6e6;
    b.co2_kg = b.energy_kwh * e.grid_g_co2_per_kwh / 1000.0;
  }
  return b;
}

}  // namespace llmplan
