// The deepspeed format: ds_config.json + launch.sh (Megatron-DeepSpeed's pretrain_gpt.py under
// the deepspeed launcher). References: DeepSpeed v0.16.4's config keys
// (tests/fixtures/frameworks/deepspeed_keys.txt), Megatron-DeepSpeed's and the launcher's
// options (megatron_deepspeed_args.txt), the published configs deepspeed_example.json and
// deepspeed_example_zero3.json, and bash itself for what the launch line passes.
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "launch/deepspeed_schema.h"
#include "launch/launch.h"
#include "launch/shell_words.h"
#include "planner/search/explain.h"
#include "tests/launch/format_test_util.h"
#include "tests/launch/round_trip_plans.h"

namespace llmplan {
namespace {

using nlohmann::json;
using testing::expect_bad_input;
using testing::expect_round_trip;
using testing::import_options;
using testing::make_plan_file;
using testing::NamedPlan;
using testing::read_fixture;

// ---------------------------------------------------------------- references

// deepspeed_keys.txt: the key paths (first column) and, for aliased ZeRO fields, the field
// names the source column gives as "(field NAME)".
struct DeepSpeedKeys {
  std::set<std::string> paths;
  std::set<std::string> zero_field_names;  // "zero_optimization.prefetch_bucket_size", ...
};
const DeepSpeedKeys& deepspeed_keys() {
  static const DeepSpeedKeys k = [] {
    DeepSpeedKeys out;
    for (const std::vector<std::string>& cols : testing::fixture_rows("deepspeed_keys.txt")) {
      out.paths.insert(cols[0]);
      for (const std::string& c : cols)
        for (const std::string& name : testing::between_all(c, "(field ", ")"))
          if (testing::all_in(name, testing::kLowerDigitUnderscore)) out.zero_field_names.insert("zero_optimization." + name);
    }
    return out;
  }();
  return k;
}

// The leaf key paths of `j` that are not DeepSpeed keys.
std::vector<std::string> keys_not_in_deepspeed(const json& j, const std::string& prefix = "") {
  std::vector<std::string> bad;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      std::vector<std::string> sub = keys_not_in_deepspeed(*it, path);
      bad.insert(bad.end(), sub.begin(), sub.end());
    } else if (!deepspeed_keys().paths.count(path)) {
      bad.push_back(path);
    }
  }
  return bad;
}

// megatron_deepspeed_args.txt: option -> (section, takes a value, choices).
struct Option {
  std::string section;
  bool value = false;
  std::set<std::string> choices;
};
const std::map<std::string, Option>& megatron_deepspeed_options() {
  static const std::map<std::string, Option> opts = [] {
    std::map<std::string, Option> out;
    std::stringstream s(read_fixture("megatron_deepspeed_args.txt"));
    std::string section;
    for (std::string line; std::getline(s, line);) {
      if (line.rfind("## ", 0) == 0) section = line.substr(3);
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> cols;
      std::stringstream ls(line);
      for (std::string c; std::getline(ls, c, '\t');) cols.push_back(c);
      if (cols.size() < 3) continue;
      Option o{section, cols[1] == "value", {}};
      if (cols[2] != "-") {
        std::stringstream cs(cols[2]);
        for (std::string c; std::getline(cs, c, '|');) o.choices.insert(c);
      }
      std::stringstream names(cols[0]);
      for (std::string n; names >> n;) out[n] = o;
    }
    return out;
  }();
  return opts;
}

// Problems of a launch line's words (as bash passes them to `deepspeed`): an option the
// launcher or pretrain_gpt.py does not have, a value not among its choices, an option without
// its value, a word that is neither (such as a value given to a flag).
std::vector<std::string> launch_word_problems(const std::vector<std::string>& words) {
  std::vector<std::string> bad;
  const auto& opts = megatron_deepspeed_options();
  bool program_seen = false;
  for (size_t k = 0; k < words.size(); ++k) {
    const std::string& w = words[k];
    if (w.rfind("--", 0) != 0) {
      if (!program_seen && w.size() > 3 && w.compare(w.size() - 3, 3, ".py") == 0) program_seen = true;
      else bad.push_back("stray word " + w);
      continue;
    }
    auto it = opts.find(w);
    const bool launcher = !program_seen;
    if (it == opts.end() || (launcher != (it->second.section == "launcher"))) {
      bad.push_back(w);
      if (k + 1 < words.size() && words[k + 1].rfind("--", 0) != 0 && (program_seen || words[k + 1].find(".py") == std::string::npos)) ++k;
      continue;
    }
    if (!it->second.value) continue;  // a flag: a word after it is a stray one
    if (k + 1 >= words.size() || words[k + 1].rfind("--", 0) == 0) {
      bad.push_back(w + " without its value");
      continue;
    }
    if (!it->second.choices.empty() && !it->second.choices.count(words[k + 1])) bad.push_back(w + " " + words[k + 1]);
    ++k;
  }
  return bad;
}

Result<ImportedConfig> import_text(const std::string& config, const std::string& model = "", const std::string& script = "") {
  std::vector<LaunchFile> files = {{"ds_config.json", config, false}};
  if (!script.empty()) files.push_back({"launch.sh", script, true});
  return import_files(files, LaunchFormat::deepspeed, import_options("h100-sxm", model), "run");
}

// ---------------------------------------------------------------- the plans

// The matrix's plans DeepSpeed refuses, with the plan field each message must name.
const std::map<std::string, std::string> kRefusedMatrixPlans = {
    {"llama3-8b dp8 zero0", "plan.zero"},                     // bf16 without ZeRO runs as BF16_Optimizer (ZeRO-1-like)
    {"llama3-70b tp4 pp4 vpp5 cp2 sp zero1", "plan.cp"},      // no context parallelism (Ulysses is another scheme)
    {"llama3-70b tp8 pp2 full_k10", "plan.recompute"},        // the pipeline engine has no block recompute
    {"llama3.1-405b tp8 pp8 vpp8 cp2 uneven", "plan.cp"},
    {"qwen3-30b-a3b dp8 ep8 fp8", "job.fp8"},
    {"llama3-8b lora dp8", "job.mode"},
    {"llama3-8b pp2 zbv zero3", "plan.schedule"},  // TrainSchedule runs whole backward passes
    {"llama3-8b pp4 custom split", "plan.pipeline_split"},  // partitions by counting transformer layers
    {"llama3-8b dp8 zero1 bf16 moments", "job.moments"},  // fp32 moments only
};

// More plans for what the matrix leaves out: pipeline under the pipeline engine, fp16, fp32,
// optimizer offload, fine-tuning, full_k at pp 1, a GPT-family model; and refusals of the
// pipeline engine's rules. Expected: "" = round trips, else the field the refusal names.
std::vector<std::pair<NamedPlan, std::string>> extra_plans() {
  std::vector<std::pair<NamedPlan, std::string>> out;
  auto add = [&](const std::string& name, const std::string& model, int gpus, TrainingJob j, ParallelPlan p, const std::string& expect) {
    out.push_back({{name, make_plan_file(model, "h100-sxm", gpus, j, p)}, expect});
  };
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 128;
  ParallelPlan p;
  p.dp = 4, p.tp = 8, p.pp = 2, p.sp = true, p.zero = 1, p.recompute = Recompute::full;
  add("llama3-70b dp4 tp8 pp2 zero1 full", "llama3-70b", 64, j, p, "");
  TrainingJob fp16 = j;
  fp16.precision = Precision::fp16;
  p = {};
  p.dp = 8, p.zero = 1, p.recompute = Recompute::selective;
  add("llama3-8b dp8 zero1 fp16", "llama3-8b", 8, fp16, p, "");
  p = {};
  p.dp = 8, p.zero = 2, p.offload_optimizer = true, p.recompute = Recompute::full;
  add("llama3-8b dp8 zero2 offload", "llama3-8b", 8, j, p, "");
  p = {};  // ZeRO-Infinity on the host: offload_param and offload_optimizer device cpu
  p.dp = 8, p.zero = 3, p.offload_optimizer = p.offload_params = true, p.recompute = Recompute::full;
  add("llama3-70b dp8 zero3 offload params", "llama3-70b", 8, j, p, "");
  TrainingJob ft = j;
  ft.mode = TrainMode::finetune;
  p = {};
  p.dp = 8, p.zero = 3, p.recompute = Recompute::full_k, p.recompute_layers = 8;
  add("llama3-8b dp8 zero3 finetune full_k8", "llama3-8b", 8, ft, p, "");
  TrainingJob fp32 = j;
  fp32.seq_len = 1024;
  fp32.precision = Precision::fp32;
  fp32.amp = AmpLevel::O0;
  p = {};
  p.dp = 8, p.zero = 0, p.flash_attention = false;
  add("gpt2-124m dp8 zero0 fp32", "gpt2-124m", 8, fp32, p, "");
  p = {};
  p.dp = 2, p.tp = 2, p.pp = 2, p.sp = true, p.zero = 2;
  add("llama3-8b dp2 tp2 pp2 zero2", "llama3-8b", 8, j, p, "plan.zero");
  p = {};
  p.dp = 4, p.pp = 2, p.zero = 1, p.schedule = Schedule::gpipe;
  add("llama3-8b dp4 pp2 gpipe", "llama3-8b", 8, j, p, "plan.schedule");
  p = {};
  p.dp = 8, p.zero = 1, p.activation_offload_layers = 4, p.recompute = Recompute::none;
  add("llama3-8b dp8 activation offload", "llama3-8b", 8, j, p, "plan.activation_offload_layers");
  // cpu_checkpointing: every layer's checkpoint to the host (all 32 under full recompute).
  p.activation_offload_layers = 32, p.recompute = Recompute::full;
  add("llama3-8b dp8 cpu_checkpointing", "llama3-8b", 8, j, p, "");
  p.activation_offload_layers = 31;
  add("llama3-8b dp8 activation offload of 31 layers", "llama3-8b", 8, j, p, "plan.activation_offload_layers");
  p = {};
  p.dp = 8, p.ep = 8, p.zero = 3;
  add("mixtral-8x7b dp8 ep8 zero3", "mixtral-8x7b", 8, j, p, "plan.zero");  // engine.py L1675
  p.zero = 2;
  add("mixtral-8x7b dp8 ep8 zero2", "mixtral-8x7b", 8, j, p, "");
  return out;
}

// Every plan of the matrix and the extras, with what the format must do with it.
std::vector<std::pair<NamedPlan, std::string>> all_plans() {
  std::vector<std::pair<NamedPlan, std::string>> out;
  for (NamedPlan& np : testing::round_trip_plans()) {
    auto r = kRefusedMatrixPlans.find(np.name);
    out.push_back({np, r == kRefusedMatrixPlans.end() ? "" : r->second});
  }
  for (auto& e : extra_plans()) out.push_back(e);
  return out;
}

// ---------------------------------------------------------------- round trip

TEST(DeepSpeedFormat, RoundTripsEveryPlanItCanRunAndRefusesTheRestNamingTheField) {
  std::set<std::string> refused, expected_refused;
  int round_tripped = 0;
  for (const auto& [np, expect] : all_plans()) {
    SCOPED_TRACE(np.name);
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::deepspeed);
    if (!expect.empty()) expected_refused.insert(np.name);
    if (!ex) {
      refused.insert(np.name);
      EXPECT_EQ(ex.status().kind(), ErrorKind::bad_input);
      EXPECT_EQ(ex.status().message().rfind(expect, 0), 0u) << ex.status().message();
      EXPECT_FALSE(expect.empty()) << ex.status().message();
      continue;
    }
    ASSERT_NE(testing::find_file(ex->files, "ds_config.json"), nullptr);
    ASSERT_NE(testing::find_file(ex->files, "launch.sh"), nullptr);
    // From the export's folder, without --model: launch.sh's shape names the preset.
    ASSERT_TRUE(expect_round_trip(np.file, ex->files, LaunchFormat::deepspeed, import_options(), "exported", np.name));
    ++round_tripped;
  }
  EXPECT_EQ(refused, expected_refused);
  EXPECT_GE(round_tripped, 10);
}

// Whether `message` names a DeepSpeed or Megatron(-DeepSpeed) source file
// (`deepspeed/...py` or `megatron/...py`, path in [a-z_/]) or the ds_config.
bool cites_deepspeed_source(const std::string& message) {
  if (message.find("ds_config") != std::string::npos) return true;
  for (const std::string root : {"deepspeed/", "megatron/"})
    for (size_t at = message.find(root); at != std::string::npos; at = message.find(root, at + 1)) {
      const size_t from = at + root.size();
      const std::string path = testing::run_of(message, from, "abcdefghijklmnopqrstuvwxyz_/");
      if (!path.empty() && message.compare(from + path.size(), 3, ".py") == 0) return true;
    }
  return false;
}

TEST(DeepSpeedFormat, RefusalsCiteTheFrameworkRule) {
  for (const auto& [np, expect] : all_plans()) {
    if (expect.empty()) continue;
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::deepspeed);
    ASSERT_FALSE(ex) << np.name;
    // Each names its source: a DeepSpeed or Megatron-DeepSpeed file.
    EXPECT_TRUE(cites_deepspeed_source(ex.status().message()))
        << np.name << ": " << ex.status().message();
  }
}

TEST(DeepSpeedFormat, ConfigAloneGivesTheBatchZeroAndPrecisionOfADataParallelPlan) {
  const NamedPlan np = testing::round_trip_plans()[2];  // llama3-8b dp8 zero2
  ASSERT_EQ(np.file.plan.zero, 2);
  Result<ExportResult> ex = export_plan(np.file, LaunchFormat::deepspeed);
  ASSERT_TRUE(ex);
  Result<ImportedConfig> im = import_text(testing::find_file(ex->files, "ds_config.json")->text, "llama3-8b");
  ASSERT_TRUE(im) << im.status().message();
  const ParallelPlan& p = im->file.plan;
  EXPECT_EQ(p.dp, 8);  // train_batch_size / (micro * gradient_accumulation_steps)
  EXPECT_EQ(p.tp, 1);
  EXPECT_EQ(p.pp, 1);
  EXPECT_EQ(p.micro_batch, np.file.plan.micro_batch);
  EXPECT_EQ(p.grad_accum, np.file.plan.grad_accum);
  EXPECT_EQ(p.zero, 2);
  EXPECT_EQ(im->file.job.precision, Precision::bf16);
  EXPECT_EQ(im->file.job.global_batch, np.file.job.global_batch);
  EXPECT_EQ(im->file.model.name, "llama3-8b");
  EXPECT_FALSE(im->notes.empty());  // the sequence length and recompute are assumed, and said so
}

// ---------------------------------------------------------------- key names and value forms

TEST(DeepSpeedFormat, EveryConfigKeyIsADeepSpeedKeyWithAValidValue) {
  int checked = 0;
  for (const auto& [np, expect] : all_plans()) {
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::deepspeed);
    if (!ex) continue;
    const json c = json::parse(testing::find_file(ex->files, "ds_config.json")->text);  // the real parser
    EXPECT_EQ(keys_not_in_deepspeed(c), std::vector<std::string>{}) << np.name;
    // Value forms: ZeroStageEnum 0-3 (zero/config.py L77-83), OffloadDeviceEnum none|cpu|nvme
    // (offload_config.py L14-18), and DeepSpeed's batch rule (config.py L931).
    const int stage = c["zero_optimization"]["stage"];
    EXPECT_TRUE(stage >= 0 && stage <= 3);
    if (c["zero_optimization"].contains("offload_optimizer")) {
      const std::string device = c["zero_optimization"]["offload_optimizer"]["device"];
      EXPECT_TRUE(device == "cpu" || device == "nvme" || device == "none") << device;
    }
    EXPECT_EQ(c["train_batch_size"].get<int64_t>(), c["train_micro_batch_size_per_gpu"].get<int64_t>() *
                                                        c["gradient_accumulation_steps"].get<int64_t>() * np.file.plan.dp);
    EXPECT_FALSE(c.contains("fp16") && c.contains("bf16"));  // config.py L834-835
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(DeepSpeedFormat, TheKeyCheckCatchesAMisspeltKey) {
  const json c = json::parse(R"({"train_batch_size": 8, "zero_optimization": {"stagee": 1}, "bf16": {"enabled": true}})");
  EXPECT_EQ(keys_not_in_deepspeed(c), std::vector<std::string>{"zero_optimization.stagee"});
  const json ok = json::parse(R"({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_TRUE(keys_not_in_deepspeed(ok).empty());
}

TEST(DeepSpeedFormat, LaunchLineOptionsAreTheLaunchersAndPretrainGptsAsBashPassesThem) {
  if (!testing::bash_available()) GTEST_SKIP() << "no bash";
  int checked = 0;
  for (const auto& [np, expect] : all_plans()) {
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::deepspeed);
    if (!ex) continue;
    SCOPED_TRACE(np.name);
    const std::string dir = testing::write_temp(ex->files, "ds" + std::to_string(checked));
    std::optional<std::vector<std::string>> words = testing::bash_launch_words(dir + "/launch.sh", "deepspeed");
    ASSERT_TRUE(words.has_value());
    EXPECT_EQ(launch_word_problems(*words), std::vector<std::string>{});
    // llmplan's own reading of the script sees exactly bash's words.
    Result<shell::Script> script = shell::read_shell_script(testing::find_file(ex->files, "launch.sh")->text, "launch.sh");
    ASSERT_TRUE(script);
    Result<std::optional<shell::LaunchLine>> line = shell::find_launch_line(script->commands, "launch.sh");
    ASSERT_TRUE(line && line->has_value());
    std::vector<std::string> ours = {"--num_nodes", std::to_string(*(*line)->nodes), "--num_gpus", std::to_string(*(*line)->gpus_per_node),
                                     (*line)->program};
    ours.insert(ours.end(), (*line)->args.begin(), (*line)->args.end());
    ASSERT_EQ(words->size(), ours.size());
    for (size_t k = 0; k < ours.size(); ++k) {
      if (ours[k].find("$(") == std::string::npos) {  // $(...) is bash's to run
        EXPECT_EQ((*words)[k], ours[k]) << k;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(DeepSpeedFormat, TheOptionCheckCatchesAMisspeltFlagAndABadChoice) {
  EXPECT_EQ(launch_word_problems({"--num_nodes", "1", "pretrain_gpt.py", "--tensor-model-paralel-size", "2"}),
            std::vector<std::string>{"--tensor-model-paralel-size"});
  EXPECT_EQ(launch_word_problems({"pretrain_gpt.py", "--normalization", "rms"}), std::vector<std::string>{"--normalization rms"});
  EXPECT_EQ(launch_word_problems({"pretrain_gpt.py", "--bf16", "1"}), std::vector<std::string>{"stray word 1"});
  EXPECT_EQ(launch_word_problems({"pretrain_gpt.py", "--seq-length", "--bf16"}), std::vector<std::string>{"--seq-length without its value"});
  EXPECT_EQ(launch_word_problems({"--num_gpus", "8", "pretrain_gpt.py", "--num_gpus", "8"}), std::vector<std::string>{"--num_gpus"});
  EXPECT_TRUE(launch_word_problems({"--num_gpus", "8", "pretrain_gpt.py", "--swiglu", "--normalization", "rmsnorm"}).empty());
}

TEST(DeepSpeedFormat, ZeroSchemaIsDeepSpeeds) {
  // Every ZeRO key the importer accepts is one DeepSpeed v0.16.4 accepts (a key of the
  // fixture or the field name of an alias), and every fixture ZeRO key is accepted.
  std::set<std::string> code;
  for (const char* k : launch_formats::deepspeed_zero_optimization_keys()) code.insert(std::string("zero_optimization.") + k);
  for (const char* k : launch_formats::deepspeed_offload_optimizer_keys()) code.insert(std::string("zero_optimization.offload_optimizer.") + k);
  for (const char* k : launch_formats::deepspeed_offload_param_keys()) code.insert(std::string("zero_optimization.offload_param.") + k);
  const DeepSpeedKeys& ref = deepspeed_keys();
  for (const std::string& k : code) EXPECT_TRUE(ref.paths.count(k) || ref.zero_field_names.count(k)) << k;
  for (const std::string& k : ref.paths) {
    if (k.rfind("zero_optimization.", 0) == 0) {
      EXPECT_TRUE(code.count(k)) << k;
    }
  }
  for (const std::string& k : ref.zero_field_names) EXPECT_TRUE(code.count(k)) << k;
}

// ---------------------------------------------------------------- published configs

TEST(DeepSpeedFormat, PublishedMegatronDeepSpeedConfigImportsToItsPlan) {
  // deepspeedai/Megatron-DeepSpeed examples_deepspeed/curriculum_learning/
  // ds_zero_stage_1_config_baseline.json: ZeRO-1, fp16 with dynamic loss scaling, 512
  // sequences per step without accumulation; the model (GPT-3 1.3B in that example) is the
  // script's, given here.
  Result<ImportedConfig> im = import_text(read_fixture("deepspeed_example.json"), "gpt3-1.3b");
  ASSERT_TRUE(im) << im.status().message();
  const PlanFile& f = im->file;
  EXPECT_EQ(f.model.name, "gpt3-1.3b");
  EXPECT_EQ(f.plan.zero, 1);
  EXPECT_EQ(f.job.precision, Precision::fp16);
  EXPECT_EQ(f.job.global_batch, 512);
  EXPECT_EQ(f.plan.grad_accum, 1);
  EXPECT_EQ(f.plan.tp, 1);
  EXPECT_EQ(f.plan.pp, 1);
  EXPECT_EQ(f.plan.dp, 8);            // no micro-batch key: one node of 8 H100s assumed, and noted
  EXPECT_EQ(f.plan.micro_batch, 64);  // 512 / (1 * 8), DeepSpeed's derivation
  EXPECT_EQ(f.plan.recompute, Recompute::none);
  EXPECT_EQ(f.job.optimizer, Optimizer::adamw);  // "type": "Adam"
  const std::vector<std::string>& u = im->unknown_keys;
  EXPECT_NE(std::find(u.begin(), u.end(), "optimizer.params"), u.end());
  EXPECT_NE(std::find(u.begin(), u.end(), "zero_allow_untested_optimizer"), u.end());
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
  EXPECT_GT(e.time.tokens_per_s, 0);
}

TEST(DeepSpeedFormat, PublishedHuggingFaceZero3ConfigImportsToItsPlan) {
  // huggingface/transformers tests/deepspeed/ds_config_zero3.json: ZeRO-3 with the optimizer
  // (and the parameters) offloaded to the CPU, fp16; the batch is the Trainer's.
  Result<ImportedConfig> im = import_text(read_fixture("deepspeed_example_zero3.json"), "llama3-8b");
  ASSERT_TRUE(im) << im.status().message();
  const PlanFile& f = im->file;
  EXPECT_EQ(f.plan.zero, 3);
  EXPECT_TRUE(f.plan.offload_optimizer);
  EXPECT_TRUE(f.plan.offload_params);  // offload_param device cpu
  EXPECT_EQ(f.job.precision, Precision::fp16);
  EXPECT_EQ(f.plan.micro_batch, 8);  // TrainingArguments' per_device_train_batch_size default, noted
  EXPECT_EQ(f.plan.grad_accum, 1);
  EXPECT_EQ(f.plan.dp, 8);
  EXPECT_EQ(f.job.global_batch, 64);
  const std::vector<std::string>& u = im->unknown_keys;
  for (const char* k : {"scheduler", "optimizer.params", "zero_optimization.sub_group_size",
                        "zero_optimization.stage3_gather_fp16_weights_on_model_save"})
    EXPECT_NE(std::find(u.begin(), u.end(), k), u.end()) << k;
  EXPECT_EQ(std::find(u.begin(), u.end(), "zero_optimization.offload_param"), u.end());  // read: the plan's parameter offload
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
  // The 16-bit parameter shard is in host memory: no weights on the GPU but the gathered units.
  EXPECT_EQ(e.memory.worst.bytes[static_cast<int>(MemoryItem::weights)], 0);
}

TEST(DeepSpeedFormat, PublishedMegatronDeepSpeedLaunchScriptImportsToItsPlan) {
  // deepspeedai/Megatron-DeepSpeed examples_deepspeed/pretrain_llama2_distributed.sh: TP=2,
  // PP=2 on one node of 8, micro-batch 4, global batch 32, ZeRO-0 with bf16, activation
  // checkpointing off (its `if` on "false"), no flash attention. The ds_config it writes with
  // its here-document, with the script's values:
  const std::string config = R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1,
                                 "zero_optimization": {"stage": 0}, "bf16": {"enabled": true}})";
  // Its model (a 24-layer Llama-style model with no preset), as --model takes a file.
  const std::string model_file = ::testing::TempDir() + "/llmplan_mds_llama2_example_" + std::to_string(getpid()) + ".json";
  {
    std::ofstream m(model_file);
    m << R"({"name": "mds-llama2-example", "source": "pretrain_llama2_distributed.sh", "family": "llama", "layers": 24,
             "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn_hidden": 5504, "vocab": 32000, "max_positions": 2048,
             "tied_embeddings": false})";
  }
  Result<ImportedConfig> im = import_text(config, model_file, read_fixture("megatron_deepspeed_pretrain_llama2_distributed.sh"));
  ASSERT_TRUE(im) << im.status().message();
  const PlanFile& f = im->file;
  EXPECT_EQ(f.gpus, 8);
  EXPECT_EQ(f.plan.tp, 2);
  EXPECT_EQ(f.plan.pp, 2);
  EXPECT_EQ(f.plan.dp, 2);
  EXPECT_EQ(f.plan.micro_batch, 4);
  EXPECT_EQ(f.job.global_batch, 32);
  EXPECT_EQ(f.plan.grad_accum, 4);
  EXPECT_EQ(f.job.seq_len, 2048);
  EXPECT_EQ(f.job.precision, Precision::bf16);
  EXPECT_EQ(f.plan.zero, 1);  // bf16 without ZeRO is BF16_Optimizer, noted
  EXPECT_EQ(f.plan.recompute, Recompute::none);
  EXPECT_FALSE(f.plan.flash_attention);
  EXPECT_EQ(f.plan.schedule, Schedule::one_f_one_b);
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
}

// ---------------------------------------------------------------- bad input

TEST(DeepSpeedFormat, MalformedJsonNamesTheFileAndPosition) {
  expect_bad_input(import_text(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1,})", "llama3-8b"), {"run/ds_config.json", "byte"});
}

TEST(DeepSpeedFormat, ContradictoryKeysAreBadInputNamingThem) {
  expect_bad_input(import_text(R"({"train_batch_size": 64, "bf16": {"enabled": true}, "fp16": {"enabled": true}})", "llama3-8b"),
             {"ds_config.json", "bf16.enabled", "fp16.enabled", "config.py L834"});
  // train_batch_size against micro * accumulation * the launch line's data parallel (8 GPUs).
  const std::string script = "deepspeed --num_nodes 1 --num_gpus 8 pretrain_gpt.py --no-pipeline-parallel --bf16 "
                             "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
                             "--num-key-value-heads 8 --max-position-embeddings 8192 --swiglu --normalization rmsnorm "
                             "--disable-bias-linear --untie-embeddings-and-output-weights --seq-length 2048\n";
  const std::string config = R"({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8,
                                 "zero_optimization": {"stage": 1}, "bf16": {"enabled": true}})";
  expect_bad_input(import_text(config, "", script), {"ds_config.json", "train_batch_size", "config.py L931", "256"});
  // The same config with 16 GPUs is consistent.
  std::string script16 = script;
  script16.replace(script16.find("--num_nodes 1"), 13, "--num_nodes 2");
  Result<ImportedConfig> ok = import_text(config, "", script16);
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ(ok->file.plan.dp, 16);
  EXPECT_EQ(ok->file.model.name, "llama3-8b");
  // The script and the config disagree on the ZeRO stage.
  std::string zero = script16;
  zero.insert(zero.size() - 1, " --zero-stage 2");
  expect_bad_input(import_text(config, "", zero), {"launch.sh", "--zero-stage"});
  // ZeRO-2 under the pipeline engine (no --no-pipeline-parallel).
  std::string pipe = script16;
  pipe.replace(pipe.find("--no-pipeline-parallel "), 23, "");
  const std::string zero2 = R"({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
                                "bf16": {"enabled": true}})";
  expect_bad_input(import_text(zero2, "", pipe), {"zero_optimization.stage", "engine.py L77-78"});
}

TEST(DeepSpeedFormat, AbsurdValuesAreBadInputNamingTheKey) {
  expect_bad_input(import_text(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": -4})", "llama3-8b"),
             {"ds_config.json", "train_micro_batch_size_per_gpu", "-4"});
  expect_bad_input(import_text(R"({"train_batch_size": 64, "zero_optimization": {"stage": 7}})", "llama3-8b"), {"zero_optimization.stage", "7"});
  expect_bad_input(import_text(R"({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 1})", "llama3-8b"),
             {"train_batch_size", "100"});
  expect_bad_input(import_text(R"({"train_batch_size": 64})", "llama3-8b",
                         "deepspeed --num_nodes 1 --num_gpus 8 pretrain_gpt.py --tensor-model-parallel-size -2\n"),
             {"launch.sh", "line 1", "--tensor-model-parallel-size", "-2"});
  expect_bad_input(import_text(R"({"train_batch_size": 64, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "disk"}}})", "llama3-8b"),
             {"zero_optimization.offload_optimizer.device", "disk"});
}

TEST(DeepSpeedFormat, UnknownZeroKeysAreRefusedAsDeepSpeedDoesAndOtherKeysListed) {
  expect_bad_input(import_text(R"({"train_batch_size": 64, "zero_optimization": {"stage": 1, "overlap_com": true}})", "llama3-8b"),
             {"zero_optimization.overlap_com", "config_utils.py"});
  Result<ImportedConfig> im = import_text(
      R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "my_own_key": 3, "zero_optimization": {"stage": 1,
          "stage3_max_live_parameters": 1e9}, "bf16": {"enabled": true}, "comms_logger": {"enabled": true}})",
      "llama3-8b");
  ASSERT_TRUE(im) << im.status().message();
  const std::vector<std::string>& u = im->unknown_keys;
  for (const char* k : {"my_own_key", "comms_logger", "zero_optimization.stage3_max_live_parameters"})
    EXPECT_NE(std::find(u.begin(), u.end(), k), u.end()) << k;
  EXPECT_EQ(std::find(u.begin(), u.end(), "train_batch_size"), u.end());
}

TEST(DeepSpeedFormat, TheModelMustBeGivenWhenNothingDescribesIt) {
  expect_bad_input(import_text(R"({"train_batch_size": 64})"), {"--model"});
  // A --model that contradicts the script's shape names the flag.
  const std::string script = "deepspeed --num_gpus 8 pretrain_gpt.py --num-layers 40 --hidden-size 4096 --num-attention-heads 32 "
                             "--swiglu --normalization rmsnorm --disable-bias-linear\n";
  expect_bad_input(import_text(R"({"train_batch_size": 64})", "llama3-8b", script), {"launch.sh", "--num-layers", "40", "32"});
}

TEST(DeepSpeedFormat, AutoValuesAreNotedAndDefaulted) {
  Result<ImportedConfig> im = import_text(
      R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "auto",
          "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}})",
      "llama3-8b");
  ASSERT_TRUE(im) << im.status().message();
  EXPECT_EQ(im->file.plan.micro_batch, 2);
  EXPECT_EQ(im->file.plan.grad_accum, 1);
  EXPECT_EQ(im->file.job.precision, Precision::bf16);  // the H100's 16-bit format
  int autos = 0;
  for (const std::string& n : im->notes) autos += n.find("auto") != std::string::npos;
  EXPECT_GE(autos, 2);
}

TEST(DeepSpeedFormat, Bf16WithoutZeroIsReadAsTheZero1ItRuns) {
  Result<ImportedConfig> im = import_text(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8,
                                              "zero_optimization": {"stage": 0}, "bf16": {"enabled": true}})",
                                          "llama3-8b");
  ASSERT_TRUE(im) << im.status().message();
  EXPECT_EQ(im->file.plan.zero, 1);
  Result<ImportedConfig> fp16 = import_text(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8,
                                                "zero_optimization": {"stage": 0}, "fp16": {"enabled": true}})",
                                            "llama3-8b");
  ASSERT_TRUE(fp16) << fp16.status().message();
  EXPECT_EQ(fp16->file.plan.zero, 0);
}

}  // namespace
}  // namespace llmplan
