#include "planner/calibrate/calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <Eigen/Dense>

#include "planner/calibrate/nelder_mead.h"
#include "planner/spec/spec_json.h"
#include "planner/cost/plan_check.h"

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
  Result<nlohmann::json> j = read_json_file(path);
  if (!j) return j.status();
  return calibration_from_json(*j, path);
}

Result<StackFit> fit_stack_profile(const std::vector<StackFitRun>& runs, const StackProfile& base, const std::string& name) {
  if (runs.empty()) return Status::bad_input("calibrate: no recorded runs to fit (run `llmplan execute` first)");
  for (const StackFitRun& r : runs) {
    if (!(r.measured_s > 0) || !std::isfinite(r.measured_s)) return Status::bad_input("calibrate: " + r.label + ": measured step time must be positive");
    if (Status s = check_plan_status(r.model, r.cluster, r.job, r.plan, r.plan.world_size(), r.label); !s) return s;
  }
  StackFit fit;
  fit.profile = base;
  fit.profile.name = name;
  fit.runs = static_cast<int>(runs.size());
  Efficiency e = base.efficiency;
  e.gemm_traffic = 0;

  // 1. GEMMs: seconds/flops = a + b / d over every timed shape, weighted by its time.
  std::vector<double> x, y, w;
  double peak = 0;
  for (const StackFitRun& r : runs) {
    const double p = r.cluster.gpu.peak(compute_dtype(r.job, r.cluster.gpu));
    for (const StackFitGemm& g : r.gemms) {
      if (!(g.flops > 0) || !(g.seconds > 0)) continue;
      peak = p;  // the runs of one device share it
      x.push_back(1.0 / std::min({g.m, g.n, g.k}));
      y.push_back(g.seconds / g.flops);
      w.push_back(std::sqrt(g.seconds * static_cast<double>(std::max<int64_t>(1, g.calls))));
    }
  }
  fit.gemm_shapes = static_cast<int>(x.size());
  const bool spread = !x.empty() && *std::max_element(x.begin(), x.end()) > 1.05 * *std::min_element(x.begin(), x.end());
  if (fit.gemm_shapes >= 2 && spread && peak > 0) {
    Eigen::MatrixXd A(x.size(), 2);
    Eigen::VectorXd b(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      A(static_cast<Eigen::Index>(i), 0) = w[i];
      A(static_cast<Eigen::Index>(i), 1) = w[i] * x[i];
      b(static_cast<Eigen::Index>(i)) = w[i] * y[i];
    }
    Eigen::Vector2d ab = A.colPivHouseholderQr().solve(b);
    if (ab(1) < 0) {  // no thin-GEMM penalty visible: the intercept alone
      double num = 0, den = 0;
      for (size_t i = 0; i < x.size(); ++i) num += w[i] * w[i] * y[i], den += w[i] * w[i];
      ab = {num / den, 0};
    }
    e.gemm = std::clamp(1.0 / (ab(0) * peak), 1e-4, 1.0);
    e.gemm_half_dim = std::max(0.0, ab(1) / ab(0));
  } else if (fit.gemm_shapes >= 1 && peak > 0) {
    // One smallest dimension only (the CPU backend runs 16-bit GEMMs in 256-row chunks):
    // the efficiency at that width, the thin-GEMM half width kept from `base`.
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size(); ++i) num += w[i] * w[i] * y[i] * (1 + e.gemm_half_dim * x[i]), den += w[i] * w[i] * (1 + e.gemm_half_dim * x[i]) * (1 + e.gemm_half_dim * x[i]);
    e.gemm = std::clamp(den / (num * peak), 1e-4, 1.0);
  }

  // 2. attention and memory from the step times, in logistic coordinates (fractions in
  // (0, 1) with no flat clamped region for the simplex to stall on).
  auto predicted = [&](const Efficiency& ef, const StackFitRun& r) { return estimate_time(r.model, r.cluster, r.job, r.plan, ef).total; };
  auto with = [&](const std::vector<double>& v) {
    Efficiency ef = e;
    ef.attention = 1 / (1 + std::exp(-v[0]));
    ef.memory = 1 / (1 + std::exp(-v[1]));
    return ef;
  };
  auto objective = [&](const std::vector<double>& v) {
    const Efficiency ef = with(v);
    double sum = 0;
    for (const StackFitRun& r : runs) {
      const double d = std::log(predicted(ef, r) / r.measured_s);
      sum += d * d;
    }
    return sum;
  };
  auto logit = [](double f) {
    f = std::clamp(f, 1e-3, 0.999);
    return std::log(f / (1 - f));
  };
  std::vector<double> v = {logit(e.attention), logit(e.memory)};
  double best = objective(v);
  for (int restart = 0; restart < 4; ++restart) {
    double f = 0;
    std::vector<double> u = nelder_mead(objective, v, 1000, &f);
    if (f >= best - 1e-9) break;
    best = f, v = u;
  }
  e = with(v);
  fit.profile.efficiency = e;
  double sq = 0;
  for (const StackFitRun& r : runs) {
    fit.predicted_s.push_back(predicted(e, r));
    const double d = std::log(fit.predicted_s.back() / r.measured_s);
    sq += d * d;
  }
  fit.rms_log_error = std::sqrt(sq / static_cast<double>(runs.size()));
  char note[200];
  std::snprintf(note, sizeof note, "llmplan calibrate: %d run(s) on %s, %d timed GEMM shapes", fit.runs, runs.front().cluster.gpu.name.c_str(),
                fit.gemm_shapes);
  fit.profile.fitted_on = note;
  return fit;
}

}  // namespace llmplan
