// Elementwise, row-reduction and optimizer CUDA ops against their CPU twins on the same
// random inputs. Every output is poisoned (NaN bytes) before the GPU op runs; outputs that
// accumulate start from the same random values on both sides.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cuda_test_util.h"
#include "executor/cpu/nf4.h"
#include "executor/cpu/ops.h"
#include "executor/cuda/ops.h"

namespace llmplan::exec::cuda::testing {
namespace {

template <class T>
class CudaOps : public ::testing::Test {};
TYPED_TEST_SUITE(CudaOps, testing::StorageTypes);
template <class T>
class CudaOpsGrad : public ::testing::Test {};
TYPED_TEST_SUITE(CudaOpsGrad, testing::StorageGradTypes);

// ---------------------------------------------------------------- elementwise

TYPED_TEST(CudaOps, AddAndAddInplace) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t n = 10007;
  const std::vector<S> a = random_vec<S>(rng, n), b = random_vec<S>(rng, n);
  std::vector<S> y(n), acc = a;
  cpu::add(a.data(), b.data(), y.data(), n);
  cpu::add_inplace(acc.data(), b.data(), n);
  Dev<S> da(a), db(b), dy(n), dacc(a);
  dy.poison();
  check(add(ctx(), da.p(), db.p(), dy.p(), n));
  check(add_inplace(ctx(), dacc.p(), db.p(), n));
  EXPECT_TRUE(close("add", dy.download(), y, kTol<S>));
  EXPECT_TRUE(close("add_inplace", dacc.download(), acc, kTol<S>));
}

TEST(CudaOps, CastsRoundLikeTheCpu) {
  Rng rng(test_seed());
  const int64_t n = 4099;
  std::vector<float> f = random_vec<float>(rng, n, -70000.0, 70000.0);  // fp16 overflow included
  for (int64_t i = 0; i < 200; ++i) f[static_cast<size_t>(i)] = static_cast<float>(rng.uniform(-1e-6, 1e-6));  // fp16 subnormals
  Dev<float> df(f), df2(n);
  Dev<bf16_t> db(n);
  Dev<f16_t> dh(n);
  db.poison();
  dh.poison();
  df2.poison();
  std::vector<bf16_t> b(n);
  std::vector<f16_t> h(n);
  cpu::cast(f.data(), b.data(), n);
  cpu::cast(f.data(), h.data(), n);
  check(cast(ctx(), df.p(), db.p(), n));
  check(cast(ctx(), df.p(), dh.p(), n));
  EXPECT_TRUE(same("f32->bf16", db.download(), b));
  EXPECT_TRUE(same("f32->f16", dh.download(), h));  // infinities where the CPU has them
  std::vector<float> back(n);
  cpu::cast(b.data(), back.data(), n);
  check(cast(ctx(), db.p(), df2.p(), n));
  EXPECT_TRUE(same("bf16->f32", df2.download(), back));
  cpu::cast(h.data(), back.data(), n);
  check(cast(ctx(), dh.p(), df2.p(), n));
  EXPECT_TRUE(same("f16->f32", df2.download(), back));
  check(cast(ctx(), df.p(), df2.p(), n));
  EXPECT_TRUE(same("f32->f32", df2.download(), f));
}

TYPED_TEST(CudaOps, HasNonfiniteFindsInfAndNan) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t n = 50000;
  std::vector<S> x = random_vec<S>(rng, n);
  Dev<S> dx(x);
  Dev<int32_t> flag(std::vector<int32_t>{0});
  check(has_nonfinite(ctx(), dx.p(), n, flag.p()));
  EXPECT_EQ(flag.download()[0], 0);
  EXPECT_FALSE(cpu::has_nonfinite(x.data(), n));
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    std::vector<S> y = x;
    y[static_cast<size_t>(rng.integer(0, n - 1))] = testing::narrow<S>(bad);
    Dev<S> dy(y);
    flag.upload({0});
    check(has_nonfinite(ctx(), dy.p(), n, flag.p()));
    EXPECT_EQ(flag.download()[0], 1) << bad;
    EXPECT_TRUE(cpu::has_nonfinite(y.data(), n));
  }
}

TYPED_TEST(CudaOps, GeluForwardBackward) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t n = 3001;
  const std::vector<S> x = random_vec<S>(rng, n, -6, 6), dy = random_vec<S>(rng, n);
  std::vector<S> y(n), dx(n);
  cpu::gelu_forward(x.data(), y.data(), n);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), n);
  Dev<S> d_x(x), d_dy(dy), d_y(n), d_dx(n);
  d_y.poison();
  d_dx.poison();
  check(gelu_forward(ctx(), d_x.p(), d_y.p(), n));
  check(gelu_backward(ctx(), d_x.p(), d_dy.p(), d_dx.p(), n));
  EXPECT_TRUE(close("y", d_y.download(), y, kTol<S>));
  EXPECT_TRUE(close("dx", d_dx.download(), dx, kTol<S>));
}

TYPED_TEST(CudaOps, SwigluForwardBackward) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t n = 3001;
  const std::vector<S> g = random_vec<S>(rng, n, -6, 6), u = random_vec<S>(rng, n, -2, 2), dy = random_vec<S>(rng, n);
  std::vector<S> y(n), dg(n), du(n);
  cpu::swiglu_forward(g.data(), u.data(), y.data(), n);
  cpu::swiglu_backward(g.data(), u.data(), dy.data(), dg.data(), du.data(), n);
  Dev<S> d_g(g), d_u(u), d_dy(dy), d_y(n), d_dg(n), d_du(n);
  d_y.poison();
  d_dg.poison();
  d_du.poison();
  check(swiglu_forward(ctx(), d_g.p(), d_u.p(), d_y.p(), n));
  check(swiglu_backward(ctx(), d_g.p(), d_u.p(), d_dy.p(), d_dg.p(), d_du.p(), n));
  EXPECT_TRUE(close("y", d_y.download(), y, kTol<S>));
  EXPECT_TRUE(close("dgate", d_dg.download(), dg, kTol<S>));
  EXPECT_TRUE(close("dup", d_du.download(), du, kTol<S>));
}

// QLoRA's NF4 weights (cpu/nf4.h): the GPU reads the same bytes into the same values, bit
// for bit. n leaves a partial last block and spans two double-quantization groups (301
// blocks of 64; groups of 256).
TYPED_TEST(CudaOps, Nf4DequantizeEqualsTheCpuBitForBit) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t n = 64 * 300 + 17;
  std::vector<double> w(static_cast<size_t>(n));
  for (double& x : w) x = rng.uniform(-0.08, 0.08);
  for (int64_t i = 0; i < 64; ++i) w[static_cast<size_t>(64 * 7 + i)] = 0;  // an all-zero block
  std::vector<uint8_t> q(static_cast<size_t>(cpu::nf4_bytes(n)));
  cpu::nf4_quantize(w.data(), n, q.data());
  std::vector<S> want(static_cast<size_t>(n));
  cpu::nf4_dequantize(q.data(), n, want.data());
  Dev<uint8_t> d_q(q);
  Dev<S> d_w(n);
  d_w.poison();
  check(nf4_dequantize(ctx(), d_q.p(), n, d_w.p()));
  EXPECT_TRUE(same("nf4", d_w.download(), want));
}

TYPED_TEST(CudaOps, DropoutMaskBitsEqualTheCpus) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t n = 20000;
  const double p = 0.1 + 0.3 * rng.uniform(0, 1);
  const uint64_t seed = test_seed(), offset = static_cast<uint64_t>(rng.integer(0, 1 << 30));
  const std::vector<S> x = random_vec<S>(rng, n), dy = random_vec<S>(rng, n);
  std::vector<S> y(n), dx(n);
  std::vector<uint8_t> mask(n);
  cpu::dropout_forward(x.data(), y.data(), mask.data(), n, p, seed, offset);
  cpu::dropout_backward(dy.data(), mask.data(), dx.data(), n, p);
  Dev<S> d_x(x), d_dy(dy), d_y(n), d_dx(n);
  Dev<uint8_t> d_mask(n);
  d_y.poison();
  d_dx.poison();
  d_mask.poison();
  check(dropout_forward(ctx(), d_x.p(), d_y.p(), d_mask.p(), n, p, seed, offset));
  check(dropout_backward(ctx(), d_dy.p(), d_mask.p(), d_dx.p(), n, p));
  EXPECT_TRUE(same("mask", d_mask.download(), mask));
  EXPECT_TRUE(close("y", d_y.download(), y, kTol<S>));
  EXPECT_TRUE(close("dx", d_dx.download(), dx, kTol<S>));
  // A slice with its element offset draws the same bits as the whole (TP shards, micro-batches).
  const int64_t half = n / 2;
  Dev<uint8_t> d_tail(n - half);
  check(dropout_forward(ctx(), d_x.p() + half, d_y.p() + half, d_tail.p(), n - half, p, seed, offset + half));
  EXPECT_TRUE(same("slice mask", d_tail.download(), std::vector<uint8_t>(mask.begin() + half, mask.end())));
}

TYPED_TEST(CudaOps, EmbeddingForwardGathersAndAccumulates) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t rows = 50, h = 96, b = 3, s = 11, n = b * s;
  std::vector<int32_t> ids(n), pos(n);
  for (int32_t& i : ids) i = static_cast<int32_t>(rng.integer(0, rows - 1));
  cpu::fill_positions(pos.data(), b, s);
  const std::vector<S> table = random_vec<S>(rng, rows * h), ptable = random_vec<S>(rng, s * h);
  std::vector<S> out(n * h);
  cpu::embedding_forward(ids.data(), table.data(), out.data(), n, h);
  cpu::embedding_forward(pos.data(), ptable.data(), out.data(), n, h, true);
  Dev<int32_t> d_ids(ids), d_pos(n);
  d_pos.poison();
  check(fill_positions(ctx(), d_pos.p(), b, s));
  EXPECT_TRUE(same("positions", d_pos.download(), pos));
  Dev<S> d_table(table), d_ptable(ptable), d_out(n * h);
  d_out.poison();
  check(embedding_forward(ctx(), d_ids.p(), d_table.p(), d_out.p(), n, h));
  check(embedding_forward(ctx(), d_pos.p(), d_ptable.p(), d_out.p(), n, h, true));
  EXPECT_TRUE(close("out", d_out.download(), out, kTol<S>));
}

TYPED_TEST(CudaOpsGrad, EmbeddingBackwardScatterAddsRepeatedIds) {
  using S = typename TypeParam::S;
  using G = typename TypeParam::G;
  Rng rng(test_seed());
  const int64_t rows = 17, h = 65, n = 300;  // every row repeats about 18 times
  std::vector<int32_t> ids(n);
  for (int32_t& i : ids) i = static_cast<int32_t>(rng.integer(0, rows - 1));
  const std::vector<S> dout = random_vec<S>(rng, n * h);
  std::vector<G> dtable = random_vec<G>(rng, rows * h);
  Dev<int32_t> d_ids(ids);
  Dev<S> d_dout(dout);
  Dev<G> d_dtable(dtable);
  cpu::embedding_backward(ids.data(), dout.data(), dtable.data(), n, h);
  check(embedding_backward(ctx(), d_ids.p(), d_dout.p(), d_dtable.p(), n, h));
  EXPECT_TRUE(close("dtable", d_dtable.download(), dtable, kTol<G>));
}

// The tensor-parallel shard of the token table (rows [v0, v0 + rows)): ids of other
// shards give zero rows and no gradient.
TYPED_TEST(CudaOpsGrad, EmbeddingShardsMatchCpu) {
  using S = typename TypeParam::S;
  using G = typename TypeParam::G;
  Rng rng(test_seed());
  const int64_t vocab = 40, rows = 16, v0 = 16, h = 66, n = 200;  // shard 1 of 3 (16 rows each, padded)
  std::vector<int32_t> ids(n);
  for (int32_t& i : ids) i = static_cast<int32_t>(rng.integer(0, vocab - 1));
  const std::vector<S> table = random_vec<S>(rng, rows * h), dout = random_vec<S>(rng, n * h);
  std::vector<S> out(n * h);
  std::vector<G> dtable = random_vec<G>(rng, rows * h);
  Dev<int32_t> d_ids(ids);
  Dev<S> d_table(table), d_out(n * h), d_dout(dout);
  Dev<G> d_dtable(dtable);
  d_out.poison();
  cpu::embedding_forward_shard(ids.data(), table.data(), out.data(), n, h, v0, rows);
  cpu::embedding_backward_shard(ids.data(), dout.data(), dtable.data(), n, h, v0, rows);
  check(embedding_forward_shard(ctx(), d_ids.p(), d_table.p(), d_out.p(), n, h, v0, rows));
  check(embedding_backward_shard(ctx(), d_ids.p(), d_dout.p(), d_dtable.p(), n, h, v0, rows));
  EXPECT_TRUE(same("out", d_out.download(), out));  // a copy or a zero: exact
  EXPECT_TRUE(close("dtable", d_dtable.download(), dtable, kTol<G>));
}

TYPED_TEST(CudaOps, RopeForwardBackwardAndInPlace) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t tokens = 26, heads = 3, d = 64, n = tokens * heads * d;
  std::vector<int32_t> pos(tokens);
  for (int32_t& p : pos) p = static_cast<int32_t>(rng.integer(0, 8191));
  const std::vector<S> x = random_vec<S>(rng, n), dy = random_vec<S>(rng, n);
  std::vector<S> y(n), dx(n);
  cpu::rope_forward(x.data(), pos.data(), y.data(), tokens, heads, d, 500000.0);
  cpu::rope_backward(dy.data(), pos.data(), dx.data(), tokens, heads, d, 500000.0);
  Dev<int32_t> d_pos(pos);
  Dev<S> d_x(x), d_dy(dy), d_y(n), d_dx(n), d_inplace(x);
  d_y.poison();
  d_dx.poison();
  check(rope_forward(ctx(), d_x.p(), d_pos.p(), d_y.p(), tokens, heads, d, 500000.0));
  check(rope_backward(ctx(), d_dy.p(), d_pos.p(), d_dx.p(), tokens, heads, d, 500000.0));
  check(rope_forward(ctx(), d_inplace.p(), d_pos.p(), d_inplace.p(), tokens, heads, d, 500000.0));
  EXPECT_TRUE(close("y", d_y.download(), y, kTol<S>));
  EXPECT_TRUE(close("dx", d_dx.download(), dx, kTol<S>));
  EXPECT_TRUE(close("y in place", d_inplace.download(), y, kTol<S>));
}

// ---------------------------------------------------------------- norms

template <class S, class G>
void check_norm(bool layernorm, int64_t n, int64_t h, bool accumulate_dx, bool bias) {
  Rng rng(test_seed() ^ static_cast<uint64_t>(n * 1000 + h + accumulate_dx));
  const double eps = 1e-5;
  const std::vector<S> x = random_vec<S>(rng, n * h, -2, 3), w = random_vec<S>(rng, h, 0.5, 1.5);
  const std::vector<S> b = random_vec<S>(rng, h), dy = random_vec<S>(rng, n * h);
  const std::vector<S> dx0 = random_vec<S>(rng, n * h);
  std::vector<G> dw = random_vec<G>(rng, h), db = random_vec<G>(rng, h);
  std::vector<S> y(n * h), dx = dx0;
  Workspace cws(cpu::norm_workspace_bytes(dtype_of<G>, h));
  Dev<S> d_x(x), d_w(w), d_b(b), d_dy(dy), d_y(n * h), d_dx(dx0);
  Dev<G> d_dw(dw), d_db(db);
  d_y.poison();
  if (!accumulate_dx) d_dx.poison();
  DevWorkspace ws(norm_workspace_bytes(n, h));
  if (layernorm) {
    cpu::layernorm_forward(x.data(), w.data(), bias ? b.data() : nullptr, y.data(), n, h, eps);
    cpu::layernorm_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), bias ? db.data() : nullptr, n, h,
                            eps, accumulate_dx, cws.span());
    check(layernorm_forward(ctx(), d_x.p(), d_w.p(), bias ? d_b.p() : nullptr, d_y.p(), n, h, eps));
    check(layernorm_backward(ctx(), d_x.p(), d_w.p(), d_dy.p(), d_dx.p(), d_dw.p(), bias ? d_db.p() : nullptr, n, h,
                             eps, accumulate_dx, ws.span()));
  } else {
    cpu::rmsnorm_forward(x.data(), w.data(), y.data(), n, h, eps);
    cpu::rmsnorm_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), n, h, eps, accumulate_dx, cws.span());
    check(rmsnorm_forward(ctx(), d_x.p(), d_w.p(), d_y.p(), n, h, eps));
    check(rmsnorm_backward(ctx(), d_x.p(), d_w.p(), d_dy.p(), d_dx.p(), d_dw.p(), n, h, eps, accumulate_dx, ws.span()));
  }
  EXPECT_TRUE(close("y", d_y.download(), y, kTol<S>));
  EXPECT_TRUE(close("dx", d_dx.download(), dx, kTol<S>));
  EXPECT_TRUE(close("dw", d_dw.download(), dw, kTol<G>));
  EXPECT_TRUE(close("db", d_db.download(), db, kTol<G>));  // untouched for RMSNorm and without bias
}

TYPED_TEST(CudaOpsGrad, LayerNormMatchesCpu) {
  using S = typename TypeParam::S;
  using G = typename TypeParam::G;
  check_norm<S, G>(true, 33, 200, false, true);
  check_norm<S, G>(true, 5, 1030, true, true);    // h over the block size; dx accumulated
  check_norm<S, G>(true, 700, 64, false, false);  // many rows: several column chunks; no bias
}

TYPED_TEST(CudaOpsGrad, RmsNormMatchesCpu) {
  using S = typename TypeParam::S;
  using G = typename TypeParam::G;
  check_norm<S, G>(false, 33, 200, false, false);
  check_norm<S, G>(false, 5, 1030, true, false);
  check_norm<S, G>(false, 700, 64, false, false);
}

// ---------------------------------------------------------------- cross-entropy

template <class S>
void check_cross_entropy(int64_t n, int64_t v, double denom, bool all_ignored) {
  Rng rng(test_seed() ^ static_cast<uint64_t>(n * 7 + v));
  const std::vector<S> logits = random_vec<S>(rng, n * v, -8, 8);
  std::vector<int32_t> targets(n);
  for (int32_t& t : targets) t = all_ignored || rng.uniform(0, 1) < 0.2 ? -1 : static_cast<int32_t>(rng.integer(0, v - 1));
  const double dloss = 1024.0;  // a loss scale
  const double loss = cpu::cross_entropy_forward(logits.data(), targets.data(), n, v, denom);
  std::vector<S> dlogits(n * v);
  cpu::cross_entropy_backward(logits.data(), targets.data(), dlogits.data(), n, v, dloss, denom);

  Dev<S> d_logits(logits), d_dlogits(n * v), d_inplace(logits);
  Dev<int32_t> d_targets(targets);
  Dev<double> d_loss(1);
  d_dlogits.poison();
  d_loss.poison();
  DevWorkspace ws(cross_entropy_workspace_bytes(n));
  check(cross_entropy_forward(ctx(), d_logits.p(), d_targets.p(), d_loss.p(), n, v, denom, ws.span()));
  check(cross_entropy_backward(ctx(), d_logits.p(), d_targets.p(), d_dlogits.p(), n, v, dloss, denom, ws.span()));
  check(cross_entropy_backward(ctx(), d_inplace.p(), d_targets.p(), d_inplace.p(), n, v, dloss, denom, ws.span()));
  const double gpu_loss = d_loss.download()[0];
  ASSERT_TRUE(std::isfinite(gpu_loss));
  if (all_ignored) {
    EXPECT_EQ(gpu_loss, 0.0);
  } else {
    EXPECT_NEAR(gpu_loss, loss, 1e-5 * std::abs(loss)) << "seed " << testing::run_seed();
  }
  EXPECT_TRUE(close("dlogits", d_dlogits.download(), dlogits, all_ignored ? 0.0 : kTol<S>));
  EXPECT_TRUE(close("dlogits in place", d_inplace.download(), dlogits, all_ignored ? 0.0 : kTol<S>));
}

TYPED_TEST(CudaOps, CrossEntropyMatchesCpu) {
  using S = TypeParam;
  check_cross_entropy<S>(20, 1000, 0, false);     // mean over counted rows
  check_cross_entropy<S>(9, 777, 64.0, false);    // global denominator
  check_cross_entropy<S>(4, 50257, 0, false);     // GPT-2 vocabulary
  check_cross_entropy<S>(6, 100, 0, true);        // nothing counted: 0 and zero gradients
}

// The vocabulary-parallel passes on each of tp shards (the last padded, its padding huge
// logits that must not count) against the CPU's, the TP collectives done on the host
// between them: maxima, sums, loss and the in-place gradient.
void check_vocab_parallel_ce(int64_t n, int64_t vocab, int tp, double denom) {
  Rng rng(test_seed() ^ static_cast<uint64_t>(vocab * 3 + tp));
  const int64_t vl = (vocab + tp - 1) / tp;
  std::vector<int32_t> targets(n);
  for (int32_t& t : targets) t = rng.uniform(0, 1) < 0.2 ? -1 : static_cast<int32_t>(rng.integer(0, vocab - 1));
  std::vector<std::vector<float>> z(tp);
  for (int r = 0; r < tp; ++r) {
    z[r] = random_vec<float>(rng, n * vl, -8, 8);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = std::max<int64_t>(0, vocab - r * vl); j < vl; ++j) z[r][i * vl + j] = 1e4f;
  }
  auto real = [&](int r) { return std::max<int64_t>(0, std::min(vl, vocab - r * vl)); };
  std::vector<float> all(tp * n), d_all(tp * n), sums(2 * n, 0.f), d_sums(2 * n, 0.f);
  for (int r = 0; r < tp; ++r) {
    cpu::vocab_parallel_ce_max<float>(z[r].data(), n, vl, real(r), all.data() + r * n);
    Dev<float> dz(z[r]), dmx(n);
    dmx.poison();
    check(vocab_parallel_ce_max<float>(ctx(), dz.p(), n, vl, real(r), dmx.p()));
    const std::vector<float> m = dmx.download();
    std::copy(m.begin(), m.end(), d_all.begin() + r * n);
  }
  EXPECT_TRUE(same("row maxima", d_all, all));
  std::vector<std::vector<float>> mx(tp, std::vector<float>(n)), d_mx(tp);
  for (int r = 0; r < tp; ++r) {
    std::vector<float> part(2 * n);
    cpu::vocab_parallel_ce_sums<float>(z[r].data(), targets.data(), all.data(), tp, n, vl, real(r), r * vl, mx[r].data(), part.data());
    Dev<float> dz(z[r]), dall(all), dmx(n), dpart(2 * n);
    Dev<int32_t> dt(targets);
    dmx.poison();
    dpart.poison();
    check(vocab_parallel_ce_sums<float>(ctx(), dz.p(), dt.p(), dall.p(), tp, n, vl, real(r), r * vl, dmx.p(), dpart.p()));
    const std::vector<float> g = dpart.download();
    EXPECT_TRUE(close("partial sums, rank " + std::to_string(r), g, part, 1e-5));
    d_mx[r] = dmx.download();
    for (int64_t k = 0; k < 2 * n; ++k) sums[k] += part[k], d_sums[k] += g[k];
  }
  for (int r = 0; r < tp; ++r) {
    const cpu::VocabCeLoss l = cpu::vocab_parallel_ce_loss<float>(targets.data(), mx[r].data(), sums.data(), n);
    Dev<int32_t> dt(targets);
    Dev<float> dmx(d_mx[r]), dsums(d_sums), dz(z[r]);
    Dev<double> out(2);
    out.poison();
    check(vocab_parallel_ce_loss<float>(ctx(), dt.p(), dmx.p(), dsums.p(), n, out.p()));
    const std::vector<double> o = out.download();
    EXPECT_EQ(o[1], static_cast<double>(l.counted));
    EXPECT_NEAR(o[0], l.sum, 1e-5 * std::abs(l.sum) + 1e-6) << "rank " << r;
    const double dscale = 1024.0 / (denom > 0 ? denom : static_cast<double>(l.counted));
    std::vector<float> grad = z[r];
    cpu::vocab_parallel_ce_backward<float>(grad.data(), targets.data(), mx[r].data(), sums.data(), n, vl, real(r), r * vl, dscale);
    check(vocab_parallel_ce_backward<float>(ctx(), dz.p(), dt.p(), dmx.p(), dsums.p(), n, vl, real(r), r * vl, dscale));
    EXPECT_TRUE(close("dlogits, rank " + std::to_string(r), dz.download(), grad, 1e-5));
  }
}

TEST(CudaOps, VocabParallelCrossEntropyMatchesCpu) {
  check_vocab_parallel_ce(20, 1000, 2, 0);     // mean over counted rows
  check_vocab_parallel_ce(9, 777, 3, 64.0);    // a padded shard, a global denominator
  check_vocab_parallel_ce(4, 50257, 4, 0);     // GPT-2's vocabulary over tp 4 (3 columns pad)
}

// ---------------------------------------------------------------- mixture of experts

// The MoE routing moves against cpu/moe.h: the router softmax, the dispatch into capacity
// rows (some routes dropped, some rows padding), the combine gated and not, and the
// combine's backward (the rows' gradients and the gates').
TYPED_TEST(CudaOps, MoeRoutingMovesMatchCpu) {
  using S = TypeParam;
  Rng rng(test_seed());
  const int64_t T = 37, E = 8, h = 72, cap = 12, R = E * cap;
  const int k = 2;
  const std::vector<S> logits = random_vec<S>(rng, T * E, -4, 4), x = random_vec<S>(rng, T * h);
  const std::vector<S> rows_buf = random_vec<S>(rng, R * h), dy = random_vec<S>(rng, T * h);
  const std::vector<float> gates = random_vec<float>(rng, T * k, 0.05, 1.0);
  std::vector<int32_t> rows(T * k, -1);  // distinct rows (capacity slots), about a tenth dropped
  std::vector<int32_t> free_rows(R);
  for (int64_t i = 0; i < R; ++i) free_rows[i] = static_cast<int32_t>(i);
  for (int64_t at = 0; at < T * k; ++at) {
    if (rng.uniform(0, 1) < 0.1) continue;
    const auto pick = static_cast<size_t>(rng.integer(0, static_cast<int64_t>(free_rows.size()) - 1));
    rows[at] = free_rows[pick];
    free_rows.erase(free_rows.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  std::vector<float> probs(T * E);
  std::vector<S> disp(R * h, S{}), out(T * h), out1(T * h), dbuf(R * h, S{});
  std::vector<float> dgate(T * k);
  cpu::moe_router_softmax(logits.data(), probs.data(), T, E);
  cpu::moe_dispatch(x.data(), rows.data(), disp.data(), T, k, h);
  cpu::moe_combine(rows_buf.data(), rows.data(), gates.data(), out.data(), T, k, h);
  cpu::moe_combine(rows_buf.data(), rows.data(), static_cast<const float*>(nullptr), out1.data(), T, k, h);
  cpu::moe_combine_backward(dy.data(), rows_buf.data(), rows.data(), gates.data(), dbuf.data(), dgate.data(), T, k, h);
  Dev<S> d_logits(logits), d_x(x), d_rows_buf(rows_buf), d_dy(dy), d_disp(R * h), d_out(T * h), d_out1(T * h), d_dbuf(R * h);
  Dev<int32_t> d_rows(rows);
  Dev<float> d_gates(gates), d_probs(T * E), d_dgate(T * k);
  check(fill_bytes(ctx(), d_disp.p(), 0, R * h * static_cast<int64_t>(sizeof(S))));  // the model zeroes them
  check(fill_bytes(ctx(), d_dbuf.p(), 0, R * h * static_cast<int64_t>(sizeof(S))));
  for (Dev<S>* t : {&d_out, &d_out1}) t->poison();
  d_probs.poison();
  d_dgate.poison();
  check(moe_router_softmax(ctx(), d_logits.p(), d_probs.p(), T, E));
  check(moe_dispatch(ctx(), d_x.p(), d_rows.p(), d_disp.p(), T, k, h));
  check(moe_combine(ctx(), d_rows_buf.p(), d_rows.p(), d_gates.p(), d_out.p(), T, k, h));
  check(moe_combine(ctx(), d_rows_buf.p(), d_rows.p(), static_cast<const float*>(nullptr), d_out1.p(), T, k, h));
  check(moe_combine_backward(ctx(), d_dy.p(), d_rows_buf.p(), d_rows.p(), d_gates.p(), d_dbuf.p(), d_dgate.p(), T, k, h));
  EXPECT_TRUE(close("router probs", d_probs.download(), probs, 1e-6));
  EXPECT_TRUE(same("dispatch", d_disp.download(), disp));
  EXPECT_TRUE(close("combine", d_out.download(), out, kTol<S>));
  EXPECT_TRUE(close("combine (ungated)", d_out1.download(), out1, kTol<S>));
  EXPECT_TRUE(close("d rows", d_dbuf.download(), dbuf, kTol<S>));
  EXPECT_TRUE(close("d gates", d_dgate.download(), dgate, 1e-5));
}

// ---------------------------------------------------------------- optimizers

template <class T>
class CudaOptimizer : public ::testing::Test {};
TYPED_TEST_SUITE(CudaOptimizer, testing::StorageTypes);  // the gradient type

// 41 tensors (two launches of at most 32), three steps, 16-bit model copies written.
TYPED_TEST(CudaOptimizer, AdamWMultiTensorMatchesCpu) {
  using G = TypeParam;
  Rng rng(test_seed());
  std::vector<int64_t> sizes = {5000, 4097, 33, 1, 8192};
  while (sizes.size() < 41) sizes.push_back(rng.integer(1, 3000));
  cpu::AdamWOptions o;
  o.lr = 3e-3;
  o.weight_decay = 0.1;
  struct One {
    std::vector<float> p, m, v;
    std::vector<G> g;
    Dev<float> dp, dm, dv;
    Dev<G> dg;
    Dev<bf16_t> dout;
  };
  std::vector<std::unique_ptr<One>> ts;
  std::vector<AdamWTensor> list;
  for (int64_t n : sizes) {
    auto t = std::make_unique<One>(One{random_vec<float>(rng, n), std::vector<float>(n, 0.0f),
                                       std::vector<float>(n, 0.0f), random_vec<G>(rng, n), Dev<float>(n), Dev<float>(n),
                                       Dev<float>(n), Dev<G>(n), Dev<bf16_t>(n)});
    t->dp.upload(t->p);
    t->dm.upload(t->m);
    t->dv.upload(t->v);
    t->dg.upload(t->g);
    t->dout.poison();
    list.push_back({t->dp.p(), t->dg.p(), t->dm.p(), t->dv.p(), t->dout.p(), n});
    ts.push_back(std::move(t));
  }
  for (int64_t step = 1; step <= 3; ++step) {
    for (auto& t : ts) cpu::adamw_step(t->p.data(), t->g.data(), t->m.data(), t->v.data(), static_cast<int64_t>(t->p.size()), o, step, 0.5);
    check(adamw_step<G>(ctx(), list, o, step, 0.5, DType::bf16));
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    const One& t = *ts[i];
    const std::string at = " of tensor " + std::to_string(i);
    EXPECT_TRUE(close("p" + at, t.dp.download(), t.p, 1e-5));
    EXPECT_TRUE(close("m" + at, t.dm.download(), t.m, 1e-5));
    EXPECT_TRUE(close("v" + at, t.dv.download(), t.v, 1e-5));
    std::vector<bf16_t> model(t.p.size());
    cpu::cast(t.p.data(), model.data(), static_cast<int64_t>(model.size()));
    EXPECT_TRUE(close("model_out" + at, t.dout.download(), model, kTol<bf16_t>));
  }
}

TYPED_TEST(CudaOptimizer, SgdMatchesCpu) {
  using G = TypeParam;
  Rng rng(test_seed());
  const int64_t n = 10001;
  cpu::SgdOptions o;
  o.weight_decay = 1e-4;
  std::vector<float> p = random_vec<float>(rng, n), buf(n, 0.0f);
  const std::vector<G> g = random_vec<G>(rng, n);
  Dev<float> dp(p), dbuf(buf);
  Dev<G> dg(g);
  for (int step = 0; step < 3; ++step) {
    cpu::sgd_step(p.data(), g.data(), buf.data(), n, o, 0.25);
    check(sgd_step<G>(ctx(), dp.p(), dg.p(), dbuf.p(), n, o, 0.25));
  }
  EXPECT_TRUE(close("p", dp.download(), p, 1e-5));
  EXPECT_TRUE(close("buf", dbuf.download(), buf, 1e-5));
}

}  // namespace
}  // namespace llmplan::exec::cuda::testing
