// What training a token budget on a plan costs: wall-clock time with the plan's goodput,
// GPU-hours, money and energy.
//
// Energy: each GPU draws its board power at the plan's utilisation, P = TDP x (idle +
// (1 - idle) x busy), busy the fraction of the step a GPU runs kernels (all but the
// pipeline bubble: NCCL kernels draw power too); each node adds its non-GPU power (CPUs,
// memory, NICs, fans); the facility multiplies by its PUE. Every wall-clock hour is charged
// at the training draw, restarts and checkpoints included: an upper bound, as the Llama 3
// model card charges each GPU-hour at TDP. data/economics/ holds the powers, prices and
// PUE with their sources.
//
// Pure functions. Thread-safety: pure.
#pragma once

#include "planner/cost/goodput.h"
#include "planner/cost/time_model.h"

namespace llmplan {

struct EnergySpec {
  double gpu_tdp_w = 0;         // board power limit; 0 = not known: no energy figure
  double idle_fraction = 0.1;   // of TDP, drawn by an idle GPU (see data/economics/power.json)
  double node_overhead_w = 0;   // non-GPU power of one node at training load
  double pue = 1.1;             // facility power / IT power
  double grid_g_co2_per_kwh = 0;  // 0 = not given: no CO2 figure
};

struct TrainingBudget {
  double tokens = 0;
  double productive_s = 0;     // training time without interruptions: tokens / tokens_per_s
  double wall_s = 0;           // with goodput: productive_s / goodput
  double gpu_hours = 0;        // wall_s x gpus
  double cost = 0;             // gpu_hours x price (0 when no price)
  double gpu_power_w = 0;      // one GPU's draw while training
  double it_power_w = 0;       // the job's GPUs and nodes
  double energy_kwh = 0;       // facility energy (x PUE); 0 when no TDP
  double co2_kg = 0;           // energy x grid intensity; 0 when not given
};
// REQUIRES: tokens > 0, t.tokens_per_s > 0, 0 < goodput_fraction <= 1.
TrainingBudget training_budget(double tokens, int gpus, int gpus_per_node, const StepTime& t, double goodput_fraction,
                               double price_per_gpu_hour, const EnergySpec& e);

}  // namespace llmplan
