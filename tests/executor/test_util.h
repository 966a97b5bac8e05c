// Shared helpers of the executor tests: a per-run random seed (printed on failure;
// LLMPLAN_TEST_SEED=<n> reproduces a run), random vectors, float64 central finite
// differences, and a gradient comparison that reports the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "executor/allocator.h"

namespace llmplan::exec::testing {

// The run's seed: LLMPLAN_TEST_SEED if set, else fresh per run.
inline uint64_t run_seed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* e = std::getenv("LLMPLAN_TEST_SEED")) return std::strtoull(e, nullptr, 10);
    return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  }();
  return seed;
}
// The seed of the current test: the run's seed mixed with the test's name.
inline uint64_t test_seed() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "";
  return run_seed() ^ std::hash<std::string>{}(name);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform(double lo = -1.0, double hi = 1.0) {
    return std::uniform_real_distribution<double>(lo, hi)(gen_);
  }
  int64_t integer(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  std::vector<double> vec(int64_t n, double lo = -1.0, double hi = 1.0) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = uniform(lo, hi);
    return v;
  }

 private:
  std::mt19937_64 gen_;
};

// d f / d x by central differences, x perturbed in place and restored. Step h is scaled by
// max(1, |x_i|).
inline std::vector<double> numeric_grad(std::vector<double>& x, const std::function<double()>& f,
                                        double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    const double step = h * std::max(1.0, std::abs(x0));
    x[i] = x0 + step;
    const double fp = f();
    x[i] = x0 - step;
    const double fm = f();
    x[i] = x0;
    g[i] = (fp - fm) / (2 * step);
  }
  return g;
}

// sum_i w_i y_i: the scalar whose gradient with respect to y is w.
inline double dot(const std::vector<double>& w, const std::vector<double>& y) {
  EXPECT_EQ(w.size(), y.size());
  if (w.size() != y.size()) return std::nan("");
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) s += w[i] * y[i];
  return s;
}

// Relative error ||a - n|| / (||a|| + ||n||) over the whole gradient, with the worst element.
inline ::testing::AssertionResult grads_match(const std::string& what, const std::vector<double>& a,
                                              const std::vector<double>& n, double tol) {
  if (a.size() != n.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  double diff2 = 0, a2 = 0, n2 = 0, worst = -1;
  size_t wi = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - n[i];
    diff2 += d * d;
    a2 += a[i] * a[i];
    n2 += n[i] * n[i];
    const double e = std::abs(d) / std::max(1e-12, std::abs(a[i]) + std::abs(n[i]));
    if (e > worst) worst = e, wi = i;
  }
  const double rel = std::sqrt(diff2) / std::max(1e-300, std::sqrt(a2) + std::sqrt(n2));
  std::ostringstream m;
  m.precision(17);
  m << what << ": relative error " << rel << " (tolerance " << tol << "); worst element [" << wi
    << "] analytic " << a[wi] << " vs reference " << n[wi] << "; rerun with LLMPLAN_TEST_SEED=" << run_seed();
  if (!(rel <= tol) || (a2 == 0 && n2 == 0 && a.size() > 0))
    return ::testing::AssertionFailure() << m.str() << (a2 == 0 && n2 == 0 ? " (all zero)" : "");
  return ::testing::AssertionSuccess() << m.str();
}

// Convert between double test vectors and a storage type via a callable per element.
template <class T, class F>
std::vector<T> convert_vec(const std::vector<double>& v, F f) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f(v[i]);
  return out;
}

// Op workspace from a CpuAllocator (64-byte aligned, as the ops require).
class Workspace {
 public:
  explicit Workspace(int64_t bytes) : block_(std::move(alloc_.allocate(bytes, Category::workspace)).value()) {}
  std::span<std::byte> span() const {
    return {static_cast<std::byte*>(block_.data()), static_cast<size_t>(block_.bytes())};
  }

 private:
  CpuAllocator alloc_;
  Block block_;
};

}  // namespace llmplan::exec::testing
