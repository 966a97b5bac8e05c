// Memory model against independent published references. Each expected value is typed in
// from its source (paper, equation), never taken from the code's own output.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/search/explain.h"
#include "planner/spec/recipe.h"
#include "planner/spec/units.h"
#include "tests/model_fixtures.h"

namespace llmplan {
namespace {

// GPT-3 175B shape (Brown et al. 2020) with the vocabulary padded to 51200: the model of
// Korthikanti et al. 2022's tables.
ModelSpec gpt3_175b() {
  ModelSpec m = testing::gpt3_175b();
  m.vocab = 51200;
  return m;
}

LayerContext gpt_context(int64_t b, int64_t s, int t, bool sp) {
  LayerContext c;
  c.b = b;
  c.s = s;
  c.s_kv = s;
  c.t = t;
  c.sp = sp;
  c.act_bytes = 2;
  c.flash = false;  // Korthikanti materialise the attention scores
  return c;
}

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models", Table 2 / Eqs. 1-6, bytes per layer with 16-bit activations.
TEST(Korthikanti2022, ActivationBytesPerGptLayer) {
  const ModelSpec m = gpt3_175b();
  const double s = 2048, b = 1, h = 12288, a = 96;
  for (int t : {1, 2, 8}) {
    const double sbh = s * b * h;
    // Eq. 1 (t = 1) / Eq. 2: tensor parallel only.
    const double tp_only = sbh * (10 + 24.0 / t + 5 * a * s / (h * t));
    EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, gpt_context(1, 2048, t, false), LayerRecompute::none), tp_only) << "t=" << t;
    if (t == 1) {
      EXPECT_DOUBLE_EQ(tp_only, sbh * (34 + 5 * a * s / h));
    }
    // Eq. 4: tensor + sequence parallel.
    if (t > 1) {
      EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, gpt_context(1, 2048, t, true), LayerRecompute::none),
                       sbh / t * (34 + 5 * a * s / h));
      // Eq. 6: TP + SP + selective recompute.
      EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, gpt_context(1, 2048, t, true), LayerRecompute::selective), 34 * sbh / t);
    }
    // TP + selective recompute (no SP).
    EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, gpt_context(1, 2048, t, false), LayerRecompute::selective),
                     sbh * (10 + 24.0 / t));
    // Full recompute keeps the layer input, 2sbh, not split by t without SP.
    EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, gpt_context(1, 2048, t, false), LayerRecompute::full), 2 * sbh);
  }
  (void)b;
}

TEST(Korthikanti2022, SelectiveSavesSeventyPercentForGpt3) {
  // Sec. 5: selective recompute saves 70% of activation memory for GPT-3 (5as/h = 80).
  const ModelSpec m = gpt3_175b();
  const double none = activation_bytes_per_layer(m, gpt_context(1, 2048, 8, true), LayerRecompute::none);
  const double sel = activation_bytes_per_layer(m, gpt_context(1, 2048, 8, true), LayerRecompute::selective);
  EXPECT_NEAR(1 - sel / none, 0.70, 0.01);
}

// ZeRO paper (Rajbhandari et al. 2020), Sec. 5.1-5.3 / Figure 1: a 7.5B model with
// N_d = 64 and K = 12 needs 120 GB, 31.4 GB, 16.6 GB and 1.9 GB of model states.
TEST(ZeroPaper, ModelStatesOf7p5BAt64Ways) {
  TrainingJob j;
  j.precision = Precision::fp16;
  j.amp = AmpLevel::O2;
  j.grads = GradConvention::deepspeed;
  const double psi = 7.5e9;
  const double expected_gb[4] = {120.0, 31.4, 16.6, 1.9};
  for (int zero = 0; zero <= 3; ++zero) {
    const double gb = model_state_bytes(psi, 0, j, zero, 64, false).total() / 1e9;
    EXPECT_NEAR(gb, expected_gb[zero], 0.05) << "ZeRO stage " << zero;
  }
}

// Megatron-LM docs (dist_optimizer.md): bf16 params with fp32 main grads need 18 bytes
// per parameter, 6 + 12/d with the distributed optimizer.
TEST(MegatronConvention, EighteenBytesPerParam) {
  TrainingJob j;
  j.precision = Precision::bf16;
  j.amp = AmpLevel::O2;
  j.grads = GradConvention::megatron;
  EXPECT_DOUBLE_EQ(model_state_bytes(1.0, 0, j, 0, 8, false).total(), 18.0);
  EXPECT_DOUBLE_EQ(model_state_bytes(1.0, 0, j, 1, 8, false).total(), 6.0 + 12.0 / 8);
}

// Megatron-Core's precision-aware optimizer with --exp-avg-dtype bf16 --exp-avg-sq-dtype
// bf16 (Transformer Engine's FusedAdam): the fp32 master weights stay, the two moments take
// 2 bytes each: the distributed optimizer's 12 B/param becomes 4 + 2 + 2 = 8, so bf16
// params with fp32 main grads need 6 + 8/d, and with 16-bit grads 4 + 8/d.
TEST(MegatronConvention, Bf16MomentsTakeFourBytesPerParamLess) {
  TrainingJob j;
  j.precision = Precision::bf16;
  j.amp = AmpLevel::O2;
  j.grads = GradConvention::megatron;
  j.moments = MomentsDtype::bf16;
  EXPECT_DOUBLE_EQ(model_state_bytes(1.0, 0, j, 0, 8, false).total(), 14.0);
  EXPECT_DOUBLE_EQ(model_state_bytes(1.0, 0, j, 1, 8, false).total(), 6.0 + 8.0 / 8);
  j.grads = GradConvention::deepspeed;
  EXPECT_DOUBLE_EQ(model_state_bytes(1.0, 0, j, 1, 8, false).total(), 4.0 + 8.0 / 8);
  // The precision-aware optimizer is Adam's, under O2: SGD, O3 and fp32 jobs are refused.
  const ModelSpec m = testing::llama2_7b();
  EXPECT_TRUE(check_inputs(m, j, "t").ok());
  TrainingJob sgd = j;
  sgd.optimizer = Optimizer::sgd_momentum;
  EXPECT_NE(check_inputs(m, sgd, "t").message().find("job.moments"), std::string::npos);
  TrainingJob o3 = j;
  o3.amp = AmpLevel::O3;
  EXPECT_NE(check_inputs(m, o3, "t").message().find("job.moments"), std::string::npos);
}

// An 80 GB GPU with A100's bf16 peak on NVLink-class and 200 Gb/s links: the cluster the
// tests below plan on (only memory decides them).
ClusterSpec a100_like_80gb() {
  ClusterSpec c;
  c.gpu.memory_bytes = 80e9;
  c.gpu.memory_bandwidth = 2e12;
  c.gpu.peak_flops[static_cast<int>(Dtype::bf16)] = 312e12;
  c.intra_node_bandwidth = 300e9;
  c.inter_node_bandwidth = 25e9;
  return c;
}

// DeepSpeed ZeRO-2's model states at its optimizer step, against DeepSpeed's own count:
// 2 psi + 18 psi / N (deepspeed/runtime/zero/stage_1_and_2.py,
// estimate_zero2_model_states_mem_needs without offload: "18 = 2_grads_16bit +
// 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit").
TEST(StepGradCopy, DeepSpeedZero2StatesAtTheStepAreTwoPlusEighteenOverN) {
  TrainingJob j;
  j.precision = Precision::bf16;
  j.amp = AmpLevel::O2;
  j.grads = GradConvention::deepspeed;
  MemoryOptions o;
  o.step_fp32_grad_copy = true;
  const double psi = 2.85e9;
  const int n = 8;
  const ModelStateBytes s = model_state_bytes(psi, 0, j, 2, n, false);
  EXPECT_DOUBLE_EQ(s.total() + step_grad_copy_bytes(j, s.master_weights, 2, o), 2 * psi + 18 * psi / n);
  // No copy where the optimizer reads its gradients where they are: without the stack's
  // convention, with fp32 main gradients (Megatron's .float() is a view), with bf16 moments
  // (the precision-aware optimizer's decoupled_grad), under optimizer offload (the fp32
  // gradients go to host memory) and without fp32 master weights (O3).
  EXPECT_EQ(step_grad_copy_bytes(j, s.master_weights, 2, MemoryOptions{}), 0);
  TrainingJob fp32_grads = j;
  fp32_grads.grads = GradConvention::megatron;
  EXPECT_EQ(step_grad_copy_bytes(fp32_grads, model_state_bytes(psi, 0, fp32_grads, 2, n, false).master_weights, 2, o), 0);
  TrainingJob bf16_moments = j;
  bf16_moments.moments = MomentsDtype::bf16;
  EXPECT_EQ(step_grad_copy_bytes(bf16_moments, model_state_bytes(psi, 0, bf16_moments, 2, n, false).master_weights, 2, o), 0);
  EXPECT_EQ(step_grad_copy_bytes(j, model_state_bytes(psi, 0, j, 2, n, true).master_weights, 2, o), 0);
  TrainingJob o3 = j;
  o3.amp = AmpLevel::O3;
  EXPECT_EQ(step_grad_copy_bytes(o3, model_state_bytes(psi, 0, o3, 2, n, false).master_weights, 2, o), 0);
  // ZeRO-3 steps one sub-group at a time: at most sub_group_size fp32 elements.
  o.step_grad_copy_group_elements = 1e8;
  EXPECT_DOUBLE_EQ(step_grad_copy_bytes(j, model_state_bytes(psi, 0, j, 3, n, false).master_weights, 3, o), 4e8);
  EXPECT_DOUBLE_EQ(step_grad_copy_bytes(j, s.master_weights, 2, o), 4 * psi / n);  // ZeRO 1-2: the whole partition
}

// The copy is the optimizer phase's: Llama 2 7B on dp 8 with ZeRO-1 holds 4 B more per
// parameter it steps (7B / 8) at the step, and nothing more in forward or backward.
TEST(StepGradCopy, RaisesOnlyTheOptimizerPhase) {
  const ModelSpec m = testing::llama2_7b();
  const ClusterSpec c = a100_like_80gb();
  TrainingJob j;
  j.grads = GradConvention::deepspeed;
  j.seq_len = 256;
  j.global_batch = 8;
  ParallelPlan p;
  p.dp = 8;
  p.zero = 1;
  MemoryOptions on;
  on.step_fp32_grad_copy = true;
  const MemoryReport off_r = estimate_memory(m, c, j, p, MemoryOptions{});
  const MemoryReport on_r = estimate_memory(m, c, j, p, on);
  const int opt = static_cast<int>(Phase::optimizer);
  // One fp32 gradient per fp32 master weight the rank steps (ZeRO-1: 7B / 8 of them).
  const double stepped = off_r.worst.phase_bytes[opt][static_cast<int>(MemoryItem::master_weights)] / 4;
  EXPECT_NEAR(stepped, count_params(m, 1, 1, 1, 0, 0).total / 8, 1.0);
  EXPECT_NEAR(on_r.worst.phase_total[opt] - off_r.worst.phase_total[opt], 4 * stepped, 1.0);
  for (Phase ph : {Phase::forward, Phase::backward})
    EXPECT_DOUBLE_EQ(on_r.worst.phase_total[static_cast<int>(ph)], off_r.worst.phase_total[static_cast<int>(ph)]);
  // With short sequences the step is this plan's peak.
  EXPECT_EQ(on_r.worst.peak_phase, Phase::optimizer);
  EXPECT_DOUBLE_EQ(on_r.worst.total, on_r.worst.phase_total[opt]);
}

// explain offers bf16 moments to an AdamW O2 job: Llama 2 7B unsharded (ZeRO-0, dp 1) with
// fp32 main grads holds 18 B/param; the change keeps ZeRO-1 over dp 1 (the distributed
// optimizer it needs) and takes 4 B per parameter off the peak.
TEST(MegatronConvention, ExplainOffersBf16Moments) {
  const ModelSpec m = testing::llama2_7b();
  const ClusterSpec c = a100_like_80gb();
  TrainingJob j;
  j.grads = GradConvention::megatron;
  j.seq_len = 1024;
  j.global_batch = 1;
  ParallelPlan p;
  const Explanation e = explain_plan(m, c, j, p, 1, 0, MemoryOptions{}, Efficiency{});
  const PlanChange* moments = nullptr;
  for (const PlanChange& ch : e.changes)
    if (ch.description == "AdamW moments fp32 -> bf16 (precision-aware optimizer)") moments = &ch;
  ASSERT_NE(moments, nullptr);
  EXPECT_EQ(moments->job.moments, MomentsDtype::bf16);
  EXPECT_EQ(moments->plan.zero, 1);
  const double params = count_params(m, 1, 1, 1, 0, 0).total;
  EXPECT_NEAR(moments->delta_bytes, -4 * params, 0.02 * 4 * params);
  j.optimizer = Optimizer::sgd_momentum;  // the precision-aware optimizer is Adam's
  for (const PlanChange& ch : explain_plan(m, c, j, p, 1, 0, MemoryOptions{}, Efficiency{}).changes)
    EXPECT_NE(ch.description, moments->description);
}

// DeepSpeed's estimator (stage_1_and_2.py): ZeRO-2 with CPU offload keeps 2 bytes per
// parameter on the GPU; t5-3b (2851M params) -> 5.31 GiB.
TEST(DeepSpeedEstimator, Zero2OffloadKeepsHalfPrecisionWeightsOnly) {
  TrainingJob j;
  j.precision = Precision::fp16;
  j.amp = AmpLevel::O2;
  EXPECT_NEAR(model_state_bytes(2851e6, 0, j, 2, 8, true).total() / kGiB, 5.31, 0.005);
}

// LoRA under TP as Megatron / PEFT's LoraParallelLinear shards it: a column-parallel target
// (q) keeps A (r x h) whole and splits B (h x r) by rows; a row-parallel one (o) splits A by
// input columns and keeps B whole. The low-rank activation z = x A^T is b*s*r on every rank,
// with or without SP (column: x is the full, gathered input; row: the partial z is summed
// over TP before B). Llama-2-7B shape, r = 8, t = 2.
// PyTorch per-operator selective checkpointing (torchtitan's "op" policy) keeps the layer
// input, the SDPA output and logsumexp, and every other matmul output in call order:
// q, v, gate and down for a SwiGLU block. Llama 2 7B, b = 2, s = 4096, flash, tp = 1.
TEST(TorchOpSac, KeepsEveryOtherMatmulOutput) {
  const ModelSpec m = testing::llama2_7b();
  LayerContext c;
  c.b = 2;
  c.s = c.s_kv = 4096;
  const double tokens = 2.0 * 4096, h = 4096, f = 11008;
  const SavedTensorSums sums = sum_saved_tensors(m, c);
  const double lse = 2.0 * 32 * 4096 * 4;  // fp32 per head and token
  // input + q + v + SDPA output + gate output + down output, 16-bit.
  EXPECT_DOUBLE_EQ(sums.op_sac, tokens * (h + h + h + h + f + h) * 2 + lse);
  EXPECT_LT(sums.op_sac, 0.5 * sums.all);

  // Only MemoryOptions::selective switches to it; the default (the executor's) is unchanged.
  ParallelPlan p;
  p.micro_batch = 2;
  p.recompute = Recompute::selective;
  p.flash_attention = true;
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 2;
  const ClusterSpec cl = testing::dgx_a100(1);
  MemoryOptions op;
  op.selective = SelectiveRecompute::torch_op_sac;
  const MemoryReport mine = estimate_memory(m, cl, j, p);
  const MemoryReport torch = estimate_memory(m, cl, j, p, op);
  const int act = static_cast<int>(MemoryItem::activations);
  EXPECT_DOUBLE_EQ(torch.worst.item_peak[act] - mine.worst.item_peak[act], m.layers * (sums.op_sac - sums.all));
}

// The loss's peak bytes per logit: the executor's 16-bit logits + fp32 softmax by default,
// or a framework's (torchtitan's cross-entropy on upcast logits: 12).
TEST(LossBuffers, BytesPerLogitFromTheOptions) {
  const ModelSpec m = testing::llama2_7b();
  ParallelPlan p;
  p.micro_batch = 1;
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 1;
  const ClusterSpec cl = testing::dgx_a100(1);
  MemoryOptions torch;
  torch.loss_bytes_per_logit = 12;
  const int logits = static_cast<int>(MemoryItem::logits_loss);
  EXPECT_DOUBLE_EQ(estimate_memory(m, cl, j, p).worst.item_peak[logits], 4096.0 * 32000 * 6);
  EXPECT_DOUBLE_EQ(estimate_memory(m, cl, j, p, torch).worst.item_peak[logits], 4096.0 * 32000 * 12);
}

// FSDP2's root unit (embedding, final norm, untied head) stays gathered beside the current
// and prefetched layer; the executor's default gathers the head as a unit in order of use.
TEST(ZeroThree, Fsdp2RootUnitStaysGathered) {
  const ModelSpec m = testing::llama2_7b();  // untied, RMSNorm
  ParallelPlan p;
  p.dp = 8;
  p.zero = 3;
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 8;
  const ClusterSpec cl = testing::dgx_a100(1);
  MemoryOptions fsdp2;
  fsdp2.zero3_root_gathered = true;
  const ParamCounts pc = count_params(m, 1, 1, 1, 0, 0);
  const double h = 4096, vh = 32000 * h;
  const int gathered = static_cast<int>(MemoryItem::gathered_params);
  EXPECT_DOUBLE_EQ(estimate_memory(m, cl, j, p).worst.item_peak[gathered], std::max(2 * pc.per_layer, vh + h + pc.per_layer) * 2);
  EXPECT_DOUBLE_EQ(estimate_memory(m, cl, j, p, fsdp2).worst.item_peak[gathered], (vh + vh + h + 2 * pc.per_layer) * 2);
}

// DeepSpeed's ZeRO-3 gathers per module: resident are at most its reuse window (1e9
// elements) and prefetch bucket (5e7) beside the largest module, never more than the
// model; gradients leave one parameter at a time through a persistent reduce bucket of 5e8
// elements (deepspeed/runtime/zero/config.py, partitioned_param_coordinator.py, stage3.py
// v0.16.4). GPT-3 175B: its largest module is the token + position embedding.
TEST(ZeroThree, DeepSpeedGathersModulesWithinItsWindow) {
  const ClusterSpec cl = testing::dgx_a100(1);
  TrainingJob j;
  j.seq_len = 2048;
  j.global_batch = 8;
  ParallelPlan p;
  p.dp = 8;
  p.zero = 3;
  p.recompute = Recompute::full;
  MemoryOptions ds;
  ds.zero3_module_fetch = true;
  const int gathered = static_cast<int>(MemoryItem::gathered_params), grads = static_cast<int>(MemoryItem::gradients),
            comm = static_cast<int>(MemoryItem::comm_buffers);
  const ModelSpec big = testing::gpt3_175b();
  const double embedding = (50257.0 + 2048.0) * 12288.0;  // wte + wpe
  const double total = 96 * (12 * 12288.0 * 12288 + 13 * 12288.0) + embedding + 2 * 12288.0;  // Kaplan's 12h^2 + biases and norms
  const auto layer_units = estimate_memory(big, cl, j, p);
  const auto modules = estimate_memory(big, cl, j, p, ds);
  EXPECT_DOUBLE_EQ(modules.worst.item_peak[gathered], (1e9 + 5e7 + embedding) * 2);
  EXPECT_NEAR(modules.worst.item_peak[grads], total * 2 / 8 + embedding * 2, 1e-6 * total);
  EXPECT_DOUBLE_EQ(modules.worst.item_peak[comm] - layer_units.worst.item_peak[comm], 5e8 * 2);
  // A model smaller than the window stays gathered whole: 12 layers of GPT-3 1.3B.
  ModelSpec small = testing::gpt3_1_3b();
  small.layers = 12;
  const double small_total = 12 * (12 * 2048.0 * 2048 + 13 * 2048.0) + (50257.0 + 2048.0) * 2048 + 2 * 2048.0;
  EXPECT_NEAR(estimate_memory(small, cl, j, p, ds).worst.item_peak[gathered], small_total * 2, 1e-9 * small_total);
}

// torch.distributed.pipelining as torchtitan's 2024-12 benchmarks ran it: each micro-batch
// has its own receive buffers (activation after the first stage, gradient before the last),
// the input gradient stays on the activation buffer, and the schedule keeps every output to
// the end of the step (the last stage's logits; the one at the loss counted with the loss).
// Llama 2 7B on pp 4, 8 micro-batches of one 4096-token sequence.
TEST(PipelineBuffers, TorchPipeliningKeepsEveryMicroBatchsBuffers) {
  const ModelSpec m = testing::llama2_7b();
  const ClusterSpec cl = testing::dgx_a100(1);
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 16;
  ParallelPlan p;
  p.dp = 2, p.pp = 4, p.micro_batch = 1, p.grad_accum = 8;
  MemoryOptions torch;
  torch.pp_buffers_per_microbatch = true;
  const int comm = static_cast<int>(MemoryItem::comm_buffers);
  const auto own = estimate_memory(m, cl, j, p), pipelining = estimate_memory(m, cl, j, p, torch);
  const double hidden = 4096.0 * 4096 * 2, logits = 4096.0 * 32000 * 2;
  EXPECT_DOUBLE_EQ(pipelining.first.bytes[comm] - own.first.bytes[comm], 8 * 2 * hidden);  // gradient buffers, outputs
  EXPECT_DOUBLE_EQ(pipelining.last.bytes[comm] - own.last.bytes[comm], 8 * 2 * hidden + 7 * logits);
}

TEST(LoraParallelLinear, AdapterShardsAndLowRankActivationsPerRank) {
  const ModelSpec m = testing::llama2_7b();
  const uint32_t qo = projection_bit(Projection::q) | projection_bit(Projection::o);
  const ParamCounts pc = count_params(m, 2, 1, 1, qo, 8);
  EXPECT_DOUBLE_EQ(pc.lora_per_layer, 2 * 8 * (4096 + 4096));
  EXPECT_DOUBLE_EQ(pc.lora_per_layer_rank, 8 * (4096 + 2048) + 8 * (2048 + 4096));
  for (bool sp : {false, true}) {
    LayerContext c;
    c.b = 2;
    c.s = 4096;
    c.s_kv = 4096;
    c.t = 2;
    c.sp = sp;
    c.base_trainable = false;
    c.lora_targets = qo;
    c.lora_rank = 8;
    const SavedTensorList l = saved_tensors_per_layer(m, c);
    int found = 0;
    for (int i = 0; i < l.count; ++i) {
      const std::string name = l.items[static_cast<size_t>(i)].name;
      if (name == "lora.q.z" || name == "lora.o.z") {
        ++found;
        EXPECT_DOUBLE_EQ(l.items[static_cast<size_t>(i)].elements, 2.0 * 4096 * 8) << name << " sp " << sp;
      }
    }
    EXPECT_EQ(found, 2);
  }
}

// Context parallel run as an all-gather (the executor's exchange), bytes from hand
// arithmetic: Llama-2-7B's shape with 8 KV heads (q width 4096, kv width 1024), seq 8192,
// micro-batch 1, tp 2, cp 4, bf16. One whole gathered tensor is 1 x 8192 x w/2 x 2 B =
// 8192 B per column of w. Forward and backward gather k, then v: k whole + v raw + v whole
// = 8192 x 3 x 1024 = 25165824 (queries and the output gradient stay local; the dk / dv
// reduce-scatter buffer comes after k and v are freed). The ring's forward holds the K and
// V of two ranks' 2048 tokens: 2 x 2048 x 1024/2 x 2 (K, V) x 2 B = 8388608; its backward
// also their dK, dV accumulators: 16777216, the communication line's peak.
TEST(ContextParallel, AllGatherBuffersFromHandArithmetic) {
  ModelSpec m = testing::llama2_7b();
  m.kv_heads = 8;
  TrainingJob j;
  j.seq_len = 8192;
  j.precision = Precision::bf16;
  ParallelPlan p;
  p.tp = 2;
  p.cp = 4;
  p.micro_batch = 1;
  p.cp_exchange = CpExchange::all_gather;
  EXPECT_DOUBLE_EQ(cp_all_gather_buffer_bytes(m, j, p), 25165824.0);
  MemoryOptions opt;
  opt.dp_bucket_bytes = 0;
  opt.nccl_bytes_per_group = 0;
  const double gathered = stage_memory_extras(m, j, p, 0, opt).comm_buffers;
  p.cp_exchange = CpExchange::ring;
  const StageMemoryExtras ring = stage_memory_extras(m, j, p, 0, opt);
  EXPECT_DOUBLE_EQ(ring.comm_buffers, 8388608.0);
  EXPECT_DOUBLE_EQ(ring.layer_comm_buffers, 8388608.0);
  EXPECT_DOUBLE_EQ(gathered, 25165824.0);
  const int comm = static_cast<int>(MemoryItem::comm_buffers);
  const ClusterSpec cl = testing::dgx_a100(1);
  EXPECT_DOUBLE_EQ(estimate_memory(m, cl, j, p, opt).worst.item_peak[comm], 16777216.0);
  // With SP the layer-input gather (2048 x 4096 x 2 B = 16777216) is never live with the
  // CP exchange's buffers: only the larger of the two counts.
  p.sp = true;
  const double ring_sp = stage_memory_extras(m, j, p, 0, opt).comm_buffers;
  EXPECT_DOUBLE_EQ(ring_sp, 16777216.0);
  p.cp_exchange = CpExchange::all_gather;
  EXPECT_DOUBLE_EQ(stage_memory_extras(m, j, p, 0, opt).comm_buffers, 25165824.0);
  // No CP: nothing.
  p.cp = 1;
  EXPECT_DOUBLE_EQ(cp_all_gather_buffer_bytes(m, j, p), 0.0);
}

// The LM head's backward GEMM and ZeRO-3's backward pool, from hand arithmetic: Llama-2-7B
// (h 4096, V 32000, untied head, RMSNorm) on the last of 2 stages, tp 2 with SP, bf16,
// micro-batch 1 x 4096 tokens, ZeRO-3 over dp 8, 1000 B of head GEMM scratch.
//   logits (their gradient) in bf16: 4096 x 32000/2 x 2 B                  = 131072000
//   head backward: head-input gradient over the gathered 4096 tokens + the layer-output
//   gradient over the rank's 2048, x 4096 x 2 B = 6144 x 8192 = 50331648, + 1000 scratch
//   head unit (final norm 4096 + the rank's 16000 x 4096 rows) gathered with the stage's
//   last layer; inside a layer's backward, that layer and the one below it.
TEST(LmHead, BackwardGemmMomentAndZero3BackwardPoolFromHandArithmetic) {
  const ModelSpec m = testing::llama2_7b();
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 8;
  j.precision = Precision::bf16;
  ParallelPlan p;
  p.dp = 8;
  p.tp = 2;
  p.sp = true;
  p.pp = 2;
  p.zero = 3;
  p.micro_batch = 1;
  MemoryOptions opt;
  opt.head_gemm_scratch_bytes = 1000;
  const StageMemoryExtras last = stage_memory_extras(m, j, p, 1, opt);
  const double layer = count_params(m, 2, 2, 1, 0, 0).per_layer_rank, head_unit = 4096 + 16000.0 * 4096;
  EXPECT_DOUBLE_EQ(last.head_logits, 131072000.0);
  EXPECT_DOUBLE_EQ(last.head_forward_working, 1000.0);
  EXPECT_DOUBLE_EQ(last.head_backward_working, 50331648.0 + 1000);
  EXPECT_DOUBLE_EQ(last.head_gathered_forward, head_unit * 2);
  EXPECT_DOUBLE_EQ(last.head_gathered_backward, (head_unit + layer) * 2);
  EXPECT_DOUBLE_EQ(last.gathered_pool_backward, 2 * layer * 2);
  EXPECT_DOUBLE_EQ(last.head_grad_transient, head_unit * bytes_per_param(j).gradients);
  // Stage 0 has no head: no head moments.
  const StageMemoryExtras first = stage_memory_extras(m, j, p, 0, opt);
  EXPECT_DOUBLE_EQ(first.head_logits + first.head_backward_working + first.head_gathered_backward, 0.0);
}

// A vocabulary far wider than the model (h 64, V 65536, one layer, fp32, 64 tokens): the
// head backward GEMM's moment outweighs any layer's, so the backward phase holds every
// activation, the logits' gradient (64 x 65536 x 4 B = 16777216) and the head working
// set ((64 + 64) x 64 x 4 B = 32768) -- and the forward phase peaks at the loss, where
// the fp32 softmax joins the logits (2 x 16777216).
TEST(LmHead, WideVocabularyPeaksAtTheHead) {
  ModelSpec m = testing::llama2_7b();
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 128;
  m.vocab = 65536;
  m.layers = 1;
  TrainingJob j;
  j.seq_len = 64;
  j.global_batch = 1;
  j.precision = Precision::fp32;
  ParallelPlan p;
  p.micro_batch = 1;
  MemoryOptions opt;
  opt.dp_bucket_bytes = 0;
  opt.nccl_bytes_per_group = 0;
  opt.fragmentation_fraction = 0;
  const StageMemory sm = estimate_memory(m, testing::dgx_a100(1), j, p, opt).worst;
  const auto& bwd = sm.phase_bytes[static_cast<int>(Phase::backward)];
  const auto& fwd = sm.phase_bytes[static_cast<int>(Phase::forward)];
  EXPECT_DOUBLE_EQ(bwd[static_cast<int>(MemoryItem::logits_loss)], 16777216.0);
  EXPECT_DOUBLE_EQ(bwd[static_cast<int>(MemoryItem::backward_working)], 32768.0);
  EXPECT_DOUBLE_EQ(bwd[static_cast<int>(MemoryItem::activations)], fwd[static_cast<int>(MemoryItem::activations)]);
  EXPECT_DOUBLE_EQ(fwd[static_cast<int>(MemoryItem::logits_loss)], 2 * 16777216.0);
}

}  // namespace
}  // namespace llmplan
