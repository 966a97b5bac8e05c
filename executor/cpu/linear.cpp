#include "executor/cpu/linear.h"

#include <algorithm>
#include <type_traits>

#include "executor/cpu/kernel_util.h"

namespace llmplan::exec::cpu {
using detail::Carver;
using detail::carved_bytes;
using detail::convert;
using detail::gemm;
using detail::load;
using detail::store;

namespace {
template <class S> constexpr bool is_wide = std::is_same_v<S, float> || std::is_same_v<S, double>;

// y (n, out) += b (out) on every row.
template <class T, class B>
void add_bias(T* y, const B* b, int64_t n, int64_t out) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) y[i * out + j] += load(b[j]);
}

// 16-bit operands are widened to fp32 one tile at a time, so the workspace stays a few MiB
// whatever the layer's size (widening a whole 32000 x 4096 LM head took 500 MiB, far above
// the scratch the planner's GPU-shaped recipe predicts). Each tile product accumulates in an
// fp32 tile over the whole K dimension and is rounded into S once, so the numerics are
// those of one fp32 GEMM up to summation order. Re-widening costs about 1/kTileM + 1/kTileN
// of the GEMM's multiply-adds in conversions.
constexpr int64_t kTileM = 512, kTileN = 512, kTileK = 1024;

// dst (rows, cols), contiguous = src[r0.., c0..] of a row-major matrix with leading dim ld.
template <class S>
void widen_block(const S* src, int64_t ld, int64_t r0, int64_t rows, int64_t c0, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r) convert(src + (r0 + r) * ld + c0, dst + r * cols, cols);
}

// The operands of a tiled product C (m, n) (+)= op(A) op(B) over 16-bit row-major storage:
// op(A) is (m, k), stored (m, k) or, transposed, (k, m); likewise op(B) (k, n).
template <class S>
struct Operands16 {
  const S* a;
  bool ta;
  int64_t lda;
  const S* b;
  bool tb;
  int64_t ldb;
  int64_t m, n, k;
};

struct Tiles {
  float* a;  // (kTileM, kTileK) at most
  float* b;  // (kTileK, kTileN) at most
  float* c;  // (kTileM, kTileN) at most
};

Tiles carve_tiles(Carver& c, int64_t m, int64_t n, int64_t k) {
  const int64_t tm = std::min(m, kTileM), tn = std::min(n, kTileN), tk = std::min(k, kTileK);
  return {c.take<float>(tm * tk), c.take<float>(tk * tn), c.take<float>(tm * tn)};
}

int64_t tiles_bytes(int64_t m, int64_t n, int64_t k) {
  const int64_t tm = std::min(m, kTileM), tn = std::min(n, kTileN), tk = std::min(k, kTileK);
  return carved_bytes<float>(tm * tk) + carved_bytes<float>(tk * tn) + carved_bytes<float>(tm * tn);
}

// For every (i0, j0) tile of C: init(i0, mi, j0, nj, c) fills the fp32 tile (ld nj), the
// K-panels accumulate into it, then finish(i0, mi, j0, nj, c) stores it.
template <class S, class Init, class Finish>
void tiled_product(const Operands16<S>& p, const Tiles& t, Init init, Finish finish) {
  for (int64_t i0 = 0; i0 < p.m; i0 += kTileM) {
    const int64_t mi = std::min(kTileM, p.m - i0);
    for (int64_t j0 = 0; j0 < p.n; j0 += kTileN) {
      const int64_t nj = std::min(kTileN, p.n - j0);
      init(i0, mi, j0, nj, t.c);
      for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
        const int64_t kk = std::min(kTileK, p.k - k0);
        if (p.ta) widen_block(p.a, p.lda, k0, kk, i0, mi, t.a);  // tile (kk, mi)
        else widen_block(p.a, p.lda, i0, mi, k0, kk, t.a);       // tile (mi, kk)
        if (p.tb) widen_block(p.b, p.ldb, j0, nj, k0, kk, t.b);  // tile (nj, kk)
        else widen_block(p.b, p.ldb, k0, kk, j0, nj, t.b);       // tile (kk, nj)
        gemm(p.ta, p.tb, mi, nj, kk, 1.0f, t.a, p.ta ? mi : kk, t.b, p.tb ? kk : nj, 1.0f, t.c, nj);
      }
      finish(i0, mi, j0, nj, t.c);
    }
  }
}

// c (mi, nj) = 0, or = the 16-bit/fp32 matrix src's block when accumulating.
template <class T>
void load_tile(const T* src, int64_t ld, int64_t i0, int64_t mi, int64_t j0, int64_t nj, float* c) {
  for (int64_t i = 0; i < mi; ++i)
    for (int64_t j = 0; j < nj; ++j) c[i * nj + j] = load(src[(i0 + i) * ld + j0 + j]);
}
template <class T>
void store_tile(const float* c, T* dst, int64_t ld, int64_t i0, int64_t mi, int64_t j0, int64_t nj) {
  for (int64_t i = 0; i < mi; ++i) convert(c + i * nj, dst + (i0 + i) * ld + j0, nj);
}
void zero_tile(int64_t mi, int64_t nj, float* c) { std::fill(c, c + mi * nj, 0.0f); }
}  // namespace

int64_t linear_workspace_bytes(DType s, int64_t n, int64_t in, int64_t out) {
  if (s == DType::f32 || s == DType::f64) return 0;
  // The largest tile set of the three products (forward y; backward dw and dx) plus the
  // bias-gradient sums (out).
  const int64_t tiles = std::max({tiles_bytes(n, out, in), tiles_bytes(out, in, n), tiles_bytes(n, in, out)});
  return tiles + carved_bytes<float>(out);
}

template <class S>
void linear_forward(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out,
                    std::span<std::byte> ws) {
  if constexpr (is_wide<S>) {
    (void)ws;
    gemm(false, true, n, out, in, S(1), x, in, w, in, S(0), y, out);  // y = x w^T
    if (b != nullptr) add_bias(y, b, n, out);
  } else {
    Carver c(ws);
    const Tiles t = carve_tiles(c, n, out, in);
    tiled_product<S>({x, false, in, w, true, in, n, out, in}, t, [](int64_t, int64_t mi, int64_t, int64_t nj, float* ct) { zero_tile(mi, nj, ct); },
                     [&](int64_t i0, int64_t mi, int64_t j0, int64_t nj, float* ct) {
                       if (b != nullptr)
                         for (int64_t i = 0; i < mi; ++i)
                           for (int64_t j = 0; j < nj; ++j) ct[i * nj + j] += load(b[j0 + j]);
                       store_tile(ct, y, out, i0, mi, j0, nj);  // the one rounding of y
                     });
  }
}

template <class S, class G>
void linear_backward(const S* dy, const S* x, const S* w, S* dx, G* dw, G* db, int64_t n,
                     int64_t in, int64_t out, std::span<std::byte> ws) {
  if constexpr (is_wide<S>) {
    static_assert(std::is_same_v<S, G>);
    (void)ws;
    if (dw != nullptr) gemm(true, false, out, in, n, S(1), dy, out, x, in, S(1), dw, in);
    if (db != nullptr)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < out; ++j) db[j] += dy[i * out + j];
    if (dx != nullptr) gemm(false, false, n, in, out, S(1), dy, out, w, in, S(0), dx, in);
  } else {
    if (dw != nullptr) {  // dw (out, in) += dy^T x, accumulated in fp32, rounded once when G is 16-bit
      Carver c(ws);
      tiled_product<S>({dy, true, out, x, false, in, out, in, n}, carve_tiles(c, out, in, n),
                       [&](int64_t i0, int64_t mi, int64_t j0, int64_t nj, float* ct) { load_tile(dw, in, i0, mi, j0, nj, ct); },
                       [&](int64_t i0, int64_t mi, int64_t j0, int64_t nj, float* ct) { store_tile(ct, dw, in, i0, mi, j0, nj); });
    }
    if (db != nullptr) {
      Carver c(ws);
      float* dbf = c.take<float>(out);
      std::fill(dbf, dbf + out, 0.0f);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < out; ++j) dbf[j] += load(dy[i * out + j]);
      for (int64_t j = 0; j < out; ++j) db[j] = store<G>(load(db[j]) + dbf[j]);
    }
    if (dx != nullptr) {  // dx (n, in) = dy w
      Carver c(ws);
      tiled_product<S>({dy, false, out, w, false, in, n, in, out}, carve_tiles(c, n, in, out),
                       [](int64_t, int64_t mi, int64_t, int64_t nj, float* ct) { zero_tile(mi, nj, ct); },
                       [&](int64_t i0, int64_t mi, int64_t j0, int64_t nj, float* ct) { store_tile(ct, dx, in, i0, mi, j0, nj); });
    }
  }
}

#define INST(S)                                                                                \
  template void linear_forward<S>(const S*, const S*, const S*, S*, int64_t, int64_t, int64_t, \
                                  std::span<std::byte>);
LLMPLAN_FOR_STORAGE(INST)
#undef INST
#define INSTG(S, G)                                                                          \
  template void linear_backward<S, G>(const S*, const S*, const S*, S*, G*, G*, int64_t,     \
                                      int64_t, int64_t, std::span<std::byte>);
LLMPLAN_FOR_STORAGE_GRAD(INSTG)
#undef INSTG

}  // namespace llmplan::exec::cpu
