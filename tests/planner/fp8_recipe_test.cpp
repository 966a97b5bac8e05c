// FP8 recipes (planner/spec/fp8_recipe.h): per recipe, the bytes it adds per parameter and per
// saved activation element against the format documents' numbers, stated here with
// their sources; the memory model applies them to exactly the tensors Transformer Engine
// keeps (hand-counted below); and a recipe the GPU cannot run is refused.
//
// Sources of the numbers asserted:
//   - FP8 data is 1 byte per element (E4M3 / E5M2: NVIDIA, Arm, Intel, "FP8 Formats for
//     Deep Learning", arXiv 2209.05433).
//   - Per-tensor recipes on Hopper keep the data and its transpose (Transformer Engine
//     user guide, "Using FP8 with Transformer Engine": Hopper FP8 GEMMs support only the TN
//     layout; Float8Tensor keeps a transpose cache). Blackwell takes any layout, so one copy.
//   - Delayed scaling keeps an fp32 amax history, default length 1024 (TE
//     transformer_engine/common/recipe/__init__.py, DelayedScaling.amax_history_len).
//   - Blockwise (DeepSeek-V3, arXiv 2412.19437 sec. 3.3.2): 1x128 tiles for activations,
//     128x128 blocks for weights, one fp32 scale each.
//   - MXFP8 (OCP Microscaling Formats MX v1.0, sec. 5): blocks of 32 elements share one
//     8-bit E8M0 scale.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "planner/spec/fp8_recipe.h"
#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/io/presets.h"
#include "planner/spec/recipe.h"
#include "planner/spec/spec_json.h"
#include "planner/cost/stack_profile.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

const PresetRegistry& registry() { return testing::shipped_presets(); }

GpuSpec gpu(const char* id) {
  Result<GpuSpec> g = registry().gpu(id);
  EXPECT_TRUE(g.ok()) << id;
  return *g;
}

TEST(Fp8Recipes, BytesPerParameterAndPerActivationElementMatchTheFormats) {
  const GpuSpec h100 = gpu("h100-sxm"), b200 = gpu("b200");
  // Per-tensor: 1 B data; Hopper keeps the transpose too, Blackwell does not.
  for (Fp8Recipe r : {Fp8Recipe::tensorwise, Fp8Recipe::delayed}) {
    EXPECT_DOUBLE_EQ(fp8_weight_copy_bytes(r, h100), 2.0) << to_string(r);
    EXPECT_DOUBLE_EQ(fp8_weight_copy_bytes(r, b200), 1.0) << to_string(r);
    EXPECT_DOUBLE_EQ(fp8_saved_input_bytes(r, h100), 1.0) << to_string(r);
  }
  // Delayed scaling: five FP8 tensors per module, each an fp32 scale, scale_inv and a
  // 1024-step fp32 amax history: 5 x 4 x 1026 B. Current scaling: the two scalars only.
  EXPECT_DOUBLE_EQ(fp8_scaling_state_bytes(Fp8Recipe::delayed, h100), 5 * 4 * 1026.0);
  EXPECT_DOUBLE_EQ(fp8_scaling_state_bytes(Fp8Recipe::tensorwise, h100), 5 * 4 * 2.0);
  // Blockwise: an fp32 scale per 128 activation elements, per 128x128 weight elements,
  // both orientations of a weight (its blocks run along the other axis in the transpose).
  EXPECT_DOUBLE_EQ(fp8_saved_input_bytes(Fp8Recipe::blockwise, h100), 1.03125);
  EXPECT_DOUBLE_EQ(fp8_weight_copy_bytes(Fp8Recipe::blockwise, h100), 2 * (1 + 4.0 / 16384));
  // MXFP8: an E8M0 byte per 32 elements, rowwise and columnwise copies of a weight.
  EXPECT_DOUBLE_EQ(fp8_saved_input_bytes(Fp8Recipe::mxfp8, b200), 1 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(fp8_weight_copy_bytes(Fp8Recipe::mxfp8, b200), 2.0625);
  EXPECT_DOUBLE_EQ(fp8_weight_copy_bytes(Fp8Recipe::none, h100), 0.0);
}

TEST(Fp8Recipes, RecipeTheGpuCannotRunIsRefusedNamingIt) {
  EXPECT_TRUE(fp8_recipe_supported(Fp8Recipe::mxfp8, gpu("b200")));
  EXPECT_TRUE(fp8_recipe_supported(Fp8Recipe::tensorwise, gpu("h100-sxm")));
  EXPECT_FALSE(fp8_recipe_supported(Fp8Recipe::mxfp8, gpu("h100-sxm")));      // no MX tensor cores
  EXPECT_FALSE(fp8_recipe_supported(Fp8Recipe::tensorwise, gpu("a100-80g")));  // no FP8 tensor cores
  ModelSpec m = *registry().model("llama2-7b");
  ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  TrainingJob j;
  j.fp8 = Fp8Recipe::mxfp8;
  ParallelPlan p;
  p.dp = 8;
  j.global_batch = 64;
  EXPECT_EQ(check_plan(m, c, j, p, 8), RejectReason::precision_unsupported);
  const Status s = check_plan_status(m, c, j, p, 8, "plan.json");
  EXPECT_EQ(s.kind(), ErrorKind::bad_input);
  EXPECT_NE(s.message().find("mxfp8"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("MX block-scaling"), std::string::npos) << s.message();
}

// The memory model under Transformer Engine's conventions (megatron-core) against a hand
// count of the tensors TE keeps. Per layer and micro-batch, the three base-GEMM inputs
// that a non-FP8 run keeps in 16 bits -- the qkv input (b s h), the fc1 input (b s h),
// the fc2 input (b s f) -- are kept in FP8 instead (1 B less each on Hopper per-tensor),
// and the output projection keeps an FP8 copy (b s q, 1 B) beside the attention output
// that flash attention's backward reads. Beside the weights, every layer's weight cache
// (2 B per parameter on Hopper) and four modules' scaling state.
TEST(Fp8Recipes, TransformerEngineConventionKeepsHandCountedBytes) {
  const ModelSpec m = *registry().model("llama2-7b");
  const ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  const StackProfile te = *registry().stack("megatron-core");
  ASSERT_TRUE(te.fp8_quantized_inputs);
  ASSERT_EQ(te.fp8_weight_copies, Fp8WeightCopies::cached);
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 8;
  p.micro_batch = 1;
  p.zero = 1;
  const MemoryOptions opt = stack_memory_options(te, MemoryOptions{});
  TrainingJob j8 = j;
  j8.fp8 = Fp8Recipe::delayed;
  const MemoryReport bf = estimate_memory(m, c, j, p, opt), f8 = estimate_memory(m, c, j8, p, opt);

  const double b = 1, s = 4096, h = 4096, f = 11008, q = 4096;
  const double per_layer_saved = b * s * (h + h + f) * (2 - 1) - b * s * q * 1;
  const double act = [&] {
    const int a = static_cast<int>(MemoryItem::activations);
    return bf.worst.item_peak[a] - f8.worst.item_peak[a];
  }();
  EXPECT_NEAR(act, m.layers * per_layer_saved, 1e-6 * act);

  const double layer_params = 4 * h * h + 3 * h * f + 2 * h;  // q k v o (MHA), gate up down, two RMSNorm weights
  const double cache = m.layers * (layer_params * 2 + 4 * 5 * 4 * 1026.0);
  const int w = static_cast<int>(MemoryItem::weights);
  EXPECT_NEAR(f8.worst.bytes[w] - bf.worst.bytes[w], cache, 1e-9 * cache);
}

// torchao's Float8Linear (torchtitan) saves its 16-bit input and weight: an FP8 recipe
// changes no byte of the memory model there.
TEST(Fp8Recipes, TorchaoConventionKeepsNothingExtra) {
  const ModelSpec m = *registry().model("llama2-7b");
  const ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  const MemoryOptions opt = stack_memory_options(*registry().stack("torchtitan"), MemoryOptions{});
  TrainingJob j;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 8;
  p.zero = 3;
  TrainingJob j8 = j;
  j8.fp8 = Fp8Recipe::tensorwise;
  EXPECT_EQ(estimate_memory(m, c, j, p, opt).worst.total, estimate_memory(m, c, j8, p, opt).worst.total);
}

// TE modules called without is_first_microbatch (llm-foundry) keep the dgrad copy of each
// weight with every micro-batch in flight: under 1F1B on the first of 4 stages, 4 sets.
TEST(Fp8Recipes, PerMicrobatchWeightCopiesScaleWithInflightMicrobatches) {
  const ModelSpec m = *registry().model("llama2-7b");
  const ClusterSpec c = *registry().cluster_for_gpu("h100-sxm");
  MemoryOptions opt;
  opt.fp8_weight_copies = Fp8WeightCopies::per_microbatch;
  TrainingJob j;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 2;
  p.pp = 4;
  TrainingJob j8 = j;
  j8.fp8 = Fp8Recipe::tensorwise;
  const int a = static_cast<int>(MemoryItem::activations);
  const double extra = estimate_memory(m, c, j8, p, opt).first.item_peak[a] - estimate_memory(m, c, j, p, opt).first.item_peak[a];
  const double h = 4096, f = 11008;
  const double stage_params = 8 * (4 * h * h + 3 * h * f + 2 * h);  // 32 layers / 4 stages
  EXPECT_NEAR(extra, 4 * stage_params * 1.0, 1e-9 * extra);  // 4 in flight x 1 B (the column-wise copy)
}

TEST(Fp8Recipes, JobJsonNamesTheRecipeAndReadsTheOldFlag) {
  nlohmann::json j = {{"mode", "pretrain"}, {"seq_len", 2048}, {"global_batch", 64}, {"precision", "bf16"}, {"fp8", "mxfp8"}};
  Result<TrainingJob> t = job_from_json(j, "plan.json");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->fp8, Fp8Recipe::mxfp8);
  EXPECT_EQ(to_json(*t)["fp8"], "mxfp8");
  j.erase("fp8");
  j["fp8_linear"] = true;  // plan files written before the recipes
  EXPECT_EQ(job_from_json(j, "plan.json")->fp8, Fp8Recipe::tensorwise);
  j.erase("fp8_linear");
  j["fp8"] = "e4m3";
  const Status bad = job_from_json(j, "plan.json").status();
  EXPECT_EQ(bad.kind(), ErrorKind::bad_input);
  EXPECT_NE(bad.message().find("job.fp8"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("mxfp8"), std::string::npos) << bad.message();
}

// Without --stack a plan must fit under every stack's conventions; for an FP8 job those
// include Transformer Engine's weight cache (Megatron) and its per-micro-batch copies
// (llm-foundry), which set no byte for a 16-bit job and are then dropped as duplicates.
TEST(Fp8Recipes, UnknownStackEnvelopeKeepsTheFp8ConventionsOfAnFp8Job) {
  TrainingJob j;
  auto names = [&](const TrainingJob& job) {
    std::set<std::string> out;
    for (const MemoryConvention& c : distinct_memory_conventions(registry().stacks(), MemoryOptions{}, job)) out.insert(c.stack);
    return out;
  };
  EXPECT_EQ(names(j).count("llm-foundry"), 0u);
  j.fp8 = Fp8Recipe::tensorwise;
  const std::set<std::string> fp8 = names(j);
  EXPECT_EQ(fp8.count("llm-foundry"), 1u);
  EXPECT_EQ(fp8.count("megatron-core") + fp8.count("megatron-lm"), 1u);
}

}  // namespace
}  // namespace llmplan
