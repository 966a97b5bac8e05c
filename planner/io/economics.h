// The data behind goodput, cost and energy (planner/cost/goodput.h, train_budget.h), read
// from the data folder: data/reliability/failures.json (published interruption counts by
// cause, from which per-GPU-hour and per-node-hour rates are derived), data/economics/
// prices.json (cloud prices per GPU-hour with provider, date and source) and data/economics/
// power.json (GPU board power, node overhead, idle fraction, PUE). Every problem in a file
// is bad input naming the file and field; GPU and node ids must be known presets.
//
// Thread-safety: immutable after load.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner/cost/goodput.h"
#include "planner/cost/train_budget.h"
#include "planner/io/presets.h"
#include "planner/spec/status.h"

namespace llmplan {

struct FailureCause {
  std::string cause;
  bool per_gpu = true;  // scale "gpu" (else "node")
  int64_t count = 0;
};

// One published record of a job's interruptions and the rates derived from it.
struct FailureSource {
  std::string id, source;
  int gpus = 0, gpus_per_node = 0;
  double days = 0;
  int64_t planned = 0;
  std::vector<FailureCause> causes;
  FailureRates rates;  // derived: GPU causes / GPU-hours, node causes / node-hours, planned / node-hours
  int64_t unexpected() const;
};

struct PriceOffer {
  std::string gpu, provider, offer, date, source;
  double per_gpu_hour = 0;
};

struct PowerFact {
  double watts = 0;
  std::string source;
};

struct EconomicsData {
  std::vector<FailureSource> failure_sources;
  std::string default_failure_source;
  std::vector<PriceOffer> offers;
  std::map<std::string, PowerFact> gpu_tdp;        // by GPU preset id
  std::map<std::string, PowerFact> node_overhead;  // by node (cluster) preset id
  double idle_fraction = 0.1, pue = 1.1, default_node_overhead_per_gpu_tdp = 0.8;
  std::string idle_source, pue_source, default_node_overhead_source;
  std::string origin;  // the data folder read

  // nullptr when the id is not listed.
  const FailureSource* failure_source(const std::string& id) const;
  // The first offer listed for the GPU; nullptr when none.
  const PriceOffer* default_offer(const std::string& gpu_id) const;
  // Power of a node of `c` (its GPU's TDP, the node's overhead or the default share of the
  // GPUs' TDP), idle fraction and PUE; gpu_tdp_w = 0 when the GPU has no entry.
  EnergySpec energy_for(const ClusterSpec& c) const;
  // The planner's goodput defaults with this data: the default source's failure rates and
  // GoodputOptions' own storage, relaunch and interval defaults (what `llmplan sweep
  // --tokens` uses when no flag changes them).
  GoodputOptions default_goodput_options() const;
};

// Reads the three files under `root` (the folder holding data/). `presets` checks ids.
Result<EconomicsData> load_economics(const std::string& root, const PresetRegistry& presets);
// The same from parsed documents (tests, fuzzing); origins name them in messages.
Result<EconomicsData> economics_from_json(const nlohmann::json& failures, const std::string& failures_origin, const nlohmann::json& prices,
                                          const std::string& prices_origin, const nlohmann::json& power, const std::string& power_origin,
                                          const PresetRegistry& presets);

}  // namespace llmplan
