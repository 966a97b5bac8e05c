// Training-stack profiles (planner/cost/stack_profile.h, data/stacks/*.json) and the 2024-26
// published runs they are measured on: every shipped profile loads and states its
// sources; the default profile is the compiled-in constants; a stack's memory conventions
// change the memory model the way its source says; the NVLink domain of an NVL72 rack
// keeps groups of up to 72 GPUs on NVLink; and `validate` reads every record of the
// 2024-26 file (MoE, new GPU ids, step-time-only records), skipping only with a reason.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "planner/search/explain.h"
#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/spec/recipe.h"
#include "planner/io/presets.h"
#include "planner/spec/spec_json.h"
#include "planner/cost/stack_profile.h"
#include "planner/search/sweep.h"
#include "planner/cost/time_model.h"
#include "planner/validate/tuned_plans.h"
#include "planner/validate/validate.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

const PresetRegistry& registry() { return testing::shipped_presets(); }

// ---------------------------------------------------------------- the profiles

TEST(StackProfiles, ShippedProfilesLoadWithSourcesAndDistinctFrameworks) {
  const std::vector<StackProfile> stacks = registry().stacks();
  ASSERT_GE(stacks.size(), 6u);
  std::set<std::string> frameworks;
  for (const StackProfile& s : stacks) {
    EXPECT_GT(s.source.size(), 40u) << s.name << ": a profile states where its conventions come from";
    for (const std::string& f : s.frameworks) EXPECT_TRUE(frameworks.insert(f).second) << f << " claimed by two stacks";
  }
  for (const char* f : {"megatron-core", "megatron-bridge", "torchtitan", "llm-foundry", "deepspeed", "llm.c"})
    EXPECT_NE(registry().stack_for_framework(f).name, "llmplan") << f << " has a stack of its own";
  EXPECT_EQ(registry().stack_for_framework("picotron").name, "llmplan");  // unknown stacks take the default
}

// The default profile is not a second copy that can drift: its constants are the
// compiled-in Efficiency defaults and its memory conventions the executor's.
TEST(StackProfiles, DefaultProfileIsTheCompiledInConstants) {
  const StackProfile s = registry().default_stack();
  EXPECT_EQ(s.name, "llmplan");
  const Efficiency compiled;
  for (const EfficiencyField& f : efficiency_fields()) EXPECT_EQ(s.efficiency.*f.field, compiled.*f.field) << f.name;
  const MemoryOptions mo = stack_memory_options(s, MemoryOptions{});
  const MemoryOptions def;
  EXPECT_EQ(mo.loss_bytes_per_logit, def.loss_bytes_per_logit);
  EXPECT_EQ(mo.zero3_root_gathered, def.zero3_root_gathered);
  EXPECT_EQ(mo.moe_tp_partial_gradients, def.moe_tp_partial_gradients);
  EXPECT_EQ(static_cast<int>(mo.selective), static_cast<int>(def.selective));
}

TEST(StackProfiles, RoundTripAndBadInputNamesTheField) {
  const StackProfile tt = *registry().stack("torchtitan");
  Result<StackProfile> back = stack_from_json(to_json(tt), "rt.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->loss_bytes_per_logit_tp, 16);
  EXPECT_TRUE(back->zero3_root_gathered);
  EXPECT_EQ(back->efficiency.attention, tt.efficiency.attention);
  nlohmann::json j = to_json(tt);
  j["efficiency"]["gemm"] = 3.5;
  Result<StackProfile> bad = stack_from_json(j, "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().exit_code(), 2);
  EXPECT_NE(bad.status().message().find("efficiency.gemm"), std::string::npos) << bad.status().message();
  j = to_json(tt);
  j["memory"]["selective"] = "everything";
  bad = stack_from_json(j, "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("memory.selective"), std::string::npos) << bad.status().message();
  Result<StackProfile> unknown = registry().stack("no-such-stack");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("--stack"), std::string::npos);
}

// Llama 3 8B on 8 GPUs, tp 2, at 8k: the loss's fp32 buffers per logit are the stack's
// (torchtitan's loss_parallel under TP: 16 B per logit allocated = 4 fp32 tensors, and the
// 16-bit logits' freed block the caching allocator keeps beside its fp32 ones, 2 more; the
// executor's loss: the bf16 logits and their fp32 softmax, 2 + 4 = 6), so the logits line
// differs by exactly tokens x V/tp x (18 - 6); Megatron's fp32 main gradients add 2 B per
// parameter.
TEST(StackProfiles, MemoryConventionsChangeWhatTheirSourceSays) {
  const ModelSpec m = *registry().model("llama3-8b");
  ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  TrainingJob j;
  j.seq_len = 8192;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 4, p.tp = 2, p.sp = true, p.micro_batch = 1, p.grad_accum = 16, p.zero = 1;
  const StackProfile def = registry().default_stack(), tt = *registry().stack("torchtitan"), mc = *registry().stack("megatron-core");
  const MemoryReport a = estimate_memory(m, c, stack_job(def, j), p, stack_memory_options(def, {}));
  const MemoryReport b = estimate_memory(m, c, stack_job(tt, j), p, stack_memory_options(tt, {}));
  const double logits = static_cast<double>(j.seq_len) * (static_cast<double>(m.vocab) / p.tp);
  const int loss = static_cast<int>(MemoryItem::logits_loss);
  EXPECT_NEAR(b.last.bytes[loss] - a.last.bytes[loss], logits * (18 - 6), 1e-6 * logits);
  const MemoryReport g = estimate_memory(m, c, stack_job(mc, j), p, stack_memory_options(mc, {}));
  const int grads = static_cast<int>(MemoryItem::gradients);
  EXPECT_NEAR(g.first.bytes[grads] / a.first.bytes[grads], 2.0, 1e-9);  // fp32 main grads: 4 B against 2
}

// The conventions a plan must also fit under: duplicates and bounded ones dropped
// (llm-foundry's equal the executor's without its MoE TP partials; megatron-lm's equal
// megatron-core's), Megatron's fp32 gradients, torchtitan's loss and DeepSpeed's ZeRO-3
// module window (more than two layer units gathered on small layers) kept.
TEST(StackEnvelope, DistinctConventionsDropTheBoundedOnes) {
  const std::vector<MemoryConvention> cs = distinct_memory_conventions(registry().stacks(), MemoryOptions{}, TrainingJob{});
  std::set<std::string> names;
  for (const MemoryConvention& c : cs) names.insert(c.stack);
  EXPECT_EQ(names.count("torchtitan"), 1u);
  EXPECT_EQ(names.count("megatron-core") + names.count("megatron-lm"), 1u);
  EXPECT_EQ(names.count("llm-foundry"), 0u);
  EXPECT_EQ(names.count("deepspeed"), 1u);
  EXPECT_EQ(names.count("llmplan"), 0u);  // the own one
}

// Without a stack, the sweep keeps a plan only when it fits under every stack's
// conventions, checked here plan by plan with estimate_memory under each stack; and some
// plan that fits under the executor's conventions alone is dropped (Llama 2 7B on 8
// A100-40GB at 4k: fp32 main gradients cost 2 B/param more).
TEST(StackEnvelope, SweepFitsOnlyUnderEveryStack) {
  const ModelSpec m = *registry().model("llama2-7b");
  ClusterSpec c = *registry().cluster_for_gpu("a100-40g");
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 64;
  SweepSpace space;
  SweepOptions own;
  own.threads = 1;
  own.keep_all = true;
  SweepOptions all = own;
  all.also_fit = distinct_memory_conventions(registry().stacks(), own.memory, j);
  const SweepResult a = run_sweep(m, c, j, 8, space, own);
  const SweepResult b = run_sweep(m, c, j, 8, space, all);
  EXPECT_LT(b.fitting, a.fitting);
  EXPECT_GT(b.fitting, 0);
  int checked = 0;
  for (const PlanResult& r : b.all) {
    if (r.reason != RejectReason::none || checked >= 40) continue;
    ++checked;
    TrainingJob jj = j;
    jj.precision = r.precision, jj.amp = r.amp;
    double high = 0;
    for (const StackProfile& st : registry().stacks()) {
      const MemoryReport mem = estimate_memory(m, c, stack_job(st, jj), r.plan, stack_memory_options(st, MemoryOptions{}));
      EXPECT_TRUE(mem.fits(0)) << st.name;
      high = std::max(high, mem.worst.total);
    }
    EXPECT_NEAR(r.peak_bytes, high, 1e-6 * high);
    EXPECT_LE(r.peak_low_bytes, r.peak_bytes);
  }
  EXPECT_GT(checked, 0);
}

// ---------------------------------------------------------------- uneven pipeline stages

// Megatron-Core's embedding/loss split of Llama 3.1 405B: 126 layers + 2 slots over pp 16
// (vpp 1) are 8 a stage, the first and last stage holding 7 layers; over pp 8 x vpp 8 the
// 64 chunks hold 2 layers, the first and last 1 (stage 0: 15 = 7 x 2 + 1). The heaviest
// stage's weights are a middle stage's 8 layers, by hand: per layer q, o (h x h), k, v
// (h x 8·128), gate, up, down (h x 53248) split over tp 8, and two norms of h whole.
TEST(UnevenStages, EmbeddingLossSplitOfLlama405B) {
  const ModelSpec m = *registry().model("llama3-405b");
  ASSERT_EQ(m.layers, 126);
  ParallelPlan p;
  p.pp = 16;
  // 16 does not divide 126: the sweep takes the embedding/loss split (the even one would put
  // 7 layers on the first two stages, which also hold the embedding, and 8 on the last).
  EXPECT_EQ(default_pipeline_split(m.layers, 16, 1), PipelineSplit::account_embedding_loss);
  p.pipeline_split = PipelineSplit::account_embedding_loss;
  ASSERT_TRUE(pipeline_split_ok(m.layers, p));
  EXPECT_EQ(pp_stage_layers(m.layers, p, 0), 7);
  EXPECT_EQ(pp_stage_layers(m.layers, p, 1), 8);
  EXPECT_EQ(pp_stage_layers(m.layers, p, 15), 7);
  int sum = 0;
  for (int s = 0; s < 16; ++s) sum += pp_stage_layers(m.layers, p, s);
  EXPECT_EQ(sum, 126);
  EXPECT_EQ(first_layer_of_pp_stage(m.layers, p, 2), 15);
  ParallelPlan q;
  q.pp = 8, q.vpp = 8;
  EXPECT_EQ(default_pipeline_split(m.layers, 8, 8), PipelineSplit::account_embedding_loss);
  q.pipeline_split = PipelineSplit::account_embedding_loss;
  EXPECT_EQ(virtual_stage_layers(m.layers, q, 0), 1);
  EXPECT_EQ(virtual_stage_layers(m.layers, q, 1), 2);
  EXPECT_EQ(virtual_stage_layers(m.layers, q, 63), 1);
  EXPECT_EQ(first_layer_of_virtual_stage(m.layers, q, 1), 1);
  EXPECT_EQ(first_layer_of_virtual_stage(m.layers, q, 63), 125);
  EXPECT_EQ(pp_stage_layers(m.layers, q, 0), 15);
  EXPECT_EQ(pp_stage_layers(m.layers, q, 3), 16);
  ParallelPlan bad = q;
  bad.pipeline_split = PipelineSplit::even;
  EXPECT_FALSE(pipeline_split_ok(m.layers, bad));  // 126 % 64 != 0
  // The heaviest stage by weights: a middle stage's 8 layers at 2 B per bf16 parameter.
  ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  TrainingJob j;
  j.seq_len = 8192;
  j.global_batch = 512;
  p.dp = 64, p.tp = 8, p.sp = true, p.micro_batch = 1, p.grad_accum = 8, p.zero = 1;
  p.recompute = Recompute::full;
  ASSERT_EQ(check_plan(m, c, j, p, 64 * 8 * 16, false), RejectReason::none);
  const double h = 16384, kv = 8 * 128.0, f = 53248;
  // Split over tp 8: the projections; each TP rank keeps both norms whole.
  const double per_layer_rank = (2 * h * h + 2 * h * kv + 3 * h * f) / 8 + 2 * h;
  const StageMemory middle = estimate_stage_memory(m, c, j, p, 5, MemoryOptions{});
  EXPECT_EQ(middle.layers, 8);
  EXPECT_NEAR(middle.bytes[static_cast<int>(MemoryItem::weights)], 8 * per_layer_rank * 2, 1e-9 * 8 * per_layer_rank);
  const StageMemory first = estimate_stage_memory(m, c, j, p, 0, MemoryOptions{});
  EXPECT_EQ(first.layers, 7);
}

// ---------------------------------------------------------------- the softmax's exponentials

// One sequence of `seq` tokens per rank on 8 data-parallel ranks, one micro-batch a step.
std::pair<TrainingJob, ParallelPlan> dp8_one_sequence(int64_t seq) {
  TrainingJob j;
  j.seq_len = seq;
  j.global_batch = 8;
  ParallelPlan p;
  p.dp = 8, p.micro_batch = 1, p.grad_accum = 1;
  return {j, p};
}

// A stack whose fused attention serialises the softmax behind its MMAs (megatron-bridge's
// cuDNN attention: attention_exp_serial 1) pays one SFU exponential per score in each pass, at
// the GPU's tensor FLOPs per exponential (B200 512, Blackwell Ultra 256: doubled SFU
// throughput). By hand for Llama 3 8B at 8k, micro-batch 1, TP 1: scores = 32 heads x 8192 x
// 8192 / 2 (causal), forward and backward each; the term costs scores x R / (peak x eff),
// with eff the attention's efficiency at head width 128 and 8192 keys.
TEST(AttentionSoftmax, SerialisedExponentialsCostTheSfuTimeAndBlackwellUltraHalvesIt) {
  const ModelSpec m = *registry().model("llama3-8b");
  const auto [j, p] = dp8_one_sequence(8192);
  const LayerContext lc = layer_context(m, j, p, 0);
  Efficiency e;
  e.attention_mma_sync = 0;
  Efficiency serial = e;
  serial.attention_exp_serial = 1;
  const double scores = 32.0 * 8192 * 8192 / 2;
  const double d = 128, eff = e.attention * d / (d + e.gemm_half_dim) * 8192 / (8192 + e.attention_half_seq);
  for (const char* gpu : {"b200", "gb300", "h100-sxm"}) {
    const ClusterSpec c = *registry().cluster_for_gpu(gpu);
    const double peak = c.gpu.peak(Dtype::bf16);
    const double by_hand = scores * c.gpu.tensor_flops_per_exp / (peak * eff);
    const LayerTimes hidden = layer_times(m, c, j, p, lc, LayerRecompute::none, e);
    const LayerTimes shown = layer_times(m, c, j, p, lc, LayerRecompute::none, serial);
    EXPECT_NEAR(shown.forward - hidden.forward, by_hand, 1e-9 * by_hand) << gpu;
    EXPECT_NEAR(shown.backward - hidden.backward, by_hand, 1e-9 * by_hand) << gpu;
  }
  EXPECT_EQ(registry().gpu("b200")->tensor_flops_per_exp, 2 * registry().gpu("gb300")->tensor_flops_per_exp);
  EXPECT_EQ(registry().gpu("h100-sxm")->tensor_flops_per_exp, 256);
  EXPECT_EQ(registry().gpu("a100-80g")->tensor_flops_per_exp, 128);
  // The default stacks hide it: no term.
  EXPECT_EQ(Efficiency{}.attention_exp_serial, 0);
  EXPECT_EQ(registry().stack("megatron-bridge")->efficiency.attention_exp_serial, 1);
}

// ---------------------------------------------------------------- activation offload

// Offloading k layers keeps one offloaded layer's worth on the GPU (Transformer Engine frees
// a layer's copy when a later layer commits and reloads one layer ahead) and the rest in host
// memory: from k = 1 to k = 10 the activations line drops by exactly 9 layers' kept tensors
// (the recipe's bytes per layer), and the host holds 10. Over a slow host link the
// transfers show in the step time; over a fast one compute hides them.
TEST(ActivationOffload, MovesLayersToTheHostAndCostsTheLink) {
  const ModelSpec m = *registry().model("llama2-7b");
  ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 8;
  ParallelPlan p;
  p.dp = 8, p.micro_batch = 1, p.grad_accum = 1, p.zero = 3;
  const double per_layer = activation_bytes_per_layer(m, layer_context(m, j, p, 0), LayerRecompute::none);
  auto act = [&](int k) {
    ParallelPlan q = p;
    q.activation_offload_layers = k;
    return estimate_memory(m, c, j, q, MemoryOptions{}).worst;
  };
  const StageMemory one = act(1), ten = act(10), none = act(0);
  const int a = static_cast<int>(MemoryItem::activations);
  EXPECT_NEAR(one.bytes[a] - ten.bytes[a], 9 * per_layer, 1e-6 * per_layer);
  EXPECT_NEAR(none.bytes[a], one.bytes[a], 1e-6 * per_layer);  // offloading one layer saves nothing at the peak
  EXPECT_NEAR(ten.host_activation_bytes, 10 * per_layer, 1e-6 * per_layer);
  EXPECT_EQ(act(0).host_activation_bytes, 0);
  ParallelPlan q = p;
  q.activation_offload_layers = 30;
  c.host_bandwidth = 1e9;  // 1 GB/s: 30 layers cannot move in one layer pass
  EXPECT_GT(estimate_time(m, c, j, q).offload, 0);
  c.host_bandwidth = 1e15;
  EXPECT_EQ(estimate_time(m, c, j, q).offload, 0);
  q.activation_offload_layers = 33;  // more than the stage's 32 layers
  EXPECT_EQ(check_plan(m, c, j, q, 8, false), RejectReason::activation_offload);
}

// The sweep with activation offload: Llama 3 70B at 8k on 64 GB200s with no recompute fits
// at micro-batch 2 only by offloading (NVIDIA's recipe offloads 40 layers); the sweep finds
// the fewest layers that fit -- one fewer does not -- and the explanation of the plan without
// offload proposes the same change.
TEST(ActivationOffload, SweepOffloadsTheFewestLayersThatFitAndExplainProposesIt) {
  const ModelSpec m = *registry().model("llama3-70b");
  ClusterSpec c = registry().cluster("gb200-nvl72")->cluster;
  c.nodes = 16;
  TrainingJob j;
  j.seq_len = 8192;
  j.global_batch = 128;
  j.fp8 = Fp8Recipe::tensorwise;
  const StackProfile mc = *registry().stack("megatron-core");
  j = stack_job(mc, j);
  SweepSpace space;
  space.tp = {1}, space.pp = {1}, space.cp = {1}, space.micro_batch = {2}, space.zero = {3}, space.offload = {0};
  space.recompute = {Recompute::none};
  SweepOptions so;
  so.memory = stack_memory_options(mc, MemoryOptions{});
  so.efficiency = mc.efficiency;
  so.threads = 1;
  EXPECT_TRUE(run_sweep(m, c, j, 64, space, so).top.empty());  // nothing fits without offload
  space.activation_offload = true;
  const SweepResult r = run_sweep(m, c, j, 64, space, so);
  ASSERT_FALSE(r.top.empty());
  ParallelPlan p = r.top.front().plan;
  const int k = p.activation_offload_layers;
  EXPECT_GT(k, 2);
  EXPECT_LT(k, 80);
  EXPECT_TRUE(estimate_memory(m, c, j, p, so.memory).fits(0));
  p.activation_offload_layers = k - 1;
  EXPECT_FALSE(estimate_memory(m, c, j, p, so.memory).fits(0));
  p.activation_offload_layers = 0;
  const Explanation ex = explain_plan(m, c, j, p, 64, 0, so.memory, so.efficiency);
  bool proposed = false;
  for (const PlanChange& ch : ex.changes) proposed |= ch.plan.activation_offload_layers == k && ch.fits;
  EXPECT_TRUE(proposed) << "explain proposes offloading " << k << " layers";
}

// What offload puts in host memory, per node, against the node's: ZeRO-1 with optimizer
// offload on dp 8 moves each GPU's Adam moments and fp32 master weights (12 B per
// parameter / 8) and its 16-bit gradients (2 B, not sharded by ZeRO-1) to the host, so a
// DGX H100 node holds 8 x P x (2 + 12/8) bytes. On the datasheet's 2 TB that fits; on a
// node with 100 GiB it does not, though the GPUs have room: the plan is refused.
TEST(HostMemory, OffloadIsCountedPerNodeAndChecked) {
  const ModelSpec m = *registry().model("llama2-7b");
  ClusterSpec c = registry().cluster("dgx-h100")->cluster;
  ASSERT_NEAR(c.host_memory_bytes, 2048.0 * (1 << 30), 1);
  TrainingJob j;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 8, p.zero = 1, p.offload_optimizer = true;
  const double params = count_params(m, 1, 1, 1, 0, 0).total;
  const MemoryReport r = estimate_memory(m, c, j, p, MemoryOptions{});
  EXPECT_NEAR(r.host_bytes_per_node, 8 * params * (2 + 12.0 / 8), 1e-6 * r.host_bytes_per_node);
  EXPECT_TRUE(r.host_fits());
  EXPECT_TRUE(r.fits(0));
  c.host_memory_bytes = 100.0 * (1 << 30);
  const MemoryReport small = estimate_memory(m, c, j, p, MemoryOptions{});
  EXPECT_LE(small.worst.total, small.capacity);
  EXPECT_FALSE(small.host_fits());
  EXPECT_FALSE(small.fits(0));
  p.offload_optimizer = false;
  EXPECT_EQ(estimate_memory(m, c, j, p, MemoryOptions{}).host_bytes_per_node, 0);
}

// The DP gradient reduction moves what the stack's code reduces: PyTorch FSDP upcasts to its
// reduce_dtype fp32 (torchtitan, Composer's DEFAULT policy), Megatron-Core reduces its
// main_grad buffer in place (fp32 main grads: 4 B; grad_reduce_in_fp32 False, as
// Megatron-Bridge's scripts set it: 2 B), DeepSpeed and llm.c their 16-bit gradients.
// Bytes per step over trainable parameters, against those dtypes' sizes.
TEST(StackProfiles, GradientReductionMovesTheStacksDtype) {
  const ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 8, p.micro_batch = 1, p.grad_accum = 8, p.zero = 1;
  const double trainable = 8e9;
  auto bytes_per_param = [&](const std::string& stack, GradConvention grads) {
    const StackProfile s = *registry().stack(stack);
    TrainingJob sj = stack_job(s, j);
    sj.grads = grads;
    const DpStep d = dp_step(c, sj, p, s.efficiency, trainable, trainable, 32);
    return d.grads.bytes * d.grads.count / trainable;
  };
  EXPECT_NEAR(bytes_per_param("torchtitan", GradConvention::deepspeed), 4, 1e-9);
  EXPECT_NEAR(bytes_per_param("llm-foundry", GradConvention::deepspeed), 4, 1e-9);
  EXPECT_NEAR(bytes_per_param("megatron-bridge", GradConvention::deepspeed), 2, 1e-9);
  EXPECT_NEAR(bytes_per_param("megatron-core", GradConvention::megatron), 4, 1e-9);
  EXPECT_NEAR(bytes_per_param("megatron-core", GradConvention::deepspeed), 2, 1e-9);  // NeMo's grad_sync_dtype bf16
  EXPECT_NEAR(bytes_per_param("deepspeed", GradConvention::deepspeed), 2, 1e-9);
  EXPECT_NEAR(bytes_per_param("llm.c", GradConvention::deepspeed), 2, 1e-9);
  // A stack that shares another's efficiency keeps its own code's facts.
  StackProfile own = *registry().stack("megatron-core"), from = *registry().stack("torchtitan");
  own.efficiency_from = "torchtitan";
  ASSERT_TRUE(resolve_shared_efficiency({&own, &from}).is_ok());
  EXPECT_EQ(own.efficiency.gemm, from.efficiency.gemm);
  EXPECT_EQ(own.efficiency.grad_reduce_fp32, 0);
  EXPECT_EQ(from.efficiency.grad_reduce_fp32, 1);
  nlohmann::json f = to_json(from);
  f["memory"]["grad_reduce_fp32"] = "yes";
  Result<StackProfile> bad = stack_from_json(f, "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("memory.grad_reduce_fp32"), std::string::npos) << bad.status().message();
}

// ---------------------------------------------------------------- the NVLink domain

// A GB200 NVL72 rack: trays of 4 GPUs in one 72-GPU NVLink domain. dp 8 over two trays
// all-reduces over NVLink; dp 144 (two racks) leaves the domain through 72 NICs per rack,
// 72 x 50 GB/s, but no rank moves data faster than its own NVLink port (900 GB/s): a
// hierarchical all-reduce (reduce-scatter in the rack, 1/72 of the data across, all-gather
// back) reaches 2 (n-1)/n B / (2 B/900 + B/3600) = 800 GB/s of bus bandwidth, so 3600 would
// be impossible. Without the switches the 4-GPU trays give 4 NICs to a ring.
TEST(NvlinkDomain, GroupsInsideTheRackStayOnNvlink) {
  ClusterPreset rack = *registry().cluster("gb200-nvl72");
  ClusterSpec c = rack.cluster;
  ASSERT_EQ(c.gpus_per_node, 4);
  ASSERT_EQ(c.nvlink_domain, 72);
  ParallelPlan p;
  p.dp = 8;
  EXPECT_EQ(group_link(c, p, Group::dp).bandwidth, c.intra_node_bandwidth);
  p.dp = 144;
  ASSERT_LT(c.intra_node_bandwidth, 72 * c.inter_node_bandwidth);
  EXPECT_EQ(group_link(c, p, Group::dp).bandwidth, c.intra_node_bandwidth);
  p.dp = 16, p.pp = 9;  // 144 ranks again, dp inside a rack: 16 of 72
  EXPECT_EQ(group_link(c, p, Group::dp).bandwidth, c.intra_node_bandwidth);
  c.nvlink_domain = 0;  // the same trays without the rack's NVLink switches
  p.dp = 8, p.pp = 1;
  EXPECT_EQ(group_link(c, p, Group::dp).bandwidth, 4 * c.inter_node_bandwidth);
}

// ---------------------------------------------------------------- the 2024-26 records

const std::vector<ValidationRow>& rows_2024_2026() {
  static const std::vector<ValidationRow> rows = [] {
    Result<ReferenceSet> set = load_reference_runs(default_data_root() + "/data/reference/published_runs_2024_2026.json");
    EXPECT_TRUE(set.ok()) << set.status().message();
    return validate_records(*set, registry(), ValidationOptions{});
  }();
  return rows;
}

// Megatron-Bridge's FLOP count (causal-halved attention scores, vocabulary padded to a
// multiple of 128·tp) reproduces the published table: Llama 3 8B on 8 GB200s prints 1614
// TFLOP/s/GPU at 31357 tokens/s/GPU (performance-summary 25.09), i.e. 51.47 GFLOP/token.
TEST(MegatronBridgeFlops, ReproducesThePublishedTable) {
  const double per_token = megatron_bridge_flops(1, 8192, 32, 4096, 32, 8, 128, 14336, true, 128256, 1) / 8192;
  EXPECT_NEAR(per_token * 31357 / 1e12, 1614, 1.0);
  // Qwen3-30B-A3B (48 layers, hidden 2048, 32 heads of 128, 4 kv groups, top-8 of 768-wide
  // experts, V 151936): 699 TFLOP/s at 30376 tokens/s on 8 GB300s.
  const double moe = megatron_bridge_flops(1, 4096, 48, 2048, 32, 4, 128, 8 * 768, true, 151936, 1) / 4096;
  EXPECT_NEAR(moe * 30376 / 1e12, 699, 1.0);
}

// The file as the shared reference folder publishes it, without this copy's normalizations:
// the Megatron-Bridge rows name "megatron_core" although they count FLOPs the Bridge way, and
// their own TFLOP/s over tokens/s says so; validate then counts them that way, so the dense
// rows' errors are those of the normalized copy.
TEST(Validate2024To2026, SourceFlopVariantFromTheRecordsOwnRatio) {
  Result<nlohmann::json> doc = read_json_file(default_data_root() + "/data/reference/published_runs_2024_2026.json");
  ASSERT_TRUE(doc.ok());
  nlohmann::json raw = *doc;
  for (nlohmann::json& r : raw["records"])
    if (r["measured"]["flops_formula"] == "megatron_bridge") r["measured"]["flops_formula"] = "megatron_core";
  Result<ReferenceSet> set = parse_reference_runs(raw, "raw.json");
  ASSERT_TRUE(set.ok()) << set.status().message();
  const std::vector<ValidationRow> rows = validate_records(*set, registry(), ValidationOptions{});
  ASSERT_EQ(rows.size(), rows_2024_2026().size());
  int switched = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(rows[i].predicted, rows_2024_2026()[i].predicted, 1e-9 * std::max(1.0, rows[i].predicted)) << rows[i].id;
    for (const std::string& n : rows[i].notes) switched += n.find("FLOPs counted megatron_bridge") != std::string::npos;
  }
  EXPECT_EQ(switched, 18);  // the 18 Megatron-Bridge records; the NeMo 24.07 ones keep megatron_core
}

// Every record is read and either compared or skipped with a reason; the reasons are
// exactly the configurations the planner cannot describe yet (activation offload, uneven
// pipeline stages), never a parse failure or a missing preset.
TEST(Validate2024To2026, EveryRecordComparedOrSkippedWithAReason) {
  std::map<std::string, int> skipped;
  int compared = 0;
  for (const ValidationRow& r : rows_2024_2026()) {
    if (!r.skipped) {
      ++compared;
      continue;
    }
    // Uneven stages (Llama 3.1 405B's 126 layers) are planned with Megatron-Core's
    // embedding/loss split and activation offload is modelled: nothing is left to skip.
    ADD_FAILURE() << r.id << ": " << r.skip_reason;
    ++skipped[r.skip_reason];
  }
  EXPECT_EQ(rows_2024_2026().size(), 36u);  // one throughput row per record, none dropped
  EXPECT_EQ(compared, 36);
  // Every record ran, and none is predicted not to fit: the three that were (Qwen3-30B-A3B at
  // micro-batch 8 on GB300 and B300, Llama 3 70B FP8 with 40 offloaded layers on GB200) fit
  // with the megatron-bridge stack's Transformer Engine cross-entropy (2 B per logit) and
  // Megatron-Core's experts that keep no outputs, and with the offloaded layer's reload
  // timed as Transformer Engine times it.
  for (const ValidationRow& r : rows_2024_2026()) EXPECT_FALSE(r.predicted_oom) << r.id << " ran";
}

// The 2024-26 file with only the record `id` in it.
nlohmann::json one_record_file(const std::string& id) {
  Result<nlohmann::json> doc = read_json_file(default_data_root() + "/data/reference/published_runs_2024_2026.json");
  EXPECT_TRUE(doc.ok());
  nlohmann::json one = *doc;
  one["records"] = nlohmann::json::array();
  for (const nlohmann::json& r : (*doc)["records"])
    if (r["id"] == id) one["records"].push_back(r);
  EXPECT_EQ(one["records"].size(), 1u) << id;
  return one;
}

// The main gradients' dtype when a record leaves it out: Llama 3.1 405B on 128 B200s ran
// (Megatron-Bridge's performance recipe sets grad_reduce_in_fp32 False); read as a plain
// Megatron-Core run, with the megatron-core stack's default fp32 main gradients it would
// not fit, with the 16-bit ones the stack offers it does, so validate predicts it with
// those and marks the row assumed. A record that says fp32 keeps fp32 and is a memory error.
TEST(Validate2024To2026, UnstatedMainGradientsTakeTheDtypeTheCompletedRunFitsIn) {
  nlohmann::json one = one_record_file("mbridge_perf_2509_llama31_405b_b200_128gpu_fp8");
  ASSERT_EQ(one["records"].size(), 1u);
  ASSERT_EQ(one["records"][0]["job"]["main_grads"], "bf16");
  one["records"][0]["framework"] = "megatron-core";
  auto row_with = [&](const nlohmann::json& main_grads) {
    nlohmann::json d = one;
    if (main_grads.is_null()) d["records"][0]["job"].erase("main_grads");
    else d["records"][0]["job"]["main_grads"] = main_grads;
    Result<ReferenceSet> set = parse_reference_runs(d, "one.json");
    EXPECT_TRUE(set.ok()) << set.status().message();
    return validate_records(*set, registry(), ValidationOptions{}).front();
  };
  const ValidationRow stated_fp32 = row_with("fp32");
  EXPECT_TRUE(stated_fp32.predicted_oom);  // fp32 main gradients do not fit this plan
  EXPECT_FALSE(stated_fp32.assumed);
  const ValidationRow unstated = row_with(nlohmann::json());
  EXPECT_FALSE(unstated.predicted_oom);
  EXPECT_TRUE(unstated.assumed);
  bool said = false;
  for (const std::string& a : unstated.assumptions) said |= a.find("main_grads=bf16") == 0;
  EXPECT_TRUE(said);
  EXPECT_NEAR(unstated.predicted, row_with("bf16").predicted, 1e-9 * unstated.predicted);
}

// The main gradients' dtype when a record leaves out both it and the recompute: NeMo 24.07
// trained Llama 3 8B at sequence 8192 on 8 H100s (cp 2) at 711 TFLOP/s per GPU in FP8, too
// fast for full recompute. With the megatron-core stack's fp32 main gradients (30 GiB) the
// fastest plan that fits recomputes layers (all, or the first k); with the 16-bit buffers the stack offers
// (NeMo 24.07's distributed_fused_adam with grad_sync_dtype bf16) no recompute fits. The
// null knobs are filled by the fastest plan that fits, the option included, and the row
// says so; a record that states fp32, or states its recompute, keeps the stack's default.
TEST(Validate2024To2026, UnstatedMainGradientsAndRecomputeTakeTheFastestPlanThatFits) {
  nlohmann::json one = one_record_file("nemo2407_perf_llama3_8b_8gpu");
  ASSERT_EQ(one["records"].size(), 1u);
  one["records"][0]["framework"] = "megatron-core";
  one["records"][0]["plan"]["recompute"] = nullptr;
  auto row_with = [&](const nlohmann::json& main_grads, const nlohmann::json& recompute) {
    nlohmann::json d = one;
    d["records"][0]["job"]["main_grads"] = main_grads;
    d["records"][0]["plan"]["recompute"] = recompute;
    Result<ReferenceSet> set = parse_reference_runs(d, "one.json");
    EXPECT_TRUE(set.ok()) << set.status().message();
    return validate_records(*set, registry(), ValidationOptions{}).front();
  };
  auto said = [](const ValidationRow& r, const std::string& prefix) {
    for (const std::string& a : r.assumptions)
      if (a.rfind(prefix, 0) == 0) return true;
    return false;
  };
  const ValidationRow stated_fp32 = row_with("fp32", nullptr);
  ASSERT_FALSE(stated_fp32.skipped) << stated_fp32.skip_reason;
  EXPECT_TRUE(said(stated_fp32, "recompute=full"));
  EXPECT_FALSE(said(stated_fp32, "main_grads="));
  const ValidationRow unstated = row_with(nullptr, nullptr);
  ASSERT_FALSE(unstated.skipped) << unstated.skip_reason;
  EXPECT_TRUE(said(unstated, "recompute=none"));
  EXPECT_TRUE(said(unstated, "main_grads=bf16"));
  EXPECT_NEAR(unstated.predicted, row_with("bf16", "none").predicted, 1e-9 * unstated.predicted);
  const ValidationRow stated_recompute = row_with(nullptr, "full");  // fits with fp32: the default stays
  EXPECT_FALSE(said(stated_recompute, "main_grads="));
}

// The loss when a record does not say which: Qwen3-30B-A3B on 8 GB200s, here at micro-batch
// 32 with full recompute, where the loss's logits outweigh the activations. Megatron-Bridge's
// performance scripts set Transformer Engine's cross-entropy (2 B per logit): as the
// megatron-bridge stack it fits by its own convention; read as a plain Megatron-Core run, the
// stack's default loss (the logits + their fp32 softmax, 6 B per logit: 74 GiB more at 32 x
// 4096 x 151936 logits) would not fit, so validate takes the lighter loss the stack offers,
// says so, and predicts the same memory as the bridge stack.
TEST(Validate2024To2026, AStackLossOptionIsAssumedOnlyForACompletedRunThatNeedsIt) {
  nlohmann::json one = one_record_file("mbridge_perf_moe_2602_qwen3_30b_a3b_gb200_8gpu_mxfp8");
  ASSERT_EQ(one["records"].size(), 1u);
  one["records"][0]["plan"]["micro_batch"] = 32;  // x 8 ranks x 2 accumulation steps = the 512 of the record
  one["records"][0]["plan"]["recompute"] = "full";
  auto row_with = [&](const char* framework, bool ran) {
    nlohmann::json d = one;
    d["records"][0]["framework"] = framework;
    if (!ran) d["records"][0]["measured"]["oom"] = nullptr;  // not known to have run
    Result<ReferenceSet> set = parse_reference_runs(d, "one.json");
    EXPECT_TRUE(set.ok()) << set.status().message();
    ValidationOptions opt;
    const PreparedRecord prepared = prepare_record(set->records[0], registry(), opt);
    return std::pair{validate_records(*set, registry(), opt).front(), prepared};
  };
  const auto [bridge, bridge_rec] = row_with("megatron-bridge", true);
  EXPECT_FALSE(bridge.predicted_oom);
  EXPECT_FALSE(bridge.assumed);
  EXPECT_EQ(bridge.stack, "megatron-bridge");
  EXPECT_EQ(bridge_rec.memory.loss_bytes_per_logit, 2.0);
  const auto [core, core_rec] = row_with("megatron-core", true);
  EXPECT_FALSE(core.predicted_oom);
  EXPECT_TRUE(core.assumed);
  bool said = false;
  for (const std::string& a : core.assumptions) said |= a.find("loss=Transformer Engine's cross-entropy") == 0;
  EXPECT_TRUE(said);
  EXPECT_EQ(core_rec.memory.loss_bytes_per_logit, 2.0);
  // Not known to have run: the stack's own default, which does not fit.
  const auto [unknown, unknown_rec] = row_with("megatron-core", false);
  EXPECT_EQ(unknown_rec.memory.loss_bytes_per_logit, 0.0);
  EXPECT_FALSE(estimate_memory(unknown_rec.model, unknown_rec.cluster, unknown_rec.job, unknown_rec.plan, unknown_rec.memory).fits(0));
  const MemoryReport light = estimate_memory(core_rec.model, core_rec.cluster, core_rec.job, core_rec.plan, core_rec.memory);
  EXPECT_TRUE(light.fits(0));
  // The loss at its peak by hand: 32 x 4096 tokens x 151936 vocabulary (TP 1) x 2 B.
  EXPECT_NEAR(light.worst.bytes[static_cast<int>(MemoryItem::logits_loss)], 32.0 * 4096 * 151936 * 2, 1.0);
}

// A record's sizes that are exactly a shipped preset's give that model's block details,
// which the record schema cannot state: Qwen3-30B-A3B's QK-norm; DeepSeek-V3's latent
// attention, multi-token prediction, three leading dense layers (of width 18432) and
// 2048-wide shared expert. A size that matches no preset (47 layers) gives none, and the
// record is built from its own fields as before.
TEST(Validate2024To2026, ARecordWithAPresetsSizesTakesItsBlockDetails) {
  nlohmann::json one = one_record_file("mbridge_perf_moe_2602_qwen3_30b_a3b_gb300_8gpu_mxfp8");
  auto prepared = [&](const nlohmann::json& d) {
    Result<ReferenceSet> set = parse_reference_runs(d, "one.json");
    EXPECT_TRUE(set.ok()) << set.status().message();
    return prepare_record(set->records[0], registry(), ValidationOptions{});
  };
  auto noted = [](const PreparedRecord& p, const std::string& what) {
    for (const std::string& n : p.notes)
      if (n.find(what) != std::string::npos) return true;
    return false;
  };
  const PreparedRecord qwen = prepared(one);
  EXPECT_TRUE(qwen.model.qk_norm);
  EXPECT_FALSE(qwen.model.mla.enabled());
  EXPECT_TRUE(noted(qwen, "architecture of preset qwen3-30b-a3b (QK-norm)"));
  EXPECT_FALSE(noted(qwen, "block approximated by the"));

  nlohmann::json ds = one;
  nlohmann::json& m = ds["records"][0]["model"];
  m["name"] = "DeepSeek-V3";
  m["layers"] = 61, m["hidden"] = 7168, m["heads"] = 128, m["kv_heads"] = 128, m["head_dim"] = nullptr, m["vocab"] = 129280;
  m["moe"] = {{"experts", 256}, {"experts_per_token", 8}, {"expert_ffn_hidden", 2048}, {"shared_experts", 1}};
  ds["records"][0]["plan"]["ep"] = 8;
  const PreparedRecord v3 = prepared(ds);
  EXPECT_TRUE(v3.model.mla.enabled());
  EXPECT_EQ(v3.model.mla.kv_lora_rank, 512);
  EXPECT_EQ(v3.model.mtp_layers, 1);
  EXPECT_EQ(v3.model.moe.first_dense_layers, 3);
  EXPECT_EQ(v3.model.ffn_hidden, 18432);
  EXPECT_EQ(v3.model.moe.shared_expert_ffn_hidden, 2048);
  EXPECT_EQ(v3.model.moe.load_imbalance, 1.0);  // the benchmark's forced balance, not the preset's 1.04
  EXPECT_TRUE(noted(v3, "architecture of preset deepseek-v3"));

  nlohmann::json other = ds;
  other["records"][0]["model"]["layers"] = 47;
  const PreparedRecord none = prepared(other);
  EXPECT_FALSE(none.model.mla.enabled());
  EXPECT_EQ(none.model.mtp_layers, 0);
  EXPECT_TRUE(noted(none, "block approximated by the"));
}

// Megatron-Core's grouped experts scale the activation by the routing probabilities, so the
// combine keeps no expert outputs: per MoE layer the megatron-core stack keeps exactly one
// expert-output buffer (rows x hidden x 2 B) less than the executor's convention. By hand for
// Qwen3-30B-A3B, micro-batch 1 at 4096 tokens, EP 1: rows = 4096 x 8 routed copies.
TEST(StackProfiles, MegatronMoeKeepsNoExpertOutputs) {
  const ModelSpec m = *registry().model("qwen3-30b-a3b");
  const auto [j, p] = dp8_one_sequence(4096);
  LayerContext lc = layer_context(m, j, p, 0);
  const double executor = activation_bytes_per_layer(m, lc, LayerRecompute::none);
  lc.moe_probs_in_activation = true;
  const double megatron = activation_bytes_per_layer(m, lc, LayerRecompute::none);
  EXPECT_NEAR(executor - megatron, 4096.0 * 8 * 2048 * 2, 1.0);
  const StackProfile mc = *registry().stack("megatron-core");
  EXPECT_TRUE(mc.moe_probs_in_activation);
  EXPECT_TRUE(stack_memory_options(mc, MemoryOptions{}).moe_probs_in_activation);
  EXPECT_FALSE(registry().default_stack().moe_probs_in_activation);
}

// The MoE records are read (model.moe, plan.ep) and costed with their experts.
TEST(Validate2024To2026, MixtureOfExpertsRecordsAreCosted) {
  int moe = 0;
  for (const ValidationRow& r : rows_2024_2026())
    if (r.group == "mbridge_perf_moe" && !r.skipped) {
      ++moe;
      EXPECT_GT(r.predicted, 0) << r.id;
      EXPECT_EQ(r.stack, "megatron-bridge");
    }
  EXPECT_EQ(moe, 5);
}

// ---------------------------------------------------------------- Megatron-Bridge 26.02 MoE

nlohmann::json mbridge2602_moe_file() {
  Result<nlohmann::json> doc = read_json_file(default_data_root() + "/data/reference/published_runs_mbridge_2602_moe.json");
  EXPECT_TRUE(doc.ok());
  return *doc;
}

std::vector<ValidationRow> validate_doc(const nlohmann::json& doc) {
  Result<ReferenceSet> set = parse_reference_runs(doc, "mbridge2602.json");
  EXPECT_TRUE(set.ok()) << set.status().message();
  return set.ok() ? validate_records(*set, registry(), ValidationOptions{}) : std::vector<ValidationRow>{};
}

bool has_note(const ValidationRow& r, const std::string& prefix) {
  for (const std::string& n : r.notes)
    if (n.rfind(prefix, 0) == 0) return true;
  return false;
}

// Every record of the 26.02 MoE file is compared or skipped with its reason, and none that
// ran is predicted not to fit. DeepSeek-V3 on GB300 keeps bf16 moments (its recipe's
// precision-aware optimizer): fp32 ones add 4 B per sharded parameter, by hand about
// 654e9 expert parameters / (pp 2 x ep 32) / expert-DP 4 + 17e9 others / pp 2 / dp 128 =
// 2.62e9 parameters, 9.77 GiB of its 277.5 GiB (the fragmentation reserve adds a few %). GPT-OSS's TFLOP/s count its gated experts as 2 GEMMs (Megatron-
// Bridge's non-SiLU count), 26% under the formula's 3, so its tokens/s are compared.
// DeepSeek-V3's explicit layout (61 layers in 16 virtual stages, 4 each but the last's 1)
// is the record's stage_layers.
TEST(ValidateMbridge2602Moe, EveryRecordComparedOrSkippedWithItsReason) {
  const nlohmann::json doc = mbridge2602_moe_file();
  const std::vector<ValidationRow> rows = validate_doc(doc);
  ASSERT_EQ(rows.size(), 14u);
  int compared = 0;
  for (const ValidationRow& r : rows) {
    EXPECT_FALSE(r.predicted_oom) << r.id << " ran";
    if (r.skipped) {
      EXPECT_EQ(r.id, "mbridge2602_perf_moe_qwen3_235b_a22b_h100_256gpu_fp8");  // EP32 folded over TP2 x DP16
      EXPECT_NE(r.skip_reason.find("ep does not divide"), std::string::npos) << r.skip_reason;
      continue;
    }
    ++compared;
    EXPECT_GT(r.predicted, 0) << r.id;
    if (r.id.find("gpt_oss") != std::string::npos) {
      EXPECT_EQ(r.metric, Metric::tokens_per_s) << r.id;
      EXPECT_TRUE(has_note(r, "tokens/s compared")) << r.id;
    }
    if (r.id.find("deepseek_v3") != std::string::npos) {
      EXPECT_TRUE(has_note(r, "pipeline layout as the record gives it")) << r.id;
    }
    if (r.id.find("qwen3_235b") != std::string::npos) {
      EXPECT_EQ(r.metric, Metric::tflops_per_gpu) << r.id;  // Bridge's count reproduced
    }
  }
  EXPECT_EQ(compared, 13);

  nlohmann::json fp32 = doc;
  fp32["records"] = nlohmann::json::array();
  for (const nlohmann::json& r : doc["records"])
    if (r["id"] == "mbridge2602_perf_moe_deepseek_v3_gb300_256gpu_mxfp8") fp32["records"].push_back(r);
  ASSERT_EQ(fp32["records"].size(), 1u);
  ASSERT_EQ(fp32["records"][0]["job"]["optimizer_moments"], "bf16");
  fp32["records"][0]["job"]["optimizer_moments"] = "fp32";
  const std::vector<ValidationRow> with_fp32 = validate_doc(fp32);
  ASSERT_EQ(with_fp32.size(), 1u);
  double bf16_fraction = 0;
  for (const ValidationRow& r : rows)
    if (r.id == "mbridge2602_perf_moe_deepseek_v3_gb300_256gpu_mxfp8") bf16_fraction = r.peak_fraction;
  ASSERT_GT(bf16_fraction, 0);
  const double extra_gib = (with_fp32[0].peak_fraction - bf16_fraction) * 277.5;
  EXPECT_GT(extra_gib, 9.77 * 0.97);
  EXPECT_LT(extra_gib, 9.77 * 1.10);
}

// plan.stage_layers: a malformed list is a parse error naming the field; a well-formed one
// that does not hold the model's layers (or not pp*vpp entries) skips the record, saying why.
TEST(ValidateMbridge2602Moe, StageLayersAreCheckedAgainstTheModel) {
  nlohmann::json one = mbridge2602_moe_file();
  nlohmann::json rec;
  for (const nlohmann::json& r : one["records"])
    if (r["id"] == "mbridge2602_perf_moe_deepseek_v3_gb200_256gpu_mxfp8") rec = r;
  ASSERT_FALSE(rec.is_null());
  one["records"] = nlohmann::json::array({rec});
  nlohmann::json bad = one;
  bad["records"][0]["plan"]["stage_layers"] = nlohmann::json::array({4, -1});
  Result<ReferenceSet> set = parse_reference_runs(bad, "bad.json");
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("records[0].plan.stage_layers"), std::string::npos) << set.status().message();
  bad["records"][0]["plan"]["stage_layers"] = "4,4";
  EXPECT_FALSE(parse_reference_runs(bad, "bad.json").ok());
  nlohmann::json short_by_one = one;
  short_by_one["records"][0]["plan"]["stage_layers"][0] = 3;  // 60 of 61 layers
  const std::vector<ValidationRow> rows = validate_doc(short_by_one);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].skipped);
  EXPECT_NE(rows[0].skip_reason.find("summing to 60"), std::string::npos) << rows[0].skip_reason;
}

// A GPU id without a preset is a skipped row naming it; the rest of the file still runs.
// A record that publishes only its step time is compared as a rate.
TEST(Validate2024To2026, UnknownGpuSkipsOneRecordAndStepTimeIsCompared) {
  Result<nlohmann::json> doc = read_json_file(default_data_root() + "/data/reference/published_runs_2024_2026.json");
  ASSERT_TRUE(doc.ok());
  nlohmann::json two = *doc;
  two["records"] = nlohmann::json::array({(*doc)["records"][0], (*doc)["records"][6]});
  two["records"][0]["cluster"]["gpu"] = "tpu-v7";
  nlohmann::json& m = two["records"][1]["measured"];  // Llama 3 8B on 8 B200s: 29994 tokens/s/GPU, GBS 128 x 8192
  const double step = 128.0 * 8192 / (29994.0 * 8);
  m["tflops_per_gpu"] = nullptr;
  m["tokens_per_s_per_gpu"] = nullptr;
  m["step_time_s"] = step;
  Result<ReferenceSet> set = parse_reference_runs(two, "two.json");
  ASSERT_TRUE(set.ok()) << set.status().message();
  const std::vector<ValidationRow> rows = validate_records(*set, registry(), ValidationOptions{});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].skipped);
  EXPECT_NE(rows[0].skip_reason.find("tpu-v7"), std::string::npos) << rows[0].skip_reason;
  ASSERT_FALSE(rows[1].skipped) << rows[1].skip_reason;
  EXPECT_EQ(rows[1].metric, Metric::step_time);
  EXPECT_NEAR(rows[1].published, 1 / step, 1e-12);
  // The same record compared by its TFLOP/s (the shipped row) gives nearly the same error:
  // both are the predicted step rate against the published one.
  const ValidationRow* by_tokens = nullptr;
  for (const ValidationRow& r : rows_2024_2026())
    if (r.id == (*doc)["records"][6]["id"].get<std::string>()) by_tokens = &r;
  ASSERT_NE(by_tokens, nullptr);
  EXPECT_NEAR(rows[1].error, by_tokens->error, 0.02);
}

// The 2024-26 records predicted with their stack profiles. Bounds are the ones reached,
// with a little margin, so that a regression fails. Dense Megatron-Bridge rows (the four
// Llama 3.1 405B ones on uneven stages and the two GB200 ones with activation offload
// included; the softmax's exponentials serialised behind cuDNN's MMAs; 16-bit gradient
// reduction, as grad_reduce_in_fp32 False makes it; sequence parallelism splitting the
// h-wide elementwise work): median 4.9%, max 29.5% (the GB200 MXFP8 405B row, published
// below the same plan on B200); NeMo 24.07 (null recompute, filled by the sweep; bf16
// gradient buckets and reduction as NVIDIA's launcher scripts set them, Transformer
// Engine's FP8 weight cache; its Megatron-Core constants are the Bridge fit's): median
// 7.5%, max 26.1%. The MoE rows are far off (median 28.0%, max 180.5%): the target is NOT
// met there, and the bound only keeps them from getting worse.
TEST(Validate2024To2026, ThroughputWithTheStackProfiles) {
  const std::vector<SummaryLine> lines = summarize(rows_2024_2026());
  auto find = [&](const std::string& g, bool assumed) -> const SummaryLine* {
    for (const SummaryLine& l : lines)
      if (l.group == g && l.throughput && l.assumed == assumed) return &l;
    return nullptr;
  };
  const SummaryLine* dense = find("mbridge_perf", false);
  ASSERT_NE(dense, nullptr);
  EXPECT_EQ(dense->all.n, 13);
  // 3.2% (held-out half 5.8%) since Megatron-Core's DP and interleaved-PP overlaps are facts
  // of its code (not fitted); 6.3% (held-out 7.9%) with the DP overlap alone.
  EXPECT_LE(dense->all.median_abs, 0.065);
  EXPECT_LE(dense->held_out.median_abs, 0.08);
  EXPECT_LE(dense->all.max_abs, 0.31) << dense->all.worst_id;
  const SummaryLine* nemo = find("nemo2407_perf", true);
  ASSERT_NE(nemo, nullptr);
  EXPECT_EQ(nemo->all.n, 18);
  EXPECT_LE(nemo->all.median_abs, 0.08);
  EXPECT_LE(nemo->all.max_abs, 0.27) << nemo->all.worst_id;
  const SummaryLine* moe = find("mbridge_perf_moe", false);
  ASSERT_NE(moe, nullptr);
  EXPECT_LE(moe->all.median_abs, 0.32);  // 30.5% (all predicted faster; MoE is never fitted)
  EXPECT_LE(moe->all.max_abs, 1.90) << moe->all.worst_id;
}

// The sweep against the published tuned plans (issue: "the sweep's best plan is predicted
// at most a few percent faster than the published plan"). Every published plan lies inside
// the sweep's space (activation offload included), so the sweep's best is never slower
// than it: a speed-up below 1 would mean the sweep missed a legal plan. Measured: median
// 1.02x; dense records up to 1.170x (Llama 3 70B on 64 H100s: the model predicts the
// recipe's pp8 vpp5 plan 12% slower than it ran, while plans with pp 1 hide Megatron's
// overlapped DP traffic; 1.218x before the interleaved sends were overlapped, 1.147x before
// the DP overlap became a stack fact), MoE up to 1.24x (Qwen3-30B-A3B on B200). The "few percent"
// target is NOT met; the bounds keep it from getting worse.
TEST(Validate2024To2026, SweepBestAgainstThePublishedTunedPlans) {
  Result<ReferenceSet> set = load_reference_runs(default_data_root() + "/data/reference/published_runs_2024_2026.json");
  ASSERT_TRUE(set.ok());
  const std::vector<TunedPlanGap> gaps = tuned_plan_gaps(*set, registry(), ValidationOptions{});
  int compared = 0;
  for (const TunedPlanGap& g : gaps) {
    if (!g.skip.empty()) continue;
    ++compared;
    EXPECT_GT(g.plans_evaluated, 0) << g.id;
    EXPECT_GE(g.speedup, 1 - 1e-9) << g.id << ": the sweep's best (" << g.best_plan << ") is slower than the published " << g.published_plan;
    const bool moe = g.group.find("moe") != std::string::npos;
    EXPECT_LE(g.speedup, moe ? 1.30 : 1.23) << g.id << ": best " << g.best_plan << ", published " << g.published_plan;
  }
  EXPECT_EQ(compared, 18);  // the fully specified records (NeMo 24.07's leave recompute null)
}

// The shipped megatron-bridge profile is what `llmplan validate --fit-stacks` finds: re-fitting
// it from the generic constants on the 2024-26 records cannot do better (re-run the command
// with --write-stacks data/stacks after a change to the model). megatron-core shares it
// (efficiency_from: the same kernels; its own records leave plan knobs out).
TEST(StackFit, ShippedMegatronBridgeProfileIsTheFitsOptimumAndMegatronCoreSharesIt) {
  Result<ReferenceSet> set = load_reference_runs(default_data_root() + "/data/reference/published_runs_2024_2026.json");
  ASSERT_TRUE(set.ok());
  const std::vector<FitReport> fits = fit_stacks(*set, registry(), ValidationOptions{}, Efficiency{});
  const FitReport* mb = nullptr;
  for (const FitReport& f : fits) {
    if (f.stack == "megatron-bridge") mb = &f;
    EXPECT_NE(f.stack, "megatron-core");  // too few fully specified rows of its own
  }
  ASSERT_NE(mb, nullptr);
  EXPECT_GE(mb->rows, kMinStackFitRows);
  EXPECT_LT(mb->objective_fitted, mb->objective_start);
  ValidationOptions shipped;
  shipped.only_stack = "megatron-bridge";
  EXPECT_LE(fit_objective(*set, registry(), shipped), mb->objective_fitted + 1e-3);
  const StackProfile core = *registry().stack("megatron-core"), bridge = *registry().stack("megatron-bridge");
  EXPECT_EQ(core.efficiency_from, "megatron-bridge");
  for (const EfficiencyField& f : efficiency_fields()) EXPECT_EQ(core.efficiency.*f.field, bridge.efficiency.*f.field) << f.name;
}

// A stack file's efficiency_from names a stack with its own efficiency, and excludes its own
// "efficiency"; a loss option gives its name and its bytes together.
TEST(StackProfiles, SharedEfficiencyAndLossOptionAreCheckedFields) {
  nlohmann::json j = to_json(*registry().stack("megatron-core"));
  EXPECT_EQ(j["efficiency_from"], "megatron-bridge");
  EXPECT_FALSE(j.contains("efficiency"));
  ASSERT_TRUE(stack_from_json(j, "mc.json").ok());
  nlohmann::json both = j;
  both["efficiency"] = {{"gemm", 0.9}};
  Result<StackProfile> b = stack_from_json(both, "both.json");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("efficiency_from"), std::string::npos) << b.status().message();
  nlohmann::json half = j;
  half["memory"].erase("loss_option_bytes_per_logit");
  Result<StackProfile> h = stack_from_json(half, "half.json");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("loss_option"), std::string::npos) << h.status().message();
  StackProfile lone = *stack_from_json(j, "mc.json");
  lone.efficiency_from = "no-such-stack";
  Status s = resolve_shared_efficiency({&lone});
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("no-such-stack"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace llmplan
