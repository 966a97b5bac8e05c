// GPT and Llama models: float64 gradients against central finite differences, recompute
// that changes memory but not one bit of the losses, and the measured activation bytes of
// every recompute policy and precision equal to the planner recipe's, to the byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "executor/cpu/nf4.h"
#include "executor/model.h"
#include "executor/trainer.h"
#include "planner/cost/memory_model.h"
#include "planner/spec/recipe.h"
#include "tests/executor/test_util.h"

namespace llmplan::exec {
namespace {

using testing::grads_match;
using testing::Rng;
using testing::test_seed;

ModelSpec tiny_gpt(bool dropout) {
  ModelSpec m;
  m.name = "tiny-gpt";
  m.family = Family::gpt;
  m.layers = 2;
  m.hidden = 16;
  m.heads = 2;
  m.kv_heads = 2;
  m.ffn_hidden = 64;
  m.vocab = 32;
  m.max_positions = 16;
  m.tied_embeddings = true;
  m.dropout = dropout;
  return m;
}

ModelSpec tiny_llama() {
  ModelSpec m;
  m.name = "tiny-llama";
  m.family = Family::llama;
  m.layers = 2;
  m.hidden = 16;
  m.heads = 4;
  m.kv_heads = 2;  // GQA
  m.ffn_hidden = 40;
  m.vocab = 32;
  m.max_positions = 64;
  m.tied_embeddings = false;
  return m;
}

// Qwen-style attention: QK-norm (RMSNorm over every query and key head before RoPE),
// biases on q/k/v (Qwen2) or on all four projections, and head_dim 8 with 4 heads: queries
// 32 wide on a width-16 model (Qwen3's head_dim * heads > hidden).
ModelSpec tiny_qwen(bool qk_norm, AttentionBias bias) {
  ModelSpec m = tiny_llama();
  m.name = std::string("tiny-qwen") + (qk_norm ? "-qknorm" : "") + "-bias-" + to_string(bias);
  m.head_dim = 8;
  m.qk_norm = qk_norm;
  m.attention_bias = bias;
  return m;
}

// The MoE versions: 4 routed experts of width 24, top-2; Llama also one shared expert
// (width ffn_hidden). capacity_factor < 1 makes some tokens overflow (dropped).
ModelSpec tiny_moe(Family fam, double capacity_factor = 1.0) {
  ModelSpec m = fam == Family::gpt ? tiny_gpt(true) : tiny_llama();
  m.name += "-moe";
  m.moe.experts = 4;
  m.moe.experts_per_token = 2;
  m.moe.expert_ffn_hidden = 24;
  m.moe.shared_experts = fam == Family::gpt ? 0 : 1;
  m.moe.capacity_factor = capacity_factor;
  return m;
}

ModelConfig config(const ModelSpec& m, Precision prec, Recompute rc, bool flash, bool f64 = false) {
  ModelConfig c;
  c.spec = m;
  c.job.seq_len = 8;
  c.job.global_batch = 2;
  c.job.precision = prec;
  c.job.amp = AmpLevel::O2;
  c.plan.micro_batch = 2;
  c.plan.recompute = rc;
  c.plan.recompute_layers = 1;
  c.plan.flash_attention = flash;
  const PrecisionScheme ps = precision_scheme(c.job, f64);
  c.storage = ps.storage;
  c.grad = ps.grad;
  return c;
}

struct Data {
  std::vector<int32_t> tokens, targets, docs;
  Batch batch(bool with_docs) const { return {tokens.data(), targets.data(), with_docs ? docs.data() : nullptr}; }
};
Data random_data(const ModelConfig& c, uint64_t seed) {
  Rng rng(seed);
  Data d;
  const int64_t n = c.plan.micro_batch * c.job.seq_len;
  for (int64_t i = 0; i < n; ++i) {
    d.tokens.push_back(static_cast<int32_t>(rng.integer(0, c.spec.vocab - 1)));
    d.targets.push_back(static_cast<int32_t>(rng.integer(0, c.spec.vocab - 1)));
    d.docs.push_back(static_cast<int32_t>((i % c.job.seq_len) < 3 ? 0 : 1));  // two documents per sequence
  }
  d.targets[1] = -1;  // one ignored target
  return d;
}

// Analytic gradients of a sample of every parameter against central differences.
void check_gradients(ModelConfig c, bool with_docs) {
  c.options.randomize_all = true;
  c.options.dropout_p = 0.2;
  CpuAllocator alloc;
  auto model = build_model(alloc, c);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& m = **model;
  const Data data = random_data(c, test_seed());
  const uint64_t seed = 77;
  m.zero_grads();
  ASSERT_TRUE(m.forward_backward(data.batch(with_docs), 1.0, 0, seed).ok());
  Rng rng(test_seed() + 1);
  std::vector<double> analytic, numeric;
  int kinks = 0;
  for (ParamRef& p : m.params()) {
    if (p.grad == nullptr) {  // LoRA: the frozen base weights
      ASSERT_TRUE(c.job.mode == TrainMode::lora) << p.name;
      continue;
    }
    double* w = p.weight->data<double>();
    const double* g = p.grad->data<double>();
    for (int k = 0; k < 3; ++k) {  // three random elements of each parameter
      const int64_t i = rng.integer(0, p.weight->numel() - 1);
      const double w0 = w[i], h = 1e-5;
      auto central = [&](double step) {
        w[i] = w0 + step;
        const double fp = *m.forward_loss(data.batch(with_docs), 0, seed);
        w[i] = w0 - step;
        const double fm = *m.forward_loss(data.batch(with_docs), 0, seed);
        w[i] = w0;
        return (fp - fm) / (2 * step);
      };
      const double d = central(h), d_half = central(h / 2);
      // MoE routing (top-k, capacity) is piecewise: a step that flips a token's expert puts
      // a jump J in the loss, and the central difference is off by J/2h. Smooth points give
      // the same difference at h and h/2 to O(h^2); a jump within h does not.
      if (std::fabs(d - d_half) > 1e-6 * std::fabs(d) + 1e-8) {
        ++kinks;
        std::printf("skipped %s[%lld]: difference %.6g at h, %.6g at h/2; analytic %.6g\n", p.name.c_str(), static_cast<long long>(i), d,
                    d_half, g[i]);
        continue;
      }
      analytic.push_back(g[i]);
      numeric.push_back(d);
    }
  }
  // A wrong gradient is not a kink (the differences are of the true loss), so it is still
  // caught. Dense models have none; an MoE model may sit near a routing boundary for a few
  // tokens (one such token moves every upstream parameter), but not for most samples.
  const int sampled = kinks + static_cast<int>(analytic.size());
  EXPECT_LE(kinks, c.spec.moe.enabled() ? sampled / 10 : 0) << c.spec.name << ": elements at a non-differentiable point";
  const ::testing::AssertionResult r = grads_match(c.spec.name, analytic, numeric, 1e-6);
  EXPECT_TRUE(r);
  std::printf("%s (%zu elements, %d at a routing kink skipped)\n", r.message(), analytic.size(), kinks);
}

TEST(ModelGrad, GptMaterializedWithDropoutFloat64) {
  check_gradients(config(tiny_gpt(true), Precision::fp32, Recompute::none, false, true), false);
}
TEST(ModelGrad, GptFlashFullRecomputeFloat64) {
  check_gradients(config(tiny_gpt(false), Precision::fp32, Recompute::full, true, true), true);
}
TEST(ModelGrad, LlamaGqaPackedFloat64) {
  check_gradients(config(tiny_llama(), Precision::fp32, Recompute::none, true, true), true);
}
TEST(ModelGrad, LlamaMaterializedSelectiveFloat64) {
  check_gradients(config(tiny_llama(), Precision::fp32, Recompute::selective, false, true), false);
}

// MoE: router, top-k gates, capacity drop, dispatch and combine, experts and shared experts.
TEST(ModelGrad, MoeGptWithDropoutAndDroppedTokensFloat64) {
  check_gradients(config(tiny_moe(Family::gpt, 0.75), Precision::fp32, Recompute::none, true, true), false);
}
TEST(ModelGrad, MoeLlamaSharedExpertFloat64) {
  check_gradients(config(tiny_moe(Family::llama), Precision::fp32, Recompute::none, true, true), true);
}
TEST(ModelGrad, MoeLlamaFullRecomputeFloat64) {
  check_gradients(config(tiny_moe(Family::llama, 1.5), Precision::fp32, Recompute::full, false, true), false);
}

// LoRA on MoE models: adapters on every routed expert's MLP projections (their rows of
// the capacity-padded dispatch buffer) and on attention; router, experts and the shared
// expert frozen, gradients passed through them.
ModelConfig moe_lora(ModelConfig c, std::vector<std::string> targets) {
  c.job.mode = TrainMode::lora;
  c.job.lora.rank = 2;
  c.job.lora.alpha = 3;
  c.job.lora.targets = std::move(targets);
  return c;
}
TEST(ModelGrad, MoeLlamaLoraOnExpertsFloat64) {
  check_gradients(moe_lora(config(tiny_moe(Family::llama), Precision::fp32, Recompute::none, true, true), {"q", "gate", "up", "down"}),
                  true);
}
TEST(ModelGrad, MoeGptLoraOnExpertsWithDroppedTokensFloat64) {
  check_gradients(moe_lora(config(tiny_moe(Family::gpt, 0.75), Precision::fp32, Recompute::selective, false, true), {"v", "fc1", "fc2"}),
                  false);
}
TEST(ModelMoe, LoraAdaptsEveryRoutedExpertAndNotTheSharedOne) {
  ModelConfig c = moe_lora(config(tiny_moe(Family::llama), Precision::fp32, Recompute::none, true), {"gate", "up", "down"});
  CpuAllocator alloc;
  auto model = build_model(alloc, c);
  ASSERT_TRUE(model.ok()) << model.status().message();
  int adapters = 0;
  for (ParamRef& p : (*model)->params()) {
    const bool adapter = p.name.find("lora_") != std::string::npos;
    EXPECT_EQ(p.grad != nullptr, adapter) << p.name;
    if (adapter) {
      EXPECT_EQ(p.name.find("shared"), std::string::npos) << p.name;
      ++adapters;
    }
  }
  // 2 layers x 4 experts x 3 projections x (A, B)
  EXPECT_EQ(adapters, 2 * 4 * 3 * 2);
}

// An independent reference for the MoE forward and backward: one expert, top-1, capacity
// for every token and no shared expert is the dense model with f = expert_ffn_hidden (the
// softmax over one expert is 1, so its gate is 1). With the dense model's weights copied
// in, losses and every mapped gradient agree; the router's gradient is zero.
TEST(ModelMoe, OneExpertEqualsTheDenseModel) {
  for (Family fam : {Family::gpt, Family::llama}) {
    ModelSpec dense = fam == Family::gpt ? tiny_gpt(false) : tiny_llama();
    dense.ffn_hidden = 24;
    ModelSpec moe = dense;
    moe.moe.experts = 1;
    moe.moe.experts_per_token = 1;
    moe.moe.expert_ffn_hidden = 24;
    moe.moe.capacity_factor = 1.0;
    ModelConfig cd = config(dense, Precision::fp32, Recompute::none, true, true), cm = config(moe, Precision::fp32, Recompute::none, true, true);
    cd.options.randomize_all = cm.options.randomize_all = true;
    CpuAllocator ad, am;
    auto md = build_model(ad, cd);
    auto mm = build_model(am, cm);
    ASSERT_TRUE(md.ok() && mm.ok());
    std::vector<ParamRef>& pd = (*md)->params();
    std::vector<ParamRef>& pm = (*mm)->params();
    // The same order but for the router, which sits where the dense MLP begins.
    std::vector<std::pair<ParamRef*, ParamRef*>> pairs;
    size_t j = 0;
    for (ParamRef& p : pm) {
      if (p.name.find("router") != std::string::npos) continue;
      ASSERT_LT(j, pd.size());
      ASSERT_EQ(p.weight->numel(), pd[j].weight->numel()) << p.name << " vs " << pd[j].name;
      std::memcpy(p.weight->raw(), pd[j].weight->raw(), static_cast<size_t>(p.weight->bytes()));
      pairs.push_back({&p, &pd[j]});
      ++j;
    }
    ASSERT_EQ(j, pd.size());
    const Data data = random_data(cd, test_seed());
    (*md)->zero_grads();
    (*mm)->zero_grads();
    const double ld = *(*md)->forward_backward(data.batch(true), 1.0, 0, 5);
    const double lm = *(*mm)->forward_backward(data.batch(true), 1.0, 0, 5);
    EXPECT_NEAR(lm, ld, 1e-12 * std::fabs(ld)) << dense.name;
    double worst = 0;
    for (auto [a, b] : pairs)
      for (int64_t i = 0; i < a->grad->numel(); ++i)
        worst = std::max(worst, std::fabs(a->grad->data<double>()[i] - b->grad->data<double>()[i]));
    EXPECT_LT(worst, 1e-12) << dense.name;
    for (ParamRef& p : pm) {
      if (p.name.find("router") == std::string::npos) continue;
      for (int64_t i = 0; i < p.grad->numel(); ++i) EXPECT_NEAR(p.grad->data<double>()[i], 0, 1e-14);
    }
    std::printf("%s one-expert MoE vs dense: loss %.15f vs %.15f, worst gradient diff %.2e\n", dense.name.c_str(), lm, ld, worst);
  }
}

TEST(ModelMoe, BadPlansGetAClearMessage) {
  ModelConfig c = config(tiny_moe(Family::llama), Precision::fp32, Recompute::none, true);
  c.plan.ep = 3;
  CpuAllocator a;
  auto m = build_model(a, c);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().exit_code(), 2);
  EXPECT_NE(m.status().message().find("ep 3"), std::string::npos) << m.status().message();
  ModelConfig dense = config(tiny_llama(), Precision::fp32, Recompute::none, true);
  dense.plan.ep = 2;
  auto d = build_model(a, dense);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("no experts"), std::string::npos) << d.status().message();
}

// What the planner says the activation category holds at the end of the forward: every
// layer's recipe bytes under its policy, the final-norm and LM-head inputs, and GPT's
// embedding dropout mask (memory_model.cpp's last-stage and first-stage terms).
int64_t planned_activation_bytes(const ModelConfig& c) {
  double sum = 0;
  for (int i = 0; i < c.spec.layers; ++i)
    sum += activation_bytes_per_layer(c.spec, model_layer_context(c, i), layer_recompute(c.plan, i, c.spec.layers));
  const double tokens = static_cast<double>(c.plan.micro_batch) * c.job.seq_len;
  const int act = static_cast<int>(dtype_size(c.storage));
  sum += 2 * tokens * c.spec.hidden * act;
  const bool embed_trainable = c.job.mode != TrainMode::lora && c.job.frozen_layer_count(c.spec.layers) == 0;
  if (c.spec.dropout && embed_trainable) sum += tokens * c.spec.hidden;
  sum += mtp_kept_bytes(c.spec, c.job, c.plan, mtp_recompute(c.plan));  // the modules' (none: 0)
  return static_cast<int64_t>(sum);
}

TEST(ModelGrad, QwenQkNormAndBiasesFloat64) {
  check_gradients(config(tiny_qwen(true, AttentionBias::all), Precision::fp32, Recompute::none, true, true), true);
}
TEST(ModelGrad, QwenQkNormMaterializedSelectiveFloat64) {
  check_gradients(config(tiny_qwen(true, AttentionBias::qkv), Precision::fp32, Recompute::selective, false, true), false);
}
TEST(ModelGrad, QwenQkNormFullRecomputeFloat64) {
  check_gradients(config(tiny_qwen(true, AttentionBias::none), Precision::fp32, Recompute::full, true, true), true);
}
TEST(ModelGrad, QwenMoeQkNormFloat64) {
  ModelSpec m = tiny_moe(Family::llama);
  m.qk_norm = true;
  m.head_dim = 8;
  m.attention_bias = AttentionBias::qkv;
  check_gradients(config(m, Precision::fp32, Recompute::none, true, true), true);
}

// Sliding-window attention on alternating layers (gpt-oss's layer_types; Gemma 3 with n = 2):
// layer 0 attends to the 3 most recent positions of its 8, layer 1 to all.
ModelSpec tiny_windowed(ModelSpec m, int64_t window = 3) {
  m.name += "-window" + std::to_string(window);
  m.sliding_window = window;
  m.global_attention_every = 2;
  return m;
}
TEST(ModelGrad, SlidingWindowFlashPackedFloat64) {
  check_gradients(config(tiny_windowed(tiny_llama()), Precision::fp32, Recompute::none, true, true), true);
}
TEST(ModelGrad, SlidingWindowMaterializedSelectiveFloat64) {
  check_gradients(config(tiny_windowed(tiny_qwen(true, AttentionBias::qkv)), Precision::fp32, Recompute::selective, false, true), false);
}
TEST(ModelGrad, SlidingWindowGptMaterializedWithDropoutFloat64) {
  check_gradients(config(tiny_windowed(tiny_gpt(true)), Precision::fp32, Recompute::none, false, true), true);
}
// The window is applied, and only where it cuts: a window of 3 changes the loss; a window
// as long as the sequence (8) gives full attention's loss exactly.
// The float64 loss of one forward of `spec` on fixed random data (weights all random).
double fixed_loss(const ModelSpec& spec, bool flash = true) {
  ModelConfig c = config(spec, Precision::fp32, Recompute::none, flash, true);
  c.options.randomize_all = true;
  CpuAllocator alloc;
  auto model = build_model(alloc, c);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return 0.0;
  const Data data = random_data(c, 11);
  return *(*model)->forward_loss(data.batch(false), 0, 5);
}
TEST(ModelWindow, TheWindowChangesTheLossOnlyWhenShorterThanTheSequence) {
  const auto loss = fixed_loss;
  for (bool flash : {true, false}) {
    const double full = loss(tiny_llama(), flash);
    EXPECT_EQ(loss(tiny_windowed(tiny_llama(), 8), flash), full);
    EXPECT_GT(std::fabs(loss(tiny_windowed(tiny_llama(), 3), flash) - full), 1e-6 * std::fabs(full));
  }
}

// Dense and MoE layers mixed (DeepSeek-V3's first dense layers; Megatron's moe_layer_freq)
// and shared experts of their own width (DeepSeek's n_shared_experts x moe_intermediate_size).
ModelSpec tiny_mixed_moe(int first_dense, int every, int64_t shared_width) {
  ModelSpec m = tiny_moe(Family::llama);
  m.name += "-dense" + std::to_string(first_dense) + "-every" + std::to_string(every) + "-shared" + std::to_string(shared_width);
  m.layers = 3;
  m.moe.first_dense_layers = first_dense;
  m.moe.layer_freq = every;
  m.moe.shared_expert_ffn_hidden = shared_width;
  return m;
}
TEST(ModelGrad, MoeFirstDenseLayerAndNarrowSharedExpertFloat64) {
  check_gradients(config(tiny_mixed_moe(1, 0, 12), Precision::fp32, Recompute::none, true, true), true);
}
TEST(ModelGrad, MoeEveryOtherLayerSelectiveFloat64) {
  check_gradients(config(tiny_mixed_moe(0, 2, 0), Precision::fp32, Recompute::selective, false, true), false);
}
TEST(ModelGrad, MoeGptFirstDenseFullRecomputeFloat64) {
  ModelSpec m = tiny_moe(Family::gpt);
  m.layers = 3;
  m.moe.first_dense_layers = 2;
  check_gradients(config(m, Precision::fp32, Recompute::full, true, true), true);
}
// The layer kinds are the recipe's: a dense layer holds the dense MLP's weights (no router,
// no experts), a MoE layer the router, experts and shared experts of their own width.
TEST(ModelParams, MixedLayersHoldTheirOwnKindsWeights) {
  CpuAllocator alloc;
  auto model = build_model(alloc, config(tiny_mixed_moe(1, 0, 12), Precision::fp32, Recompute::none, true));
  ASSERT_TRUE(model.ok()) << model.status().message();
  int64_t elements = 0;
  bool dense_router = false, dense_mlp0 = false, moe_dense_mlp = false;
  int64_t shared_up = 0;
  for (const ParamRef& p : (*model)->params()) {
    elements += p.weight->numel();
    dense_router |= p.name.rfind("layer0.moe.", 0) == 0;
    dense_mlp0 |= p.name == "layer0.up.weight";
    moe_dense_mlp |= p.name == "layer1.up.weight";
    if (p.name == "layer1.moe.shared.up.weight") shared_up = p.weight->numel();
  }
  EXPECT_FALSE(dense_router);
  EXPECT_TRUE(dense_mlp0);
  EXPECT_FALSE(moe_dense_mlp);
  EXPECT_EQ(shared_up, 12 * 16);  // (shared width 12) x (hidden 16)
  const ModelSpec spec = tiny_mixed_moe(1, 0, 12);
  EXPECT_EQ(static_cast<double>(elements), count_params(spec, 1, 1, 1, 0, 0).total);
}

// Gemma 3's block on the tiny model: QK-norm, post-norms on both branches, sliding window
// on layer 0 (every second layer global here; Gemma 3: every sixth).
ModelSpec tiny_gemma() {
  ModelSpec m = tiny_windowed(tiny_qwen(true, AttentionBias::none));
  m.name = "tiny-gemma";
  m.post_norms = true;
  m.tied_embeddings = true;
  return m;
}
TEST(ModelGrad, GemmaPostNormsFlashFloat64) {
  check_gradients(config(tiny_gemma(), Precision::fp32, Recompute::none, true, true), true);
}
TEST(ModelGrad, GemmaPostNormsMaterializedFullRecomputeFloat64) {
  check_gradients(config(tiny_gemma(), Precision::fp32, Recompute::full, false, true), false);
}
TEST(ModelGrad, MoePostNormsSelectiveFloat64) {
  ModelSpec m = tiny_moe(Family::llama);
  m.post_norms = true;
  check_gradients(config(m, Precision::fp32, Recompute::selective, true, true), true);
}

// gpt-oss's attention on the tiny models: a learned sink logit per head, sliding window on
// every other layer, q/k/v/o biases; dense and MoE.
ModelSpec tiny_sinks(ModelSpec m) {
  m = tiny_windowed(m);
  m.name += "-sinks";
  m.attention_sinks = true;
  m.attention_bias = AttentionBias::all;
  return m;
}
TEST(ModelGrad, SinksFlashPackedFloat64) {
  check_gradients(config(tiny_sinks(tiny_llama()), Precision::fp32, Recompute::none, true, true), true);
}
TEST(ModelGrad, SinksMaterializedSelectiveFloat64) {
  check_gradients(config(tiny_sinks(tiny_llama()), Precision::fp32, Recompute::selective, false, true), false);
}
TEST(ModelGrad, SinksMoeFullRecomputeFloat64) {
  check_gradients(config(tiny_sinks(tiny_moe(Family::llama)), Precision::fp32, Recompute::full, true, true), true);
}
// gpt-oss's MoE: biases on the router and on every routed expert's gate, up and down.
ModelSpec tiny_gpt_oss() {
  ModelSpec m = tiny_sinks(tiny_moe(Family::llama));
  m.name = "tiny-gpt-oss";
  m.moe.shared_experts = 0;
  m.moe.expert_bias = true;
  return m;
}
TEST(ModelGrad, GptOssExpertBiasesFloat64) {
  check_gradients(config(tiny_gpt_oss(), Precision::fp32, Recompute::none, true, true), true);
}
TEST(ModelGrad, GptOssExpertBiasesMaterializedSelectiveFloat64) {
  check_gradients(config(tiny_gpt_oss(), Precision::fp32, Recompute::selective, false, true), false);
}

// DeepSeek's latent attention on the tiny Llama: queries through a 6-wide latent (or straight
// from x), keys and values through a 5-wide one, 4 + 2 wide query/key heads (the 2 rotary,
// the rotary key shared by the heads), 3-wide values. DeepSeek-V3: 1536, 512, 128 + 64, 128.
ModelSpec tiny_mla(int64_t q_lora_rank = 6) {
  ModelSpec m = tiny_llama();
  m.name = q_lora_rank > 0 ? "tiny-mla" : "tiny-mla-no-q-latent";
  m.kv_heads = m.heads;
  m.mla = {q_lora_rank, 5, 4, 2, 3};
  return m;
}
// DeepSeek-V3's layer kinds on it: a dense first layer, then MoE with a shared expert.
ModelSpec tiny_mla_moe() {
  ModelSpec m = tiny_moe(Family::llama);
  m.name = "tiny-mla-moe";
  m.kv_heads = m.heads;
  m.mla = {6, 5, 4, 2, 3};
  m.moe.first_dense_layers = 1;
  return m;
}
TEST(ModelGrad, LatentAttentionFlashPackedFloat64) {
  check_gradients(config(tiny_mla(), Precision::fp32, Recompute::none, true, true), true);
}
TEST(ModelGrad, LatentAttentionMaterializedSelectiveFloat64) {
  check_gradients(config(tiny_mla(), Precision::fp32, Recompute::selective, false, true), false);
}
TEST(ModelGrad, LatentAttentionWithoutQueryLatentFullRecomputeFloat64) {
  check_gradients(config(tiny_mla(0), Precision::fp32, Recompute::full, true, true), true);
}
TEST(ModelGrad, LatentAttentionMoeSelectiveFlashFloat64) {
  check_gradients(config(tiny_mla_moe(), Precision::fp32, Recompute::selective, true, true), true);
}
TEST(ModelGrad, LatentAttentionWithDropoutWindowAndSinksFloat64) {
  ModelSpec m = tiny_windowed(tiny_mla());
  m.name += "-dropout-sinks";
  m.dropout = true;
  m.attention_sinks = true;
  check_gradients(config(m, Precision::fp32, Recompute::none, false, true), false);
}

// DeepSeek-V3's multi-token prediction on the tiny models: one module on the latent-attention
// MoE model (its block a MoE layer like the last), two on the dense Llama (the second reads
// the first's hidden state), the modules' loss weighted 0.3 here.
ModelSpec with_mtp(ModelSpec m, int depths) {
  m.name += "-mtp" + std::to_string(depths);
  m.mtp_layers = depths;
  return m;
}
ModelConfig mtp_config(ModelConfig c) {
  c.options.mtp_loss_scale = 0.3;
  return c;
}
TEST(ModelGrad, MultiTokenPredictionOnLatentMoeFloat64) {
  check_gradients(mtp_config(config(with_mtp(tiny_mla_moe(), 1), Precision::fp32, Recompute::none, true, true)), true);
}
TEST(ModelGrad, MultiTokenPredictionTwoDepthsSelectiveFloat64) {
  check_gradients(mtp_config(config(with_mtp(tiny_llama(), 2), Precision::fp32, Recompute::selective, false, true)), false);
}
TEST(ModelGrad, MultiTokenPredictionFullRecomputeFloat64) {
  check_gradients(mtp_config(config(with_mtp(tiny_mla(), 1), Precision::fp32, Recompute::full, true, true)), true);
}
// The objective is the main loss plus the scale times the modules' mean loss: 0 scale gives
// the main model's loss, and the modules change it otherwise.
TEST(ModelWindow, MultiTokenPredictionAddsItsScaledLoss) {
  auto loss_of = [](const ModelSpec& spec, double scale) {
    ModelConfig c = config(spec, Precision::fp32, Recompute::none, true, true);
    c.options.mtp_loss_scale = scale;
    CpuAllocator alloc;
    auto model = build_model(alloc, c);
    EXPECT_TRUE(model.ok()) << model.status().message();
    const Data data = random_data(c, 3);
    return *(*model)->forward_loss(data.batch(true), 0, 1);
  };
  const double plain = loss_of(tiny_llama(), 0.1), zero = loss_of(with_mtp(tiny_llama(), 1), 0.0);
  const double with = loss_of(with_mtp(tiny_llama(), 1), 0.3), with_half = loss_of(with_mtp(tiny_llama(), 1), 0.15);
  EXPECT_EQ(plain, zero);
  EXPECT_GT(std::fabs(with - plain), 1e-6);
  EXPECT_NEAR(with - plain, 2 * (with_half - plain), 1e-12);  // linear in the scale
}

// Sinks change the loss (a sink of 0 already takes e^0 of every row's mass).
TEST(ModelWindow, SinksChangeTheLoss) {
  ModelSpec with = tiny_llama();
  with.attention_sinks = true;
  EXPECT_GT(std::fabs(fixed_loss(with) - fixed_loss(tiny_llama())), 1e-9);
}

// The executor's parameters are the recipe's: every element count_params gives, with the
// biases and QK-norm weights the options add (and nothing else).
TEST(ModelParams, ExecutorParametersEqualTheRecipesCount) {
  for (const ModelSpec& spec : {tiny_llama(), tiny_gpt(false), tiny_qwen(true, AttentionBias::all), tiny_qwen(false, AttentionBias::qkv),
                                tiny_qwen(true, AttentionBias::none), tiny_gemma(), tiny_sinks(tiny_llama()), tiny_gpt_oss(),
                                tiny_mixed_moe(1, 0, 12), tiny_mla(), tiny_mla(0), tiny_mla_moe(), with_mtp(tiny_mla_moe(), 1),
                                with_mtp(tiny_llama(), 2)}) {
    CpuAllocator alloc;
    auto model = build_model(alloc, config(spec, Precision::fp32, Recompute::none, true));
    ASSERT_TRUE(model.ok()) << model.status().message();
    int64_t elements = 0;
    for (const ParamRef& p : (*model)->params()) elements += p.weight->numel();
    const ParamCounts pc = count_params(spec, 1, 1, 1, 0, 0);  // total: the main model's; mtp: the modules'
    EXPECT_EQ(static_cast<double>(elements), pc.total + pc.mtp) << spec.name;
  }
}

// Latent attention with what the executor does not combine it with: refused, naming the clash.
TEST(ModelParams, LatentAttentionClashesAreRefusedNamingThem) {
  struct Case {
    const char* what;
    void (*set)(ModelConfig*);
  };
  const Case cases[] = {
      {"family gpt", [](ModelConfig* c) { c->spec.family = Family::gpt; }},
      {"qk_norm", [](ModelConfig* c) { c->spec.qk_norm = true; }},
      {"attention_bias", [](ModelConfig* c) { c->spec.attention_bias = AttentionBias::qkv; }},
      {"job.mode lora", [](ModelConfig* c) {
         c->job.mode = TrainMode::lora;
         c->job.lora.rank = 2;
         c->job.lora.targets = {"o"};
       }},
      {"even qk_rope_head_dim", [](ModelConfig* c) { c->spec.mla.qk_rope_head_dim = 3; }},
  };
  for (const Case& k : cases) {
    ModelConfig c = config(tiny_mla(), Precision::fp32, Recompute::none, true);
    k.set(&c);
    CpuAllocator alloc;
    auto model = build_model(alloc, c);
    ASSERT_FALSE(model.ok()) << k.what;
    EXPECT_EQ(model.status().exit_code(), 2);
    EXPECT_NE(model.status().message().find(k.what), std::string::npos) << model.status().message();
  }
}

// QLoRA (Dettmers et al. 2023): LoRA adapters on a base model whose every linear weight is
// NF4 (cpu/nf4.h), dequantized at each use; storage and gradients as precision_scheme says.
ModelConfig qlora(ModelConfig c, std::vector<std::string> targets) {
  c = moe_lora(c, std::move(targets));
  set_job_mode(JobMode::qlora, &c.job);
  const PrecisionScheme ps = precision_scheme(c.job, c.storage == DType::f64);
  c.storage = ps.storage;
  c.grad = ps.grad;
  return c;
}
TEST(ModelGrad, QloraAdaptersThroughNf4WeightsFloat64) {
  check_gradients(qlora(config(tiny_llama(), Precision::fp32, Recompute::none, true, true), {"q", "v", "down"}), true);
}
TEST(ModelGrad, QloraGptMaterializedSelectiveFloat64) {
  check_gradients(qlora(config(tiny_gpt(true), Precision::fp32, Recompute::selective, false, true), {"q", "k", "v", "o", "fc1", "fc2"}),
                  false);
}
TEST(ModelGrad, QloraFullRecomputeFloat64) {
  check_gradients(qlora(config(tiny_qwen(true, AttentionBias::qkv), Precision::fp32, Recompute::full, true, true), {"k", "o", "gate", "up"}),
                  true);
}

// The QLoRA model is the LoRA model whose base weights are the dequantized NF4 values: with
// those written into a 16-bit-free (float64) LoRA model, the two losses are the same number.
TEST(ModelGrad, QloraComputesWithTheDequantizedWeights) {
  const ModelConfig lc = moe_lora(config(tiny_llama(), Precision::fp32, Recompute::none, true, true), {"q", "v"});
  const ModelConfig qc = qlora(lc, {"q", "v"});
  CpuAllocator alloc;
  auto lora = build_model(alloc, lc);
  auto q = build_model(alloc, qc);
  ASSERT_TRUE(lora.ok() && q.ok());
  int quantized = 0;
  for (ParamRef& qp : (*q)->params()) {
    if (qp.weight->dtype() != DType::u8) continue;
    for (ParamRef& lp : (*lora)->params())
      if (lp.name == qp.name) {
        ASSERT_EQ(qp.weight->numel(), cpu::nf4_bytes(lp.weight->numel())) << qp.name;
        std::vector<double> fresh(static_cast<size_t>(lp.weight->numel()));
        std::memcpy(fresh.data(), lp.weight->data<double>(), fresh.size() * sizeof(double));
        cpu::nf4_dequantize<double>(qp.weight->data<uint8_t>(), lp.weight->numel(), lp.weight->data<double>());
        // the same draw, quantized: within one level step of its block's scale
        double worst = 0, scale = 0;
        for (size_t i = 0; i < fresh.size(); ++i) {
          worst = std::max(worst, std::fabs(fresh[i] - lp.weight->data<double>()[i]));
          scale = std::max(scale, std::fabs(fresh[i]));
        }
        EXPECT_LT(worst, 0.2 * scale) << qp.name;
        ++quantized;
      }
  }
  EXPECT_EQ(quantized, 2 * 7);  // q k v o gate up down, two layers
  Data data = random_data(lc, 9);
  const double a = *(*lora)->forward_loss(data.batch(true), 0, 1), b = *(*q)->forward_loss(data.batch(true), 0, 1);
  EXPECT_NEAR(a, b, 1e-12 * std::fabs(a));
}

// QLoRA with what the executor does not combine it with: refused, naming the mode.
TEST(ModelParams, QloraClashesAreRefusedNamingTheMode) {
  for (const ModelSpec& spec : {tiny_moe(Family::llama)}) {
    const ModelConfig c = qlora(config(spec, Precision::bf16, Recompute::none, true), {"q"});
    CpuAllocator alloc;
    auto model = build_model(alloc, c);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().exit_code(), 2);
    EXPECT_NE(model.status().message().find("job.mode qlora"), std::string::npos) << model.status().message();
    EXPECT_NE(model.status().message().find("mixture of experts"), std::string::npos) << model.status().message();
  }
}

// Multi-token prediction with what the executor does not combine it with: refused, naming it.
TEST(ModelParams, MultiTokenPredictionClashesAreRefusedNamingThem) {
  struct Case {
    const char* what;
    void (*set)(ModelConfig*);
  };
  const Case cases[] = {
      {"family gpt", [](ModelConfig* c) { c->spec.family = Family::gpt; }},
      {"plan.zero 2", [](ModelConfig* c) { c->plan.zero = 2; }},
      {"job.mode lora", [](ModelConfig* c) {
         c->job.mode = TrainMode::lora;
         c->job.lora.rank = 2;
         c->job.lora.targets = {"q"};
       }},
      {"another layer kind", [](ModelConfig* c) { c->spec.sliding_window = 3, c->spec.global_attention_every = 2; }},
  };
  for (const Case& k : cases) {
    ModelSpec spec = tiny_llama();
    spec.mtp_layers = 1;
    ModelConfig c = config(spec, Precision::fp32, Recompute::none, true);
    k.set(&c);
    CpuAllocator alloc;
    auto model = build_model(alloc, c);
    ASSERT_FALSE(model.ok()) << k.what;
    EXPECT_EQ(model.status().exit_code(), 2);
    EXPECT_NE(model.status().message().find("multi-token prediction"), std::string::npos) << model.status().message();
    EXPECT_NE(model.status().message().find(k.what), std::string::npos) << model.status().message();
  }
}

int64_t measured_activation_bytes(const ModelConfig& c) {
  CpuAllocator alloc;
  auto model = build_model(alloc, c);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return -1;
  const Data data = random_data(c, 5);
  alloc.reset_peaks();
  auto loss = (*model)->forward_backward(data.batch(true), 1.0, 0, 3);
  EXPECT_TRUE(loss.ok()) << loss.status().message();
  EXPECT_EQ(alloc.stats().live[static_cast<int>(Category::activations)], 0) << "activations leaked past the step";
  return alloc.stats().peak[static_cast<int>(Category::activations)];
}

TEST(ModelRecipe, ActivationBytesEqualRecipeForEveryPolicyAndPrecision) {
  int checked = 0;
  for (const ModelSpec& spec : {tiny_gpt(true), tiny_gpt(false), tiny_llama(), tiny_qwen(true, AttentionBias::all)})
    for (Precision prec : {Precision::fp32, Precision::bf16, Precision::fp16})
      for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full, Recompute::full_k})
        for (bool flash : {false, true}) {
          const ModelConfig c = config(spec, prec, rc, flash);
          SCOPED_TRACE(spec.name + std::string(" dropout=") + (spec.dropout ? "1" : "0") + " " + to_string(prec) + " " +
                       to_string(rc) + (flash ? " flash" : " materialized"));
          const int64_t measured = measured_activation_bytes(c), planned = planned_activation_bytes(c);
          EXPECT_EQ(measured, planned);
          if (checked % 8 == 0) std::printf("%s: measured %lld B, recipe %lld B\n", c.spec.name.c_str(), static_cast<long long>(measured), static_cast<long long>(planned));
          ++checked;
        }
  EXPECT_EQ(checked, 96);
}

TEST(ModelRecipe, MoeActivationBytesEqualRecipeForEveryPolicyAndPrecision) {
  int checked = 0;
  for (const ModelSpec& spec : {tiny_moe(Family::gpt, 0.75), tiny_moe(Family::llama), tiny_moe(Family::llama, 1.3)})
    for (Precision prec : {Precision::fp32, Precision::bf16})
      for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full, Recompute::full_k})
        for (bool flash : {false, true}) {
          const ModelConfig c = config(spec, prec, rc, flash);
          SCOPED_TRACE(spec.name + " cf " + std::to_string(spec.moe.capacity_factor) + " " + to_string(prec) + " " + to_string(rc) +
                       (flash ? " flash" : " materialized"));
          const int64_t measured = measured_activation_bytes(c), planned = planned_activation_bytes(c);
          EXPECT_EQ(measured, planned);
          if (checked % 8 == 0) std::printf("%s: measured %lld B, recipe %lld B\n", c.spec.name.c_str(), static_cast<long long>(measured), static_cast<long long>(planned));
          ++checked;
        }
  EXPECT_EQ(checked, 48);
}

// A window changes nothing kept (recipe: flash keeps o and lse, materialised the whole
// s x s probabilities with the window masked to 0): the executor's bytes equal the recipe's;
// Gemma's post-norms keep each branch's output (their inputs).
// The executor's activation bytes equal the recipe's for each model, in fp32 and bf16, under
// no, selective and full recompute, flash and materialised.
void expect_activation_bytes_equal_recipe(std::initializer_list<ModelSpec> specs) {
  for (const ModelSpec& spec : specs)
    for (Precision prec : {Precision::fp32, Precision::bf16})
      for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
        for (bool flash : {false, true}) {
          const ModelConfig c = config(spec, prec, rc, flash);
          SCOPED_TRACE(spec.name + " " + to_string(prec) + " " + to_string(rc) + (flash ? " flash" : " materialized"));
          EXPECT_EQ(measured_activation_bytes(c), planned_activation_bytes(c));
        }
}
TEST(ModelRecipe, SlidingWindowActivationBytesEqualRecipe) {
  expect_activation_bytes_equal_recipe({tiny_windowed(tiny_llama()), tiny_windowed(tiny_gpt(true)), tiny_gemma(), tiny_sinks(tiny_llama())});
}
// Latent attention keeps its latents and their norms, and q, k, v but under selective
// recompute (re-made from the latents).
TEST(ModelRecipe, LatentAttentionActivationBytesEqualRecipe) {
  expect_activation_bytes_equal_recipe({tiny_mla(), tiny_mla(0), tiny_mla_moe()});
  // By hand: with flash, selective recompute keeps all but q, k and v, which are per token
  // heads x (nope + rope) twice and heads x v once: 4 x 6 + 4 x 6 + 4 x 3 = 60 values, over
  // 2 sequences x 8 tokens x 2 layers in fp32: 7,680 bytes fewer than no recompute.
  const int64_t none = measured_activation_bytes(config(tiny_mla(), Precision::fp32, Recompute::none, true));
  const int64_t selective = measured_activation_bytes(config(tiny_mla(), Precision::fp32, Recompute::selective, true));
  EXPECT_EQ(none - selective, 60 * 2 * 8 * 2 * 4);
}
// Multi-token prediction keeps each module's block set and 5 tokens x h beside it.
TEST(ModelRecipe, MultiTokenPredictionActivationBytesEqualRecipe) {
  expect_activation_bytes_equal_recipe({with_mtp(tiny_llama(), 2), with_mtp(tiny_mla_moe(), 1)});
}
TEST(ModelRecipe, MixedMoeLayersActivationBytesEqualRecipe) {
  expect_activation_bytes_equal_recipe({tiny_mixed_moe(1, 0, 12), tiny_mixed_moe(0, 2, 0), tiny_gpt_oss()});
}

// The weights the executor holds under QLoRA: NF4 bytes of every linear (nf4_bytes of its
// size), 16-bit norms, embedding and head, the adapters; the planner's weights line
// (kNf4BytesPerParam a linear weight) within the per-tensor rounding of the packed bytes,
// the block codes and the group scales (under 6 bytes a tensor). Activations as LoRA's.
TEST(ModelRecipe, QloraHoldsNf4WeightsAndTheRecipesActivations) {
  for (const ModelSpec& spec : {tiny_llama(), tiny_gpt(false)}) {
    for (Recompute rc : {Recompute::none, Recompute::selective}) {
      const ModelConfig c = qlora(config(spec, Precision::bf16, rc, true), {"q", "v", "down"});
      SCOPED_TRACE(spec.name + " " + to_string(rc));
      EXPECT_EQ(measured_activation_bytes(c), planned_activation_bytes(c));
      CpuAllocator alloc;
      auto model = build_model(alloc, c);
      ASSERT_TRUE(model.ok()) << model.status().message();
      int64_t expected = 0, nf4_tensors = 0;
      for (const ParamRef& p : (*model)->params()) {
        const int64_t elements = p.split.rows * p.split.cols;
        if (p.weight->dtype() == DType::u8) {
          EXPECT_EQ(p.weight->numel(), cpu::nf4_bytes(elements)) << p.name;
          EXPECT_EQ(p.grad, nullptr) << p.name;
          expected += cpu::nf4_bytes(elements);
          ++nf4_tensors;
        } else {
          EXPECT_EQ(p.weight->dtype(), DType::bf16) << p.name;
          expected += 2 * elements;
        }
      }
      EXPECT_EQ(nf4_tensors, 2 * (spec.family == Family::gpt ? 6 : 7));
      const int64_t measured = alloc.stats().live[static_cast<int>(Category::weights)];
      EXPECT_EQ(measured, expected);
      const StageParams sp = stage_params(c.spec, c.job, c.plan, 0);
      const double planned = model_state_bytes(sp.trainable, sp.frozen, c.job, 0, 1, false, sp.frozen_nf4).weights;
      EXPECT_NEAR(static_cast<double>(measured), planned, 6.0 * nf4_tensors);
    }
  }
}

TEST(ModelRecipe, LoraAndFrozenLayersKeepWhatTheRecipeSays) {
  for (const ModelSpec& spec : {tiny_gpt(true), tiny_llama(), tiny_moe(Family::gpt, 0.75), tiny_moe(Family::llama)}) {
    ModelConfig lora = config(spec, Precision::bf16, Recompute::none, false);
    lora.job.mode = TrainMode::lora;
    lora.job.lora.rank = 2;
    lora.job.lora.targets = {"q", "v", "down"};
    EXPECT_EQ(measured_activation_bytes(lora), planned_activation_bytes(lora)) << spec.name << " lora";
    ModelConfig frozen = config(spec, Precision::fp32, Recompute::selective, false);
    frozen.job.frozen_layers = 1;
    const int64_t fb = measured_activation_bytes(frozen);
    EXPECT_EQ(fb, planned_activation_bytes(frozen)) << spec.name << " frozen";
    // A frozen layer keeps nothing: less than the unfrozen model.
    ModelConfig unfrozen = frozen;
    unfrozen.job.frozen_layers = 0;
    EXPECT_LT(fb, measured_activation_bytes(unfrozen));
  }
}

// Five training steps; losses of each step.
std::vector<double> train_losses(const ModelConfig& c, int steps, int64_t* act_peak) {
  CpuAllocator alloc;
  auto model = build_model(alloc, c);
  EXPECT_TRUE(model.ok());
  TrainerOptions to;
  to.lr = 1e-2;
  auto trainer = Trainer::create(alloc, **model, c.job, precision_scheme(c.job), to);
  EXPECT_TRUE(trainer.ok());
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const Data data = random_data(c, 100 + s);
    (*model)->zero_grads();
    losses.push_back(*(*model)->forward_backward(data.batch(true), (*trainer)->loss_scale(), 0, 1000 + s));
    (*trainer)->step();
  }
  *act_peak = alloc.stats().peak[static_cast<int>(Category::activations)];
  return losses;
}

TEST(ModelRecompute, BitIdenticalLossesAndLessActivationMemory) {
  for (const ModelSpec& spec : {tiny_gpt(true), tiny_llama(), tiny_moe(Family::gpt), tiny_moe(Family::llama), tiny_mla()}) {
    int64_t none_peak = 0, sel_peak = 0, full_peak = 0;
    const ModelConfig cn = config(spec, Precision::fp32, Recompute::none, false);
    const ModelConfig cs = config(spec, Precision::fp32, Recompute::selective, false);
    const ModelConfig cf = config(spec, Precision::fp32, Recompute::full, false);
    const std::vector<double> none = train_losses(cn, 5, &none_peak);
    const std::vector<double> sel = train_losses(cs, 5, &sel_peak);
    const std::vector<double> full = train_losses(cf, 5, &full_peak);
    for (size_t i = 0; i < none.size(); ++i) {
      EXPECT_EQ(std::memcmp(&none[i], &sel[i], sizeof(double)), 0) << spec.name << " step " << i << ": " << none[i] << " vs " << sel[i];
      EXPECT_EQ(std::memcmp(&none[i], &full[i], sizeof(double)), 0) << spec.name << " step " << i << ": " << none[i] << " vs " << full[i];
    }
    // (The targets are uniform random: the loss can only fall toward ln V = 3.466, and the
    // latent-attention model starts below it.)
    if (!spec.mla.enabled()) {
      EXPECT_LT(none.back(), none.front()) << "training made progress";
    }
    EXPECT_EQ(none_peak, planned_activation_bytes(cn));
    EXPECT_EQ(sel_peak, planned_activation_bytes(cs));
    EXPECT_EQ(full_peak, planned_activation_bytes(cf));
    EXPECT_LT(sel_peak, none_peak);
    EXPECT_LT(full_peak, sel_peak);
  }
}

}  // namespace
}  // namespace llmplan::exec
