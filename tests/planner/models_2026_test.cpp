// The models people train in 2026 (issue 18): DeepSeek-V3 (multi-head latent attention,
// dense then MoE layers, shared experts of their own width, multi-token prediction),
// gpt-oss (alternating sliding-window layers, attention sinks, expert biases) and Gemma 3
// (5:1 local/global layers, QK-norm, post-norms). Each preset against the totals its
// publisher prints, each new recipe term against a hand derivation written here, and the
// memory and time models' per-stage sums against the kinds of the layers each stage holds.
#include <gtest/gtest.h>

#include <cmath>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/cost/time_model.h"
#include "planner/io/presets.h"
#include "planner/search/sweep.h"
#include "planner/spec/recipe.h"
#include "planner/spec/spec_json.h"

namespace llmplan {
namespace {

PresetRegistry presets() { return std::move(PresetRegistry::load(LLMPLAN_SOURCE_ROOT)).value(); }

ModelSpec preset(const char* id) {
  const Result<ModelSpec> m = presets().model(id);
  EXPECT_TRUE(m.ok()) << id << ": " << m.status().message();
  return m.ok() ? *m : ModelSpec{};
}

// ---------------------------------------------------------------- presets vs publishers

// DeepSeek-V3 technical report (arXiv 2412.19437), abstract and sec. 4.2: "671B total
// parameters with 37B activated for each token"; the HF README: the MTP module adds 14B (685B
// on Hugging Face). The main model, by hand from the config: per layer MLA 187,107,328
// (q_a 7168x1536, its norm 1536, q_b 1536x128x192, kv_a 7168x576, its norm 512, kv_b
// 512x128x256, o 16384x7168) and two norms of 7168; 3 dense layers of 3 x 7168 x 18432;
// 58 MoE layers of 257 experts of 3 x 7168 x 2048 (256 routed, 1 shared) and a 7168 x 256
// router; the embedding and the untied head 129280 x 7168 each, the final norm.
TEST(Models2026, DeepSeekV3CountsAreThePapers) {
  const ModelSpec m = preset("deepseek-v3");
  const ParamCounts pc = count_params(m, 1, 1, 1, 0, 0);
  const double mla = 7168.0 * 1536 + 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512 + 512.0 * 128 * 256 + 16384.0 * 7168;
  EXPECT_DOUBLE_EQ(mla, 187107328.0);
  const double norms = 2 * 7168.0, expert = 3 * 7168.0 * 2048, router = 7168.0 * 256, vocab = 129280.0 * 7168;
  const double dense = mla + 3 * 7168.0 * 18432 + norms, moe = mla + 257 * expert + router + norms;
  EXPECT_DOUBLE_EQ(pc.dense.per_layer, dense);
  EXPECT_DOUBLE_EQ(pc.per_layer, moe);
  EXPECT_DOUBLE_EQ(pc.total, 3 * dense + 58 * moe + 2 * vocab + 7168);
  EXPECT_NEAR(pc.total, 671e9, 0.5e9);  // "671B"
  // Activated: 8 of the 256 routed experts. The paper's 37B, like the gpt-oss card's active
  // counts, leaves out the token embedding (a lookup): 36.6B; 37.6B with it.
  const double active = 3 * dense + 58 * (mla + 9 * expert + router + norms) + 2 * vocab + 7168;
  EXPECT_DOUBLE_EQ(pc.active_per_token, active);
  EXPECT_NEAR(pc.active_per_token - pc.embedding, 37e9, 0.5e9);
  // The MTP module: a MoE block, eh_proj 14336 x 7168 and three norms (11.61B), which with
  // its stored copies of the embedding and the head is 13.46B, the HF README's "14B" (685B
  // - 671B, both rounded; the checkpoint's FP8 block scales are counted there too).
  EXPECT_DOUBLE_EQ(pc.mtp, moe + 2 * 7168.0 * 7168 + 3 * 7168);
  EXPECT_NEAR(pc.mtp + 2 * vocab, 13.5e9, 0.05e9);
}

// gpt-oss model card (arXiv 2508.10925) Table 1: gpt-oss-120b 116.83B total, 5.13B active,
// of which MLP 114.71B, attention 0.96B, embedding + unembedding 1.16B; gpt-oss-20b 20.91B /
// 3.61B. The active counts leave the token embedding out (5.71B - 0.58B = 5.13B).
TEST(Models2026, GptOssCountsAreTheModelCards) {
  struct Card {
    const char* id;
    int layers, experts;
    double total, active;
  };
  for (const Card& c : {Card{"gpt-oss-120b", 36, 128, 116.83e9, 5.13e9}, Card{"gpt-oss-20b", 24, 32, 20.91e9, 3.61e9}}) {
    SCOPED_TRACE(c.id);
    const ModelSpec m = preset(c.id);
    const ParamCounts pc = count_params(m, 1, 1, 1, 0, 0);
    EXPECT_NEAR(pc.total, c.total, 0.005e9);
    EXPECT_NEAR(pc.active_per_token - pc.embedding, c.active, 0.005e9);
    // By hand: an expert is gate_up 2880 x 5760 + its bias 5760 + down 2880 x 2880 + its
    // bias 2880; the router 2880 x E + E; attention q 2880 x 4096 + 4096, k and v 2880 x 512
    // + 512, o 4096 x 2880 + 2880, 64 sinks.
    const double expert = 2880.0 * 5760 + 5760 + 2880.0 * 2880 + 2880, router = 2880.0 * c.experts + c.experts;
    const double attention = 2880.0 * 4096 + 4096 + 2 * (2880.0 * 512 + 512) + 4096.0 * 2880 + 2880 + 64;
    EXPECT_DOUBLE_EQ(pc.per_layer, c.experts * expert + router + attention + 2 * 2880.0);
    if (c.experts == 128) {
      EXPECT_NEAR(c.layers * (c.experts * expert + router), 114.71e9, 0.005e9);  // the card's MLP
      EXPECT_NEAR(c.layers * attention, 0.96e9, 0.005e9);                        // its attention
      EXPECT_NEAR(2 * 201088.0 * 2880, 1.16e9, 0.005e9);                         // its embedding + unembedding
    }
  }
}

// Gemma 3 technical report (arXiv 2503.19786) Table 1, 27B: 25,600M non-embedding
// parameters; 1,416M embedding parameters, which include the vision projector (1152 x 5376
// and its 1152-wide norm) beside the 262208 x 5376 token table. By hand per layer: q 5376 x
// 4096, k and v 5376 x 2048, o 4096 x 5376, q/k norms 2 x 128, the MLP 3 x 5376 x 21504,
// four norms of 5376.
TEST(Models2026, Gemma3CountsAreTheReports) {
  const ModelSpec m = preset("gemma3-27b");
  const ParamCounts pc = count_params(m, 1, 1, 1, 0, 0);
  const double layer = 5376.0 * 4096 * 2 + 2 * 5376.0 * 2048 + 256 + 3 * 5376.0 * 21504 + 4 * 5376.0;
  EXPECT_DOUBLE_EQ(pc.per_layer, layer);
  EXPECT_NEAR(pc.total - pc.embedding, 25600e6, 0.5e6);
  EXPECT_DOUBLE_EQ(pc.embedding, 262208.0 * 5376);
  EXPECT_NEAR(pc.embedding + 1152.0 * 5376 + 1152, 1416e6, 0.5e6);
  EXPECT_TRUE(m.tied_embeddings);
}

// ---------------------------------------------------------------- layer kinds

// The layer patterns the HF modeling files define: DeepseekV3DecoderLayer (MoE from
// first_k_dense_replace = 3), GptOssConfig.layer_types (sliding, full, sliding, ...) and
// Gemma3DecoderLayer (is_sliding = (i + 1) % 6 != 0: layers 5, 11, ..., 59 global).
TEST(Models2026, LayerKindsFollowTheModelingFiles) {
  const ModelSpec ds = preset("deepseek-v3"), oss = preset("gpt-oss-120b"), gemma = preset("gemma3-27b");
  for (int i = 0; i < ds.layers; ++i) EXPECT_EQ(layer_kind(ds, i), i < 3 ? 1 : 0) << i;  // bit 0: dense MLP in a MoE model
  for (int i = 0; i < oss.layers; ++i) EXPECT_EQ(oss.attention_window(i), i % 2 == 0 ? 128 : 0) << i;
  int global = 0;
  for (int i = 0; i < gemma.layers; ++i) global += gemma.attention_window(i) == 0 ? 1 : 0;
  EXPECT_EQ(global, 10);
  EXPECT_EQ(gemma.attention_window(5), 0);
  EXPECT_EQ(gemma.attention_window(61), 1024);
  EXPECT_EQ(layer_kinds_present(ds), 0b11u);
  EXPECT_EQ(layer_kinds_present(oss), 0b101u);  // MoE full (0) and MoE windowed (2)
  EXPECT_EQ(layer_kinds_present(preset("llama2-7b")), 1u);
}

// Pipeline stages of DeepSeek-V3 hold different kinds: pp 16 puts layers 0-2 (the three
// dense ones) on stage 0 and MoE layers elsewhere. The stage's parameters and its kept
// activations are those of its own layers: by hand, stage 0 is 3 dense layers and the
// embedding, stage 1 3 MoE layers.
TEST(Models2026, PipelineStagesSumTheKindsOfTheirOwnLayers) {
  const ModelSpec m = preset("deepseek-v3");
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 64;
  ParallelPlan p;
  p.pp = 16, p.dp = 4, p.ep = 4, p.micro_batch = 1;
  p.grad_accum = 16;
  ASSERT_EQ(pp_stage_layers(m.layers, p, 0), 3);
  const ParamCounts pc = count_params(m, 1, 16, 4, 0, 0);
  const StageParams s0 = stage_params(m, j, p, pc, 0), s1 = stage_params(m, j, p, pc, 1);
  const double mla = 187107328.0, norms = 2 * 7168.0;
  EXPECT_NEAR(s0.trainable, 3 * (mla + 3 * 7168.0 * 18432 + norms) + 129280.0 * 7168, 1e-12 * s0.trainable);
  EXPECT_DOUBLE_EQ(s0.expert, 0);
  // 64 of the 256 routed experts on each EP rank, the shared expert and router whole.
  const double expert = 3 * 7168.0 * 2048;
  EXPECT_NEAR(s1.trainable, 3 * (mla + 64 * expert + expert + 7168.0 * 256 + norms), 1e-12 * s1.trainable);
  EXPECT_NEAR(s1.expert, 3 * 64 * expert, 1e-12 * s1.expert);
  // The last stage: its 4 MoE layers, the head, and the MTP module with its embedding copy.
  const StageParams last = stage_params(m, j, p, pc, 15);
  const double moe_rank = mla + 64 * expert + expert + 7168.0 * 256 + norms;
  EXPECT_NEAR(last.trainable, 4 * moe_rank + 7168 + 129280.0 * 7168 + (moe_rank + 2 * 7168.0 * 7168 + 3 * 7168) + 129280.0 * 7168,
              1e-12 * last.trainable);
  // Kept activations per micro-batch: the memory model's stage sums are the layers' own.
  const MemoryInputs in = memory_inputs(m, GpuSpec{}, j, p);
  const LayerContext dense_lc = layer_context(m, j, p, 0), moe_lc = layer_context(m, j, p, 3);
  EXPECT_TRUE(dense_lc.dense_mlp);
  EXPECT_FALSE(moe_lc.dense_mlp);
  const double dense_bytes = activation_bytes_per_layer(m, dense_lc, LayerRecompute::none);
  const double moe_bytes = activation_bytes_per_layer(m, moe_lc, LayerRecompute::none);
  // The two MLPs differ by hand: dense keeps mlp.input, gate/up/act of 18432; MoE keeps the
  // ln2 output, router probabilities (fp32, 256 per token) and, over E x C = 256 x
  // ceil(4096 x 8 / 256) = 32768 rows (x the load factor of ep 4), the expert input, gate,
  // up, act and output, and the shared expert's gate, up and act of 2048.
  const double tok = 4096, rows = 256 * std::ceil(4096.0 * 8 / 256) * moe_rank_load_factor(m, 4);
  const double mlp_dense = tok * 7168 * 2 + 3 * tok * 18432 * 2;
  const double mlp_moe = tok * 7168 * 2 + tok * 256 * 4 + rows * (7168 + 3 * 2048 + 7168) * 2 + 3 * tok * 2048 * 2;
  EXPECT_NEAR(moe_bytes - dense_bytes, mlp_moe - mlp_dense, 1e-6 * moe_bytes);
  bool saw0 = false, saw1 = false;
  for (int i = 0; i < in.shape_count; ++i) {
    const MemoryInputs::StageLayers& sl = in.shapes[i];
    if (sl.kinds.layers[1] == 3 && sl.kinds.layers[0] == 0) {
      saw0 = true;
      EXPECT_DOUBLE_EQ(sl.kept[0], 3 * dense_bytes);
    }
    if (sl.kinds.layers[0] == 3 && sl.kinds.layers[1] == 0) {
      saw1 = true;
      EXPECT_DOUBLE_EQ(sl.kept[0], 3 * moe_bytes);
    }
  }
  EXPECT_TRUE(saw0 && saw1);
  // Interleaving gives each stage the kinds of its chunks: Gemma 3's 62 layers on pp 2 x vpp
  // 31, chunks of one layer, put the even layers on stage 0 and the odd ones on stage 1.
  const ModelSpec g = preset("gemma3-27b");
  ParallelPlan q;
  q.pp = 2, q.vpp = 31, q.dp = 1;
  int global0 = 0;
  for (int i = 0; i < pp_stage_layers(g.layers, q, 0); ++i) global0 += g.attention_window(stage_layer_global_index(g.layers, q, 0, i)) == 0;
  const StageLayerKinds k0 = stage_layer_kinds(g, q, 0, 0);
  EXPECT_EQ(k0.layers[0], global0);
  EXPECT_EQ(k0.layers[0] + k0.layers[2], 31);
  // Every global layer, i = 6k + 5, is odd: stage 0 has none, stage 1 all 10.
  EXPECT_EQ(global0, 0);
  EXPECT_EQ(stage_layer_kinds(g, q, 1, 0).layers[0], 10);
}

// ---------------------------------------------------------------- latent attention

ModelSpec tiny_mla() {
  ModelSpec m;
  m.name = "tiny-mla";
  m.family = Family::llama;
  m.layers = 2, m.hidden = 64, m.heads = 4, m.kv_heads = 4, m.ffn_hidden = 96, m.vocab = 100, m.max_positions = 64;
  m.mla = {16, 8, 8, 4, 6};  // q_lora, kv_lora, qk_nope, qk_rope, v
  return m;
}

// What a latent-attention layer keeps, by hand (b 2, s 32, bf16, flash, t 1): the norm and
// down-projection input (h), the q and kv latents before and after their norms (16, 8), the
// up-projected q and k (heads x 12) and v (heads x 6), the fp32 logsumexp per head and row,
// the attention output (heads x 6); the SwiGLU half as for Llama. Selective recompute keeps
// the latents and drops q, k, v (re-made by the up projections in backward: Megatron-Core's
// recompute_modules mla_up_proj); full keeps the layer input.
TEST(Models2026, LatentAttentionKeepsWhatTheHandDerivationSays) {
  const ModelSpec m = tiny_mla();
  LayerContext c;
  c.b = 2, c.s = 32, c.s_kv = 32, c.t = 1, c.act_bytes = 2, c.flash = true;
  const double bs = 64;
  const double attention = bs * (64 + 64 + 16 + 16 + 8 + 8 + 4 * 12 + 4 * 12 + 4 * 6 + 4 * 6) * 2 + 2 * 4 * 32 * 4;
  const double mlp = bs * (64 + 64 + 3 * 96) * 2;
  const double qkv = bs * 4 * (12 + 12 + 6) * 2;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, c, LayerRecompute::none), attention + mlp);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, c, LayerRecompute::selective), attention + mlp - qkv);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, c, LayerRecompute::full), bs * 64 * 2);
  EXPECT_DOUBLE_EQ(recompute_working_bytes(m, c, LayerRecompute::selective), qkv);
  // TP 2 with SP: the latents are the rank's sequence shard, q, k, v and the output half the
  // heads, the logsumexp half the heads.
  c.t = 2, c.sp = true;
  const double tp_attention = bs * ((64 + 64 + 16 + 16 + 8 + 8) / 2.0 + (4 * 12 + 4 * 12 + 4 * 6 + 4 * 6) / 2.0) * 2 + 2 * 2 * 32 * 4;
  const double tp_mlp = bs * ((64 + 64) / 2.0 + 3 * 48) * 2;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, c, LayerRecompute::none), tp_attention + tp_mlp);
  // DeepSeek-V3 at 4k tokens: what the cached latents save per layer, 4096 x 128 x (192 +
  // 192 + 128) x 2 B = 512 MiB.
  const ModelSpec ds = preset("deepseek-v3");
  LayerContext d;
  d.b = 1, d.s = 4096, d.s_kv = 4096, d.t = 1, d.act_bytes = 2, d.flash = true;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(ds, d, LayerRecompute::none) - activation_bytes_per_layer(ds, d, LayerRecompute::selective),
                   512.0 * 1024 * 1024);
}

// Latent attention's FLOPs by hand (b 2, s 32, t 1): 2 x tokens x (h q_lora + q_lora x
// heads x 12 + h x (kv_lora + rope) + kv_lora x heads x (nope + v) + heads v x h) for its
// projections; the core 2 x tokens x s x heads x (12 + 6) (QK^T over nope + rope, PV over v).
TEST(Models2026, LatentAttentionFlopsAreTheHandDerivation) {
  const ModelSpec m = tiny_mla();
  LayerContext c;
  c.b = 2, c.s = 32, c.s_kv = 32;
  const LayerFlops fl = forward_flops_per_layer(m, c, 1.0);
  const double tokens = 64;
  const double projections = 2 * tokens * (64 * 16 + 16 * 48 + 64 * 12 + 8 * 4 * 14 + 24 * 64);
  EXPECT_DOUBLE_EQ(fl.gemm_base, projections + 2 * tokens * 64 * 96 * 3);
  EXPECT_DOUBLE_EQ(fl.attention, 2 * tokens * 32 * 4 * (12 + 6));
  EXPECT_DOUBLE_EQ(fl.attention_causal, fl.attention / 2);
}

// ---------------------------------------------------------------- sliding windows

// A window of w keys over s positions: causal queries see min(i + 1, w) keys, on average
// w - w(w - 1)/(2s) exactly; the recipe's continuous w - w^2/(2s) is within 1/2 key of it.
// The non-causal count (the literature's, for MFU) is over w keys.
TEST(Models2026, SlidingWindowAttentionCountsTheWindowsKeys) {
  double sum = 0;
  for (int i = 0; i < 4096; ++i) sum += std::min(i + 1, 128);
  EXPECT_NEAR(causal_keys_per_query(4096, 128), sum / 4096, 0.5);
  EXPECT_DOUBLE_EQ(causal_keys_per_query(4096, 0), 2048);
  EXPECT_DOUBLE_EQ(causal_keys_per_query(1024, 4096), 512);  // a window wider than the sequence: full
  const ModelSpec m = preset("gpt-oss-120b");
  LayerContext full, windowed;
  full.b = windowed.b = 1, full.s = windowed.s = full.s_kv = windowed.s_kv = 4096;
  windowed.window = 128;
  const LayerFlops f = forward_flops_per_layer(m, full, 1.0), w = forward_flops_per_layer(m, windowed, 1.0);
  const double per_key = 2 * 4096.0 * (4096 + 4096);
  EXPECT_DOUBLE_EQ(f.attention, per_key * 4096);
  EXPECT_DOUBLE_EQ(w.attention, per_key * 128);
  EXPECT_DOUBLE_EQ(w.attention_causal, per_key * (128 - 128.0 * 128 / (2 * 4096)));
  EXPECT_DOUBLE_EQ(w.gemm_base, f.gemm_base);  // the projections do not see the window
  // Fused attention keeps its logsumexp whatever the window: the same bytes.
  full.flash = windowed.flash = true;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, full, LayerRecompute::none), activation_bytes_per_layer(m, windowed, LayerRecompute::none));
  // Model FLOPs per token, PaLM's convention, by hand: 6 x (active parameters without the
  // embedding tables + the head GEMM) + 6 x (q + v widths) x keys per layer, 18 full layers
  // over 4096 keys and 18 windowed over 128.
  const ParamCounts pc = count_params(m, 1, 1, 1, 0, 0);
  const double head = 201088.0 * 2880;
  const double expected = 6 * (pc.active_per_token - pc.embedding - head + head) + 6.0 * (4096 + 4096) * (18 * 4096 + 18 * 128);
  EXPECT_NEAR(model_flops_per_token(m, 4096), expected, 1e-9 * expected);
}

// ---------------------------------------------------------------- MoE load imbalance

// The most loaded EP rank's rows over balanced, with the hottest expert at rho and the
// rest sharing what is left: rho with one expert per rank, 1 with all on one rank, and in
// between (rho + (E/ep - 1)(E - rho)/(E - 1)) / (E/ep), by hand for gpt-oss-120b's 128 experts.
TEST(Models2026, ExpertLoadImbalanceSizesTheHottestRank) {
  ModelSpec m = preset("gpt-oss-120b");
  EXPECT_DOUBLE_EQ(m.moe.load_imbalance, 1.72);
  EXPECT_DOUBLE_EQ(moe_rank_load_factor(m, 128), 1.72);
  EXPECT_DOUBLE_EQ(moe_rank_load_factor(m, 1), 1.0);
  EXPECT_NEAR(moe_rank_load_factor(m, 8), (1.72 + 15 * (128 - 1.72) / 127) / 16, 1e-12);
  // Memory: the expert rows the rank keeps grow by the factor; time: the expert GEMMs and the
  // all-to-all with them. Forced balance (1) is the ideal.
  TrainingJob j;
  j.seq_len = 4096;
  ParallelPlan p;
  p.dp = 128, p.ep = 128;
  LayerContext lc = layer_context(m, j, p, 1);
  const SavedTensorList hot = saved_tensors_per_layer(m, lc);
  ModelSpec balanced = m;
  balanced.moe.load_imbalance = 1;
  const SavedTensorList even = saved_tensors_per_layer(balanced, lc);
  for (int i = 0; i < hot.count; ++i)
    if (std::string(hot.items[i].name) == "moe.expert_input") {
      EXPECT_DOUBLE_EQ(hot.items[i].bytes(), 1.72 * even.items[i].bytes());
    }
  ClusterSpec c = presets().cluster("dgx-h100")->cluster;
  const LayerTimes t_hot = layer_times(m, c, j, p, lc, LayerRecompute::none, {});
  const LayerTimes t_even = layer_times(balanced, c, j, p, lc, LayerRecompute::none, {});
  EXPECT_GT(t_hot.forward, t_even.forward);
  // The all-to-all's bandwidth term (beyond its latency) carries the hottest rank's rows.
  EXPECT_NEAR(t_hot.ep_comm - t_hot.ep_comm_latency, 1.72 * (t_even.ep_comm - t_even.ep_comm_latency), 1e-9 * t_hot.ep_comm);
}

// ---------------------------------------------------------------- multi-token prediction

// The MTP module runs on the last stage: its parameters, its kept tensors and its second
// logits set are the last stage's, and its block, eh_proj and second head pass its time's.
TEST(Models2026, MultiTokenPredictionWeighsOnTheLastStage) {
  ModelSpec m = preset("deepseek-v3");
  ModelSpec without = m;
  without.mtp_layers = 0;
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 1024;
  ParallelPlan p;
  p.pp = 16, p.dp = 64, p.ep = 64, p.micro_batch = 1, p.grad_accum = 16, p.zero = 1;
  const ClusterSpec c = presets().cluster("hgx-h800")->cluster;
  const StageMemoryExtras with_x = stage_memory_extras(m, j, p, 15), without_x = stage_memory_extras(without, j, p, 15);
  EXPECT_DOUBLE_EQ(with_x.logits_set, 2 * without_x.logits_set);
  const LayerContext last = layer_context(m, j, p, 60);
  EXPECT_DOUBLE_EQ(with_x.last_chunk_set - without_x.last_chunk_set,
                   activation_bytes_per_layer(m, last, LayerRecompute::none) + 5 * 4096.0 * 7168 * 2);
  EXPECT_DOUBLE_EQ(stage_memory_extras(m, j, p, 0).last_chunk_set, 0);
  const HeadTimes h = head_times(m, c, j, p, {}), h0 = head_times(without, c, j, p, {});
  EXPECT_GT(h.forward, h0.forward + layer_times(m, c, j, p, last, LayerRecompute::none, {}).forward);
  EXPECT_GT(estimate_memory(m, c, j, p).last.total, estimate_memory(without, c, j, p).last.total);
  EXPECT_DOUBLE_EQ(estimate_memory(m, c, j, p).first.total, estimate_memory(without, c, j, p).first.total);
}

// ---------------------------------------------------------------- Hugging Face configs

// The configs under examples/hf/ read as their presets, to the parameter.
TEST(Models2026, HfConfigsReadAsTheirPresets) {
  const PresetRegistry reg = presets();
  for (auto [file, id] : {std::pair{"deepseek-v3-config.json", "deepseek-v3"}, std::pair{"gpt-oss-20b-config.json", "gpt-oss-20b"},
                          std::pair{"gpt-oss-120b-config.json", "gpt-oss-120b"}, std::pair{"gemma3-27b-config.json", "gemma3-27b"}}) {
    SCOPED_TRACE(file);
    const Result<ModelSpec> hf = reg.resolve_model(std::string(LLMPLAN_SOURCE_ROOT) + "/examples/hf/" + file, "--model");
    ASSERT_TRUE(hf) << hf.status().message();
    const ModelSpec p = *reg.model(id);
    const ParamCounts a = count_params(*hf, 2, 4, 1, 0, 0), b = count_params(p, 2, 4, 1, 0, 0);
    EXPECT_EQ(a.total, b.total);
    EXPECT_EQ(a.per_layer_rank, b.per_layer_rank);
    EXPECT_EQ(a.dense.per_layer_rank, b.dense.per_layer_rank);
    EXPECT_EQ(a.active_per_token, b.active_per_token);
    EXPECT_EQ(a.mtp_rank, b.mtp_rank);
    EXPECT_EQ(layer_kinds_present(*hf), layer_kinds_present(p));
    for (int i = 0; i < p.layers; ++i) EXPECT_EQ(layer_kind(*hf, i), layer_kind(p, i)) << i;
    EXPECT_EQ(hf->moe.load_imbalance, p.moe.load_imbalance);
    EXPECT_EQ(hf->max_positions, p.max_positions);
    EXPECT_EQ(hf->source.find("keys not read"), std::string::npos) << hf->source;
  }
}

TEST(Models2026, HfConfigsOfTheNewArchitecturesNameWhatTheyCannotRead) {
  const Result<nlohmann::json> oss = read_json_file(std::string(LLMPLAN_SOURCE_ROOT) + "/examples/hf/gpt-oss-20b-config.json");
  ASSERT_TRUE(oss);
  // A layer_types list that is not every n-th layer full.
  nlohmann::json odd = *oss;
  odd["layer_types"][4] = "full_attention";
  Result<ModelSpec> m = model_from_hf_config(odd, "oss.json");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.status().exit_code(), 2);
  EXPECT_NE(m.status().message().find("oss.json: field 'layer_types': expected every 2th layer full and the others sliding"), std::string::npos)
      << m.status().message();
  // A key the planner does not know is listed in the source.
  nlohmann::json extra = *oss;
  extra["use_kernel_forward_from_hub"] = true;
  m = model_from_hf_config(extra, "oss.json");
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_NE(m->source.find("keys not read: use_kernel_forward_from_hub"), std::string::npos) << m->source;
  // Gemma3ForCausalLM: the 27B's text_config on its own, with Gemma3TextConfig's defaults.
  const Result<nlohmann::json> g = read_json_file(std::string(LLMPLAN_SOURCE_ROOT) + "/examples/hf/gemma3-27b-config.json");
  ASSERT_TRUE(g);
  nlohmann::json text = (*g)["text_config"];
  text["architectures"] = {"Gemma3ForCausalLM"};
  m = model_from_hf_config(text, "gemma.json");
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ(count_params(*m, 1, 1, 1, 0, 0).total, count_params(preset("gemma3-27b"), 1, 1, 1, 0, 0).total);
  EXPECT_TRUE(m->qk_norm && m->post_norms && m->tied_embeddings);
  // DeepSeek with biased latent projections is refused, naming the field.
  const Result<nlohmann::json> ds = read_json_file(std::string(LLMPLAN_SOURCE_ROOT) + "/examples/hf/deepseek-v3-config.json");
  ASSERT_TRUE(ds);
  nlohmann::json biased = *ds;
  biased["attention_bias"] = true;
  m = model_from_hf_config(biased, "ds.json");
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("ds.json: field 'attention_bias': true needs biases on latent attention"), std::string::npos)
      << m.status().message();
}

// The model JSON round trip keeps every new field, and leaves the earlier presets' JSON as it was.
TEST(Models2026, ModelJsonRoundTripsTheNewFields) {
  for (const char* id : {"deepseek-v3", "gpt-oss-120b", "gemma3-27b"}) {
    const ModelSpec m = preset(id);
    const Result<ModelSpec> back = model_from_json(to_json(m), id);
    ASSERT_TRUE(back) << back.status().message();
    EXPECT_EQ(count_params(*back, 2, 2, 1, 0, 0).total, count_params(m, 2, 2, 1, 0, 0).total) << id;
    EXPECT_EQ(count_params(*back, 2, 2, 1, 0, 0).mtp_rank, count_params(m, 2, 2, 1, 0, 0).mtp_rank) << id;
    EXPECT_EQ(layer_kinds_present(*back), layer_kinds_present(m)) << id;
    EXPECT_EQ(back->moe.load_imbalance, m.moe.load_imbalance) << id;
  }
  const nlohmann::json llama = to_json(preset("mixtral-8x7b"));
  for (const char* key : {"mla", "sliding_window", "attention_sinks", "post_norms", "mtp_layers"}) EXPECT_FALSE(llama.contains(key)) << key;
  EXPECT_FALSE(llama["moe"].contains("load_imbalance"));
}

// The sweep shares its time and memory inputs between the plans of a shape; for a model of
// several layer kinds (whose stages' kinds change with vpp) and with MTP blocks (whose time
// changes with the recompute policy) its numbers must still be the plain models', plan by plan.
TEST(Models2026, SweepOfSeveralLayerKindsMatchesThePlainModelsPlanByPlan) {
  const PresetRegistry reg = presets();
  struct Job {
    const char* model;
    const char* gpu;
    int gpus;
    std::vector<int> pp;
  };
  for (const Job& k : {Job{"gpt-oss-20b", "h100-sxm", 16, {1, 2, 4}}, Job{"deepseek-v3", "h800", 256, {8, 16}}}) {
    const ModelSpec m = *reg.model(k.model);
    ClusterSpec c = *reg.cluster_for_gpu(k.gpu);
    c.nodes = (k.gpus + c.gpus_per_node - 1) / c.gpus_per_node;
    TrainingJob j;
    j.seq_len = 4096;
    j.global_batch = 256;
    SweepSpace space;
    space.pp = k.pp;
    SweepOptions opt;
    opt.keep_all = true;
    opt.threads = 2;
    const SweepResult r = run_sweep(m, c, j, k.gpus, space, opt);
    int64_t costed = 0, interleaved = 0;
    for (const PlanResult& x : r.all) {
      if (x.reason != RejectReason::none && x.reason != RejectReason::does_not_fit && x.reason != RejectReason::host_does_not_fit) continue;
      const TrainingJob jx = job_for(j, x);
      ASSERT_EQ(x.peak_bytes, estimate_memory(m, c, jx, x.plan, opt.memory).worst.total) << k.model;
      ASSERT_EQ(x.step_time_s, estimate_time(m, c, jx, x.plan, opt.efficiency).total) << k.model;
      costed += x.plan.recompute != Recompute::full_k;  // the searched first-k variants are not counted (sweep.h)
      interleaved += x.plan.vpp > 1;
    }
    EXPECT_EQ(costed, r.evaluated) << k.model;
    // (DeepSeek-V3's 61 layers interleave on no pp dividing 256: gpt-oss-20b's 24 do.)
    if (std::string(k.model) == "gpt-oss-20b") {
      EXPECT_GT(interleaved, 10);
    }
  }
}

// The sweep of DeepSeek-V3 on 1024 H800s runs end to end and finds plans that fit.
TEST(Models2026, DeepSeekV3SweepsOn1024H800s) {
  const PresetRegistry reg = presets();
  const ModelSpec m = preset("deepseek-v3");
  ClusterSpec c = reg.cluster("hgx-h800")->cluster;
  c.nodes = 128;
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 1024;
  SweepSpace space;
  space.pp = {8, 16};
  const SweepResult r = run_sweep(m, c, j, 1024, space, SweepOptions{});
  ASSERT_FALSE(r.top.empty());
  EXPECT_GT(r.top.front().tokens_per_s, 0);
  EXPECT_LE(r.top.front().peak_bytes, c.gpu.memory_bytes);
}

}  // namespace
}  // namespace llmplan
