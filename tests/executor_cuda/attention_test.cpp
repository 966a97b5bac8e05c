// Causal GQA attention with a document mask, both CUDA variants against the CPU variant of
// the same name: outputs, saved tensors (probs or lse) and all three input gradients. The
// GPU backward reads the GPU forward's saved tensors, as a training step would.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_test_util.h"
#include "executor/cpu/attention.h"
#include "executor/cuda/attention.h"

namespace llmplan::exec::cuda::testing {
namespace {

template <class T>
class CudaAttention : public ::testing::Test {};
TYPED_TEST_SUITE(CudaAttention, testing::StorageTypes);

// Document ids (b, s): contiguous runs with random boundaries, as packed sequences.
std::vector<int32_t> random_docs(Rng& rng, int64_t b, int64_t s) {
  std::vector<int32_t> doc(static_cast<size_t>(b * s));
  for (int64_t bi = 0; bi < b; ++bi) {
    int32_t id = 0;
    for (int64_t i = 0; i < s; ++i) {
      if (i > 0 && rng.uniform(0, 1) < 0.08) ++id;
      doc[static_cast<size_t>(bi * s + i)] = id;
    }
  }
  return doc;
}

template <class S>
void check_attention(const AttentionDims& dm, bool use_doc, bool flash) {
  SCOPED_TRACE(std::string(flash ? "flash" : "materialized") + " b=" + std::to_string(dm.b) + " s=" +
               std::to_string(dm.s) + " heads=" + std::to_string(dm.heads) + "/" + std::to_string(dm.kv_heads) +
               " d=" + std::to_string(dm.head_dim) + (use_doc ? " doc" : "") +
               (dm.window > 0 ? " window " + std::to_string(dm.window) : std::string()) +
               (dm.v_dim > 0 ? " v_dim " + std::to_string(dm.v_dim) : std::string()) +
               (dm.sinks.empty() ? std::string() : " sinks"));
  Rng rng(test_seed() ^ static_cast<uint64_t>(dm.s * 131 + dm.head_dim + flash));
  // q, k (and dq, dk) at the head width; v, o, dout (and dv) at the value width.
  const int64_t dvw = cpu::value_dim(dm);
  const int64_t nq = dm.b * dm.s * dm.heads * dm.head_dim, nkv = dm.b * dm.s * dm.kv_heads * dm.head_dim;
  const int64_t no = dm.b * dm.s * dm.heads * dvw, nv = dm.b * dm.s * dm.kv_heads * dvw;
  const int64_t rows = dm.b * dm.heads * dm.s;
  const std::vector<S> q = random_vec<S>(rng, nq, -2, 2), k = random_vec<S>(rng, nkv, -2, 2);
  const std::vector<S> v = random_vec<S>(rng, nv), dout = random_vec<S>(rng, no);
  const std::vector<int32_t> doc = random_docs(rng, dm.b, dm.s);
  const int32_t* doc_cpu = use_doc ? doc.data() : nullptr;

  // CPU reference.
  Workspace cws(cpu::attention_workspace_bytes(dtype_of<S>, dm, flash));
  std::vector<S> o(no), dq(nq), dk(nkv), dv(nv), probs(flash ? 0 : rows * dm.s);
  std::vector<float> lse(flash ? rows : 0);
  if (flash) {
    cpu::attention_forward_flash(q.data(), k.data(), v.data(), doc_cpu, o.data(), lse.data(), dm, cws.span());
    cpu::attention_backward_flash(q.data(), k.data(), v.data(), doc_cpu, o.data(), lse.data(), dout.data(), dq.data(),
                                  dk.data(), dv.data(), dm, cws.span());
  } else {
    cpu::attention_forward_materialized(q.data(), k.data(), v.data(), doc_cpu, o.data(), probs.data(), dm, cws.span());
    cpu::attention_backward_materialized(q.data(), k.data(), v.data(), probs.data(), dout.data(), dq.data(), dk.data(),
                                         dv.data(), dm, cws.span());
  }

  // GPU, every output poisoned.
  Dev<S> d_q(q), d_k(k), d_v(v), d_dout(dout), d_o(no), d_dq(nq), d_dk(nkv), d_dv(nv);
  Dev<S> d_probs(flash ? 1 : rows * dm.s);
  Dev<float> d_lse(flash ? rows : 1);
  Dev<int32_t> d_doc(doc);
  const int32_t* doc_gpu = use_doc ? d_doc.p() : nullptr;
  std::vector<float> sinks_f(dm.sinks.begin(), dm.sinks.end());
  if (sinks_f.empty()) sinks_f.push_back(0.0f);
  Dev<float> d_sinks(sinks_f);
  const float* sinks_gpu = dm.sinks.empty() ? nullptr : d_sinks.p();
  for (Dev<S>* t : {&d_o, &d_dq, &d_dk, &d_dv, &d_probs}) t->poison();
  d_lse.poison();
  DevWorkspace ws(cuda::attention_workspace_bytes(dtype_of<S>, dm, flash));
  if (flash) {
    check(attention_forward_flash(ctx(), d_q.p(), d_k.p(), d_v.p(), doc_gpu, d_o.p(), d_lse.p(), dm, ws.span(), sinks_gpu));
    check(attention_backward_flash(ctx(), d_q.p(), d_k.p(), d_v.p(), doc_gpu, d_o.p(), d_lse.p(), d_dout.p(),
                                   d_dq.p(), d_dk.p(), d_dv.p(), dm, ws.span()));
  } else {
    check(attention_forward_materialized(ctx(), d_q.p(), d_k.p(), d_v.p(), doc_gpu, d_o.p(), d_probs.p(), dm,
                                         ws.span(), sinks_gpu));
    check(attention_backward_materialized(ctx(), d_q.p(), d_k.p(), d_v.p(), d_probs.p(), d_dout.p(), d_dq.p(),
                                          d_dk.p(), d_dv.p(), dm, ws.span()));
  }
  check(ctx().synchronize());
  EXPECT_TRUE(close("o", d_o.download(), o, kTol<S>));
  if (flash) {
    EXPECT_TRUE(close("lse", d_lse.download(), lse, 1e-5));
  } else {
    EXPECT_TRUE(close("probs", d_probs.download(), probs, kTol<S>));  // masked entries must be written 0
  }
  EXPECT_TRUE(close("dq", d_dq.download(), dq, kTol<S>));
  EXPECT_TRUE(close("dk", d_dk.download(), dk, kTol<S>));
  EXPECT_TRUE(close("dv", d_dv.download(), dv, kTol<S>));
  if (!dm.sinks.empty()) {  // the sinks' gradient, from lse or the probabilities
    std::vector<double> ds(static_cast<size_t>(dm.heads), 0.0);
    cpu::attention_sink_backward<S>(o.data(), dout.data(), flash ? lse.data() : nullptr, flash ? nullptr : probs.data(), dm,
                                    ds.data());
    Dev<float> d_gs(std::vector<float>(static_cast<size_t>(dm.heads), 0.0f));
    check(attention_sink_backward<S, float>(ctx(), d_o.p(), d_dout.p(), flash ? d_lse.p() : nullptr,
                                            flash ? nullptr : d_probs.p(), dm, sinks_gpu, d_gs.p()));
    EXPECT_TRUE(close("dsinks", d_gs.download(), ds, std::is_same_v<S, float> ? 1e-4 : 3 * kTol<S>));
  }
}

AttentionDims dims(int64_t b, int64_t s, int64_t heads, int64_t kv, int64_t d, double scale = 0) {
  AttentionDims dm;
  dm.b = b;
  dm.s = s;
  dm.heads = heads;
  dm.kv_heads = kv;
  dm.head_dim = d;
  dm.scale = scale;
  dm.block = 16;  // the CPU flash tile; the GPU's is fixed
  return dm;
}

TYPED_TEST(CudaAttention, MaterializedMatchesCpu) {
  using S = TypeParam;
  check_attention<S>(dims(2, 67, 4, 2, 64), true, false);        // GQA, packed documents, odd s
  check_attention<S>(dims(1, 128, 6, 6, 128), false, false);     // no GQA, widest head
  check_attention<S>(dims(2, 40, 8, 1, 32, 0.2), true, false);   // MQA, explicit scale
}

TYPED_TEST(CudaAttention, FlashMatchesCpu) {
  using S = TypeParam;
  check_attention<S>(dims(2, 67, 4, 2, 64), true, true);
  check_attention<S>(dims(1, 128, 6, 6, 128), false, true);
  check_attention<S>(dims(2, 40, 8, 1, 32, 0.2), true, true);
  check_attention<S>(dims(1, 300, 2, 1, 80), true, true);  // several key tiles per row; d not a multiple of 32
  check_attention<S>(dims(1, 520, 4, 2, 64), true, true);  // 16-bit: several 64-row tensor-core tiles, a partial last one
  check_attention<S>(dims(2, 200, 4, 4, 128), false, true);  // widest head on tensor cores, no document mask
}

// ---- context parallel: query and key slices (cpu/attention.h), the SIMT flash kernels

// lse with rows at -inf (no key seen): those rows -inf on both, the rest close.
::testing::AssertionResult close_lse(const std::string& what, std::vector<float> gpu, std::vector<float> cpu) {
  if (gpu.size() != cpu.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < cpu.size(); ++i) {
    const bool gi = gpu[i] == -INFINITY, ci = cpu[i] == -INFINITY;
    if (gi != ci) return ::testing::AssertionFailure() << what << ": row " << i << " gpu " << gpu[i] << " cpu " << cpu[i];
    if (ci) gpu[i] = cpu[i] = 0.0f;
  }
  return close(what, gpu, cpu, 1e-5);
}

// CP rank r of cp holds chunks r and 2cp-1-r of 2cp: its rows of a sequence of s positions.
void cp_slice(AttentionDims& dm, int cp, int r, bool keys) {
  const int64_t c = dm.s / (2 * cp);
  int64_t& rows = keys ? dm.k_rows : dm.q_rows;
  int64_t& split = keys ? dm.k_split : dm.q_split;
  int64_t& off = keys ? dm.k_offset : dm.q_offset;
  int64_t& hi = keys ? dm.k_offset_hi : dm.q_offset_hi;
  rows = 2 * c;
  split = c;
  off = r * c;
  hi = (2 * cp - 1 - r) * c;
}

// Rank r's queries against every key (the all-gather exchange), then against each owner's
// keys in turn (the ring's steps: partial o and lse, rows that see no key at o = 0 and
// -inf; the backward with the whole-key forward's o and lse, as the ring's backward reads
// the merged ones), and the partials merged: all against the CPU.
template <class S>
void check_cp_slices(AttentionDims dm, int cp, int r, bool use_doc) {
  SCOPED_TRACE("cp " + std::to_string(cp) + " rank " + std::to_string(r) + " s=" + std::to_string(dm.s) +
               " d=" + std::to_string(dm.head_dim) + (use_doc ? " doc" : ""));
  Rng rng(test_seed() ^ static_cast<uint64_t>(dm.s * 7 + cp * 3 + r));
  cp_slice(dm, cp, r, false);
  const int64_t sq = dm.q_rows, sl = sq, kv = dm.kv_heads * dm.head_dim;
  const int64_t nq = dm.b * sq * dm.heads * dm.head_dim, nkv_whole = dm.b * dm.s * kv, nkv = dm.b * sl * kv;
  const int64_t rows = dm.b * dm.heads * sq;
  const std::vector<S> q = random_vec<S>(rng, nq, -2, 2), dout = random_vec<S>(rng, nq);
  const std::vector<S> k = random_vec<S>(rng, nkv_whole, -2, 2), v = random_vec<S>(rng, nkv_whole);
  const std::vector<int32_t> doc = random_docs(rng, dm.b, dm.s);
  const int32_t* doc_cpu = use_doc ? doc.data() : nullptr;
  Dev<int32_t> d_doc(doc);
  const int32_t* doc_gpu = use_doc ? d_doc.p() : nullptr;
  Workspace cws(cpu::attention_workspace_bytes(dtype_of<S>, dm, true));
  DevWorkspace ws(cuda::attention_workspace_bytes(dtype_of<S>, dm, true));
  // -- every key (all-gather)
  std::vector<S> o(nq), dq(nq), dk(nkv_whole), dv(nkv_whole);
  std::vector<float> lse(rows);
  cpu::attention_forward_flash(q.data(), k.data(), v.data(), doc_cpu, o.data(), lse.data(), dm, cws.span());
  cpu::attention_backward_flash(q.data(), k.data(), v.data(), doc_cpu, o.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                                dv.data(), dm, cws.span());
  Dev<S> d_q(q), d_k(k), d_v(v), d_dout(dout), d_o(nq), d_dq(nq), d_dk(nkv_whole), d_dv(nkv_whole);
  Dev<float> d_lse(rows);
  for (Dev<S>* t : {&d_o, &d_dq, &d_dk, &d_dv}) t->poison();
  d_lse.poison();
  check(attention_forward_flash(ctx(), d_q.p(), d_k.p(), d_v.p(), doc_gpu, d_o.p(), d_lse.p(), dm, ws.span()));
  check(attention_backward_flash(ctx(), d_q.p(), d_k.p(), d_v.p(), doc_gpu, d_o.p(), d_lse.p(), d_dout.p(), d_dq.p(), d_dk.p(),
                                 d_dv.p(), dm, ws.span()));
  EXPECT_TRUE(close("o (all keys)", d_o.download(), o, kTol<S>));
  EXPECT_TRUE(close("lse (all keys)", d_lse.download(), lse, 1e-5));
  EXPECT_TRUE(close("dq (all keys)", d_dq.download(), dq, kTol<S>));
  EXPECT_TRUE(close("dk (all keys)", d_dk.download(), dk, kTol<S>));  // rows past the last query: 0 on both
  EXPECT_TRUE(close("dv (all keys)", d_dv.download(), dv, kTol<S>));
  // -- each owner's keys (the ring's steps)
  const Dev<S> d_o_whole(o);
  const Dev<float> d_lse_whole(lse);
  std::vector<std::vector<S>> parts_o;
  std::vector<std::vector<float>> parts_lse;
  for (int owner = 0; owner < cp; ++owner) {
    AttentionDims dk_dm = dm;
    cp_slice(dk_dm, cp, owner, true);
    SCOPED_TRACE("keys of rank " + std::to_string(owner));
    std::vector<S> ko(nkv), vo(nkv);  // the owner's rows of k and v
    for (int64_t bi = 0; bi < dm.b; ++bi)
      for (int64_t t = 0; t < sl; ++t) {
        const int64_t pos = t < dk_dm.k_split ? dk_dm.k_offset + t : dk_dm.k_offset_hi + (t - dk_dm.k_split);
        for (int64_t e = 0; e < kv; ++e) {
          ko[(bi * sl + t) * kv + e] = k[(bi * dm.s + pos) * kv + e];
          vo[(bi * sl + t) * kv + e] = v[(bi * dm.s + pos) * kv + e];
        }
      }
    std::vector<S> op(nq), dqp(nq), dkp(nkv), dvp(nkv);
    std::vector<float> lp(rows);
    cpu::attention_forward_flash(q.data(), ko.data(), vo.data(), doc_cpu, op.data(), lp.data(), dk_dm, cws.span());
    cpu::attention_backward_flash(q.data(), ko.data(), vo.data(), doc_cpu, o.data(), lse.data(), dout.data(), dqp.data(),
                                  dkp.data(), dvp.data(), dk_dm, cws.span());
    Dev<S> d_ko(ko), d_vo(vo), d_op(nq), d_dqp(nq), d_dkp(nkv), d_dvp(nkv);
    Dev<float> d_lp(rows);
    for (Dev<S>* t : {&d_op, &d_dqp, &d_dkp, &d_dvp}) t->poison();
    d_lp.poison();
    check(attention_forward_flash(ctx(), d_q.p(), d_ko.p(), d_vo.p(), doc_gpu, d_op.p(), d_lp.p(), dk_dm, ws.span()));
    check(attention_backward_flash(ctx(), d_q.p(), d_ko.p(), d_vo.p(), doc_gpu, d_o_whole.p(), d_lse_whole.p(), d_dout.p(),
                                   d_dqp.p(), d_dkp.p(), d_dvp.p(), dk_dm, ws.span()));
    EXPECT_TRUE(close("o (partial)", d_op.download(), op, kTol<S>));
    EXPECT_TRUE(close_lse("lse (partial)", d_lp.download(), lp));
    EXPECT_TRUE(close("dq (partial)", d_dqp.download(), dqp, kTol<S>));
    EXPECT_TRUE(close("dk (partial)", d_dkp.download(), dkp, kTol<S>));
    EXPECT_TRUE(close("dv (partial)", d_dvp.download(), dvp, kTol<S>));
    parts_o.push_back(op);
    parts_lse.push_back(lp);
  }
  // -- the partials merged, in ring order from this rank's own keys: the whole-key output
  std::vector<S> mo = parts_o[static_cast<size_t>(r)];
  std::vector<float> ml = parts_lse[static_cast<size_t>(r)];
  Dev<S> d_mo(mo);
  Dev<float> d_ml(ml);
  for (int step = 1; step < cp; ++step) {
    const auto owner = static_cast<size_t>((r - step + cp) % cp);
    cpu::attention_merge_partial(mo.data(), ml.data(), parts_o[owner].data(), parts_lse[owner].data(), dm);
    const Dev<S> d_po(parts_o[owner]);
    const Dev<float> d_pl(parts_lse[owner]);
    check(attention_merge_partial(ctx(), d_mo.p(), d_ml.p(), d_po.p(), d_pl.p(), dm));
  }
  EXPECT_TRUE(close("merged o", d_mo.download(), mo, kTol<S>));
  EXPECT_TRUE(close("merged lse", d_ml.download(), ml, 1e-5));
  EXPECT_TRUE(close("merged o against all keys", d_mo.download(), o, kTol<S>));
}

TYPED_TEST(CudaAttention, ContextParallelSlicesMatchCpu) {
  using S = TypeParam;
  for (int r = 0; r < 2; ++r) check_cp_slices<S>(dims(2, 96, 4, 2, 64), 2, r, true);  // 4 chunks of 24
  check_cp_slices<S>(dims(1, 192, 4, 4, 80), 3, 1, true);                             // 6 chunks of 32, d 80
  check_cp_slices<S>(dims(2, 128, 8, 2, 128), 2, 0, false);                           // widest head, no documents
}

// Sliding-window attention (cpu/attention.h allowed(i, j): i - j < window, Gemma 3's and
// gpt-oss's local layers): the materialized softmax and the SIMT flash kernels against the
// CPU, with a window shorter than a key tile, one spanning several tiles, and one on
// 16-bit storage that would otherwise take the tensor-core kernels (which mask causally
// only, so a windowed call must not reach them); under context parallelism, a window that
// reaches across the chunks of the load-balanced layout.
TYPED_TEST(CudaAttention, SlidingWindowMatchesCpu) {
  using S = TypeParam;
  for (bool flash : {false, true}) {
    AttentionDims a = dims(2, 67, 4, 2, 64);
    a.window = 5;
    check_attention<S>(a, true, flash);
    AttentionDims b = dims(1, 300, 2, 1, 64);
    b.window = 100;
    check_attention<S>(b, false, flash);
    AttentionDims c = dims(1, 520, 4, 2, 64);
    c.window = 128;
    check_attention<S>(c, true, flash);
  }
  AttentionDims d = dims(2, 96, 4, 2, 64);
  d.window = 30;  // chunks of 24: a query sees into the chunk before its own
  for (int r = 0; r < 2; ++r) check_cp_slices<S>(d, 2, r, true);
}

// Latent attention's value heads, narrower than its query and key heads (DeepSeek-V2/V3:
// 192 against 128; here scaled down): both variants against the CPU, GQA and packed
// documents included, with a 16-bit case that would otherwise take the tensor-core kernels;
// and the materialized path with DeepSeek-V3's own widths, beyond the flash tile.
TYPED_TEST(CudaAttention, NarrowValueHeadsMatchCpu) {
  using S = TypeParam;
  for (bool flash : {false, true}) {
    AttentionDims a = dims(2, 67, 4, 4, 96);
    a.v_dim = 64;
    check_attention<S>(a, true, flash);
    AttentionDims b = dims(1, 130, 4, 2, 48);
    b.v_dim = 32;
    b.window = 40;
    check_attention<S>(b, false, flash);
  }
  AttentionDims c = dims(1, 64, 2, 2, 192);
  c.v_dim = 128;
  check_attention<S>(c, true, false);
}

// Attention sinks (gpt-oss: one learned logit per head in every row's softmax, value 0):
// both variants against the CPU, the output, lse or probabilities, the input gradients and
// the sinks' own gradient; with GQA, documents, a window (gpt-oss's local layers), and
// 16-bit storage that would otherwise take the tensor-core kernels. Without their device
// copy a forward with sinks is a clear bad_input, never a silently different result.
TYPED_TEST(CudaAttention, SinksMatchCpu) {
  using S = TypeParam;
  const std::vector<double> four = {0.7, -1.2, 2.5, 0.0}, eight = {0.3, -0.4, 1.1, 3.0, -2.0, 0.0, 0.9, -0.1};
  for (bool flash : {false, true}) {
    AttentionDims a = dims(2, 67, 4, 2, 64);
    a.sinks = four;
    check_attention<S>(a, true, flash);
    AttentionDims b = dims(1, 140, 8, 2, 64);
    b.sinks = eight;
    b.window = 32;
    check_attention<S>(b, false, flash);
  }
  AttentionDims dm = dims(1, 8, 4, 2, 64);
  dm.sinks = four;
  const Status s = attention_forward_flash<S>(ctx(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, dm, {});
  EXPECT_EQ(s.kind(), ErrorKind::bad_input);
  EXPECT_NE(s.message().find("sinks"), std::string::npos) << s.message();
}

// The two GPU variants agree with each other on the same inputs (outputs and gradients).
TYPED_TEST(CudaAttention, FlashAgreesWithMaterializedOnTheGpu) {
  using S = TypeParam;
  const AttentionDims dm = dims(2, 96, 4, 2, 64);
  Rng rng(test_seed());
  const int64_t nq = dm.b * dm.s * dm.heads * dm.head_dim, nkv = dm.b * dm.s * dm.kv_heads * dm.head_dim;
  Dev<S> q(random_vec<S>(rng, nq)), k(random_vec<S>(rng, nkv)), v(random_vec<S>(rng, nkv)), dout(random_vec<S>(rng, nq));
  Dev<int32_t> doc(random_docs(rng, dm.b, dm.s));
  Dev<S> o1(nq), o2(nq), probs(dm.b * dm.heads * dm.s * dm.s), dq1(nq), dq2(nq), dk1(nkv), dk2(nkv), dv1(nkv), dv2(nkv);
  Dev<float> lse(dm.b * dm.heads * dm.s);
  DevWorkspace w1(cuda::attention_workspace_bytes(dtype_of<S>, dm, false)), w2(cuda::attention_workspace_bytes(dtype_of<S>, dm, true));
  check(attention_forward_materialized(ctx(), q.p(), k.p(), v.p(), doc.p(), o1.p(), probs.p(), dm, w1.span()));
  check(attention_backward_materialized(ctx(), q.p(), k.p(), v.p(), probs.p(), dout.p(), dq1.p(), dk1.p(), dv1.p(), dm,
                                        w1.span()));
  check(attention_forward_flash(ctx(), q.p(), k.p(), v.p(), doc.p(), o2.p(), lse.p(), dm, w2.span()));
  check(attention_backward_flash(ctx(), q.p(), k.p(), v.p(), doc.p(), o2.p(), lse.p(), dout.p(), dq2.p(), dk2.p(),
                                 dv2.p(), dm, w2.span()));
  EXPECT_TRUE(close("o", o2.download(), o1.download(), kTol<S>));
  EXPECT_TRUE(close("dq", dq2.download(), dq1.download(), kTol<S>));
  EXPECT_TRUE(close("dk", dk2.download(), dk1.download(), kTol<S>));
  EXPECT_TRUE(close("dv", dv2.download(), dv1.download(), kTol<S>));
}

TEST(CudaAttention, FlashRejectsHeadsWiderThanItsTile) {
  const AttentionDims dm = dims(1, 8, 2, 2, 256);
  const Status s = attention_forward_flash<float>(ctx(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, dm, {});
  EXPECT_EQ(s.kind(), ErrorKind::bad_input);
  EXPECT_NE(s.message().find("head_dim 256"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace llmplan::exec::cuda::testing
