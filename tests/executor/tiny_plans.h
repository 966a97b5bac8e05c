// The small single-rank plans the executor tests train: a 2-layer GPT (tied head, LayerNorm,
// GELU) or Llama (GQA 4:2, RMSNorm, SwiGLU, untied head) of width 64 over the byte
// vocabulary, 8 sequences of 64 tokens per micro-batch, 2 micro-batches a step, predicted on
// the cpu-host device. Shared by the CPU runner tests and the GPU-vs-CPU training tests.
#pragma once

#include "executor/data.h"
#include "executor/runner.h"

namespace llmplan::exec::testing {

// The 2-layer model: width 64, 4 heads (Llama: 2 kv heads), MLP 256 (Llama SwiGLU: 176).
inline ModelSpec tiny_model(Family fam, int64_t vocab) {
  ModelSpec m;
  m.name = fam == Family::gpt ? "tiny-gpt" : "tiny-llama";
  m.family = fam;
  m.layers = 2;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = fam == Family::gpt ? 4 : 2;
  m.ffn_hidden = fam == Family::gpt ? 256 : 176;
  m.vocab = vocab;
  m.max_positions = 256;
  m.tied_embeddings = fam == Family::gpt;
  m.dropout = false;
  return m;
}

// The MoE version: every MLP 4 routed experts of width 64, top-2, capacity factor 1.25
// (some tokens overflow and are dropped); Llama also one shared expert (width ffn_hidden).
inline ModelSpec tiny_moe_model(Family fam, int64_t vocab) {
  ModelSpec m = tiny_model(fam, vocab);
  m.name += "-moe";
  m.moe.experts = 4;
  m.moe.experts_per_token = 2;
  m.moe.expert_ffn_hidden = 64;
  m.moe.shared_experts = fam == Family::gpt ? 0 : 1;
  m.moe.capacity_factor = 1.25;
  return m;
}

inline PlanFile tiny_plan(Family fam, Precision prec, Recompute rc, bool flash) {
  PlanFile f;
  f.model = tiny_model(fam, kByteVocab);
  f.cluster.gpu = cpu_host_gpu(1e12);
  f.cluster.gpus_per_node = 1;
  f.job.seq_len = 64;
  f.job.global_batch = 16;
  f.job.precision = prec;
  f.job.amp = AmpLevel::O2;
  f.plan.micro_batch = 8;
  f.plan.grad_accum = 2;
  f.plan.recompute = rc;
  f.plan.flash_attention = flash;
  return f;
}

}  // namespace llmplan::exec::testing
