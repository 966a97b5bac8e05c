// Reader for the reference-runs format (data/reference/README.md "Schema"). Every key is
// required to be present; null is allowed where the README allows it. Errors name the
// file and the field path ("records[12].plan.micro_batch").
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "planner/spec/json_fields.h"
#include "planner/io/presets.h"
#include "planner/spec/spec_json.h"
#include "planner/validate/validate.h"

namespace llmplan {

using nlohmann::json;

namespace {

constexpr const char* kSchema = "llmplan-reference-runs/1";

// FieldReader plus "present but maybe null" keys and enum names kept as strings.
class RecordReader {
 public:
  RecordReader(const json& obj, std::string origin, std::string prefix)
      : obj_(obj), origin_(origin), prefix_(prefix), r_(obj, std::move(origin), std::move(prefix)) {}

  template <class T, class... Range>
  void req(const char* key, T* out, Range... range) {
    if (present(key)) r_.get(key, out, range...);
  }
  template <class T, class... Range>
  void opt(const char* key, std::optional<T>* out, Range... range) {
    if (!present(key)) return;
    if (obj_.at(key).is_null()) {
      r_.allow(key);
      return;
    }
    T v{};
    r_.get(key, &v, range...);
    if (r_.status().is_ok()) *out = v;
  }
  bool child_is_null(const char* key) {
    if (!obj_.at(key).is_null()) return false;
    r_.allow(key);
    return true;
  }
  void fail(const char* key, const std::string& what) { r_.fail(key, what); }
  void req_enum(const char* key, std::string* out, std::initializer_list<const char*> names) {
    req(key, out);
    if (r_.status().is_ok()) check_name(key, *out, names);
  }
  void opt_enum(const char* key, std::optional<std::string>* out, std::initializer_list<const char*> names) {
    opt(key, out);
    if (r_.status().is_ok() && out->has_value()) check_name(key, **out, names);
  }
  // A key that older files of the schema do not have: absent is fine (out untouched).
  bool has(const char* key) const { return obj_.is_object() && obj_.contains(key); }
  // A nested object; a missing key or a non-object is an error recorded here.
  RecordReader child(const char* key) {
    static const json kEmpty = json::object();
    if (!present(key)) return RecordReader(kEmpty, origin_, r_.field_name(key));
    r_.allow(key);
    if (!obj_.at(key).is_object()) r_.fail(key, "expected a JSON object, got " + json_value_text(obj_.at(key)));
    return RecordReader(obj_.at(key).is_object() ? obj_.at(key) : kEmpty, origin_, r_.field_name(key));
  }
  // An optional key's raw value (absent: nullptr), marked as read.
  const json* raw(const char* key) {
    if (!has(key)) return nullptr;
    r_.allow(key);
    return &obj_.at(key);
  }
  Status finish() const { return r_.finish(/*reject_unknown=*/true); }
  bool ok() const { return r_.status().is_ok(); }

 private:
  bool present(const char* key) {
    if (obj_.is_object() && obj_.contains(key)) return true;
    r_.fail(key, "missing (every key of the schema must be present, null when unknown)");
    return false;
  }
  void check_name(const char* key, const std::string& v, std::initializer_list<const char*> names) {
    std::string list;
    for (const char* n : names) {
      if (v == n) return;
      list += (list.empty() ? "" : ", ") + std::string(n);
    }
    r_.fail(key, "expected one of " + list + ", got \"" + v + "\"");
  }
  const json& obj_;
  std::string origin_, prefix_;
  FieldReader r_;
};

constexpr int64_t kBig = int64_t{1} << 40;
constexpr int kMaxGpus = 10000000;  // cluster.n_gpus, and the product of the plan's given degrees

Status read_model(RecordReader r, RefModel* m) {
  r.req("name", &m->name);
  r.req_enum("family", &m->family, {"gpt", "llama", "mpt", "bloom", "bert", "t5", "other"});
  r.opt("params", &m->params, 1.0, 1e16);
  r.opt("layers", &m->layers, 1, 100000);
  r.opt("hidden", &m->hidden, 1, 10000000);
  r.opt("heads", &m->heads, 1, 100000);
  r.opt("kv_heads", &m->kv_heads, 1, 100000);
  // Per-head width when it is not hidden/heads (Qwen3: 128 at hidden 2048, 32 heads);
  // absent in older files = null = hidden/heads.
  if (r.has("head_dim")) r.opt("head_dim", &m->head_dim, 1, 100000);
  r.opt("ffn_hidden", &m->ffn_hidden, 1, 100000000);
  r.opt("vocab", &m->vocab, 1, 100000000);
  r.opt("seq_len", &m->seq_len, 1, int64_t{1} << 30);
  r.opt_enum("activation", &m->activation, {"gelu", "swiglu", "relu"});
  r.opt_enum("norm", &m->norm, {"layernorm", "rmsnorm"});
  r.opt("tied_embeddings", &m->tied_embeddings);
  // Mixture-of-experts records (the 2024-26 file's '_moe' groups) add model.moe; dense
  // records leave it out or null.
  if (r.has("moe") && !r.child_is_null("moe")) {
    RecordReader mr = r.child("moe");
    RefMoe moe;
    mr.req("experts", &moe.experts, 1, 100000);
    mr.req("experts_per_token", &moe.experts_per_token, 1, 100000);
    mr.req("expert_ffn_hidden", &moe.expert_ffn_hidden, 1, 100000000);
    mr.req("shared_experts", &moe.shared_experts, 0, 100000);
    if (Status s = mr.finish(); !s) return s;
    if (moe.experts_per_token > moe.experts) {
      mr.fail("experts_per_token", "expected at most model.moe.experts (" + std::to_string(moe.experts) + "), got " +
                                       std::to_string(moe.experts_per_token));
      return mr.finish();
    }
    m->moe = moe;
  }
  return r.finish();
}

Status read_cluster(RecordReader r, RefCluster* c) {
  // Any GPU id: one without a preset is a skipped row naming it, and the rest of the file
  // still runs (validate_records).
  r.req("gpu", &c->gpu);
  if (r.ok() && c->gpu.empty()) r.fail("gpu", "expected a GPU preset id or \"other\", got \"\"");
  r.opt("gpu_description", &c->gpu_description);
  r.opt("peak_tflops", &c->peak_tflops, 1e-3, 1e6);
  r.opt("n_gpus", &c->n_gpus, 1, kMaxGpus);
  r.opt("gpus_per_node", &c->gpus_per_node, 1, 4096);
  return r.finish();
}

Status read_job(RecordReader r, RefJob* j) {
  r.opt_enum("precision", &j->precision, {"fp32", "fp16", "bf16", "fp8", "fp4"});
  r.opt("global_batch", &j->global_batch, 1, kBig);
  r.req_enum("mode", &j->mode, {"pretrain", "finetune", "lora"});
  if (r.has("main_grads")) r.opt_enum("main_grads", &j->main_grads, {"bf16", "fp32"});
  if (r.has("fp8_recipe")) r.opt_enum("fp8_recipe", &j->fp8_recipe, {"tensorwise", "delayed", "blockwise", "mxfp8"});
  if (r.has("optimizer_moments")) r.opt_enum("optimizer_moments", &j->optimizer_moments, {"fp32", "bf16"});
  if (r.has("fp4_recipe")) r.opt_enum("fp4_recipe", &j->fp4_recipe, {"nvfp4"});
  if (r.has("doc_len")) r.opt("doc_len", &j->doc_len, 1, kBig);
  return r.finish();
}

Status read_plan(RecordReader r, RefPlan* p) {
  for (auto [key, out] : {std::pair{"dp", &p->dp}, {"tp", &p->tp}, {"pp", &p->pp}, {"cp", &p->cp}, {"vpp", &p->vpp}})
    r.opt(key, out, 1, 10000000);
  r.req("ep", &p->ep, 1, 10000000);
  r.opt("sp", &p->sp);
  r.opt("micro_batch", &p->micro_batch, 1, 10000000);
  r.opt_enum("recompute", &p->recompute, {"none", "selective", "full"});
  r.opt("zero", &p->zero, 0, 3);
  r.opt("offload", &p->offload);
  // Layers whose activations go to host memory (2024-26 schema; absent in older files = 0).
  if (r.has("activation_offload_layers")) r.opt("activation_offload_layers", &p->activation_offload_layers, 0, 100000);
  else p->activation_offload_layers = 0;
  // An explicit pipeline layout (2024-26 schema, optional): one layer count per virtual stage.
  if (const json* raw = r.raw("stage_layers"); raw && !raw->is_null() && (raw->empty() || !layer_counts_from_json(*raw, &p->stage_layers)))
    r.fail("stage_layers", "expected a non-empty list of layer counts (integers in [1, 10000]), one per virtual stage, got " +
                               json_value_text(*raw));
  return r.finish();
}

Status read_measured(RecordReader r, RefMeasured* m) {
  r.opt("tflops_per_gpu", &m->tflops_per_gpu, 0.0, 1e6);
  r.opt_enum("flops_convention", &m->flops_convention, {"model", "hardware"});
  r.opt_enum("flops_formula", &m->flops_formula, {"megatron_eq3", "megatron_core", "megatron_bridge", "llm_foundry", "chowdhery_mfu"});
  r.opt("mfu", &m->mfu, 0.0, 1.0);
  r.opt("hfu", &m->hfu, 0.0, 1.0);
  r.opt("tokens_per_s_per_gpu", &m->tokens_per_s_per_gpu, 0.0, 1e12);
  r.opt("step_time_s", &m->step_time_s, 0.0, 1e9);
  r.opt("memory_gib_per_gpu", &m->memory_gib_per_gpu, 0.0, 1e6);
  r.opt("memory_includes_context", &m->memory_includes_context);
  r.opt_enum("memory_scope", &m->memory_scope, {"allocator_peak", "nvml_used", "model_states", "activations"});
  r.opt("oom", &m->oom);
  return r.finish();
}

Status read_record(const json& obj, const std::string& origin, const std::string& prefix, ReferenceRecord* rec) {
  RecordReader r(obj, origin, prefix);
  r.req("id", &rec->id);
  r.req("group", &rec->group);
  r.req("source", &rec->source);
  r.req("quote", &rec->quote);
  r.req_enum("confidence", &rec->confidence, {"high", "medium", "low"});
  r.req("notes", &rec->notes);
  r.req_enum("kind", &rec->kind, {"throughput", "memory", "throughput+memory", "memory_analytic"});
  r.req_enum("framework", &rec->framework,
             {"megatron", "megatron-core", "megatron-bridge", "deepspeed", "torchtitan", "llm-foundry", "llm.c", "picotron", "metaseq", "hf", "peft", "other"});
  // Children are read in order; the first error wins.
  if (Status s = read_model(r.child("model"), &rec->model); !s) return s;
  if (Status s = read_cluster(r.child("cluster"), &rec->cluster); !s) return s;
  if (Status s = read_job(r.child("job"), &rec->job); !s) return s;
  if (Status s = read_plan(r.child("plan"), &rec->plan); !s) return s;
  if (Status s = read_measured(r.child("measured"), &rec->measured); !s) return s;
  return r.finish();
}

}  // namespace

Result<ReferenceSet> parse_reference_runs(const json& doc, const std::string& origin) {
  ReferenceSet set;
  set.origin = origin;
  FieldReader top(doc, origin, "");
  std::string schema;
  top.get("schema", &schema);
  if (top.status().is_ok() && schema != kSchema)
    top.fail("schema", std::string("expected \"") + kSchema + "\", got \"" + schema + "\"");
  top.get("description", &set.description);
  top.get("evaluation_only", &set.evaluation_only, false);
  const json* records = top.raw("records");
  if (top.status().is_ok() && (!records || !records->is_array())) top.fail("records", "expected an array of records");
  if (Status s = top.finish(); !s) return s;
  std::map<std::string, size_t> seen;  // id -> index
  for (size_t i = 0; i < records->size(); ++i) {
    ReferenceRecord rec;
    const std::string at = "records[" + std::to_string(i) + "]";
    if (Status s = read_record((*records)[i], origin, at, &rec); !s) return s;
    rec.evaluation_only = set.evaluation_only;
    if (auto [it, fresh] = seen.emplace(rec.id, i); !fresh)
      return Status::bad_input(origin + ": field '" + at + ".id': '" + rec.id + "' is also records[" + std::to_string(it->second) +
                               "]'s (expected ids unique in a file)");
    // The given degrees must fit in the cluster's GPUs (kMaxGpus when n_gpus is null), and
    // when all are given use exactly them, as world = dp*tp*pp*cp (EP lives inside dp*cp).
    // Each degree may be up to kMaxGpus, so the product is taken one factor at a time and
    // stops past the limit (four of them overflow 64 bits); the later int arithmetic on
    // the plan (world_size, n_gpus / known) then stays within kMaxGpus.
    const RefPlan& p = rec.plan;
    const int64_t limit = rec.cluster.n_gpus.value_or(kMaxGpus);
    int64_t given = 1;
    std::string names, factors;  // "dp*tp*cp", "8*2*1": the given ones
    for (auto [name, d] : {std::pair{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}, {"cp", p.cp}}) {
      if (!d) continue;
      // Appended piece by piece: `"*" + std::string(...)` here trips GCC 12's false
      // -Werror=restrict at -O3 (the Release leg of scripts/ci-matrix).
      if (!names.empty()) names += '*', factors += '*';
      names += name;
      factors += std::to_string(*d);
      if (given <= limit) given *= *d;  // <= 1e7 * 1e7: no overflow
    }
    if (rec.cluster.n_gpus && p.dp && p.tp && p.pp && p.cp && given != *rec.cluster.n_gpus)
      return Status::bad_input(origin + ": " + at + " '" + rec.id + "': plan " + names + " = " + factors + " = " +
                               (given > limit ? "more than " + std::to_string(limit) : std::to_string(given)) +
                               " GPUs but cluster.n_gpus is " + std::to_string(*rec.cluster.n_gpus) + " (expected equal)");
    if (given > limit)
      return Status::bad_input(origin + ": " + at + " '" + rec.id + "': plan " + names + " = " + factors + " uses more than " +
                               (rec.cluster.n_gpus ? "cluster.n_gpus = " : "the most GPUs a record may have, ") +
                               std::to_string(limit) + " (expected a product of at most that)");
    set.records.push_back(std::move(rec));
  }
  return set;
}

Result<ReferenceSet> load_reference_runs(const std::string& path) {
  Result<json> doc = read_json_file(path);
  if (!doc) return doc.status();
  return parse_reference_runs(*doc, path);
}

std::string default_reference_path() { return default_data_root() + "/data/reference/published_runs.json"; }

std::vector<std::string> default_reference_paths() {
  return {default_reference_path(), default_data_root() + "/data/reference/published_runs_2024_2026.json",
          default_data_root() + "/data/reference/published_runs_mbridge_2602_moe.json",
          default_data_root() + "/data/reference/published_runs_mbridge_2511_2602_dense.json"};
}

Result<ReferenceSet> load_reference_files(const std::vector<std::string>& paths) {
  ReferenceSet all;
  std::map<std::string, std::string> id_file, group_file;
  for (const std::string& path : paths) {
    Result<ReferenceSet> one = load_reference_runs(path);
    if (!one) return one.status();
    all.origin += (all.origin.empty() ? "" : " + ") + path;
    all.description += (all.description.empty() ? "" : "\n") + one->description;
    for (ReferenceRecord& r : one->records) {
      if (auto [it, fresh] = id_file.emplace(r.id, path); !fresh)
        return Status::bad_input(path + ": record id '" + r.id + "' is also in " + it->second);
      if (auto [it, fresh] = group_file.emplace(r.group, path); !fresh && it->second != path)
        return Status::bad_input(path + ": group '" + r.group + "' is also in " + it->second + " (groups are per file)");
      all.records.push_back(std::move(r));
    }
  }
  return all;
}

}  // namespace llmplan
