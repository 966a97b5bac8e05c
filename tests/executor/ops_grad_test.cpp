// Every CPU op except attention (attention_test.cpp) in float64: forward against an
// independent reference written out here, backward against central finite differences of
// L = sum(G * forward(inputs)) for a random G, relative error < 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "executor/cpu/ops.h"
#include "test_util.h"

namespace llmplan::exec {
namespace {
using testing::dot;
using testing::grads_match;
using testing::numeric_grad;
using testing::Rng;
using testing::test_seed;
using Vec = std::vector<double>;

constexpr double kTol = 1e-6;

Vec minus(Vec a, const Vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
  return a;
}

// ---------------------------------------------------------------- linear

TEST(Linear, ForwardMatchesLoopsAndBackwardMatchesFiniteDifferences) {
  Rng rng(test_seed());
  const int64_t n = 5, in = 7, out = 4;
  Vec x = rng.vec(n * in), w = rng.vec(out * in), b = rng.vec(out), G = rng.vec(n * out);
  auto forward = [&] {
    Vec y(n * out);
    cpu::linear_forward<double>(x.data(), w.data(), b.data(), y.data(), n, in, out, {});
    return y;
  };
  const Vec y = forward();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double ref = b[o];
      for (int64_t k = 0; k < in; ++k) ref += x[i * in + k] * w[o * in + k];
      EXPECT_NEAR(y[i * out + o], ref, 1e-14);
    }

  // Weight gradients accumulate: start them from random values and subtract those.
  const Vec dw0 = rng.vec(out * in), db0 = rng.vec(out);
  Vec dx(n * in), dw = dw0, db = db0;
  cpu::linear_backward<double, double>(G.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(),
                                       n, in, out, {});
  auto loss = [&] { return dot(G, forward()); };
  EXPECT_TRUE(grads_match("dx", dx, numeric_grad(x, loss), kTol));
  EXPECT_TRUE(grads_match("dw", minus(dw, dw0), numeric_grad(w, loss), kTol));
  EXPECT_TRUE(grads_match("db", minus(db, db0), numeric_grad(b, loss), kTol));
}

TEST(Linear, NullGradientsAreSkippedAndNoBias) {
  Rng rng(test_seed());
  const int64_t n = 3, in = 4, out = 2;
  Vec x = rng.vec(n * in), w = rng.vec(out * in), G = rng.vec(n * out);
  auto loss = [&] {
    Vec y(n * out);
    cpu::linear_forward<double>(x.data(), w.data(), nullptr, y.data(), n, in, out, {});
    return dot(G, y);
  };
  Vec dx(n * in, 7.0);
  cpu::linear_backward<double, double>(G.data(), x.data(), w.data(), dx.data(), nullptr, nullptr, n,
                                       in, out, {});
  EXPECT_TRUE(grads_match("dx", dx, numeric_grad(x, loss), kTol));  // overwritten, not added
  Vec dw(out * in, 0.0);
  cpu::linear_backward<double, double>(G.data(), x.data(), w.data(), nullptr, dw.data(), nullptr, n,
                                       in, out, {});
  EXPECT_TRUE(grads_match("dw", dw, numeric_grad(w, loss), kTol));
}

// ---------------------------------------------------------------- embeddings

TEST(Embedding, TokenAndPositionLookupsScatterAddTheirGradients) {
  Rng rng(test_seed());
  const int64_t vocab = 6, h = 5, b = 2, s = 4, n = b * s;
  std::vector<int32_t> ids = {3, 1, 3, 0, 5, 3, 1, 1};  // repeats exercise the scatter-add
  std::vector<int32_t> pos(n);
  cpu::fill_positions(pos.data(), b, s);
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  Vec wte = rng.vec(vocab * h), wpe = rng.vec(s * h), G = rng.vec(n * h);
  auto forward = [&] {
    Vec y(n * h);
    cpu::embedding_forward<double>(ids.data(), wte.data(), y.data(), n, h);
    cpu::embedding_forward<double>(pos.data(), wpe.data(), y.data(), n, h, /*accumulate=*/true);
    return y;
  };
  const Vec y = forward();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < h; ++j)
      EXPECT_EQ(y[i * h + j], wte[ids[i] * h + j] + wpe[pos[i] * h + j]);

  const Vec dwte0 = rng.vec(vocab * h);
  Vec dwte = dwte0, dwpe(s * h, 0.0);
  cpu::embedding_backward<double, double>(ids.data(), G.data(), dwte.data(), n, h);
  cpu::embedding_backward<double, double>(pos.data(), G.data(), dwpe.data(), n, h);
  auto loss = [&] { return dot(G, forward()); };
  EXPECT_TRUE(grads_match("dwte", minus(dwte, dwte0), numeric_grad(wte, loss), kTol));
  EXPECT_TRUE(grads_match("dwpe", dwpe, numeric_grad(wpe, loss), kTol));
}

// Megatron's vocabulary-parallel embedding: TP rank r holds rows [r Vl, (r + 1) Vl) (the
// last shard padded past the vocabulary). Each shard looks up only its tokens (zeros for
// the rest), so the shards' outputs sum to the whole table's lookup, and each scatters
// only its tokens' gradients, which are exactly the whole table's rows.
TEST(Embedding, ShardsLookUpAndScatterOnlyTheirRows) {
  Rng rng(test_seed());
  const int64_t vocab = 9, h = 4, n = 10, tp = 2, vl = (vocab + tp - 1) / tp;  // 5 rows, the last padded
  std::vector<int32_t> ids = {0, 4, 5, 8, 4, 1, 7, 5, 0, 3};
  Vec wte = rng.vec(tp * vl * h), G = rng.vec(n * h);  // rows past the vocabulary: never read
  Vec whole(n * h), sum(n * h, 0.0), dwhole(tp * vl * h, 0.0);
  cpu::embedding_forward<double>(ids.data(), wte.data(), whole.data(), n, h);
  cpu::embedding_backward<double, double>(ids.data(), G.data(), dwhole.data(), n, h);
  for (int64_t r = 0; r < tp; ++r) {
    Vec y(n * h, std::nan("")), dw(vl * h, 0.0);  // poisoned: every row must be written
    cpu::embedding_forward_shard<double>(ids.data(), wte.data() + r * vl * h, y.data(), n, h, r * vl, vl);
    for (int64_t i = 0; i < n; ++i) {
      const bool mine = ids[i] >= r * vl && ids[i] < (r + 1) * vl;
      for (int64_t j = 0; j < h; ++j) {
        EXPECT_EQ(y[i * h + j], mine ? whole[i * h + j] : 0.0) << "rank " << r << " token " << i;
        sum[i * h + j] += y[i * h + j];
      }
    }
    cpu::embedding_backward_shard<double, double>(ids.data(), G.data(), dw.data(), n, h, r * vl, vl);
    for (int64_t k = 0; k < vl * h; ++k) EXPECT_EQ(dw[k], dwhole[r * vl * h + k]) << "rank " << r << " element " << k;
  }
  EXPECT_EQ(sum, whole);
}

// ---------------------------------------------------------------- mixture of experts

// The routing moves of cpu/moe.h: T = 3 tokens, k = 2 routes each into a buffer of 6
// capacity rows, one route dropped and one row padding. The softmax against the formula;
// dispatch and combine by hand; the combine's backward against finite differences of the
// combine (the gradients of the buffer's rows and of the gates).
TEST(Moe, RoutingMovesAndTheCombinesGradient) {
  Rng rng(test_seed());
  const int64_t T = 3, E = 5, h = 4, R = 6;
  const int k = 2;
  const Vec logits = rng.vec(T * E, -3, 3);
  Vec probs(T * E);
  cpu::moe_router_softmax<double>(logits.data(), probs.data(), T, E);
  for (int64_t t = 0; t < T; ++t) {
    double z = 0;
    for (int64_t e = 0; e < E; ++e) z += std::exp(logits[t * E + e]);
    for (int64_t e = 0; e < E; ++e) EXPECT_NEAR(probs[t * E + e], std::exp(logits[t * E + e]) / z, 1e-15);
  }
  const std::vector<int32_t> rows = {2, 0, 1, -1, 3, 5};  // route t k + j -> row; token 1's second dropped, row 4 padding
  Vec x = rng.vec(T * h), buf(R * h, 0.0), gates = rng.vec(T * k, 0.1, 1.0);
  cpu::moe_dispatch<double>(x.data(), rows.data(), buf.data(), T, k, h);
  for (int64_t i = 0; i < h; ++i) {
    EXPECT_EQ(buf[2 * h + i], x[0 * h + i]);
    EXPECT_EQ(buf[0 * h + i], x[0 * h + i]);
    EXPECT_EQ(buf[1 * h + i], x[1 * h + i]);
    EXPECT_EQ(buf[3 * h + i], x[2 * h + i]);
    EXPECT_EQ(buf[5 * h + i], x[2 * h + i]);
    EXPECT_EQ(buf[4 * h + i], 0.0);  // padding untouched
  }
  buf = rng.vec(R * h);
  auto combine = [&] {
    Vec out(T * h);
    cpu::moe_combine<double>(buf.data(), rows.data(), gates.data(), out.data(), T, k, h);
    return out;
  };
  const Vec out = combine();
  for (int64_t i = 0; i < h; ++i) {
    EXPECT_NEAR(out[0 * h + i], gates[0] * buf[2 * h + i] + gates[1] * buf[0 * h + i], 1e-15);
    EXPECT_NEAR(out[1 * h + i], gates[2] * buf[1 * h + i], 1e-15);  // the dropped route adds nothing
    EXPECT_NEAR(out[2 * h + i], gates[4] * buf[3 * h + i] + gates[5] * buf[5 * h + i], 1e-15);
  }
  Vec ungated(T * h);
  cpu::moe_combine<double>(buf.data(), rows.data(), nullptr, ungated.data(), T, k, h);
  for (int64_t i = 0; i < h; ++i) EXPECT_NEAR(ungated[0 * h + i], buf[2 * h + i] + buf[0 * h + i], 1e-15);
  const Vec dy = rng.vec(T * h);
  Vec dbuf(R * h, 0.0), dgate(T * k, -7.0);
  cpu::moe_combine_backward<double>(dy.data(), buf.data(), rows.data(), gates.data(), dbuf.data(), dgate.data(), T, k, h);
  auto loss = [&] { return dot(dy, combine()); };
  EXPECT_TRUE(grads_match("dgate", dgate, numeric_grad(gates, loss), kTol));  // the dropped route's: 0
  EXPECT_TRUE(grads_match("dbuf", dbuf, numeric_grad(buf, loss), kTol));      // padding rows: 0
}

// ---------------------------------------------------------------- rotary

// Hugging Face's formulation, element by element: x * cos + rotate_half(x) * sin with
// cos = cat(freqs, freqs).cos(), rotate_half(x) = cat(-x2, x1).
Vec rope_reference(const Vec& x, const std::vector<int32_t>& pos, int64_t heads, int64_t d) {
  Vec y(x.size());
  const auto tokens = static_cast<int64_t>(pos.size());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t hd = 0; hd < heads; ++hd)
      for (int64_t j = 0; j < d; ++j) {
        const int64_t base = (t * heads + hd) * d, i = j % (d / 2);
        const double inv_freq = 1.0 / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(d));
        const double ang = pos[t] * inv_freq;
        const double rot = j < d / 2 ? -x[base + j + d / 2] : x[base + j - d / 2];
        y[base + j] = x[base + j] * std::cos(ang) + rot * std::sin(ang);
      }
  return y;
}

TEST(Rope, ForwardMatchesHuggingFaceFormAndBackwardMatchesFiniteDifferences) {
  Rng rng(test_seed());
  const int64_t tokens = 6, heads = 3, d = 8;
  std::vector<int32_t> pos(tokens);
  for (auto& p : pos) p = static_cast<int32_t>(rng.integer(0, 2000));
  Vec x = rng.vec(tokens * heads * d), G = rng.vec(tokens * heads * d);
  auto forward = [&] {
    Vec y(x.size());
    cpu::rope_forward<double>(x.data(), pos.data(), y.data(), tokens, heads, d);
    return y;
  };
  const Vec y = forward(), ref = rope_reference(x, pos, heads, d);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-12);

  Vec in_place = x;  // y may alias x
  cpu::rope_forward<double>(in_place.data(), pos.data(), in_place.data(), tokens, heads, d);
  EXPECT_EQ(in_place, y);

  Vec dx(x.size());
  cpu::rope_backward<double>(G.data(), pos.data(), dx.data(), tokens, heads, d);
  EXPECT_TRUE(grads_match("dx", dx, numeric_grad(x, [&] { return dot(G, forward()); }), kTol));
}

// ---------------------------------------------------------------- norms

TEST(LayerNorm, ForwardMatchesReferenceAndBackwardUsesOnlyTheInput) {
  Rng rng(test_seed());
  const int64_t n = 4, h = 9;
  const double eps = 1e-5;
  Vec x = rng.vec(n * h, -2, 3), w = rng.vec(h, 0.5, 1.5), b = rng.vec(h), G = rng.vec(n * h);
  auto forward = [&] {
    Vec y(n * h);
    cpu::layernorm_forward<double>(x.data(), w.data(), b.data(), y.data(), n, h, eps);
    return y;
  };
  const Vec y = forward();
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < h; ++j) mean += x[r * h + j] / h;
    for (int64_t j = 0; j < h; ++j) var += (x[r * h + j] - mean) * (x[r * h + j] - mean) / h;
    for (int64_t j = 0; j < h; ++j)
      EXPECT_NEAR(y[r * h + j], (x[r * h + j] - mean) / std::sqrt(var + eps) * w[j] + b[j], 1e-12);
  }

  const Vec dx0 = rng.vec(n * h), dw0 = rng.vec(h), db0 = rng.vec(h);
  Vec dx = dx0, dw = dw0, db = db0;
  cpu::layernorm_backward<double, double>(x.data(), w.data(), G.data(), dx.data(), dw.data(),
                                          db.data(), n, h, eps, /*accumulate_dx=*/true, {});
  auto loss = [&] { return dot(G, forward()); };
  EXPECT_TRUE(grads_match("dx", minus(dx, dx0), numeric_grad(x, loss), kTol));
  EXPECT_TRUE(grads_match("dw", minus(dw, dw0), numeric_grad(w, loss), kTol));
  EXPECT_TRUE(grads_match("db", minus(db, db0), numeric_grad(b, loss), kTol));

  Vec dx_over(n * h, 5.0);  // without accumulate_dx the old contents do not matter
  cpu::layernorm_backward<double, double>(x.data(), w.data(), G.data(), dx_over.data(), nullptr,
                                          nullptr, n, h, eps, false, {});
  EXPECT_TRUE(grads_match("dx (overwrite)", dx_over, minus(dx, dx0), 1e-14));
}

TEST(RmsNorm, ForwardMatchesReferenceAndBackwardUsesOnlyTheInput) {
  Rng rng(test_seed());
  const int64_t n = 4, h = 9;
  const double eps = 1e-6;
  Vec x = rng.vec(n * h, -2, 3), w = rng.vec(h, 0.5, 1.5), G = rng.vec(n * h);
  auto forward = [&] {
    Vec y(n * h);
    cpu::rmsnorm_forward<double>(x.data(), w.data(), y.data(), n, h, eps);
    return y;
  };
  const Vec y = forward();
  for (int64_t r = 0; r < n; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < h; ++j) ms += x[r * h + j] * x[r * h + j] / h;
    for (int64_t j = 0; j < h; ++j) EXPECT_NEAR(y[r * h + j], x[r * h + j] / std::sqrt(ms + eps) * w[j], 1e-12);
  }
  const Vec dw0 = rng.vec(h);
  Vec dx(n * h), dw = dw0;
  cpu::rmsnorm_backward<double, double>(x.data(), w.data(), G.data(), dx.data(), dw.data(), n, h, eps,
                                        false, {});
  auto loss = [&] { return dot(G, forward()); };
  EXPECT_TRUE(grads_match("dx", dx, numeric_grad(x, loss), kTol));
  EXPECT_TRUE(grads_match("dw", minus(dw, dw0), numeric_grad(w, loss), kTol));
}

// ---------------------------------------------------------------- activations

TEST(Gelu, KnownValuesAndFiniteDifferences) {
  Rng rng(test_seed());
  const Vec known_x = {1.0, -0.5, 0.0};
  const Vec known_y = {0.8411919906082768, -0.15428599017485606, 0.0};  // Python math.tanh
  Vec ky(3);
  cpu::gelu_forward<double>(known_x.data(), ky.data(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(ky[i], known_y[i], 1e-15);

  const int64_t n = 64;
  Vec x = rng.vec(n, -4, 4), G = rng.vec(n);
  auto loss = [&] {
    Vec y(n);
    cpu::gelu_forward<double>(x.data(), y.data(), n);
    return dot(G, y);
  };
  Vec dx(n);
  cpu::gelu_backward<double>(x.data(), G.data(), dx.data(), n);
  EXPECT_TRUE(grads_match("dx", dx, numeric_grad(x, loss), kTol));
}

TEST(SwiGlu, ForwardAndFiniteDifferences) {
  Rng rng(test_seed());
  const int64_t n = 64;
  Vec gate = rng.vec(n, -5, 5), up = rng.vec(n, -2, 2), G = rng.vec(n);
  auto forward = [&] {
    Vec y(n);
    cpu::swiglu_forward<double>(gate.data(), up.data(), y.data(), n);
    return y;
  };
  const Vec y = forward();
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], gate[i] / (1 + std::exp(-gate[i])) * up[i], 1e-14);
  Vec dgate(n), dup(n);
  cpu::swiglu_backward<double>(gate.data(), up.data(), G.data(), dgate.data(), dup.data(), n);
  auto loss = [&] { return dot(G, forward()); };
  EXPECT_TRUE(grads_match("dgate", dgate, numeric_grad(gate, loss), kTol));
  EXPECT_TRUE(grads_match("dup", dup, numeric_grad(up, loss), kTol));
}

// ---------------------------------------------------------------- dropout, residual

TEST(Dropout, CounterBasedMaskKeepsOneMinusPAndBackwardMatches) {
  // splitmix64 reference outputs for seed 0 (Vigna's splitmix64.c).
  EXPECT_EQ(cpu::splitmix64_at(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(cpu::splitmix64_at(0, 1), 0x6E789E6AA1B965F4ull);

  Rng rng(test_seed());
  const int64_t n = 20000;
  const double p = 0.1;
  const uint64_t seed = test_seed();
  Vec x = rng.vec(n), y(n), G = rng.vec(n);
  std::vector<uint8_t> mask(n);
  cpu::dropout_forward<double>(x.data(), y.data(), mask.data(), n, p, seed);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(mask[i] == 0 || mask[i] == 1);
    kept += mask[i];
    EXPECT_DOUBLE_EQ(y[i], mask[i] ? x[i] / (1 - p) : 0.0);
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.015);  // > 6 sigma

  // A slice given its offset draws the same mask as the whole.
  std::vector<uint8_t> tail(100);
  Vec ty(100);
  cpu::dropout_forward<double>(x.data() + 500, ty.data(), tail.data(), 100, p, seed, 500);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(tail[i], mask[500 + i]);

  const int64_t m = 50;
  Vec xs(x.begin(), x.begin() + m), Gs(G.begin(), G.begin() + m), dx(m);
  auto loss = [&] {
    Vec yy(m);
    std::vector<uint8_t> mm(m);
    cpu::dropout_forward<double>(xs.data(), yy.data(), mm.data(), m, p, seed);
    return dot(Gs, yy);
  };
  cpu::dropout_backward<double>(Gs.data(), mask.data(), dx.data(), m, p);
  EXPECT_TRUE(grads_match("dx", dx, numeric_grad(xs, loss), kTol));
}

TEST(Residual, AddAndAddInPlace) {
  Vec a = {1, 2, 3}, b = {0.5, -2, 10}, y(3);
  cpu::add<double>(a.data(), b.data(), y.data(), 3);
  EXPECT_EQ(y, (Vec{1.5, 0, 13}));
  cpu::add_inplace<double>(y.data(), a.data(), 3);
  EXPECT_EQ(y, (Vec{2.5, 2, 16}));
}

// ---------------------------------------------------------------- cross-entropy

TEST(CrossEntropy, MeanOverCountedTokensAndFiniteDifferences) {
  Rng rng(test_seed());
  const int64_t n = 6, v = 7;
  std::vector<int32_t> t = {2, cpu::kIgnoreIndex, 0, 6, cpu::kIgnoreIndex, 3};
  Vec logits = rng.vec(n * v, -3, 3);
  double ref = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (t[r] < 0) continue;
    double z = 0;
    for (int64_t j = 0; j < v; ++j) z += std::exp(logits[r * v + j]);
    ref += std::log(z) - logits[r * v + t[r]];
  }
  const double loss = cpu::cross_entropy_forward<double>(logits.data(), t.data(), n, v);
  EXPECT_NEAR(loss, ref / 4, 1e-14);
  EXPECT_NEAR(cpu::cross_entropy_forward<double>(logits.data(), t.data(), n, v, 10.0), ref / 10, 1e-14);

  const double dloss = 1.7;
  Vec dlogits(n * v);
  cpu::cross_entropy_backward<double>(logits.data(), t.data(), dlogits.data(), n, v, dloss);
  auto f = [&] { return dloss * cpu::cross_entropy_forward<double>(logits.data(), t.data(), n, v); };
  EXPECT_TRUE(grads_match("dlogits", dlogits, numeric_grad(logits, f), kTol));
  for (int64_t j = 0; j < v; ++j) {
    EXPECT_EQ(dlogits[1 * v + j], 0.0);
    EXPECT_EQ(dlogits[4 * v + j], 0.0);
  }

  Vec in_place = logits;  // dlogits may overwrite the logits
  cpu::cross_entropy_backward<double>(in_place.data(), t.data(), in_place.data(), n, v, dloss);
  EXPECT_EQ(in_place, dlogits);
}

// Megatron's vocabulary-parallel cross-entropy over tp = 3 shards of 4 columns (a
// vocabulary of 10: the last shard's last 2 columns pad, holding huge logits that must not
// count), the TP collectives done here by hand: the loss equals the whole-vocabulary
// cross-entropy, and each shard's gradient is its columns of the whole gradient (0 on the
// padding and on ignored rows).
TEST(CrossEntropy, VocabularyParallelPassesEqualTheWholeVocabulary) {
  Rng rng(test_seed());
  const int64_t n = 5, vocab = 10, tp = 3, vl = 4;
  std::vector<int32_t> t = {9, cpu::kIgnoreIndex, 0, 4, 7};
  const Vec logits = rng.vec(n * vocab, -4, 4);
  const double dloss = 3.0, denom = 8.0;  // a loss scale and a global token count
  const double ref = cpu::cross_entropy_forward<double>(logits.data(), t.data(), n, vocab, denom);
  Vec dref(n * vocab);
  cpu::cross_entropy_backward<double>(logits.data(), t.data(), dref.data(), n, vocab, dloss, denom);
  std::vector<Vec> z(tp, Vec(n * vl, 1e3));
  for (int64_t r = 0; r < tp; ++r)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < vl && r * vl + j < vocab; ++j) z[r][i * vl + j] = logits[i * vocab + r * vl + j];
  auto real = [&](int64_t r) { return std::min(vl, vocab - r * vl); };
  Vec all(tp * n), sums(2 * n, 0.0);
  std::vector<Vec> mx(tp, Vec(n)), part(tp, Vec(2 * n));
  for (int64_t r = 0; r < tp; ++r) cpu::vocab_parallel_ce_max<double>(z[r].data(), n, vl, real(r), all.data() + r * n);  // all-gather
  for (int64_t r = 0; r < tp; ++r) {
    cpu::vocab_parallel_ce_sums<double>(z[r].data(), t.data(), all.data(), tp, n, vl, real(r), r * vl, mx[r].data(), part[r].data());
    for (int64_t k = 0; k < 2 * n; ++k) sums[k] += part[r][k];  // all-reduce
  }
  for (int64_t r = 0; r < tp; ++r) {
    const cpu::VocabCeLoss l = cpu::vocab_parallel_ce_loss<double>(t.data(), mx[r].data(), sums.data(), n);
    EXPECT_EQ(l.counted, 4);
    EXPECT_NEAR(l.sum / denom, ref, 1e-13) << "rank " << r;
    cpu::vocab_parallel_ce_backward<double>(z[r].data(), t.data(), mx[r].data(), sums.data(), n, vl, real(r), r * vl, dloss / denom);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < vl; ++j) {
        const double want = r * vl + j < vocab ? dref[i * vocab + r * vl + j] : 0.0;
        EXPECT_NEAR(z[r][i * vl + j], want, 1e-15) << "rank " << r << " row " << i << " column " << j;
      }
  }
}

TEST(CrossEntropy, LargeLogitsStayFiniteAndAllIgnoredIsZero) {
  const int64_t v = 4;
  std::vector<float> logits = {1000.f, 999.f, -1000.f, 0.f};
  std::vector<int32_t> t = {1};
  const double loss = cpu::cross_entropy_forward<float>(logits.data(), t.data(), 1, v);
  EXPECT_NEAR(loss, std::log(1 + std::exp(1.0)), 1e-6);  // log(e^1000 + e^999) - 999
  std::vector<float> d(v);
  cpu::cross_entropy_backward<float>(logits.data(), t.data(), d.data(), 1, v, 1.0);
  for (float x : d) EXPECT_TRUE(std::isfinite(x));
  std::vector<int32_t> none = {cpu::kIgnoreIndex};
  EXPECT_EQ(cpu::cross_entropy_forward<float>(logits.data(), none.data(), 1, v), 0.0);
  cpu::cross_entropy_backward<float>(logits.data(), none.data(), d.data(), 1, v, 1.0);
  for (float x : d) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace llmplan::exec

namespace llmplan::exec {
namespace {
// The float path uses its own vectorisable exp (cpu/kernel_util.h): check the ops built on
// it against the float64 path, over inputs that reach the exp's extremes.
TEST(FloatMath, ExpBasedOpsMatchFloat64) {
  using testing::grads_match;
  Rng rng(test_seed());
  const int64_t n = 4000;
  Vec xd = rng.vec(n, -12, 12), ud = rng.vec(n, -3, 3), dyd = rng.vec(n);
  xd[0] = -200, xd[1] = 200, xd[2] = 0;  // saturated sigmoids
  std::vector<float> x(xd.begin(), xd.end()), u(ud.begin(), ud.end()), dy(dyd.begin(), dyd.end());
  xd.assign(x.begin(), x.end());  // the same (float) values in both paths
  ud.assign(u.begin(), u.end());
  dyd.assign(dy.begin(), dy.end());
  // Elementwise: 1e-5 relative, since the exp argument itself carries float rounding
  // (e^(x + dx) for |x| ~ 30 is off by 30 * 6e-8 relative, whatever the exp), plus 1e-7 of
  // the largest value for outputs that cancel to near 0 (swiglu's dgate near g = -1.28).
  auto check = [&](const char* what, const std::vector<float>& f, const Vec& d) {
    EXPECT_TRUE(grads_match(what, Vec(f.begin(), f.end()), d, 1e-6));
    double scale = 0;
    for (double di : d) scale = std::max(scale, std::abs(di));
    for (size_t i = 0; i < f.size(); ++i)
      ASSERT_NEAR(f[i], d[i], 1e-5 * std::abs(d[i]) + 1e-7 * scale) << what << " " << i;
  };
  std::vector<float> yf(n), gf(n);
  Vec yd(n), gd(n);
  cpu::gelu_forward<float>(x.data(), yf.data(), n);
  cpu::gelu_forward<double>(xd.data(), yd.data(), n);
  check("gelu", yf, yd);
  cpu::gelu_backward<float>(x.data(), dy.data(), yf.data(), n);
  cpu::gelu_backward<double>(xd.data(), dyd.data(), yd.data(), n);
  check("gelu backward", yf, yd);
  cpu::swiglu_forward<float>(x.data(), u.data(), yf.data(), n);
  cpu::swiglu_forward<double>(xd.data(), ud.data(), yd.data(), n);
  check("swiglu", yf, yd);
  cpu::swiglu_backward<float>(x.data(), u.data(), dy.data(), yf.data(), gf.data(), n);
  cpu::swiglu_backward<double>(xd.data(), ud.data(), dyd.data(), yd.data(), gd.data(), n);
  check("swiglu dgate", yf, yd);
  check("swiglu dup", gf, gd);

  const int64_t rows = 40, v = 100;  // logits spread over +-12 (and +-200 in row 0)
  std::vector<int32_t> t(rows);
  for (auto& ti : t) ti = static_cast<int32_t>(rng.integer(-1, v - 1));
  t[0] = 5;
  const double lf = cpu::cross_entropy_forward<float>(x.data(), t.data(), rows, v);
  const double ld = cpu::cross_entropy_forward<double>(xd.data(), t.data(), rows, v);
  EXPECT_NEAR(lf, ld, 1e-6 * std::abs(ld));
  std::vector<float> dlf(rows * v);
  Vec dld(rows * v);
  cpu::cross_entropy_backward<float>(x.data(), t.data(), dlf.data(), rows, v, 1.0);
  cpu::cross_entropy_backward<double>(xd.data(), t.data(), dld.data(), rows, v, 1.0);
  EXPECT_TRUE(grads_match("dlogits", Vec(dlf.begin(), dlf.end()), dld, 1e-6));
}
}  // namespace
}  // namespace llmplan::exec
