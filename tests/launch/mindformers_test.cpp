// The mindformers format (launch/mindformers.cpp, launch/mindformers_import.cpp): round trips
// of the plan matrix, the emitted key paths against MindFormers v1.5.0's own key list
// (tests/fixtures/frameworks/mindformers_keys.txt), the published v1.5.0 Llama 2 configs,
// and bad input.
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "launch/launch.h"
#include "planner/cost/plan_check.h"
#include "planner/search/explain.h"
#include "tests/launch/format_test_util.h"

namespace llmplan {
namespace {

using testing::expect_round_trip;
using testing::import_options;
using testing::make_plan_file;
using testing::read_fixture;
using testing::with;

// MindFormers runs on Ascend: no --gpu imports on its own (ascend-910b); the round trips of
// plans made for H100s name it.
ImportOptions ascend_import() { return import_options(""); }

const LaunchFile* find_file(const ExportResult& r, const std::string& suffix) {
  for (const LaunchFile& f : r.files)
    if (f.name.ends_with(suffix)) return &f;
  return nullptr;
}

Result<ImportedConfig> import_text(const std::string& yaml, const std::string& msrun = "", const ImportOptions& o = ascend_import()) {
  std::vector<LaunchFile> files = {{"config.yaml", yaml, false}};
  if (!msrun.empty()) files.push_back({"msrun.sh", msrun, true});
  return import_files(files, LaunchFormat::mindformers, o, "cfg");
}

// ------------------------------------------------------------------ round trips

// Every plan of the matrix either round-trips or is refused naming the field below; the
// set of refused plans is exactly this one.
TEST(MindFormers, RoundTripsTheMatrixOrRefusesNamingTheField) {
  const std::map<std::string, std::string> refused_want = {
      {"llama3-8b dp8 zero3", "plan.zero"},            // no ZeRO-3 for LlamaForCausalLM in v1.5.0
      {"qwen3-30b-a3b dp8 ep8 fp8", "model.qk_norm"},  // Qwen3's QK-norm is not in v1.5.0's Llama (also FP8)
      {"llama3-8b pp2 zbv zero3", "plan.zero"},        // (and pipeline_scheduler has no zero-bubble order)
      {"llama3-8b dp8 zero1 bf16 moments", "job.moments"},  // FP32StateAdamWeightDecay or SGD
  };
  std::map<std::string, std::string> refused;
  for (const testing::NamedPlan& np : testing::round_trip_plans()) {
    SCOPED_TRACE(np.name);
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::mindformers);
    if (!ex) {
      EXPECT_EQ(ex.status().kind(), ErrorKind::bad_input);
      const std::string& msg = ex.status().message();
      refused[np.name] = msg.substr(0, msg.find(':'));
      continue;
    }
    ASSERT_EQ(ex->files.size(), 2u);
    std::optional<ImportedConfig> im = expect_round_trip(np.file, ex->files, LaunchFormat::mindformers, import_options(), "/tmp/mf", np.name);
    ASSERT_TRUE(im);
    EXPECT_EQ(im->format, LaunchFormat::mindformers);
  }
  EXPECT_EQ(refused, refused_want);
}

TrainingJob base_job() {
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 96;
  j.precision = Precision::bf16;
  return j;
}

// Plans beyond the matrix: an uneven pipeline without interleaving (remainder on the last
// stages), fp16 with 16-bit weights (O3) and SGD, Qwen2.5's q/k/v biases with ZeRO-2, the
// all-gather context-parallel exchange with full_k under interleaving, activation offload.
std::vector<testing::NamedPlan> beyond_matrix_plans() {
  std::vector<testing::NamedPlan> plans;
  ParallelPlan p;
  TrainingJob j = base_job();
  j.precision = Precision::fp16;
  j.amp = AmpLevel::O3;
  j.optimizer = Optimizer::sgd_momentum;
  p.dp = 2, p.pp = 3, p.micro_batch = 2, p.zero = 1, p.recompute = Recompute::full;
  plans.push_back({"llama3-8b pp3 uneven fp16 O3 sgd", make_plan_file("llama3-8b", "h100-sxm", 6, j, p)});

  j = base_job();
  j.global_batch = 256;
  p = {};
  p.dp = 8, p.micro_batch = 1, p.zero = 2, p.recompute = Recompute::selective;
  plans.push_back({"qwen2.5-7b dp8 zero2 qkv bias", make_plan_file("qwen2.5-7b", "h100-sxm", 8, j, p)});

  j = base_job();
  j.seq_len = 8192;
  j.global_batch = 256;
  p = {};
  p.dp = 2, p.tp = 8, p.pp = 2, p.vpp = 2, p.cp = 2, p.sp = true, p.micro_batch = 1, p.zero = 1;
  p.schedule = Schedule::interleaved, p.cp_exchange = CpExchange::all_gather;
  p.recompute = Recompute::full_k, p.recompute_layers = 3;
  plans.push_back({"llama3-70b tp8 pp2 vpp2 cp2 all_gather full_k3", make_plan_file("llama3-70b", "h100-sxm", 64, j, p)});

  j = base_job();
  j.global_batch = 64;
  p = {};
  p.dp = 4, p.pp = 2, p.micro_batch = 1, p.zero = 1, p.recompute = Recompute::none, p.activation_offload_layers = 3;
  plans.push_back({"llama3-8b dp4 pp2 activation offload 3", make_plan_file("llama3-8b", "h100-sxm", 8, j, p)});
  return plans;
}

TEST(MindFormers, RoundTripsPlansBeyondTheMatrix) {
  const std::vector<testing::NamedPlan> plans = beyond_matrix_plans();
  for (const testing::NamedPlan& np : plans) {
    SCOPED_TRACE(np.name);
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::mindformers);
    ASSERT_TRUE(ex) << ex.status().message();
    std::optional<ImportedConfig> im = expect_round_trip(np.file, ex->files, LaunchFormat::mindformers, import_options(), "/tmp/mf", np.name);
    ASSERT_TRUE(im);
    EXPECT_EQ(im->file.job.amp, np.file.job.amp);
    EXPECT_EQ(im->file.model.attention_bias, np.file.model.attention_bias);
  }
}

// The uneven 405B split is written as MindFormers' offset, one row per interleave chunk:
// layers of (chunk, stage) = 126 // 64 + offset = 1 + offset (models/utils.py L169-170).
TEST(MindFormers, WritesTheUnevenSplitAsPerChunkOffsets) {
  for (const testing::NamedPlan& np : testing::round_trip_plans()) {
    if (np.file.plan.pipeline_split != PipelineSplit::account_embedding_loss) continue;
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::mindformers);
    ASSERT_TRUE(ex) << ex.status().message();
    const YAML::Node y = YAML::Load(find_file(*ex, ".yaml")->text);
    const YAML::Node off = y["model"]["model_config"]["offset"];
    ASSERT_TRUE(off.IsSequence());
    ASSERT_EQ(off.size(), 8u);  // pp_interleave_num rows
    int sum = 0;
    for (const auto& row : off) {
      ASSERT_EQ(row.size(), 8u);  // pipeline_stage entries
      for (const auto& x : row) sum += x.as<int>();
    }
    EXPECT_EQ(sum, 126 % 64);
    // Megatron-Core's embedding/loss split: the first and last chunk hold one layer, the others two.
    EXPECT_EQ(off[0][0].as<int>(), 0);
    EXPECT_EQ(off[7][7].as<int>(), 0);
    EXPECT_EQ(off[3][4].as<int>(), 1);
    EXPECT_EQ(y["model"]["model_config"]["pp_interleave_num"].as<int>(), 8);
    EXPECT_TRUE(y["parallel"]["pipeline_config"]["pipeline_interleave"].as<bool>());
  }
}

// What v1.5.0 cannot express is refused naming the plan field.
TEST(MindFormers, RefusesWhatItCannotExpressNamingTheField) {
  TrainingJob j = base_job();
  ParallelPlan p;
  p.dp = 8, p.micro_batch = 1, p.zero = 1;
  auto refusal = [](const PlanFile& f) {
    Result<ExportResult> r = export_plan(f, LaunchFormat::mindformers);
    EXPECT_FALSE(r);
    if (r) return std::string();
    EXPECT_EQ(r.status().kind(), ErrorKind::bad_input);
    return r.status().message();
  };
  TrainingJob fp8 = j;
  fp8.fp8 = Fp8Recipe::tensorwise;
  EXPECT_EQ(refusal(make_plan_file("llama3-8b", "h100-sxm", 8, fp8, p)).rfind("job.fp8:", 0), 0u);
  ParallelPlan off = p;
  off.offload_optimizer = true;
  EXPECT_EQ(refusal(make_plan_file("llama3-8b", "h100-sxm", 8, j, off)).rfind("plan.offload_optimizer:", 0), 0u);
  TrainingJob o1 = j;
  o1.amp = AmpLevel::O1;
  EXPECT_EQ(refusal(make_plan_file("llama3-8b", "h100-sxm", 8, o1, p)).rfind("job.amp:", 0), 0u);
  TrainingJob frozen = j;
  frozen.frozen_layers = 4;
  EXPECT_EQ(refusal(make_plan_file("llama3-8b", "h100-sxm", 8, frozen, p)).rfind("job.frozen_layers:", 0), 0u);
  EXPECT_EQ(refusal(make_plan_file("gpt3-1.3b", "h100-sxm", 8, j, p)).rfind("model.family:", 0), 0u);
}

// ------------------------------------------------------------------ key names and values

// Key paths of MindFormers v1.5.0's own option list (mindformers_keys.txt): the first
// tab-separated field of each non-comment line; "a.b.c / d / e" names siblings a.b.d, a.b.e.
std::set<std::string> known_key_paths() {
  std::set<std::string> out;
  for (const std::vector<std::string>& cols : testing::fixture_rows("mindformers_keys.txt")) {
    const std::string& field = cols[0];
    std::string parent;
    size_t start = 0;
    while (start <= field.size()) {
      size_t end = field.find(" / ", start);
      std::string part = field.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (part.find('.') != std::string::npos) {
        out.insert(part);
        parent = part.substr(0, part.rfind('.') + 1);
      } else {
        out.insert(parent + part);
      }
      if (end == std::string::npos) break;
      start = end + 3;
    }
  }
  // The sections above each key (model, model.model_config, ...) are keys too.
  std::set<std::string> sections;
  for (const std::string& k : out)
    for (size_t dot = k.find('.'); dot != std::string::npos; dot = k.find('.', dot + 1)) sections.insert(k.substr(0, dot));
  out.insert(sections.begin(), sections.end());
  return out;
}

// Every key path of a YAML document (items of a list of mappings share the list's path).
void key_paths(const YAML::Node& n, const std::string& prefix, std::set<std::string>* out) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      const std::string path = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
      out->insert(path);
      key_paths(kv.second, path, out);
    }
  } else if (n.IsSequence()) {
    for (const auto& x : n)
      if (x.IsMap()) key_paths(x, prefix, out);
  }
}

// The emitted key paths that MindFormers' list does not have.
std::vector<std::string> unknown_paths(const std::string& yaml, const std::set<std::string>& known) {
  std::set<std::string> paths;
  key_paths(YAML::Load(yaml), "", &paths);
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    // train_dataset_task.dataset_config is the alias *train_dataset: its keys are train_dataset's.
    const std::string alias = "train_dataset_task.dataset_config.";
    const std::string key = p.rfind(alias, 0) == 0 ? "train_dataset." + p.substr(alias.size()) : p;
    if (!known.count(key)) out.push_back(p);
  }
  return out;
}

TEST(MindFormers, EmitsOnlyKeysOfMindFormersOwnList) {
  const std::set<std::string> known = known_key_paths();
  ASSERT_GT(known.size(), 100u);
  ASSERT_TRUE(known.count("parallel_config.data_parallel"));
  ASSERT_TRUE(known.count("parallel.parallel_optimizer_config.parallel_optimizer_threshold"));  // a "a / b" sibling
  std::vector<testing::NamedPlan> plans = testing::round_trip_plans();
  for (testing::NamedPlan& np : beyond_matrix_plans()) plans.push_back(std::move(np));
  int checked = 0;
  for (const testing::NamedPlan& np : plans) {
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::mindformers);
    if (!ex) continue;
    ++checked;
    const LaunchFile* yaml = find_file(*ex, ".yaml");
    ASSERT_NE(yaml, nullptr);
    EXPECT_EQ(unknown_paths(yaml->text, known), std::vector<std::string>{}) << np.name;
  }
  EXPECT_GE(checked, 13);
}

// The same checker finds a misspelt key.
TEST(MindFormers, KeyCheckerCatchesAMisspeltKey) {
  const std::set<std::string> known = known_key_paths();
  Result<ExportResult> ex = export_plan(testing::round_trip_plans()[1].file, LaunchFormat::mindformers);
  ASSERT_TRUE(ex) << ex.status().message();
  std::string text = find_file(*ex, ".yaml")->text;
  const size_t at = text.find("  data_parallel:");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 16, "  data_paralel:");
  EXPECT_EQ(unknown_paths(text, known), std::vector<std::string>{"parallel_config.data_paralel"});
}

// Enumerated values take the forms MindFormers reads: dtype names of convert_mstype
// (mindformers/models/utils.py L43-57), parallel_mode 0-3 (mindformers/tools/utils.py L38-46),
// context.mode 0/1, run_mode of template.py L611, the CP algorithm names of transformer.py
// L570-571, the pipeline schedulers of the v1.5.0 configs, and the msrun_launcher line.
TEST(MindFormers, WritesValuesInTheFormsMindFormersReads) {
  const std::set<std::string> dtypes = {"float16", "float32", "bfloat16"};
  for (const testing::NamedPlan& np : testing::round_trip_plans()) {
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::mindformers);
    if (!ex) continue;
    SCOPED_TRACE(np.name);
    const YAML::Node y = YAML::Load(find_file(*ex, ".yaml")->text);
    const YAML::Node mc = y["model"]["model_config"];
    for (const char* k : {"compute_dtype", "param_init_type", "layernorm_compute_type", "softmax_compute_type", "rotary_dtype"})
      EXPECT_TRUE(dtypes.count(mc[k].as<std::string>())) << k << " " << mc[k].as<std::string>();
    EXPECT_EQ(mc["compute_dtype"].as<std::string>(), "bfloat16");  // the matrix is bf16
    EXPECT_EQ(y["parallel"]["parallel_mode"].as<int>(), 1);
    EXPECT_EQ(y["context"]["mode"].as<int>(), 0);
    EXPECT_EQ(y["context"]["device_target"].as<std::string>(), "Ascend");
    const std::string mode = y["run_mode"].as<std::string>();
    EXPECT_TRUE(mode == "train" || mode == "finetune") << mode;
    EXPECT_EQ(mode == "finetune", np.file.job.mode != TrainMode::pretrain);
    if (np.file.plan.cp > 1) {
      EXPECT_EQ(y["parallel_config"]["context_parallel_algo"].as<std::string>(), "colossalai_cp");
    }
    if (np.file.plan.pp > 1) {
      EXPECT_EQ(y["parallel"]["pipeline_config"]["pipeline_scheduler"].as<std::string>(), "1f1b");
    }
    // PyYAML reads a float only with a '.': 1e-05 would be a string.
    EXPECT_NE(find_file(*ex, ".yaml")->text.find("rms_norm_eps: 1.0e-05"), std::string::npos);
    // global batch = batch_size x data_parallel x micro_batch_num (pp > 1) or x gradient_accumulation_steps.
    const int64_t micro = y["runner_config"]["batch_size"].as<int64_t>();
    const int64_t dp = y["parallel_config"]["data_parallel"].as<int64_t>();
    const int64_t acc = np.file.plan.pp > 1 ? y["parallel_config"]["micro_batch_num"].as<int64_t>()
                                            : y["runner_config"]["gradient_accumulation_steps"].as<int64_t>();
    EXPECT_EQ(micro * dp * acc, np.file.job.global_batch);
    // The launch line: 9 arguments, WORKER_NUM = all devices, LOCAL_WORKER = per node.
    const std::string sh = find_file(*ex, "msrun.sh")->text;
    const std::string want = "\" " + std::to_string(np.file.gpus) + " " + std::to_string(np.file.cluster.gpus_per_node) +
                             " $MASTER_ADDR 8118 $NODE_RANK output/msrun_log False 300\n";
    EXPECT_NE(sh.find("bash scripts/msrun_launcher.sh \"run_mindformer.py --config $CONFIG --run_mode " + mode + " --use_parallel True" + want),
              std::string::npos)
        << sh;
    EXPECT_TRUE(find_file(*ex, "msrun.sh")->executable);
  }
}

// LoRA: pet_config over Llama's cell names (configs/llama2/lora_llama2_7b.yaml L163-169).
TEST(MindFormers, WritesLoraOverLlamasCellNames) {
  for (const testing::NamedPlan& np : testing::round_trip_plans()) {
    if (np.file.job.mode != TrainMode::lora) continue;
    Result<ExportResult> ex = export_plan(np.file, LaunchFormat::mindformers);
    ASSERT_TRUE(ex) << ex.status().message();
    const YAML::Node pet = YAML::Load(find_file(*ex, ".yaml")->text)["model"]["model_config"]["pet_config"];
    EXPECT_EQ(pet["pet_type"].as<std::string>(), "lora");
    EXPECT_EQ(pet["lora_rank"].as<int>(), 16);
    EXPECT_EQ(pet["lora_alpha"].as<double>(), 32);
    EXPECT_EQ(pet["target_modules"].as<std::string>(), ".*wq|.*wk|.*wv|.*wo");
  }
}

// ------------------------------------------------------------------ published configs

TEST(MindFormers, ImportsThePublishedLlama2_7bConfig) {
  Result<ImportedConfig> im = import_files({{"pretrain_llama2_7b.yaml", read_fixture("mindformers_llama2_7b.yaml"), false}},
                                           LaunchFormat::mindformers, ascend_import(), "pretrain_llama2_7b.yaml");
  ASSERT_TRUE(im) << im.status().message();
  const PlanFile& f = im->file;
  // parallel_config: data_parallel 8, model_parallel 1, pipeline_stage 1; runner_config
  // batch_size 1, gradient_accumulation_steps 8: global 1 x 8 x 8 = 64 (BT L211-219).
  EXPECT_EQ(f.plan.dp, 8);
  EXPECT_EQ(f.plan.tp, 1);
  EXPECT_EQ(f.plan.pp, 1);
  EXPECT_EQ(f.plan.micro_batch, 1);
  EXPECT_EQ(f.plan.grad_accum, 8);
  EXPECT_EQ(f.job.global_batch, 64);
  EXPECT_EQ(f.job.seq_len, 4096);
  EXPECT_EQ(f.plan.recompute, Recompute::none);
  EXPECT_EQ(f.plan.zero, 1);  // enable_parallel_optimizer True, gradient_accumulation_shard False
  EXPECT_TRUE(f.plan.flash_attention);
  EXPECT_EQ(f.job.precision, Precision::fp16);
  EXPECT_EQ(f.job.amp, AmpLevel::O3);  // param_init_type float16
  // The model: Llama 2 7B (intermediate 11008 from multiple_of 256, llama_layer.py L312-318).
  EXPECT_EQ(f.model.name, "llama2-7b");
  EXPECT_EQ(f.model.layers, 32);
  EXPECT_EQ(f.model.hidden, 4096);
  EXPECT_EQ(f.model.heads, 32);
  EXPECT_EQ(f.model.kv_heads, 32);
  EXPECT_EQ(f.model.ffn_hidden, 11008);
  EXPECT_EQ(f.model.vocab, 32000);
  EXPECT_EQ(f.gpus, 8);
  EXPECT_EQ(f.cluster.gpu.name, "ascend-910b");
  const std::vector<std::string>& u = im->unknown_keys;
  for (const char* k : {"callbacks.type", "optimizer.beta1", "lr_schedule.learning_rate", "model.model_config.rms_norm_eps"})
    EXPECT_NE(std::find(u.begin(), u.end(), k), u.end()) << k;
  for (const char* k : {"parallel_config.data_parallel", "runner_config.gradient_accumulation_steps", "model.model_config.num_layers"})
    EXPECT_EQ(std::find(u.begin(), u.end(), k), u.end()) << k;
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
  EXPECT_GT(e.time.total, 0);
}

TEST(MindFormers, ImportsThePublishedLlama2_70bConfigOn32Devices) {
  const std::string yaml = read_fixture("mindformers_llama2_70b_bf16_32p.yaml");
  // The model card's multi-node line (docs/model_cards/llama2.md L296-311 @v1.5.0) for 4 x 8.
  const std::string msrun =
      "bash scripts/msrun_launcher.sh \"run_mindformer.py --config configs/llama2/pretrain_llama2_70b_bf16_32p.yaml "
      "--train_dataset_dir /data/wiki4096.mindrecord --use_parallel True --run_mode train\" 32 8 192.168.1.1 8118 0 output/msrun_log False 300\n";
  Result<ImportedConfig> im = import_files({{"pretrain_llama2_70b_bf16_32p.yaml", yaml, false}, {"run.sh", msrun, true}},
                                           LaunchFormat::mindformers, ascend_import(), "llama2_70b");
  ASSERT_TRUE(im) << im.status().message();
  const PlanFile& f = im->file;
  EXPECT_EQ(f.plan.dp, 1);
  EXPECT_EQ(f.plan.tp, 4);
  EXPECT_EQ(f.plan.pp, 8);
  EXPECT_TRUE(f.plan.sp);
  EXPECT_EQ(f.plan.micro_batch, 1);
  EXPECT_EQ(f.plan.grad_accum, 256);  // micro_batch_num with a pipeline (BT L199-209)
  EXPECT_EQ(f.job.global_batch, 256);
  EXPECT_EQ(f.plan.recompute, Recompute::selective);  // select_recompute [8,4,4,1,1,1,1,1]
  EXPECT_EQ(f.plan.schedule, Schedule::one_f_one_b);
  EXPECT_EQ(f.job.precision, Precision::bf16);
  EXPECT_EQ(f.model.name, "llama2-70b");
  EXPECT_EQ(f.model.layers, 80);
  EXPECT_EQ(f.model.kv_heads, 8);
  EXPECT_EQ(f.model.ffn_hidden, 28672);  // ffn_dim_multiplier 1.3, multiple_of 256
  EXPECT_EQ(f.gpus, 32);
  EXPECT_EQ(f.cluster.gpus_per_node, 8);
  EXPECT_EQ(f.cluster.nodes, 4);
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
  // The same YAML launched on 16 devices contradicts dp*mp*cp*pp = 32 (check_rules.py L157-162).
  std::string on16 = msrun;
  on16.replace(on16.find("\" 32 8"), 6, "\" 16 8");
  Result<ImportedConfig> bad = import_files({{"pretrain_llama2_70b_bf16_32p.yaml", yaml, false}, {"run.sh", on16, true}},
                                            LaunchFormat::mindformers, ascend_import(), "llama2_70b");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().kind(), ErrorKind::bad_input);
  EXPECT_NE(bad.status().message().find("parallel_config.data_parallel"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("run.sh"), std::string::npos) << bad.status().message();
}

// The published LoRA fine-tune of Llama 2 7B (configs/llama2/lora_llama2_7b.yaml @v1.5.0):
// pet_config lora, rank 16, alpha 16, on wq wk wv wo; dp 8, batch_size 2, no pipeline.
TEST(MindFormers, ImportsThePublishedLlama2_7bLoraConfig) {
  Result<ImportedConfig> im = import_files({{"lora_llama2_7b.yaml", read_fixture("mindformers_lora_llama2_7b.yaml"), false}},
                                           LaunchFormat::mindformers, ascend_import(), "lora_llama2_7b.yaml");
  ASSERT_TRUE(im) << im.status().message();
  const PlanFile& f = im->file;
  EXPECT_EQ(f.job.mode, TrainMode::lora);
  EXPECT_EQ(f.job.lora.rank, 16);
  EXPECT_EQ(f.job.lora.alpha, 16);
  EXPECT_EQ(f.job.lora.targets, (std::vector<std::string>{"q", "k", "v", "o"}));
  EXPECT_EQ(f.plan.dp, 8);
  EXPECT_EQ(f.plan.micro_batch, 2);
  EXPECT_EQ(f.plan.grad_accum, 1);  // micro_batch_num 64 has no effect without a pipeline
  EXPECT_EQ(f.job.global_batch, 16);
  EXPECT_EQ(f.job.precision, Precision::bf16);
  EXPECT_EQ(f.job.amp, AmpLevel::O2);  // param_init_type float32
  EXPECT_EQ(f.model.name, "llama2-7b");
  const Explanation e = explain_plan(f.model, f.cluster, f.job, f.plan, f.gpus, 0);
  EXPECT_GT(e.memory.worst.total, 0);
}

// v1.7.0's "mcore" config keeps model_config in Hugging Face names: refused naming the key.
TEST(MindFormers, RefusesTheV17McoreConfigNamingTheKey) {
  Result<ImportedConfig> im = import_files({{"pretrain_qwen3_32b_4k.yaml", read_fixture("mindformers_qwen3_32b_4k_v1.7.0.yaml"), false}},
                                           LaunchFormat::mindformers, ascend_import(), "pretrain_qwen3_32b_4k.yaml");
  ASSERT_FALSE(im);
  EXPECT_EQ(im.status().kind(), ErrorKind::bad_input);
  EXPECT_EQ(im.status().message().rfind("pretrain_qwen3_32b_4k.yaml: model.model_config.num_hidden_layers", 0), 0u) << im.status().message();
}

// ------------------------------------------------------------------ bad input

const char* kSmall =
    "run_mode: 'train'\n"
    "use_parallel: True\n"
    "parallel_config:\n"
    "  data_parallel: 2\n"
    "  model_parallel: 2\n"
    "  pipeline_stage: 2\n"
    "  micro_batch_num: 4\n"
    "recompute_config:\n"
    "  recompute: False\n"
    "  select_recompute: False\n"
    "runner_config:\n"
    "  batch_size: 1\n"
    "model:\n"
    "  model_config:\n"
    "    type: LlamaConfig\n"
    "    seq_length: 4096\n"
    "    num_layers: 32\n"
    "    hidden_size: 4096\n"
    "    num_heads: 32\n"
    "    intermediate_size: 11008\n"
    "    compute_dtype: bfloat16\n"
    "    param_init_type: float32\n"
    "    use_flash_attention: True\n"
    "    offset: 0\n"
    "  arch:\n"
    "    type: LlamaForCausalLM\n";


TEST(MindFormers, ReadsASmallConfigWithMindFormersDefaults) {
  Result<ImportedConfig> im = import_text(kSmall);
  ASSERT_TRUE(im) << im.status().message();
  EXPECT_EQ(im->file.plan.dp, 2);
  EXPECT_EQ(im->file.plan.grad_accum, 4);
  EXPECT_EQ(im->file.plan.zero, 0);               // enable_parallel_optimizer: TPL default False
  EXPECT_EQ(im->file.model.vocab, 32000);          // LlamaConfig default
  EXPECT_EQ(im->file.job.amp, AmpLevel::O2);       // float32 parameters, bfloat16 compute
  EXPECT_EQ(im->file.job.grads, GradConvention::megatron);
  EXPECT_EQ(im->unknown_keys, std::vector<std::string>{});
  bool vocab_note = false;
  for (const std::string& n : im->notes) vocab_note |= n.find("vocab_size absent") != std::string::npos;
  EXPECT_TRUE(vocab_note);
}

// An offset that is neither llmplan's even nor its embedding/loss split is the plan's own
// (plan.stage_layers): 32 layers on 2 stages with offset [-4, 4] are 12 + 20
// (layers = 32 // 2 + offset, models/utils.py L169-170), and the export writes it back.
TEST(MindFormers, AnyOffsetIsReadAsTheStagesOwnLayers) {
  Result<ImportedConfig> im = import_text(with(kSmall, "    offset: 0", "    offset: [-4, 4]"));
  ASSERT_TRUE(im) << im.status().message();
  EXPECT_EQ(im->file.plan.pipeline_split, PipelineSplit::custom);
  EXPECT_EQ(im->file.plan.stage_layers, (std::vector<int>{12, 20}));
  Result<ExportResult> ex = export_plan(im->file, LaunchFormat::mindformers);
  ASSERT_TRUE(ex) << ex.status().message();
  const YAML::Node off = YAML::Load(find_file(*ex, ".yaml")->text)["model"]["model_config"]["offset"];
  ASSERT_TRUE(off.IsSequence());
  EXPECT_EQ(off[0].as<int>(), -4);
  EXPECT_EQ(off[1].as<int>(), 4);
}

TEST(MindFormers, MalformedYamlIsBadInputNamingTheFileAndLine) {
  Result<ImportedConfig> im = import_text("parallel_config:\n  data_parallel: [1, 2\n");
  ASSERT_FALSE(im);
  EXPECT_EQ(im.status().kind(), ErrorKind::bad_input);
  EXPECT_EQ(im.status().message().rfind("cfg/config.yaml: line ", 0), 0u) << im.status().message();
  // The launch script too: an unclosed quote names its file and line (the shell reader's).
  im = import_text(kSmall, "A=1\nbash scripts/msrun_launcher.sh \"run_mindformer.py 8\n");
  ASSERT_FALSE(im);
  EXPECT_EQ(im.status().kind(), ErrorKind::bad_input);
  EXPECT_EQ(im.status().message().rfind("cfg/msrun.sh: line 2: ", 0), 0u) << im.status().message();
}

TEST(MindFormers, ContradictoryKeysAreBadInputNamingTheKey) {
  auto message = [](const std::string& yaml, const std::string& msrun = "") {
    Result<ImportedConfig> im = import_text(yaml, msrun);
    EXPECT_FALSE(im);
    if (im) return std::string();
    EXPECT_EQ(im.status().kind(), ErrorKind::bad_input);
    return im.status().message();
  };
  const std::string both = with(with(kSmall, "  recompute: False", "  recompute: True"), "  select_recompute: False", "  select_recompute: True");
  EXPECT_EQ(message(both).rfind("cfg/config.yaml: recompute_config.select_recompute (line 10)", 0), 0u) << message(both);
  // 32 layers on 2 stages: offsets must sum to 32 % 2 = 0.
  const std::string off = with(kSmall, "    offset: 0", "    offset: [1, 0]");
  EXPECT_EQ(message(off).rfind("cfg/config.yaml: model.model_config.offset (line 24)", 0), 0u) << message(off);
  const std::string launch = "bash scripts/msrun_launcher.sh \"run_mindformer.py --config config.yaml\" 16 8 10.0.0.1 8118 0 output/msrun_log False 300\n";
  const std::string m = message(kSmall, launch);
  EXPECT_NE(m.find("parallel_config.data_parallel"), std::string::npos) << m;
  EXPECT_NE(m.find("cfg/msrun.sh: line 1"), std::string::npos) << m;
  const std::string args = message(kSmall, "bash scripts/msrun_launcher.sh \"run_mindformer.py\" 8 8 10.0.0.1\n");
  EXPECT_NE(args.find("cfg/msrun.sh: line 1: msrun_launcher.sh: expected 1, 2, 6 or 9 arguments"), std::string::npos) << args;
}

TEST(MindFormers, AbsurdValuesAreBadInputNamingTheKey) {
  const std::string neg = with(kSmall, "  data_parallel: 2", "  data_parallel: -2");
  Result<ImportedConfig> im = import_text(neg);
  ASSERT_FALSE(im);
  EXPECT_EQ(im.status().message(), "cfg/config.yaml: parallel_config.data_parallel: expected an integer in [1, 4096], got '-2' (line 4)");
  const std::string word = with(kSmall, "    num_layers: 32", "    num_layers: many");
  im = import_text(word);
  ASSERT_FALSE(im);
  EXPECT_EQ(im.status().message(), "cfg/config.yaml: model.model_config.num_layers: expected an integer in [1, 10000], got 'many' (line 17)");
  const std::string dtype = with(kSmall, "    compute_dtype: bfloat16", "    compute_dtype: float8");
  im = import_text(dtype);
  ASSERT_FALSE(im);
  EXPECT_NE(im.status().message().find("model.model_config.compute_dtype: expected bfloat16, float16 or float32"), std::string::npos);
}

TEST(MindFormers, ListsEveryUnusedKey) {
  const std::string extra = std::string(kSmall) +
                            "optimizer:\n  type: AdamW\n  beta1: 0.9\n"
                            "callbacks:\n  - type: MFLossMonitor\n  - type: CheckpointMonitor\n    prefix: llama\n"
                            "my_section:\n  nested:\n    knob: 3\n";
  Result<ImportedConfig> im = import_text(with(extra, "  micro_batch_num: 4\n", "  micro_batch_num: 4\n  dat_parallel: 3\n"));
  ASSERT_TRUE(im) << im.status().message();
  EXPECT_EQ(im->unknown_keys, (std::vector<std::string>{"parallel_config.dat_parallel", "optimizer.beta1", "callbacks.type",
                                                         "callbacks.prefix", "my_section.nested.knob"}));
}

// The launcher's other forms (scripts/msrun_launcher.sh L58-121) and a bare msrun line give
// the device count the parallel sizes are checked against.
TEST(MindFormers, ReadsEachLauncherForm) {
  struct Case {
    std::string line;
    bool ok;
  };
  // kSmall asks for 2 x 2 x 2 = 8 devices.
  for (const Case& c : std::vector<Case>{{"bash scripts/msrun_launcher.sh \"run_mindformer.py --config c.yaml\"\n", true},  // default 8
                                         {"bash scripts/msrun_launcher.sh \"run_mindformer.py\" 8\n", true},
                                         {"bash scripts/msrun_launcher.sh \"run_mindformer.py\" 4\n", false},
                                         {"bash scripts/msrun_launcher.sh \"run_mindformer.py\" 8 8118 log False 300\n", true},
                                         {"bash scripts/msrun_launcher.sh \\\n  \"run_mindformer.py\" 16 8 \\\n  a 1 0 l False 3\n", false},
                                         {"msrun --worker_num=8 --local_worker_num=4 run_mindformer.py --config c.yaml\n", true},
                                         // a comment is no line; a redirection and `&` are no arguments
                                         {"# bash scripts/msrun_launcher.sh \"x\" 4\ncd mf && bash scripts/msrun_launcher.sh "
                                          "\"run_mindformer.py\" 8 > log 2>&1 &\n",
                                          true}}) {
    SCOPED_TRACE(c.line);
    Result<ImportedConfig> im = import_text(kSmall, c.line);
    EXPECT_EQ(im.ok(), c.ok) << (im ? "" : im.status().message());
    if (im && c.line.find("local_worker_num=4") != std::string::npos) {
      EXPECT_EQ(im->file.cluster.gpus_per_node, 4);
      EXPECT_EQ(im->file.cluster.nodes, 2);
    }
  }
}

// --model is a check where the config describes the model: a different shape names the field.
TEST(MindFormers, GivenModelMustMatchTheConfigsShape) {
  ImportOptions o = ascend_import();
  o.model = "llama2-7b";
  Result<ImportedConfig> im = import_text(kSmall, "", o);
  ASSERT_TRUE(im) << im.status().message();
  EXPECT_EQ(im->file.model.name, "llama2-7b");
  o.model = "llama3-8b";
  im = import_text(kSmall, "", o);
  ASSERT_FALSE(im);
  EXPECT_EQ(im.status().message().rfind("--model llama3-8b: field 'kv_heads'", 0), 0u) << im.status().message();
}

}  // namespace
}  // namespace llmplan
