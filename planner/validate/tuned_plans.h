// How far the sweep's best plan is from a published, tuned plan under the same model:
// for each fully specified throughput record, the predicted step time of the plan the
// record ran against that of the fastest plan the sweep finds for the same model, GPUs,
// job and training stack, among the plans the record's framework runs (data/frameworks,
// where it has a file). A sweep that is right about what is fast finds nothing much
// faster than what tuned recipes use; a large gap means the model prefers plans that
// practice does not (or the recipe left speed on the table: the note says which).
//
// Thread-safety: reentrant (each record's sweep uses its own threads).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/io/presets.h"
#include "planner/validate/validate.h"

namespace llmplan {

struct TunedPlanGap {
  std::string id, group, stack;
  std::string framework;                  // the framework file the sweep was restricted to ("" none known)
  std::string published_plan, best_plan;  // plan_text() text
  double published_step_s = 0;            // predicted step time of the published plan, s
  double best_step_s = 0;                 // predicted step time of the sweep's best plan, s
  // published / best predicted step time: 1 when the sweep finds nothing faster, 1.08
  // when it predicts a plan 8% faster than the tuned one (below 1 when the published plan
  // uses what the sweep does not enumerate, e.g. activation offload).
  double speedup = 0;
  int64_t plans_evaluated = 0;
  std::string skip;  // non-empty: not compared, and why
};

// Records of `set` that publish a throughput with every plan knob given. `progress`
// (may be empty) is called before each record with (index, count, id).
std::vector<TunedPlanGap> tuned_plan_gaps(const ReferenceSet& set, const PresetRegistry& presets, const ValidationOptions& opt,
                                          const std::function<void(int, int, const std::string&)>& progress = {});

}  // namespace llmplan
