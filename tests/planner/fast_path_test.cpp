// The sweep's fast path against the plain path: time and memory inputs computed once per
// plan shape, middle pipeline stages skipped when they cannot be the worst, the peak-only
// memory result. Every comparison is exact (EXPECT_EQ on doubles): the fast path must
// give the same bits, not merely close numbers.
#include <gtest/gtest.h>

#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/io/presets.h"
#include "planner/search/sweep.h"
#include "planner/cost/time_model.h"

namespace llmplan {
namespace {

PresetRegistry presets() { return std::move(PresetRegistry::load(LLMPLAN_SOURCE_ROOT)).value(); }

void expect_same(const StepTime& a, const StepTime& b) {
  EXPECT_EQ(a.compute, b.compute);
  EXPECT_EQ(a.recompute, b.recompute);
  EXPECT_EQ(a.tp_comm, b.tp_comm);
  EXPECT_EQ(a.pp_comm, b.pp_comm);
  EXPECT_EQ(a.dp_comm, b.dp_comm);
  EXPECT_EQ(a.cp_comm, b.cp_comm);
  EXPECT_EQ(a.ep_comm, b.ep_comm);
  EXPECT_EQ(a.offload, b.offload);
  EXPECT_EQ(a.bubble, b.bubble);
  EXPECT_EQ(a.optimizer, b.optimizer);
  EXPECT_EQ(a.total, b.total);
  EXPECT_EQ(a.tokens_per_s, b.tokens_per_s);
  EXPECT_EQ(a.model_flops, b.model_flops);
  EXPECT_EQ(a.hardware_flops, b.hardware_flops);
  EXPECT_EQ(a.mfu, b.mfu);
  EXPECT_EQ(a.hfu, b.hfu);
}

void expect_same(const StageMemory& a, const StageMemory& b) {
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.inflight_microbatches, b.inflight_microbatches);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.phase_total, b.phase_total);
  EXPECT_EQ(a.phase_bytes, b.phase_bytes);
  EXPECT_EQ(a.item_peak, b.item_peak);
  EXPECT_EQ(a.peak_phase, b.peak_phase);
  EXPECT_EQ(a.total, b.total);
  EXPECT_EQ(a.allocator_peak, b.allocator_peak);
}

TEST(PlanCheck, FirstLayerOfStageIsTheSumOfTheStagesBefore) {
  for (int layers = 1; layers <= 130; ++layers)
    for (int pp = 1; pp <= layers; ++pp) {
      int first = 0;
      for (int s = 0; s < pp; ++s) {
        ASSERT_EQ(first_layer_of_stage(layers, pp, s), first) << layers << " layers, pp " << pp << ", stage " << s;
        first += layers_in_stage(layers, pp, s);
      }
      ASSERT_EQ(first, layers);
    }
}

// Plans that exercise the stage skipping: uneven layers, frozen layers (fully frozen,
// partly frozen and trainable stages), few and many micro-batches (saturated and falling
// in-flight counts), GPipe, 1F1B, interleaved and split-backward schedules, every recompute policy, every
// ZeRO stage (ZeRO-2/3: a unit's full gradient in backward; ZeRO-3: the gathered pool),
// full fine-tuning and LoRA (whose unit gradient is the adapters'; no ZeRO-3).
struct Case {
  const char* model;
  int frozen_layers;
  int64_t global_batch;
  int pp, vpp, dp, micro_batch;
  Schedule schedule;
};

TEST(MemoryModel, SkippedStagesNeverChangeTheReport) {
  const PresetRegistry reg = presets();
  const ClusterSpec c = *reg.cluster_for_gpu("a100-80g");
  const Case cases[] = {
      {"gpt3-175b", 0, 1536, 16, 1, 8, 1, Schedule::one_f_one_b},  // 6 layers a stage, 192 micro-batches
      {"gpt3-175b", 0, 1536, 64, 1, 2, 1, Schedule::one_f_one_b},  // uneven: 1 or 2 layers a stage
      {"gpt3-175b", 0, 64, 32, 1, 8, 1, Schedule::one_f_one_b},    // 8 micro-batches: in-flight saturates
      {"gpt3-175b", 40, 1536, 12, 2, 4, 1, Schedule::interleaved},
      {"gpt3-175b", 20, 512, 24, 1, 4, 2, Schedule::gpipe},
      {"llama2-7b", 5, 256, 7, 1, 2, 1, Schedule::one_f_one_b},    // 32 layers on 7 stages
      {"llama2-7b", 13, 64, 5, 1, 4, 1, Schedule::one_f_one_b},
      {"llama2-70b", 0, 1280, 10, 2, 8, 1, Schedule::interleaved},
      // Split backward (every stage costed: pending W's grow with the stage).
      {"llama2-7b", 0, 256, 4, 1, 2, 1, Schedule::zb_h1},
      {"llama2-7b", 9, 256, 4, 2, 2, 1, Schedule::zbv},
      {"gpt3-175b", 0, 1536, 8, 2, 8, 1, Schedule::dualpipev},
  };
  int checked = 0;
  for (const Case& k : cases)
    for (bool lora : {false, true}) {
      const ModelSpec m = *reg.model(k.model);
      TrainingJob j;
      j.mode = lora ? TrainMode::lora : k.frozen_layers > 0 ? TrainMode::finetune : TrainMode::pretrain;
      j.frozen_layers = k.frozen_layers;
      j.global_batch = k.global_batch;
      for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full, Recompute::full_k})
        for (int zero : {0, 1, 2, 3}) {
          if (lora && zero == 3) continue;  // rejected (lora_zero3)
          ParallelPlan p;
          p.pp = k.pp;
          p.vpp = k.vpp;
          p.dp = k.dp;
          p.micro_batch = k.micro_batch;
          p.schedule = k.schedule;
          p.recompute = rc;
          p.recompute_layers = 1;
          p.flash_attention = rc != Recompute::selective;
          p.zero = zero;
          ASSERT_EQ(check_plan(m, c, j, p, p.world_size(), true), RejectReason::none) << k.model << " pp " << k.pp;
          const MemoryReport r = estimate_memory(m, c, j, p);
          // Brute force: every stage, the worst kept on ties by the earliest.
          StageMemory worst = estimate_stage_memory(m, c, j, p, 0);
          expect_same(r.first, worst);
          for (int s = 1; s < p.pp; ++s) {
            const StageMemory sm = estimate_stage_memory(m, c, j, p, s);
            if (sm.total > worst.total) worst = sm;
            if (s == p.pp - 1) expect_same(r.last, sm);
          }
          expect_same(r.worst, worst);
          const MemoryPeak peak = estimate_memory_peak(m, c, j, p, memory_inputs(m, c.gpu, j, p));
          EXPECT_EQ(peak.total, worst.total);
          EXPECT_EQ(peak.stage, worst.stage);
          EXPECT_EQ(peak.phase, worst.peak_phase);
          EXPECT_EQ(peak.capacity, r.capacity);
          ++checked;
        }
    }
  EXPECT_EQ(checked, 11 * 4 * (4 + 3));
}

// Inputs computed for one plan serve every plan that differs in ZeRO stage, offload,
// recompute and virtual stages, with the same bits as computing them afresh.
TEST(FastPath, InputsOfOneShapeServeTheInnerChoices) {
  const PresetRegistry reg = presets();
  const ClusterSpec c = *reg.cluster_for_gpu("a100-80g");
  struct Shape {
    const char* model;
    TrainMode mode;
    int frozen_layers;
    int tp, pp, cp, dp, ep, micro_batch;
    bool sp;
  };
  const Shape shapes[] = {
      {"llama2-7b", TrainMode::pretrain, 0, 2, 4, 1, 2, 1, 2, true},
      {"gpt3-175b", TrainMode::finetune, 30, 8, 8, 1, 4, 1, 1, false},
      {"mixtral-8x7b", TrainMode::lora, 0, 2, 4, 1, 8, 4, 1, true},
      {"mixtral-8x7b", TrainMode::finetune, 8, 1, 1, 2, 8, 8, 1, false},
  };
  int checked = 0;
  for (const Shape& k : shapes) {
    const ModelSpec m = *reg.model(k.model);
    TrainingJob j;
    j.mode = k.mode;
    j.frozen_layers = k.frozen_layers;
    j.seq_len = k.cp > 1 ? 8192 : 2048;
    j.global_batch = 256;
    ParallelPlan p0;
    p0.tp = k.tp;
    p0.pp = k.pp;
    p0.cp = k.cp;
    p0.dp = k.dp;
    p0.ep = k.ep;
    p0.sp = k.sp;
    p0.micro_batch = k.micro_batch;
    p0.zero = 1;
    ASSERT_EQ(check_plan(m, c, j, p0, p0.world_size(), true), RejectReason::none) << k.model;
    const StepTimeInputs time_in = step_time_inputs(m, c, j, p0);
    const MemoryInputs memory_in = memory_inputs(m, c.gpu, j, p0);
    for (int vpp : {1, 2})
      for (Recompute rc : {Recompute::none, Recompute::full, Recompute::full_k})
        for (int zero : {0, 1, 2, 3})
          for (bool off : {false, true}) {
            ParallelPlan p = p0;
            p.vpp = vpp;
            p.schedule = vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
            p.recompute = rc;
            p.recompute_layers = 1;
            p.zero = zero;
            p.offload_optimizer = off;
            if (check_plan(m, c, j, p, p.world_size(), true) != RejectReason::none) continue;
            expect_same(estimate_time(m, c, j, p, time_in), estimate_time(m, c, j, p));
            const MemoryReport fresh = estimate_memory(m, c, j, p);
            const MemoryReport cached = estimate_memory(m, c, j, p, memory_in);
            expect_same(cached.worst, fresh.worst);
            expect_same(cached.first, fresh.first);
            expect_same(cached.last, fresh.last);
            ++checked;
          }
  }
  EXPECT_GT(checked, 40);
}

// The sweep's numbers equal estimate_time and estimate_memory called plan by plan.
TEST(FastPath, SweepMatchesThePlainModelsPlanByPlan) {
  const PresetRegistry reg = presets();
  struct Job {
    const char* model;
    int gpus;
    TrainMode mode;
    int frozen_layers;
  };
  for (const Job& k : {Job{"llama2-7b", 8, TrainMode::pretrain, 0}, Job{"mixtral-8x7b", 16, TrainMode::lora, 0},
                       Job{"gpt3-13b", 32, TrainMode::finetune, 10}}) {
    const ModelSpec m = *reg.model(k.model);
    ClusterSpec c = *reg.cluster_for_gpu("a100-80g");
    c.nodes = (k.gpus + c.gpus_per_node - 1) / c.gpus_per_node;
    TrainingJob j;
    j.mode = k.mode;
    j.frozen_layers = k.frozen_layers;
    j.global_batch = 256;
    SweepOptions opt;
    opt.keep_all = true;
    opt.threads = 2;
    const SweepResult r = run_sweep(m, c, j, k.gpus, SweepSpace{}, opt);
    int64_t costed = 0;
    for (const PlanResult& x : r.all) {
      if (x.reason != RejectReason::none && x.reason != RejectReason::does_not_fit && x.reason != RejectReason::host_does_not_fit) continue;
      const TrainingJob jx = job_for(j, x);
      const MemoryReport mem = estimate_memory(m, c, jx, x.plan, opt.memory);
      const StepTime st = estimate_time(m, c, jx, x.plan, opt.efficiency);
      ASSERT_EQ(x.peak_bytes, mem.worst.total) << k.model;
      ASSERT_EQ(x.peak_stage, mem.worst.stage);
      ASSERT_EQ(x.peak_phase, mem.worst.peak_phase);
      ASSERT_EQ(x.step_time_s, st.total);
      ASSERT_EQ(x.tokens_per_s, st.tokens_per_s);
      ASSERT_EQ(x.mfu, st.mfu);
      ASSERT_EQ(x.reason == RejectReason::none, mem.fits(opt.headroom_bytes));
      costed += x.plan.recompute != Recompute::full_k;  // the searched first-k variants are not counted (sweep.h)
    }
    EXPECT_EQ(costed, r.evaluated) << k.model;
    EXPECT_GT(costed, 100) << k.model;
  }
}

}  // namespace
}  // namespace llmplan
