// Causal GQA attention with a document mask, both CUDA variants against the CPU variant of
// the same name: outputs, saved tensors (probs or lse) and all three input gradients. The
// GPU backward reads the GPU forward's saved tensors, as a training step would.
#include <gtest/gtest.h>

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
               " d=" + std::to_string(dm.head_dim) + (use_doc ? " doc" : ""));
  Rng rng(test_seed() ^ static_cast<uint64_t>(dm.s * 131 + dm.head_dim + flash));
  const int64_t nq = dm.b * dm.s * dm.heads * dm.head_dim, nkv = dm.b * dm.s * dm.kv_heads * dm.head_dim;
  const int64_t rows = dm.b * dm.heads * dm.s;
  const std::vector<S> q = random_vec<S>(rng, nq, -2, 2), k = random_vec<S>(rng, nkv, -2, 2);
  const std::vector<S> v = random_vec<S>(rng, nkv), dout = random_vec<S>(rng, nq);
  const std::vector<int32_t> doc = random_docs(rng, dm.b, dm.s);
  const int32_t* doc_cpu = use_doc ? doc.data() : nullptr;

  // CPU reference.
  Workspace cws(cpu::attention_workspace_bytes(dtype_of<S>, dm, flash));
  std::vector<S> o(nq), dq(nq), dk(nkv), dv(nkv), probs(flash ? 0 : rows * dm.s);
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
  Dev<S> d_q(q), d_k(k), d_v(v), d_dout(dout), d_o(nq), d_dq(nq), d_dk(nkv), d_dv(nkv);
  Dev<S> d_probs(flash ? 1 : rows * dm.s);
  Dev<float> d_lse(flash ? rows : 1);
  Dev<int32_t> d_doc(doc);
  const int32_t* doc_gpu = use_doc ? d_doc.p() : nullptr;
  for (Dev<S>* t : {&d_o, &d_dq, &d_dk, &d_dv, &d_probs}) t->poison();
  d_lse.poison();
  DevWorkspace ws(cuda::attention_workspace_bytes(dtype_of<S>, dm, flash));
  if (flash) {
    check(attention_forward_flash(ctx(), d_q.p(), d_k.p(), d_v.p(), doc_gpu, d_o.p(), d_lse.p(), dm, ws.span()));
    check(attention_backward_flash(ctx(), d_q.p(), d_k.p(), d_v.p(), doc_gpu, d_o.p(), d_lse.p(), d_dout.p(),
                                   d_dq.p(), d_dk.p(), d_dv.p(), dm, ws.span()));
  } else {
    check(attention_forward_materialized(ctx(), d_q.p(), d_k.p(), d_v.p(), doc_gpu, d_o.p(), d_probs.p(), dm,
                                         ws.span()));
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
