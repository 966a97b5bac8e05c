#include "cli/common.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <cstdio>

#include "launch/launch.h"
#include "planner/cost/plan_check.h"
#include "planner/spec/spec_json.h"
#include "planner/spec/recipe.h"
#include "planner/spec/units.h"

namespace llmplan::cli {

void add_job_flags(CLI::App* app, JobFlags* f) {
  app->add_option("--model", f->model, "model preset id, or a path to a model JSON / HF config.json");
  app->add_option("--params", f->params, "pick the preset nearest to this size (7B, 1.3e9, 350M)");
  app->add_option("--family", f->family, "restrict --params to a family prefix (gpt2, gpt3, llama2, llama3, mistral)");
  app->add_option("--gpu", f->gpu, "GPU preset id")->capture_default_str();
  app->add_option("--stack", f->stack, "training-stack profile (data/stacks: megatron-core, torchtitan, deepspeed, ...) or a stack file from llmplan calibrate; default llmplan");
  app->add_option("--framework", f->framework,
                  "training framework (data/frameworks: megatron, nemo, deepspeed, torchtitan, mindformers): only the plans it runs, "
                  "with its stack profile unless --stack is given");
  app->add_option("--cluster", f->cluster, "node/interconnect preset id (sets the GPU too)");
  app->add_option("--gpus", f->gpus, "number of GPUs")->capture_default_str();
  app->add_option("--gpus-per-node", f->gpus_per_node, "GPUs per node (default: the node preset's)");
  app->add_option("--seq", f->seq, "sequence length in tokens")->capture_default_str();
  app->add_option("--global-batch", f->global_batch, "sequences per optimizer step")->capture_default_str();
  app->add_option("--doc-len", f->doc_len,
                  "packed documents: tokens per document in each sequence, attention masked per document "
                  "(variable-length attention, as packed SFT runs it); 0 = none")
      ->capture_default_str();
  app->add_option("--mode", f->mode, "pretrain, finetune, lora or qlora (LoRA on 4-bit NF4 base weights, Dettmers et al. 2023)")->capture_default_str();
  app->add_option("--lora-rank", f->lora_rank, "LoRA rank r")->capture_default_str();
  app->add_option("--lora-alpha", f->lora_alpha, "LoRA alpha")->capture_default_str();
  app->add_option("--lora-targets", f->lora_targets, "LoRA target projections (q k v o gate up down)")->delimiter(',');
  app->add_option("--frozen-layers", f->frozen_layers, "freeze the bottom N layers");
  app->add_option("--frozen-fraction", f->frozen_fraction, "freeze this fraction of the bottom layers");
  app->add_option("--precision", f->precision, "fp32, fp16 or bf16");
  app->add_option("--amp", f->amp, "AMP level O1, O2 or O3 (MindSpore names)");
  app->add_option("--optimizer", f->optimizer, "adamw or sgd")->capture_default_str();
  app->add_option("--moments", f->moments,
                  "dtype of the optimizer's moments: fp32, or bf16 (Megatron-Core's precision-aware optimizer, "
                  "--exp-avg-dtype/--exp-avg-sq-dtype bf16)")
      ->capture_default_str();
  app->add_option("--grads", f->grads, "gradient convention: deepspeed (16 B/param) or megatron (18 B/param)")->capture_default_str();
  app->add_option("--fp8", f->fp8,
                  "float8 linear layers (16-bit elsewhere) by scaling recipe: tensorwise, delayed, blockwise or mxfp8 "
                  "(bare --fp8: tensorwise)")
      ->expected(0, 1)
      ->default_str("tensorwise");
  app->add_option("--headroom", f->headroom, "GPU memory to keep free (e.g. 4GiB)")->capture_default_str();
  app->add_option("--data-root", f->data_root, "folder with models/ and data/ (default: $LLMPLAN_DATA_DIR or the source tree)");
}

namespace {
// A flag's number in a message: NaN and infinities by name (std::to_string prints "nan").
std::string number_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "infinity" : "-infinity";
  return std::to_string(v);
}
}  // namespace

Status positive_if_given(int64_t v, const char* flag, const char* expected) {
  if (v != kUnsetFlag && v < 1) return Status::bad_input(std::string(flag) + ": expected " + expected + ", got " + std::to_string(v));
  return Status::ok();
}

Result<bool> parse_on_off(const std::string& v, const char* flag, const char* choices) {
  if (v == "on") return true;
  if (v == "off") return false;
  if (v.empty())
    return Status::bad_input(std::string(flag) + ": expected " + choices + " (a bare " + flag + " is the old spelling: write " + flag + " on)");
  return Status::bad_input(std::string(flag) + ": expected " + choices + ", got '" + v + "'");
}

void add_plan_flags(CLI::App* app, PlanFlags* f) {
  app->add_option("--dp", f->dp, "data-parallel degree (default: gpus/(tp*pp*cp))");
  app->add_option("--tp", f->tp, "tensor-parallel degree");
  app->add_option("--pp", f->pp, "pipeline-parallel degree");
  app->add_option("--vpp", f->vpp, "virtual stages per pipeline rank");
  app->add_option("--cp", f->cp, "context-parallel degree");
  app->add_option("--ep", f->ep, "expert-parallel degree (MoE)");
  // No default_str on these: CLI11 would give it to a bare --sp, which used to mean on.
  app->add_option("--sp", f->sp, "Megatron sequence parallel: on or off (default off)")->expected(0, 1);
  app->add_option("--micro-batch", f->micro_batch, "sequences per micro-batch");
  app->add_option("--zero", f->zero, "ZeRO stage 0-3");
  app->add_option("--recompute", f->recompute, "none, selective, full or full_k");
  app->add_option("--recompute-layers", f->recompute_layers, "k for --recompute full_k");
  app->add_option("--offload", f->offload, "offload to host memory: on (optimizer states), params (optimizer states and ZeRO-3's parameter shard) or off (default off)")->expected(0, 1);
  app->add_option("--activation-offload-layers", f->activation_offload_layers,
                  "offload the activations of the first N layers of each pipeline stage to host memory (Megatron cpu_offloading_num_layers)");
  app->add_option("--flash", f->flash, "fused (flash) attention: on, or off to materialise the attention scores")
      ->capture_default_str();
  app->add_flag("--no-flash", f->old_no_flash)->group("");  // the old spelling, refused with the new one
  app->add_option("--schedule", f->schedule, std::string("pipeline schedule: ") + kScheduleNames);
  app->add_option("--stage-layers", f->stage_layers,
                  "layers of each virtual stage, comma-separated (pp*vpp counts in the order chunk*pp + stage): a custom "
                  "split, as Megatron's --decoder-first/last-pipeline-num-layers or layout give")
      ->delimiter(',');
}

Status apply_stack_flag(const std::string& stack, Setup* s) {
  if (stack.empty()) {
    s->stack = s->presets.default_stack();
    s->stack_given = false;
    return Status::ok();
  }
  Result<StackProfile> st = s->presets.stack(stack, "--stack");
  if (!st) return st.status();
  s->stack = *st;
  s->stack_given = true;
  s->file.job = stack_job(s->stack, s->file.job);
  return Status::ok();
}

StackMemoryRange memory_over_stacks(const PresetRegistry& presets, const PlanFile& f, double headroom_bytes) {
  StackMemoryRange r;
  bool first = true;
  for (const StackMemory& sm : memory_under_stacks(presets.stacks(), f.model, f.cluster, f.job, f.plan, MemoryOptions{})) {
    const double t = sm.report.worst.total;
    if (first || t < r.low) r.low = t, r.low_stack = sm.stack;
    if (first || t > r.high) r.high = t, r.high_stack = sm.stack;
    r.fits_all = r.fits_all && sm.report.fits(headroom_bytes);
    first = false;
  }
  return r;
}

void print_memory_over_stacks(const PresetRegistry& presets, const PlanFile& f, double headroom_bytes) {
  if (presets.stacks().empty()) return;
  const StackMemoryRange r = memory_over_stacks(presets, f, headroom_bytes);
  std::printf("Peak over the known stacks' memory conventions: %s (%s) .. %s (%s): %s\n", gib(r.low).c_str(), r.low_stack.c_str(),
              gib(r.high).c_str(), r.high_stack.c_str(), r.fits_all ? "fits under every one" : "does NOT fit under every one");
  if (r.high_stack != r.low_stack) {
    Result<StackProfile> hi = presets.stack(r.high_stack);
    if (hi) {
      std::printf("  %s:", r.high_stack.c_str());
      for (const std::string& n : memory_convention_names(*hi, f.plan.tp, f.job.fp8_linear())) std::printf(" %s;", n.c_str());
      std::printf("\n");
    }
  }
  std::printf("  (give --stack NAME for one stack's own number)\n");
}

Status apply_framework_flag(const std::string& framework, Setup* s) {
  if (framework.empty()) return Status::ok();
  Result<FrameworkSpec> fw = s->presets.framework(framework, "--framework");
  if (!fw) return fw.status();
  s->framework = *fw;
  if (!s->stack_given && !fw->stack.empty()) return apply_stack_flag(fw->stack, s);
  return Status::ok();
}

SweepOptions sweep_options_for(const Setup& s) {
  SweepOptions opt;
  if (s.framework) opt.framework = &*s.framework;
  opt.mark_frameworks = s.presets.frameworks();
  opt.memory = stack_memory_options(s.stack, opt.memory);
  opt.efficiency = s.stack.efficiency;
  // The stack not named: a plan fits only under every known stack's memory conventions.
  if (!s.stack_given) opt.also_fit = distinct_memory_conventions(s.presets.stacks(), opt.memory, s.file.job);
  opt.headroom_bytes = s.headroom_bytes;
  return opt;
}

Result<PresetRegistry> load_presets(const std::string& data_root) {
  return PresetRegistry::load(data_root.empty() ? default_data_root() : data_root);
}

namespace {

template <class E>
Status parse_flag(const std::string& text, E* out, const char* flag, const char* expected) {
  if (!parse_enum(text, out)) return Status::bad_input(std::string(flag) + ": expected one of " + expected + ", got '" + text + "'");
  return Status::ok();
}

}  // namespace

Result<Setup> setup_from_flags(const JobFlags& f) {
  Result<PresetRegistry> reg = load_presets(f.data_root);
  if (!reg) return reg.status();
  Setup s{std::move(*reg), {}, 0, "", {}, false, f.data_root.empty() ? default_data_root() : f.data_root, std::nullopt};
  // ---- model
  if (!f.model.empty() && !f.params.empty()) return Status::bad_input("--model and --params: give one, not both");
  if (!f.model.empty()) {
    Result<ModelSpec> m = s.presets.resolve_model(f.model, "--model");
    if (!m) return m.status();
    s.file.model = *m;
  } else {
    Result<double> n = parse_count(f.params.empty() ? "7B" : f.params, "--params");
    if (!n) return n.status();
    if (*n > 1e14) return Status::bad_input("--params: expected fewer than 1e14 parameters, got " + f.params);
    Result<ModelSpec> m = s.presets.nearest_model(*n, f.family);
    if (!m) return m.status().with_context("--params");
    s.file.model = *m;
    s.model_note = "--params " + (f.params.empty() ? std::string("7B") : f.params) + ": using preset " + m->name + " (" +
                   format_count(count_params(*m, 1, 1, 1, 0, 0).total) + " parameters)";
  }
  // ---- cluster
  if (f.gpus < 1) return Status::bad_input("--gpus: expected a positive number of GPUs, got " + std::to_string(f.gpus));
  if (f.gpus > (1 << 20)) return Status::bad_input("--gpus: expected at most 1048576, got " + std::to_string(f.gpus));
  if (!f.cluster.empty()) {
    Result<ClusterPreset> cp = s.presets.cluster(f.cluster);
    if (!cp) return cp.status().with_context("--cluster");
    s.file.cluster = cp->cluster;
  } else {
    Result<ClusterSpec> c = s.presets.cluster_for_gpu(f.gpu);
    if (!c) return c.status().with_context("--gpu");
    s.file.cluster = *c;
  }
  if (f.gpus_per_node != kUnsetFlag) {
    if (f.gpus_per_node < 1 || f.gpus_per_node > (1 << 16))
      return Status::bad_input("--gpus-per-node: expected 1..65536, got " + std::to_string(f.gpus_per_node));
    s.file.cluster.gpus_per_node = f.gpus_per_node;
  }
  const int gpn = s.file.cluster.gpus_per_node;
  if (f.gpus > gpn && f.gpus % gpn != 0)
    return Status::bad_input("--gpus " + std::to_string(f.gpus) + ": not a whole number of nodes of " + std::to_string(gpn) +
                             " GPUs (--gpus-per-node or the node preset); expected a multiple of " + std::to_string(gpn) +
                             " or at most one node");
  s.file.cluster = cluster_with_gpus(s.file.cluster, f.gpus);  // whole nodes, or a partial one
  s.file.gpus = f.gpus;
  // ---- job
  TrainingJob& j = s.file.job;
  JobMode mode = JobMode::pretrain;
  if (Status st = parse_flag(f.mode, &mode, "--mode", kJobModeNames); !st) return st;
  set_job_mode(mode, &j);
  if (f.seq < 1 || f.seq > (int64_t{1} << 24)) return Status::bad_input("--seq: expected 1..16777216 tokens, got " + std::to_string(f.seq));
  if (f.global_batch < 1 || f.global_batch > 100000000)
    return Status::bad_input("--global-batch: expected 1..100000000 sequences, got " + std::to_string(f.global_batch));
  if (f.doc_len < 0 || f.doc_len > f.seq)
    return Status::bad_input("--doc-len: expected 0 (no packed documents) up to --seq " + std::to_string(f.seq) + " tokens, got " +
                             std::to_string(f.doc_len));
  j.seq_len = f.seq;
  j.doc_len = f.doc_len;
  j.global_batch = f.global_batch;
  if (f.lora_rank < 1) return Status::bad_input("--lora-rank: expected a positive rank, got " + std::to_string(f.lora_rank));
  j.lora.rank = f.lora_rank;
  if (!(f.lora_alpha > 0 && f.lora_alpha <= 1e9))
    return Status::bad_input("--lora-alpha: expected a positive number up to 1e9, got " + number_text(f.lora_alpha));
  j.lora.alpha = f.lora_alpha;
  j.lora.targets = f.lora_targets;
  for (const auto& t : j.lora.targets)
    if (!is_lora_target_name(t))
      return Status::bad_input(std::string("--lora-targets: expected names among ") + kLoraTargetNames + ", got '" + t + "'");
  if (f.frozen_layers < 0 || f.frozen_layers > s.file.model.layers)
    return Status::bad_input("--frozen-layers: expected 0.." + std::to_string(s.file.model.layers) + ", got " + std::to_string(f.frozen_layers));
  if (!(f.frozen_fraction >= 0 && f.frozen_fraction <= 1))  // NaN fails both
    return Status::bad_input("--frozen-fraction: expected 0..1, got " + number_text(f.frozen_fraction));
  j.frozen_layers = f.frozen_layers;
  j.frozen_fraction = f.frozen_fraction;
  j.precision = Precision::bf16;
  if (!f.precision.empty())
    if (Status st = parse_flag(f.precision, &j.precision, "--precision", "fp32, fp16, bf16"); !st) return st;
  j.amp = j.precision == Precision::fp32 ? AmpLevel::O0 : AmpLevel::O2;
  if (!f.amp.empty()) {
    if (Status st = parse_flag(f.amp, &j.amp, "--amp", "O1, O2, O3"); !st) return st;
    if (j.precision == Precision::fp32 && j.amp != AmpLevel::O0)
      return Status::bad_input("--amp: AMP levels need --precision fp16 or bf16, got fp32");
  }
  if (Status st = parse_flag(f.optimizer, &j.optimizer, "--optimizer", "adamw, sgd"); !st) return st;
  if (Status st = parse_flag(f.moments, &j.moments, "--moments", kMomentsDtypeNames); !st) return st;
  if (Status st = parse_flag(f.grads, &j.grads, "--grads", "deepspeed, megatron"); !st) return st;
  if (Status st = apply_stack_flag(f.stack, &s); !st) return st;  // after --grads: the stack's convention wins
  if (Status st = apply_framework_flag(f.framework, &s); !st) return st;
  if (!f.fp8.empty())
    if (Status st = parse_flag(f.fp8, &j.fp8, "--fp8", kFp8RecipeNames); !st) return st;
  Result<double> head = parse_bytes(f.headroom, "--headroom");
  if (!head) return head.status();
  s.headroom_bytes = *head;
  if (Status st = check_inputs(s.file.model, j, "flags"); !st) return st;
  return s;
}

Status apply_plan_flags(const PlanFlags& pf, Setup* s) {
  ParallelPlan& p = s->file.plan;
  for (auto [v, flag] : {std::pair{pf.dp, "--dp"}, {pf.tp, "--tp"}, {pf.pp, "--pp"}, {pf.vpp, "--vpp"}, {pf.cp, "--cp"}, {pf.ep, "--ep"},
                         {pf.micro_batch, "--micro-batch"}})
    if (Status st = positive_if_given(v, flag); !st) return st;
  p.tp = pf.tp > 0 ? pf.tp : 1;
  p.pp = pf.pp > 0 ? pf.pp : 1;
  p.cp = pf.cp > 0 ? pf.cp : 1;
  p.vpp = pf.vpp > 0 ? pf.vpp : 1;
  p.ep = pf.ep > 0 ? pf.ep : 1;
  const ModelSpec& m = s->file.model;
  if (m.heads % p.tp != 0 || m.kv_heads % p.tp != 0)
    return Status::bad_input("--tp: expected a divisor of heads (" + std::to_string(m.heads) + ") and kv_heads (" +
                             std::to_string(m.kv_heads) + "), got " + std::to_string(p.tp));
  const int64_t mp = static_cast<int64_t>(p.tp) * p.pp * p.cp;
  if (pf.dp > 0) {
    p.dp = pf.dp;
  } else {
    if (s->file.gpus % mp != 0)
      return Status::bad_input("--gpus: " + std::to_string(s->file.gpus) + " GPUs cannot be split by tp*pp*cp = " + std::to_string(mp));
    p.dp = static_cast<int>(s->file.gpus / mp);
  }
  // --offload params: the optimizer states and ZeRO-3's parameter shard.
  const bool offload_params = pf.offload == "params";
  Result<bool> sp = parse_on_off(pf.sp, "--sp"), offload = offload_params ? Result<bool>(true) : parse_on_off(pf.offload, "--offload", "on, params or off"),
               flash = parse_on_off(pf.flash, "--flash");
  if (pf.old_no_flash) return Status::bad_input("--no-flash: this flag is now spelled --flash off");
  if (!sp) return sp.status();
  if (!offload) return offload.status();
  if (!flash) return flash.status();
  p.sp = *sp;
  p.micro_batch = pf.micro_batch > 0 ? pf.micro_batch : 1;
  if (pf.zero != kUnsetFlag && (pf.zero < 0 || pf.zero > 3))
    return Status::bad_input("--zero: expected 0, 1, 2 or 3, got " + std::to_string(pf.zero));
  p.zero = pf.zero != kUnsetFlag ? pf.zero : 0;
  if (!pf.recompute.empty())
    if (Status st = parse_flag(pf.recompute, &p.recompute, "--recompute", "none, selective, full, full_k"); !st) return st;
  p.recompute_layers = pf.recompute_layers;
  if (pf.activation_offload_layers < 0)
    return Status::bad_input("--activation-offload-layers: expected a count >= 0, got " + std::to_string(pf.activation_offload_layers));
  p.activation_offload_layers = pf.activation_offload_layers;
  p.offload_optimizer = *offload;
  p.offload_params = offload_params;
  p.flash_attention = *flash;
  p.schedule = p.vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  if (!pf.schedule.empty())
    if (Status st = parse_flag(pf.schedule, &p.schedule, "--schedule", kScheduleNames); !st) return st;
  if (v_shape(p.schedule) && p.vpp == 1) p.vpp = 2;  // a V is two chunks per rank
  if (!pf.stage_layers.empty()) {
    const int64_t stages = static_cast<int64_t>(p.pp) * p.vpp;
    for (int n : pf.stage_layers)
      if (n < 1) return Status::bad_input("--stage-layers: expected counts of at least 1, got " + std::to_string(n));
    if (static_cast<int64_t>(pf.stage_layers.size()) != stages)
      return Status::bad_input("--stage-layers: expected pp*vpp = " + std::to_string(stages) + " counts, got " +
                               std::to_string(pf.stage_layers.size()));
    p.pipeline_split = PipelineSplit::custom;
    p.stage_layers = pf.stage_layers;
  }
  const int64_t world = static_cast<int64_t>(p.dp) * mp;
  if (world != s->file.gpus)
    return Status::bad_input("--dp/--tp/--pp/--cp: the plan uses dp*tp*pp*cp = " + std::to_string(world) + " GPUs but --gpus is " +
                             std::to_string(s->file.gpus) + " (expected equal)");
  if (Status st = check_plan_status(s->file.model, s->file.cluster, s->file.job, p, s->file.gpus, "flags"); !st) return st;
  p.grad_accum = static_cast<int>(s->file.job.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp));
  return Status::ok();
}

Result<Setup> setup_from_config(const std::string& path, const ConfigFlags& cf, const JobFlags& f) {
  Result<PresetRegistry> reg = load_presets(f.data_root);
  if (!reg) return reg.status();
  Setup s{std::move(*reg), {}, 0, "", {}, false, f.data_root.empty() ? default_data_root() : f.data_root, std::nullopt};
  Result<std::vector<LaunchFile>> files = read_launch_files(path);
  if (!files) return files.status();
  LaunchFormat format{};
  if (!cf.format.empty()) {
    if (!parse_enum(cf.format, &format))
      return Status::bad_input("--format: expected one of " + std::string(kLaunchFormatNames) + ", got '" + cf.format + "'");
  } else {
    Result<LaunchFormat> d = detect_format(*files, path);
    if (!d) return d.status();
    format = *d;
  }
  ImportOptions opt;
  opt.presets = &s.presets;
  opt.model = cf.model;
  opt.gpu = cf.gpu;
  opt.gpus_per_node = cf.gpus_per_node;
  Result<ImportedConfig> imp = import_files(*files, format, opt, path);
  if (!imp) return imp.status();
  s.file = imp->file;
  s.model_note = "read " + path + " as a " + to_string(format) + " configuration";
  for (const std::string& n : imp->notes) s.model_note += "\n  assumed: " + n;
  if (!imp->unknown_keys.empty()) {
    s.model_note += "\n  not used by llmplan:";
    for (const std::string& k : imp->unknown_keys) s.model_note += " " + k;
  }
  Result<double> head = parse_bytes(f.headroom, "--headroom");
  if (!head) return head.status();
  s.headroom_bytes = *head;
  // The configuration says how its gradients are kept: that wins over the stack's default.
  const GradConvention config_grads = s.file.job.grads;
  if (Status st = apply_stack_flag(f.stack, &s); !st) return st;
  // The configuration's own framework, unless another is named.
  std::string framework = f.framework;
  if (framework.empty()) {
    const std::vector<FrameworkSpec> all = s.presets.frameworks();
    if (const FrameworkSpec* fw = framework_for_format(all, format)) framework = fw->name;
  }
  if (Status st = apply_framework_flag(framework, &s); !st) return st;
  s.file.job.grads = config_grads;
  return s;
}

int report(const Status& s) {
  if (!s.is_ok()) std::fprintf(stderr, "llmplan: %s\n", s.message().c_str());
  return s.exit_code();
}

std::string gib(double bytes) { return format_gib(bytes); }

std::string plan_summary(const ParallelPlan& p) {
  char buf[160];
  // The CP exchange is named only when it is not the default ring (the sweep's plans).
  const std::string cp = p.cp > 1 ? " cp" + std::to_string(p.cp) + (p.cp_exchange == CpExchange::ring ? "" : " all_gather") : "";
  std::snprintf(buf, sizeof buf, "dp%d tp%d pp%d%s%s%s%s%s mb%d ga%d zero%d %s%s%s", p.dp, p.tp, p.pp,
                p.vpp > 1 ? (" vpp" + std::to_string(p.vpp)).c_str() : "",
                p.pipeline_split == PipelineSplit::even ? "" : p.pipeline_split == PipelineSplit::custom ? " split-custom" : " split-emb-loss", cp.c_str(),
                p.ep > 1 ? (" ep" + std::to_string(p.ep)).c_str() : "", p.sp ? " sp" : "", p.micro_batch, p.grad_accum, p.zero, recompute_text(p).c_str(), p.offload_params ? " offload-params" : p.offload_optimizer ? " offload" : "",
                p.flash_attention ? "" : " no-flash");
  std::string out = buf;
  // A schedule other than the one vpp implies (1F1B, interleaved) is named.
  if (p.pp > 1 && (p.schedule == Schedule::gpipe || splits_backward(p.schedule))) out += std::string(" ") + to_string(p.schedule);
  if (p.activation_offload_layers > 0) out += " act-offload " + std::to_string(p.activation_offload_layers);
  return out;
}

}  // namespace llmplan::cli
