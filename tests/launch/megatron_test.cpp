// The megatron format (launch/megatron.cpp): round trips over the plan matrix, every flag
// and value form the export writes checked against Megatron-LM core_v0.13.0's own option
// list (tests/fixtures/frameworks/megatron_args.txt, megatron_arg_forms.txt), the published
// example scripts imported, and bad input named.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "launch/launch.h"
#include "launch/shell_words.h"
#include "planner/search/explain.h"
#include "tests/launch/format_test_util.h"

namespace llmplan {
namespace {

using testing::expect_bad_input;
using testing::import_options;
using testing::NamedPlan;
using testing::read_fixture;
using testing::shipped_presets;

Result<ImportedConfig> import_text(const std::string& name, const std::string& text) {
  return import_files({{name, text, false}}, LaunchFormat::megatron, import_options(), name);
}

// ---------------------------------------------------------------- the option lists

struct OptionForm {
  std::string form;                 // flag, value, list
  std::set<std::string> choices;    // empty: any value
};

// megatron_arg_forms.txt: option, form, line, choices (extracted from arguments.py).
const std::map<std::string, OptionForm>& megatron_forms() {
  static const std::map<std::string, OptionForm> forms = [] {
    std::map<std::string, OptionForm> out;
    for (const std::vector<std::string>& cols : testing::fixture_rows("megatron_arg_forms.txt")) {
      if (cols.size() != 4) continue;
      OptionForm f;
      f.form = cols[1];
      if (cols[3] != "-" && cols[3].rfind("(computed", 0) != 0) {
        std::istringstream cs(cols[3]);
        for (std::string c; cs >> c;) f.choices.insert(c);
      }
      out[cols[0]] = f;
    }
    return out;
  }();
  return forms;
}

std::set<std::string> megatron_options() {
  std::set<std::string> out;
  for (const std::vector<std::string>& cols : testing::fixture_rows("megatron_args.txt")) out.insert(cols[0]);
  return out;
}

// torchrun's (torch/distributed/run.py) and srun's options the launch lines use.
const std::set<std::string> kLauncherOptions = {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
                                                "--rdzv-id", "--rdzv-backend", "--rdzv-endpoint", "--nodes", "--ntasks-per-node"};

// Every problem with the options in a launch script, read line by line without the
// importer's shell reader: a `--flag` not in Megatron's list (nor a launcher's), a flag
// given a value or a value-taking option given none, a value outside the option's choices.
std::vector<std::string> option_problems(const std::string& script) {
  static const std::set<std::string> known = megatron_options();
  const std::map<std::string, OptionForm>& forms = megatron_forms();
  std::vector<std::string> problems;
  std::istringstream in(script);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("#", 0) == 0) continue;  // comments and #SBATCH lines
    const size_t hash = line.find(" #");
    if (hash != std::string::npos) line = line.substr(0, hash);
    std::istringstream ws(line);
    std::vector<std::string> words;
    for (std::string w; ws >> w;) words.push_back(w);
    for (size_t i = 0; i < words.size(); ++i) {
      const std::string& w = words[i];
      if (w.rfind("--", 0) != 0) continue;
      if (kLauncherOptions.count(w)) continue;
      if (!known.count(w)) {
        problems.push_back("unknown option " + w);
        continue;
      }
      std::vector<std::string> values;
      for (size_t k = i + 1; k < words.size() && words[k].rfind("--", 0) != 0; ++k) values.push_back(words[k]);
      const OptionForm& f = forms.at(w);
      if (f.form == "flag" && !values.empty()) problems.push_back(w + " takes no value, got " + values[0]);
      if (f.form == "value" && values.size() != 1) problems.push_back(w + " takes one value, got " + std::to_string(values.size()));
      if (f.form == "list" && values.empty()) problems.push_back(w + " takes values, got none");
      for (const std::string& v : values)
        if (!f.choices.empty() && !f.choices.count(v)) problems.push_back(w + " " + v + ": not one of its choices");
    }
  }
  return problems;
}

// ---------------------------------------------------------------- round trip

// The plans of the matrix the megatron format refuses, and the plan field each refusal names.
const std::map<std::string, std::string> kRefused = {
    {"llama3-8b lora dp8", "job.mode"},  // Megatron-LM has no LoRA
    {"llama3-8b pp2 zbv zero3", "plan.schedule"},  // core has no zero-bubble schedule
};

TEST(MegatronFormat, RoundTripsEveryPlanItCanExpress) {
  int exported = 0;
  for (const NamedPlan& np : testing::round_trip_plans()) {
    SCOPED_TRACE(np.name);
    Result<ExportResult> r = export_plan(np.file, LaunchFormat::megatron);
    auto refused = kRefused.find(np.name);
    if (refused != kRefused.end()) {
      ASSERT_FALSE(r) << "expected a refusal naming " << refused->second;
      EXPECT_EQ(r.status().kind(), ErrorKind::bad_input);
      EXPECT_NE(r.status().message().find(refused->second), std::string::npos) << r.status().message();
      continue;
    }
    ASSERT_TRUE(r) << r.status().message();
    ++exported;
    ASSERT_EQ(r->files.size(), 1u);
    EXPECT_EQ(r->files[0].name, "launch.sh");
    EXPECT_TRUE(r->files[0].executable);
    std::optional<ImportedConfig> back =
        testing::expect_round_trip(np.file, r->files, LaunchFormat::megatron, import_options(), "export of " + np.name, np.name);
    ASSERT_TRUE(back);
    // Its own export leaves nothing unread, and the model is named by a preset of its shape.
    EXPECT_TRUE(back->unknown_keys.empty()) << back->unknown_keys.front();
    EXPECT_TRUE(shipped_presets().model(back->file.model.name)) << back->file.model.name;
  }
  EXPECT_EQ(exported, static_cast<int>(testing::round_trip_plans().size() - kRefused.size()));
}

// The refusals outside the matrix, each naming its plan field and the reason's source.
TEST(MegatronFormat, RefusesWhatMegatronCannotRunNamingThePlanField) {
  TrainingJob job;
  job.seq_len = 4096;
  job.global_batch = 256;
  ParallelPlan p;
  auto refusal = [](const PlanFile& f) {
    Result<ExportResult> r = export_plan(f, LaunchFormat::megatron);
    EXPECT_FALSE(r);
    EXPECT_TRUE(r || r.status().kind() == ErrorKind::bad_input);
    return r ? std::string() : r.status().message();
  };
  // ZeRO-3 with pipeline parallelism: Megatron-FSDP is not documented with pp at core_v0.13.0.
  p.dp = 8, p.pp = 2, p.micro_batch = 1, p.zero = 3;
  std::string msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 16, job, p));
  EXPECT_NE(msg.find("plan.zero"), std::string::npos) << msg;
  EXPECT_NE(msg.find("core_v0.13.0"), std::string::npos) << msg;
  // Activation offload: no command-line flag at core_v0.13.0.
  p = {};
  p.dp = 8, p.micro_batch = 1, p.zero = 1, p.activation_offload_layers = 2;
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 8, job, p));
  EXPECT_NE(msg.find("plan.activation_offload_layers"), std::string::npos) << msg;
  // Parameter offload: Megatron offloads the optimizer (--optimizer-cpu-offload), not ZeRO-3's
  // parameter shard.
  p = {};
  p.dp = 8, p.micro_batch = 1, p.zero = 3, p.offload_optimizer = p.offload_params = true;
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 8, job, p));
  EXPECT_NE(msg.find("plan.offload_params"), std::string::npos) << msg;
  // GPipe: Megatron-Core schedules 1F1B or interleaved 1F1B.
  p = {};
  p.dp = 4, p.pp = 2, p.micro_batch = 1, p.schedule = Schedule::gpipe;
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 8, job, p));
  EXPECT_NE(msg.find("plan.schedule"), std::string::npos) << msg;
  // 32 layers on pp 6: the even split 5,5,5,5,6,6 has no first/last form, so it goes out as a
  // layout (one entry per stage) and comes back the same.
  p = {};
  p.pp = 6, p.micro_batch = 1;
  const PlanFile six = testing::make_plan_file("llama3-8b", "h100-sxm", 6, job, p);
  Result<ExportResult> layout = export_plan(six, LaunchFormat::megatron);
  ASSERT_TRUE(layout) << layout.status().message();
  EXPECT_NE(layout->files[0].text.find("--pipeline-model-parallel-layout 'Et*5|t*5|t*5|t*5|t*6|t*6L'"), std::string::npos);
  testing::expect_round_trip(six, layout->files, LaunchFormat::megatron, import_options(), "pp6", "llama3-8b pp6");
  // Frozen layers: pretrain_gpt.py trains every layer.
  TrainingJob frozen = job;
  frozen.mode = TrainMode::finetune;
  frozen.frozen_layers = 4;
  p = {};
  p.dp = 8, p.micro_batch = 1;
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 8, frozen, p));
  EXPECT_NE(msg.find("job.frozen_layers"), std::string::npos) << msg;
  // 12 GPUs on nodes of 8: torchrun starts the same number of processes on every node.
  TrainingJob j12 = job;
  j12.global_batch = 240;
  p = {};
  p.dp = 12, p.micro_batch = 1;
  msg = refusal(testing::make_plan_file("llama3-8b", "h100-sxm", 12, j12, p));
  EXPECT_NE(msg.find("gpus"), std::string::npos) << msg;
}

// An even split with a remainder goes through --decoder-first/last-pipeline-num-layers and
// comes back as the even split.
TEST(MegatronFormat, EvenSplitWithRemainderRoundTripsThroughFirstLastStageLayers) {
  TrainingJob job;
  job.seq_len = 2048;
  job.global_batch = 64;
  ParallelPlan p;
  p.pp = 3, p.micro_batch = 1;  // 32 layers: 10, 11, 11
  const PlanFile f = testing::make_plan_file("llama3-8b", "h100-sxm", 3, job, p);
  Result<ExportResult> r = export_plan(f, LaunchFormat::megatron);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_NE(r->files[0].text.find("--decoder-first-pipeline-num-layers 10"), std::string::npos);
  EXPECT_TRUE(option_problems(r->files[0].text).empty());
  testing::expect_round_trip(f, r->files, LaunchFormat::megatron, import_options(), "pp3", "llama3-8b pp3");
  // 96 layers on pp 5: 19, 19, 19, 19, 20.
  p = {};
  p.tp = 8, p.pp = 5, p.micro_batch = 1;
  const PlanFile g = testing::make_plan_file("gpt3-175b", "h100-sxm", 40, job, p);
  r = export_plan(g, LaunchFormat::megatron);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_NE(r->files[0].text.find("--decoder-last-pipeline-num-layers 20"), std::string::npos);
  testing::expect_round_trip(g, r->files, LaunchFormat::megatron, import_options(), "pp5", "gpt3-175b tp8 pp5");
}

// ---------------------------------------------------------------- key names and value forms

TEST(MegatronFormat, EveryExportedOptionIsMegatronsWithAnAllowedValue) {
  int checked = 0;
  for (const NamedPlan& np : testing::round_trip_plans()) {
    Result<ExportResult> r = export_plan(np.file, LaunchFormat::megatron);
    if (!r) continue;
    const std::vector<std::string> problems = option_problems(r->files[0].text);
    EXPECT_TRUE(problems.empty()) << np.name << ": " << problems.front();
    ++checked;
  }
  EXPECT_GT(checked, 8);
}

// The exported launch line: torchrun with the plan's nodes and GPUs, and the Slurm branch.
TEST(MegatronFormat, LaunchLineSizesTheRunFromTheCluster) {
  const std::vector<NamedPlan> plans = testing::round_trip_plans();
  const NamedPlan& np = plans[5];  // llama3-70b on 64 GPUs: 8 nodes of 8
  ASSERT_EQ(np.file.gpus, 64);
  Result<ExportResult> r = export_plan(np.file, LaunchFormat::megatron);
  ASSERT_TRUE(r) << r.status().message();
  const std::string& s = r->files[0].text;
  EXPECT_NE(s.find("GPUS_PER_NODE=8\nNUM_NODES=8\n"), std::string::npos);
  EXPECT_NE(s.find("torchrun --nproc-per-node \"$GPUS_PER_NODE\" --nnodes \"$NUM_NODES\" --node-rank \"$NODE_RANK\""), std::string::npos);
  EXPECT_NE(s.find("--master-port \"$MASTER_PORT\""), std::string::npos);
  EXPECT_NE(s.find("MASTER_PORT=6000"), std::string::npos);
  EXPECT_NE(s.find("pretrain_gpt.py \"${ARGS[@]}\""), std::string::npos);
  EXPECT_NE(s.find("#SBATCH --nodes=8\n"), std::string::npos);
  EXPECT_NE(s.find("if [[ -n \"${SLURM_JOB_ID:-}\" ]]; then"), std::string::npos);
  EXPECT_NE(s.find("srun --nodes \"$NUM_NODES\""), std::string::npos);
  // Each argument carries its source line.
  EXPECT_NE(s.find("--tensor-model-parallel-size 4"), std::string::npos);
  EXPECT_NE(s.find("(arguments.py L2243)"), std::string::npos);
}

// The checker bites: a misspelt flag, a value on a flag, a value outside the choices.
TEST(MegatronFormat, OptionCheckerFindsMisspeltFlagsAndBadValues) {
  Result<ExportResult> r = export_plan(testing::round_trip_plans()[0].file, LaunchFormat::megatron);
  ASSERT_TRUE(r) << r.status().message();
  std::string s = r->files[0].text;
  ASSERT_TRUE(option_problems(s).empty());
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = s;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) t.replace(at, from.size(), to);
    return option_problems(t);
  };
  std::vector<std::string> p = replaced("--tensor-model-parallel-size", "--tensor-model-paralel-size");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "unknown option --tensor-model-paralel-size");
  p = replaced("--recompute-granularity selective", "--recompute-granularity partial");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("--recompute-granularity partial"), std::string::npos);
  p = replaced("--normalization RMSNorm", "--normalization rmsnorm");
  EXPECT_EQ(p.size(), 1u);
  p = replaced("--swiglu", "--swiglu true");
  EXPECT_EQ(p.size(), 1u);
}

// ---------------------------------------------------------------- published scripts

// examples/llama/train_llama3_8b_h100_fp8.sh @core_v0.13.0: Llama 3 8B, FP8 (hybrid,
// Megatron's default delayed recipe), 8 GPUs of one node, TP=CP=PP=1, micro-batch 1, global 128,
// the distributed optimizer; --sequence-parallel with TP 1, which Megatron drops.
TEST(MegatronFormat, ImportsThePublishedLlama3_8bFp8Script) {
  Result<ImportedConfig> r = import_text("megatron_example.sh", read_fixture("megatron_example.sh"));
  ASSERT_TRUE(r) << r.status().message();
  const PlanFile& f = r->file;
  EXPECT_EQ(f.model.name, "llama3-8b");
  EXPECT_EQ(f.model.family, Family::llama);
  EXPECT_EQ(f.model.layers, 32);
  EXPECT_EQ(f.model.hidden, 4096);
  EXPECT_EQ(f.model.ffn_hidden, 14336);
  EXPECT_EQ(f.model.heads, 32);
  EXPECT_EQ(f.model.kv_heads, 8);
  EXPECT_EQ(f.model.head_width(), 128);
  EXPECT_EQ(f.model.vocab, 128256);
  EXPECT_EQ(f.model.max_positions, 8192);
  EXPECT_FALSE(f.model.tied_embeddings);
  EXPECT_FALSE(f.model.dropout);
  EXPECT_EQ(f.job.seq_len, 8192);
  EXPECT_EQ(f.job.global_batch, 128);
  EXPECT_EQ(f.job.precision, Precision::bf16);
  // --grad-reduce-in-bf16: bf16 main-gradient buffers (arguments.py L683-684), 16 B/param.
  EXPECT_EQ(f.job.grads, GradConvention::deepspeed);
  EXPECT_EQ(f.job.fp8, Fp8Recipe::delayed);
  EXPECT_EQ(f.gpus, 8);
  EXPECT_EQ(f.cluster.gpus_per_node, 8);
  EXPECT_EQ(f.cluster.nodes, 1);
  EXPECT_EQ(f.plan.dp, 8);
  EXPECT_EQ(f.plan.tp, 1);
  EXPECT_EQ(f.plan.pp, 1);
  EXPECT_EQ(f.plan.cp, 1);
  EXPECT_FALSE(f.plan.sp);
  EXPECT_EQ(f.plan.micro_batch, 1);
  EXPECT_EQ(f.plan.grad_accum, 16);
  EXPECT_EQ(f.plan.zero, 1);
  EXPECT_EQ(f.plan.recompute, Recompute::none);
  EXPECT_TRUE(f.plan.flash_attention);  // --attention-backend fused
  auto noted = [&](const std::string& what) {
    return std::any_of(r->notes.begin(), r->notes.end(), [&](const std::string& n) { return n.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(noted("--sequence-parallel with tensor parallel 1")) << "Megatron drops it (arguments.py L850-853)";
  EXPECT_TRUE(noted("--fp8-recipe: Megatron's default delayed"));
  // Training hyperparameters are listed, not dropped.
  for (const char* k : {"--lr", "--min-lr", "--weight-decay", "--clip-grad", "--rotary-base", "--use-mcore-models", "--mock-data"})
    EXPECT_NE(std::find(r->unknown_keys.begin(), r->unknown_keys.end(), k), r->unknown_keys.end()) << k;
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
  EXPECT_GT(e.time.total, 0);
}

// examples/gpt3/train_gpt3_175b_distributed.sh @core_v0.13.0: GPT-3 175B, TP 8 x PP 16,
// micro-batch 1, global 1536 with a batch ramp-up, fp16, GPT-2 BPE vocabulary, sequence 2048.
// Its launch line starts 8 processes (one node; "Change for multinode config"), fewer than
// one replica: read as dp 1 on 128 GPUs, with a note.
TEST(MegatronFormat, ImportsThePublishedGpt3_175bScript) {
  Result<ImportedConfig> r = import_text("megatron_example_gpt3_175b.sh", read_fixture("megatron_example_gpt3_175b.sh"));
  ASSERT_TRUE(r) << r.status().message();
  const PlanFile& f = r->file;
  EXPECT_EQ(f.model.family, Family::gpt);
  EXPECT_EQ(f.model.layers, 96);
  EXPECT_EQ(f.model.hidden, 12288);
  EXPECT_EQ(f.model.heads, 96);
  EXPECT_EQ(f.model.kv_heads, 96);
  EXPECT_EQ(f.model.ffn_hidden, 4 * 12288);
  EXPECT_EQ(f.model.vocab, 50257);
  EXPECT_EQ(f.model.max_positions, 2048);
  EXPECT_TRUE(f.model.tied_embeddings);
  EXPECT_TRUE(f.model.dropout);  // Megatron's default 0.1
  EXPECT_EQ(f.job.seq_len, 2048);
  EXPECT_EQ(f.job.global_batch, 1536);
  EXPECT_EQ(f.job.precision, Precision::fp16);
  EXPECT_EQ(f.plan.tp, 8);
  EXPECT_EQ(f.plan.pp, 16);
  EXPECT_EQ(f.plan.dp, 1);
  EXPECT_EQ(f.gpus, 128);
  EXPECT_EQ(f.cluster.nodes, 16);
  EXPECT_EQ(f.plan.micro_batch, 1);
  EXPECT_EQ(f.plan.grad_accum, 1536);
  EXPECT_EQ(f.plan.zero, 0);
  EXPECT_EQ(f.plan.recompute, Recompute::none);
  EXPECT_EQ(f.plan.schedule, Schedule::one_f_one_b);
  auto noted = [&](const std::string& what) {
    return std::any_of(r->notes.begin(), r->notes.end(), [&](const std::string& n) { return n.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(noted("--rampup-batch-size 16 16 5859375"));
  EXPECT_TRUE(noted("fewer than one model replica"));
  EXPECT_TRUE(noted("$5"));  // DATA_PATH=$5: a script argument, left as written
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
  EXPECT_GT(e.time.total, 0);
}

// ---------------------------------------------------------------- the shell reader against bash

// The words the importer's shell reader gives torchrun, and the words bash gives it when it
// runs the script with a stand-in torchrun that prints its arguments: the same, for every
// exported script and for the published Llama 3 8B script (whose ${PWD} bash sets and the
// reader leaves as written).
std::vector<std::string> reader_torchrun_words(const std::string& script) {
  Result<shell::Script> s = shell::read_shell_script(script, "script");
  EXPECT_TRUE(s) << s.status().message();
  if (!s) return {};
  for (const shell::Command& c : s->commands)
    if (!c.words.empty() && c.words[0] == "torchrun") return {c.words.begin() + 1, c.words.end()};
  return {};
}

std::vector<std::string> bash_torchrun_words(const std::filesystem::path& dir, const std::string& script) {
  {
    std::ofstream(dir / "script.sh") << script;
    std::ofstream(dir / "bin" / "torchrun") << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n";
    std::filesystem::permissions(dir / "bin" / "torchrun", std::filesystem::perms::owner_all);
    std::ofstream(dir / "pretrain_gpt.py") << "";
  }
  const std::string cmd = "cd '" + dir.string() + "' && env -i PATH='" + (dir / "bin").string() +
                          ":/usr/bin:/bin' bash script.sh > out.txt 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<std::string> words;
  std::ifstream in(dir / "out.txt");
  for (std::string line; std::getline(in, line);) words.push_back(line);
  return words;
}

TEST(MegatronFormat, ShellReaderReadsScriptsAsBashRunsThem) {
  if (std::system("bash -c true >/dev/null 2>&1") != 0) GTEST_SKIP() << "no bash to compare with";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("llmplan_megatron_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "bin");
  int compared = 0;
  for (const NamedPlan& np : testing::round_trip_plans()) {
    Result<ExportResult> r = export_plan(np.file, LaunchFormat::megatron);
    if (!r) continue;
    const std::vector<std::string> bash = bash_torchrun_words(dir, r->files[0].text);
    EXPECT_GT(bash.size(), 40u) << np.name;
    EXPECT_EQ(reader_torchrun_words(r->files[0].text), bash) << np.name;
    ++compared;
  }
  EXPECT_GT(compared, 8);
  const std::string published = read_fixture("megatron_example.sh");
  std::vector<std::string> mine = reader_torchrun_words(published);
  for (std::string& w : mine)
    if (w.rfind("${PWD}", 0) == 0) w = dir.string() + w.substr(6);
  EXPECT_EQ(mine, bash_torchrun_words(dir, published));
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------- bad input

const char* kMinimal =
    "torchrun --nproc-per-node 8 --nnodes 1 pretrain_gpt.py \\\n"
    "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \\\n"
    "  --max-position-embeddings 4096 --vocab-size 32000 --swiglu --normalization RMSNorm \\\n"
    "  --position-embedding-type rope --disable-bias-linear --micro-batch-size 1 --global-batch-size 64 --bf16";

TEST(MegatronFormat, ReadsAMinimalCommandLine) {
  Result<ImportedConfig> r = import_text("run.sh", kMinimal);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->file.plan.dp, 8);
  EXPECT_EQ(r->file.plan.grad_accum, 8);
  EXPECT_TRUE(r->unknown_keys.empty());
}

Status import_error(const std::string& text) {
  Result<ImportedConfig> r = import_text("run.sh", text);
  EXPECT_FALSE(r);
  return r ? Status::ok() : r.status();
}

TEST(MegatronFormat, MalformedScriptIsBadInputNamingFileAndLine) {
  expect_bad_input(import_error(std::string(kMinimal) + " --data-path \"/data/x\n"), {"run.sh", "line 4", "quote"});
  expect_bad_input(import_error("ARGS=(\n  --num-layers 32\n"), {"run.sh", "line 1", "ARGS"});
}

TEST(MegatronFormat, ContradictoryFlagsAreBadInputNamingThem) {
  expect_bad_input(import_error(std::string(kMinimal) + " --fp16"), {"run.sh", "--bf16", "--fp16"});
  expect_bad_input(import_error(std::string(kMinimal) + " --recompute-method uniform --recompute-num-layers 1"),
                          {"run.sh", "--recompute-method", "--recompute-granularity full"});
  expect_bad_input(import_error(std::string(kMinimal) + " --recompute-granularity full"),
                          {"run.sh", "--recompute-method"});
  expect_bad_input(import_error(std::string(kMinimal) + " --overlap-param-gather --overlap-grad-reduce"),
                          {"--overlap-param-gather", "--use-distributed-optimizer"});
  expect_bad_input(import_error(std::string(kMinimal) + " --optimizer-cpu-offload --use-distributed-optimizer"),
                          {"--optimizer-cpu-offload", "--use-precision-aware-optimizer"});
  expect_bad_input(import_error(std::string(kMinimal) + " --account-for-embedding-in-pipeline-split"),
                          {"--account-for-embedding-in-pipeline-split"});
}

// Uneven stages beyond llmplan's even split: Megatron-Core's first/last stage sizes with
// virtual stages (each stage's layers in vpp equal chunks, transformer_config.py) and a
// --pipeline-model-parallel-layout (docs/api-guide/pipeline_parallel_layout.md) come in as
// plan.stage_layers, virtual stage by virtual stage.
TEST(MegatronFormat, FirstLastStageSizesAndLayoutsReadAsCustomSplits) {
  // 32 layers on pp 8 = 1 process per stage, vpp 2: first 2, last 2, the middle six 28 / 6 no;
  // first 4 and last 4: 24 / 6 = 4 each, chunks of 2.
  const std::string pp8 = std::string(kMinimal) + " --pipeline-model-parallel-size 8 --num-virtual-stages-per-pipeline-rank 2";
  Result<ImportedConfig> r = import_text("run.sh", pp8 + " --decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 6");
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->file.plan.pipeline_split, PipelineSplit::custom);
  // Stage 0: 2 = 1 + 1, stage 7: 6 = 3 + 3, the six middle stages 24 / 6 = 4 = 2 + 2.
  const std::vector<int> want = {1, 2, 2, 2, 2, 2, 2, 3, 1, 2, 2, 2, 2, 2, 2, 3};
  EXPECT_EQ(r->file.plan.stage_layers, want);
  // An odd count on a stage cannot be split into 2 equal chunks: Megatron asserts it.
  expect_bad_input(import_error(pp8 + " --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 5"),
                   {"--decoder-first-pipeline-num-layers", "vpp 2"});
  // 25 layers left for 6 middle stages do not divide.
  expect_bad_input(import_error(pp8 + " --decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 5"),
                   {"--decoder-first", "middle stages"});

  // The layout of the same: E and 1 layer | 2 x 6 | 3 | 1 | 2 x 6 | 3 and the loss.
  const std::string layout = "Et|(tt|)*6,ttt|t|(tt|)*6,tttL";
  r = import_text("run.sh", std::string(kMinimal) + " --pipeline-model-parallel-size 8 --pipeline-model-parallel-layout '" + layout + "'");
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->file.plan.vpp, 2);
  EXPECT_EQ(r->file.plan.pipeline_split, PipelineSplit::custom);
  EXPECT_EQ(r->file.plan.stage_layers, want);
  EXPECT_EQ(r->file.plan.schedule, Schedule::interleaved);
  const std::string base = std::string(kMinimal) + " --pipeline-model-parallel-size 8 --pipeline-model-parallel-layout ";
  expect_bad_input(import_error(base + "'Et*3|(t*4|)*6t*2L'"), {"--pipeline-model-parallel-layout", "29 decoder layers"});
  expect_bad_input(import_error(base + "'Et*4||(t*4|)*5t*4L'"), {"virtual stage 1 holds no decoder layer"});
  expect_bad_input(import_error(base + "'t*4|Et*4|(t*4|)*5t*4L'"), {"embedding"});
  expect_bad_input(import_error(base + "'Et*4|t*4|(t*4|)*5t*4|t*4Lx'"), {"unknown symbol 'x'"});
  expect_bad_input(import_error(base + "'Et*4|(t*4|)*5t*4L'"), {"7 stages are not a multiple"});
  expect_bad_input(import_error(base + "'Et*4|t*4|(t*4|*5t*4|t*4L'"), {"(...)*n"});
  expect_bad_input(import_error(base + "'(t)*99999999999'"), {"repeat count"});
  expect_bad_input(import_error(base + "'Et*4|t*4|(t*4|)*6L' --decoder-first-pipeline-num-layers 4"), {"refuses the mix"});
}

// A custom split goes out as first/last stage sizes when it has that form, else as a layout
// (without --num-virtual-stages-per-pipeline-rank, which Megatron refuses beside it), and
// both come back as the same split. NeMo's strategy has no layout: it refuses the second.
TEST(MegatronFormat, CustomSplitsExportAsFirstLastSizesOrALayout) {
  TrainingJob job;
  job.seq_len = 2048;
  job.global_batch = 64;
  ParallelPlan p;
  p.pp = 4, p.vpp = 2, p.micro_batch = 1, p.schedule = Schedule::interleaved;
  p.pipeline_split = PipelineSplit::custom;
  p.stage_layers = {3, 4, 4, 5, 3, 4, 4, 5};  // 32 layers: stages 6, 8, 8, 10
  const PlanFile f = testing::make_plan_file("llama3-8b", "h100-sxm", 4, job, p);
  Result<ExportResult> r = export_plan(f, LaunchFormat::megatron);
  ASSERT_TRUE(r) << r.status().message();
  const std::string& text = r->files[0].text;
  EXPECT_NE(text.find("--decoder-first-pipeline-num-layers 6"), std::string::npos) << text;
  EXPECT_NE(text.find("--decoder-last-pipeline-num-layers 10"), std::string::npos) << text;
  EXPECT_NE(text.find("--num-virtual-stages-per-pipeline-rank 2"), std::string::npos);
  EXPECT_TRUE(option_problems(text).empty());
  testing::expect_round_trip(f, r->files, LaunchFormat::megatron, import_options(), "first-last", "llama3-8b pp4 vpp2 custom");

  PlanFile g = f;
  g.plan.stage_layers = {2, 4, 4, 5, 4, 4, 4, 5};  // chunks of one stage unequal: only a layout says it
  r = export_plan(g, LaunchFormat::megatron);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_NE(r->files[0].text.find("--pipeline-model-parallel-layout 'Et*2|t*4|t*4|t*5|t*4|t*4|t*4|t*5L'"), std::string::npos)
      << r->files[0].text;
  EXPECT_EQ(r->files[0].text.find("--num-virtual-stages-per-pipeline-rank"), std::string::npos);
  EXPECT_TRUE(option_problems(r->files[0].text).empty());
  testing::expect_round_trip(g, r->files, LaunchFormat::megatron, import_options(), "layout", "llama3-8b pp4 vpp2 layout");
  const Result<ExportResult> nemo = export_plan(g, LaunchFormat::nemo);
  ASSERT_FALSE(nemo);
  EXPECT_NE(nemo.status().message().find("--pipeline-model-parallel-layout"), std::string::npos) << nemo.status().message();
  EXPECT_TRUE(export_plan(f, LaunchFormat::nemo)) << "first/last sizes are NeMo's too";
}

TEST(MegatronFormat, AbsurdOrNegativeValuesAreBadInputNamingTheFlag) {
  expect_bad_input(import_error(std::string(kMinimal) + " --micro-batch-size -4"), {"run.sh", "--micro-batch-size", "-4"});
  expect_bad_input(import_error(std::string(kMinimal) + " --num-layers 1000000"), {"--num-layers", "1000000"});
  expect_bad_input(import_error(std::string(kMinimal) + " --global-batch-size 60"), {"run.sh", "--global-batch-size", "60"});
  expect_bad_input(import_error(std::string(kMinimal) + " --recompute-granularity partial"), {"--recompute-granularity", "partial"});
  expect_bad_input(import_error(std::string(kMinimal) + " --cp-comm-type a2a --context-parallel-size 2"), {"--cp-comm-type"});
  // 8 processes are not a multiple of tp*pp*cp = 3.
  expect_bad_input(import_error(std::string(kMinimal) + " --pipeline-model-parallel-size 3"), {"not a multiple"});
}

TEST(MegatronFormat, UnknownFlagsAreListedNotDropped) {
  Result<ImportedConfig> r = import_text("run.sh", std::string(kMinimal) + " --lr 3e-4 --my-custom-flag --seed=7");
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->unknown_keys, (std::vector<std::string>{"--lr", "--my-custom-flag", "--seed"}));
}

// --model is a check where the script describes the model: the first field that differs is
// named, the script's value first.
TEST(MegatronFormat, GivenModelMustMatchTheScriptsShape) {
  ImportOptions o = import_options();
  o.model = "llama2-7b";
  const std::string llama2 = std::string(kMinimal) + " --ffn-hidden-size 11008";
  Result<ImportedConfig> r = import_files({{"run.sh", llama2 + " --untie-embeddings-and-output-weights", false}}, LaunchFormat::megatron, o, "run.sh");
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->file.model.name, "llama2-7b");
  r = import_files({{"run.sh", llama2, false}}, LaunchFormat::megatron, o, "run.sh");
  ASSERT_FALSE(r);
  expect_bad_input(r.status(), {"run.sh", "--model llama2-7b differ in tied_embeddings: true vs false"});
  o.model = "llama3-70b";
  r = import_files({{"run.sh", llama2, false}}, LaunchFormat::megatron, o, "run.sh");
  ASSERT_FALSE(r);
  expect_bad_input(r.status(), {"differ in layers: 32 vs 80"});
}

// What Megatron adjusts on its own is a note, and the run is read as Megatron runs it.
TEST(MegatronFormat, MegatronsOwnAdjustmentsAreNotes) {
  Result<ImportedConfig> r = import_text("run.sh", std::string(kMinimal) + " --sequence-parallel --cp-comm-type allgather");
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_FALSE(r->file.plan.sp);
  ASSERT_GE(r->notes.size(), 2u);
  bool sp = false, allgather = false;
  for (const std::string& n : r->notes) {
    sp |= n.find("--sequence-parallel") != std::string::npos;
    allgather |= n.find("allgather") != std::string::npos;
  }
  EXPECT_TRUE(sp && allgather);
}

// Shell forms launch scripts use: variables with defaults, arrays with comments, if/else
// on string tests, --flag=value, a plain argument list without a launcher.
TEST(MegatronFormat, ReadsScriptVariablesArraysAndBranches) {
  const std::string script =
      "#!/bin/bash\n"
      "TP=${TP:-2}\n"
      "MODE=bf16\n"
      "ARGS=(\n"
      "  --num-layers 32 --hidden-size 4096   # the shape\n"
      "  --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096\n"
      "  --vocab-size 32000 --swiglu --disable-bias-linear --normalization RMSNorm --position-embedding-type rope\n"
      "  --tensor-model-parallel-size $TP --sequence-parallel\n"
      "  --micro-batch-size=2 --global-batch-size 64\n"
      ")\n"
      "if [[ \"$MODE\" == \"bf16\" ]]; then\n"
      "  ARGS+=(--bf16)\n"
      "else\n"
      "  ARGS+=(--fp16)\n"
      "fi\n"
      "torchrun --nproc_per_node 8 --nnodes=2 pretrain_gpt.py \"${ARGS[@]}\"\n";
  Result<ImportedConfig> r = import_text("train.sh", script);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->file.plan.tp, 2);
  EXPECT_TRUE(r->file.plan.sp);
  EXPECT_EQ(r->file.plan.dp, 8);
  EXPECT_EQ(r->file.plan.micro_batch, 2);
  EXPECT_EQ(r->file.cluster.nodes, 2);
  EXPECT_EQ(r->file.job.precision, Precision::bf16);
  // A plain argument list: dp from the batch sizes, noted.
  Result<ImportedConfig> list = import_text(
      "args.txt",
      "--num-layers 32 --hidden-size 4096 --num-attention-heads 32\n--seq-length 4096 --max-position-embeddings 4096\n"
      "--vocab-size 32000 --micro-batch-size 1 --global-batch-size 16 --fp16\n");
  ASSERT_TRUE(list) << list.status().message();
  EXPECT_EQ(list->file.plan.dp, 16);
  EXPECT_EQ(list->file.job.precision, Precision::fp16);
  EXPECT_EQ(list->file.model.family, Family::gpt);
  EXPECT_FALSE(list->notes.empty());
}

}  // namespace
// The main gradients' dtype travels: fp32 buffers (Megatron's default under bf16) export
// without --grad-reduce-in-bf16 and read back fp32; bf16 ones with it and back.
TEST(MegatronFormat, MainGradientDtypeRoundTrips) {
  for (GradConvention g : {GradConvention::megatron, GradConvention::deepspeed}) {
    PlanFile f = testing::round_trip_plans()[4].file;  // llama3-8b dp4 tp2 sp zero1, bf16
    ASSERT_EQ(f.job.precision, Precision::bf16);
    f.job.grads = g;
    Result<ExportResult> e = export_plan(f, LaunchFormat::megatron);
    ASSERT_TRUE(e) << e.status().message();
    EXPECT_EQ(e->files[0].text.find("--grad-reduce-in-bf16") != std::string::npos, g == GradConvention::deepspeed);
    Result<ImportedConfig> back = import_files(e->files, LaunchFormat::megatron, import_options(), "export");
    ASSERT_TRUE(back) << back.status().message();
    EXPECT_EQ(back->file.job.grads, g);
  }
}

}  // namespace llmplan
