// FieldReader: reads typed, range-checked fields out of a JSON object and turns every
// problem into one message that names the file, the field path and the expected form,
// e.g. "models/x.json: field 'model.layers': expected an integer in [1, 10000], got -3".
// The first error wins; later reads become no-ops. finish() also reports unknown keys.
//
// Thread-safety: one reader per thread.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/spec/specs.h"
#include "planner/spec/status.h"

namespace llmplan {

class FieldReader {
 public:
  // REQUIRES: `obj` outlives the reader. `origin` is the file or flag; `prefix` the
  // field path of `obj` ("" at top level, "plan" inside "plan").
  FieldReader(const nlohmann::json& obj, std::string origin, std::string prefix);

  bool has(const char* key) const;
  // Each getter leaves *out unchanged when the key is absent and required is false.
  void get(const char* key, int* out, int64_t min, int64_t max, bool required = true);
  void get(const char* key, int64_t* out, int64_t min, int64_t max, bool required = true);
  void get(const char* key, double* out, double min, double max, bool required = true);
  void get(const char* key, bool* out, bool required = true);
  void get(const char* key, std::string* out, bool required = true);
  template <class E>
  void get_enum(const char* key, E* out, const char* expected, bool required = true);
  // Marks keys as known without reading them (comments, fields handled elsewhere).
  void allow(const char* key) { seen_.insert(key); }
  // A nested object's reader; an error when it is present but not an object.
  FieldReader child(const char* key);
  const nlohmann::json* raw(const char* key);

  // Records an error about `key` (e.g. a cross-field check) unless one is recorded.
  void fail(const char* key, const std::string& expected_and_got);
  // The first error, else an "unknown field" error when reject_unknown, else ok.
  Status finish(bool reject_unknown = true) const;
  // The object's keys that no getter, allow() or has() asked for, in the object's order.
  std::vector<std::string> unread() const;
  const Status& status() const { return status_; }
  std::string field_name(const char* key) const;

 private:
  const nlohmann::json* lookup(const char* key, bool required, const char* expected);
  const nlohmann::json& obj_;
  std::string origin_;
  std::string prefix_;
  std::set<std::string> seen_;
  Status status_;
};

std::string json_value_text(const nlohmann::json& v);  // short rendering for messages

template <class E>
void FieldReader::get_enum(const char* key, E* out, const char* expected, bool required) {
  const nlohmann::json* v = lookup(key, required, expected);
  if (!v) return;
  E parsed{};
  if (!v->is_string() || !parse_enum(v->get<std::string>(), &parsed)) {
    fail(key, std::string("expected one of ") + expected + ", got " + json_value_text(*v));
    return;
  }
  *out = parsed;
}

}  // namespace llmplan
