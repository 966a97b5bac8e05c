// Nelder-Mead minimisation (Nelder & Mead 1965; coefficients 1, 2, 0.5, 0.5), for the
// planner's small fits: the time model's constants against published runs
// (planner/validate/validate.h) and a stack profile against recorded runs (planner/calibrate/calibration.h).
// Deterministic for a deterministic objective. Header-only: the objective is a template.
#pragma once

#include <algorithm>
#include <vector>

namespace llmplan {

// One Nelder-Mead run (coefficients 1, 2, 0.5, 0.5) from x0, first simplex one unit
// along each coordinate. Returns the best point; *best_f its objective.
template <class F>
inline std::vector<double> nelder_mead(const F& eval, std::vector<double> x0, int max_iter, double* best_f) {
  const int dim = static_cast<int>(x0.size());
  std::vector<std::vector<double>> simplex(dim + 1, x0);
  for (int k = 1; k <= dim; ++k) simplex[k][k - 1] += 1.0;
  std::vector<double> f(dim + 1);
  for (int k = 0; k <= dim; ++k) f[k] = eval(simplex[k]);
  for (int iter = 0; iter < max_iter; ++iter) {
    std::vector<int> order(dim + 1);
    for (int k = 0; k <= dim; ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return f[a] < f[b] || (f[a] == f[b] && a < b); });
    const int best = order[0], worst = order[dim], second = order[dim - 1];
    if (f[worst] - f[best] < 1e-7) break;
    std::vector<double> centroid(dim, 0.0);
    for (int k = 0; k <= dim; ++k)
      if (k != worst)
        for (int i = 0; i < dim; ++i) centroid[i] += simplex[k][i] / dim;
    auto along = [&](double t) {
      std::vector<double> x(dim);
      for (int i = 0; i < dim; ++i) x[i] = centroid[i] + t * (simplex[worst][i] - centroid[i]);
      return x;
    };
    const std::vector<double> xr = along(-1.0);
    const double fr = eval(xr);
    if (fr < f[best]) {
      const std::vector<double> xe = along(-2.0);
      const double fe = eval(xe);
      if (fe < fr) simplex[worst] = xe, f[worst] = fe;
      else simplex[worst] = xr, f[worst] = fr;
    } else if (fr < f[second]) {
      simplex[worst] = xr, f[worst] = fr;
    } else {
      const std::vector<double> xc = along(fr < f[worst] ? -0.5 : 0.5);
      const double fc = eval(xc);
      if (fc < std::min(fr, f[worst])) {
        simplex[worst] = xc, f[worst] = fc;
      } else {
        for (int k = 0; k <= dim; ++k) {
          if (k == best) continue;
          for (int i = 0; i < dim; ++i) simplex[k][i] = simplex[best][i] + 0.5 * (simplex[k][i] - simplex[best][i]);
          f[k] = eval(simplex[k]);
        }
      }
    }
  }
  const int best = static_cast<int>(std::min_element(f.begin(), f.end()) - f.begin());
  *best_f = f[best];
  return simplex[best];
}


}  // namespace llmplan
