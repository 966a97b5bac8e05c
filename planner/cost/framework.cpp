#include "planner/cost/framework.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "planner/cost/plan_check.h"
#include "planner/spec/json_fields.h"

namespace llmplan {

namespace {

using json = nlohmann::json;

// An enum field's value from its name.
template <class E>
bool enum_value(const std::string& s, int64_t* out) {
  E e{};
  if (!parse_enum(s, &e)) return false;
  *out = static_cast<int64_t>(e);
  return true;
}

enum class ValueKind { number, boolean, enumeration };

struct FieldDef {
  FrameworkFieldInfo info;
  ValueKind kind;
  bool (*parse)(const std::string&, int64_t*);  // enumerations only
};

const std::vector<FieldDef>& field_defs() {
  static const std::vector<FieldDef> defs = {
      {{"dp", ""}, ValueKind::number, nullptr},
      {{"tp", ""}, ValueKind::number, nullptr},
      {{"pp", ""}, ValueKind::number, nullptr},
      {{"vpp", ""}, ValueKind::number, nullptr},
      {{"cp", ""}, ValueKind::number, nullptr},
      {{"ep", ""}, ValueKind::number, nullptr},
      {{"sp", ""}, ValueKind::boolean, nullptr},
      {{"micro_batch", ""}, ValueKind::number, nullptr},
      {{"grad_accum", ""}, ValueKind::number, nullptr},
      {{"zero", ""}, ValueKind::number, nullptr},
      {{"recompute", kRecomputeNames}, ValueKind::enumeration, enum_value<Recompute>},
      {{"recompute_layers", ""}, ValueKind::number, nullptr},
      {{"offload_optimizer", ""}, ValueKind::boolean, nullptr},
      {{"offload_params", ""}, ValueKind::boolean, nullptr},
      {{"activation_offload_layers", ""}, ValueKind::number, nullptr},
      {{"activation_kept_layers", ""}, ValueKind::number, nullptr},
      {{"flash_attention", ""}, ValueKind::boolean, nullptr},
      {{"schedule", kScheduleNames}, ValueKind::enumeration, enum_value<Schedule>},
      {{"cp_exchange", kCpExchangeNames}, ValueKind::enumeration, enum_value<CpExchange>},
      {{"pipeline_split", kPipelineSplitNames}, ValueKind::enumeration, enum_value<PipelineSplit>},
      {{"mode", kJobModeNames}, ValueKind::enumeration, enum_value<JobMode>},
      {{"frozen_layers", ""}, ValueKind::number, nullptr},
      {{"precision", kPrecisionNames}, ValueKind::enumeration, enum_value<Precision>},
      {{"fp8", kFp8RecipeNames}, ValueKind::enumeration, enum_value<Fp8Recipe>},
      {{"optimizer", kOptimizerNames}, ValueKind::enumeration, enum_value<Optimizer>},
      {{"moments", kMomentsDtypeNames}, ValueKind::enumeration, enum_value<MomentsDtype>},
      {{"family", kFamilyNames}, ValueKind::enumeration, enum_value<Family>},
      {{"experts", ""}, ValueKind::number, nullptr},
      {{"qk_norm", ""}, ValueKind::boolean, nullptr},
      {{"attention_bias", kAttentionBiasNames}, ValueKind::enumeration, enum_value<AttentionBias>},
  };
  return defs;
}

std::string field_names() {
  std::string out;
  for (const FieldDef& d : field_defs()) out += (out.empty() ? "" : ", ") + std::string(d.info.name);
  return out;
}

// One value of a condition ("min", "max" or an element of "in") as the field's integer.
bool condition_value(const FieldDef& d, const json& v, int64_t* out) {
  switch (d.kind) {
    case ValueKind::number:
      if (!v.is_number_integer()) return false;
      *out = v.get<int64_t>();
      return true;
    case ValueKind::boolean:
      if (!v.is_boolean()) return false;
      *out = v.get<bool>() ? 1 : 0;
      return true;
    case ValueKind::enumeration:
      return v.is_string() && d.parse(v.get<std::string>(), out);
  }
  return false;
}

std::string expected_value(const FieldDef& d) {
  switch (d.kind) {
    case ValueKind::number: return "an integer";
    case ValueKind::boolean: return "true or false";
    case ValueKind::enumeration: return std::string("one of ") + d.info.values;
  }
  return "";
}

Status read_condition(const std::string& key, const json& v, const std::string& field, FrameworkCondition* c) {
  const std::vector<FieldDef>& defs = field_defs();
  auto it = std::find_if(defs.begin(), defs.end(), [&](const FieldDef& d) { return key == d.info.name; });
  if (it == defs.end()) return Status::bad_input("field '" + field + "': unknown plan field (expected one of " + field_names() + ")");
  const FieldDef& d = *it;
  c->field = static_cast<FrameworkField>(it - defs.begin());
  const std::string expected = expected_value(d);
  if (!v.is_object()) {
    int64_t x = 0;
    if (!condition_value(d, v, &x))
      return Status::bad_input("field '" + field + "': expected " + expected + ", or {\"min\", \"max\"} or {\"in\": [...]}, got " + json_value_text(v));
    c->in = {x};
    return Status::ok();
  }
  for (const auto& [k, x] : v.items()) {
    if (k == "min" || k == "max") {
      int64_t n = 0;
      if (d.kind == ValueKind::enumeration || !condition_value(d, x, &n))
        return Status::bad_input("field '" + field + "." + k + "': expected " + (d.kind == ValueKind::enumeration ? std::string("no bound on an enumeration (use \"in\")") : expected) +
                                 ", got " + json_value_text(x));
      (k == "min" ? c->min : c->max) = n;
    } else if (k == "in") {
      if (!x.is_array() || x.empty()) return Status::bad_input("field '" + field + ".in': expected a non-empty list of " + expected + ", got " + json_value_text(x));
      for (const json& e : x) {
        int64_t n = 0;
        if (!condition_value(d, e, &n)) return Status::bad_input("field '" + field + ".in': expected " + expected + ", got " + json_value_text(e));
        c->in.push_back(n);
      }
    } else {
      return Status::bad_input("field '" + field + "." + k + "': unknown key (expected min, max or in)");
    }
  }
  if (c->min > c->max) return Status::bad_input("field '" + field + "': min above max (no plan would meet it)");
  return Status::ok();
}

// Each framework's letter: the first letter of its name not taken by an earlier one.
std::string letters_of(const std::vector<FrameworkSpec>& frameworks) {
  std::string used;
  for (const FrameworkSpec& fw : frameworks) {
    char letter = '?';
    for (char ch : fw.name) {
      const char up = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (std::isalpha(static_cast<unsigned char>(ch)) && used.find(up) == std::string::npos) {
        letter = up;
        break;
      }
    }
    used += letter;
  }
  return used;
}

bool meets(const FrameworkCondition& c, int64_t v) {
  if (v < c.min || v > c.max) return false;
  return c.in.empty() || std::find(c.in.begin(), c.in.end(), v) != c.in.end();
}

}  // namespace

const std::vector<FrameworkFieldInfo>& framework_fields() {
  static const std::vector<FrameworkFieldInfo> infos = [] {
    std::vector<FrameworkFieldInfo> out;
    for (const FieldDef& d : field_defs()) out.push_back(d.info);
    return out;
  }();
  return infos;
}

int64_t framework_field_value(FrameworkField f, const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p) {
  switch (f) {
    case FrameworkField::dp: return p.dp;
    case FrameworkField::tp: return p.tp;
    case FrameworkField::pp: return p.pp;
    case FrameworkField::vpp: return p.vpp;
    case FrameworkField::cp: return p.cp;
    case FrameworkField::ep: return p.ep;
    case FrameworkField::sp: return p.sp ? 1 : 0;
    case FrameworkField::micro_batch: return p.micro_batch;
    case FrameworkField::grad_accum: return p.grad_accum;
    case FrameworkField::zero: return p.zero;
    case FrameworkField::recompute: return static_cast<int64_t>(p.recompute);
    case FrameworkField::recompute_layers: return p.recompute_layers;
    case FrameworkField::offload_optimizer: return p.offload_optimizer ? 1 : 0;
    case FrameworkField::offload_params: return p.offload_params ? 1 : 0;
    case FrameworkField::activation_offload_layers: return p.activation_offload_layers;
    case FrameworkField::activation_kept_layers: {
      // The layers of the largest pipeline stage whose activations stay on the GPU (0 when
      // activation offload covers every layer of every stage).
      int most = 0;
      for (int s = 0; s < p.pp; ++s) most = std::max(most, pp_stage_layers(m.layers, p, s));
      return std::max(0, most - p.activation_offload_layers);
    }
    case FrameworkField::flash_attention: return p.flash_attention ? 1 : 0;
    case FrameworkField::schedule: return static_cast<int64_t>(p.schedule);
    case FrameworkField::cp_exchange: return static_cast<int64_t>(p.cp_exchange);
    case FrameworkField::pipeline_split: return static_cast<int64_t>(p.pipeline_split);
    case FrameworkField::mode: return static_cast<int64_t>(job_mode(j));
    case FrameworkField::frozen_layers: return j.frozen_layer_count(m.layers);
    case FrameworkField::precision: return static_cast<int64_t>(j.precision);
    case FrameworkField::fp8: return static_cast<int64_t>(j.fp8);
    case FrameworkField::optimizer: return static_cast<int64_t>(j.optimizer);
    case FrameworkField::moments: return static_cast<int64_t>(j.moments);
    case FrameworkField::family: return static_cast<int64_t>(m.family);
    case FrameworkField::experts: return m.moe.experts;
    case FrameworkField::qk_norm: return m.qk_norm ? 1 : 0;
    case FrameworkField::attention_bias: return static_cast<int64_t>(m.attention_bias);
    case FrameworkField::kCount: break;
  }
  return 0;
}

int framework_refusal(const FrameworkSpec& fw, const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p) {
  for (size_t r = 0; r < fw.rules.size(); ++r) {
    const FrameworkRule& rule = fw.rules[r];
    bool all = true;
    for (const FrameworkCondition& c : rule.when)
      if (!meets(c, framework_field_value(c.field, m, j, p))) {
        all = false;
        break;
      }
    if (all) return static_cast<int>(r);
  }
  return -1;
}

std::string framework_refusal_text(const FrameworkSpec& fw, const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p) {
  const int r = framework_refusal(fw, m, j, p);
  if (r < 0) return "";
  const FrameworkRule& rule = fw.rules[static_cast<size_t>(r)];
  return fw.name + " refuses this plan: " + rule.why + " (rule " + rule.id + "; " + rule.source + ")";
}

uint32_t frameworks_running(const std::vector<FrameworkSpec>& frameworks, const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p) {
  uint32_t mask = 0;
  for (size_t i = 0; i < frameworks.size() && i < 32; ++i)
    if (framework_refusal(frameworks[i], m, j, p) < 0) mask |= 1u << i;
  return mask;
}

std::string framework_letters(uint32_t mask, const std::vector<FrameworkSpec>& frameworks) {
  const std::string letters = letters_of(frameworks);
  std::string out;
  for (size_t i = 0; i < letters.size() && i < 32; ++i) out += (mask >> i & 1u) ? letters[i] : '-';
  return out;
}

std::string framework_legend(const std::vector<FrameworkSpec>& frameworks) {
  const std::string letters = letters_of(frameworks);
  std::string out;
  for (size_t i = 0; i < letters.size(); ++i) {
    // Appended piece by piece: GCC 12's -Wrestrict misfires on `"..." + std::string&&` at -O3.
    if (!out.empty()) out += ' ';
    out += letters[i];
    out += '=';
    out += frameworks[i].name;
  }
  return out;
}

std::string framework_extends(const json& j) {
  if (j.is_object() && j.contains("extends") && j.at("extends").is_string()) return j.at("extends").get<std::string>();
  return "";
}

Result<FrameworkSpec> framework_from_json(const json& j, const std::string& origin, const FrameworkSpec* base) {
  if (!j.is_object()) return Status::bad_input(origin + ": expected a JSON object (a framework file)");
  FieldReader r(j, origin, "");
  FrameworkSpec fw;
  r.get("name", &fw.name);
  r.get("description", &fw.description);
  r.get("version", &fw.version);
  r.get("source", &fw.source);
  r.get("stack", &fw.stack, false);
  std::string extends;
  r.get("extends", &extends, false);
  auto strings = [&](const char* key, std::vector<std::string>* out) {
    const json* v = r.raw(key);
    if (v == nullptr || !r.status()) return;
    if (!v->is_array()) return r.fail(key, "expected a list of strings, got " + json_value_text(*v));
    for (const json& e : *v) {
      if (!e.is_string() || e.get<std::string>().empty()) return r.fail(key, "expected a list of non-empty strings, got " + json_value_text(e));
      out->push_back(e.get<std::string>());
    }
  };
  strings("aliases", &fw.aliases);
  strings("exports", &fw.exports);
  std::vector<std::string> lifts;
  strings("lifts", &lifts);
  if (!r.status()) return r.status();
  if (!extends.empty()) {
    if (base == nullptr || base->name != extends)
      return Status::bad_input(origin + ": field 'extends': expected the name of another framework file, got '" + extends + "'");
    std::set<std::string> lifted(lifts.begin(), lifts.end());
    for (const std::string& id : lifted)
      if (std::none_of(base->rules.begin(), base->rules.end(), [&](const FrameworkRule& x) { return x.id == id; }))
        return Status::bad_input(origin + ": field 'lifts': '" + id + "' is not a rule of " + extends);
    for (const FrameworkRule& rule : base->rules)
      if (!lifted.count(rule.id)) fw.rules.push_back(rule);
  } else if (!lifts.empty()) {
    return Status::bad_input(origin + ": field 'lifts': only a file that extends another lifts its rules");
  }
  const json* rules = r.raw("refuses");
  if (rules == nullptr) {
    if (Status st = r.finish(); !st) return st;
    if (extends.empty()) return Status::bad_input(origin + ": field 'refuses': required (the framework's rules; [] when it runs every plan)");
  } else {
    if (!rules->is_array()) return Status::bad_input(origin + ": field 'refuses': expected a list of rules, got " + json_value_text(*rules));
    for (size_t i = 0; i < rules->size(); ++i) {
      const std::string path = "refuses[" + std::to_string(i) + "]";
      const json& rj = (*rules)[i];
      if (!rj.is_object()) return Status::bad_input(origin + ": field '" + path + "': expected a rule object, got " + json_value_text(rj));
      FieldReader rr(rj, origin, path);
      FrameworkRule rule;
      rr.get("id", &rule.id);
      rr.get("why", &rule.why);
      rr.get("source", &rule.source);
      const json* when = rr.raw("when");
      if (!rr.status()) return rr.status();
      if (when == nullptr || !when->is_object() || when->empty())
        return Status::bad_input(origin + ": field '" + path + ".when': expected an object of conditions on plan fields (" + field_names() + ")");
      for (const auto& [key, v] : when->items()) {
        FrameworkCondition c;
        if (Status st = read_condition(key, v, path + ".when." + key, &c); !st) return st.with_context(origin);
        rule.when.push_back(c);
      }
      if (Status st = rr.finish(); !st) return st;
      if (std::any_of(fw.rules.begin(), fw.rules.end(), [&](const FrameworkRule& x) { return x.id == rule.id; }))
        return Status::bad_input(origin + ": field '" + path + ".id': '" + rule.id + "' is used by another rule (ids are unique)");
      fw.rules.push_back(std::move(rule));
    }
  }
  if (Status st = r.finish(); !st) return st;
  return fw;
}

}  // namespace llmplan
