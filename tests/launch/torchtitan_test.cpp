// The torchtitan format: train.toml (torchtitan v0.2.2 JobConfig) + launch.sh (torchrun -m
// torchtitan.train). References: torchtitan_keys.txt (JobConfig fields with types and
// defaults, schedule names of torch.distributed.pipelining, converter names), verbatim copies
// of torchtitan's llama3 and qwen3 __init__.py (the flavors), the published llama3 8B/70B
// TOMLs, toml++ for parsing, and bash for what the launch line passes.
#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include "launch/launch.h"
#include "launch/torchtitan_schema.h"
#include "planner/cost/framework.h"
#include "planner/search/explain.h"
#include "tests/launch/format_test_util.h"
#include "tests/launch/round_trip_plans.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

using testing::expect_bad_input;
using testing::expect_round_trip;
using testing::import_options;
using testing::make_plan_file;
using testing::NamedPlan;
using testing::all_in;
using testing::between_all;
using testing::kLowerDigitUnderscore;
using testing::read_fixture;
using testing::run_of;

// ---------------------------------------------------------------- references

struct TitanKeys {
  std::map<std::string, std::string> types;  // "parallelism.tensor_parallel_degree" -> "int"
  std::set<std::string> sections;            // "[a.b]" headers
  std::set<std::string> schedules;           // schedule_map keys (get_schedule_class)
  std::set<std::string> converters;          // registered model converter names
};
const TitanKeys& titan_keys() {
  static const TitanKeys k = [] {
    TitanKeys out;
    const std::string text = read_fixture("torchtitan_keys.txt");
    std::stringstream s(text);
    // Lines `#  "NAME": Schedule...` or `#  "NAME": PipelineSchedule...` name the schedules.
    const std::string alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for (std::string line; std::getline(s, line);) {
      if (line.size() > 2 && line[0] == '#' && (line[1] == ' ' || line[1] == '\t')) {
        const size_t quote = line.find_first_not_of(" \t", 1);
        if (quote != std::string::npos && line[quote] == '"') {
          const std::string name = run_of(line, quote + 1, alnum);
          const std::string rest = line.substr(quote + 1 + name.size());
          if (!name.empty() && (rest.rfind("\": Schedule", 0) == 0 || rest.rfind("\": PipelineSchedule", 0) == 0)) out.schedules.insert(name);
        }
      }
      if (line.empty() || line[0] == '#') continue;
      if (line[0] == '[') {
        out.sections.insert(line.substr(1, line.find(']') - 1));
        continue;
      }
      std::stringstream ls(line);
      std::string key, type;
      std::getline(ls, key, '\t');
      std::getline(ls, type, '\t');
      out.types[key] = type;
    }
    const size_t conv = text.find("model.converters: list of registered converter names:");
    EXPECT_NE(conv, std::string::npos);
    const std::string tail = text.substr(conv, text.find("(torchtitan/components", conv) - conv);
    for (const std::string& q : between_all(tail, "\"quantize.", "\""))
      if (all_in(q, kLowerDigitUnderscore + ".")) out.converters.insert("quantize." + q);
    return out;
  }();
  return k;
}

// The choices of a Literal[...] type, empty for other types.
std::set<std::string> literal_choices(const std::string& type) {
  std::set<std::string> out;
  if (type.rfind("Literal[", 0) != 0) return out;
  for (const std::string& item : between_all(type, "'", "'")) out.insert(item);
  return out;
}

// Problems of a parsed job TOML against JobConfig: a key or table that is not torchtitan's, a
// value of the wrong TOML type, a value outside its Literal choices or torchtitan's names.
std::vector<std::string> toml_problems(const toml::table& t, const std::string& prefix = "") {
  std::vector<std::string> bad;
  const TitanKeys& ref = titan_keys();
  for (auto&& [k, v] : t) {
    const std::string path = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = v.as_table()) {
      if (!ref.sections.count(path)) bad.push_back("[" + path + "]");
      std::vector<std::string> more = toml_problems(*sub, path);
      bad.insert(bad.end(), more.begin(), more.end());
      continue;
    }
    auto type = ref.types.find(path);
    if (type == ref.types.end()) {
      bad.push_back(path);
      continue;
    }
    const std::string& ty = type->second;
    const bool ok_type = ty.rfind("int", 0) == 0 ? v.is_integer()
                         : ty.rfind("bool", 0) == 0 ? v.is_boolean()
                         : ty.rfind("float", 0) == 0 ? v.is_number()
                         : ty.rfind("list[list[str]]", 0) == 0 ? v.is_array()
                         : ty.rfind("list[str]", 0) == 0 ? v.is_array() || (ty.find("| str") != std::string::npos && v.is_string())
                                                        : v.is_string();
    if (!ok_type) bad.push_back(path + " type");
    const std::set<std::string> choices = literal_choices(ty);
    if (!choices.empty() && (!v.is_string() || !choices.count(*v.value<std::string>()))) bad.push_back(path + " value");
    if (path == "parallelism.pipeline_parallel_schedule") {
      bool known = false;
      for (const std::string& n : ref.schedules) known |= n == *v.value<std::string>();  // exact spelling
      if (!known) bad.push_back(path + " value");
    }
    if (path == "model.converters")
      for (const toml::node& c : *v.as_array())
        if (!ref.converters.count(c.value_or(std::string()))) bad.push_back(path + " value");
    if (path == "activation_checkpoint.selective_ac_option") {
      const std::string o = v.value_or(std::string());
      if (o != "op" && !all_in(o, "0123456789")) bad.push_back(path + " value");
    }
  }
  return bad;
}

Result<ImportedConfig> import_toml(const std::string& toml_text, const std::string& script = "", const std::string& gpu = "h100-sxm",
                                   const std::string& model = "") {
  std::vector<LaunchFile> files = {{"train.toml", toml_text, false}};
  if (!script.empty()) files.push_back({"launch.sh", script, true});
  return import_files(files, LaunchFormat::torchtitan, import_options(gpu, model), "run");
}

// ---------------------------------------------------------------- the plans

const std::map<std::string, std::string> kRefusedMatrixPlans = {
    {"llama3-8b dp8 zero1", "plan.zero"},  // FSDP2 is ZeRO-3, DDP ZeRO-0: no ZeRO-1/2
    {"llama3-8b dp8 zero2", "plan.zero"},
    {"llama3-8b dp4 tp2 sp zero1", "plan.zero"},
    {"llama3-70b tp4 pp4 vpp5 cp2 sp zero1", "plan.zero"},
    {"llama3-70b tp8 pp2 full_k10", "plan.zero"},
    {"llama3.1-405b tp8 pp8 vpp8 cp2 uneven", "plan.zero"},
    {"mixtral-8x7b dp8 tp2 ep8", "model"},             // no torchtitan flavor has Mixtral's shape
    {"qwen3-30b-a3b dp8 ep8 fp8", "job.fp8"},          // tensorwise FP8 for experts: torchtitan's is rowwise
    {"llama3-8b lora dp8", "job.mode"},
    {"llama3-8b pp4 custom split", "plan.zero"},
    {"llama3-8b dp8 zero1 bf16 moments", "job.moments"},  // torch.optim's moments take the parameters' dtype
};

struct TitanCase {
  NamedPlan plan;
  std::string gpu;
  std::string expect;  // "" round trips, else the field the refusal names
};

std::vector<TitanCase> all_cases() {
  std::vector<TitanCase> out;
  for (NamedPlan& np : testing::round_trip_plans()) {
    auto r = kRefusedMatrixPlans.find(np.name);
    out.push_back({np, "h100-sxm", r == kRefusedMatrixPlans.end() ? "" : r->second});
  }
  // The matrix's ZeRO-1 shapes under FSDP (ZeRO-3), so that every dimension torchtitan has is
  // round-tripped: TP, interleaved PP with CP, layer SAC for full_k, the uneven 405B split,
  // EP, and an even split torchtitan's generator cannot produce (explicit module lists).
  for (NamedPlan np : testing::round_trip_plans()) {
    if (np.file.plan.zero != 1 || np.file.model.name == "mixtral-8x7b" || np.file.job.mode == TrainMode::lora) continue;
    np.file.plan.zero = 3;
    if (np.file.job.fp8_linear()) np.file.job.fp8 = Fp8Recipe::none;
    if (np.file.job.moments != MomentsDtype::fp32) continue;  // the zero1 case already names job.moments
    np.name += " as zero3";
    out.push_back({np, "h100-sxm", ""});
  }
  auto add = [&](const std::string& name, const std::string& model, const std::string& gpu, int gpus, TrainingJob j, ParallelPlan p,
                 const std::string& expect) { out.push_back({{name, make_plan_file(model, gpu, gpus, j, p)}, gpu, expect}); };
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 128;
  ParallelPlan p;
  p.dp = 2, p.tp = 8, p.pp = 4, p.sp = true, p.zero = 3;
  add("llama3.1-405b dp2 tp8 pp4 explicit stages", "llama3.1-405b", "h100-sxm", 64, j, p, "");
  p = {};
  p.dp = 4, p.pp = 2, p.zero = 3, p.schedule = Schedule::gpipe, p.recompute = Recompute::full;
  add("llama3-8b dp4 pp2 gpipe", "llama3-8b", "h100-sxm", 8, j, p, "");
  TrainingJob ft = j;
  ft.mode = TrainMode::finetune;
  p = {};
  p.dp = 8, p.zero = 3, p.recompute = Recompute::selective;
  add("qwen3-8b dp8 finetune", "qwen3-8b", "h100-sxm", 8, ft, p, "");
  TrainingJob mx = j;
  mx.fp8 = Fp8Recipe::mxfp8;
  p = {};
  p.dp = 8, p.zero = 3, p.recompute = Recompute::none;
  add("llama3-8b dp8 mxfp8 b200", "llama3-8b", "b200", 8, mx, p, "");
  p.ep = 8;
  add("qwen3-30b-a3b dp8 ep8 mxfp8 b200", "qwen3-30b-a3b", "b200", 8, mx, p, "");
  TrainingJob fp8 = j;
  fp8.fp8 = Fp8Recipe::tensorwise;
  p = {};
  p.dp = 4, p.tp = 2, p.sp = true, p.zero = 3;
  add("llama3-70b dp4 tp2 tensorwise", "llama3-70b", "h100-sxm", 8, fp8, p, "");
  // Refused.
  p = {};
  p.dp = 4, p.tp = 2, p.sp = true, p.zero = 0;
  add("llama3-8b dp4 tp2 zero0", "llama3-8b", "h100-sxm", 8, j, p, "plan.zero");
  p = {};
  p.dp = 8, p.zero = 3, p.offload_optimizer = true;
  add("llama3-8b dp8 zero3 offload", "llama3-8b", "h100-sxm", 8, j, p, "plan.offload_optimizer");
  p.offload_params = true;  // FSDP's CPUOffloadPolicy: training.enable_cpu_offload
  add("llama3-8b dp8 zero3 cpu offload", "llama3-8b", "h100-sxm", 8, j, p, "");
  TrainingJob fp16 = j;
  fp16.precision = Precision::fp16;
  p = {};
  p.dp = 8, p.zero = 3;
  add("llama3-8b dp8 fp16", "llama3-8b", "h100-sxm", 8, fp16, p, "job.precision");
  TrainingJob delayed = j;
  delayed.fp8 = Fp8Recipe::delayed;
  add("llama3-8b dp8 delayed", "llama3-8b", "h100-sxm", 8, delayed, p, "job.fp8");
  p.recompute = Recompute::full_k, p.recompute_layers = 20;  // no n has floor(32 / n) = 20
  add("llama3-8b dp8 full_k20", "llama3-8b", "h100-sxm", 8, j, p, "plan.recompute");
  p = {};
  p.dp = 4, p.pp = 2, p.zero = 3;
  add("qwen3-8b dp4 pp2", "qwen3-8b", "h100-sxm", 8, j, p, "plan.pp");
  p = {};
  p.dp = 4, p.tp = 2, p.sp = false, p.zero = 3;
  add("llama3-8b dp4 tp2 no sp", "llama3-8b", "h100-sxm", 8, j, p, "plan.sp");
  return out;
}

// ---------------------------------------------------------------- round trip

TEST(TorchtitanFormat, RoundTripsEveryPlanItCanRunAndRefusesTheRestNamingTheField) {
  std::set<std::string> refused, expected_refused;
  int round_tripped = 0;
  // data/frameworks/torchtitan.json: the rules `export --to torchtitan` and the sweep's
  // "runs on" column apply before the exporter.
  const Result<FrameworkSpec> fw = testing::shipped_presets().framework("torchtitan");
  ASSERT_TRUE(fw) << fw.status().message();
  for (const TitanCase& c : all_cases()) {
    SCOPED_TRACE(c.plan.name);
    if (!c.expect.empty()) expected_refused.insert(c.plan.name);
    Result<ExportResult> ex = export_plan(c.plan.file, LaunchFormat::torchtitan);
    if (!ex) {
      refused.insert(c.plan.name);
      EXPECT_EQ(ex.status().kind(), ErrorKind::bad_input);
      EXPECT_EQ(ex.status().message().rfind(c.expect + ":", 0), 0u) << ex.status().message();
      EXPECT_FALSE(c.expect.empty()) << ex.status().message();
      continue;
    }
    // What the exporter writes, the framework's rules accept.
    EXPECT_EQ(framework_refusal_text(*fw, c.plan.file.model, c.plan.file.job, c.plan.file.plan), "");
    // The flavor names the model: no --model needed.
    ASSERT_TRUE(expect_round_trip(c.plan.file, ex->files, LaunchFormat::torchtitan, import_options(c.gpu), "exported", c.plan.name));
    ++round_tripped;
  }
  EXPECT_EQ(refused, expected_refused);
  EXPECT_GE(round_tripped, 12);
}

TEST(TorchtitanFormat, SplitsAreWrittenAsTorchtitansOwnKeysWhereItsGeneratorReproducesThem) {
  std::map<std::string, std::string> texts;
  for (const TitanCase& c : all_cases()) {
    Result<ExportResult> ex = export_plan(c.plan.file, LaunchFormat::torchtitan);
    if (ex) texts[c.plan.name] = testing::find_file(ex->files, "train.toml")->text;
  }
  // 405B's 126 layers on pp 8 x vpp 8, Megatron's embedding/loss split: torchtitan's
  // first/last-stage weights of 1 with 2 layers per stage give the same 64 stages.
  const toml::table uneven = toml::parse(texts.at("llama3.1-405b tp8 pp8 vpp8 cp2 uneven as zero3"));
  EXPECT_EQ(uneven.at_path("parallelism.pipeline_parallel_first_stage_less_layers").value<int64_t>(), 1);
  EXPECT_EQ(uneven.at_path("parallelism.pipeline_parallel_last_stage_less_layers").value<int64_t>(), 1);
  EXPECT_EQ(uneven.at_path("parallelism.pipeline_parallel_layers_per_stage").value<int64_t>(), 2);
  EXPECT_EQ(uneven.at_path("parallelism.pipeline_parallel_schedule").value<std::string>(), "Interleaved1F1B");
  // 126 layers on pp 4, even with the remainder on the last stages (31, 31, 32, 32): the
  // generator puts it on the first ones, so the stages are listed.
  const toml::table expl = toml::parse(texts.at("llama3.1-405b dp2 tp8 pp4 explicit stages"));
  const toml::array* parts = expl.at_path("parallelism.module_fqns_per_model_part").as_array();
  ASSERT_NE(parts, nullptr);
  ASSERT_EQ(parts->size(), 4u);
  EXPECT_EQ(parts->at(0).as_array()->size(), 1u + 31);  // tok_embeddings + 31 layers
  EXPECT_EQ(parts->at(3).as_array()->size(), 32u + 2);  // 32 layers + norm, output
  // The plan's own stage sizes 6, 9, 9, 8, which no first/last weights of the generator give:
  // listed module by module.
  const toml::table own_table = toml::parse(texts.at("llama3-8b pp4 custom split as zero3"));
  const toml::array* own = own_table.at_path("parallelism.module_fqns_per_model_part").as_array();
  ASSERT_NE(own, nullptr);
  ASSERT_EQ(own->size(), 4u);
  EXPECT_EQ(own->at(0).as_array()->size(), 1u + 6);
  EXPECT_EQ(own->at(1).as_array()->size(), 9u);
  EXPECT_EQ(own->at(3).as_array()->size(), 8u + 2);
  // full_k 10 on 40-layer stages: layer SAC every 4th block.
  const toml::table fk = toml::parse(texts.at("llama3-70b tp8 pp2 full_k10 as zero3"));
  EXPECT_EQ(fk.at_path("activation_checkpoint.selective_ac_option").value<std::string>(), "4");
  // A ring of K/V shards is torch's all-to-all rotation.
  EXPECT_EQ(toml::parse(texts.at("llama3-70b tp4 pp4 vpp5 cp2 sp zero1 as zero3")).at_path("parallelism.context_parallel_rotate_method").value<std::string>(),
            "alltoall");
}

// ---------------------------------------------------------------- key names and value forms

TEST(TorchtitanFormat, EveryKeyIsAJobConfigFieldWithAValidValueAndAComment) {
  int checked = 0;
  for (const TitanCase& c : all_cases()) {
    Result<ExportResult> ex = export_plan(c.plan.file, LaunchFormat::torchtitan);
    if (!ex) continue;
    SCOPED_TRACE(c.plan.name);
    const std::string& text = testing::find_file(ex->files, "train.toml")->text;
    toml::table t;
    ASSERT_NO_THROW(t = toml::parse(text));  // the whole file, comments included, is TOML
    EXPECT_EQ(toml_problems(t), std::vector<std::string>{});
    // Every key line follows its comment line.
    std::stringstream s(text);
    std::string previous;
    for (std::string line; std::getline(s, line); previous = line) {
      if (const std::string key = run_of(line, 0, kLowerDigitUnderscore); !key.empty() && line.compare(key.size(), 3, " = ") == 0) {
        EXPECT_EQ(previous.rfind("# ", 0), 0u) << line;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 12);
}

TEST(TorchtitanFormat, TheKeyCheckCatchesAMisspeltKeyAndAWrongValue) {
  EXPECT_EQ(toml_problems(toml::parse("[parallelism]\ntensor_paralel_degree = 2\n")), std::vector<std::string>{"parallelism.tensor_paralel_degree"});
  EXPECT_EQ(toml_problems(toml::parse("[activation_checkpoint]\nmode = 'partial'\n")), std::vector<std::string>{"activation_checkpoint.mode value"});
  EXPECT_EQ(toml_problems(toml::parse("[parallelism]\npipeline_parallel_schedule = 'OneFOneB'\n")),
            std::vector<std::string>{"parallelism.pipeline_parallel_schedule value"});
  EXPECT_EQ(toml_problems(toml::parse("[parallelism]\ntensor_parallel_degree = '2'\n")), std::vector<std::string>{"parallelism.tensor_parallel_degree type"});
  EXPECT_EQ(toml_problems(toml::parse("[model]\nconverters = ['float8']\n")), std::vector<std::string>{"model.converters value"});
  EXPECT_EQ(toml_problems(toml::parse("[paralelism]\n")), std::vector<std::string>{"[paralelism]"});
  EXPECT_TRUE(toml_problems(toml::parse(read_fixture("torchtitan_llama3_8b.toml"))).empty());  // the checker accepts torchtitan's own
}

TEST(TorchtitanFormat, LaunchLineIsRunTrainShsAsBashPassesIt) {
  if (!testing::bash_available()) GTEST_SKIP() << "no bash";
  int k = 0;
  for (const TitanCase& c : all_cases()) {
    Result<ExportResult> ex = export_plan(c.plan.file, LaunchFormat::torchtitan);
    if (!ex) continue;
    SCOPED_TRACE(c.plan.name);
    const std::string dir = testing::write_temp(ex->files, "tt" + std::to_string(k++));
    std::optional<std::vector<std::string>> w = testing::bash_launch_words(dir + "/launch.sh", "torchrun");
    ASSERT_TRUE(w.has_value());
    const ClusterSpec& cl = c.plan.file.cluster;
    ASSERT_GE(w->size(), 7u);
    EXPECT_EQ((*w)[0], "--nnodes");
    EXPECT_EQ((*w)[1], std::to_string(cl.nodes));
    EXPECT_EQ((*w)[2], "--nproc_per_node");
    EXPECT_EQ((*w)[3], std::to_string(cl.gpus_per_node));
    const size_t m = w->size() - 4;  // run_train.sh: -m torchtitan.train --job.config_file FILE
    EXPECT_EQ((*w)[m], "-m");
    EXPECT_EQ((*w)[m + 1], "torchtitan.train");
    EXPECT_EQ((*w)[m + 2], "--job.config_file");
    EXPECT_EQ((*w)[m + 3], dir + "/train.toml");
  }
}

// ---------------------------------------------------------------- the schema and flavors are torchtitan's

TEST(TorchtitanFormat, JobConfigSchemaIsTheFixtures) {
  std::set<std::string> code, sections;
  for (const launch_formats::TorchtitanField& f : launch_formats::torchtitan_job_config_fields()) {
    code.insert(f.path);
    auto ref = titan_keys().types.find(f.path);
    ASSERT_NE(ref, titan_keys().types.end()) << f.path;
    EXPECT_EQ(ref->second, f.type) << f.path;
  }
  EXPECT_EQ(code.size(), titan_keys().types.size());
  for (const char* s : launch_formats::torchtitan_job_config_sections()) sections.insert(s);
  EXPECT_EQ(sections, titan_keys().sections);
  EXPECT_EQ(titan_keys().schedules.size(), 9u);  // the fixture's schedule_map was read
}

// One flavor's arguments from a verbatim __init__.py: `"NAME": Args(k=v, ...)` up to the
// closing parenthesis at the flavor's indentation.
std::map<std::string, std::string> flavor_args(const std::string& source, const std::string& flavor) {
  std::map<std::string, std::string> out;
  const size_t start = source.find("\"" + flavor + "\": ");
  if (start == std::string::npos) return out;
  const size_t end = source.find("\n    ),", start);
  const std::string block = source.substr(start, end - start);
  // Each `key=value` with key in [a-z_]+ and value in [A-Za-z0-9_."]+.
  const std::string key_chars = "abcdefghijklmnopqrstuvwxyz_";
  const std::string value_chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.\"";
  for (size_t eq = block.find('='); eq != std::string::npos; eq = block.find('=', eq + 1)) {
    size_t from = eq;
    while (from > 0 && key_chars.find(block[from - 1]) != std::string::npos) --from;
    const std::string value = run_of(block, eq + 1, value_chars);
    if (from < eq && !value.empty()) out[block.substr(from, eq - from)] = value;
  }
  return out;
}

TEST(TorchtitanFormat, FlavorTableIsTorchtitansModelArguments) {
  const std::string llama = read_fixture("torchtitan_llama3_init.py"), qwen = read_fixture("torchtitan_qwen3_init.py");
  int checked = 0;
  for (const launch_formats::TorchtitanFlavor& f : launch_formats::torchtitan_flavors()) {
    SCOPED_TRACE(std::string(f.model) + " " + f.flavor);
    const bool is_llama = std::string(f.model) == "llama3";
    std::map<std::string, std::string> a = flavor_args(is_llama ? llama : qwen, f.flavor);
    ASSERT_FALSE(a.empty());
    auto i = [&](const char* k, int64_t dflt) { return a.count(k) ? std::stoll(a[k]) : dflt; };
    EXPECT_EQ(f.layers, i("n_layers", -1));
    EXPECT_EQ(f.hidden, i("dim", -1));
    EXPECT_EQ(f.heads, i("n_heads", -1));
    EXPECT_EQ(f.kv_heads, i("n_kv_heads", f.heads));
    if (is_llama) {
      // TransformerModelArgs defaults (llama3/model/args.py): vocab 128256, max_seq_len 131072;
      // FeedForward (llama3/model/model.py L326-336) from hidden_dim = 4 * dim.
      EXPECT_EQ(f.vocab, i("vocab_size", 128256));
      EXPECT_EQ(f.head_dim, f.hidden / f.heads);
      int64_t ffn = static_cast<int64_t>(2.0 * 4 * f.hidden / 3);
      if (a.count("ffn_dim_multiplier")) ffn = static_cast<int64_t>(std::stod(a["ffn_dim_multiplier"]) * static_cast<double>(ffn));
      const int64_t multiple = i("multiple_of", 256);
      EXPECT_EQ(f.ffn_hidden, multiple * ((ffn + multiple - 1) / multiple));
      EXPECT_FALSE(f.tied);
      EXPECT_FALSE(f.qk_norm);
    } else {
      EXPECT_EQ(f.vocab, i("vocab_size", -1));
      EXPECT_EQ(f.head_dim, i("head_dim", -1));
      EXPECT_EQ(f.max_seq_len, i("max_seq_len", -1));
      EXPECT_EQ(f.tied, a.count("enable_weight_tying") && a["enable_weight_tying"] == "True");
      EXPECT_EQ(f.qk_norm, a["qk_norm"] == "True");
      const bool moe = a.count("moe_enabled") && a["moe_enabled"] == "True";
      EXPECT_EQ(f.experts, moe ? i("num_experts", -1) : 0);
      EXPECT_EQ(f.ffn_hidden, moe ? i("moe_inter_dim", -1) : i("hidden_dim", -1));
      if (moe) {
        EXPECT_EQ(f.experts_per_token, i("top_k", -1));
        EXPECT_EQ(i("num_shared_experts", -1), 0);
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 11);
}

// ---------------------------------------------------------------- published configs

TEST(TorchtitanFormat, PublishedLlama3_8bConfigImportsToItsPlan) {
  // torchtitan v0.2.2 torchtitan/models/llama3/train_configs/llama3_8b.toml, alone: run_train.sh
  // starts it on one node (NGPU 8), and data_parallel_shard_degree -1 takes all 8 as FSDP.
  Result<ImportedConfig> im = import_toml(read_fixture("torchtitan_llama3_8b.toml"));
  ASSERT_TRUE(im) << im.status().message();
  const PlanFile& f = im->file;
  EXPECT_EQ(f.model.name, "llama3-8b");
  EXPECT_EQ(f.gpus, 8);
  EXPECT_EQ(f.plan.dp, 8);
  EXPECT_EQ(f.plan.zero, 3);
  EXPECT_EQ(f.plan.tp, 1);
  EXPECT_EQ(f.plan.pp, 1);
  EXPECT_EQ(f.plan.cp, 1);
  EXPECT_EQ(f.plan.micro_batch, 1);
  EXPECT_EQ(f.plan.grad_accum, 1);
  EXPECT_EQ(f.job.global_batch, 8);  // global_batch_size -1: local * dp
  EXPECT_EQ(f.job.seq_len, 8192);
  EXPECT_EQ(f.plan.recompute, Recompute::selective);  // selective, op
  EXPECT_EQ(f.job.precision, Precision::bf16);        // mixed_precision_param's default
  EXPECT_EQ(f.job.fp8, Fp8Recipe::none);              // [quantize.linear.float8] without the converter
  const std::vector<std::string>& u = im->unknown_keys;
  for (const char* k : {"profiling.enable_profiling", "optimizer.lr", "quantize.linear.float8.filter_fqns", "checkpoint.enable",
                        "validation.steps", "training.max_norm"})
    EXPECT_NE(std::find(u.begin(), u.end(), k), u.end()) << k;
  EXPECT_EQ(std::find(u.begin(), u.end(), "parallelism.tensor_parallel_degree"), u.end());
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
  EXPECT_GT(e.time.tokens_per_s, 0);
}

TEST(TorchtitanFormat, PublishedLlama3_70bConfigImportsToItsPlanOn64Gpus) {
  // llama3_70b.toml says it is "a preset for 64 A100 GPUs": launched on 8 nodes of 8.
  const std::string script = "torchrun --nnodes 8 --nproc_per_node 8 -m torchtitan.train --job.config_file llama3_70b.toml\n";
  std::vector<LaunchFile> files = {{"llama3_70b.toml", read_fixture("torchtitan_llama3_70b.toml"), false}, {"run.sh", script, true}};
  Result<ImportedConfig> im = import_files(files, LaunchFormat::torchtitan, import_options("a100-80g"), "published");
  ASSERT_TRUE(im) << im.status().message();
  const PlanFile& f = im->file;
  EXPECT_EQ(f.model.name, "llama3-70b");
  EXPECT_EQ(f.gpus, 64);
  EXPECT_EQ(f.cluster.nodes, 8);
  EXPECT_EQ(f.plan.tp, 8);  // 8-way TP
  EXPECT_TRUE(f.plan.sp);
  EXPECT_EQ(f.plan.dp, 8);  // shard -1: 64 / 8
  EXPECT_EQ(f.plan.zero, 3);
  EXPECT_EQ(f.plan.micro_batch, 8);
  EXPECT_EQ(f.job.global_batch, 64);
  EXPECT_EQ(f.plan.recompute, Recompute::full);
  EXPECT_EQ(f.job.precision, Precision::bf16);
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
}

// ---------------------------------------------------------------- bad input

TEST(TorchtitanFormat, MalformedTomlNamesTheFileAndLine) {
  expect_bad_input(import_toml("[model]\nname = \"llama3\"\nflavor = \"8B\n"), {"run/train.toml", "line 3", "TOML"});
}

TEST(TorchtitanFormat, ContradictoryKeysAreBadInputNamingThem) {
  const std::string base = "[model]\nname = 'llama3'\nflavor = '8B'\n";
  // HSDP: replicas of FSDP groups.
  expect_bad_input(import_toml(base + "[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 4\n"),
             {"train.toml", "line 5", "parallelism.data_parallel_replicate_degree"});
  // The degrees against the launch's GPUs.
  expect_bad_input(import_toml(base + "[parallelism]\ndata_parallel_shard_degree = 4\n", "torchrun --nproc_per_node 8 -m torchtitan.train\n"),
             {"parallelism.data_parallel_shard_degree", "8"});
  // A global batch that is not a multiple of local * dp.
  expect_bad_input(import_toml(base + "[training]\nlocal_batch_size = 2\nglobal_batch_size = 20\n"), {"training.global_batch_size", "16"});
  // Pipeline micro-batches that do not divide the local batch.
  expect_bad_input(import_toml(base + "[training]\nlocal_batch_size = 6\n[parallelism]\npipeline_parallel_degree = 2\n"
                                "pipeline_parallel_microbatch_size = 4\n"),
             {"parallelism.pipeline_parallel_microbatch_size"});
  // A multi-stage schedule with one stage per rank.
  expect_bad_input(import_toml(base + "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = 'Interleaved1F1B'\n"
                                "pipeline_parallel_layers_per_stage = 17\n"),
             {"pipeline_parallel_schedule"});
  // --model against the flavor.
  expect_bad_input(import_toml(base, "", "h100-sxm", "llama3-70b"), {"model.flavor", "layers"});
}

TEST(TorchtitanFormat, AbsurdValuesAreBadInputNamingTheKey) {
  const std::string base = "[model]\nname = 'llama3'\nflavor = '8B'\n";
  expect_bad_input(import_toml(base + "[parallelism]\ntensor_parallel_degree = -2\n"), {"parallelism.tensor_parallel_degree", "-2", "line 5"});
  expect_bad_input(import_toml(base + "[parallelism]\ndata_parallel_shard_degree = 0\n"), {"parallelism.data_parallel_shard_degree"});
  expect_bad_input(import_toml(base + "[training]\nseq_len = 'long'\n"), {"training.seq_len", "long"});
  expect_bad_input(import_toml(base + "[activation_checkpoint]\nmode = 'partial'\n"), {"activation_checkpoint.mode", "partial"});
  expect_bad_input(import_toml("[model]\nname = 'llama3'\nflavor = '9B'\n"), {"model.flavor", "9B"});
  expect_bad_input(import_toml(base + "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = 'LoopedBFS'\n"),
             {"pipeline_parallel_schedule", "LoopedBFS"});
}

// ZBVZeroBubble and DualPipeV: two stages per rank placed in a V (torchtitan's "v" stage
// placement, torchtitan_keys.txt L447-448), read as llmplan's zbv / dualpipev with vpp 2.
TEST(TorchtitanFormat, VScheduleImportsAsTwoChunksPerRank) {
  const std::string base = "[model]\nname = 'llama3'\nflavor = '8B'\n[training]\nlocal_batch_size = 8\n";
  for (const auto& [name, schedule] : {std::pair{"ZBVZeroBubble", Schedule::zbv}, std::pair{"DualPipeV", Schedule::dualpipev}}) {
    Result<ImportedConfig> r = import_toml(base + "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = '" + name + "'\n");
    ASSERT_TRUE(r) << name << ": " << r.status().message();
    EXPECT_EQ(r->file.plan.schedule, schedule) << name;
    EXPECT_EQ(r->file.plan.pp, 2) << name;
    EXPECT_EQ(r->file.plan.vpp, 2) << name;
  }
}

TEST(TorchtitanFormat, KeysOutsideJobConfigAreRefusedAsTorchtitanDoesAndUnusedOnesListed) {
  const std::string base = "[model]\nname = 'llama3'\nflavor = '8B'\n";
  expect_bad_input(import_toml(base + "[parallelism]\ntensor_paralel_degree = 2\n"), {"parallelism.tensor_paralel_degree", "manager.py"});
  expect_bad_input(import_toml(base + "[paralelism]\ntensor_parallel_degree = 2\n"), {"paralelism"});
  // With a custom config module, torchtitan accepts its fields: listed.
  Result<ImportedConfig> custom = import_toml("[job]\ncustom_config_module = 'my.config'\n" + base + "[my_section]\nx = 1\n");
  ASSERT_TRUE(custom) << custom.status().message();
  EXPECT_NE(std::find(custom->unknown_keys.begin(), custom->unknown_keys.end(), "my_section"), custom->unknown_keys.end());
  Result<ImportedConfig> im = import_toml(base + "[metrics]\nlog_freq = 5\n[optimizer]\nname = 'AdamW'\nlr = 1e-4\n");
  ASSERT_TRUE(im) << im.status().message();
  const std::vector<std::string>& u = im->unknown_keys;
  EXPECT_NE(std::find(u.begin(), u.end(), "metrics.log_freq"), u.end());
  EXPECT_NE(std::find(u.begin(), u.end(), "optimizer.lr"), u.end());
  EXPECT_EQ(std::find(u.begin(), u.end(), "optimizer.name"), u.end());
}

TEST(TorchtitanFormat, LaunchLineOverridesTheToml) {
  // run_train.sh passes "$@" after --job.config_file: the command line wins (tyro).
  const std::string base = "[model]\nname = 'llama3'\nflavor = '8B'\n[parallelism]\ntensor_parallel_degree = 1\n";
  Result<ImportedConfig> im = import_toml(base, "torchrun --nproc_per_node 8 -m torchtitan.train --job.config_file train.toml "
                                                "--parallelism.tensor_parallel_degree 2 --activation_checkpoint.mode=full\n");
  ASSERT_TRUE(im) << im.status().message();
  EXPECT_EQ(im->file.plan.tp, 2);
  EXPECT_EQ(im->file.plan.dp, 4);
  EXPECT_EQ(im->file.plan.recompute, Recompute::full);
  expect_bad_input(import_toml(base, "torchrun --nproc_per_node 8 -m torchtitan.train --parallelism.tensor_paralel_degree 2\n"),
             {"launch.sh", "--parallelism.tensor_paralel_degree"});
}

TEST(TorchtitanFormat, LayerSacIsReadAsFullRecomputeOfThatManyLayersPerStage) {
  const std::string base = "[model]\nname = 'llama3'\nflavor = '8B'\n[activation_checkpoint]\nmode = 'selective'\n";
  Result<ImportedConfig> every4 = import_toml(base + "selective_ac_option = '4'\n");
  ASSERT_TRUE(every4) << every4.status().message();
  EXPECT_EQ(every4->file.plan.recompute, Recompute::full_k);
  EXPECT_EQ(every4->file.plan.recompute_layers, 8);  // 32 layers, every 4th
  Result<ImportedConfig> every1 = import_toml(base + "selective_ac_option = '1'\n");
  ASSERT_TRUE(every1);
  EXPECT_EQ(every1->file.plan.recompute, Recompute::full);
}

}  // namespace
}  // namespace llmplan
