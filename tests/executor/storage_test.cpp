// 16-bit storage (bf16, fp16) with fp32 math: every op run on rounded inputs agrees with
// the fp32 op run on the same (rounded) values, up to the rounding of its outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "executor/cpu/ops.h"
#include "test_util.h"

namespace llmplan::exec {
namespace {
using testing::grads_match;
using testing::Rng;
using testing::test_seed;
using testing::Workspace;
using Vec = std::vector<double>;

template <class S> S to16(float x);
template <> bf16_t to16<bf16_t>(float x) { return float_to_bf16(x); }
template <> f16_t to16<f16_t>(float x) { return float_to_f16(x); }
float to32(bf16_t x) { return bf16_to_float(x); }
float to32(f16_t x) { return f16_to_float(x); }

// The same random values in both precisions: s is rounded, f holds exactly s's values.
template <class S>
struct Pair {
  std::vector<S> s;
  std::vector<float> f;
  Pair(Rng& rng, int64_t n, double lo = -1, double hi = 1) {
    for (int64_t i = 0; i < n; ++i) {
      s.push_back(to16<S>(static_cast<float>(rng.uniform(lo, hi))));
      f.push_back(to32(s.back()));
    }
  }
  Pair(int64_t n, float value) : s(static_cast<size_t>(n), to16<S>(value)), f(static_cast<size_t>(n), to32(to16<S>(value))) {}
};

template <class T> Vec widen(const std::vector<T>& v) {
  Vec out;
  for (const T& x : v) {
    if constexpr (std::is_same_v<T, float>) {
      out.push_back(x);
    } else {
      out.push_back(to32(x));
    }
  }
  return out;
}

// Output tolerance: a few roundings of the 16-bit format (bf16 8 mantissa bits, fp16 11).
template <class S> constexpr double kTol = std::is_same_v<S, bf16_t> ? 1e-2 : 2e-3;

template <class S>
class Storage16 : public ::testing::Test {};
using Types16 = ::testing::Types<bf16_t, f16_t>;
TYPED_TEST_SUITE(Storage16, Types16);

// The 16-bit linear layer (fp32 tiles, one rounding per output) against the fp32 layer on
// the same rounded operands: y, dx, and dw/db accumulated onto existing gradients, both in
// 16 bits and in fp32 ("main grads"; fp32 sums, so only the summation order differs).
template <class S>
void expect_linear16_matches_fp32(int64_t n, int64_t in, int64_t out) {
  Rng rng(test_seed());
  Workspace ws(cpu::linear_workspace_bytes(dtype_of<S>, n, in, out));
  Pair<S> x(rng, n * in), w(rng, out * in), b(rng, out), dy(rng, n * out);

  std::vector<S> y(n * out);
  std::vector<float> yf(n * out);
  cpu::linear_forward<S>(x.s.data(), w.s.data(), b.s.data(), y.data(), n, in, out, ws.span());
  cpu::linear_forward<float>(x.f.data(), w.f.data(), b.f.data(), yf.data(), n, in, out, {});
  EXPECT_TRUE(grads_match("y", widen(y), widen(yf), kTol<S>));

  Pair<S> dw16(rng, out * in), db16(rng, out);  // accumulate onto existing gradients
  std::vector<float> dw32 = dw16.f, db32 = db16.f, dwf = dw16.f, dbf = db16.f;
  std::vector<S> dx(n * in);
  std::vector<float> dxf(n * in);
  cpu::linear_backward<S, S>(dy.s.data(), x.s.data(), w.s.data(), dx.data(), dw16.s.data(),
                             db16.s.data(), n, in, out, ws.span());
  cpu::linear_backward<float, float>(dy.f.data(), x.f.data(), w.f.data(), dxf.data(), dwf.data(),
                                     dbf.data(), n, in, out, {});
  EXPECT_TRUE(grads_match("dx", widen(dx), widen(dxf), kTol<S>));
  EXPECT_TRUE(grads_match("dw (16-bit)", widen(dw16.s), widen(dwf), kTol<S>));
  EXPECT_TRUE(grads_match("db (16-bit)", widen(db16.s), widen(dbf), kTol<S>));

  cpu::linear_backward<S, float>(dy.s.data(), x.s.data(), w.s.data(), nullptr, dw32.data(),
                                 db32.data(), n, in, out, ws.span());
  EXPECT_TRUE(grads_match("dw (fp32)", widen(dw32), widen(dwf), 1e-5));
  EXPECT_TRUE(grads_match("db (fp32)", widen(db32), widen(dbf), 1e-5));
}

TYPED_TEST(Storage16, LinearWith16BitAndFp32Grads) {
  EXPECT_EQ(cpu::linear_workspace_bytes(DType::f32, 6, 10, 5), 0);
  expect_linear16_matches_fp32<TypeParam>(6, 10, 5);
}

// Larger than the CPU's fp32 tiles (512 x 512 x 1024) with remainders in every dimension;
// the workspace is bounded by the tiles, not the layer.
TYPED_TEST(Storage16, LinearLargerThanItsTiles) {
  const DType dt = dtype_of<TypeParam>;
  const int64_t n = 530, in = 1100, out = 520;
  const int64_t ws_bytes = cpu::linear_workspace_bytes(dt, n, in, out);
  EXPECT_EQ(ws_bytes, cpu::linear_workspace_bytes(dt, 8 * n, 8 * in, out));
  EXPECT_LT(ws_bytes, int64_t{6} << 20);  // 5 MiB of tiles and the bias sums
  expect_linear16_matches_fp32<TypeParam>(n, in, out);
}

TYPED_TEST(Storage16, Norms) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t n = 5, h = 24;
  Workspace ws(cpu::norm_workspace_bytes(dtype_of<S>, h));
  EXPECT_EQ(cpu::norm_workspace_bytes(DType::f32, h), 0);
  Pair<S> x(rng, n * h, -2, 3), w(rng, h, 0.5, 1.5), b(rng, h), dy(rng, n * h);
  std::vector<S> y(n * h), dx(n * h);
  std::vector<float> yf(n * h), dxf(n * h);

  cpu::layernorm_forward<S>(x.s.data(), w.s.data(), b.s.data(), y.data(), n, h, 1e-5);
  cpu::layernorm_forward<float>(x.f.data(), w.f.data(), b.f.data(), yf.data(), n, h, 1e-5);
  EXPECT_TRUE(grads_match("layernorm y", widen(y), widen(yf), kTol<S>));
  Pair<S> dw(h, 0.0f), db(h, 0.0f);
  std::vector<float> dwf(h, 0.0f), dbf(h, 0.0f), dw32(h, 0.0f);
  cpu::layernorm_backward<S, S>(x.s.data(), w.s.data(), dy.s.data(), dx.data(), dw.s.data(),
                                db.s.data(), n, h, 1e-5, false, ws.span());
  cpu::layernorm_backward<float, float>(x.f.data(), w.f.data(), dy.f.data(), dxf.data(), dwf.data(),
                                        dbf.data(), n, h, 1e-5, false, {});
  EXPECT_TRUE(grads_match("layernorm dx", widen(dx), widen(dxf), kTol<S>));
  EXPECT_TRUE(grads_match("layernorm dw", widen(dw.s), widen(dwf), kTol<S>));
  EXPECT_TRUE(grads_match("layernorm db", widen(db.s), widen(dbf), kTol<S>));

  cpu::rmsnorm_forward<S>(x.s.data(), w.s.data(), y.data(), n, h, 1e-6);
  cpu::rmsnorm_forward<float>(x.f.data(), w.f.data(), yf.data(), n, h, 1e-6);
  EXPECT_TRUE(grads_match("rmsnorm y", widen(y), widen(yf), kTol<S>));
  std::fill(dwf.begin(), dwf.end(), 0.0f);
  cpu::rmsnorm_backward<S, float>(x.s.data(), w.s.data(), dy.s.data(), dx.data(), dw32.data(), n, h,
                                  1e-6, false, ws.span());
  cpu::rmsnorm_backward<float, float>(x.f.data(), w.f.data(), dy.f.data(), dxf.data(), dwf.data(),
                                      n, h, 1e-6, false, {});
  EXPECT_TRUE(grads_match("rmsnorm dx", widen(dx), widen(dxf), kTol<S>));
  EXPECT_TRUE(grads_match("rmsnorm dw (fp32)", widen(dw32), widen(dwf), 1e-6));
}

TYPED_TEST(Storage16, ElementwiseOps) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t n = 300;
  Pair<S> x(rng, n, -4, 4), u(rng, n), dy(rng, n);
  std::vector<S> y(n), d1(n), d2(n);
  std::vector<float> yf(n), d1f(n), d2f(n);

  cpu::gelu_forward<S>(x.s.data(), y.data(), n);
  cpu::gelu_forward<float>(x.f.data(), yf.data(), n);
  EXPECT_TRUE(grads_match("gelu y", widen(y), widen(yf), kTol<S>));
  cpu::gelu_backward<S>(x.s.data(), dy.s.data(), d1.data(), n);
  cpu::gelu_backward<float>(x.f.data(), dy.f.data(), d1f.data(), n);
  EXPECT_TRUE(grads_match("gelu dx", widen(d1), widen(d1f), kTol<S>));

  cpu::swiglu_forward<S>(x.s.data(), u.s.data(), y.data(), n);
  cpu::swiglu_forward<float>(x.f.data(), u.f.data(), yf.data(), n);
  EXPECT_TRUE(grads_match("swiglu y", widen(y), widen(yf), kTol<S>));
  cpu::swiglu_backward<S>(x.s.data(), u.s.data(), dy.s.data(), d1.data(), d2.data(), n);
  cpu::swiglu_backward<float>(x.f.data(), u.f.data(), dy.f.data(), d1f.data(), d2f.data(), n);
  EXPECT_TRUE(grads_match("swiglu dgate", widen(d1), widen(d1f), kTol<S>));
  EXPECT_TRUE(grads_match("swiglu dup", widen(d2), widen(d2f), kTol<S>));

  std::vector<uint8_t> m16(n), m32(n);
  cpu::dropout_forward<S>(x.s.data(), y.data(), m16.data(), n, 0.25, 42);
  cpu::dropout_forward<float>(x.f.data(), yf.data(), m32.data(), n, 0.25, 42);
  EXPECT_EQ(m16, m32);  // the mask does not depend on the storage type
  EXPECT_TRUE(grads_match("dropout y", widen(y), widen(yf), kTol<S>));
  cpu::dropout_backward<S>(dy.s.data(), m16.data(), d1.data(), n, 0.25);
  cpu::dropout_backward<float>(dy.f.data(), m32.data(), d1f.data(), n, 0.25);
  EXPECT_TRUE(grads_match("dropout dx", widen(d1), widen(d1f), kTol<S>));

  cpu::add<S>(x.s.data(), u.s.data(), y.data(), n);
  cpu::add<float>(x.f.data(), u.f.data(), yf.data(), n);
  EXPECT_TRUE(grads_match("add", widen(y), widen(yf), kTol<S>));
}

TYPED_TEST(Storage16, EmbeddingRopeAndCrossEntropy) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t vocab = 11, h = 8, n = 7, heads = 2;
  std::vector<int32_t> ids = {1, 4, 4, 10, 0, 4, 7};
  Pair<S> table(rng, vocab * h), dout(rng, n * h);
  std::vector<S> e(n * h);
  std::vector<float> ef(n * h);
  cpu::embedding_forward<S>(ids.data(), table.s.data(), e.data(), n, h);
  cpu::embedding_forward<float>(ids.data(), table.f.data(), ef.data(), n, h);
  EXPECT_EQ(widen(e), widen(ef));  // a copy: exact
  std::vector<float> dt32(vocab * h, 0.0f), dtf(vocab * h, 0.0f);
  cpu::embedding_backward<S, float>(ids.data(), dout.s.data(), dt32.data(), n, h);
  cpu::embedding_backward<float, float>(ids.data(), dout.f.data(), dtf.data(), n, h);
  EXPECT_EQ(dt32, dtf);

  std::vector<int32_t> pos = {0, 1, 2, 3, 0, 1, 2};
  Pair<S> x(rng, n * heads * h);
  std::vector<S> r(n * heads * h);
  std::vector<float> rf(n * heads * h);
  cpu::rope_forward<S>(x.s.data(), pos.data(), r.data(), n, heads, h);
  cpu::rope_forward<float>(x.f.data(), pos.data(), rf.data(), n, heads, h);
  EXPECT_TRUE(grads_match("rope y", widen(r), widen(rf), kTol<S>));
  cpu::rope_backward<S>(x.s.data(), pos.data(), r.data(), n, heads, h);
  cpu::rope_backward<float>(x.f.data(), pos.data(), rf.data(), n, heads, h);
  EXPECT_TRUE(grads_match("rope dx", widen(r), widen(rf), kTol<S>));

  Pair<S> logits(rng, n * vocab, -4, 4);
  std::vector<int32_t> t = {3, -1, 0, 10, 5, -1, 2};
  const double l16 = cpu::cross_entropy_forward<S>(logits.s.data(), t.data(), n, vocab);
  const double l32 = cpu::cross_entropy_forward<float>(logits.f.data(), t.data(), n, vocab);
  EXPECT_NEAR(l16, l32, 1e-6 * std::abs(l32));  // same values, same fp32 math
  std::vector<S> dl(n * vocab);
  std::vector<float> dlf(n * vocab);
  cpu::cross_entropy_backward<S>(logits.s.data(), t.data(), dl.data(), n, vocab, 1.0);
  cpu::cross_entropy_backward<float>(logits.f.data(), t.data(), dlf.data(), n, vocab, 1.0);
  EXPECT_TRUE(grads_match("dlogits", widen(dl), widen(dlf), kTol<S>));
}

TYPED_TEST(Storage16, AttentionBothVariants) {
  using S = TypeParam;
  Rng rng(test_seed());
  const cpu::AttentionDims dm{2, 19, 4, 2, 8, 0.0, 8};
  const int64_t nq = dm.b * dm.s * dm.heads * dm.head_dim, nkv = dm.b * dm.s * dm.kv_heads * dm.head_dim;
  std::vector<int32_t> doc;
  for (int64_t i = 0; i < dm.b * dm.s; ++i) doc.push_back(static_cast<int32_t>(i / 7));
  Pair<S> q(rng, nq), k(rng, nkv), v(rng, nkv), dout(rng, nq);
  for (bool flash : {false, true}) {
    Workspace ws16(cpu::attention_workspace_bytes(dtype_of<S>, dm, flash));
    Workspace ws32(cpu::attention_workspace_bytes(DType::f32, dm, flash));
    std::vector<S> o(nq), dq(nq), dk(nkv), dv(nkv);
    std::vector<float> of(nq), dqf(nq), dkf(nkv), dvf(nkv);
    if (flash) {
      std::vector<float> lse(dm.b * dm.heads * dm.s), lsef(lse.size());
      cpu::attention_forward_flash<S>(q.s.data(), k.s.data(), v.s.data(), doc.data(), o.data(), lse.data(), dm, ws16.span());
      cpu::attention_forward_flash<float>(q.f.data(), k.f.data(), v.f.data(), doc.data(), of.data(), lsef.data(), dm, ws32.span());
      EXPECT_TRUE(grads_match("flash lse", widen(lse), widen(lsef), 1e-6));
      cpu::attention_backward_flash<S>(q.s.data(), k.s.data(), v.s.data(), doc.data(), o.data(), lse.data(),
                                       dout.s.data(), dq.data(), dk.data(), dv.data(), dm, ws16.span());
      cpu::attention_backward_flash<float>(q.f.data(), k.f.data(), v.f.data(), doc.data(), of.data(), lsef.data(),
                                           dout.f.data(), dqf.data(), dkf.data(), dvf.data(), dm, ws32.span());
    } else {
      std::vector<S> p(dm.b * dm.heads * dm.s * dm.s);
      std::vector<float> pf(p.size());
      cpu::attention_forward_materialized<S>(q.s.data(), k.s.data(), v.s.data(), doc.data(), o.data(), p.data(), dm, ws16.span());
      cpu::attention_forward_materialized<float>(q.f.data(), k.f.data(), v.f.data(), doc.data(), of.data(), pf.data(), dm, ws32.span());
      EXPECT_TRUE(grads_match("probs", widen(p), widen(pf), kTol<S>));
      cpu::attention_backward_materialized<S>(q.s.data(), k.s.data(), v.s.data(), p.data(), dout.s.data(),
                                              dq.data(), dk.data(), dv.data(), dm, ws16.span());
      cpu::attention_backward_materialized<float>(q.f.data(), k.f.data(), v.f.data(), pf.data(), dout.f.data(),
                                                  dqf.data(), dkf.data(), dvf.data(), dm, ws32.span());
    }
    const std::string tag = flash ? "flash " : "materialized ";
    EXPECT_TRUE(grads_match(tag + "o", widen(o), widen(of), kTol<S>));
    EXPECT_TRUE(grads_match(tag + "dq", widen(dq), widen(dqf), 2 * kTol<S>));
    EXPECT_TRUE(grads_match(tag + "dk", widen(dk), widen(dkf), 2 * kTol<S>));
    EXPECT_TRUE(grads_match(tag + "dv", widen(dv), widen(dvf), 2 * kTol<S>));
  }
}

TYPED_TEST(Storage16, CastsAndNonFiniteCheck) {
  using S = TypeParam;
  std::vector<float> x = {1.0f, -0.1f, 3.5f, 1e-3f, 250.0f, -7.0f, 0.0f, 2.0f, 9.0f};
  std::vector<S> h(x.size());
  std::vector<float> back(x.size());
  cpu::cast(x.data(), h.data(), static_cast<int64_t>(x.size()));
  cpu::cast(h.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i].bits, to16<S>(x[i]).bits);
    EXPECT_NEAR(back[i], x[i], kTol<S> * std::abs(x[i]));
  }
  EXPECT_FALSE(cpu::has_nonfinite(h.data(), static_cast<int64_t>(h.size())));
  h[5] = to16<S>(std::numeric_limits<float>::infinity());
  EXPECT_TRUE(cpu::has_nonfinite(h.data(), static_cast<int64_t>(h.size())));
  h[5] = to16<S>(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(cpu::has_nonfinite(h.data(), static_cast<int64_t>(h.size())));
  if constexpr (std::is_same_v<S, f16_t>) {  // fp16 overflows at 65520: what loss scaling watches
    std::vector<float> big = {70000.0f};
    std::vector<f16_t> hb(1);
    cpu::cast(big.data(), hb.data(), 1);
    EXPECT_TRUE(cpu::has_nonfinite(hb.data(), 1));
  }
  std::vector<float> xf = x;
  EXPECT_FALSE(cpu::has_nonfinite(xf.data(), static_cast<int64_t>(xf.size())));
  xf[8] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(cpu::has_nonfinite(xf.data(), static_cast<int64_t>(xf.size())));
}

}  // namespace
}  // namespace llmplan::exec
