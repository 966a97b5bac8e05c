#include "executor/cpu/linear.h"

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

// acc (out) = column sums of dy (n, out).
template <class T>
void column_sums(const T* dy, T* acc, int64_t n, int64_t out) {
  for (int64_t j = 0; j < out; ++j) acc[j] = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) acc[j] += dy[i * out + j];
}
}  // namespace

int64_t linear_workspace_bytes(DType s, int64_t n, int64_t in, int64_t out) {
  if (s == DType::f32 || s == DType::f64) return 0;
  // forward: x (n, in), w (out, in), y (n, out); backward reuses the same three buffers
  // (x then dx; dw then w; dy) plus the bias-gradient sums (out).
  return carved_bytes<float>(n * in) + carved_bytes<float>(out * in) +
         carved_bytes<float>(n * out) + carved_bytes<float>(out);
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
    float* xf = c.take<float>(n * in);
    float* wf = c.take<float>(out * in);
    float* yf = c.take<float>(n * out);
    convert(x, xf, n * in);
    convert(w, wf, out * in);
    gemm(false, true, n, out, in, 1.0f, xf, in, wf, in, 0.0f, yf, out);
    if (b != nullptr) add_bias(yf, b, n, out);
    convert(yf, y, n * out);  // the one rounding of y
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
    Carver c(ws);
    float* buf_in = c.take<float>(n * in);    // x, then dx
    float* buf_w = c.take<float>(out * in);   // dw (16-bit grads), then w
    float* dyf = c.take<float>(n * out);
    float* dbf = c.take<float>(out);
    convert(dy, dyf, n * out);
    if (dw != nullptr) {
      convert(x, buf_in, n * in);
      if constexpr (std::is_same_v<G, float>) {
        gemm(true, false, out, in, n, 1.0f, dyf, out, buf_in, in, 1.0f, dw, in);
      } else {  // accumulate in fp32, round once into the 16-bit gradient
        convert(dw, buf_w, out * in);
        gemm(true, false, out, in, n, 1.0f, dyf, out, buf_in, in, 1.0f, buf_w, in);
        convert(buf_w, dw, out * in);
      }
    }
    if (db != nullptr) {
      column_sums(dyf, dbf, n, out);
      for (int64_t j = 0; j < out; ++j) db[j] = store<G>(load(db[j]) + dbf[j]);
    }
    if (dx != nullptr) {
      convert(w, buf_w, out * in);
      gemm(false, false, n, in, out, 1.0f, dyf, out, buf_w, in, 0.0f, buf_in, in);
      convert(buf_in, dx, n * in);
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
