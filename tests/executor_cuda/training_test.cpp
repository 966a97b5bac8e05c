// Training on the GPU against the CPU: the same plan (tiny GPT and Llama, every recompute
// policy, flash and materialized attention, fp32 and bf16 O2, LoRA) run through the runner
// on both backends with the same seed and data. The CPU run is the independent reference:
//   - per-step losses agree within the dtype's tolerance (fp32 1e-4 relative: different
//     summation orders and fast-math-free kernels on both; bf16 3e-2: 16-bit rounding of
//     every stored tensor in different orders, compounding over the steps);
//   - the tensors a step keeps are the same: measured peaks of weights, gradients,
//     optimizer states, master weights, activations and logits are byte-equal between the
//     backends and equal to the planner's prediction.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>

#include "cuda_test_util.h"
#include "executor/comm/communicator.h"
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_stand_in.h"
#include "executor/data.h"
#include "executor/runner.h"
#include "executor/trainer.h"
#include "../executor/tiny_plans.h"

namespace llmplan::exec::cuda::testing {
namespace {

using exec::testing::tiny_plan;

struct Pair {
  RunReport cpu, gpu;
};

// rank >= 0: rank proxies of that rank on both backends (the CPU's stand-ins move host
// buffers, the GPU's device buffers: cuda/device_stand_in.h).
Pair run_both(const PlanFile& f, int steps, int rank = -1) {
  RunOptions o;
  o.steps = steps;
  o.warmup = 0;
  // The shipped corpus; LLMPLAN_DATA_DIR names the tree on a machine the binary was carried to.
  const char* root = std::getenv("LLMPLAN_DATA_DIR");
  o.data = std::string(root ? root : LLMPLAN_SOURCE_ROOT) + "/data/corpus";
  o.trainer.lr = 3e-3;
  std::unique_ptr<Communicator> host_comm;
  if (rank >= 0) host_comm = std::make_unique<LocalCommunicator>(f.plan, rank);
  o.comm = host_comm.get();
  Result<RunReport> c = run_plan(f, o);
  if (!c) throw std::runtime_error("cpu run: " + c.status().message());
  Result<std::unique_ptr<ExecBackend>> be = make_cuda_backend();
  if (!be) throw std::runtime_error("cuda backend: " + be.status().message());
  o.backend = "cuda";
  o.device_backend = be->get();
  std::unique_ptr<Communicator> device_comm;  // destroyed before the backend's context
  if (rank >= 0) device_comm = make_device_proxy_communicator(*context_of(**be), f.plan, rank);
  o.comm = device_comm.get();
  Result<RunReport> g = run_plan(f, o);
  if (!g) throw std::runtime_error("cuda run: " + g.status().message());
  return {std::move(*c), std::move(*g)};
}

void expect_same_run(const PlanFile& f, const Pair& p, double tol, const std::string& what) {
  ASSERT_EQ(p.cpu.steps.size(), p.gpu.steps.size());
  double worst = 0;
  for (size_t i = 0; i < p.cpu.steps.size(); ++i) {
    const double a = p.cpu.steps[i].loss, b = p.gpu.steps[i].loss;
    ASSERT_TRUE(std::isfinite(b)) << what << " step " << i;
    worst = std::max(worst, std::abs(b - a) / std::abs(a));
    EXPECT_NEAR(b, a, tol * std::abs(a)) << what << " step " << i;
  }
  std::printf("%s: %zu steps, loss %.4f -> %.4f (cpu %.4f -> %.4f), worst relative difference %.2e\n", what.c_str(),
              p.gpu.steps.size(), p.gpu.steps.front().loss, p.gpu.steps.back().loss, p.cpu.steps.front().loss,
              p.cpu.steps.back().loss, worst);
  // The GPU pads each logits row to a multiple of 8 elements (aligned rows for cuBLASLt,
  // cuda_model.cpp); the byte vocabulary's 257 columns become 264 (a TP rank's 129, 136).
  // Only the last pipeline stage holds logits.
  const int64_t v = (f.model.vocab + f.plan.tp - 1) / f.plan.tp, vpad = (v + 7) / 8 * 8;
  const bool has_logits = p.gpu.coords.pp == f.plan.pp - 1;
  const double logits_pad = has_logits ? static_cast<double>(static_cast<int64_t>(f.plan.micro_batch) * (f.job.seq_len / f.plan.cp) * (vpad - v) *
                                                             dtype_size(precision_scheme(f.job).storage))
                                       : 0.0;
  for (int c = 0; c < kCategories; ++c) {
    const Category cat = static_cast<Category>(c);
    if (cat == Category::workspace || cat == Category::communication) continue;  // op scratch differs by design
    const double pad = cat == Category::logits_loss ? logits_pad : 0;
    EXPECT_EQ(static_cast<double>(p.gpu.memory.peak[static_cast<size_t>(c)]),
              static_cast<double>(p.cpu.memory.peak[static_cast<size_t>(c)]) + pad)
        << what << " " << to_string(cat);
  }
  for (const CompareLine& l : p.gpu.memory_lines) {
    if (l.name == "weights" || l.name == "gradients" || l.name == "optimizer_states" || l.name == "master_weights" ||
        l.name == "activations" || l.name == "logits_loss") {
      EXPECT_EQ(l.measured, l.predicted + (l.name == "logits_loss" ? logits_pad : 0)) << what << " " << l.name;
    }
  }
}

TEST(CudaTraining, FollowsTheCpuRunFp32) {
  for (Family fam : {Family::gpt, Family::llama})
    for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
      for (bool flash : {false, true}) {
        const PlanFile f = tiny_plan(fam, Precision::fp32, rc, flash);
        const std::string what = f.model.name + " fp32 " + to_string(rc) + (flash ? " flash" : " materialized");
        expect_same_run(f, run_both(f, 6), 1e-4, what);
      }
}

TEST(CudaTraining, FollowsTheCpuRunBf16) {
  for (Family fam : {Family::gpt, Family::llama})
    for (Recompute rc : {Recompute::none, Recompute::full}) {
      const PlanFile f = tiny_plan(fam, Precision::bf16, rc, fam == Family::llama);
      const std::string what = f.model.name + " bf16 O2 " + to_string(rc);
      expect_same_run(f, run_both(f, 6), 3e-2, what);
    }
}

TEST(CudaTraining, LoraAndDropoutFollowTheCpuRun) {
  PlanFile f = tiny_plan(Family::llama, Precision::fp32, Recompute::none, true);
  f.job.mode = TrainMode::lora;
  f.job.lora.rank = 8;
  f.job.lora.alpha = 16;
  expect_same_run(f, run_both(f, 4), 1e-4, "tiny-llama fp32 LoRA q,v");
  PlanFile g = tiny_plan(Family::gpt, Precision::fp32, Recompute::selective, true);
  g.model.dropout = true;  // residual and embedding dropout: the same masks (counter-based RNG) on both
  expect_same_run(g, run_both(g, 4), 1e-4, "tiny-gpt fp32 dropout (flash)");
}

// The 2026 model kinds the CUDA kernels take: sliding-window attention on every other layer
// (Gemma 3 / gpt-oss local layers, flash and materialized), latent attention, multi-token
// prediction, attention sinks, and QLoRA, whose NF4 base weights the GPU dequantizes before
// each use as the CPU does.
TEST(CudaTraining, The2026BlocksFollowTheCpuRun) {
  for (bool flash : {true, false}) {
    PlanFile f = tiny_plan(Family::llama, Precision::fp32, Recompute::selective, flash);
    f.model.sliding_window = 16;  // of 64 positions
    f.model.global_attention_every = 2;
    expect_same_run(f, run_both(f, 4), 1e-4, std::string("tiny-llama fp32 window 16 every other layer") + (flash ? " flash" : " materialized"));
  }
  // Latent attention (a scaled-down DeepSeek-V3 block: q and kv low-rank projections, the
  // decoupled rotary part, value heads narrower than the query heads), both variants.
  for (bool flash : {true, false}) {
    PlanFile m = tiny_plan(Family::llama, Precision::fp32, Recompute::selective, flash);
    m.model.kv_heads = m.model.heads;
    m.model.mla.q_lora_rank = 32;
    m.model.mla.kv_lora_rank = 16;
    m.model.mla.qk_nope_head_dim = 16;
    m.model.mla.qk_rope_head_dim = 8;
    m.model.mla.v_head_dim = 16;
    expect_same_run(m, run_both(m, 4), 1e-4, std::string("tiny-llama fp32 latent attention") + (flash ? " flash" : " materialized"));
  }
  // DeepSeek's multi-token prediction: one MTP depth on the latent-attention model, its
  // shifted tokens and targets staged on the device as the micro-batch is.
  PlanFile t = tiny_plan(Family::llama, Precision::fp32, Recompute::none, true);
  t.model.kv_heads = t.model.heads;
  t.model.mla = {32, 16, 16, 8, 16};
  t.model.mtp_layers = 1;
  expect_same_run(t, run_both(t, 4), 1e-4, "tiny-llama fp32 latent attention + MTP 1");
  // gpt-oss's attention sinks beside its alternating windows, both attention variants.
  for (bool flash : {true, false}) {
    PlanFile g = tiny_plan(Family::llama, Precision::fp32, Recompute::none, flash);
    g.model.attention_sinks = true;
    g.model.sliding_window = 16;
    g.model.global_attention_every = 2;
    expect_same_run(g, run_both(g, 4), 1e-4, std::string("tiny-llama fp32 sinks + window") + (flash ? " flash" : " materialized"));
  }
  PlanFile q = tiny_plan(Family::llama, Precision::bf16, Recompute::none, true);
  set_job_mode(JobMode::qlora, &q.job);
  q.job.lora.rank = 8;
  q.job.lora.alpha = 16;
  expect_same_run(q, run_both(q, 4), 3e-2, "tiny-llama QLoRA (NF4 base, bf16 compute)");
}

// Rank proxies on the GPU (one device, the traffic modelled) against the CPU's proxies of
// the same rank: tensor parallel with SP (the vocabulary-parallel embedding and loss, the
// byte vocabulary padded to 2 x 129 rows), both stages of a pipeline with the tied
// embedding's gradient summed between them (and an interleaved stage: its two chunks),
// ZeRO-3 data parallel, context parallel (the
// ring and the all-gather: query and key slices, the partials merged), and mixture-of-
// experts layers (expert parallel: the all-to-all's stand-in; under TP with SP).
TEST(CudaTraining, RankProxiesFollowTheCpusProxies) {
  struct Case {
    const char* what;
    Family fam;
    int tp, pp, dp, zero, cp, rank;
    CpExchange exchange = CpExchange::ring;
    int vpp = 1;
  } cases[] = {
      {"tp2 sp rank 1", Family::gpt, 2, 1, 1, 0, 1, 1},   {"tp2 sp rank 0", Family::llama, 2, 1, 1, 0, 1, 0},
      {"pp2 stage 0", Family::gpt, 1, 2, 1, 0, 1, 0},     {"pp2 stage 1", Family::gpt, 1, 2, 1, 0, 1, 1},
      {"pp2 vpp2 stage 1", Family::gpt, 1, 2, 1, 0, 1, 1, CpExchange::ring, 2},
      {"dp2 ZeRO-3 rank 1", Family::llama, 1, 1, 2, 3, 1, 1},
      {"cp2 ring rank 1", Family::llama, 1, 1, 1, 0, 2, 1},
      {"cp2 all-gather rank 0", Family::gpt, 1, 1, 1, 0, 2, 0, CpExchange::all_gather},
      {"MoE dp2 ep2 rank 1", Family::llama, 1, 1, 2, 0, 1, 1},
      {"MoE tp2 sp rank 0", Family::gpt, 2, 1, 1, 0, 1, 0},
  };
  for (const Case& k : cases) {
    PlanFile f = tiny_plan(k.fam, Precision::fp32, Recompute::none, true);
    if (std::string(k.what).starts_with("MoE")) {
      f.model = exec::testing::tiny_moe_model(k.fam, exec::kByteVocab);  // the routing on the host, the moves on the GPU
      f.plan.ep = k.dp;
    }
    f.plan.tp = k.tp;
    f.plan.sp = k.tp > 1;
    f.plan.pp = k.pp;
    f.plan.dp = k.dp;
    f.plan.zero = k.zero;
    f.plan.cp = k.cp;
    f.plan.cp_exchange = k.exchange;
    if (k.vpp > 1) {  // interleaved 1F1B: pp x vpp chunks of one layer
      f.model.layers = k.pp * k.vpp;
      f.plan.vpp = k.vpp;
      f.plan.schedule = Schedule::interleaved;
    }
    f.plan.grad_accum = 2;
    f.job.global_batch = static_cast<int64_t>(f.plan.grad_accum) * f.plan.micro_batch * f.plan.dp;
    expect_same_run(f, run_both(f, 4, k.rank), 1e-4, f.model.name + " fp32 proxy of " + k.what);
  }
}

TEST(CudaTraining, UnsupportedConfigsAreClearErrors) {
  PlanFile f = tiny_plan(Family::gpt, Precision::bf16, Recompute::none, true);
  f.job.amp = AmpLevel::O3;
  RunOptions o;
  o.steps = 1;
  o.warmup = 0;
  Result<std::unique_ptr<ExecBackend>> be = make_cuda_backend();
  ASSERT_TRUE(be.ok()) << be.status().message();
  o.backend = "cuda";
  o.device_backend = be->get();
  Result<RunReport> r = run_plan(f, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("O3"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace llmplan::exec::cuda::testing
