// QLoRA (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs", arXiv
// 2305.14314): the 4-bit NormalFloat base weights with double quantization, checked against
// the paper's own numbers and against hand sums over the model's shape.
#include <gtest/gtest.h>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/cost/time_model.h"
#include "planner/io/presets.h"
#include "planner/search/explain.h"
#include "planner/spec/recipe.h"
#include "planner/spec/spec_json.h"
#include "planner/spec/units.h"

namespace llmplan {
namespace {

PresetRegistry presets() { return std::move(PresetRegistry::load(LLMPLAN_SOURCE_ROOT)).value(); }

// The paper's section 3: double quantization "reduces the memory footprint from 32/64 = 0.5
// bits per parameter to 8/64 + 32/(64 * 256) = 0.127 bits per parameter" beside the 4-bit values.
TEST(Qlora, BytesPerParameterAreTheDoubleQuantizedNf4OfThePaper) {
  EXPECT_NEAR(kNf4BytesPerParam * 8 - 4, 0.127, 0.0005);
}

struct PaperRun {
  ModelSpec m;
  ClusterSpec c;
  TrainingJob j;
  ParallelPlan p;
};

// The paper's 65B fine-tune: LoRA r 64, alpha 16, on every linear layer; gradient
// checkpointing; one GPU; sequences of 512 (its Table 9 hyper-parameters), micro-batch 1.
PaperRun paper_65b(const PresetRegistry& reg, const std::string& model, const std::string& gpu) {
  PaperRun s;
  s.m = *reg.model(model);
  s.c = reg.cluster("dgx-a100")->cluster;
  s.c.gpu = *reg.gpu(gpu);
  s.c.gpus_per_node = 1;
  s.c.nodes = 1;
  set_job_mode(JobMode::qlora, &s.j);
  s.j.lora.rank = 64;
  s.j.lora.alpha = 16;
  s.j.lora.targets = {"q", "k", "v", "o", "gate", "up", "down"};
  s.j.seq_len = 512;
  s.j.global_batch = 16;
  s.p.micro_batch = 1;
  s.p.grad_accum = 16;
  s.p.recompute = Recompute::full;
  return s;
}

// "QLoRA reduces the average memory requirements of finetuning a 65B parameter model from
// >780GB of GPU memory to <48GB" (abstract): the planner's peak for that configuration.
TEST(Qlora, A65BModelFineTunesOnOne48GbGpuAsThePaperStates) {
  const PresetRegistry reg = presets();
  PaperRun s = paper_65b(reg, "llama1-65b", "a100-80g");
  ASSERT_EQ(check_plan(s.m, s.c, s.j, s.p, 1), RejectReason::none);
  const double peak = estimate_memory(s.m, s.c, s.j, s.p).worst.total;
  EXPECT_LT(peak, 48e9) << peak / kGiB << " GiB";
  // Not by leaving things out: the 4-bit base alone is 65B x 0.516 B = 33.6 GB, and the
  // adapters (r 64 on all seven projections: 80 x 10.0M parameters) add 16-bit weights and
  // gradients and fp32 Adam moments, 12 B each: 9.6 GB.
  EXPECT_GT(peak, 43e9) << peak / kGiB << " GiB";
  // 16-bit LoRA of the same model does not fit on an 80 GB GPU (130 GB of base weights).
  s.j.base_quant = BaseQuant::none;
  EXPECT_GT(estimate_memory(s.m, s.c, s.j, s.p).worst.total, 80e9);
}

// What NF4 changes in the weights item, by hand: every linear weight of every layer goes from
// 2 bytes to kNf4BytesPerParam; norms, embedding, head and the adapters stay 16-bit.
TEST(Qlora, WeightsShrinkByTheLinearWeightsTimesTheBytesSaved) {
  const PresetRegistry reg = presets();
  PaperRun s = paper_65b(reg, "llama2-70b", "a100-80g");
  const ModelSpec& m = s.m;
  const double h = m.hidden, q = m.q_width(), kv = m.kv_width(), f = m.ffn_hidden;
  const double linear = m.layers * (h * q + 2 * h * kv + q * h + 3 * h * f);  // Llama 2 70B: 68.45B
  const double qlora = estimate_memory(s.m, s.c, s.j, s.p).worst.bytes[static_cast<int>(MemoryItem::weights)];
  s.j.base_quant = BaseQuant::none;
  const double lora = estimate_memory(s.m, s.c, s.j, s.p).worst.bytes[static_cast<int>(MemoryItem::weights)];
  EXPECT_NEAR(lora - qlora, linear * (2 - kNf4BytesPerParam), 1.0);
  // Llama 2 70B in QLoRA fits on one 80 GB GPU (it does not in 16-bit LoRA).
  s.j.base_quant = BaseQuant::nf4;
  EXPECT_LT(estimate_memory(s.m, s.c, s.j, s.p).worst.total, s.c.gpu.memory_bytes);
}

// The adapters train in 16 bits with 32-bit Adam and no fp32 master (qlora.py --bf16, paged
// AdamW 32-bit): 2 + 2 + 8 bytes per adapter parameter.
TEST(Qlora, AdaptersKeepNoMasterCopy) {
  TrainingJob j;
  set_job_mode(JobMode::qlora, &j);
  const BytesPerParam b = bytes_per_param(j);
  EXPECT_EQ(b.weights + b.gradients + b.optimizer + b.master, 12);
  set_job_mode(JobMode::lora, &j);
  EXPECT_GT(bytes_per_param(j).master, 0);
}

// Dequantization costs time: a QLoRA step moves every base weight's NF4 and 16-bit copies
// on top of LoRA's work, once in each forward and once in each backward.
TEST(Qlora, DequantizationMakesTheStepSlowerThanLora) {
  const PresetRegistry reg = presets();
  PaperRun s = paper_65b(reg, "llama2-7b", "a100-80g");
  s.p.recompute = Recompute::none;
  const double qlora = estimate_time(s.m, s.c, s.j, s.p).total;
  const LayerFlops fl = forward_flops_per_layer(s.m, layer_context(s.m, s.j, s.p, 0), 1.0);
  s.j.base_quant = BaseQuant::none;
  const double lora = estimate_time(s.m, s.c, s.j, s.p).total;
  EXPECT_GT(qlora, lora * 1.01);
  // The dequantized bytes per layer and pass, by hand: Llama 2 7B's linear weights
  // (4 h^2 + 3 h f) x (NF4 read + bf16 write).
  const double h = 4096, f = 11008;
  EXPECT_DOUBLE_EQ(fl.dequant_bytes, (4 * h * h + 3 * h * f) * (kNf4BytesPerParam + 2));
}

TEST(Qlora, PlanFilesSayQloraAndReadItBack) {
  TrainingJob j;
  set_job_mode(JobMode::qlora, &j);
  const nlohmann::json out = to_json(j);
  EXPECT_EQ(out.at("mode"), "qlora");
  const Result<TrainingJob> back = job_from_json(out, "plan.json");
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_TRUE(back->qlora());
  nlohmann::json bad = out;
  bad["mode"] = "qlora4";
  const Result<TrainingJob> refused = job_from_json(bad, "plan.json");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("expected one of pretrain, finetune, lora, qlora"), std::string::npos)
      << refused.status().message();
}

// explain offers the step from LoRA to QLoRA when a LoRA job does not fit, and it fits.
TEST(Qlora, ExplainOffersQloraWhenLoraDoesNotFit) {
  const PresetRegistry reg = presets();
  PaperRun s = paper_65b(reg, "llama2-70b", "a100-80g");
  s.j.base_quant = BaseQuant::none;
  const Explanation e = explain_plan(s.m, s.c, s.j, s.p, 1, 0, MemoryOptions{}, Efficiency{});
  ASSERT_FALSE(e.fits);
  bool offered = false;
  for (const PlanChange& ch : e.changes)
    if (ch.description == "LoRA -> QLoRA (NF4 base weights)") offered = ch.fits && ch.job.qlora();
  EXPECT_TRUE(offered);
}

}  // namespace
}  // namespace llmplan
