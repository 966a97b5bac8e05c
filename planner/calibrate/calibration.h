// Calibration: how fast a training stack really runs on a device, relative to the time
// model's fitted efficiencies, measured from recorded runs (the profile database).
//
// The time model's efficiencies (time_model.h Efficiency) are fitted to published runs on
// tuned stacks. A given stack -- this executor's kernels, or a user's framework -- reaches
// a different fraction of the device. Calibration fits one number per (device, backend):
// compute_scale, the ratio of the speed actually reached to the model's, from the measured
// step times of recorded runs. The device-bound terms of a prediction -- compute,
// recompute, the pipeline bubble (a fraction of compute) and the optimizer step -- are
// divided by it; communication and offload are not. Applying a calibration multiplies the
// GPU's peak FLOP/s and memory bandwidth by compute_scale, which divides those terms (all
// but the fixed kernel-launch cost per GEMM, about 1% of a small model's compute). The fit
// treats a run's exposed communication as fixed; in a multi-GPU prediction the exposed part
// itself shrinks as slower compute hides more of it, so the fit is exact for single-rank
// runs (what `llmplan execute` records on one GPU) and approximate beyond.
//
// The fit minimises the sum of squared log errors (a run 2x too slow weighs as one 2x too
// fast) over the runs; one run determines the scale exactly. Pure functions; no state.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/spec/specs.h"
#include "planner/cost/stack_profile.h"
#include "planner/spec/status.h"
#include "planner/cost/time_model.h"

namespace llmplan {

// One recorded run: its measured step time and its prediction split into the part the
// scale divides and the part it does not.
struct CalibrationSample {
  std::string label;       // e.g. "run 3: gpt2-124m"
  double measured_s = 0;   // measured median step time, s (> 0)
  double scaled_s = 0;     // predicted compute + recompute + bubble + optimizer, s (>= 0)
  double fixed_s = 0;      // predicted communication and offload, s (>= 0)
};
// The device-bound and fixed parts of a prediction (see top).
CalibrationSample calibration_sample(const StepTime& predicted, double measured_s, std::string label);

struct Calibration {
  std::string device;           // GpuSpec::name it was measured on, e.g. "h200"
  std::string backend;          // "cuda", "cpu", or a framework's name
  double compute_scale = 1;     // speed reached / the time model's
  int runs = 0;                 // samples fitted
  double rms_log_error = 0;     // of the calibrated predictions over the samples
};

// Errors: bad_input without samples or with a sample whose times are not positive.
Result<Calibration> fit_calibration(const std::vector<CalibrationSample>& samples, std::string device,
                                    std::string backend);
// The calibrated prediction of a sample, s.
double calibrated_step_time(const CalibrationSample& s, double compute_scale);
// The GPU as the calibrated stack sees it: peak FLOP/s (every dtype) and memory bandwidth
// times compute_scale.
GpuSpec calibrated_gpu(const GpuSpec& gpu, const Calibration& c);

nlohmann::json calibration_to_json(const Calibration& c);
// Errors name `source` and the field: bad_input.
Result<Calibration> calibration_from_json(const nlohmann::json& j, const std::string& source);
Result<Calibration> read_calibration_file(const std::string& path);


// ---------------------------------------------------------------- stack profiles
// Calibration as a stack profile (planner/cost/stack_profile.h): the time model's own constants
// fitted for this stack on this device, from recorded runs, rather than one scale.
//   1. GEMMs, from the runs' per-op timings (op_timings): the time model prices a GEMM of
//      `flops` with smallest dimension d at flops / (peak * gemm * d / (d + gemm_half_dim))
//      (time_model.h; the traffic term is left out, gemm_traffic = 0: a stack's timings
//      alone cannot tell it from `gemm`). So seconds/flops = a + b/d with a = 1/(peak*gemm)
//      and b = gemm_half_dim * a: a linear least-squares fit over the timed GEMM shapes,
//      weighted by their share of the time (Eigen).
//   2. The rest -- fused attention (`attention`) and elementwise work (`memory`, the
//      fraction of bandwidth reached) -- from the runs' measured step times: the time
//      model's prediction of each run with those two free, minimising the sum of squared
//      log errors (Nelder-Mead), the GEMM constants fixed.
// A run without op timings contributes to 2 only; 1 fits gemm_half_dim too when the timed
// shapes have different smallest dimensions, else `gemm` alone.
struct StackFitGemm {
  double m = 0, n = 0, k = 0;  // rows, output columns, inner dimension
  double flops = 0;            // per call
  double seconds = 0;          // per call (mean)
  int64_t calls = 0;
};
struct StackFitRun {
  std::string label;
  ModelSpec model;
  ClusterSpec cluster;
  TrainingJob job;
  ParallelPlan plan;
  double measured_s = 0;       // median step time
  std::vector<StackFitGemm> gemms;
};
struct StackFit {
  StackProfile profile;        // `base` with the fitted efficiency
  int runs = 0, gemm_shapes = 0;
  double rms_log_error = 0;    // of the fitted profile's step times over the runs
  std::vector<double> predicted_s;  // per run, with the fitted profile
};
// Errors: bad_input without runs, with a non-positive measurement, or a plan the time
// model cannot cost (naming the run).
Result<StackFit> fit_stack_profile(const std::vector<StackFitRun>& runs, const StackProfile& base, const std::string& name);

}  // namespace llmplan
