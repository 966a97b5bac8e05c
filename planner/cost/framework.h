// Training frameworks as data (data/frameworks/<name>.json): which plans a framework can
// run. Megatron-LM, NeMo 2 / Megatron-Bridge, DeepSpeed, torchtitan and MindSpore
// Transformers each support some parallel dimensions, ZeRO/FSDP modes, schedules,
// recompute granularities, precisions and offloads and refuse some combinations (DeepSpeed's
// pipeline engine refuses ZeRO-2/3; torchtitan has no ZeRO-1/2). A framework file lists
// those refusals as rules, each a conjunction of conditions on the plan, job and model with
// the framework's own words and the source (documentation page or source file at a named
// version) it comes from. `sweep --framework NAME` drops the plans a rule refuses, counting
// them per rule; without it, each plan is marked with the frameworks that can run it.
//
// A rule's condition on a field is a range ({"min": a, "max": b}), a list of allowed values
// ({"in": [...]}) or one value; the fields are named in framework_fields(). Names are
// resolved when the file is read, so checking a plan compares small integers (the sweep
// checks every plan it enumerates).
//
// Pure values and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/spec/specs.h"
#include "planner/spec/status.h"

namespace llmplan {

// The plan, job and model fields a rule may test, with their values as integers (booleans
// 0/1, enums by their declaration order in specs.h).
enum class FrameworkField : uint8_t {
  dp, tp, pp, vpp, cp, ep, sp, micro_batch, grad_accum, zero, recompute, recompute_layers, offload_optimizer, offload_params,
  activation_offload_layers, activation_kept_layers, flash_attention, schedule, cp_exchange, pipeline_split,  // plan
  mode, frozen_layers, precision, fp8, optimizer, moments,                             // job
  family, experts, qk_norm, attention_bias,                                            // model
  kCount
};
struct FrameworkFieldInfo {
  const char* name;      // as a rule names it: "zero", "mode", "experts"
  const char* values;    // the names an enum field takes ("none, selective, full, full_k"); "" for numbers
};
const std::vector<FrameworkFieldInfo>& framework_fields();  // indexed by FrameworkField

// One condition: the field's value lies in [min, max] and, when `in` is not empty, is one of `in`.
struct FrameworkCondition {
  FrameworkField field = FrameworkField::dp;
  int64_t min = INT64_MIN, max = INT64_MAX;
  std::vector<int64_t> in;
};

// The framework refuses every plan that meets all of `when`.
struct FrameworkRule {
  std::string id;                          // short name, unique in the file: "pipeline_zero23"
  std::vector<FrameworkCondition> when;
  std::string why;                         // the framework's rule in words, for messages
  std::string source;                      // documentation page or source file at a version
};

struct FrameworkSpec {
  std::string name;                        // "deepspeed"
  std::string description;
  std::string version;                     // the version the rules were read from
  std::vector<std::string> aliases;        // other names it answers to ("megatron-lm", ...)
  std::string stack;                       // its training-stack profile (data/stacks), "" none
  std::vector<std::string> exports;        // llmplan export formats that write it ("megatron", "nemo")
  std::string source;                      // where the whole file comes from
  std::vector<FrameworkRule> rules;
};

// The value of `f` for a plan of `m` trained as `j`.
int64_t framework_field_value(FrameworkField f, const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p);

// The index in fw.rules of the first rule that refuses the plan, or -1 when fw runs it.
int framework_refusal(const FrameworkSpec& fw, const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p);
// The same as a message naming the framework, its rule and source ("deepspeed refuses this
// plan: ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism (rule pipeline_zero23;
// deepspeed/runtime/pipe/engine.py L77-78, v0.16.4)"); empty when it runs it.
std::string framework_refusal_text(const FrameworkSpec& fw, const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p);

// Bit i set: frameworks[i] runs the plan (at most 32 frameworks).
uint32_t frameworks_running(const std::vector<FrameworkSpec>& frameworks, const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p);

// The "runs on" column of a plan marked with frameworks_running: one letter per framework
// (the first letter of its name that no earlier framework took), '-' where it does not run;
// and its legend, "D=deepspeed M=megatron I=mindformers ...".
std::string framework_letters(uint32_t mask, const std::vector<FrameworkSpec>& frameworks);
std::string framework_legend(const std::vector<FrameworkSpec>& frameworks);

// JSON in (data/frameworks/README.md has the format); every problem is bad_input naming the
// file and field. A file with "extends": NAME takes NAME's rules (resolved by the registry,
// which passes `base`) less those its "lifts" names, then adds its own.
Result<FrameworkSpec> framework_from_json(const nlohmann::json& j, const std::string& origin, const FrameworkSpec* base = nullptr);
// The "extends" name of a framework file's JSON, "" when none.
std::string framework_extends(const nlohmann::json& j);

}  // namespace llmplan
