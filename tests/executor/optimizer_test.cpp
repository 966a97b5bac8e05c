// Optimizer steps against values computed by hand (50-digit decimal arithmetic for AdamW),
// and gradient-norm clipping over mixed-dtype gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "executor/cpu/optimizer.h"
#include "executor/dtype.h"
#include "test_util.h"

namespace llmplan::exec {
namespace {

TEST(AdamW, TwoStepsMatchHandComputedValues) {
  cpu::AdamWOptions o;
  o.lr = 0.1;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  o.weight_decay = 0.01;
  double p = 1.0, m = 0.0, v = 0.0;
  double g = 0.5;
  cpu::adamw_step<double, double>(&p, &g, &m, &v, 1, o, 1);
  // p = 1 (1 - 0.1 * 0.01) - 0.1 * 0.5 / (sqrt(0.25) + 1e-8); m = 0.05, v = 0.00025
  EXPECT_NEAR(p, 0.89900000199999996000000079999998, 1e-15);
  EXPECT_NEAR(m, 0.05, 1e-16);
  EXPECT_NEAR(v, 0.00025, 1e-17);
  g = -0.25;
  cpu::adamw_step<double, double>(&p, &g, &m, &v, 1, o, 2);
  EXPECT_NEAR(p, 0.87146729870584616259937640206535, 1e-15);
  EXPECT_NEAR(m, 0.02, 1e-16);
  EXPECT_NEAR(v, 0.00031225, 1e-17);
}

TEST(AdamW, FloatMasterWith16BitGradsAndGradScale) {
  cpu::AdamWOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  // Gradient 0.5 stored as bf16 2.0 with grad_scale 0.25 (e.g. 1 / loss scale).
  float p = 1.0f, m = 0.0f, v = 0.0f;
  const bf16_t g = float_to_bf16(2.0f);
  cpu::adamw_step<float, bf16_t>(&p, &g, &m, &v, 1, o, 1, 0.25);
  EXPECT_NEAR(p, 0.899000002, 1e-6);
  float p16 = 1.0f, m16 = 0.0f, v16 = 0.0f;
  const f16_t h = float_to_f16(0.5f);
  cpu::adamw_step<float, f16_t>(&p16, &h, &m16, &v16, 1, o, 1);
  EXPECT_EQ(p16, p);
}

TEST(Sgd, MomentumAndWeightDecayTwoSteps) {
  cpu::SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.1;
  double p = 1.0, buf = 0.0;
  double g = 0.5;
  cpu::sgd_step<double, double>(&p, &g, &buf, 1, o);
  EXPECT_NEAR(buf, 0.6, 1e-16);  // 0.5 + 0.1 * 1
  EXPECT_NEAR(p, 0.94, 1e-16);
  g = -0.25;
  cpu::sgd_step<double, double>(&p, &g, &buf, 1, o);
  EXPECT_NEAR(buf, 0.384, 1e-16);  // 0.9 * 0.6 + (-0.25 + 0.1 * 0.94)
  EXPECT_NEAR(p, 0.9016, 1e-16);
}

TEST(GradClip, GlobalNormOverMixedDtypesAndScaling) {
  std::vector<float> a = {3.0f, 4.0f};
  std::vector<bf16_t> b = {float_to_bf16(12.0f)};
  std::vector<double> c = {0.0};
  std::vector<f16_t> d = {float_to_f16(0.0f)};
  const std::vector<cpu::GradRef> grads = {
      {a.data(), 2, DType::f32}, {b.data(), 1, DType::bf16}, {c.data(), 1, DType::f64}, {d.data(), 1, DType::f16}};
  EXPECT_EQ(cpu::global_grad_norm(grads), 13.0);
  EXPECT_EQ(cpu::clip_factor(13.0, 20.0), 1.0);
  EXPECT_EQ(cpu::clip_factor(std::nan(""), 1.0), 1.0);

  const double norm = cpu::clip_grad_norm(grads, 6.5);
  EXPECT_EQ(norm, 13.0);
  const double f = 6.5 / (13.0 + 1e-6);
  EXPECT_FLOAT_EQ(a[0], static_cast<float>(3.0 * f));
  EXPECT_FLOAT_EQ(a[1], static_cast<float>(4.0 * f));
  EXPECT_EQ(b[0].bits, float_to_bf16(static_cast<float>(12.0 * f)).bits);
  EXPECT_NEAR(cpu::global_grad_norm(grads), 6.5, 0.03);  // bf16 rounding of the 12

  const double unchanged = cpu::clip_grad_norm(grads, 100.0);
  EXPECT_FLOAT_EQ(a[0], static_cast<float>(3.0 * f));
  EXPECT_NEAR(unchanged, 6.5, 0.03);
}

}  // namespace
}  // namespace llmplan::exec
