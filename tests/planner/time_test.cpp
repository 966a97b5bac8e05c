// Time-model terms against hand calculations from data/reference/formulas.md.
#include <gtest/gtest.h>

#include "planner/cost/memory_model.h"
#include "planner/spec/recipe.h"
#include "planner/cost/time_model.h"
#include "tests/model_fixtures.h"

namespace llmplan {
namespace {

ModelSpec gpt(int layers, int64_t h, int heads, int64_t vocab) {
  ModelSpec m;
  m.family = Family::gpt;
  m.layers = layers;
  m.hidden = h;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = 4 * h;
  m.vocab = vocab;
  m.max_positions = 2048;
  m.tied_embeddings = true;
  return m;
}

// Narayanan et al. 2021 Eq. 3: with full recompute an iteration costs
// 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) FLOPs: 4 passes of the layers, 3 of the head.
TEST(Flops, RecipeReproducesNarayananEquation3) {
  const ModelSpec m = gpt(96, 12288, 96, 51200);  // GPT-3 175B
  LayerContext c;
  c.b = 1536;
  c.s = 2048;
  c.s_kv = 2048;
  const LayerFlops f = forward_flops_per_layer(m, c, 1.0);
  const double layer = f.gemm_base + f.attention;
  const double hardware = 4 * m.layers * layer + 3 * head_forward_flops(m, c);
  const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(hardware / eq3, 1.0, 1e-12);
}

// Sequence parallelism splits the h-wide elementwise work (norms, residual adds, dropout)
// over the TP ranks by the sequence (Korthikanti et al. 2022, sec. 4.2.2), while the
// f-wide activation work is split by t either way: under tp 4 the h part of a rank's
// traffic drops to a quarter and nothing else moves. 16-bit activations, GPT (3 f-wide
// passes): bytes = 2 (tokens 8h / (sp ? t : 1) + tokens 3 f/t).
TEST(Flops, SequenceParallelSplitsTheHiddenWideElementwiseWork) {
  const ModelSpec m = gpt(24, 2048, 16, 50257);
  LayerContext c;
  c.b = 2;
  c.s = 4096;
  c.s_kv = 4096;
  c.t = 4;
  c.act_bytes = 2;
  const double tokens = 2 * 4096, h = 2048, f = static_cast<double>(m.ffn_hidden);
  c.sp = false;
  EXPECT_NEAR(forward_flops_per_layer(m, c, 1.0).elementwise_bytes, 2 * (tokens * 8 * h + tokens * 3 * f / 4), 1e-6);
  c.sp = true;
  EXPECT_NEAR(forward_flops_per_layer(m, c, 1.0).elementwise_bytes, 2 * (tokens / 4 * 8 * h + tokens * 3 * f / 4), 1e-6);
}

// PaLM / Chowdhery et al.: 6N + 12*L*s*h model FLOPs per token (N non-embedding + head).
TEST(Flops, ModelFlopsPerTokenIsSixNPlusAttention) {
  const ModelSpec m = gpt(24, 2048, 16, 50257);
  const double h = 2048, L = 24, s = 2048;
  const double non_embedding = L * (12 * h * h + 13 * h) + 2 * h;  // layers + final LayerNorm
  const double expected = 6 * (non_embedding + 50257 * h) + 12 * L * s * h;
  EXPECT_NEAR(model_flops_per_token(m, 2048) / expected, 1.0, 1e-12);
}

// Ring all-reduce moves 2(n-1)/n of the buffer per rank (Patarasuk & Yuan 2009).
TEST(Collectives, RingAllReduceVolume) {
  Efficiency e;
  e.network = 1.0;
  const Link l{100e9, 0};
  for (int n : {2, 4, 8, 64}) {
    EXPECT_NEAR(allreduce_time(1e9, n, l, e), 2.0 * (n - 1) / n * 1e9 / 100e9, 1e-15) << n;
    EXPECT_NEAR(allgather_time(1e9, n, l, e), 1.0 * (n - 1) / n * 1e9 / 100e9, 1e-15) << n;
  }
  const Link slow{100e9, 5e-6};
  EXPECT_NEAR(allreduce_time(0.0 + 1, 8, slow, e), 2.0 * 7 / 8 / 100e9 + 14 * 5e-6, 1e-15);
  EXPECT_EQ(allreduce_time(1e9, 1, l, e), 0);
}

// Nodes of 8 GPUs: 300 GB/s NVLink inside, 25 GB/s per GPU's NIC between them.
ClusterSpec eight_gpu_nodes() {
  ClusterSpec c;
  c.gpus_per_node = 8;
  c.intra_node_bandwidth = 300e9;
  c.inter_node_bandwidth = 25e9;
  return c;
}

// All-to-all is no ring: with ep 64 over 8-GPU nodes each rank sends 7/64 of its bytes over
// NVLink and 56/64 through its own NIC, at once, so the NIC's share sets the time:
// 56/64 B / 25 GB/s, which alltoall_time's 63/64 B / bw states as bw = 63 / (56 / 25e9).
// A ring collective of the same group goes through 8 NICs (8 x 25 GB/s, capped by NVLink).
TEST(Layout, AllToAllAcrossNodesGoesThroughEachRanksOwnNic) {
  const ClusterSpec c = eight_gpu_nodes();
  ParallelPlan p;
  p.dp = 64;
  p.ep = 64;
  EXPECT_NEAR(group_link(c, p, Group::ep).bandwidth, 63.0 / (56.0 / 25e9), 1);
  EXPECT_EQ(group_link(c, p, Group::dp).bandwidth, 200e9);
  Efficiency e;
  e.network = 1;
  const double bytes = 1e9;
  EXPECT_NEAR(alltoall_time(bytes, 64, group_link(c, p, Group::ep), e), bytes * 56.0 / 64 / 25e9 + 63 * group_link(c, p, Group::ep).latency,
              1e-12);
  p.ep = 8;  // inside one node: NVLink, as before
  EXPECT_EQ(group_link(c, p, Group::ep).bandwidth, 300e9);
  p.ep = 16;  // two nodes: 7/16 over NVLink (7/300e9) against 8/16 over the NIC (8/25e9)
  EXPECT_NEAR(group_link(c, p, Group::ep).bandwidth, 15.0 / (8.0 / 25e9), 1);
}

TEST(Layout, GroupsCrossNodesByRankLayout) {
  const ClusterSpec c = eight_gpu_nodes();
  ParallelPlan p;
  p.tp = 8;
  p.pp = 16;
  p.dp = 8;
  EXPECT_EQ(group_link(c, p, Group::tp).bandwidth, 300e9);  // TP innermost: one node
  EXPECT_EQ(group_link(c, p, Group::dp).bandwidth, 25e9);   // DP spans tp*dp = 64 ranks
  EXPECT_EQ(group_link(c, p, Group::pp).bandwidth, 25e9);
  p.tp = 2;
  p.dp = 4;
  p.pp = 1;
  EXPECT_EQ(group_link(c, p, Group::dp).bandwidth, 300e9);  // 2*4 = 8 ranks: one node
}

// Bubble: equal stages, 1F1B: (p-1)/m of the ideal time; interleaving divides it by v.
TEST(Bubble, OneFOneBAndInterleaved) {
  ModelSpec m = gpt(32, 4096, 32, 32000);
  ClusterSpec c;
  c.gpu.peak_flops[static_cast<int>(Dtype::bf16)] = 312e12;
  c.gpu.memory_bandwidth = 2e12;
  c.gpu.memory_bytes = 80e9;
  c.gpus_per_node = 8;
  c.intra_node_bandwidth = 300e9;
  c.inter_node_bandwidth = 25e9;
  TrainingJob j;
  j.global_batch = 32;
  ParallelPlan p;
  p.pp = 4;
  p.micro_batch = 1;
  p.grad_accum = 32;
  const StepTime one = estimate_time(m, c, j, p);
  // The last stage also runs the LM head, so stages are not equal: bound instead.
  const double per_mb = one.compute / 32;  // slowest stage's fwd+bwd per micro-batch
  EXPECT_GT(one.bubble, 0);
  EXPECT_LE(one.bubble, 3 * per_mb * (1 + 1e-12));
  EXPECT_GE(one.bubble, 2.5 * per_mb);  // (p-1) stages, three of them without the head
  p.vpp = 2;
  p.schedule = Schedule::interleaved;
  const StepTime two = estimate_time(m, c, j, p);
  EXPECT_NEAR(two.bubble, one.bubble / 2, 1e-12 * one.bubble);
}

// The 1F1B in-flight rule (Narayanan 2021; Megatron theoretical_memory_usage.py): stage i
// holds min(m, p - i) micro-batches; interleaved stage 0 holds p*(1 + (p-1)/(p*v)).
TEST(Inflight, MatchesMegatronRules) {
  ParallelPlan p;
  p.pp = 8;
  EXPECT_EQ(inflight_microbatches(p, 64, 0), 8);
  EXPECT_EQ(inflight_microbatches(p, 64, 7), 1);
  EXPECT_EQ(inflight_microbatches(p, 4, 0), 4);
  p.vpp = 4;
  p.schedule = Schedule::interleaved;
  EXPECT_DOUBLE_EQ(inflight_microbatches(p, 64, 0), 8 * (1 + 7.0 / (8 * 4)));
  p.schedule = Schedule::gpipe;
  p.vpp = 1;
  EXPECT_EQ(inflight_microbatches(p, 64, 3), 64);
}

// CP run as an all-gather (the executor's exchange) is not hidden behind attention: per
// layer, forward gathers k and v whole; backward gathers them again and reduce-scatters
// their gradients (the same bytes as a gather). Llama-2-7B's shape with 8 KV heads, seq 4096, micro-batch 1, cp 2, bf16: a
// whole tensor is 4096 tokens x 2 B = 8192 B per column, q 4096 columns, k and v 1024.
// One all-gather over 2 ranks of B bytes: B/2 / (bw x network efficiency) + one latency,
// plus a kernel launch.
TEST(ContextParallel, AllGatherTimeFromHandArithmetic) {
  ModelSpec m = testing::llama2_7b();
  m.kv_heads = 8;
  ClusterSpec c;
  c.gpus_per_node = 8;
  c.intra_node_bandwidth = 300e9;
  c.intra_node_latency = 5e-6;
  TrainingJob j;
  j.seq_len = 4096;
  j.precision = Precision::bf16;
  ParallelPlan p;
  p.cp = 2;
  p.micro_batch = 1;
  p.cp_exchange = CpExchange::all_gather;
  const Efficiency e;
  const LayerContext lc = layer_context(m, j, p, 0);
  ASSERT_TRUE(lc.grad_flows);
  const auto gather = [&](double bytes) { return bytes / 2 / (300e9 * e.network) + 5e-6 + e.kernel_launch_s; };
  const double fwd = 2 * gather(8192.0 * 1024);
  const LayerTimes lt = layer_times(m, c, j, p, lc, LayerRecompute::none, e);
  EXPECT_NEAR(lt.cp_comm_exposed, fwd + 4 * gather(8192.0 * 1024), 1e-12);
  EXPECT_NEAR(lt.cp_comm_forward, fwd, 1e-12);
  // A fully recomputed layer gathers k and v once more; selective recompute reuses the
  // backward's gathers.
  EXPECT_NEAR(layer_times(m, c, j, p, lc, LayerRecompute::full, e).cp_comm_exposed, 2 * fwd + 4 * gather(8192.0 * 1024), 1e-12);
  EXPECT_NEAR(layer_times(m, c, j, p, lc, LayerRecompute::selective, e).cp_comm_exposed, fwd + 4 * gather(8192.0 * 1024), 1e-12);
  // The ring's chunks are overlapped with attention and its forward share stays a third.
  p.cp_exchange = CpExchange::ring;
  EXPECT_EQ(layer_times(m, c, j, p, lc, LayerRecompute::none, e).cp_comm_forward, 0);
}

}  // namespace
}  // namespace llmplan
