// llmplan calibrate: fit how fast a stack runs on a device, relative to the time model,
// from the runs recorded in the profile database (planner/calibrate/calibration.h), and write the
// calibration JSON that `llmplan execute --calibration` applies.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "planner/calibrate/calibration.h"
#include "planner/io/plan_file.h"
#include "profiles/profile_store.h"

namespace llmplan::cli {

namespace {
struct CalibrateCommand {
  std::string db;
  std::string backend = "cuda";
  std::string device;
  std::string out = "calibration.json";
  std::string stack_out;   // write a stack profile fitted from the runs here (instead of one scale)
  std::string stack_name;  // its name; default: <backend>-<device>
  std::vector<int64_t> run_ids;  // only these runs (default: every finished run of the backend)
};

// Whether a run on device `d` joins the fit: the first run fixes *device (unless --device
// did); another device is skipped under --device, else bad input asking for one.
Result<bool> same_device(const CalibrateCommand& c, const std::string& path, const std::string& d, std::string* device) {
  if (device->empty()) *device = d;
  if (d == *device) return true;
  if (!c.device.empty()) return false;
  return Status::bad_input("calibrate: the " + c.backend + " runs in " + path + " are on several devices ('" + *device + "', '" + d +
                           "'): pick one with --device");
}

// A run as the stack fit needs it: what ran (predicted_json "executed"), its measured step
// time and its GEMM op timings; false when the run predates those records.
bool stack_run_of(const RunRecord& r, const std::vector<OpTiming>& ops, StackFitRun* out) {
  const nlohmann::json p = nlohmann::json::parse(r.predicted_json, nullptr, false);
  if (p.is_discarded() || !p.contains("executed") || r.step_time_s <= 0) return false;
  Result<PlanFile> f = plan_file_from_json(p["executed"], "run " + std::to_string(r.id));
  if (!f) return false;
  out->label = "run " + std::to_string(r.id) + " (" + r.model + ")";
  out->model = f->model;
  out->cluster = f->cluster;
  out->job = f->job;
  out->plan = f->plan;
  out->measured_s = r.step_time_s;
  for (const OpTiming& o : ops) {
    if (o.op != "linear_forward" && o.op != "linear_backward") continue;
    StackFitGemm g;
    if (std::sscanf(o.shape.c_str(), "%lfx%lfx%lf", &g.m, &g.n, &g.k) != 3 || g.m <= 0 || g.n <= 0 || g.k <= 0) continue;
    g.flops = o.flops;
    g.seconds = o.time_s;
    g.calls = o.count;
    out->gemms.push_back(g);
  }
  return true;
}

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
int fit_stack(const CalibrateCommand& c, ProfileStore& store, const std::vector<RunSummary>& runs, const std::string& path) {
  std::vector<StackFitRun> fit_runs;
  std::string device = c.device;
  for (const RunSummary& rs : runs) {
    if (rs.status != RunStatus::ok || rs.backend != c.backend) continue;
    if (!c.run_ids.empty() && std::find(c.run_ids.begin(), c.run_ids.end(), rs.id) == c.run_ids.end()) continue;
    Result<RunRecord> r = store.get_run(rs.id);
    if (!r) return report(r.status());
    Result<std::vector<OpTiming>> ops = store.get_op_timings(rs.id);
    if (!ops) return report(ops.status());
    StackFitRun fr;
    if (!stack_run_of(*r, *ops, &fr)) continue;
    Result<bool> keep = same_device(c, path, fr.cluster.gpu.name, &device);
    if (!keep) return report(keep.status());
    if (*keep) fit_runs.push_back(std::move(fr));
  }
  if (fit_runs.empty())
    return report(Status::bad_input("calibrate --stack-out: " + path + " has no finished " + c.backend +
                                    " run with its executed config recorded (run `llmplan execute --backend " + c.backend + "` first)"));
  Result<PresetRegistry> reg = load_presets("");
  if (!reg) return report(reg.status());
  const std::string name = c.stack_name.empty() ? c.backend + "-" + device : c.stack_name;
  Result<StackFit> fit = fit_stack_profile(fit_runs, reg->default_stack(), name);
  if (!fit) return report(fit.status());
  const Efficiency& e = fit->profile.efficiency;
  std::printf("stack profile %s from %d %s run(s) on %s (%d timed GEMM shapes): gemm %.4f, gemm_half_dim %.1f, attention %.4f, memory %.4f; "
              "rms log error %.4f\n",
              name.c_str(), fit->runs, c.backend.c_str(), device.c_str(), fit->gemm_shapes, e.gemm, e.gemm_half_dim, e.attention, e.memory,
              fit->rms_log_error);
  std::printf("  %-40s %12s %12s %12s %9s\n", "run", "measured s", "default s", "fitted s", "error");
  for (size_t i = 0; i < fit_runs.size(); ++i) {
    const StackFitRun& r = fit_runs[i];
    const double d = estimate_time(r.model, r.cluster, r.job, r.plan, reg->default_stack().efficiency).total;
    std::printf("  %-40s %12.4f %12.4f %12.4f %+8.1f%%\n", r.label.c_str(), r.measured_s, d, fit->predicted_s[i],
                100 * (fit->predicted_s[i] / r.measured_s - 1));
  }
  if (Status st = write_json_file(c.stack_out, to_json(fit->profile)); !st) return report(st);
  std::printf("wrote %s (use: --stack %s)\n", c.stack_out.c_str(), c.stack_out.c_str());
  return 0;
}

}  // namespace

Runner register_calibrate(CLI::App* sub) {
  auto c = std::make_shared<CalibrateCommand>();
  sub->add_option("--db", c->db, "profile database (default $LLMPLAN_DB or ~/.local/share/llmplan/profiles.db)");
  sub->add_option("--backend", c->backend, "use the finished runs of this backend")->capture_default_str();
  sub->add_option("--device", c->device, "and of this device (the plan's GPU preset, e.g. h200); default: the runs' only device");
  sub->add_option("--out", c->out, "write the calibration here")->capture_default_str();
  sub->add_option("--stack-out", c->stack_out,
                  "instead: fit a training-stack profile (GEMM, attention and elementwise constants) from the runs' op timings and step "
                  "times, and write it here (use: --stack FILE on execute, sweep, memory, explain, simulate)");
  sub->add_option("--runs", c->run_ids, "with --stack-out: fit on these run ids only (e.g. 1,2)")->delimiter(',');
  sub->add_option("--stack-name", c->stack_name, "the fitted profile's name (default: <backend>-<device>)");
  return [c]() {
    Result<std::string> path = default_db_path(c->db);
    if (!path) return report(path.status());
    Result<ProfileStore> store = ProfileStore::open(*path);
    if (!store) return report(store.status());
    Result<std::vector<RunSummary>> runs = store->list_runs();
    if (!runs) return report(runs.status());
    if (!c->stack_out.empty()) return fit_stack(*c, *store, *runs, *path);
    std::vector<CalibrationSample> samples;
    std::string device = c->device;
    for (const RunSummary& rs : *runs) {
      if (rs.status != RunStatus::ok || rs.backend != c->backend) continue;
      Result<RunRecord> r = store->get_run(rs.id);
      if (!r) return report(r.status());
      CalibrationSample s;
      std::string d;
      if (!sample_of(*r, &s, &d)) continue;
      Result<bool> keep = same_device(*c, *path, d, &device);
      if (!keep) return report(keep.status());
      if (*keep) samples.push_back(s);
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
