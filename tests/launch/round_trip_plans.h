// The plans every launch format is round-tripped on (import(export(plan)) == plan), and the
// comparison that defines "==": the model's shape, the cluster's shape (nodes x GPUs per
// node; configs do not name the GPU, so the import is told it), the job and the plan.
// Each is a legal plan (check_plan none) of a shipped preset; a format that cannot express
// one must refuse it with a message naming the plan field, and the tests say which.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "planner/cost/plan_check.h"
#include "planner/io/plan_file.h"
#include "tests/shipped_presets.h"

namespace llmplan::testing {

struct NamedPlan {
  std::string name;  // for the test's messages, e.g. "llama3-70b tp4 pp4 vpp2 sp zero1"
  PlanFile file;
};

// A PlanFile of preset `model` on `gpus` GPUs of `gpu`'s usual node with the given plan; the
// plan's grad_accum is derived from the job's global batch. EXPECTs the plan legal.
inline PlanFile make_plan_file(const std::string& model, const std::string& gpu, int gpus, TrainingJob job, ParallelPlan p) {
  const PresetRegistry& reg = shipped_presets();
  PlanFile f;
  Result<ModelSpec> m = reg.model(model);
  EXPECT_TRUE(m) << m.status().message();
  if (m) f.model = *m;
  Result<ClusterSpec> c = reg.cluster_for_gpu(gpu);
  EXPECT_TRUE(c) << c.status().message();
  if (c) f.cluster = cluster_with_gpus(*c, gpus);
  f.gpus = gpus;
  p.grad_accum = static_cast<int>(job.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp));
  f.job = job;
  f.plan = p;
  EXPECT_EQ(check_plan(f.model, f.cluster, f.job, f.plan, gpus), RejectReason::none)
      << model << " " << describe(check_plan(f.model, f.cluster, f.job, f.plan, gpus));
  return f;
}

// Dense and MoE, every parallel dimension, ZeRO 0-3, every recompute policy, interleaved and
// uneven pipeline stages, FP8 recipes, LoRA, activation and optimizer offload.
inline std::vector<NamedPlan> round_trip_plans() {
  std::vector<NamedPlan> out;
  auto add = [&](const std::string& name, const std::string& model, const std::string& gpu, int gpus, TrainingJob job, ParallelPlan p) {
    out.push_back({name, make_plan_file(model, gpu, gpus, job, p)});
  };
  TrainingJob job;
  job.seq_len = 8192;
  job.global_batch = 256;
  job.precision = Precision::bf16;

  ParallelPlan p;  // llama3-8b on 8 GPUs: pure data parallel, ZeRO 0..3
  p.dp = 8;
  p.micro_batch = 2;
  for (int z = 0; z <= 3; ++z) {
    p.zero = z;
    p.recompute = z == 3 ? Recompute::full : Recompute::selective;
    add("llama3-8b dp8 zero" + std::to_string(z), "llama3-8b", "h100-sxm", 8, job, p);
  }
  p = {};
  p.dp = 4, p.tp = 2, p.sp = true, p.micro_batch = 1, p.zero = 1, p.recompute = Recompute::none;
  add("llama3-8b dp4 tp2 sp zero1", "llama3-8b", "h100-sxm", 8, job, p);

  // llama3-70b on 64 GPUs: tp4 pp4 vpp5 cp2, the tuned Megatron-Bridge shape.
  p = {};
  p.dp = 2, p.tp = 4, p.pp = 4, p.vpp = 5, p.cp = 2, p.sp = true, p.micro_batch = 1, p.zero = 1;
  p.schedule = Schedule::interleaved;
  p.recompute = Recompute::none;
  add("llama3-70b tp4 pp4 vpp5 cp2 sp zero1", "llama3-70b", "h100-sxm", 64, job, p);
  // Full recompute of k layers per stage, 1F1B, optimizer offload under ZeRO-1.
  p = {};
  p.dp = 4, p.tp = 8, p.pp = 2, p.sp = true, p.micro_batch = 1, p.zero = 1;
  p.recompute = Recompute::full_k, p.recompute_layers = 10;
  add("llama3-70b tp8 pp2 full_k10", "llama3-70b", "h100-sxm", 64, job, p);
  // ZB-V: two chunks per rank in a V (torchtitan's ZBVZeroBubble; the others refuse it).
  p = {};
  p.dp = 4, p.pp = 2, p.vpp = 2, p.micro_batch = 1, p.zero = 3;
  p.schedule = Schedule::zbv;
  add("llama3-8b pp2 zbv zero3", "llama3-8b", "h100-sxm", 8, job, p);

  // Llama 3.1 405B's 126 layers on pp 8 x vpp 8: Megatron-Core's embedding/loss split (uneven).
  p = {};
  p.dp = 2, p.tp = 8, p.pp = 8, p.vpp = 8, p.cp = 2, p.sp = true, p.micro_batch = 1, p.zero = 1;
  p.schedule = Schedule::interleaved;
  p.pipeline_split = PipelineSplit::account_embedding_loss;
  add("llama3.1-405b tp8 pp8 vpp8 cp2 uneven", "llama3.1-405b", "h100-sxm", 256, job, p);

  // Stage sizes of the plan's own (plan.stage_layers): Megatron-Core's first 6 / last 8 of 32.
  p = {};
  p.dp = 2, p.pp = 4, p.micro_batch = 1, p.zero = 1;
  p.pipeline_split = PipelineSplit::custom;
  p.stage_layers = {6, 9, 9, 8};
  add("llama3-8b pp4 custom split", "llama3-8b", "h100-sxm", 8, job, p);

  // MoE: Mixtral 8x7B with expert parallel, and Qwen3-30B-A3B with ep8.
  p = {};
  p.dp = 8, p.tp = 2, p.ep = 8, p.sp = true, p.micro_batch = 1, p.zero = 1, p.recompute = Recompute::selective;
  add("mixtral-8x7b dp8 tp2 ep8", "mixtral-8x7b", "h100-sxm", 16, job, p);
  TrainingJob fp8 = job;
  fp8.seq_len = 4096;
  fp8.fp8 = Fp8Recipe::tensorwise;
  p = {};
  p.dp = 8, p.ep = 8, p.micro_batch = 2, p.zero = 1, p.recompute = Recompute::none;
  add("qwen3-30b-a3b dp8 ep8 fp8", "qwen3-30b-a3b", "h100-sxm", 8, fp8, p);

  // LoRA fine-tuning of llama3-8b on 8 GPUs.
  TrainingJob lora = job;
  lora.seq_len = 4096;
  lora.global_batch = 64;
  lora.mode = TrainMode::lora;
  lora.lora.rank = 16;
  lora.lora.alpha = 32;
  lora.lora.targets = {"q", "k", "v", "o"};
  p = {};
  p.dp = 8, p.micro_batch = 1, p.zero = 1, p.recompute = Recompute::selective;
  add("llama3-8b lora dp8", "llama3-8b", "h100-sxm", 8, lora, p);

  // Megatron-Core's precision-aware optimizer: bf16 moments (--exp-avg-dtype bf16).
  TrainingJob bf16_moments = job;
  bf16_moments.moments = MomentsDtype::bf16;
  p = {};
  p.dp = 8, p.micro_batch = 2, p.zero = 1, p.recompute = Recompute::selective;
  add("llama3-8b dp8 zero1 bf16 moments", "llama3-8b", "h100-sxm", 8, bf16_moments, p);
  return out;
}

// EXPECTs `got` to describe the same run as `want`: model shape (not its name or source),
// cluster shape, job and plan, field by field so that a failure names the field.
inline void expect_same_run(const PlanFile& want, const PlanFile& got, const std::string& what) {
  SCOPED_TRACE(what);
  const ModelSpec &a = want.model, &b = got.model;
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.head_width(), b.head_width());
  EXPECT_EQ(a.ffn_hidden, b.ffn_hidden);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.max_positions, b.max_positions);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.moe.experts, b.moe.experts);
  EXPECT_EQ(a.moe.experts_per_token, b.moe.experts_per_token);
  EXPECT_EQ(a.moe.expert_ffn_hidden, b.moe.expert_ffn_hidden);
  EXPECT_EQ(a.moe.shared_experts, b.moe.shared_experts);
  EXPECT_EQ(want.gpus, got.gpus);
  EXPECT_EQ(want.cluster.gpus_per_node, got.cluster.gpus_per_node);
  EXPECT_EQ(want.cluster.nodes, got.cluster.nodes);
  const TrainingJob &j = want.job, &k = got.job;
  EXPECT_EQ(job_mode(j), job_mode(k));
  if (j.mode == TrainMode::lora) {
    EXPECT_EQ(j.lora.rank, k.lora.rank);
    EXPECT_EQ(j.lora.alpha, k.lora.alpha);
    EXPECT_EQ(j.lora.targets, k.lora.targets);
  }
  EXPECT_EQ(j.frozen_layer_count(want.model.layers), k.frozen_layer_count(got.model.layers));
  EXPECT_EQ(j.seq_len, k.seq_len);
  EXPECT_EQ(j.global_batch, k.global_batch);
  EXPECT_EQ(j.precision, k.precision);
  EXPECT_EQ(j.optimizer, k.optimizer);
  EXPECT_EQ(j.moments, k.moments);
  EXPECT_EQ(j.fp8, k.fp8);
  const ParallelPlan &p = want.plan, &q = got.plan;
  EXPECT_EQ(p.dp, q.dp);
  EXPECT_EQ(p.tp, q.tp);
  EXPECT_EQ(p.pp, q.pp);
  EXPECT_EQ(p.vpp, q.vpp);
  EXPECT_EQ(p.cp, q.cp);
  EXPECT_EQ(p.ep, q.ep);
  EXPECT_EQ(p.sp, q.sp);
  EXPECT_EQ(p.micro_batch, q.micro_batch);
  EXPECT_EQ(p.grad_accum, q.grad_accum);
  EXPECT_EQ(p.zero, q.zero);
  EXPECT_EQ(p.recompute, q.recompute);
  if (p.recompute == Recompute::full_k) {
    EXPECT_EQ(p.recompute_layers, q.recompute_layers);
  }
  EXPECT_EQ(p.offload_optimizer, q.offload_optimizer);
  EXPECT_EQ(p.offload_params, q.offload_params);
  EXPECT_EQ(p.flash_attention, q.flash_attention);
  if (p.pp > 1) {
    EXPECT_EQ(p.schedule, q.schedule);
  }
  if (p.cp > 1) {
    EXPECT_EQ(p.cp_exchange, q.cp_exchange);
  }
  if (p.pp > 1) {
    EXPECT_EQ(p.pipeline_split, q.pipeline_split);
    EXPECT_EQ(p.stage_layers, q.stage_layers);
  }
  EXPECT_EQ(p.activation_offload_layers, q.activation_offload_layers);
}

}  // namespace llmplan::testing
