// Packed documents (TrainingJob::doc_len) and FP8 primary weights (Fp8WeightCopies::primary),
// each against a hand computation:
//   - documents of d tokens packed into a sequence of s, attention masked per document
//     (variable-length attention: FlashAttention-2's varlen kernels, cuDNN's THD layout):
//     a causal query sees on average (d + 1) / 2 keys of its own document, so the causal
//     attention FLOPs are those of sequences of d tokens (the continuous d / 2 here), the
//     projections do not change, and materialised scores still cover the whole s x s;
//   - FP8 primary weights (Megatron-Core fp8_param, Transformer Engine quantized
//     parameters) hold a linear weight only as its FP8 copies: the weights item is the
//     cached-copies item less 2 B per layer parameter, outside ZeRO-3 and blockwise.
#include <gtest/gtest.h>

#include <string>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/cost/stack_profile.h"
#include "planner/cost/time_model.h"
#include "planner/io/presets.h"
#include "planner/spec/recipe.h"
#include "planner/spec/spec_json.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

const PresetRegistry& registry() { return testing::shipped_presets(); }

// Llama 2 7B at 4096 tokens, global batch 64, on 8 H100s: dp 8, ZeRO-1, micro-batch 1.
TrainingJob llama7b_job() {
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 64;
  return j;
}
ParallelPlan dp8_zero1() {
  ParallelPlan p;
  p.dp = 8;
  p.zero = 1;
  p.micro_batch = 1;
  return p;
}

TEST(PackedDocuments, CausalAttentionFlopsAreThoseOfTheDocuments) {
  // Averaging min(i + 1 - start of document, ...) by hand: a query at offset k of its
  // document sees k + 1 keys, on average (d + 1) / 2 over the document.
  double sum = 0;
  for (int i = 0; i < 4096; ++i) sum += (i % 256) + 1;
  EXPECT_DOUBLE_EQ(sum / 4096, (256 + 1) / 2.0);

  const ModelSpec m = *registry().model("llama2-7b");
  LayerContext whole, packed, short_seq;
  whole.b = packed.b = 1;
  whole.s = packed.s = whole.s_kv = packed.s_kv = 4096;
  packed.span_kv = 256;
  short_seq.b = 16, short_seq.s = short_seq.s_kv = 256;  // the same 4096 tokens as 16 sequences of 256
  const LayerFlops w = forward_flops_per_layer(m, whole, 1.0), pk = forward_flops_per_layer(m, packed, 1.0),
                   sh = forward_flops_per_layer(m, short_seq, 1.0);
  const double qw = 4096;  // heads x head dim
  EXPECT_DOUBLE_EQ(w.attention_causal, 2 * 2 * 4096.0 * 4096 * qw * 0.5);
  EXPECT_DOUBLE_EQ(pk.attention_causal, 2 * 2 * 4096.0 * 256 * qw * 0.5);
  EXPECT_DOUBLE_EQ(pk.attention_causal, sh.attention_causal);
  EXPECT_DOUBLE_EQ(pk.gemm_base, w.gemm_base);
  // A span of the whole sequence or more is the whole sequence.
  packed.span_kv = 4096;
  EXPECT_DOUBLE_EQ(forward_flops_per_layer(m, packed, 1.0).attention_causal, w.attention_causal);
  // Materialised scores are kept for the whole sequence (the mask does not shrink them).
  LayerContext whole_unfused = whole, packed_unfused = whole;
  whole_unfused.flash = packed_unfused.flash = false;
  packed_unfused.span_kv = 256;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, packed_unfused, LayerRecompute::none),
                   activation_bytes_per_layer(m, whole_unfused, LayerRecompute::none));
}

TEST(PackedDocuments, StepTimeLosesOnlyTheAttentionOfTheMaskedKeys) {
  const ModelSpec m = *registry().model("llama2-7b");
  const ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  const TrainingJob whole = llama7b_job();
  TrainingJob packed = whole, short_seq = whole;
  packed.doc_len = 256;
  short_seq.seq_len = 256;
  short_seq.global_batch = 64 * 16;
  const ParallelPlan p = dp8_zero1();
  ParallelPlan p_short = p;
  p_short.micro_batch = 16;  // the same tokens per micro-batch
  const Efficiency e;
  const LayerTimes lw = layer_times(m, c, whole, p, layer_context(m, whole, p, 0), LayerRecompute::none, e);
  const LayerTimes lp = layer_times(m, c, packed, p, layer_context(m, packed, p, 0), LayerRecompute::none, e);
  const LayerTimes ls = layer_times(m, c, short_seq, p_short, layer_context(m, short_seq, p_short, 0), LayerRecompute::none, e);
  EXPECT_LT(lp.forward, lw.forward);
  EXPECT_LT(lp.backward, lw.backward);
  // Packing documents of 256 into 4096 costs what sequences of 256 cost, token for token.
  EXPECT_NEAR(lp.forward, ls.forward, 1e-9 * ls.forward);
  EXPECT_NEAR(lp.backward, ls.backward, 1e-9 * ls.backward);
  EXPECT_DOUBLE_EQ(lp.weight_grad, lw.weight_grad);
  // Memory does not change: fused attention keeps O(s) per sequence either way.
  const MemoryReport mw = estimate_memory(m, c, whole, p, MemoryOptions{}), mp = estimate_memory(m, c, packed, p, MemoryOptions{});
  EXPECT_DOUBLE_EQ(mp.worst.total, mw.worst.total);
}

TEST(PackedDocuments, PlanJsonKeepsDocLenAndRefusesOneLongerThanTheSequence) {
  TrainingJob j = llama7b_job();
  j.doc_len = 300;
  Result<TrainingJob> back = job_from_json(to_json(j), "plan.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->doc_len, 300);
  nlohmann::json bad = to_json(j);
  bad["doc_len"] = 5000;
  Result<TrainingJob> r = job_from_json(bad, "plan.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'job.doc_len'"), std::string::npos) << r.status().message();
  bad["doc_len"] = -1;
  r = job_from_json(bad, "plan.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("doc_len"), std::string::npos) << r.status().message();
  TrainingJob k = j;
  k.doc_len = 4097;
  const Status s = check_inputs(*registry().model("llama2-7b"), k, "job");
  ASSERT_FALSE(static_cast<bool>(s));
  EXPECT_NE(s.message().find("'job.doc_len'"), std::string::npos) << s.message();
}

// Llama 2 7B layers on 8 H100s, ZeRO-1: every layer parameter (q k v o, gate up down, two
// RMSNorm weights) loses its 2-byte weight under FP8 primary weights, the FP8 copies (the
// data and, on Hopper, its transpose) and the scaling state staying.
TEST(Fp8PrimaryWeights, DropTheSixteenBitWeightOfEveryLayerParameter) {
  const ModelSpec m = *registry().model("llama2-7b");
  const ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  TrainingJob j = llama7b_job();
  j.fp8 = Fp8Recipe::tensorwise;
  const ParallelPlan p = dp8_zero1();
  MemoryOptions cached, primary;
  cached.fp8_weight_copies = Fp8WeightCopies::cached;
  primary.fp8_weight_copies = Fp8WeightCopies::primary;
  const int w = static_cast<int>(MemoryItem::weights);
  const double h = 4096, f = 11008;
  const double layer_params = 4 * h * h + 3 * h * f + 2 * h;
  const double saved = m.layers * layer_params * 2;
  const MemoryReport mc = estimate_memory(m, c, j, p, cached), mp = estimate_memory(m, c, j, p, primary);
  EXPECT_NEAR(mc.worst.bytes[w] - mp.worst.bytes[w], saved, 1e-9 * saved);
  // What is left of the weights: the embedding and head in 16 bits, the final norm, and
  // the layers' FP8 copies (2 B: data and transpose) with their scaling state.
  const double copies_and_state = mp.worst.bytes[w] - 2 * (2 * 32000 * h + h);
  EXPECT_NEAR(copies_and_state, m.layers * (layer_params * 2 + 4 * 5 * 2 * 4.0), 1e-6 * copies_and_state);
  // Blockwise keeps 16-bit weights (Megatron-Bridge's subchannel recipe sets no
  // fp8_param_gather), and so does ZeRO-3 (its shards' dtype is not modelled).
  TrainingJob jb = j;
  jb.fp8 = Fp8Recipe::blockwise;
  EXPECT_DOUBLE_EQ(estimate_memory(m, c, jb, p, primary).worst.bytes[w], estimate_memory(m, c, jb, p, cached).worst.bytes[w]);
  ParallelPlan z3 = p;
  z3.zero = 3;
  EXPECT_DOUBLE_EQ(estimate_memory(m, c, j, z3, primary).worst.bytes[w], estimate_memory(m, c, j, z3, cached).worst.bytes[w]);
  // The Megatron-Bridge stack keeps them.
  EXPECT_EQ(registry().stack("megatron-bridge")->fp8_weight_copies, Fp8WeightCopies::primary);
}

}  // namespace
}  // namespace llmplan
