// The mindformers reader (launch/formats.h import_mindformers): a MindSpore Transformers
// (MindFormers) v1.5.0 training YAML for LlamaForCausalLM, and the msrun_launcher.sh line
// beside it when there is one, read into model + job + plan.
//
// Keys a YAML leaves out take MindFormers' own defaults: the template MindFormerConfig applies
// (mindformers/tools/register/template.py, "TPL") and LlamaConfig.__init__'s
// (mindformers/models/llama/llama_config.py, "LC"); each default that matters to the plan is
// stated in ImportedConfig::notes. The batch follows BaseTrainer (mindformers/trainer/
// base_trainer.py L199-219, "BT"); the device count rule is check_rules.py L157-162 ("CR");
// pipeline offsets and recompute lists are LayerSetting's (mindformers/models/utils.py, "MU").
// Every leaf key path the reader did not use is listed in unknown_keys (sequence items
// share their list's path: "callbacks.type"). Contradictory or absurd values are bad_input
// naming the file, the key and its line.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "launch/formats.h"
#include "launch/mindformers_common.h"
#include "launch/model_shape.h"
#include "launch/shell_words.h"
#include "planner/cost/plan_check.h"

namespace llmplan::launch_formats {

namespace mf = mindformers;

namespace {



// The YAML being read: its root, its name for messages, and the key paths used.
class Source {
 public:
  Source(std::string where, YAML::Node root) : where_(std::move(where)), root_(std::move(root)) {}
  const std::string& where() const { return where_; }
  const YAML::Node& root() const { return root_; }

  // The node at a dotted path through mappings (undefined when absent or null); marks the
  // path used.
  YAML::Node at(const std::string& path) {
    used_.insert(path);
    return find(path);
  }
  // Marks a path used without reading it (its value is what llmplan assumes, or no part of
  // a plan's cost).
  void touch(const std::string& path) { used_.insert(path); }
  // Marks every key under a path used.
  void touch_subtree(const std::string& path) { subtrees_.insert(path); }
  bool present(const std::string& path) const {
    const YAML::Node n = find(path);
    return n.IsDefined() && !n.IsNull();
  }

  Status fail(const std::string& path, const YAML::Node& n, const std::string& expected) const {
    std::string got = "nothing";
    if (n.IsDefined()) {
      if (n.IsScalar()) got = "'" + n.Scalar() + "'";
      else if (n.IsSequence()) got = "a list";
      else if (n.IsMap()) got = "a mapping";
      else if (n.IsNull()) got = "null";
    }
    std::string line;
    if (n.IsDefined() && n.Mark().line >= 0) line = " (line " + std::to_string(n.Mark().line + 1) + ")";
    return Status::bad_input(where_ + ": " + path + ": expected " + expected + ", got " + got + line);
  }
  Status bad(const std::string& path, const std::string& why) const {
    const YAML::Node n = find(path);
    std::string line;
    if (n.IsDefined() && n.Mark().line >= 0) line = " (line " + std::to_string(n.Mark().line + 1) + ")";
    return Status::bad_input(where_ + ": " + path + line + ": " + why);
  }

  Result<int64_t> integer(const std::string& path, int64_t fallback, int64_t lo, int64_t hi, bool* given = nullptr) {
    const YAML::Node n = at(path);
    if (given) *given = n.IsDefined() && !n.IsNull();
    if (!n.IsDefined() || n.IsNull()) return fallback;
    const std::string expected = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (!n.IsScalar()) return fail(path, n, expected);
    int64_t v = 0;
    if (!YAML::convert<int64_t>::decode(n, v) || v < lo || v > hi) return fail(path, n, expected);
    return v;
  }
  Result<double> real(const std::string& path, double fallback, double lo, double hi) {
    const YAML::Node n = at(path);
    if (!n.IsDefined() || n.IsNull()) return fallback;
    std::ostringstream e;
    e << "a number in [" << lo << ", " << hi << "]";
    double v = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !(v >= lo && v <= hi)) return fail(path, n, e.str());
    return v;
  }
  Result<bool> boolean(const std::string& path, bool fallback) {
    const YAML::Node n = at(path);
    if (!n.IsDefined() || n.IsNull()) return fallback;
    return as_bool(path, n);
  }
  Result<bool> as_bool(const std::string& path, const YAML::Node& n) const {
    bool v = false;
    if (n.IsScalar() && YAML::convert<bool>::decode(n, v)) return v;
    int64_t i = 0;
    if (n.IsScalar() && YAML::convert<int64_t>::decode(n, i) && (i == 0 || i == 1)) return i == 1;
    return fail(path, n, "True or False");
  }
  Result<std::string> text(const std::string& path, const std::string& fallback) {
    const YAML::Node n = at(path);
    if (!n.IsDefined() || n.IsNull()) return fallback;
    if (!n.IsScalar()) return fail(path, n, "a string");
    return n.Scalar();
  }

  // Every leaf key path not used, in file order, each once.
  std::vector<std::string> unused() const {
    walked_.clear();
    std::vector<std::string> out;
    std::set<std::string> seen;
    walk(root_, "", &out, &seen);
    return out;
  }

 private:
  YAML::Node find(const std::string& path) const {
    // Rebinding (reset), never assigning: `a = b` on yaml-cpp nodes writes b's value into a's.
    YAML::Node cur;
    cur.reset(root_);
    std::stringstream ss(path);
    std::string part;
    while (std::getline(ss, part, '.')) {
      if (!cur.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      const YAML::Node& view = cur;  // const lookups never insert
      const YAML::Node next = view[part];
      if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      cur.reset(next);
    }
    return cur;
  }
  bool is_used(const std::string& path) const {
    if (used_.count(path)) return true;
    for (const std::string& s : subtrees_)
      if (path == s || (path.size() > s.size() && path.compare(0, s.size(), s) == 0 && path[s.size()] == '.')) return true;
    return false;
  }
  void walk(const YAML::Node& n, const std::string& prefix, std::vector<std::string>* out, std::set<std::string>* seen) const {
    // An alias (*train_dataset) is the node it names: listed once, by its own path.
    const bool again = (n.IsMap() || n.IsSequence()) &&
                       std::any_of(walked_.begin(), walked_.end(), [&](const YAML::Node& w) { return w.is(n); });
    if ((n.IsMap() || n.IsSequence()) && !again) walked_.push_back(n);
    if (n.IsMap() && n.size() > 0 && !again) {
      for (const auto& kv : n) {
        const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
        walk(kv.second, prefix.empty() ? key : prefix + "." + key, out, seen);
      }
      return;
    }
    if (n.IsSequence() && !again) {
      bool maps = false;
      for (const auto& x : n) maps |= x.IsMap();
      if (maps) {
        for (const auto& x : n)
          if (x.IsMap()) walk(x, prefix, out, seen);
        return;
      }
    }
    if (prefix.empty() || is_used(prefix) || seen->count(prefix)) return;
    seen->insert(prefix);
    out->push_back(prefix);
  }

  std::string where_;
  YAML::Node root_;
  std::set<std::string> used_;
  std::set<std::string> subtrees_;
  mutable std::vector<YAML::Node> walked_;  // the collections unused() has walked
};

// ------------------------------------------------------------------ msrun line

struct Launch {
  bool found = false;
  int worker_num = 0;     // devices in all (0: not a number in the script)
  int local_worker = 0;   // devices per node (0: not a number)
  std::string run_mode;   // --run_mode in the command, if any
  std::string where;      // "<file>: line N"
};

int positive_or_zero(const std::string& s) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return 0;
  return std::stoi(s);
}

Result<Launch> read_launch(const LaunchFile& file, const std::string& where) {
  Launch l;
  // The script's commands as words, unexpanded (a launch line's counts are literal numbers in
  // the forms MindFormers documents; a variable there reads as "not a number").
  Result<std::vector<shell::Command>> commands = shell::split_shell_lines(file.text, where);
  if (!commands) return commands.status();
  for (const shell::Command& c : *commands) {
    const std::vector<std::string>& w = c.words;
    size_t i = 0;
    while (i < w.size() && !w[i].ends_with("msrun_launcher.sh") && w[i] != "msrun") ++i;
    if (i == w.size()) continue;
    l.found = true;
    l.where = where + ": line " + std::to_string(c.line);
    if (w[i] == "msrun") {  // msrun --worker_num=N --local_worker_num=M ...
      for (size_t k = i + 1; k < w.size(); ++k) {
        if (w[k].rfind("--worker_num=", 0) == 0) l.worker_num = positive_or_zero(w[k].substr(13));
        else if (w[k].rfind("--local_worker_num=", 0) == 0) l.local_worker = positive_or_zero(w[k].substr(19));
        else if (w[k] == "--run_mode" && k + 1 < w.size()) l.run_mode = w[k + 1];
      }
      if (l.local_worker == 0) l.local_worker = l.worker_num;
      return l;
    }
    const std::vector<std::string> args(w.begin() + static_cast<std::ptrdiff_t>(i) + 1, w.end());
    // scripts/msrun_launcher.sh L58-121 @v1.5.0: "CMD"; "CMD" WORKER_NUM; "CMD" WORKER_NUM
    // MASTER_PORT LOG_DIR JOIN CLUSTER_TIME_OUT; or the nine-argument multi-node form.
    if (args.size() != 1 && args.size() != 2 && args.size() != 6 && args.size() != 9)
      return Status::bad_input(l.where + ": msrun_launcher.sh: expected 1, 2, 6 or 9 arguments (scripts/msrun_launcher.sh L58-65), got " +
                               std::to_string(args.size()));
    l.worker_num = args.size() == 1 ? 8 : positive_or_zero(args[1]);
    l.local_worker = args.size() == 9 ? positive_or_zero(args[2]) : l.worker_num;
    if (args.size() == 1) l.local_worker = 8;
    Result<std::vector<shell::Command>> command = shell::split_shell_lines(args[0], l.where);  // "CMD": run_mindformer.py's line
    if (!command) return command.status();
    for (const shell::Command& cc : *command)
      for (size_t k = 0; k + 1 < cc.words.size(); ++k)
        if (cc.words[k] == "--run_mode") l.run_mode = cc.words[k + 1];
    return l;
  }
  return l;
}

// ------------------------------------------------------------------ YAML reading

// llmplan's Recompute read from recompute_config against the pipeline's layers.
struct RecomputeRead {
  Recompute kind = Recompute::none;
  int layers = 0;  // full_k's k
};

// MindFormers' per-(chunk, stage) recompute counts for an int list over stages
// (_alloc_recompute_layer, MU L446-458: each stage's count dealt round the chunks).
std::vector<std::vector<int>> alloc_counts(const std::vector<int>& per_stage, const std::vector<std::vector<int>>& layer_list) {
  const size_t chunks = layer_list.size(), pp = layer_list[0].size();
  std::vector<std::vector<int>> res(chunks, std::vector<int>(pp, 0));
  for (size_t j = 0; j < per_stage.size() && j < pp; ++j) {
    int by_stage = 0;
    for (size_t i = 0; i < chunks; ++i) by_stage += layer_list[i][j];
    int num = std::min(per_stage[j], by_stage);
    while (num > 0) {
      for (size_t i = 0; i < chunks && num > 0; ++i)
        if (res[i][j] < layer_list[i][j]) ++res[i][j], --num;
    }
  }
  return res;
}

class Reader {
 public:
  Reader(Source& src, const ImportOptions& opt, ImportedConfig* out) : s_(src), opt_(opt), out_(out) {}
  Status run(const Launch& launch, const std::string& origin);

 private:
  void note(const std::string& n) { out_->notes.push_back(n); }
  Status read_model(ModelSpec* m, int64_t* seq_len);
  Status read_job(const Launch& launch, TrainingJob* j);
  Status read_parallel(const ModelSpec& m, const Launch& launch, ParallelPlan* p, int* devices);
  Status read_recompute(const ModelSpec& m, const ParallelPlan& p, const std::vector<std::vector<int>>& layer_list, RecomputeRead* r);
  Status read_swap(const ModelSpec& m, const ParallelPlan& p, int* offload_layers);
  Status read_lora(TrainingJob* j);

  Source& s_;
  const ImportOptions& opt_;
  ImportedConfig* out_;
};

constexpr const char* kMc = "model.model_config.";

Status Reader::read_model(ModelSpec* m, int64_t* seq_len) {
  const std::string mc = kMc;
  // v1.7's "mcore" models keep model_config in Hugging Face names and no LlamaConfig type.
  Result<bool> legacy = s_.boolean("use_legacy", true);
  if (!legacy) return legacy.status();
  const bool legacy_off = !*legacy;
  if (legacy_off || (s_.present(mc + "num_hidden_layers") && !s_.present(mc + "num_layers")))
    return s_.bad(s_.present(mc + "num_hidden_layers") ? mc + "num_hidden_layers" : "use_legacy",
                  "a MindFormers v1.7 'mcore' model config (use_legacy: False, Hugging Face-style model_config names "
                  "num_hidden_layers, num_attention_heads, ...); this reader reads v1.5.0's LlamaConfig (num_layers, "
                  "num_heads, n_kv_heads, ...): write the model_config in those names");
  if (!s_.present("model.model_config"))
    return s_.bad("model.model_config", "missing: MindFormers needs model.model_config and model.arch (template.py ModelConfig)");
  if (!s_.at("model.model_config").IsMap()) return s_.fail("model.model_config", s_.at("model.model_config"), "a mapping");
  Result<std::string> type = s_.text(mc + "type", "LlamaConfig");
  if (!type) return type.status();
  if (*type != "LlamaConfig")
    return s_.fail(mc + "type", s_.at(mc + "type"), "LlamaConfig (the v1.5.0 Llama family this reader knows)");
  if (!s_.present(mc + "type")) note("model.model_config.type absent: read as LlamaConfig");
  Result<std::string> arch = s_.text("model.arch.type", "LlamaForCausalLM");
  if (!arch) return arch.status();
  if (*arch != "LlamaForCausalLM") return s_.fail("model.arch.type", s_.at("model.arch.type"), "LlamaForCausalLM");

  auto get = [&](const char* key, int64_t fallback, int64_t lo, int64_t hi, int64_t* out) -> Status {
    bool given = false;
    Result<int64_t> v = s_.integer(mc + key, fallback, lo, hi, &given);
    if (!v) return v.status();
    if (!given) note(mc + key + " absent: LlamaConfig's default " + std::to_string(fallback) + " (llama_config.py)");
    *out = *v;
    return Status::ok();
  };
  int64_t layers = 0, hidden = 0, heads = 0, vocab = 0;
  if (Status st = get("num_layers", 32, 1, 10000, &layers); !st) return st;
  if (Status st = get("hidden_size", 4096, 1, 1 << 20, &hidden); !st) return st;
  if (Status st = get("num_heads", 32, 1, 1 << 16, &heads); !st) return st;
  if (Status st = get("vocab_size", 32000, 1, int64_t{1} << 24, &vocab); !st) return st;
  if (Status st = get("seq_length", 2048, 1, int64_t{1} << 24, seq_len); !st) return st;
  if (hidden % heads != 0) return s_.bad(mc + "num_heads", "expected a divisor of hidden_size (" + std::to_string(hidden) + "), got " + std::to_string(heads));
  Result<int64_t> kv = s_.integer(mc + "n_kv_heads", heads, 1, heads);
  if (!kv) return kv.status();
  if (heads % *kv != 0) return s_.bad(mc + "n_kv_heads", "expected a divisor of num_heads (" + std::to_string(heads) + "), got " + std::to_string(*kv));
  // The SwiGLU width: intermediate_size, else LlamaFeedForward's rule from 4 x hidden,
  // ffn_dim_multiplier and multiple_of (mindformers/models/llama/llama_layer.py L312-318).
  bool ffn_given = false;
  Result<int64_t> ffn = s_.integer(mc + "intermediate_size", 0, 1, int64_t{1} << 22, &ffn_given);
  if (!ffn) return ffn.status();
  Result<int64_t> multiple_of = s_.integer(mc + "multiple_of", 256, 1, 1 << 16);
  if (!multiple_of) return multiple_of.status();
  Result<double> mult = s_.real(mc + "ffn_dim_multiplier", 0, 0, 64);
  if (!mult) return mult.status();
  int64_t ffn_hidden = *ffn;
  if (!ffn_given) {
    double dim = 4.0 * static_cast<double>(hidden);
    if (*mult > 0) dim = std::floor((*mult + 0.01) * dim);
    const int64_t two_thirds = static_cast<int64_t>(std::floor(2.0 * dim / 3.0));
    ffn_hidden = *multiple_of * ((two_thirds + *multiple_of - 1) / *multiple_of);
    note("intermediate_size absent: " + std::to_string(ffn_hidden) +
         " from multiple_of and ffn_dim_multiplier (llama_layer.py LlamaFeedForward L312-318)");
  } else {
    s_.touch(mc + "multiple_of"), s_.touch(mc + "ffn_dim_multiplier");
  }
  Result<int64_t> max_pos = s_.integer(mc + "max_position_embedding", *seq_len, 1, int64_t{1} << 24);
  if (!max_pos) return max_pos.status();
  Result<bool> tied = s_.boolean(mc + "tie_word_embeddings", false);
  Result<bool> qkv_bias = s_.boolean(mc + "qkv_has_bias", false);
  Result<bool> o_bias = s_.boolean(mc + "attn_proj_has_bias", false);
  for (const Result<bool>* r : {&tied, &qkv_bias, &o_bias})
    if (!*r) return r->status();
  if (*o_bias && !*qkv_bias)
    return s_.bad(mc + "attn_proj_has_bias", "True with qkv_has_bias False: llmplan's attention biases are none, qkv (Qwen2) or all four");
  for (const char* k : {"qkv_concat", "layernorm_compute_type", "softmax_compute_type", "rotary_dtype"}) s_.touch(mc + k);

  ModelSpec& md = *m;
  md.family = Family::llama;
  md.layers = static_cast<int>(layers);
  md.hidden = hidden;
  md.heads = static_cast<int>(heads);
  md.kv_heads = static_cast<int>(*kv);
  md.head_dim = hidden / heads;
  md.ffn_hidden = ffn_hidden;
  md.vocab = vocab;
  md.max_positions = *max_pos;
  md.tied_embeddings = *tied;
  md.attention_bias = *o_bias ? AttentionBias::all : (*qkv_bias ? AttentionBias::qkv : AttentionBias::none);
  md.dropout = false;
  md.qk_norm = false;

  // Mixture of experts: the top-level moe_config (TPL MoEConfig L339-386), every layer.
  Result<int64_t> experts = s_.integer("moe_config.expert_num", 1, 1, 1 << 16);
  if (!experts) return experts.status();
  if (*experts > 1) {
    Result<int64_t> k = s_.integer("moe_config.num_experts_chosen", 1, 1, *experts);
    Result<double> cf = s_.real("moe_config.capacity_factor", 1.1, -1e9, 1e9);
    Result<int64_t> shared = s_.integer("moe_config.shared_expert_num", 0, 0, 1 << 16);
    if (!k) return k.status();
    if (!cf) return cf.status();
    if (!shared) return shared.status();
    if (*shared > 0)
      return s_.bad("moe_config.shared_expert_num", "shared experts (LlamaFeedForwardWithMoE) are not read: their widths come from keys "
                                                    "this reader does not map");
    if (!s_.present("moe_config.num_experts_chosen")) note("moe_config.num_experts_chosen absent: MoEConfig's default 1 (template.py L343)");
    md.moe.experts = static_cast<int>(*experts);
    md.moe.experts_per_token = static_cast<int>(*k);
    md.moe.expert_ffn_hidden = ffn_hidden;  // the expert is the LlamaFeedForward of intermediate_size
    md.moe.capacity_factor = *cf > 0 ? *cf : 1.0;
    if (*cf <= 0) note("moe_config.capacity_factor <= 0 (dropless): llmplan buffers capacity_factor 1.0");
  }
  return Status::ok();
}

Status Reader::read_lora(TrainingJob* j) {
  const std::string pc = std::string(kMc) + "pet_config";
  if (!s_.present(pc)) return Status::ok();
  Result<std::string> type = s_.text(pc + ".pet_type", "");
  if (!type) return type.status();
  if (*type != "lora") return s_.fail(pc + ".pet_type", s_.at(pc + ".pet_type"), "lora (the only parameter-efficient method llmplan models)");
  Result<int64_t> rank = s_.integer(pc + ".lora_rank", 8, 1, 1 << 16);
  Result<double> alpha = s_.real(pc + ".lora_alpha", 16, 0, 1e6);
  if (!rank) return rank.status();
  if (!alpha) return alpha.status();
  s_.touch(pc + ".lora_dropout");
  Result<std::string> rx = s_.text(pc + ".target_modules", "");
  if (!rx) return rx.status();
  std::vector<std::string> targets;
  std::stringstream ss(*rx);
  std::string alt;
  while (std::getline(ss, alt, '|')) {
    std::string a = alt;
    if (a.rfind("^", 0) == 0) a.erase(0, 1);
    if (a.rfind(".*", 0) == 0) a.erase(0, 2);
    if (!a.empty() && a.back() == '$') a.pop_back();
    const size_t dot = a.rfind('.');  // e.g. attention.wq
    if (dot != std::string::npos) a = a.substr(dot + 1);
    const std::string t = mf::lora_target(a);
    if (t.empty())
      return s_.fail(pc + ".target_modules", s_.at(pc + ".target_modules"),
                     "a regex over Llama's cells such as '.*wq|.*wk|.*wv|.*wo' (wq wk wv wo w1 w2 w3)");
    if (std::find(targets.begin(), targets.end(), t) == targets.end()) targets.push_back(t);
  }
  if (targets.empty())
    return s_.fail(pc + ".target_modules", s_.at(pc + ".target_modules"), "a regex over Llama's cells such as '.*wq|.*wv'");
  j->mode = TrainMode::lora;
  j->lora.rank = static_cast<int>(*rank);
  j->lora.alpha = *alpha;
  j->lora.targets = targets;
  return Status::ok();
}

Status Reader::read_job(const Launch& launch, TrainingJob* j) {
  const std::string mc = kMc;
  Result<std::string> run_mode = s_.text("run_mode", "");
  if (!run_mode) return run_mode.status();
  std::string mode = *run_mode;
  if (!launch.run_mode.empty()) {
    if (!mode.empty() && mode != launch.run_mode)
      note("run_mode '" + mode + "' is overridden by the launch line's --run_mode " + launch.run_mode + " (run_mindformer.py)");
    mode = launch.run_mode;
  }
  if (mode.empty()) {
    note("run_mode absent: read as train");
    mode = "train";
  }
  if (mode != "train" && mode != "finetune")
    return s_.fail("run_mode", s_.at("run_mode"), "train or finetune (a training run)");
  j->mode = mode == "train" ? TrainMode::pretrain : TrainMode::finetune;
  if (Status st = read_lora(j); !st) return st;

  Result<std::string> compute = s_.text(mc + "compute_dtype", "float16");
  if (!compute) return compute.status();
  if (*compute == "bfloat16") j->precision = Precision::bf16;
  else if (*compute == "float16") j->precision = Precision::fp16;
  else if (*compute == "float32") j->precision = Precision::fp32;
  else return s_.fail(mc + "compute_dtype", s_.at(mc + "compute_dtype"), "bfloat16, float16 or float32");
  if (!s_.present(mc + "compute_dtype")) note("compute_dtype absent: LlamaConfig's default float16 (llama_config.py L152)");
  Result<std::string> params = s_.text(mc + "param_init_type", "float16");
  if (!params) return params.status();
  if (*params != "float32" && *params != "float16" && *params != "bfloat16")
    return s_.fail(mc + "param_init_type", s_.at(mc + "param_init_type"), "float32, bfloat16 or float16");
  if (!s_.present(mc + "param_init_type")) note("param_init_type absent: LlamaConfig's default float16 (llama_config.py L156)");
  Result<std::string> opt_type = s_.text("optimizer.type", "AdamW");
  if (!opt_type) return opt_type.status();
  if (*opt_type == "Momentum" || *opt_type == "SGD") {
    j->optimizer = Optimizer::sgd_momentum;
    if (*opt_type == "SGD") note("optimizer.type SGD: modelled with one momentum buffer (sgd_momentum)");
  } else {
    j->optimizer = Optimizer::adamw;
    if (*opt_type != "AdamW" && *opt_type != "AdamWeightDecay" && *opt_type != "FP32StateAdamWeightDecay" && *opt_type != "FusedAdamWeightDecay" &&
        *opt_type != "Adam")
      note("optimizer.type " + *opt_type + ": modelled as AdamW (two moments)");
  }
  if (j->precision == Precision::fp32) {
    j->amp = AmpLevel::O0;
  } else if (*params == "float32") {
    // float32 parameters cast to compute_dtype per layer: fp32 master weights, and fp32
    // gradients (a parameter's gradient takes its dtype).
    j->amp = AmpLevel::O2;
    j->grads = GradConvention::megatron;
  } else {
    j->amp = AmpLevel::O3;
    j->grads = GradConvention::deepspeed;
    if (*opt_type == "FP32StateAdamWeightDecay")
      note("param_init_type " + *params + " with FP32StateAdamWeightDecay: 16-bit weights without a float32 master (job.amp O3), "
           "whose float32 moments llmplan's O3 counts at 16 bits (4 bytes a parameter low)");
  }
  s_.touch_subtree("runner_wrapper.scale_sense");
  return Status::ok();
}

Status Reader::read_swap(const ModelSpec& m, const ParallelPlan& p, int* offload_layers) {
  Result<bool> swap = s_.boolean("swap_config.swap", false);
  if (!swap) return swap.status();
  s_.touch("swap_config.default_prefetch");
  s_.touch_subtree("swap_config.layer_swap");
  if (!*swap) return Status::ok();
  if (s_.present("swap_config.op_swap")) {
    s_.touch_subtree("swap_config.op_swap");
    note("swap_config.op_swap: swap of single operators is not modelled");
  }
  const YAML::Node ls = s_.at("swap_config.layer_swap");
  if (!ls.IsDefined() || ls.IsNull()) return Status::ok();
  std::set<int> ids;
  bool all = false;
  std::vector<YAML::Node> list;
  if (ls.IsMap()) list.push_back(ls);
  else if (ls.IsSequence()) for (const auto& x : ls) list.push_back(x);
  else return s_.fail("swap_config.layer_swap", ls, "a list of {backward_prefetch, layers}");
  for (const YAML::Node& it : list) {
    const YAML::Node layers = it.IsMap() ? it["layers"] : YAML::Node();
    if (!layers.IsDefined()) return s_.fail("swap_config.layer_swap.layers", it, "layer ids or True");
    if (layers.IsScalar()) {
      Result<bool> b = s_.as_bool("swap_config.layer_swap.layers", layers);
      if (!b) return b.status();
      all |= *b;
    } else if (layers.IsSequence()) {
      for (const auto& x : layers) {
        int64_t id = -1;
        if (!x.IsScalar() || !YAML::convert<int64_t>::decode(x, id) || id < 0 || id >= m.layers)
          return s_.fail("swap_config.layer_swap.layers", x, "layer ids in [0, " + std::to_string(m.layers - 1) + "]");
        ids.insert(static_cast<int>(id));
      }
    } else {
      return s_.fail("swap_config.layer_swap.layers", layers, "layer ids or True");
    }
  }
  // llmplan offloads the first k layers of each pipeline stage (chunk by chunk).
  std::vector<std::vector<int>> stage_ids(static_cast<size_t>(p.pp));
  for (int st = 0; st < p.pp; ++st)
    for (int c = 0; c < std::max(1, p.vpp); ++c) {
      const int v = c * p.pp + st;
      const int first = first_layer_of_virtual_stage(m.layers, p, v);
      for (int i = 0; i < virtual_stage_layers(m.layers, p, v); ++i) stage_ids[static_cast<size_t>(st)].push_back(first + i);
    }
  int k = 0;
  if (all) {
    k = pp_stage_layers(m.layers, p, 0);
  } else {
    while (k < static_cast<int>(stage_ids[0].size()) && ids.count(stage_ids[0][static_cast<size_t>(k)])) ++k;
    std::set<int> want;
    for (const std::vector<int>& sid : stage_ids)
      for (int i = 0; i < k && i < static_cast<int>(sid.size()); ++i) want.insert(sid[static_cast<size_t>(i)]);
    if (want != ids)
      note("swap_config.layer_swap: read as the first " + std::to_string(k) +
           " layers of each pipeline stage (llmplan's activation offload); the config swaps another set of layers");
  }
  *offload_layers = k;
  return Status::ok();
}

Status Reader::read_recompute(const ModelSpec& m, const ParallelPlan& p, const std::vector<std::vector<int>>& layer_list,
                              RecomputeRead* r) {
  const std::string rc = "recompute_config.";
  for (const char* k : {"parallel_optimizer_comm_recompute", "mp_comm_recompute", "recompute_slice_activation", "select_recompute_exclude",
                        "select_comm_recompute_exclude"})
    s_.touch(rc + k);
  const size_t chunks = layer_list.size(), pp = static_cast<size_t>(p.pp);
  const YAML::Node full = s_.at(rc + "recompute");
  bool full_all = false;
  std::vector<std::vector<int>> counts;  // per (chunk, stage)
  if (full.IsDefined() && !full.IsNull()) {
    if (full.IsScalar()) {
      Result<bool> b = s_.as_bool(rc + "recompute", full);
      if (!b) return b.status();
      full_all = *b;
    } else if (full.IsSequence()) {
      bool nested = false;
      for (const auto& x : full) nested |= x.IsSequence();
      auto item = [&](const YAML::Node& x, int cap, int* out) -> Status {
        bool b = false;
        int64_t v = 0;
        if (x.IsScalar() && YAML::convert<int64_t>::decode(x, v) && v >= 0 && v <= 100000) *out = std::min<int64_t>(v, cap);
        else if (x.IsScalar() && YAML::convert<bool>::decode(x, b)) *out = b ? cap : 0;
        else return s_.fail(rc + "recompute", x, "layer counts (non-negative integers) or True/False");
        return Status::ok();
      };
      if (!nested) {
        // CR L273-278: an int list longer than pipeline_stage is an error.
        if (full.size() > pp) return s_.bad(rc + "recompute", "expected at most pipeline_stage (" + std::to_string(pp) + ") entries, got " + std::to_string(full.size()));
        std::vector<int> per(pp, 0);
        int by_stage_cap = 0;
        for (size_t j = 0; j < full.size(); ++j) {
          by_stage_cap = 0;
          for (size_t i = 0; i < chunks; ++i) by_stage_cap += layer_list[i][j];
          if (Status st = item(full[j], by_stage_cap, &per[j]); !st) return st;
        }
        counts = alloc_counts(per, layer_list);
      } else {
        if (full.size() != chunks)
          return s_.bad(rc + "recompute", "expected a row per interleave chunk (" + std::to_string(chunks) + "), got " + std::to_string(full.size()));
        counts.assign(chunks, std::vector<int>(pp, 0));
        for (size_t i = 0; i < chunks; ++i) {
          const YAML::Node row = full[i];
          if (!row.IsSequence() || row.size() > pp) return s_.fail(rc + "recompute", row, "a row of at most " + std::to_string(pp) + " layer counts");
          for (size_t j = 0; j < row.size(); ++j)
            if (Status st = item(row[j], layer_list[i][j], &counts[i][j]); !st) return st;
        }
      }
    } else {
      return s_.fail(rc + "recompute", full, "True, False or layer counts per stage");
    }
  }
  // Operator-level (selective) recompute: True, counts per stage, patterns or {pattern: ...}.
  const YAML::Node sel = s_.at(rc + "select_recompute");
  bool selective = false, sel_partial = false;
  if (sel.IsDefined() && !sel.IsNull()) {
    if (sel.IsScalar()) {
      Result<bool> b = s_.as_bool(rc + "select_recompute", sel);
      if (!b) return b.status();
      selective = *b;
    } else if (sel.IsSequence() || sel.IsMap()) {
      s_.touch_subtree(rc + "select_recompute");
      for (const auto& x : sel) {
        const YAML::Node v = sel.IsMap() ? x.second : x;
        bool b = false;
        int64_t n = 0;
        if (v.IsScalar() && YAML::convert<int64_t>::decode(v, n)) selective |= n > 0, sel_partial = true;
        else if (v.IsScalar() && YAML::convert<bool>::decode(v, b)) selective |= b;
        else selective = true, sel_partial = true;  // a pattern or a per-stage list
      }
    }
  }
  if (s_.present(rc + "select_comm_recompute")) {
    s_.touch_subtree(rc + "select_comm_recompute");
    note("recompute_config.select_comm_recompute: recomputing communication operators is not modelled");
  }
  if (full_all && selective && sel.IsScalar())
    return s_.bad(rc + "select_recompute",
                  "True contradicts recompute_config.recompute True: every layer is recomputed whole, so the selective setting never "
                  "applies (models/utils.py L401-415)");
  if (full_all) {
    r->kind = Recompute::full;
    if (selective) note("recompute_config.select_recompute is moot under recompute True (models/utils.py L401-415)");
    return Status::ok();
  }
  bool any = false, all_full = !counts.empty();
  for (size_t i = 0; i < counts.size(); ++i)
    for (size_t j = 0; j < pp; ++j) any |= counts[i][j] > 0, all_full &= counts[i][j] >= layer_list[i][j];
  if (any && all_full) {
    r->kind = Recompute::full;
    return Status::ok();
  }
  if (any) {
    // llmplan's full_k recomputes the first k layers of every chunk: counts min(k, layers).
    const int k = counts[0][0] > 0 ? counts[0][0] : *std::max_element(counts[0].begin(), counts[0].end());
    bool exact = true;
    for (size_t i = 0; i < counts.size(); ++i)
      for (size_t j = 0; j < pp; ++j) exact &= counts[i][j] == std::min(k, layer_list[i][j]);
    const int cap = pp_stage_layers(m.layers, p, 0) / std::max(1, p.vpp);
    r->kind = Recompute::full_k;
    r->layers = std::max(1, std::min(k, cap));
    if (!exact || r->layers != k) {
      std::string shown;
      for (const std::vector<int>& row : counts) shown += "[" + mf::join_ints(row) + "]";
      note("recompute_config.recompute " + shown + " layers per chunk and stage: read as full_k " + std::to_string(r->layers) +
           " (llmplan recomputes the same k layers in every chunk)");
    }
    if (selective) note("recompute_config.select_recompute on the layers not recomputed whole is not modelled");
    return Status::ok();
  }
  if (selective) {
    r->kind = Recompute::selective;
    if (sel_partial) note("recompute_config.select_recompute set for some layers or operators: read as selective recompute of every layer");
  }
  return Status::ok();
}

Status Reader::read_parallel(const ModelSpec& m, const Launch& launch, ParallelPlan* p, int* devices) {
  const std::string pc = "parallel_config.", mc = kMc;
  Result<int64_t> mode = s_.integer("parallel.parallel_mode", 1, 0, 3);
  if (!mode) return mode.status();
  if (*mode != 1)
    return s_.fail("parallel.parallel_mode", s_.at("parallel.parallel_mode"),
                   "1 (semi-auto parallel, whose parallel_config sizes this reader reads; mindformers/tools/utils.py L38-46)");
  for (const char* k : {"full_batch", "gradients_mean", "search_mode", "enable_alltoall", "dataset_strategy"}) s_.touch(std::string("parallel.") + k);
  auto size = [&](const std::string& key, int64_t* out) -> Status {
    Result<int64_t> v = s_.integer(key, 1, 1, 4096);
    if (!v) return v.status();
    *out = *v;
    return Status::ok();
  };
  int64_t dp = 1, mp = 1, cp = 1, ep = 1, pp = 1, mbn = 1;
  for (auto [key, out] : {std::pair{"data_parallel", &dp}, {"model_parallel", &mp}, {"context_parallel", &cp}, {"expert_parallel", &ep},
                          {"pipeline_stage", &pp}})
    if (Status st = size(pc + key, out); !st) return st;
  Result<int64_t> mbn_r = s_.integer(pc + "micro_batch_num", 1, 1, 1 << 20);
  if (!mbn_r) return mbn_r.status();
  mbn = *mbn_r;
  Result<bool> use_parallel = s_.boolean("use_parallel", false);
  if (!use_parallel) return use_parallel.status();
  const int64_t world = dp * mp * cp * pp;
  if (!*use_parallel && world > 1)
    return s_.bad("use_parallel", "False (or absent: the template's default, TPL L240) while parallel_config asks for " + std::to_string(world) +
                                      " devices; set use_parallel: True");
  // CR L157-162: data_parallel * model_parallel * context_parallel * pipeline_stage == device_num.
  if (launch.found && launch.worker_num > 0 && launch.worker_num != world)
    return s_.bad(pc + "data_parallel",
                  "data_parallel * model_parallel * context_parallel * pipeline_stage = " + std::to_string(dp) + " * " + std::to_string(mp) +
                      " * " + std::to_string(cp) + " * " + std::to_string(pp) + " = " + std::to_string(world) + ", but " + launch.where +
                      " starts " + std::to_string(launch.worker_num) + " devices (check_rules.py L157-162)");
  if (mbn < pp && pp > 1)
    return s_.bad(pc + "micro_batch_num", "expected at least pipeline_stage (" + std::to_string(pp) + ") micro-batches when training, got " +
                                              std::to_string(mbn) + " (transformer.py L549)");
  if (m.layers < pp) return s_.bad(pc + "pipeline_stage", "more stages (" + std::to_string(pp) + ") than num_layers (" + std::to_string(m.layers) + ")");
  Result<bool> sp = s_.boolean(pc + "use_seq_parallel", false);
  if (!sp) return sp.status();
  for (const char* k : {"gradient_aggregation_group", "optimizer_shard", "mem_coeff", "ulysses_degree_in_cp"}) s_.touch(pc + k);
  Result<int64_t> seq_split = s_.integer(pc + "seq_split_num", 1, 1, 1 << 16);
  if (!seq_split) return seq_split.status();
  if (*seq_split > 1) note("parallel_config.seq_split_num " + std::to_string(*seq_split) + ": sequence pipelining (seqpipe) is not modelled");
  Result<bool> emb_dp = s_.boolean(pc + "vocab_emb_dp", true);
  if (!emb_dp) return emb_dp.status();
  if (*emb_dp && mp > 1 && pp == 1)
    note("parallel_config.vocab_emb_dp True: the embedding is replicated over model_parallel; llmplan counts it split (vocab-parallel)");

  ParallelPlan& q = *p;
  q.dp = static_cast<int>(dp), q.tp = static_cast<int>(mp), q.cp = static_cast<int>(cp), q.pp = static_cast<int>(pp);
  q.ep = static_cast<int>(ep);
  q.sp = *sp && mp > 1;
  if (*sp && mp == 1) note("parallel_config.use_seq_parallel True with model_parallel 1 splits nothing: read as no sequence parallel");
  if (ep > 1 && !m.moe.enabled()) return s_.bad(pc + "expert_parallel", "expected 1 for a dense model (moe_config.expert_num 1), got " + std::to_string(ep));

  // Interleaved pipeline: pp_interleave_num counts only with pipeline_interleave (MU L146-164).
  Result<bool> interleave = s_.boolean("parallel.pipeline_config.pipeline_interleave", false);
  if (!interleave) return interleave.status();
  Result<std::string> scheduler = s_.text("parallel.pipeline_config.pipeline_scheduler", "1f1b");
  if (!scheduler) return scheduler.status();
  if (*scheduler != "1f1b")
    return s_.fail("parallel.pipeline_config.pipeline_scheduler", s_.at("parallel.pipeline_config.pipeline_scheduler"),
                   "1f1b (the schedule llmplan models; seqpipe and seqvpp split sequences into pipeline chunks)");
  Result<int64_t> chunks = s_.integer(mc + "pp_interleave_num", 1, 1, 1024);
  if (!chunks) return chunks.status();
  q.vpp = *interleave && pp > 1 ? static_cast<int>(*chunks) : 1;
  if (*chunks > 1 && q.vpp == 1)
    note("model_config.pp_interleave_num " + std::to_string(*chunks) +
         " without parallel.pipeline_config.pipeline_interleave True (or with pipeline_stage 1): MindFormers uses 1 (models/utils.py L146-164)");
  q.schedule = q.vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  if (m.layers < q.pp * q.vpp)
    return s_.bad(mc + "pp_interleave_num", "pipeline_stage x pp_interleave_num = " + std::to_string(q.pp * q.vpp) + " chunks exceed num_layers " +
                                                std::to_string(m.layers));

  // Offsets (MU L165-170, L559-569).
  const int nv = q.pp * q.vpp, avg = m.layers / nv;
  const YAML::Node off = s_.at(mc + "offset");
  std::vector<int> per_stage(static_cast<size_t>(nv), avg);
  if (off.IsDefined() && !off.IsNull()) {
    auto as_int = [&](const YAML::Node& x, int* v) -> Status {
      int64_t i = 0;
      if (!x.IsScalar() || !YAML::convert<int64_t>::decode(x, i) || i < -100000 || i > 100000)
        return s_.fail(mc + "offset", x, "integer layer offsets");
      *v = static_cast<int>(i);
      return Status::ok();
    };
    std::vector<std::vector<int>> o(static_cast<size_t>(q.vpp), std::vector<int>(static_cast<size_t>(q.pp), 0));
    if (off.IsScalar()) {
      int v = 0;
      if (Status st = as_int(off, &v); !st) return st;
      for (auto& row : o) std::fill(row.begin(), row.end(), v);
    } else if (off.IsSequence()) {
      bool nested = false;
      for (const auto& x : off) nested |= x.IsSequence();
      if (!nested) {
        if (off.size() != static_cast<size_t>(q.pp))
          return s_.bad(mc + "offset", "expected pipeline_stage (" + std::to_string(q.pp) + ") entries, got " + std::to_string(off.size()) +
                                           " (models/utils.py L559-562)");
        for (size_t s = 0; s < off.size(); ++s) {
          int v = 0;
          if (Status st = as_int(off[s], &v); !st) return st;
          for (auto& row : o) row[s] = v;
        }
      } else {
        if (off.size() != static_cast<size_t>(q.vpp))
          return s_.bad(mc + "offset", "expected a row per interleave chunk (pp_interleave_num in effect: " + std::to_string(q.vpp) + "), got " +
                                           std::to_string(off.size()) + " rows (models/utils.py L563-565)");
        for (size_t c = 0; c < off.size(); ++c) {
          if (!off[c].IsSequence() || off[c].size() != static_cast<size_t>(q.pp))
            return s_.fail(mc + "offset", off[c], "a row of pipeline_stage (" + std::to_string(q.pp) + ") offsets");
          for (size_t s = 0; s < off[c].size(); ++s)
            if (Status st = as_int(off[c][s], &o[c][s]); !st) return st;
        }
      }
    } else {
      return s_.fail(mc + "offset", off, "an integer, a list per stage, or a list per interleave chunk");
    }
    int sum = 0;
    for (int c = 0; c < q.vpp; ++c)
      for (int s = 0; s < q.pp; ++s) {
        sum += o[static_cast<size_t>(c)][static_cast<size_t>(s)];
        per_stage[static_cast<size_t>(c * q.pp + s)] = avg + o[static_cast<size_t>(c)][static_cast<size_t>(s)];
      }
    const int rem = m.layers % nv;
    if (sum != rem)
      return s_.bad(mc + "offset", "the offsets sum to " + std::to_string(sum) + " but must equal num_layers % (pipeline_stage x pp_interleave_num) = " +
                                       std::to_string(m.layers) + " % " + std::to_string(nv) + " = " + std::to_string(rem) + " (models/utils.py L566-569)");
    for (int x : per_stage)
      if (x < 1) return s_.bad(mc + "offset", "leaves a stage without layers: layers per stage [" + mf::join_ints(per_stage) + "]");
  } else if (m.layers % nv != 0) {
    return s_.bad(mc + "num_layers", std::to_string(m.layers) + " layers do not split evenly over " + std::to_string(nv) +
                                         " stages and offset is absent (0): the offsets must sum to " + std::to_string(m.layers % nv) +
                                         " (models/utils.py L566-569)");
  }
  set_split_from_counts(m.layers, per_stage, {PipelineSplit::even, PipelineSplit::account_embedding_loss}, &q);

  // Context parallel: queries split by sequence; K/V all-gathered, or passed round a ring
  // with use_ring_attention (mindformers/modules/flash_attention.py L188-216).
  Result<bool> flash = s_.boolean(mc + "use_flash_attention", false);
  if (!flash) return flash.status();
  if (!s_.present(mc + "use_flash_attention")) note("use_flash_attention absent: LlamaConfig's default False (llama_config.py L169)");
  q.flash_attention = *flash;
  Result<bool> ring = s_.boolean(mc + "use_ring_attention", false);
  if (!ring) return ring.status();
  Result<std::string> algo = s_.text(pc + "context_parallel_algo", "colossalai_cp");
  if (!algo) return algo.status();
  if (cp > 1) {
    if (!*flash)
      return s_.bad(mc + "use_flash_attention", "context_parallel " + std::to_string(cp) + " needs use_flash_attention True (check_rules.py L179-182)");
    if (*algo != "colossalai_cp")
      return s_.fail(pc + "context_parallel_algo", s_.at(pc + "context_parallel_algo"),
                     "colossalai_cp (sequence-split attention; llmplan has no Ulysses all-to-all over heads)");
    q.cp_exchange = *ring ? CpExchange::ring : CpExchange::all_gather;
  }

  // Batch (BT L199-219): global = batch_size x dp x micro_batch_num x micro_batch_interleave_num
  // with a pipeline, batch_size x dp x micro_batch_interleave_num x gradient_accumulation_steps without.
  Result<int64_t> bs = s_.integer("runner_config.batch_size", 1, 1, 1 << 20);
  Result<int64_t> gas = s_.integer("runner_config.gradient_accumulation_steps", 1, 1, 1 << 20);
  Result<int64_t> mbi = s_.integer("micro_batch_interleave_num", 1, 1, 1024);
  for (const Result<int64_t>* r : {&bs, &gas, &mbi})
    if (!*r) return r->status();
  if (!s_.present("runner_config.batch_size")) note("runner_config.batch_size absent: the template's default 1 (template.py L390)");
  q.micro_batch = static_cast<int>(*bs * *mbi);
  if (*mbi > 1)
    note("micro_batch_interleave_num " + std::to_string(*mbi) + ": each micro-batch of " + std::to_string(q.micro_batch) +
         " sequences runs as interleaved halves to overlap model-parallel communication; llmplan models one micro-batch of " +
         std::to_string(q.micro_batch));
  if (pp > 1) {
    q.grad_accum = static_cast<int>(mbn);
    if (*gas > 1) note("runner_config.gradient_accumulation_steps " + std::to_string(*gas) + " has no effect with pipeline_stage > 1 (base_trainer.py L199-209)");
  } else {
    q.grad_accum = static_cast<int>(*gas);
    if (mbn > 1) note("parallel_config.micro_batch_num " + std::to_string(mbn) + " has no effect without a pipeline");
  }

  // Optimizer parallel: weights and optimizer states sharded over data_parallel; with
  // gradient_accumulation_shard the accumulated gradients too (ZeRO-2-like).
  Result<bool> op = s_.boolean("parallel.enable_parallel_optimizer", false);
  if (!op) return op.status();
  s_.touch("parallel.parallel_optimizer_config.parallel_optimizer_threshold");
  if (*op) {
    bool given = s_.present("parallel.parallel_optimizer_config.gradient_accumulation_shard");
    Result<bool> shard = s_.boolean("parallel.parallel_optimizer_config.gradient_accumulation_shard", true);
    if (!shard) return shard.status();
    if (!given)
      note("parallel.parallel_optimizer_config.gradient_accumulation_shard absent: MindSpore's documented default True "
           "(docs/api/api_python/mindspore/mindspore.set_auto_parallel_context.rst, parallel_optimizer_config), read as ZeRO-2");
    q.zero = *shard ? 2 : 1;
    Result<int64_t> shard_size = s_.integer("parallel.parallel_optimizer_config.optimizer_weight_shard_size", -1, -1, 1 << 16);
    if (!shard_size) return shard_size.status();
    if (*shard_size > 0 && *shard_size < dp)
      note("optimizer_weight_shard_size " + std::to_string(*shard_size) + ": states shard over groups of " + std::to_string(*shard_size) +
           "; llmplan shards over all " + std::to_string(dp) + " data-parallel ranks");
    Result<bool> comm = s_.boolean("recompute_config.parallel_optimizer_comm_recompute", false);
    if (!comm) return comm.status();
    if (*comm)
      note("recompute_config.parallel_optimizer_comm_recompute True: LlamaForCausalLM does not apply it in v1.5.0 (only GLM2 and T5 do)");
  } else {
    q.zero = 0;
    s_.touch_subtree("parallel.parallel_optimizer_config");
  }

  std::vector<std::vector<int>> layer_list(static_cast<size_t>(q.vpp), std::vector<int>(static_cast<size_t>(q.pp)));
  const std::vector<int> split = virtual_stage_counts(m.layers, q);
  for (int c = 0; c < q.vpp; ++c)
    for (int s = 0; s < q.pp; ++s) layer_list[static_cast<size_t>(c)][static_cast<size_t>(s)] = split[static_cast<size_t>(c * q.pp + s)];
  RecomputeRead rr;
  if (Status st = read_recompute(m, q, layer_list, &rr); !st) return st;
  q.recompute = rr.kind;
  q.recompute_layers = rr.kind == Recompute::full_k ? rr.layers : 0;
  if (Status st = read_swap(m, q, &q.activation_offload_layers); !st) return st;
  *devices = static_cast<int>(world);
  return Status::ok();
}

// The first preset whose shape `m` has (its name and source), if any.
void name_from_presets(const PresetRegistry& reg, ModelSpec* m) {
  const std::vector<std::string> ids = presets_with_shape(reg, shape_of(*m));
  if (ids.empty()) return;
  Result<ModelSpec> a = reg.model(ids.front());
  if (!a) return;
  m->name = a->name;
  m->source = a->source;
}

// A mismatch between the config's model and --model in a field LlamaConfig states, naming the
// field and the key that states it.
Status compare_model(const ModelSpec& given, const ModelSpec& read, const std::string& where, const std::string& what) {
  ModelShape stated;  // what a LlamaConfig states; the rest (family, biases, ...) is --model's
  stated.layers = read.layers;
  stated.hidden = read.hidden;
  stated.heads = read.heads;
  stated.kv_heads = read.kv_heads;
  stated.head_width = read.head_width();
  stated.ffn_hidden = read.ffn_hidden;
  stated.vocab = read.vocab;
  stated.experts = read.moe.enabled() ? read.moe.experts : 0;
  if (std::optional<ShapeMismatch> d = shape_mismatch(stated, given)) {
    constexpr std::pair<const char*, const char*> kKeys[] = {
        {"layers", "model.model_config.num_layers"}, {"hidden", "model.model_config.hidden_size"},
        {"heads", "model.model_config.num_heads"},   {"kv_heads", "model.model_config.n_kv_heads"},
        {"head_dim", "hidden_size / num_heads"},     {"ffn_hidden", "model.model_config.intermediate_size"},
        {"vocab", "model.model_config.vocab_size"},  {"moe.experts", "moe_config.expert_num"}};
    std::string key = d->field;
    for (const auto& [field, k] : kKeys)
      if (d->field == field) key = k;
    return Status::bad_input(what + ": field '" + d->field + "' is " + d->model + " but " + where + " has " + key + " " + d->stated);
  }
  if (given.qk_norm) return Status::bad_input(what + ": field 'qk_norm' is true, which LlamaConfig v1.5.0 cannot describe (" + where + ")");
  return Status::ok();
}

Status Reader::run(const Launch& launch, const std::string& origin) {
  ModelSpec m;
  int64_t seq_len = 0;
  if (Status st = read_model(&m, &seq_len); !st) return st;
  TrainingJob j;
  if (Status st = read_job(launch, &j); !st) return st;
  ParallelPlan p;
  int devices = 1;
  if (Status st = read_parallel(m, launch, &p, &devices); !st) return st;
  j.seq_len = seq_len;
  j.global_batch = static_cast<int64_t>(p.micro_batch) * p.dp * p.grad_accum;

  const PresetRegistry& reg = *opt_.presets;
  if (!opt_.model.empty()) {
    Result<ModelSpec> given = reg.resolve_model(opt_.model, "--model");
    if (!given) return given.status();
    if (Status st = compare_model(*given, m, s_.where(), "--model " + opt_.model); !st) return st;
    const ModelSpec read = m;
    m = *given;
    m.tied_embeddings = read.tied_embeddings;
    m.attention_bias = read.attention_bias;
    if (read.moe.enabled()) m.moe.capacity_factor = read.moe.capacity_factor;
  } else {
    name_from_presets(reg, &m);
    if (m.name.empty()) {
      Result<std::string> label = s_.text("trainer.model_name", "");
      m.name = label && !label->empty() ? *label : "mindformers-llama";
      m.source = origin + " (MindFormers LlamaConfig)";
    }
  }

  const std::string gpu = opt_.gpu.empty() ? "ascend-910b" : opt_.gpu;
  if (opt_.gpu.empty()) note("GPU: ascend-910b (MindFormers runs on Ascend NPUs; --gpu names another)");
  Result<ClusterSpec> cluster = reg.cluster_for_gpu(gpu);
  if (!cluster) return cluster.status();
  ClusterSpec c = *cluster;
  if (opt_.gpus_per_node > 0) c.gpus_per_node = opt_.gpus_per_node;
  else if (launch.found && launch.local_worker > 0) c.gpus_per_node = launch.local_worker;
  out_->file.model = m;
  out_->file.cluster = cluster_with_gpus(c, devices);
  out_->file.gpus = devices;
  out_->file.job = j;
  out_->file.plan = p;
  if (Status st = check_inputs(m, j, s_.where()); !st) return st;
  if (Status st = check_plan_status(m, out_->file.cluster, j, p, devices, s_.where()); !st) return st;
  out_->unknown_keys = s_.unused();
  return Status::ok();
}

}  // namespace

Result<ImportedConfig> import_mindformers(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin) {
  const LaunchFile* yaml = nullptr;
  const LaunchFile* script = nullptr;
  for (const LaunchFile& f : files) {
    if (f.name.ends_with(".yaml") || f.name.ends_with(".yml")) {
      if (yaml != nullptr)
        return Status::bad_input(origin + ": two MindFormers YAMLs (" + yaml->name + ", " + f.name + "): import one file at a time");
      yaml = &f;
    } else if (f.text.find("msrun_launcher.sh") != std::string::npos || f.text.find("msrun ") != std::string::npos) {
      script = &f;
    }
  }
  if (yaml == nullptr) return Status::bad_input(origin + ": no MindFormers YAML (*.yaml, *.yml) to read");
  auto named = [&](const LaunchFile& f) { return file_origin(origin, f.name); };
  const std::string where = named(*yaml);
  YAML::Node root;
  try {
    root = YAML::Load(yaml->text);
  } catch (const YAML::Exception& e) {
    return Status::bad_input(where + ": line " + std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1) +
                             ": not valid YAML (" + e.msg + ")");
  }
  if (!root.IsMap()) return Status::bad_input(where + ": expected a MindFormers config (a YAML mapping of sections), got " +
                                              (root.IsNull() ? std::string("an empty document") : std::string("another kind of document")));
  Launch launch;
  if (script != nullptr) {
    Result<Launch> l = read_launch(*script, named(*script));
    if (!l) return l.status();
    launch = *l;
  }
  ImportedConfig out;
  try {
    Source src(where, root);
    Reader reader(src, opt, &out);
    if (Status st = reader.run(launch, origin); !st) return st;
  } catch (const YAML::Exception& e) {
    return Status::bad_input(where + ": line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  out.format = LaunchFormat::mindformers;
  return out;
}

}  // namespace llmplan::launch_formats
