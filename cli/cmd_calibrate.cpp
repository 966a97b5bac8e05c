// llmplan calibrate: fit how fast a stack runs on a device, relative to the time model,
// from the runs recorded in the profile database (planner/calibration.h), and write the
// calibration JSON that `llmplan execute --calibration` applies.
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "planner/calibration.h"
#include "profiles/profile_store.h"

namespace llmplan::cli {

namespace {
struct CalibrateCommand {
  std::string db;
  std::string backend = "cuda";
  std::string device;
  std::string out = "calibration.json";
};

// The executed config's uncalibrated predicted breakdown as execute stored it (predicted_json "time",
// plan_file.h time_to_json), and the device it was predicted for.
bool sample_of(const RunRecord& r, CalibrationSample* s, std::string* device) {
  const nlohmann::json p = nlohmann::json::parse(r.predicted_json, nullptr, false);
  if (p.is_discarded() || !p.contains("time") || !p["time"].contains("breakdown_s")) return false;
  // A run predicted with a calibration stored the calibrated breakdown: fitting on it would
  // compound the scale (it already matches its measurement).
  if (p.value("calibrated", false)) return false;
  const nlohmann::json& b = p["time"]["breakdown_s"];
  StepTime t;
  t.compute = b.value("compute", 0.0);
  t.recompute = b.value("recompute", 0.0);
  t.bubble = b.value("bubble", 0.0);
  t.optimizer = b.value("optimizer", 0.0);
  t.total = p["time"].value("step_time_s", 0.0);
  *device = p.value("device", std::string());
  *s = calibration_sample(t, r.step_time_s, "run " + std::to_string(r.id) + " (" + r.model + ")");
  return t.total > 0 && r.step_time_s > 0;
}
}  // namespace

Runner register_calibrate(CLI::App* sub) {
  auto c = std::make_shared<CalibrateCommand>();
  sub->add_option("--db", c->db, "profile database (default $LLMPLAN_DB or ~/.local/share/llmplan/profiles.db)");
  sub->add_option("--backend", c->backend, "use the finished runs of this backend")->capture_default_str();
  sub->add_option("--device", c->device, "and of this device (the plan's GPU preset, e.g. h200); default: the runs' only device");
  sub->add_option("--out", c->out, "write the calibration here")->capture_default_str();
  return [c]() {
    Result<std::string> path = default_db_path(c->db);
    if (!path) return report(path.status());
    Result<ProfileStore> store = ProfileStore::open(*path);
    if (!store) return report(store.status());
    Result<std::vector<RunSummary>> runs = store->list_runs();
    if (!runs) return report(runs.status());
    std::vector<CalibrationSample> samples;
    std::string device = c->device;
    for (const RunSummary& rs : *runs) {
      if (rs.status != RunStatus::ok || rs.backend != c->backend) continue;
      Result<RunRecord> r = store->get_run(rs.id);
      if (!r) return report(r.status());
      CalibrationSample s;
      std::string d;
      if (!sample_of(*r, &s, &d)) continue;
      if (device.empty()) device = d;
      if (d != device) {
        if (!c->device.empty()) continue;
        return report(Status::bad_input("calibrate: the " + c->backend + " runs in " + *path + " are on several devices ('" + device +
                                        "', '" + d + "'): pick one with --device"));
      }
      samples.push_back(s);
    }
    if (samples.empty())
      return report(Status::bad_input("calibrate: " + *path + " has no finished " + c->backend + " run" +
                                      (c->device.empty() ? "" : " on device '" + c->device + "'") +
                                      " with a recorded prediction (run `llmplan execute --backend " + c->backend + "` first)"));
    Result<Calibration> cal = fit_calibration(samples, device, c->backend);
    if (!cal) return report(cal.status());
    std::printf("calibration of %s on %s from %d run(s): compute_scale %.4f (the stack reaches %.1f%% of the time model's "
                "speed), rms log error %.4f\n",
                c->backend.c_str(), device.c_str(), cal->runs, cal->compute_scale, 100 * cal->compute_scale, cal->rms_log_error);
    std::printf("  %-40s %12s %12s %12s %9s\n", "run", "measured s", "predicted s", "calibrated s", "error");
    for (const CalibrationSample& s : samples) {
      const double p = s.scaled_s + s.fixed_s, q = calibrated_step_time(s, cal->compute_scale);
      std::printf("  %-40s %12.4f %12.4f %12.4f %+8.1f%%\n", s.label.c_str(), s.measured_s, p, q, 100 * (q / s.measured_s - 1));
    }
    if (Status st = write_json_file(c->out, calibration_to_json(*cal)); !st) return report(st);
    std::printf("wrote %s (use: llmplan execute PLAN --calibration %s)\n", c->out.c_str(), c->out.c_str());
    return 0;
  };
}

}  // namespace llmplan::cli
