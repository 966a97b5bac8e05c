// Validation against published training runs (data/reference/README.md): read a file of
// schema llmplan-reference-runs/1, rebuild each record's model, cluster, job and plan,
// predict its throughput and memory with the planner's models, and compare with what was
// published, following the README's "How to compare" rules exactly:
//   throughput: tflops_per_gpu with the source's FLOP formula, else mfu/hfu on the
//               record's peak, else tokens/s per GPU;
//   memory:     by memory_scope (allocator peak, NVML used, model states, activations).
// A null field the prediction needs is either a skip ("missing <field>") or filled by a
// stated rule; every filled value is listed on the row and makes the row "assumed", and
// assumed rows are never pooled with fully specified ones in an error figure.
//
// The fit (`fit_efficiency`) tunes the time model's Efficiency constants on a fixed half
// of the fully specified throughput records (even position within each group) and the
// rest is held out, so that accuracy on records the model was not fitted to is reported.
//
// Thread-safety: pure functions over values; safe to call from several threads.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/memory_model.h"
#include "planner/presets.h"
#include "planner/specs.h"
#include "planner/status.h"
#include "planner/time_model.h"

namespace llmplan {

// ---------------------------------------------------------------- the record format
// One record of published_runs.json; null in the file is std::nullopt here. Strings keep
// the file's spelling ("gpt", "allocator_peak"); the reader checks them against the
// README's lists.

struct RefModel {
  std::string name;
  std::string family;                    // gpt llama mpt bloom bert t5 other
  std::optional<double> params;          // parameter count
  std::optional<int> layers, heads, kv_heads;
  std::optional<int64_t> hidden, ffn_hidden, vocab, seq_len;
  std::optional<std::string> activation; // gelu swiglu relu
  std::optional<std::string> norm;       // layernorm rmsnorm
  std::optional<bool> tied_embeddings;
};

struct RefCluster {
  std::string gpu;                       // GPU preset id, or "other" (analytic records)
  std::optional<std::string> gpu_description;
  std::optional<double> peak_tflops;     // the source's dense peak, TFLOP/s
  std::optional<int> n_gpus, gpus_per_node;
};

struct RefJob {
  std::optional<std::string> precision;  // fp32 fp16 bf16 fp8
  std::optional<int64_t> global_batch;   // sequences per optimizer step
  std::string mode;                      // pretrain finetune lora
};

struct RefPlan {
  std::optional<int> dp, tp, pp, cp, vpp, micro_batch, zero;
  int ep = 1;
  std::optional<bool> sp, offload;
  std::optional<std::string> recompute;  // none selective full
};

struct RefMeasured {
  std::optional<double> tflops_per_gpu;         // TFLOP/s per GPU, the source's count
  std::optional<std::string> flops_convention;  // model hardware
  std::optional<std::string> flops_formula;     // megatron_eq3 megatron_core llm_foundry chowdhery_mfu
  std::optional<double> mfu, hfu;               // 0..1
  std::optional<double> tokens_per_s_per_gpu;
  std::optional<double> step_time_s;
  std::optional<double> memory_gib_per_gpu;     // GiB (2^30 bytes)
  std::optional<bool> memory_includes_context;
  std::optional<std::string> memory_scope;      // allocator_peak nvml_used model_states activations
  std::optional<bool> oom;
};

struct ReferenceRecord {
  std::string id, group, source, quote, confidence, notes, kind, framework;
  RefModel model;
  RefCluster cluster;
  RefJob job;
  RefPlan plan;
  RefMeasured measured;
};

struct ReferenceSet {
  std::string origin;       // the file it was read from
  std::string description;
  std::vector<ReferenceRecord> records;
};

// Parses a reference-runs document. Every key of the README's schema must be present
// (null allowed where the README allows it); unknown keys, wrong types and unknown
// enum names are bad_input naming the file and field, e.g.
// "runs.json: field 'records[3].model.layers': expected an integer in [1, 100000], got -2".
Result<ReferenceSet> parse_reference_runs(const nlohmann::json& doc, const std::string& origin);
Result<ReferenceSet> load_reference_runs(const std::string& path);
// <default_data_root()>/data/reference/published_runs.json
std::string default_reference_path();

// ---------------------------------------------------------------- FLOP formulas
// FLOPs of one optimizer step over all GPUs as each source counts them (formulas.md §2).
// B sequences per step, s tokens per sequence.

// Narayanan et al. 2021 Eq. 3: 24·c·B·s·L·h²·(1 + s/(6h) + V/(16·L·h)); c = 4 with
// activation checkpointing (hardware FLOPs), 3 without.
double megatron_eq3_flops(double B, double s, double L, double h, double V, int c);
// Megatron-Core num_floating_point_operations (no recompute; GQA- and SwiGLU-aware):
// 12·B·s·L·h²·[(1 + g/a + s/h)·(a·d/h) + (f/h)·(3/2 if gated) + V/(2·L·h)].
double megatron_core_flops(double B, double s, double L, double h, double heads, double kv_heads, double head_dim, double ffn,
                           bool gated, double V);
// llm-foundry: (6·N + 12·L·h·s) per token (attention not halved), ×4/3 for HFU with
// activation checkpointing (`hardware`).
double llm_foundry_flops(double B, double s, double N, double L, double h, bool hardware);
// Chowdhery et al. 2022 (PaLM) MFU: (6·N + 12·L·q·s) per token, q = heads·head_dim.
double chowdhery_flops(double B, double s, double N, double L, double q_width);

// ---------------------------------------------------------------- predictions

// A record turned into spec structs. Null fields were skipped (`skip`) or filled by a
// rule listed in `assumptions`; `notes` list stated defaults that are not record fields
// (the node size when gpus_per_node is null, the preset peak when the record has none).
struct PreparedRecord {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingJob job;
  ParallelPlan plan;
  int gpus = 0;
  bool has_architecture = false;         // layers/hidden/heads known (else params-only analytic)
  bool hardware_known = false;           // a GPU preset (not "other")
  MemoryOptions memory;                  // the record's framework conventions (framework_memory_options)
  Efficiency efficiency;                 // the options' constants with the framework's kernels (framework_efficiency)
  std::vector<std::string> sweep_knobs;  // null plan knobs the sweep filled
  std::vector<std::string> assumptions, notes;
  std::string skip;                      // non-empty: no prediction ("missing seq_len")
};
struct ValidationOptions;
// `base` with the memory conventions of the record's framework where they differ from
// llmplan's executor (the defaults): torchtitan's per-operator selective checkpointing and
// its cross-entropy on fp32-upcast logits. Keyed on the framework only, never the record.
MemoryOptions framework_memory_options(const ReferenceRecord& r, const MemoryOptions& base);
// `base` with the framework's kernel conventions where they differ from the defaults (the
// cross-entropy's bytes per logit of llm.c's fused classifier); never a fitted constant.
// Keyed on the framework only, never the record.
Efficiency framework_efficiency(const ReferenceRecord& r, const Efficiency& base);
PreparedRecord prepare_record(const ReferenceRecord& r, const PresetRegistry& presets, const ValidationOptions& opt);

enum class Metric { tflops_per_gpu, mfu, hfu, tokens_per_s, memory };
const char* to_string(Metric m);

struct ValidationRow {
  std::string id, group, confidence, kind;
  int index_in_group = 0;      // position of the record in its group (file order)
  bool throughput = true;      // a throughput row (else memory)
  Metric metric = Metric::tokens_per_s;
  std::string unit;            // "TFLOP/s", "MFU", "tok/s", "GiB"
  double published = 0;
  double predicted = 0;
  double error = 0;            // predicted / published - 1
  bool skipped = false;
  std::string skip_reason;     // "missing seq_len", ...
  bool assumed = false;        // some null field was filled by a rule
  std::vector<std::string> assumptions;  // "micro_batch=2 (sweep: fastest fitting plan)"
  std::vector<std::string> notes;        // stated defaults that are not record fields
  bool predicted_oom = false;  // planner says the plan does not fit (wrong when oom == false)
  double peak_fraction = 0;    // predicted peak memory / GPU capacity (throughput rows)
  bool fitting_subset = false; // used by the fit (see in_fitting_subset)
  std::string plan;            // the plan predicted, e.g. "dp8 tp1 pp1 mb2 ga1 zero3 full"
};

struct ValidationOptions {
  Efficiency efficiency;       // time-model constants (default: the fitted defaults)
  MemoryOptions memory;
  int sweep_threads = 1;       // threads for the sweep that fills missing plan knobs
  bool fully_specified_throughput_only = false;  // skip the rest (the fit's inner loop)
};

// One row per comparison (a throughput+memory record gives two). REQUIRES: `presets`
// holds every GPU id the records name (an unknown one becomes a skipped row).
std::vector<ValidationRow> validate_records(const ReferenceSet& set, const PresetRegistry& presets, const ValidationOptions& opt);

// ---------------------------------------------------------------- summaries

struct ErrorStats {
  int n = 0;
  double median_abs = 0;   // median of |error|
  double max_abs = 0;
  std::string worst_id;
};
ErrorStats error_stats(const std::vector<const ValidationRow*>& rows);

enum class Subset { all, fitted, held_out };
struct SummaryLine {
  std::string group;       // a group name, or "ALL"
  bool throughput = true;
  bool assumed = false;
  ErrorStats all, fitted, held_out;
  int skipped = 0;
  int predicted_oom = 0;
};
// Per group and overall ("ALL"), throughput and memory, fully specified and assumed kept
// apart; lines with no rows are left out.
std::vector<SummaryLine> summarize(const std::vector<ValidationRow>& rows);
// Per confidence level (high/medium/low), same split; `group` holds the level.
std::vector<SummaryLine> summarize_by_confidence(const std::vector<ValidationRow>& rows);

// ---------------------------------------------------------------- the fit

// The deterministic fitting rule: a fully specified throughput row whose position among
// the fully specified throughput rows of its group is even. Odd positions are held out.
bool in_fitting_subset(int position_in_group_throughput);

struct FitReport {
  Efficiency start, fitted;
  double objective_start = 0, objective_fitted = 0;  // on the fitting subset
  int evaluations = 0;
  int rows = 0;                // rows the objective used
};
// The fit's fixed starting point: physical priors (large GEMMs at 80% of peak, flash
// attention at 55%, no traffic terms, 90% of DP traffic hidden, 75% of HBM bandwidth,
// 80% of link bandwidth, fp8 GEMMs 1.5x). Independent of the compiled-in defaults, so
// that `llmplan validate --fit` reproduces the defaults whatever they currently are.
Efficiency fit_prior();

// Nelder-Mead (with restarts) from `start.efficiency` over the Efficiency fields named in
// efficiency_field_names(), minimising on the fitting subset, with e = |log(pred/pub)|:
// 0.5 median(e) + 0.5 mean(e) + 0.1 max(e) + sum(max(0, e - log 1.12)). Deterministic:
// the same file, presets and start give the same constants.
FitReport fit_efficiency(const ReferenceSet& set, const PresetRegistry& presets, const ValidationOptions& start);

// The fit's objective for `opt.efficiency` on the fitting subset (lower is better).
double fit_objective(const ReferenceSet& set, const PresetRegistry& presets, const ValidationOptions& opt);

// The Efficiency fields the fit tunes, in order, with access by index (for printing).
std::vector<std::string> efficiency_field_names();
double* efficiency_field(Efficiency* e, int index);

}  // namespace llmplan
