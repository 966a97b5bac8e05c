// Calibration (planner/calibration.h): the fit recovers a known speed ratio exactly, one
// run determines it, the calibrated GPU divides the device-bound part of a prediction by
// the scale (checked on estimate_time itself, not on the fit's own formula), and bad
// calibration files are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "planner/calibration.h"
#include "planner/presets.h"
#include "planner/time_model.h"

namespace llmplan {
namespace {

TEST(Calibration, FitRecoversAKnownScaleFromSeveralRuns) {
  const double k = 0.515;
  std::vector<CalibrationSample> v;
  for (auto [scaled, fixed] : {std::pair{0.15, 0.0}, std::pair{0.19, 0.01}, std::pair{2.0, 0.3}}) {
    CalibrationSample s;
    s.label = "synthetic";
    s.scaled_s = scaled;
    s.fixed_s = fixed;
    s.measured_s = scaled / k + fixed;  // a stack reaching 51.5% of the model's speed
    v.push_back(s);
  }
  Result<Calibration> c = fit_calibration(v, "h200", "cuda");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NEAR(c->compute_scale, k, 1e-9);
  EXPECT_LT(c->rms_log_error, 1e-9);
  EXPECT_EQ(c->runs, 3);
}

TEST(Calibration, NoisyRunsGiveTheLogLeastSquaresScale) {
  // Two runs without fixed time, measured 2x and 1/2 x of scaled/0.5: log errors +-log 2 are
  // balanced only at k = 0.5 (independent reference: the geometric mean of scaled/measured).
  std::vector<CalibrationSample> v(2);
  v[0].scaled_s = 1.0;
  v[0].measured_s = 4.0;  // scaled/measured = 0.25
  v[1].scaled_s = 1.0;
  v[1].measured_s = 1.0;  // 1.0
  Result<Calibration> c = fit_calibration(v, "h200", "cuda");
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->compute_scale, std::sqrt(0.25 * 1.0), 1e-6);  // the search's precision on a flat minimum
  EXPECT_NEAR(c->rms_log_error, std::log(2.0), 1e-6);
}

TEST(Calibration, CalibratedGpuDividesTheDeviceBoundTime) {
  const PresetRegistry reg = std::move(PresetRegistry::load(LLMPLAN_SOURCE_ROOT)).value();
  const ModelSpec m = *reg.model("gpt2-124m");
  ClusterSpec c = *reg.cluster_for_gpu("h200");
  c.nodes = 1;
  TrainingJob j;
  j.seq_len = 1024;
  j.global_batch = 64;
  ParallelPlan p;
  p.micro_batch = 16;
  p.grad_accum = 4;
  p.flash_attention = true;
  const StepTime base = estimate_time(m, c, j, p);
  Calibration cal;
  cal.device = c.gpu.name;
  cal.compute_scale = 0.5;
  ClusterSpec slow = c;
  slow.gpu = calibrated_gpu(c.gpu, cal);
  const StepTime t = estimate_time(m, slow, j, p);
  // Up to the fixed kernel-launch cost per GEMM (Efficiency::kernel_launch_s, 4 us), which
  // does not scale: about 1% of GPT-2's many small GEMMs here.
  EXPECT_NEAR(t.compute / (base.compute / 0.5), 1.0, 0.02);
  EXPECT_LT(t.compute, base.compute / 0.5);  // the unscaled launch cost is the whole difference
  EXPECT_NEAR(t.optimizer / (base.optimizer / 0.5), 1.0, 1e-9);
  const CalibrationSample s = calibration_sample(base, 1.0, "x");
  EXPECT_NEAR(calibrated_step_time(s, 0.5) / t.total, 1.0, 0.02);
}

TEST(Calibration, BadInputIsAClearError) {
  EXPECT_FALSE(fit_calibration({}, "h200", "cuda").ok());
  CalibrationSample bad;
  bad.label = "run 7";
  bad.measured_s = 0;
  bad.scaled_s = 1;
  Result<Calibration> r = fit_calibration({bad}, "h200", "cuda");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("run 7"), std::string::npos);
  Result<Calibration> j = calibration_from_json({{"schema", "llmplan.calibration"}, {"device", "h200"}, {"backend", "cuda"},
                                                 {"compute_scale", -1}},
                                                "cal.json");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("cal.json: field 'compute_scale'"), std::string::npos) << j.status().message();
  EXPECT_FALSE(read_calibration_file("/nonexistent/cal.json").ok());
  Result<Calibration> wrong_type = calibration_from_json(
      {{"schema", "llmplan.calibration"}, {"device", "h200"}, {"backend", "cuda"}, {"compute_scale", 0.5}, {"runs", "two"}},
      "cal.json");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("field 'runs'"), std::string::npos) << wrong_type.status().message();
  Calibration c;
  c.device = "h200";
  c.backend = "cuda";
  c.compute_scale = 0.6;
  c.runs = 2;
  Result<Calibration> back = calibration_from_json(calibration_to_json(c), "x");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->compute_scale, 0.6);
  EXPECT_EQ(back->device, "h200");
}

}  // namespace
}  // namespace llmplan
