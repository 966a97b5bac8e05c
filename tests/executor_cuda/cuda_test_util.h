// Helpers of the CUDA op tests: the process-wide context (made by main.cpp once a device
// was found), device arrays that are filled from host vectors or poisoned with NaN bytes,
// random inputs in every storage type, and the comparison of a GPU result with the CPU
// op's: relative norm error ||gpu - cpu|| / ||cpu|| within a per-dtype tolerance, after
// checking that every GPU element is finite -- so an element the op never wrote (still
// poison) or a NaN fails, whatever the tolerance.
//
// Seeds: the run's seed is printed by main (LLMPLAN_TEST_SEED=<n> reproduces a run, as in
// tests/executor); each test mixes in its own name.
// A failed CUDA call inside a helper throws, which GoogleTest reports as the test's failure.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../executor/test_util.h"  // run_seed, test_seed, Rng, Workspace
#include "executor/cuda/context.h"
#include "executor/dtype.h"
#include "executor/tensor.h"

namespace llmplan::exec::cuda::testing {
using exec::testing::Rng;
using exec::testing::run_seed;
using exec::testing::test_seed;
using exec::testing::Workspace;

extern CudaContext* g_context;  // main.cpp
inline CudaContext& ctx() { return *g_context; }

inline void check(const Status& s) {
  if (!s) throw std::runtime_error(s.message());
}

// Host value of any element type, widened to double.
inline double wide(float x) { return x; }
inline double wide(double x) { return x; }
inline double wide(bf16_t x) { return bf16_to_float(x); }
inline double wide(f16_t x) { return f16_to_float(x); }
inline double wide(uint8_t x) { return x; }
inline double wide(int32_t x) { return x; }

template <class S> S narrow(double x);
template <> inline float narrow<float>(double x) { return static_cast<float>(x); }
template <> inline bf16_t narrow<bf16_t>(double x) { return float_to_bf16(static_cast<float>(x)); }
template <> inline f16_t narrow<f16_t>(double x) { return float_to_f16(static_cast<float>(x)); }

// n uniform values in [lo, hi), rounded to S.
template <class S>
std::vector<S> random_vec(Rng& rng, int64_t n, double lo = -1.0, double hi = 1.0) {
  std::vector<S> v(static_cast<size_t>(n));
  for (S& x : v) x = narrow<S>(rng.uniform(lo, hi));
  return v;
}

// A device array of n elements of T from the context's allocator (a Tensor: counted under
// `c`, freed on destruction).
template <class T>
class Dev {
 public:
  explicit Dev(int64_t n, Category c = Category::activations) : n_(n) {
    Result<Tensor> t = Tensor::empty(ctx().allocator(), Shape{n}, dtype_of<T>, c, "test");
    check(t.status());
    t_ = std::move(t).value();
  }
  explicit Dev(const std::vector<T>& host, Category c = Category::activations) : Dev(static_cast<int64_t>(host.size()), c) {
    upload(host);
  }
  T* p() const { return static_cast<T*>(t_.raw()); }
  int64_t n() const { return n_; }
  void upload(const std::vector<T>& host) {
    check(copy_to_device(ctx(), p(), host.data(), n_ * static_cast<int64_t>(sizeof(T))));
  }
  std::vector<T> download() const {
    std::vector<T> host(static_cast<size_t>(n_));
    check(copy_to_host(ctx(), host.data(), p(), n_ * static_cast<int64_t>(sizeof(T))));
    return host;
  }
  // Every byte 0xFF: NaN in f32, bf16 and f16; 255 in u8, -1 in i32.
  void poison() { check(fill_bytes(ctx(), p(), 0xFF, n_ * static_cast<int64_t>(sizeof(T)))); }

 private:
  int64_t n_;
  Tensor t_;
};

// Device workspace of `bytes` (Category::workspace), as a span for the ops.
class DevWorkspace {
 public:
  explicit DevWorkspace(int64_t bytes) : d_(std::max<int64_t>(bytes, 1), Category::workspace), bytes_(bytes) {}
  std::span<std::byte> span() const { return {reinterpret_cast<std::byte*>(d_.p()), static_cast<size_t>(bytes_)}; }

 private:
  Dev<uint8_t> d_;
  int64_t bytes_;
};

// Tolerances on the relative norm error against the CPU op on the same inputs: fp32 ~ a
// few roundings; 16-bit outputs differ from the CPU's by at most an ulp or so per element
// (bf16 2^-8, fp16 2^-11 relative); TF32 GEMMs round their inputs to 10 mantissa bits.
template <class S> constexpr double kTol = std::is_same_v<S, float> ? 1e-5 : std::is_same_v<S, bf16_t> ? 1e-2 : 5e-3;
inline constexpr double kTolTf32 = 3e-3;

// gpu against cpu: every gpu element finite, relative norm error within tol.
template <class A, class B>
::testing::AssertionResult close(const std::string& what, const std::vector<A>& gpu, const std::vector<B>& cpu,
                                 double tol) {
  std::ostringstream m;
  m.precision(9);
  if (gpu.size() != cpu.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  double d2 = 0, c2 = 0, worst = -1;
  size_t wi = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double g = wide(gpu[i]), c = wide(cpu[i]);
    if (!std::isfinite(g) || !std::isfinite(c)) {
      return ::testing::AssertionFailure()
             << what << ": element " << i << " is not finite (gpu " << g << ", cpu " << c
             << "): unwritten (poison) or NaN; seed " << run_seed();
    }
    d2 += (g - c) * (g - c);
    c2 += c * c;
    if (std::abs(g - c) > worst) worst = std::abs(g - c), wi = i;
  }
  const double rel = c2 > 0 ? std::sqrt(d2 / c2) : std::sqrt(d2);
  m << what << ": relative norm error " << rel << " (tolerance " << tol << ", " << gpu.size()
    << " elements); worst [" << wi << "] gpu " << (gpu.empty() ? 0.0 : wide(gpu[wi])) << " cpu "
    << (cpu.empty() ? 0.0 : wide(cpu[wi])) << "; LLMPLAN_TEST_SEED=" << run_seed();
  if (!(rel <= tol)) return ::testing::AssertionFailure() << m.str();
  return ::testing::AssertionSuccess() << m.str();
}

// Exact equality of every element (masks, casts, ids).
template <class T>
::testing::AssertionResult same(const std::string& what, const std::vector<T>& gpu, const std::vector<T>& cpu) {
  if (gpu.size() != cpu.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure() << what << ": element " << i << " differs (gpu " << wide(gpu[i])
                                           << ", cpu " << wide(cpu[i]) << "); LLMPLAN_TEST_SEED=" << run_seed();
    }
  }
  return ::testing::AssertionSuccess();
}

// Storage and (storage, gradient) type lists of the typed tests.
template <class S_, class G_> struct SG {
  using S = S_;
  using G = G_;
};
using StorageTypes = ::testing::Types<float, bf16_t, f16_t>;
using StorageGradTypes = ::testing::Types<SG<float, float>, SG<bf16_t, bf16_t>, SG<bf16_t, float>, SG<f16_t, f16_t>,
                                          SG<f16_t, float>>;

}  // namespace llmplan::exec::cuda::testing
