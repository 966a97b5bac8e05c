#include "executor/cpu/norm.h"

#include <cmath>
#include <type_traits>

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::Carver;
using detail::carved_bytes;
using detail::load;
using detail::store;

namespace {
// Per-row statistics, recomputed from the saved input: mean (0 for RMSNorm) and rstd.
template <class A, class S>
void row_stats(const S* x, int64_t h, double eps, bool center, A* mean, A* rstd) {
  A m = 0;
  if (center) {
    for (int64_t j = 0; j < h; ++j) m += load(x[j]);
    m /= static_cast<A>(h);
  }
  A ss = 0;
  for (int64_t j = 0; j < h; ++j) {
    const A c = load(x[j]) - m;
    ss += c * c;
  }
  *mean = m;
  *rstd = A(1) / std::sqrt(ss / static_cast<A>(h) + static_cast<A>(eps));
}

// Where the weight-gradient sums of one backward call accumulate: straight into G when it
// is fp32/fp64, else into fp32 workspace that finish() rounds into G once.
template <class A, class G>
struct GradSums {
  G* dw;
  G* db;
  A* sw = nullptr;
  A* sb = nullptr;
  int64_t h;
  GradSums(G* dw_, G* db_, int64_t h_, std::span<std::byte> ws) : dw(dw_), db(db_), h(h_) {
    if constexpr (std::is_same_v<A, G>) {
      sw = dw;
      sb = db;
      (void)ws;
    } else {
      Carver c(ws);
      if (dw != nullptr) sw = c.take<A>(h);
      if (db != nullptr) sb = c.take<A>(h);
      for (int64_t j = 0; sw != nullptr && j < h; ++j) sw[j] = 0;
      for (int64_t j = 0; sb != nullptr && j < h; ++j) sb[j] = 0;
    }
  }
  void finish() {
    if constexpr (!std::is_same_v<A, G>) {
      for (int64_t j = 0; dw != nullptr && j < h; ++j) dw[j] = store<G>(load(dw[j]) + sw[j]);
      for (int64_t j = 0; db != nullptr && j < h; ++j) db[j] = store<G>(load(db[j]) + sb[j]);
    }
  }
};

// One backward for both norms (center: LayerNorm). With xhat = (x - mean) rstd, g = dy w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat))   [LayerNorm]
//   dx = rstd (g - xhat mean(g xhat))             [RMSNorm]
//   dw += sum_rows dy xhat,  db += sum_rows dy
template <class S, class G>
void norm_backward(const S* x, const S* w, const S* dy, S* dx, G* dw, G* db, int64_t n, int64_t h,
                   double eps, bool center, bool accumulate_dx, std::span<std::byte> ws) {
  using A = acc_t<S>;
  GradSums<A, G> sums(dw, db, h, ws);
  for (int64_t r = 0; r < n; ++r) {
    const S* xr = x + r * h;
    const S* dyr = dy + r * h;
    S* dxr = dx + r * h;
    A mean, rstd;
    row_stats(xr, h, eps, center, &mean, &rstd);
    A g_mean = 0, gx_mean = 0;
    for (int64_t j = 0; j < h; ++j) {
      const A xhat = (load(xr[j]) - mean) * rstd;
      const A d = load(dyr[j]);
      const A g = d * load(w[j]);
      g_mean += g;
      gx_mean += g * xhat;
      if (sums.sw != nullptr) sums.sw[j] += d * xhat;
      if (sums.sb != nullptr) sums.sb[j] += d;
    }
    g_mean = center ? g_mean / static_cast<A>(h) : A(0);
    gx_mean /= static_cast<A>(h);
    for (int64_t j = 0; j < h; ++j) {
      const A xhat = (load(xr[j]) - mean) * rstd;
      const A g = load(dyr[j]) * load(w[j]);
      A v = rstd * (g - g_mean - xhat * gx_mean);
      if (accumulate_dx) v += load(dxr[j]);
      dxr[j] = store<S>(v);
    }
  }
  sums.finish();
}
}  // namespace

int64_t norm_workspace_bytes(DType g, int64_t h) {
  return g == DType::f32 || g == DType::f64 ? 0 : 2 * carved_bytes<float>(h);
}

template <class S>
void layernorm_forward(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t h, double eps) {
  using A = acc_t<S>;
  for (int64_t r = 0; r < n; ++r) {
    A mean, rstd;
    row_stats(x + r * h, h, eps, true, &mean, &rstd);
    for (int64_t j = 0; j < h; ++j) {
      const A xhat = (load(x[r * h + j]) - mean) * rstd;
      y[r * h + j] = store<S>(xhat * load(w[j]) + (b != nullptr ? load(b[j]) : A(0)));
    }
  }
}

template <class S>
void rmsnorm_forward(const S* x, const S* w, S* y, int64_t n, int64_t h, double eps) {
  using A = acc_t<S>;
  for (int64_t r = 0; r < n; ++r) {
    A mean, rstd;
    row_stats(x + r * h, h, eps, false, &mean, &rstd);
    for (int64_t j = 0; j < h; ++j) y[r * h + j] = store<S>(load(x[r * h + j]) * rstd * load(w[j]));
  }
}

template <class S, class G>
void layernorm_backward(const S* x, const S* w, const S* dy, S* dx, G* dw, G* db, int64_t n,
                        int64_t h, double eps, bool accumulate_dx, std::span<std::byte> ws) {
  norm_backward(x, w, dy, dx, dw, db, n, h, eps, true, accumulate_dx, ws);
}

template <class S, class G>
void rmsnorm_backward(const S* x, const S* w, const S* dy, S* dx, G* dw, int64_t n, int64_t h,
                      double eps, bool accumulate_dx, std::span<std::byte> ws) {
  norm_backward<S, G>(x, w, dy, dx, dw, nullptr, n, h, eps, false, accumulate_dx, ws);
}

#define INST(S)                                                                                \
  template void layernorm_forward<S>(const S*, const S*, const S*, S*, int64_t, int64_t, double); \
  template void rmsnorm_forward<S>(const S*, const S*, S*, int64_t, int64_t, double);
LLMPLAN_FOR_STORAGE(INST)
#undef INST
#define INSTG(S, G)                                                                            \
  template void layernorm_backward<S, G>(const S*, const S*, const S*, S*, G*, G*, int64_t,    \
                                         int64_t, double, bool, std::span<std::byte>);         \
  template void rmsnorm_backward<S, G>(const S*, const S*, const S*, S*, G*, int64_t, int64_t, \
                                       double, bool, std::span<std::byte>);
LLMPLAN_FOR_STORAGE_GRAD(INSTG)
#undef INSTG

}  // namespace llmplan::exec::cpu
