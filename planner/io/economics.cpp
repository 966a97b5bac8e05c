#include "planner/io/economics.h"

#include <set>

#include "planner/spec/json_fields.h"
#include "planner/spec/spec_json.h"

namespace llmplan {

namespace {

using json = nlohmann::json;

// The elements of an array field, each required to be an object.
Status object_array(FieldReader& r, const char* key, const json** out) {
  *out = r.raw(key);
  if (r.status().is_ok() && (!*out || !(*out)->is_array() || (*out)->empty())) r.fail(key, "expected a non-empty array of objects");
  if (!r.status().is_ok()) return r.status();
  for (size_t i = 0; i < (*out)->size(); ++i)
    if (!(**out)[i].is_object()) {
      r.fail(key, "expected an array of objects, got " + json_value_text((**out)[i]) + " at [" + std::to_string(i) + "]");
      return r.status();
    }
  return Status::ok();
}

Status read_failures(const json& doc, const std::string& origin, EconomicsData* d) {
  if (!doc.is_object()) return Status::bad_input(origin + ": expected a JSON object");
  FieldReader top(doc, origin, "");
  top.allow("comment");
  top.get("default", &d->default_failure_source);
  const json* sources = nullptr;
  if (Status st = object_array(top, "sources", &sources); !st) return st;
  if (Status st = top.finish(); !st) return st;
  std::set<std::string> ids;
  for (size_t i = 0; i < sources->size(); ++i) {
    const std::string at = "sources[" + std::to_string(i) + "]";
    FieldReader r((*sources)[i], origin, at);
    FailureSource f;
    r.get("id", &f.id);
    r.get("source", &f.source);
    r.get("gpus", &f.gpus, 1, 10'000'000);
    r.get("gpus_per_node", &f.gpus_per_node, 1, 65536);
    r.get("days", &f.days, 1e-3, 1e5);
    r.get("planned", &f.planned, 0, 1'000'000'000, false);
    const json* causes = nullptr;
    if (Status st = object_array(r, "causes", &causes); !st) return st;
    if (Status st = r.finish(); !st) return st;
    if (!ids.insert(f.id).second) return Status::bad_input(origin + ": field '" + at + ".id': '" + f.id + "' is listed twice");
    for (size_t k = 0; k < causes->size(); ++k) {
      FieldReader c((*causes)[k], origin, at + ".causes[" + std::to_string(k) + "]");
      FailureCause fc;
      std::string scale;
      c.get("cause", &fc.cause);
      c.get("scale", &scale);
      c.get("count", &fc.count, 0, 1'000'000'000);
      if (c.status().is_ok() && scale != "gpu" && scale != "node") c.fail("scale", "expected \"gpu\" or \"node\", got \"" + scale + "\"");
      if (Status st = c.finish(); !st) return st;
      fc.per_gpu = scale == "gpu";
      f.causes.push_back(fc);
    }
    if (f.unexpected() == 0) return Status::bad_input(origin + ": field '" + at + ".causes': expected at least one interruption, got none");
    const double hours = f.days * 24;
    const double nodes = nodes_for(f.gpus, f.gpus_per_node);
    for (const FailureCause& c : f.causes)
      (c.per_gpu ? f.rates.per_gpu_hour : f.rates.per_node_hour) += static_cast<double>(c.count) / ((c.per_gpu ? f.gpus : nodes) * hours);
    f.rates.planned_per_node_hour = static_cast<double>(f.planned) / (nodes * hours);
    d->failure_sources.push_back(std::move(f));
  }
  if (!d->failure_source(d->default_failure_source))
    return Status::bad_input(origin + ": field 'default': expected the id of a listed source, got '" + d->default_failure_source + "'");
  return Status::ok();
}

Status read_prices(const json& doc, const std::string& origin, const PresetRegistry& presets, EconomicsData* d) {
  if (!doc.is_object()) return Status::bad_input(origin + ": expected a JSON object");
  FieldReader top(doc, origin, "");
  top.allow("comment");
  const json* offers = nullptr;
  if (Status st = object_array(top, "offers", &offers); !st) return st;
  if (Status st = top.finish(); !st) return st;
  for (size_t i = 0; i < offers->size(); ++i) {
    FieldReader r((*offers)[i], origin, "offers[" + std::to_string(i) + "]");
    PriceOffer o;
    r.get("gpu", &o.gpu);
    r.get("per_gpu_hour", &o.per_gpu_hour, 1e-4, 1e4);
    r.get("provider", &o.provider);
    r.get("offer", &o.offer);
    r.get("date", &o.date);
    r.get("source", &o.source);
    if (r.status().is_ok() && !presets.gpu(o.gpu)) r.fail("gpu", "expected a GPU preset id, got '" + o.gpu + "'");
    if (Status st = r.finish(); !st) return st;
    d->offers.push_back(std::move(o));
  }
  return Status::ok();
}

// "gpus" / "nodes": id -> {value_key, source}.
Status read_power_map(FieldReader& top, const std::string& origin, const char* key, const char* value_key, bool gpu_ids,
                      const PresetRegistry& presets, std::map<std::string, PowerFact>* out) {
  const json* m = top.raw(key);
  if (top.status().is_ok() && (!m || !m->is_object())) top.fail(key, "expected an object of preset id -> {" + std::string(value_key) + ", source}");
  if (!top.status().is_ok()) return top.status();
  for (auto it = m->begin(); it != m->end(); ++it) {
    const std::string field = std::string(key) + "." + it.key();
    if (gpu_ids ? !presets.gpu(it.key()) : !presets.cluster(it.key()))
      return Status::bad_input(origin + ": field '" + field + "': expected a " + (gpu_ids ? "GPU" : "node") + " preset id, got '" + it.key() +
                               "'");
    if (!it.value().is_object())
      return Status::bad_input(origin + ": field '" + field + "': expected an object, got " + json_value_text(it.value()));
    FieldReader r(it.value(), origin, field);
    PowerFact p;
    r.get(value_key, &p.watts, 1, 1e6);
    r.get("source", &p.source);
    if (Status st = r.finish(); !st) return st;
    (*out)[it.key()] = p;
  }
  return Status::ok();
}

Status read_power(const json& doc, const std::string& origin, const PresetRegistry& presets, EconomicsData* d) {
  if (!doc.is_object()) return Status::bad_input(origin + ": expected a JSON object");
  FieldReader top(doc, origin, "");
  top.allow("comment");
  top.get("idle_fraction", &d->idle_fraction, 0, 1);
  top.get("idle_source", &d->idle_source);
  top.get("pue", &d->pue, 1, 5);
  top.get("pue_source", &d->pue_source);
  top.get("default_node_overhead_per_gpu_tdp", &d->default_node_overhead_per_gpu_tdp, 0, 10);
  top.get("default_node_overhead_source", &d->default_node_overhead_source);
  if (Status st = read_power_map(top, origin, "gpus", "tdp_w", true, presets, &d->gpu_tdp); !st) return st;
  if (Status st = read_power_map(top, origin, "nodes", "overhead_w", false, presets, &d->node_overhead); !st) return st;
  return top.finish();
}

}  // namespace

int64_t FailureSource::unexpected() const {
  int64_t n = 0;
  for (const FailureCause& c : causes) n += c.count;
  return n;
}

const FailureSource* EconomicsData::failure_source(const std::string& id) const {
  for (const FailureSource& f : failure_sources)
    if (f.id == id) return &f;
  return nullptr;
}

const PriceOffer* EconomicsData::default_offer(const std::string& gpu_id) const {
  for (const PriceOffer& o : offers)
    if (o.gpu == gpu_id) return &o;
  return nullptr;
}

EnergySpec EconomicsData::energy_for(const ClusterSpec& c) const {
  EnergySpec e;
  e.idle_fraction = idle_fraction;
  e.pue = pue;
  if (auto it = gpu_tdp.find(c.gpu.name); it != gpu_tdp.end()) e.gpu_tdp_w = it->second.watts;
  if (auto it = node_overhead.find(c.name); it != node_overhead.end()) e.node_overhead_w = it->second.watts;
  else e.node_overhead_w = default_node_overhead_per_gpu_tdp * e.gpu_tdp_w * c.gpus_per_node;
  return e;
}

GoodputOptions EconomicsData::default_goodput_options() const {
  GoodputOptions g;
  if (const FailureSource* f = failure_source(default_failure_source)) g.failures = f->rates;
  return g;
}

Result<EconomicsData> economics_from_json(const json& failures, const std::string& failures_origin, const json& prices,
                                          const std::string& prices_origin, const json& power, const std::string& power_origin,
                                          const PresetRegistry& presets) {
  EconomicsData d;
  if (Status st = read_failures(failures, failures_origin, &d); !st) return st;
  if (Status st = read_prices(prices, prices_origin, presets, &d); !st) return st;
  if (Status st = read_power(power, power_origin, presets, &d); !st) return st;
  return d;
}

Result<EconomicsData> load_economics(const std::string& root, const PresetRegistry& presets) {
  const std::string failures = root + "/data/reliability/failures.json";
  const std::string prices = root + "/data/economics/prices.json";
  const std::string power = root + "/data/economics/power.json";
  Result<json> f = read_json_file(failures);
  if (!f) return f.status();
  Result<json> p = read_json_file(prices);
  if (!p) return p.status();
  Result<json> w = read_json_file(power);
  if (!w) return w.status();
  Result<EconomicsData> d = economics_from_json(*f, failures, *p, prices, *w, power, presets);
  if (d) d->origin = root;
  return d;
}

}  // namespace llmplan
