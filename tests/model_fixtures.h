// Models and clusters the tests share, typed in from their sources (never from the
// code's own output or presets).
#pragma once

#include "planner/spec/specs.h"

namespace llmplan::testing {

// GPT-3 175B (Brown et al. 2020, Table 2.1), GPT-2 tokenizer.
inline ModelSpec gpt3_175b() {
  ModelSpec m;
  m.name = "gpt3-175b";
  m.family = Family::gpt;
  m.layers = 96;
  m.hidden = 12288;
  m.heads = 96;
  m.kv_heads = 96;
  m.ffn_hidden = 49152;
  m.vocab = 50257;
  m.max_positions = 2048;
  m.tied_embeddings = true;
  m.dropout = true;
  return m;
}

// GPT-3 1.3B (Brown et al. 2020, Table 2.1): 24 layers, d_model 2048, 16 heads.
inline ModelSpec gpt3_1_3b() {
  ModelSpec m = gpt3_175b();
  m.name = "gpt3-1.3b";
  m.layers = 24;
  m.hidden = 2048;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 8192;
  return m;
}

// Llama 2 7B (Touvron et al. 2023; HF config): 32 layers, 4096 wide, 32 heads, SwiGLU 11008.
inline ModelSpec llama2_7b() {
  ModelSpec m;
  m.name = "llama2-7b";
  m.family = Family::llama;
  m.layers = 32;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 32;
  m.ffn_hidden = 11008;
  m.vocab = 32000;
  m.max_positions = 4096;
  return m;
}

// DGX A100 80 GB nodes (data/hardware/clusters/dgx-a100.json): 8 GPUs per node, NVLink
// 300 GB/s and HDR InfiniBand 25 GB/s per GPU per direction, latencies 5 / 10 us.
inline ClusterSpec dgx_a100(int nodes) {
  ClusterSpec c;
  c.name = "dgx-a100";
  c.gpu.name = "a100-80g";
  c.gpu.memory_bytes = 80.0 * 1024 * 1024 * 1024;
  c.gpu.memory_bandwidth = 2039e9;
  c.gpu.peak_flops[static_cast<int>(Dtype::fp32)] = 19.5e12;
  c.gpu.peak_flops[static_cast<int>(Dtype::tf32)] = 156e12;
  c.gpu.peak_flops[static_cast<int>(Dtype::fp16)] = 312e12;
  c.gpu.peak_flops[static_cast<int>(Dtype::bf16)] = 312e12;
  c.gpus_per_node = 8;
  c.nodes = nodes;
  c.intra_node_bandwidth = 300e9;
  c.intra_node_latency = 5e-6;
  c.inter_node_bandwidth = 25e9;
  c.inter_node_latency = 10e-6;
  return c;
}

}  // namespace llmplan::testing
