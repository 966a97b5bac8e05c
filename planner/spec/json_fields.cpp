#include "planner/spec/json_fields.h"

#include <cmath>

namespace llmplan {

using nlohmann::json;

std::string json_value_text(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

FieldReader::FieldReader(const json& obj, std::string origin, std::string prefix)
    : obj_(obj), origin_(std::move(origin)), prefix_(std::move(prefix)) {
  if (!obj_.is_object()) {
    status_ = Status::bad_input(origin_ + ": " + (prefix_.empty() ? std::string("top level") : "field '" + prefix_ + "'") +
                                ": expected a JSON object, got " + json_value_text(obj_));
  }
}

std::string FieldReader::field_name(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

bool FieldReader::has(const char* key) const { return obj_.is_object() && obj_.contains(key) && !obj_.at(key).is_null(); }

void FieldReader::fail(const char* key, const std::string& expected_and_got) {
  if (!status_.is_ok()) return;
  status_ = Status::bad_input(origin_ + ": field '" + field_name(key) + "': " + expected_and_got);
}

const json* FieldReader::lookup(const char* key, bool required, const char* expected) {
  seen_.insert(key);
  if (!status_.is_ok()) return nullptr;
  if (!has(key)) {
    if (required) fail(key, std::string("missing (expected ") + expected + ")");
    return nullptr;
  }
  return &obj_.at(key);
}

const json* FieldReader::raw(const char* key) {
  seen_.insert(key);
  return has(key) ? &obj_.at(key) : nullptr;
}

void FieldReader::get(const char* key, int64_t* out, int64_t min, int64_t max, bool required) {
  const std::string expected = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  const json* v = lookup(key, required, expected.c_str());
  if (!v) return;
  // Accept 4096.0 but not 4096.5 or "4096": configs written by scripts use both int styles.
  bool integral = v->is_number_integer() || (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
                                             std::fabs(v->get<double>()) < 9e15);
  if (!integral) {
    fail(key, "expected " + expected + ", got " + json_value_text(*v));
    return;
  }
  const double d = v->get<double>();
  if (d < static_cast<double>(min) || d > static_cast<double>(max)) {
    fail(key, "expected " + expected + ", got " + json_value_text(*v));
    return;
  }
  *out = v->is_number_integer() ? v->get<int64_t>() : static_cast<int64_t>(d);
}

void FieldReader::get(const char* key, int* out, int64_t min, int64_t max, bool required) {
  int64_t wide = *out;
  get(key, &wide, min, max, required);
  *out = static_cast<int>(wide);
}

void FieldReader::get(const char* key, double* out, double min, double max, bool required) {
  char expected[96];
  std::snprintf(expected, sizeof expected, "a number in [%g, %g]", min, max);
  const json* v = lookup(key, required, expected);
  if (!v) return;
  if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < min || v->get<double>() > max) {
    fail(key, std::string("expected ") + expected + ", got " + json_value_text(*v));
    return;
  }
  *out = v->get<double>();
}

void FieldReader::get(const char* key, bool* out, bool required) {
  const json* v = lookup(key, required, "true or false");
  if (!v) return;
  if (!v->is_boolean()) {
    fail(key, "expected true or false, got " + json_value_text(*v));
    return;
  }
  *out = v->get<bool>();
}

void FieldReader::get(const char* key, std::string* out, bool required) {
  const json* v = lookup(key, required, "a string");
  if (!v) return;
  if (!v->is_string()) {
    fail(key, "expected a string, got " + json_value_text(*v));
    return;
  }
  *out = v->get<std::string>();
}

FieldReader FieldReader::child(const char* key) {
  seen_.insert(key);
  static const json kEmpty = json::object();
  if (!has(key)) return FieldReader(kEmpty, origin_, field_name(key));
  return FieldReader(obj_.at(key), origin_, field_name(key));
}

Status FieldReader::finish(bool reject_unknown) const {
  if (!status_.is_ok() || !reject_unknown || !obj_.is_object()) return status_;
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (!seen_.count(it.key())) {
      std::string known;
      for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
      return Status::bad_input(origin_ + ": unknown field '" + field_name(it.key().c_str()) + "' (known fields: " + known + ")");
    }
  }
  return status_;
}

std::vector<std::string> FieldReader::unread() const {
  std::vector<std::string> keys;
  if (!obj_.is_object()) return keys;
  for (auto it = obj_.begin(); it != obj_.end(); ++it)
    if (!seen_.count(it.key())) keys.push_back(it.key());
  return keys;
}

}  // namespace llmplan
