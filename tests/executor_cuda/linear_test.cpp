// cuBLASLt GEMMs and the linear layer against the CPU ops (and a naive double-precision
// product for the general GEMM's transposes, strides, alpha and beta).
#include <gtest/gtest.h>

#include <vector>

#include "cuda_test_util.h"
#include "executor/cpu/linear.h"
#include "executor/cuda/linear.h"

namespace llmplan::exec::cuda::testing {
namespace {

// Runs forward and backward of one linear layer on both devices and compares y, dx, dw, db.
template <class S, class G>
void check_linear(int64_t n, int64_t in, int64_t out, bool bias, bool want_dx, double tol_s, double tol_g) {
  Rng rng(test_seed() ^ static_cast<uint64_t>(n * 131 + in * 7 + out + bias));
  const std::vector<S> x = random_vec<S>(rng, n * in), w = random_vec<S>(rng, out * in, -0.5, 0.5);
  const std::vector<S> b = random_vec<S>(rng, out), dy = random_vec<S>(rng, n * out);
  std::vector<G> dw = random_vec<G>(rng, out * in), db = random_vec<G>(rng, out);  // accumulated onto

  // CPU reference.
  Workspace cws(cpu::linear_workspace_bytes(dtype_of<S>, n, in, out));
  std::vector<S> y_cpu(static_cast<size_t>(n * out)), dx_cpu(static_cast<size_t>(n * in));
  std::vector<G> dw_cpu = dw, db_cpu = db;
  cpu::linear_forward<S>(x.data(), w.data(), bias ? b.data() : nullptr, y_cpu.data(), n, in, out, cws.span());
  cpu::linear_backward<S, G>(dy.data(), x.data(), w.data(), want_dx ? dx_cpu.data() : nullptr, dw_cpu.data(),
                             bias ? db_cpu.data() : nullptr, n, in, out, cws.span());

  // GPU, outputs poisoned.
  Dev<S> d_x(x), d_w(w), d_b(b), d_dy(dy), d_y(n * out), d_dx(n * in);
  Dev<G> d_dw(dw), d_db(db);
  d_y.poison();
  d_dx.poison();
  DevWorkspace ws(linear_workspace_bytes(n, out));
  check(linear_forward<S>(ctx(), d_x.p(), d_w.p(), bias ? d_b.p() : nullptr, d_y.p(), n, in, out));
  check(linear_backward<S, G>(ctx(), d_dy.p(), d_x.p(), d_w.p(), want_dx ? d_dx.p() : nullptr, d_dw.p(),
                              bias ? d_db.p() : nullptr, n, in, out, ws.span()));
  check(ctx().synchronize());
  EXPECT_TRUE(close("y", d_y.download(), y_cpu, tol_s));
  if (want_dx) {
    EXPECT_TRUE(close("dx", d_dx.download(), dx_cpu, tol_s));
  }
  EXPECT_TRUE(close("dw", d_dw.download(), dw_cpu, tol_g));
  EXPECT_TRUE(close("db", d_db.download(), db_cpu, tol_g));  // unchanged without bias
}

template <class T>
class CudaLinear : public ::testing::Test {};
TYPED_TEST_SUITE(CudaLinear, testing::StorageGradTypes);

TYPED_TEST(CudaLinear, AlignedShapesMatchCpu) {
  using S = typename TypeParam::S;
  using G = typename TypeParam::G;
  check_linear<S, G>(256, 192, 128, true, true, kTol<S>, kTol<G>);
  check_linear<S, G>(64, 128, 320, false, false, kTol<S>, kTol<G>);  // no bias, first layer (no dx)
}

TYPED_TEST(CudaLinear, OddShapesMatchCpu) {
  using S = typename TypeParam::S;
  using G = typename TypeParam::G;
  check_linear<S, G>(37, 70, 45, true, true, kTol<S>, kTol<G>);
  check_linear<S, G>(1, 9, 3, true, true, kTol<S>, kTol<G>);
}

TEST(CudaLinearTf32, Fp32WithTf32MatchesCpuWithinTf32Tolerance) {
  struct Tf32On {
    Tf32On() { ctx().set_tf32(true); }
    ~Tf32On() { ctx().set_tf32(false); }
  } on;
  check_linear<float, float>(256, 192, 128, true, true, testing::kTolTf32, testing::kTolTf32);
}

TEST(CudaLinear, LargeBf16LayerMatchesCpu) {
  check_linear<bf16_t, float>(512, 768, 1024, true, true, kTol<bf16_t>, kTol<float>);
}

// C = alpha op(A) op(B) + beta C for every transpose pair, with batch strides and padded
// leading dimensions, against a naive double product of the same (rounded) inputs.
template <class T>
class CudaGemm : public ::testing::Test {};
TYPED_TEST_SUITE(CudaGemm, testing::StorageTypes);

TYPED_TEST(CudaGemm, TransposesStridesAlphaBetaMatchNaive) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t m = 24, n = 40, k = 32, batch = 3;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
      const int64_t lda = ac + 8, ldb = bc + 8, ldc = n + 8;
      const int64_t sa = ar * lda, sb = br * ldb, sc = m * ldc;
      const std::vector<S> A = random_vec<S>(rng, batch * sa), B = random_vec<S>(rng, batch * sb);
      const std::vector<float> C0 = random_vec<float>(rng, batch * sc);
      const float alpha = 0.75f, beta = 0.5f;
      std::vector<double> ref(C0.begin(), C0.end());
      for (int64_t q = 0; q < batch; ++q)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p) {
              const double a = testing::wide(A[q * sa + (ta ? p * lda + i : i * lda + p)]);
              const double b = testing::wide(B[q * sb + (tb ? j * ldb + p : p * ldb + j)]);
              acc += a * b;
            }
            double& c = ref[q * sc + i * ldc + j];
            c = alpha * acc + beta * c;
          }
      Dev<S> dA(A), dB(B);
      Dev<float> dC(C0);
      GemmArgs g;
      g.ta = ta;
      g.tb = tb;
      g.m = m;
      g.n = n;
      g.k = k;
      g.alpha = alpha;
      g.beta = beta;
      g.a = dA.p();
      g.lda = lda;
      g.b = dB.p();
      g.ldb = ldb;
      g.c = dC.p();
      g.ldc = ldc;
      g.a_type = g.b_type = dtype_of<S>;
      g.c_type = DType::f32;
      g.batch = batch;
      g.stride_a = sa;
      g.stride_b = sb;
      g.stride_c = sc;
      check(gemm(ctx(), g));
      const std::string what = "C ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
      EXPECT_TRUE(close(what, dC.download(), ref, 1e-5)) << "fp32 accumulation of exact products";
    }
  }
}

}  // namespace
}  // namespace llmplan::exec::cuda::testing
