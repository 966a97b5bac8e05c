// Causal GQA attention with a document mask, both variants, float64: forward against a
// naive reference, backward against finite differences, and flash == materialized; and
// the query slices context parallel runs (two chunks of a rank against every key).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "executor/cpu/attention.h"
#include "executor/cpu/attention_dropout.h"
#include "test_util.h"

namespace llmplan::exec {
namespace {
using testing::dot;
using testing::grads_match;
using testing::numeric_grad;
using testing::Rng;
using testing::test_seed;
using Vec = std::vector<double>;

// Straight from the definition: per (b, h, i) a softmax over allowed j of q.k * scale
// (j <= i, i - j < window when dm.window > 0, same document), and the sink logit of head h
// when dm.sinks is given.
Vec naive_attention(const Vec& q, const Vec& k, const Vec& v, const std::vector<int32_t>* doc,
                    const cpu::AttentionDims& dm) {
  const int64_t s = dm.s, d = dm.head_dim, dv = dm.v_dim > 0 ? dm.v_dim : d, a = dm.heads, akv = dm.kv_heads;
  const double scale = dm.scale != 0 ? dm.scale : 1 / std::sqrt(static_cast<double>(d));
  Vec o(static_cast<size_t>(dm.b * s * a * dv), 0.0);
  for (int64_t b = 0; b < dm.b; ++b)
    for (int64_t h = 0; h < a; ++h) {
      const int64_t kh = h / (a / akv);
      for (int64_t i = 0; i < s; ++i) {
        std::vector<double> w(s, 0.0);
        double mx = -1e300, z = 0;
        // Causal, within the window (dm.window > 0: the window most recent positions), same document.
        auto allowed = [&](int64_t j) {
          return (dm.window <= 0 || i - j < dm.window) && !(doc && (*doc)[b * s + j] != (*doc)[b * s + i]);
        };
        for (int64_t j = 0; j <= i; ++j) {
          if (!allowed(j)) continue;
          double sc = 0;
          for (int64_t c = 0; c < d; ++c) sc += q[((b * s + i) * a + h) * d + c] * k[((b * s + j) * akv + kh) * d + c];
          w[j] = sc * scale;
          mx = std::max(mx, w[j]);
        }
        // A sink: one more logit (of value 0) in the denominator.
        const bool sink = !dm.sinks.empty();
        if (sink) mx = std::max(mx, dm.sinks[static_cast<size_t>(h)]);
        for (int64_t j = 0; j <= i; ++j) {
          if (!allowed(j)) { w[j] = 0; continue; }
          w[j] = std::exp(w[j] - mx);
          z += w[j];
        }
        if (sink) z += std::exp(dm.sinks[static_cast<size_t>(h)] - mx);
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < dv; ++c)
            o[((b * s + i) * a + h) * dv + c] += w[j] / z * v[((b * s + j) * akv + kh) * dv + c];
      }
    }
  return o;
}

struct Case {
  cpu::AttentionDims dm;
  Vec q, k, v, G;
  std::vector<int32_t> doc;  // empty: no document mask
  const int32_t* docs() const { return doc.empty() ? nullptr : doc.data(); }
};

// dv: the value heads' width (AttentionDims::v_dim), 0 for d.
Case make_case(Rng& rng, int64_t b, int64_t s, int64_t a, int64_t akv, int64_t d, int64_t block,
               bool with_docs, int64_t dv = 0) {
  Case c;
  c.dm = {b, s, a, akv, d, 0.0, block};
  c.dm.v_dim = dv;
  const int64_t vd = dv > 0 ? dv : d;
  c.q = rng.vec(b * s * a * d, -1.5, 1.5);
  c.k = rng.vec(b * s * akv * d, -1.5, 1.5);
  c.v = rng.vec(b * s * akv * vd);
  c.G = rng.vec(b * s * a * vd);
  if (with_docs) {  // packed documents: first sequence 3 + 5 + rest, second one document
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t t = 0; t < s; ++t)
        c.doc.push_back(bi == 0 ? (t < 3 ? 0 : t < 8 ? 1 : 2) : 7);
  }
  return c;
}

struct Grads {
  Vec o, dq, dk, dv;
};

Grads run(const Case& c, bool flash) {
  const cpu::AttentionDims& dm = c.dm;
  testing::Workspace work(cpu::attention_workspace_bytes(DType::f64, dm, flash));
  const std::span<std::byte> ws = work.span();
  Grads g{Vec(c.G.size()), Vec(c.q.size()), Vec(c.k.size()), Vec(c.v.size())};
  if (flash) {
    Vec lse(dm.b * dm.heads * dm.s);
    cpu::attention_forward_flash<double>(c.q.data(), c.k.data(), c.v.data(), c.docs(), g.o.data(),
                                         lse.data(), dm, ws);
    cpu::attention_backward_flash<double>(c.q.data(), c.k.data(), c.v.data(), c.docs(), g.o.data(),
                                          lse.data(), c.G.data(), g.dq.data(), g.dk.data(),
                                          g.dv.data(), dm, ws);
  } else {
    Vec probs(dm.b * dm.heads * dm.s * dm.s);
    cpu::attention_forward_materialized<double>(c.q.data(), c.k.data(), c.v.data(), c.docs(),
                                                g.o.data(), probs.data(), dm, ws);
    cpu::attention_backward_materialized<double>(c.q.data(), c.k.data(), c.v.data(), probs.data(),
                                                 c.G.data(), g.dq.data(), g.dk.data(), g.dv.data(),
                                                 dm, ws);
  }
  return g;
}

void check_case(Case& c) {
  const Vec ref = naive_attention(c.q, c.k, c.v, c.doc.empty() ? nullptr : &c.doc, c.dm);
  const Grads mat = run(c, false), fl = run(c, true);
  EXPECT_TRUE(grads_match("materialized forward", mat.o, ref, 1e-13));
  EXPECT_TRUE(grads_match("flash forward", fl.o, ref, 1e-13));

  auto loss = [&] { return dot(c.G, naive_attention(c.q, c.k, c.v, c.doc.empty() ? nullptr : &c.doc, c.dm)); };
  const Vec nq = numeric_grad(c.q, loss), nk = numeric_grad(c.k, loss), nv = numeric_grad(c.v, loss);
  EXPECT_TRUE(grads_match("materialized dq", mat.dq, nq, 1e-6));
  EXPECT_TRUE(grads_match("materialized dk", mat.dk, nk, 1e-6));
  EXPECT_TRUE(grads_match("materialized dv", mat.dv, nv, 1e-6));
  EXPECT_TRUE(grads_match("flash dq", fl.dq, nq, 1e-6));
  EXPECT_TRUE(grads_match("flash dk", fl.dk, nk, 1e-6));
  EXPECT_TRUE(grads_match("flash dv", fl.dv, nv, 1e-6));

  EXPECT_TRUE(grads_match("flash vs materialized o", fl.o, mat.o, 1e-12));
  EXPECT_TRUE(grads_match("flash vs materialized dq", fl.dq, mat.dq, 1e-12));
  EXPECT_TRUE(grads_match("flash vs materialized dk", fl.dk, mat.dk, 1e-12));
  EXPECT_TRUE(grads_match("flash vs materialized dv", fl.dv, mat.dv, 1e-12));
}

TEST(Attention, GqaWithDocumentMaskBothVariants) {
  Rng rng(test_seed());
  Case c = make_case(rng, 2, 11, 4, 2, 6, /*block=*/4, /*with_docs=*/true);  // 3 tiles, ragged
  check_case(c);
}

TEST(Attention, MultiHeadNoMaskOneTile) {
  Rng rng(test_seed());
  Case c = make_case(rng, 1, 9, 3, 3, 4, /*block=*/64, false);
  c.dm.scale = 0.3;
  check_case(c);
}

TEST(Attention, MultiQueryManyTiles) {
  Rng rng(test_seed());
  Case c = make_case(rng, 1, 13, 4, 1, 5, /*block=*/2, true);
  check_case(c);
}

// Whole-sequence probabilities (b, heads, s, s) of case c: 0 where the mask (causal, the
// window when dm.window > 0, documents) disallows, and each row sums to 1 (no sinks).
void expect_probs_masked(const Case& c, const Vec& probs) {
  const cpu::AttentionDims& dm = c.dm;
  for (int64_t b = 0; b < dm.b; ++b)
    for (int64_t h = 0; h < dm.heads; ++h)
      for (int64_t i = 0; i < dm.s; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < dm.s; ++j) {
          const double p = probs[((b * dm.heads + h) * dm.s + i) * dm.s + j];
          const bool allowed = j <= i && (dm.window <= 0 || i - j < dm.window) && c.doc[b * dm.s + j] == c.doc[b * dm.s + i];
          if (!allowed) {
            EXPECT_EQ(p, 0.0);
          }
          sum += p;
        }
        EXPECT_NEAR(sum, 1.0, 1e-14);
      }
}

TEST(Attention, MaterializedProbsAreZeroOutsideTheMaskAndRowsSumToOne) {
  Rng rng(test_seed());
  Case c = make_case(rng, 2, 11, 4, 2, 6, 4, true);
  const cpu::AttentionDims& dm = c.dm;
  testing::Workspace work(cpu::attention_workspace_bytes(DType::f64, dm, false));
  Vec o(c.q.size()), probs(dm.b * dm.heads * dm.s * dm.s);
  cpu::attention_forward_materialized<double>(c.q.data(), c.k.data(), c.v.data(), c.docs(), o.data(),
                                              probs.data(), dm, work.span());
  expect_probs_masked(c, probs);
}

// The whole-sequence reference the context-parallel tests cut up: a random case (GQA,
// packed documents, flash tile 3), its naive attention output, and the finite-difference
// gradients of dot(G, o) with respect to q, k and v.
struct CpReference {
  Case whole;
  Vec o, dq, dk, dv;
  Vec sinks, dsinks;  // with sinks: the heads' logits and their finite-difference gradient
};
// CP rank r's queries of `whole`: chunks r and 2cp-1-r of the 2cp chunks of each sequence.
cpu::AttentionDims cp_query_dims(const cpu::AttentionDims& whole, int64_t cp, int64_t r) {
  const int64_t c = whole.s / (2 * cp);
  cpu::AttentionDims dm = whole;
  dm.q_rows = 2 * c;
  dm.q_split = c;
  dm.q_offset = r * c;
  dm.q_offset_hi = (2 * cp - 1 - r) * c;
  return dm;
}
// The rows of x (b, s, w) at the query positions of `dm` -> (b, sq, w).
Vec rows_at(const Vec& x, int64_t w, const cpu::AttentionDims& dm) {
  const int64_t sq = cpu::query_rows(dm);
  Vec out(static_cast<size_t>(dm.b * sq * w));
  for (int64_t bi = 0; bi < dm.b; ++bi)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t e = 0; e < w; ++e) out[(bi * sq + i) * w + e] = x[(bi * dm.s + cpu::query_position(dm, i)) * w + e];
  return out;
}
// into (b, s, w) += x (b, sq, w) at the query positions of `dm`.
void add_rows_at(const Vec& x, int64_t w, const cpu::AttentionDims& dm, Vec& into) {
  const int64_t sq = cpu::query_rows(dm);
  for (int64_t bi = 0; bi < dm.b; ++bi)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t e = 0; e < w; ++e) into[(bi * dm.s + cpu::query_position(dm, i)) * w + e] += x[(bi * sq + i) * w + e];
}
CpReference cp_reference(Rng& rng, int64_t b, int64_t s, int64_t a, int64_t akv, int64_t d, int64_t window = 0, bool sinks = false) {
  CpReference r{make_case(rng, b, s, a, akv, d, /*block=*/3, /*with_docs=*/true), {}, {}, {}, {}, {}, {}};
  Case& w = r.whole;
  w.dm.window = window;
  if (sinks) {
    r.sinks = rng.vec(a, -1.0, 1.0);
    w.dm.sinks = r.sinks;
  }
  r.o = naive_attention(w.q, w.k, w.v, &w.doc, w.dm);
  auto loss = [&] { return dot(w.G, naive_attention(w.q, w.k, w.v, &w.doc, w.dm)); };
  r.dq = numeric_grad(w.q, loss);
  r.dk = numeric_grad(w.k, loss);
  r.dv = numeric_grad(w.v, loss);
  if (sinks) r.dsinks = numeric_grad(r.sinks, loss);
  return r;
}

// Context parallel's query slices: s = 12 in 2cp = 6 chunks of 2, rank r's queries are
// chunks r and 5-r (q_split 2). Each slice's output equals the naive whole-sequence
// attention's rows at those positions; its dq equals those rows of the finite-difference
// gradient of the whole sequence's loss, and the slices' dk, dv summed over the ranks equal
// the whole dk, dv -- for flash and materialized. With dropout, each slice draws exactly
// the whole run's mask rows, and the same sums hold against the whole-sequence kernel.
void check_query_slices(int64_t window, bool sinks = false) {
  SCOPED_TRACE("window " + std::to_string(window) + (sinks ? " sinks" : ""));
  Rng rng(test_seed());
  const int64_t b = 2, s = 12, a = 4, akv = 2, d = 3, cp = 3, c = s / (2 * cp), sq = 2 * c;
  CpReference cr = cp_reference(rng, b, s, a, akv, d, window, sinks);
  Case& whole = cr.whole;
  whole.dm.sinks = cr.sinks;
  const Vec &ref = cr.o, &nq = cr.dq, &nk = cr.dk, &nv = cr.dv;
  // Whole-sequence dropout run, the reference for the slices' draws.
  const double p = 0.3;
  const uint64_t seed = 99;
  testing::Workspace wdw(cpu::attention_dropout_workspace_bytes(DType::f64, whole.dm));
  const int64_t ss = b * a * s * s;
  Vec wo(whole.q.size()), wprobs(ss), wdropped(ss), wdq(whole.q.size()), wdk(whole.k.size()), wdv(whole.v.size());
  std::vector<uint8_t> wmask(ss);
  cpu::attention_forward_dropout<double>(whole.q.data(), whole.k.data(), whole.v.data(), whole.docs(), wo.data(), wprobs.data(),
                                         wmask.data(), wdropped.data(), whole.dm, p, seed, wdw.span());
  cpu::attention_backward_dropout<double>(whole.q.data(), whole.k.data(), whole.v.data(), wprobs.data(), wmask.data(), wdropped.data(),
                                          whole.G.data(), wdq.data(), wdk.data(), wdv.data(), whole.dm, p, wdw.span());
  const int64_t row = a * d;  // elements of one token's q, o, G
  for (int variant = 0; variant < 3; ++variant) {  // flash, materialized, dropout
    Vec o_all(whole.q.size(), 0.0), dq_all(whole.q.size(), 0.0), dk_sum(whole.k.size(), 0.0), dv_sum(whole.v.size(), 0.0);
    Vec dsinks(static_cast<size_t>(a), 0.0);
    for (int64_t r = 0; r < cp; ++r) {
      const cpu::AttentionDims dm = cp_query_dims(whole.dm, cp, r);
      const Vec q = rows_at(whole.q, row, dm), G = rows_at(whole.G, row, dm);
      Vec o(q.size()), dq(q.size()), dk(whole.k.size()), dv(whole.v.size());
      if (variant == 0) {
        testing::Workspace w(cpu::attention_workspace_bytes(DType::f64, dm, true));
        Vec lse(b * a * sq);
        cpu::attention_forward_flash<double>(q.data(), whole.k.data(), whole.v.data(), whole.docs(), o.data(), lse.data(), dm, w.span());
        cpu::attention_backward_flash<double>(q.data(), whole.k.data(), whole.v.data(), whole.docs(), o.data(), lse.data(), G.data(),
                                              dq.data(), dk.data(), dv.data(), dm, w.span());
        if (sinks) cpu::attention_sink_backward<double>(o.data(), G.data(), lse.data(), nullptr, dm, dsinks.data());
      } else if (variant == 1) {
        testing::Workspace w(cpu::attention_workspace_bytes(DType::f64, dm, false));
        Vec probs(b * a * sq * s);
        cpu::attention_forward_materialized<double>(q.data(), whole.k.data(), whole.v.data(), whole.docs(), o.data(), probs.data(), dm,
                                                    w.span());
        cpu::attention_backward_materialized<double>(q.data(), whole.k.data(), whole.v.data(), probs.data(), G.data(), dq.data(),
                                                     dk.data(), dv.data(), dm, w.span());
        if (sinks) cpu::attention_sink_backward<double>(o.data(), G.data(), nullptr, probs.data(), dm, dsinks.data());
      } else {
        testing::Workspace w(cpu::attention_dropout_workspace_bytes(DType::f64, dm));
        Vec probs(b * a * sq * s), dropped(probs.size());
        std::vector<uint8_t> mask(probs.size());
        cpu::attention_forward_dropout<double>(q.data(), whole.k.data(), whole.v.data(), whole.docs(), o.data(), probs.data(),
                                               mask.data(), dropped.data(), dm, p, seed, w.span());
        for (int64_t bh = 0; bh < b * a; ++bh)
          for (int64_t i = 0; i < sq; ++i)
            for (int64_t j = 0; j < s; ++j)
              ASSERT_EQ(mask[(bh * sq + i) * s + j], wmask[(bh * s + cpu::query_position(dm, i)) * s + j]) << "rank " << r;
        cpu::attention_backward_dropout<double>(q.data(), whole.k.data(), whole.v.data(), probs.data(), mask.data(), dropped.data(),
                                                G.data(), dq.data(), dk.data(), dv.data(), dm, p, w.span());
      }
      add_rows_at(o, row, dm, o_all);
      add_rows_at(dq, row, dm, dq_all);
      for (size_t e = 0; e < dk.size(); ++e) {
        dk_sum[e] += dk[e];
        dv_sum[e] += dv[e];
      }
    }
    const char* name = variant == 0 ? "flash" : variant == 1 ? "materialized" : "dropout";
    SCOPED_TRACE(name);
    if (variant < 2) {
      EXPECT_TRUE(grads_match("slices' o", o_all, ref, 1e-13));
      EXPECT_TRUE(grads_match("slices' dq", dq_all, nq, 1e-6));
      EXPECT_TRUE(grads_match("slices' dk summed", dk_sum, nk, 1e-6));
      EXPECT_TRUE(grads_match("slices' dv summed", dv_sum, nv, 1e-6));
      if (sinks) {
        EXPECT_TRUE(grads_match("slices' dsinks summed", dsinks, cr.dsinks, 1e-6));
      }
    } else {
      EXPECT_TRUE(grads_match("slices' o", o_all, wo, 1e-13));
      EXPECT_TRUE(grads_match("slices' dq", dq_all, wdq, 1e-13));
      EXPECT_TRUE(grads_match("slices' dk summed", dk_sum, wdk, 1e-13));
      EXPECT_TRUE(grads_match("slices' dv summed", dv_sum, wdv, 1e-13));
    }
  }
}

// Context parallel as a ring (float64, GQA, packed documents, s = 12, cp = 3): rank r's
// queries (chunks r and 2cp-1-r) attend, one flash call per step, to the keys of each
// owner j in turn (chunks j and 2cp-1-j, AttentionDims k_rows / k_offset / k_split), and
// attention_merge_partial folds the partials together. The merged output must equal the
// naive whole-sequence reference's rows; the backward of each step, run with the merged
// o and lse, must give dq summed over the steps = the finite-difference dq rows, and dk,
// dv of owner j's rows summed over every rank = the finite-difference dk, dv.
void check_ring(int64_t window, bool sinks = false) {
  SCOPED_TRACE("window " + std::to_string(window) + (sinks ? " sinks" : ""));
  Rng rng(test_seed());
  const int64_t b = 2, s = 12, a = 4, akv = 2, d = 3, cp = 3, c = s / (2 * cp), sq = 2 * c;
  CpReference cr = cp_reference(rng, b, s, a, akv, d, window, sinks);
  Case& whole = cr.whole;
  whole.dm.sinks = cr.sinks;
  Vec dsinks(static_cast<size_t>(a), 0.0);
  const Vec &ref = cr.o, &nq = cr.dq, &nk = cr.dk, &nv = cr.dv;
  const int64_t row = a * d, kvrow = akv * d;
  Vec o_all(whole.q.size(), 0.0), dq_all(whole.q.size(), 0.0), dk_all(whole.k.size(), 0.0), dv_all(whole.v.size(), 0.0);
  for (int64_t r = 0; r < cp; ++r) {
    cpu::AttentionDims dm = cp_query_dims(whole.dm, cp, r);
    dm.k_rows = sq;
    dm.k_split = c;
    const Vec q = rows_at(whole.q, row, dm), G = rows_at(whole.G, row, dm);
    Vec o(q.size()), lse(b * a * sq), op(q.size()), lp(lse.size());
    testing::Workspace w(cpu::attention_workspace_bytes(DType::f64, dm, true));
    // Step `step` holds the keys of rank j = r - step: its two chunks, as its queries are.
    auto owner = [&](int64_t step) {
      const cpu::AttentionDims kd = cp_query_dims(whole.dm, cp, (r - step + cp) % cp);
      dm.k_offset = kd.q_offset;
      dm.k_offset_hi = kd.q_offset_hi;
      return kd;
    };
    for (int64_t step = 0; step < cp; ++step) {
      const cpu::AttentionDims kd = owner(step);
      const Vec k = rows_at(whole.k, kvrow, kd), v = rows_at(whole.v, kvrow, kd);
      cpu::AttentionDims step_dm = dm;
      if (step > 0) step_dm.sinks = {};  // the sink counts once, in the first step's partial
      cpu::attention_forward_flash<double>(q.data(), k.data(), v.data(), whole.docs(), step == 0 ? o.data() : op.data(),
                                           step == 0 ? lse.data() : lp.data(), step_dm, w.span());
      if (step > 0) cpu::attention_merge_partial<double>(o.data(), lse.data(), op.data(), lp.data(), dm);
    }
    add_rows_at(o, row, dm, o_all);
    if (sinks) cpu::attention_sink_backward<double>(o.data(), G.data(), lse.data(), nullptr, dm, dsinks.data());
    for (int64_t step = 0; step < cp; ++step) {
      const cpu::AttentionDims kd = owner(step);
      const Vec k = rows_at(whole.k, kvrow, kd), v = rows_at(whole.v, kvrow, kd);
      Vec dq(q.size()), dk(k.size()), dv(v.size());
      cpu::attention_backward_flash<double>(q.data(), k.data(), v.data(), whole.docs(), o.data(), lse.data(), G.data(), dq.data(),
                                            dk.data(), dv.data(), dm, w.span());
      add_rows_at(dq, row, dm, dq_all);
      add_rows_at(dk, kvrow, kd, dk_all);
      add_rows_at(dv, kvrow, kd, dv_all);
    }
  }
  EXPECT_TRUE(grads_match("ring o", o_all, ref, 1e-13));
  EXPECT_TRUE(grads_match("ring dq", dq_all, nq, 1e-6));
  EXPECT_TRUE(grads_match("ring dk", dk_all, nk, 1e-6));
  EXPECT_TRUE(grads_match("ring dv", dv_all, nv, 1e-6));
  if (sinks) {
    EXPECT_TRUE(grads_match("ring dsinks", dsinks, cr.dsinks, 1e-6));
  }
}

TEST(Attention, QuerySlicesOfTwoChunksSumToTheWholeSequence) { check_query_slices(0); }
TEST(Attention, RingStepsOverKeyChunksMergeToTheWholeSequence) { check_ring(0); }
// A window of 5 over s = 12 in chunks of 2: a rank's high chunk sees none of the keys of the
// ranks whose chunks lie more than 4 positions back (whole ring steps with no allowed key,
// lse -inf) and parts of others.
TEST(Attention, QuerySlicesWithSlidingWindow) { check_query_slices(5); }
TEST(Attention, RingStepsWithSlidingWindow) { check_ring(5); }

// Sliding-window attention (Longformer; Mistral; Gemma 3's local layers): float64 against
// the naive reference and finite differences. Windows 2 and 3 with flash tiles of 2 skip
// whole tiles before the window; window 1 attends to the query itself only (o = v of its
// own position); a window as long as the sequence is full causal attention.
TEST(Attention, SlidingWindowBothVariants) {
  for (const int64_t window : {2, 3, 7}) {
    SCOPED_TRACE("window " + std::to_string(window));
    Rng rng(test_seed());
    Case c = make_case(rng, 2, 11, 4, 2, 6, /*block=*/2, /*with_docs=*/true);
    c.dm.window = window;
    check_case(c);
  }
  Rng rng(test_seed());
  Case c = make_case(rng, 1, 9, 2, 1, 3, /*block=*/4, false);
  c.dm.window = 1;  // softmax over one key: o = v, dv = the heads' G summed, dq = dk = 0
  for (bool flash : {true, false}) {
    const Grads g = run(c, flash);
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t e = 0; e < 3; ++e) {
        EXPECT_NEAR(g.dv[i * 3 + e], c.G[(i * 2) * 3 + e] + c.G[(i * 2 + 1) * 3 + e], 1e-14);
        EXPECT_NEAR(g.dk[i * 3 + e], 0.0, 1e-14);
        for (int64_t h = 0; h < 2; ++h) {
          EXPECT_NEAR(g.o[(i * 2 + h) * 3 + e], c.v[i * 3 + e], 1e-15);
          EXPECT_NEAR(g.dq[(i * 2 + h) * 3 + e], 0.0, 1e-14);
        }
      }
  }
  Case full = make_case(rng, 1, 9, 2, 1, 3, /*block=*/4, true), whole = full;
  whole.dm.window = 9;
  const Grads a = run(full, true), b = run(whole, true);
  EXPECT_TRUE(grads_match("window = s vs full o", b.o, a.o, 0));
  EXPECT_TRUE(grads_match("window = s vs full dk", b.dk, a.dk, 0));
}

// The dropout kernel's output for case c at p = 0 (the naive attention's), its probabilities
// into *probs when given.
Vec dropout_p0_output(const Case& c, Vec* probs_out = nullptr) {
  testing::Workspace wd(cpu::attention_dropout_workspace_bytes(DType::f64, c.dm));
  const int64_t ss = c.dm.b * c.dm.heads * c.dm.s * c.dm.s;
  Vec o(c.G.size()), probs(ss), dropped(ss);
  std::vector<uint8_t> mask(ss);
  cpu::attention_forward_dropout<double>(c.q.data(), c.k.data(), c.v.data(), c.docs(), o.data(), probs.data(), mask.data(),
                                         dropped.data(), c.dm, 0.0, 7, wd.span());
  if (probs_out != nullptr) *probs_out = std::move(probs);
  return o;
}

// The dropout kernel masks by the same rule: with a window its probabilities are 0 outside
// it and each row sums to 1, and with p = 0 its output is the naive windowed attention.
TEST(Attention, DropoutKernelMasksTheWindow) {
  Rng rng(test_seed());
  Case c = make_case(rng, 2, 11, 4, 2, 6, 4, true);
  c.dm.window = 4;
  Vec probs;
  const Vec o = dropout_p0_output(c, &probs);
  EXPECT_TRUE(grads_match("dropout p=0 windowed o", o, naive_attention(c.q, c.k, c.v, &c.doc, c.dm), 1e-13));
  expect_probs_masked(c, probs);
}

// Attention sinks (gpt-oss): whole sequences with windows and documents against the naive
// reference, and the sinks' gradient (from flash's lse and from materialised probs) against
// finite differences; over CP query slices (all-gather) and ring steps, where only the
// first step's partial counts the sink.
TEST(Attention, SinksBothVariantsAndTheirGradient) {
  for (const int64_t window : {0, 3}) {
    SCOPED_TRACE("window " + std::to_string(window));
    Rng rng(test_seed());
    Case c = make_case(rng, 2, 11, 4, 2, 6, /*block=*/4, /*with_docs=*/true);
    Vec sinks = rng.vec(4, -1.0, 2.0);
    c.dm.window = window;
    c.dm.sinks = sinks;
    check_case(c);
    auto loss = [&] { return dot(c.G, naive_attention(c.q, c.k, c.v, &c.doc, c.dm)); };
    const Vec numeric = numeric_grad(sinks, loss);
    for (bool flash : {true, false}) {
      const cpu::AttentionDims& dm = c.dm;
      testing::Workspace work(cpu::attention_workspace_bytes(DType::f64, dm, flash));
      Vec o(c.q.size()), lse(dm.b * dm.heads * dm.s), probs(dm.b * dm.heads * dm.s * dm.s), dsinks(4, 0.0);
      if (flash) {
        cpu::attention_forward_flash<double>(c.q.data(), c.k.data(), c.v.data(), c.docs(), o.data(), lse.data(), dm, work.span());
        cpu::attention_sink_backward<double>(o.data(), c.G.data(), lse.data(), nullptr, dm, dsinks.data());
      } else {
        cpu::attention_forward_materialized<double>(c.q.data(), c.k.data(), c.v.data(), c.docs(), o.data(), probs.data(), dm, work.span());
        cpu::attention_sink_backward<double>(o.data(), c.G.data(), nullptr, probs.data(), dm, dsinks.data());
      }
      EXPECT_TRUE(grads_match(flash ? "flash dsinks" : "materialized dsinks", dsinks, numeric, 1e-6));
    }
    // The dropout kernel's softmax takes the sink too (p = 0: the naive output).
    EXPECT_TRUE(grads_match("dropout p=0 with sinks", dropout_p0_output(c), naive_attention(c.q, c.k, c.v, &c.doc, c.dm), 1e-13));
  }
}
TEST(Attention, QuerySlicesWithSinks) { check_query_slices(5, true); }

// Latent attention's shapes (DeepSeek-V2, arXiv 2405.04434): values narrower than the
// queries and keys (here 3 against 7; DeepSeek-V3 128 against 192), with and without GQA,
// documents, a window and sinks: both variants against the naive reference and finite
// differences, the sinks' gradient, and the dropout kernel at p = 0.
TEST(Attention, ValueHeadsNarrowerThanQueryAndKeyHeads) {
  for (const int64_t window : {0, 4}) {
    SCOPED_TRACE("window " + std::to_string(window));
    Rng rng(test_seed());
    Case c = make_case(rng, 2, 11, 4, 2, 7, /*block=*/4, /*with_docs=*/true, /*dv=*/3);
    c.dm.window = window;
    check_case(c);
    Case m = make_case(rng, 1, 9, 3, 3, 5, /*block=*/2, false, /*dv=*/8);  // wider values, many tiles
    check_case(m);
    Vec sinks = rng.vec(4, -1.0, 2.0);
    c.dm.sinks = sinks;
    check_case(c);
    auto loss = [&] { return dot(c.G, naive_attention(c.q, c.k, c.v, &c.doc, c.dm)); };
    const Vec numeric = numeric_grad(sinks, loss);
    testing::Workspace work(cpu::attention_workspace_bytes(DType::f64, c.dm, true));
    Vec o(c.G.size()), lse(c.dm.b * c.dm.heads * c.dm.s), dsinks(4, 0.0);
    cpu::attention_forward_flash<double>(c.q.data(), c.k.data(), c.v.data(), c.docs(), o.data(), lse.data(), c.dm, work.span());
    cpu::attention_sink_backward<double>(o.data(), c.G.data(), lse.data(), nullptr, c.dm, dsinks.data());
    EXPECT_TRUE(grads_match("flash dsinks, narrow values", dsinks, numeric, 1e-6));
    EXPECT_TRUE(grads_match("dropout p=0, narrow values", dropout_p0_output(c), naive_attention(c.q, c.k, c.v, &c.doc, c.dm), 1e-13));
  }
}
TEST(Attention, RingStepsWithSinks) { check_ring(5, true); check_ring(0, true); }

}  // namespace
}  // namespace llmplan::exec
