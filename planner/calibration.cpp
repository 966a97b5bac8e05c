#include "planner/calibration.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace llmplan {

CalibrationSample calibration_sample(const StepTime& t, double measured_s, std::string label) {
  CalibrationSample s;
  s.label = std::move(label);
  s.measured_s = measured_s;
  s.scaled_s = t.compute + t.recompute + t.bubble + t.optimizer;
  s.fixed_s = std::max(0.0, t.total - s.scaled_s);
  return s;
}

double calibrated_step_time(const CalibrationSample& s, double k) { return s.scaled_s / k + s.fixed_s; }

namespace {
double sq_log_error(const std::vector<CalibrationSample>& v, double log_k) {
  const double k = std::exp(log_k);
  double e = 0;
  for (const CalibrationSample& s : v) {
    const double d = std::log(calibrated_step_time(s, k) / s.measured_s);
    e += d * d;
  }
  return e;
}
}  // namespace

Result<Calibration> fit_calibration(const std::vector<CalibrationSample>& v, std::string device, std::string backend) {
  if (v.empty()) return Status::bad_input("calibration: no recorded runs to fit (run `llmplan execute` first)");
  bool any_scaled = false;
  for (const CalibrationSample& s : v) {
    if (!(s.measured_s > 0) || !std::isfinite(s.measured_s) || !(s.scaled_s >= 0) || !(s.fixed_s >= 0))
      return Status::bad_input("calibration: " + s.label + ": measured and predicted step times must be positive");
    any_scaled = any_scaled || s.scaled_s > 0;
  }
  if (!any_scaled) return Status::bad_input("calibration: no run has device-bound predicted time to scale");
  // The error is unimodal in log k (each term is a convex function of log k where the
  // scaled part dominates): golden-section search over k in [1e-3, 1e3].
  double lo = std::log(1e-3), hi = std::log(1e3);
  const double g = (std::sqrt(5.0) - 1) / 2;
  double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
  double fa = sq_log_error(v, a), fb = sq_log_error(v, b);
  for (int it = 0; it < 200 && hi - lo > 1e-12; ++it) {
    if (fa < fb) {
      hi = b;
      b = a;
      fb = fa;
      a = hi - g * (hi - lo);
      fa = sq_log_error(v, a);
    } else {
      lo = a;
      a = b;
      fa = fb;
      b = lo + g * (hi - lo);
      fb = sq_log_error(v, b);
    }
  }
  Calibration c;
  c.device = std::move(device);
  c.backend = std::move(backend);
  c.compute_scale = std::exp(0.5 * (lo + hi));
  c.runs = static_cast<int>(v.size());
  c.rms_log_error = std::sqrt(sq_log_error(v, std::log(c.compute_scale)) / static_cast<double>(v.size()));
  return c;
}

GpuSpec calibrated_gpu(const GpuSpec& gpu, const Calibration& c) {
  GpuSpec g = gpu;
  for (double& p : g.peak_flops) p *= c.compute_scale;
  g.memory_bandwidth *= c.compute_scale;
  return g;
}

nlohmann::json calibration_to_json(const Calibration& c) {
  return {{"schema", "llmplan.calibration"},
          {"schema_version", 1},
          {"device", c.device},
          {"backend", c.backend},
          {"compute_scale", c.compute_scale},
          {"runs", c.runs},
          {"rms_log_error", c.rms_log_error}};
}

Result<Calibration> calibration_from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) return Status::bad_input(source + ": expected a JSON object (llmplan.calibration)");
  if (j.value("schema", std::string()) != "llmplan.calibration")
    return Status::bad_input(source + ": field 'schema': expected \"llmplan.calibration\"");
  Calibration c;
  auto str = [&](const char* k, std::string* out) -> Status {
    if (!j.contains(k) || !j[k].is_string()) return Status::bad_input(source + ": field '" + k + "': expected a string");
    *out = j[k].get<std::string>();
    return Status::ok();
  };
  if (Status s = str("device", &c.device); !s) return s;
  if (Status s = str("backend", &c.backend); !s) return s;
  if (!j.contains("compute_scale") || !j["compute_scale"].is_number() || !(j["compute_scale"].get<double>() > 0) ||
      j["compute_scale"].get<double>() > 1e3)
    return Status::bad_input(source + ": field 'compute_scale': expected a number in (0, 1000]");
  c.compute_scale = j["compute_scale"].get<double>();
  if (j.contains("runs")) {
    if (!j["runs"].is_number_integer() || j["runs"].get<int64_t>() < 0)
      return Status::bad_input(source + ": field 'runs': expected a count >= 0");
    c.runs = j["runs"].get<int>();
  }
  if (j.contains("rms_log_error")) {
    if (!j["rms_log_error"].is_number()) return Status::bad_input(source + ": field 'rms_log_error': expected a number");
    c.rms_log_error = j["rms_log_error"].get<double>();
  }
  return c;
}

Result<Calibration> read_calibration_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::bad_input(path + ": cannot open file (expected a calibration JSON from `llmplan calibrate`)");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return Status::bad_input(path + ": not valid JSON");
  return calibration_from_json(j, path);
}

}  // namespace llmplan
