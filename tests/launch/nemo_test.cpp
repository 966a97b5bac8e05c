// The nemo format (launch/nemo.cpp): round trips over the plan matrix, every override key
// checked against the fields NeMo v2.4.0, Megatron-Core core_v0.13.0 and Megatron-Bridge
// v0.6.0 define (tests/fixtures/frameworks/nemo_keys.txt), the recipes' published defaults
// imported, and bad input named.
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "launch/launch.h"
#include "planner/search/explain.h"
#include "tests/launch/format_test_util.h"

namespace llmplan {
namespace {

using testing::expect_bad_input;
using testing::import_options;
using testing::NamedPlan;
using testing::with;

Result<ImportedConfig> import_text(const std::string& text, const std::string& name = "nemo_overrides.sh") {
  return import_files({{name, text, false}}, LaunchFormat::nemo, import_options(), name);
}

// ---------------------------------------------------------------- the key lists

// nemo_keys.txt: the field names behind each key prefix, for NeMo ("[nemo] trainer.strategy.ddp")
// and Megatron-Bridge ("[bridge] ddp"); the MegatronStrategy section at the top is
// [nemo] trainer.strategy. Sections "KEY=VALUE" list the values a key takes.
struct KeyLists {
  std::map<std::string, std::set<std::string>> fields;  // "nemo trainer.strategy" -> names
  std::map<std::string, std::set<std::string>> values;  // "nemo trainer.plugins" -> values
};

const KeyLists& key_lists() {
  static const KeyLists lists = [] {
    KeyLists out;
    std::istringstream in(testing::read_fixture("nemo_keys.txt"));
    std::set<std::string>* current = nullptr;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("## MegatronStrategy.__init__", 0) == 0) {
        current = &out.fields["nemo trainer.strategy"];
      } else if (line.rfind("## [", 0) == 0) {
        const size_t close = line.find(']');
        const std::string tool = line.substr(4, close - 4);
        const size_t colon = line.find(':', close);
        std::string prefix = line.substr(close + 2, colon - close - 2);
        if (prefix == "(top level)") prefix = "";
        const size_t eq = prefix.find("=VALUE");
        current = eq != std::string::npos ? &out.values[tool + " " + prefix.substr(0, eq)] : &out.fields[tool + " " + prefix];
      } else if (line.rfind("##", 0) == 0) {
        current = nullptr;
      } else if (current != nullptr && !line.empty() && line[0] != '#') {
        current->insert(line.substr(0, line.find('\t')));
      }
    }
    return out;
  }();
  return lists;
}

// The key=value words of an export's file: nemo_overrides.sh's OVERRIDES array (one a line,
// comments above), megatron_bridge_overrides.txt's lines. Read without the importer.
std::vector<std::pair<std::string, std::string>> overrides_in(const std::string& text, bool bridge) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  bool inside = bridge;
  for (std::string line; std::getline(in, line);) {
    if (!bridge && line == "OVERRIDES=(") {
      inside = true;
      continue;
    }
    if (!bridge && line == ")") inside = false;
    const size_t a = line.find_first_not_of(' ');
    if (!inside || a == std::string::npos || line[a] == '#') continue;
    std::string w = line.substr(a);
    if (w.size() >= 2 && w.front() == '"' && w.back() == '"') w = w.substr(1, w.size() - 2);
    const size_t eq = w.find('=');
    out.push_back({w.substr(0, eq), eq == std::string::npos ? "" : w.substr(eq + 1)});
  }
  return out;
}

// Every key whose last component is not a field of the class behind its prefix, and every
// value outside a key's listed values.
std::vector<std::string> key_problems(const std::vector<std::pair<std::string, std::string>>& overrides, bool bridge) {
  const KeyLists& lists = key_lists();
  const std::string tool = bridge ? "bridge " : "nemo ";
  std::vector<std::string> problems;
  for (const auto& [key, value] : overrides) {
    const size_t dot = key.rfind('.');
    const std::string prefix = dot == std::string::npos ? "" : key.substr(0, dot);
    const std::string field = dot == std::string::npos ? key : key.substr(dot + 1);
    auto f = lists.fields.find(tool + prefix);
    if (f == lists.fields.end() || !f->second.count(field)) {
      problems.push_back("unknown key " + key);
      continue;
    }
    auto v = lists.values.find(tool + key);
    if (v != lists.values.end() && !v->second.count(value)) problems.push_back(key + "=" + value + ": not one of its values");
  }
  return problems;
}

// ---------------------------------------------------------------- round trip

// The matrix plans the nemo format refuses (NeMo has a recipe for each model, LoRA on q, k,
// v, o is linear_qkv + linear_proj, ZeRO-2/3 run without pp): Megatron-Core's schedules only.
const std::map<std::string, std::string> kRefused = {
    {"llama3-8b pp2 zbv zero3", "plan.schedule"},
    {"llama3-8b dp8 zero1 bf16 moments", "job.moments"},  // the overrides cannot spell a torch dtype
};

TEST(NemoFormat, RoundTripsEveryPlanItCanExpress) {
  int exported = 0;
  for (const NamedPlan& np : testing::round_trip_plans()) {
    SCOPED_TRACE(np.name);
    Result<ExportResult> r = export_plan(np.file, LaunchFormat::nemo);
    auto refused = kRefused.find(np.name);
    if (refused != kRefused.end()) {
      ASSERT_FALSE(r);
      EXPECT_NE(r.status().message().find(refused->second), std::string::npos) << r.status().message();
      continue;
    }
    ASSERT_TRUE(r) << r.status().message();
    ++exported;
    ASSERT_NE(testing::find_file(r->files, "nemo_overrides.sh"), nullptr);
    ASSERT_NE(testing::find_file(r->files, "megatron_bridge_overrides.txt"), nullptr);
    EXPECT_TRUE(testing::find_file(r->files, "nemo_overrides.sh")->executable);
    // Both files together (checked against each other), and each alone.
    std::optional<ImportedConfig> back =
        testing::expect_round_trip(np.file, r->files, LaunchFormat::nemo, import_options(), "export of " + np.name, np.name);
    ASSERT_TRUE(back);
    EXPECT_TRUE(back->unknown_keys.empty()) << back->unknown_keys.front();
    testing::expect_round_trip(np.file, {*testing::find_file(r->files, "nemo_overrides.sh")}, LaunchFormat::nemo, import_options(), np.name,
                               np.name + " (nemo_overrides.sh alone)");
    // The Bridge file alone has no node count (torchrun's) and no recipe name: --model, and dp
    // from the batch sizes (one micro-batch per step), so only its other plan fields are
    // compared; an interleaved plan then has too few micro-batches for its pipeline, which is
    // bad input saying so.
    const ImportOptions with_model = import_options("h100-sxm", np.file.model.name);
    Result<ImportedConfig> bridge_only =
        import_files({*testing::find_file(r->files, "megatron_bridge_overrides.txt")}, LaunchFormat::nemo, with_model, np.name);
    if (np.file.plan.vpp > 1) {
      ASSERT_FALSE(bridge_only);
      EXPECT_NE(bridge_only.status().message().find("interleaved"), std::string::npos) << bridge_only.status().message();
      continue;
    }
    ASSERT_TRUE(bridge_only) << bridge_only.status().message();
    const ParallelPlan &a = np.file.plan, &b = bridge_only->file.plan;
    EXPECT_EQ(a.tp, b.tp);
    EXPECT_EQ(a.pp, b.pp);
    EXPECT_EQ(a.cp, b.cp);
    EXPECT_EQ(a.sp, b.sp);
    EXPECT_EQ(a.zero, b.zero);
    EXPECT_EQ(a.recompute, b.recompute);
    EXPECT_EQ(a.micro_batch, b.micro_batch);
    EXPECT_EQ(b.dp * b.micro_batch, np.file.job.global_batch);
    EXPECT_EQ(np.file.job.precision, bridge_only->file.job.precision);
    EXPECT_EQ(np.file.job.fp8, bridge_only->file.job.fp8);
    EXPECT_EQ(np.file.job.seq_len, bridge_only->file.job.seq_len);
    EXPECT_EQ(job_mode(np.file.job), job_mode(bridge_only->file.job));
  }
  EXPECT_EQ(exported, static_cast<int>(testing::round_trip_plans().size() - kRefused.size()));
}

TEST(NemoFormat, RefusesWhatTheRecipesCannotExpressNamingThePlanField) {
  TrainingJob job;
  job.seq_len = 4096;
  job.global_batch = 256;
  ParallelPlan p;
  p.dp = 8, p.micro_batch = 1, p.zero = 1;
  auto refusal = [](const PlanFile& f) {
    Result<ExportResult> r = export_plan(f, LaunchFormat::nemo);
    EXPECT_FALSE(r);
    EXPECT_TRUE(r || r.status().kind() == ErrorKind::bad_input);
    return r ? std::string() : r.status().message();
  };
  // A model without a recipe llmplan knows.
  std::string msg = refusal(testing::make_plan_file("llama2-7b", "h100-sxm", 8, job, p));
  EXPECT_NE(msg.find("model: 'llama2-7b'"), std::string::npos) << msg;
  // LoRA on q and v: Megatron-Core fuses q, k and v into linear_qkv.
  TrainingJob lora = job;
  lora.mode = TrainMode::lora;
  lora.lora.targets = {"q", "v"};
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 8, lora, p));
  EXPECT_NE(msg.find("job.lora.targets"), std::string::npos) << msg;
  EXPECT_NE(msg.find("linear_qkv"), std::string::npos) << msg;
  // QLoRA.
  TrainingJob qlora = lora;
  qlora.lora.targets = {"q", "k", "v"};
  qlora.base_quant = BaseQuant::nf4;
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 8, qlora, p));
  EXPECT_NE(msg.find("job.mode: qlora"), std::string::npos) << msg;
  // fp32: the recipes' plugins are bf16_mixed and fp16_mixed.
  TrainingJob fp32 = job;
  fp32.precision = Precision::fp32;
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 8, fp32, p));
  EXPECT_NE(msg.find("job.precision"), std::string::npos) << msg;
  // ZeRO-3 with pipeline parallelism (the refusal shared with --to megatron).
  ParallelPlan z = p;
  z.pp = 2, z.zero = 3;
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 16, job, z));
  EXPECT_NE(msg.find("plan.zero"), std::string::npos) << msg;
  // Activation offload with pipeline parallelism: Megatron-Core refuses it.
  ParallelPlan ao = p;
  ao.dp = 4, ao.pp = 2, ao.activation_offload_layers = 2;
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 8, job, ao));
  EXPECT_NE(msg.find("plan.activation_offload_layers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("L764-767"), std::string::npos) << msg;
}

// Activation offload (no Megatron-LM flag at core_v0.13.0) is a NeMo model.config field.
TEST(NemoFormat, ActivationOffloadRoundTripsThroughModelConfig) {
  TrainingJob job;
  job.seq_len = 4096;
  job.global_batch = 256;
  ParallelPlan p;
  p.dp = 8, p.micro_batch = 1, p.zero = 1, p.activation_offload_layers = 4;
  const PlanFile f = testing::make_plan_file("llama3-8b", "h100-sxm", 8, job, p);
  Result<ExportResult> r = export_plan(f, LaunchFormat::nemo);
  ASSERT_TRUE(r) << r.status().message();
  const std::string& s = testing::find_file(r->files, "nemo_overrides.sh")->text;
  EXPECT_NE(s.find("model.config.cpu_offloading_num_layers=4"), std::string::npos);
  EXPECT_NE(s.find("model.config.cpu_offloading_weights=False"), std::string::npos);
  testing::expect_round_trip(f, r->files, LaunchFormat::nemo, import_options(), "offload", "activation offload");
}

// ---------------------------------------------------------------- key names

TEST(NemoFormat, EveryOverrideKeyIsAFieldOfTheClassBehindIt) {
  int checked = 0;
  for (const NamedPlan& np : testing::round_trip_plans()) {
    if (kRefused.count(np.name)) continue;
    Result<ExportResult> r = export_plan(np.file, LaunchFormat::nemo);
    ASSERT_TRUE(r) << np.name;
    const auto nemo = overrides_in(testing::find_file(r->files, "nemo_overrides.sh")->text, false);
    const auto bridge = overrides_in(testing::find_file(r->files, "megatron_bridge_overrides.txt")->text, true);
    EXPECT_GT(nemo.size(), 15u) << np.name;
    EXPECT_GT(bridge.size(), 12u) << np.name;
    const std::vector<std::string> pn = key_problems(nemo, false), pb = key_problems(bridge, true);
    EXPECT_TRUE(pn.empty()) << np.name << ": " << pn.front();
    EXPECT_TRUE(pb.empty()) << np.name << ": " << pb.front();
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(testing::round_trip_plans().size() - kRefused.size()));
}

TEST(NemoFormat, KeyCheckerFindsMisspeltKeysAndValues) {
  const std::vector<std::pair<std::string, std::string>> good = {
      {"trainer.strategy.tensor_model_parallel_size", "2"}, {"trainer.plugins", "bf16_mixed"},
      {"model.config.recompute_granularity", "full"}, {"optim.config.use_distributed_optimizer", "True"}};
  EXPECT_TRUE(key_problems(good, false).empty());
  EXPECT_EQ(key_problems({{"trainer.strategy.tensor_model_parallel_sizes", "2"}}, false),
            (std::vector<std::string>{"unknown key trainer.strategy.tensor_model_parallel_sizes"}));
  // sequence_parallelism is the recipe's factory argument, not a MegatronStrategy field (the
  // docs' own slip, parallelisms.rst L358).
  EXPECT_EQ(key_problems({{"trainer.strategy.sequence_parallelism", "True"}}, false).size(), 1u);
  // A field of another class under the wrong prefix.
  EXPECT_EQ(key_problems({{"trainer.strategy.recompute_granularity", "full"}}, false).size(), 1u);
  EXPECT_EQ(key_problems({{"trainer.plugins", "bf16_with_fp8_mixed"}}, false).size(), 1u);  // no CLI factory
  EXPECT_EQ(key_problems({{"mixed_precision", "bf16-fp8"}}, true).size(), 1u);
  EXPECT_EQ(key_problems({{"model.tensor_model_parallel_size", "2"}, {"train.micro_batch_size", "1"}}, true).size(), 0u);
}

// ---------------------------------------------------------------- published recipes

// `nemo llm pretrain --factory llama3_8b` as published: the recipe's own plan
// (nemo_llama3_8b_recipe.py: TP 1, PP 1, CP 2, one node of 8, MockDataModule seq 8192,
// global 512, micro 1, bf16_mixed, the distributed optimizer).
TEST(NemoFormat, ImportsTheLlama3_8bRecipeWithItsDefaults) {
  Result<ImportedConfig> r = import_text("nemo llm pretrain --factory llama3_8b\n");
  ASSERT_TRUE(r) << r.status().message();
  const PlanFile& f = r->file;
  EXPECT_EQ(f.model.name, "llama3-8b");
  EXPECT_EQ(f.model.layers, 32);
  EXPECT_EQ(f.gpus, 8);
  EXPECT_EQ(f.cluster.nodes, 1);
  EXPECT_EQ(f.plan.tp, 1);
  EXPECT_EQ(f.plan.pp, 1);
  EXPECT_EQ(f.plan.cp, 2);
  EXPECT_EQ(f.plan.dp, 4);
  EXPECT_FALSE(f.plan.sp);
  EXPECT_EQ(f.plan.micro_batch, 1);
  EXPECT_EQ(f.job.global_batch, 512);
  EXPECT_EQ(f.plan.grad_accum, 128);
  EXPECT_EQ(f.job.seq_len, 8192);
  EXPECT_EQ(f.job.precision, Precision::bf16);
  EXPECT_EQ(f.plan.zero, 1);
  EXPECT_EQ(f.plan.recompute, Recompute::none);
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
  EXPECT_GT(e.time.total, 0);
  // The docs' override (parallelisms.rst L168 @v2.4.0) on top of it.
  r = import_text("nemo llm pretrain --factory llama3_8b trainer.strategy.tensor_model_parallel_size=2\n");
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->file.plan.tp, 2);
  EXPECT_EQ(r->file.plan.dp, 2);
}

// llama3_70b: TP 4, PP 4, VPP 5, CP 2, SP, on 4 nodes (the trainer's own num_nodes; the
// pretrain_recipe passes 1, fewer GPUs than one replica, which is noted).
TEST(NemoFormat, ImportsTheLlama3_70bRecipeWithItsDefaults) {
  Result<ImportedConfig> r = import_text("nemo llm pretrain --factory \"llama3_70b(num_nodes=4)\"\n");
  ASSERT_TRUE(r) << r.status().message();
  const PlanFile& f = r->file;
  EXPECT_EQ(f.model.name, "llama3-70b");
  EXPECT_EQ(f.gpus, 32);
  EXPECT_EQ(f.cluster.nodes, 4);
  EXPECT_EQ(f.plan.tp, 4);
  EXPECT_EQ(f.plan.pp, 4);
  EXPECT_EQ(f.plan.vpp, 5);
  EXPECT_EQ(f.plan.schedule, Schedule::interleaved);
  EXPECT_EQ(f.plan.cp, 2);
  EXPECT_TRUE(f.plan.sp);
  EXPECT_EQ(f.plan.dp, 1);
  EXPECT_EQ(f.job.global_batch, 512);
  EXPECT_EQ(f.job.seq_len, 8192);
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
  r = import_text("nemo llm pretrain --factory llama3_70b\n");
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->file.gpus, 32);
  bool noted = false;
  for (const std::string& n : r->notes) noted |= n.find("fewer than one model replica") != std::string::npos;
  EXPECT_TRUE(noted);
}

// A recipe whose defaults llmplan does not have verbatim needs the plan's keys.
TEST(NemoFormat, RecipesWithoutKnownDefaultsNeedTheirKeys) {
  Result<ImportedConfig> r = import_text("nemo llm pretrain --factory mixtral_8x7b trainer.strategy.expert_model_parallel_size=4\n");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().kind(), ErrorKind::bad_input);
  EXPECT_NE(r.status().message().find("trainer.num_nodes"), std::string::npos) << r.status().message();
  r = import_text("nemo llm pretrain --factory gpt2_124m\n");
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("--factory gpt2_124m"), std::string::npos) << r.status().message();
}

// ---------------------------------------------------------------- bad input

std::string exported_llama3_8b() {
  Result<ExportResult> r = export_plan(testing::round_trip_plans()[1].file, LaunchFormat::nemo);  // llama3-8b dp8 zero1
  EXPECT_TRUE(r);
  return r ? testing::find_file(r->files, "nemo_overrides.sh")->text : std::string();
}

// --model is a check against the recipe's model, naming the first field that differs.
TEST(NemoFormat, GivenModelMustBeTheRecipesModel) {
  ImportOptions o = import_options("h100-sxm", "llama3-70b");
  Result<ImportedConfig> r = import_files({{"nemo_overrides.sh", "nemo llm pretrain --factory llama3_8b\n", false}}, LaunchFormat::nemo, o, "n");
  expect_bad_input(r, {"--factory llama3_8b is llama3-8b; --model llama3-70b differs in layers: 32 vs 80"});
  o.model = "llama3-8b";
  r = import_files({{"nemo_overrides.sh", "nemo llm pretrain --factory llama3_8b\n", false}}, LaunchFormat::nemo, o, "n");
  ASSERT_TRUE(r) << r.status().message();
}

TEST(NemoFormat, MalformedFileIsBadInputNamingFileAndLine) {
  expect_bad_input(import_text("nemo llm pretrain --factory \"llama3_8b\ntrainer.num_nodes=1\n"), {"nemo_overrides.sh", "line 1", "quote"});
  expect_bad_input(import_text("OVERRIDES=(\n  trainer.num_nodes=1\nnemo llm pretrain --factory llama3_8b\n"),
                          {"nemo_overrides.sh", "OVERRIDES"});
}

TEST(NemoFormat, ContradictoryKeysAreBadInputNamingThem) {
  const std::string s = exported_llama3_8b();
  expect_bad_input(import_text(with(s, "model.config.seq_length=8192", "model.config.seq_length=4096")),
                          {"model.config.seq_length", "data.seq_length"});
  expect_bad_input(import_text(with(s, "model.config.recompute_granularity=selective", "model.config.recompute_method=uniform")),
                          {"model.config.recompute_method", "recompute_granularity full"});
  expect_bad_input(import_text(with(s, "optim.config.optimizer=adam",
                                           "optim.config.optimizer=adam\n    optim.config.optimizer_cpu_offload=True")),
                          {"optim.config.optimizer_cpu_offload", "use_precision_aware_optimizer"});
  // The two files of an export saying different plans.
  Result<ExportResult> r = export_plan(testing::round_trip_plans()[1].file, LaunchFormat::nemo);
  ASSERT_TRUE(r);
  std::vector<LaunchFile> files = r->files;
  for (LaunchFile& f : files)
    if (f.name == "megatron_bridge_overrides.txt") f.text = with(f.text, "train.micro_batch_size=2", "train.micro_batch_size=1");
  expect_bad_input(import_files(files, LaunchFormat::nemo, import_options(), "exported"),
                          {"data.micro_batch_size vs train.micro_batch_size"});
}

TEST(NemoFormat, AbsurdOrNegativeValuesAreBadInputNamingTheKey) {
  const std::string s = exported_llama3_8b();
  expect_bad_input(import_text(with(s, "data.micro_batch_size=2", "data.micro_batch_size=-2")),
                          {"nemo_overrides.sh", "data.micro_batch_size", "-2"});
  expect_bad_input(import_text(with(s, "trainer.num_nodes=1", "trainer.num_nodes=1e9")), {"trainer.num_nodes", "1e9"});
  expect_bad_input(import_text(with(s, "trainer.strategy.sequence_parallel=False", "trainer.strategy.sequence_parallel=maybe")),
                          {"trainer.strategy.sequence_parallel", "True or False"});
  expect_bad_input(import_text(with(s, "trainer.plugins=bf16_mixed", "trainer.plugins=fp8_mixed")), {"trainer.plugins"});
}

TEST(NemoFormat, UnknownKeysAreListedNotDropped) {
  const std::string s = with(exported_llama3_8b(), "OVERRIDES=(", "OVERRIDES=(\n    optim.config.lr=3e-4\n    trainer.val_check_interval=100");
  Result<ImportedConfig> r = import_text(s);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->unknown_keys, (std::vector<std::string>{"optim.config.lr", "trainer.val_check_interval"}));
}

}  // namespace
// The main gradients' dtype travels in both files: MegatronMixedPrecision's and
// DistributedDataParallelConfig's grad_reduce_in_fp32 (True: fp32 buffers, job.grads
// megatron; False: 16-bit, as the performance recipes set it).
TEST(NemoFormat, MainGradientDtypeRoundTrips) {
  for (GradConvention g : {GradConvention::megatron, GradConvention::deepspeed}) {
    PlanFile f = testing::round_trip_plans()[4].file;  // llama3-8b dp4 tp2 sp zero1, bf16
    f.job.grads = g;
    Result<ExportResult> e = export_plan(f, LaunchFormat::nemo);
    ASSERT_TRUE(e) << e.status().message();
    const bool fp32 = g == GradConvention::megatron;
    for (const LaunchFile& lf : e->files) {
      // NeMo's overrides are Python literals, Bridge's Hydra's.
      const std::string line = lf.name == "nemo_overrides.sh" ? std::string("trainer.plugins.grad_reduce_in_fp32=") + (fp32 ? "True" : "False")
                                                              : std::string("ddp.grad_reduce_in_fp32=") + (fp32 ? "true" : "false");
      EXPECT_NE(lf.text.find(line), std::string::npos) << lf.name;
    }
    Result<ImportedConfig> back = import_files(e->files, LaunchFormat::nemo, import_options(), "export");
    ASSERT_TRUE(back) << back.status().message();
    EXPECT_EQ(back->file.job.grads, g);
  }
}

}  // namespace llmplan
