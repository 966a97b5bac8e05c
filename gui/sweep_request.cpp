#include "gui/sweep_request.h"

#include <cctype>
#include <cstdio>

#include "planner/cost/plan_check.h"
#include "planner/io/economics.h"
#include "planner/spec/recipe.h"
#include "planner/spec/units.h"

namespace llmplan::gui {

namespace {

// "4GiB" for 4 GiB: the text both the GUI and the CLI hand to parse_bytes.
std::string headroom_text(double gib) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6gGiB", gib);
  return buf;
}

template <class E>
Status parse_field(const std::string& text, E* out, const char* field, const char* expected) {
  if (!parse_enum(text, out)) return Status::bad_input(std::string(field) + ": expected one of " + expected + ", got '" + text + "'");
  return Status::ok();
}

}  // namespace

// Mirrors cli::setup_from_flags and the space/options part of cli register_sweep. Keep the
// two in step: tests/gui compares the GUI's table with the CLI's output.
Result<SweepRequest> make_sweep_request(const SweepInputs& in, const PresetRegistry& presets) {
  SweepRequest r;
  PlanFile& f = r.base;
  // ---- model
  if (in.model.empty()) return Status::bad_input("Model: choose a preset or open a model JSON / HF config.json");
  Result<ModelSpec> m = presets.resolve_model(in.model, "Model");
  if (!m) return m.status();
  f.model = *m;
  // ---- cluster
  if (in.gpus < 1) return Status::bad_input("Number of GPUs: expected a positive number of GPUs, got " + std::to_string(in.gpus));
  if (in.gpus > (1 << 20)) return Status::bad_input("Number of GPUs: expected at most 1048576, got " + std::to_string(in.gpus));
  if (!in.cluster.empty()) {
    Result<ClusterPreset> cp = presets.cluster(in.cluster);
    if (!cp) return cp.status().with_context("Node");
    f.cluster = cp->cluster;
  } else {
    Result<ClusterSpec> c = presets.cluster_for_gpu(in.gpu);
    if (!c) return c.status().with_context("GPU");
    f.cluster = *c;
  }
  f.cluster = cluster_with_gpus(f.cluster, in.gpus);  // whole nodes, or a partial one
  f.gpus = in.gpus;
  // ---- job
  TrainingJob& j = f.job;
  JobMode mode = JobMode::pretrain;
  if (Status st = parse_field(in.mode, &mode, "Mode", kJobModeNames); !st) return st;
  set_job_mode(mode, &j);
  if (in.seq < 1 || in.seq > (int64_t{1} << 24))
    return Status::bad_input("Sequence length: expected 1..16777216 tokens, got " + std::to_string(in.seq));
  if (in.global_batch < 1 || in.global_batch > 100000000)
    return Status::bad_input("Global batch: expected 1..100000000 sequences, got " + std::to_string(in.global_batch));
  j.seq_len = in.seq;
  j.global_batch = in.global_batch;
  if (in.lora_rank < 1) return Status::bad_input("LoRA rank: expected a positive rank, got " + std::to_string(in.lora_rank));
  j.lora.rank = in.lora_rank;
  j.lora.targets = in.lora_targets;
  if (j.mode == TrainMode::lora && j.lora.targets.empty()) return Status::bad_input("LoRA targets: choose at least one projection");
  for (const auto& t : j.lora.targets)
    if (!is_lora_target_name(t))
      return Status::bad_input(std::string("LoRA targets: expected names among ") + kLoraTargetNames + ", got '" + t + "'");
  j.precision = Precision::bf16;
  if (!in.precision.empty())
    if (Status st = parse_field(in.precision, &j.precision, "Precision", "fp32, fp16, bf16"); !st) return st;
  j.amp = j.precision == Precision::fp32 ? AmpLevel::O0 : AmpLevel::O2;
  if (!in.amp.empty()) {
    if (Status st = parse_field(in.amp, &j.amp, "AMP level", "O1, O2, O3"); !st) return st;
    if (j.precision == Precision::fp32 && j.amp != AmpLevel::O0)
      return Status::bad_input("AMP level: AMP levels need precision fp16 or bf16, got fp32");
  }
  if (in.headroom_gib < 0) return Status::bad_input("Memory headroom: expected 0 GiB or more");
  Result<double> head = parse_bytes(headroom_text(in.headroom_gib), "Memory headroom");
  if (!head) return head.status();
  r.headroom_bytes = *head;
  if (Status st = check_inputs(f.model, j, "form"); !st) return st;
  // ---- sweep space and options (cli/cmd_sweep.cpp)
  if (in.max_tp < 0) return Status::bad_input("Max TP: expected 0 (no bound) or a positive bound");
  r.space.max_tp = in.max_tp;
  if (!in.schedules.empty())
    if (Status st = parse_sweep_schedules({in.schedules}, "Pipeline schedules", &r.space.schedule); !st) return st;
  if (!in.precision.empty()) {
    r.space.precision = {j.precision};
  } else {
    // Unpinned: the GPU's 16-bit format (bf16 where it has one) at O2, as the CLI does.
    j.precision = default_half_precision(f.cluster.gpu);
    r.space.precision = {j.precision};
  }
  if (!parse_enum(in.objective, &r.options.objective))
    return Status::bad_input("Objective: expected tokens-per-s, memory or cost, got '" + in.objective + "'");
  if (in.top < 1) return Status::bad_input("Ranked plans: expected a positive count, got " + std::to_string(in.top));
  r.options.top_k = in.top;
  r.options.headroom_bytes = r.headroom_bytes;
  // As the CLI: with a framework, its stack's conventions alone (cli apply_framework_flag);
  // without, a plan fits only under every known stack's memory conventions.
  r.options.mark_frameworks = presets.frameworks();
  if (!in.framework.empty()) {
    Result<FrameworkSpec> fw = presets.framework(in.framework, "Framework");
    if (!fw) return fw.status();
    r.framework = std::make_shared<const FrameworkSpec>(*fw);
    r.options.framework = r.framework.get();
    if (!fw->stack.empty()) {
      Result<StackProfile> st = presets.stack(fw->stack, "Framework");
      if (!st) return st.status();
      r.options.memory = stack_memory_options(*st, r.options.memory);
      r.options.efficiency = st->efficiency;
      j = stack_job(*st, j);
    }
  } else {
    r.options.also_fit = distinct_memory_conventions(presets.stacks(), r.options.memory, j);
  }
  if (r.options.objective == Objective::cost) {
    Result<EconomicsData> data = load_economics(default_data_root(), presets);
    if (!data) return data.status();
    r.goodput = std::make_shared<const GoodputOptions>(data->default_goodput_options());
    r.options.goodput = r.goodput.get();
  }
  return r;
}

std::vector<std::string> cli_args(const SweepInputs& in) {
  std::vector<std::string> a = {"--model", in.model};
  if (!in.cluster.empty()) a.insert(a.end(), {"--cluster", in.cluster});
  else a.insert(a.end(), {"--gpu", in.gpu});
  a.insert(a.end(), {"--gpus", std::to_string(in.gpus), "--seq", std::to_string(in.seq), "--global-batch", std::to_string(in.global_batch),
                     "--mode", in.mode});
  if (in.mode == "lora" || in.mode == "qlora") {
    std::string targets;
    for (const auto& t : in.lora_targets) targets += (targets.empty() ? "" : ",") + t;
    a.insert(a.end(), {"--lora-rank", std::to_string(in.lora_rank), "--lora-targets", targets});
  }
  if (!in.precision.empty()) a.insert(a.end(), {"--precision", in.precision});
  if (!in.amp.empty()) a.insert(a.end(), {"--amp", in.amp});
  if (in.max_tp > 0) a.insert(a.end(), {"--max-tp", std::to_string(in.max_tp)});
  if (!in.schedules.empty()) a.insert(a.end(), {"--schedules", in.schedules});
  if (in.headroom_gib > 0) a.insert(a.end(), {"--headroom", headroom_text(in.headroom_gib)});
  if (!in.framework.empty()) a.insert(a.end(), {"--framework", in.framework});
  a.insert(a.end(), {"--objective", in.objective, "--top", std::to_string(in.top)});
  return a;
}

std::string cli_command_line(const SweepInputs& in) {
  std::string line = "llmplan sweep";
  for (const std::string& arg : cli_args(in)) {
    bool plain = !arg.empty();
    for (char ch : arg) plain = plain && (std::isalnum(static_cast<unsigned char>(ch)) || std::string("-_./,:=+").find(ch) != std::string::npos);
    line += ' ';
    if (plain) {
      line += arg;
    } else {
      line += '\'';
      for (char ch : arg) line += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      line += '\'';
    }
  }
  return line;
}

}  // namespace llmplan::gui
