// Training frameworks as data (planner/cost/framework.h, data/frameworks/): the rules'
// semantics on hand-built files, the shipped files, and the sweep and explain restricted
// to a framework, checked plan by plan against the rules evaluated independently.
#include "planner/cost/framework.h"

#include <tuple>

#include <gtest/gtest.h>

#include "planner/search/explain.h"
#include "planner/search/sweep.h"
#include "tests/model_fixtures.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

using nlohmann::json;
using testing::shipped_presets;

FrameworkSpec framework_of(const json& rules) {
  json j = {{"name", "fw"}, {"description", "d"}, {"version", "v1"}, {"source", "s"}, {"refuses", rules}};
  Result<FrameworkSpec> fw = framework_from_json(j, "fw.json");
  EXPECT_TRUE(fw) << fw.status().message();
  return fw ? *fw : FrameworkSpec{};
}

TEST(Framework, ConditionsAreRangesListsAndValuesAndAllMustHold) {
  const FrameworkSpec fw = framework_of(json::array({
      {{"id", "z23_pp"}, {"when", {{"zero", {{"min", 2}}}, {"pp", {{"min", 2}}}}}, {"why", "w1"}, {"source", "s1"}},
      {{"id", "peft"}, {"when", {{"mode", {{"in", {"lora", "qlora"}}}}}}, {"why", "w2"}, {"source", "s2"}},
      {{"id", "tp_no_sp"}, {"when", {{"tp", {{"min", 2}, {"max", 8}}}, {"sp", false}}}, {"why", "w3"}, {"source", "s3"}},
      {{"id", "gpipe"}, {"when", {{"schedule", "gpipe"}}}, {"why", "w4"}, {"source", "s4"}},
  }));
  ASSERT_EQ(fw.rules.size(), 4u);
  const ModelSpec m = *shipped_presets().model("llama2-7b");
  TrainingJob j;
  ParallelPlan p;
  EXPECT_EQ(framework_refusal(fw, m, j, p), -1);
  p.zero = 3;
  EXPECT_EQ(framework_refusal(fw, m, j, p), -1);  // pp 1: one condition of two
  p.pp = 2;
  EXPECT_EQ(framework_refusal(fw, m, j, p), 0);
  p.zero = 1;
  EXPECT_EQ(framework_refusal(fw, m, j, p), -1);
  set_job_mode(JobMode::qlora, &j);
  EXPECT_EQ(framework_refusal(fw, m, j, p), 1);
  set_job_mode(JobMode::finetune, &j);
  p.tp = 4;
  EXPECT_EQ(framework_refusal(fw, m, j, p), 2);
  p.sp = true;
  EXPECT_EQ(framework_refusal(fw, m, j, p), -1);
  p.tp = 16, p.sp = false;  // above max
  EXPECT_EQ(framework_refusal(fw, m, j, p), -1);
  p.schedule = Schedule::gpipe;
  EXPECT_EQ(framework_refusal(fw, m, j, p), 3);
  const std::string text = framework_refusal_text(fw, m, j, p);
  EXPECT_NE(text.find("fw refuses this plan: w4 (rule gpipe; s4)"), std::string::npos) << text;
  EXPECT_EQ(frameworks_running({fw, framework_of(json::array())}, m, j, p), 2u);
}

TEST(Framework, BadFilesNameTheField) {
  auto message = [](const json& rules) {
    json j = {{"name", "fw"}, {"description", "d"}, {"version", "v1"}, {"source", "s"}, {"refuses", rules}};
    Result<FrameworkSpec> fw = framework_from_json(j, "fw.json");
    return fw ? std::string("ok") : fw.status().message();
  };
  auto rule = [](const json& when) { return json::array({{{"id", "r"}, {"when", when}, {"why", "w"}, {"source", "s"}}}); };
  EXPECT_NE(message(rule({{"zer0", 1}})).find("field 'refuses[0].when.zer0': unknown plan field"), std::string::npos);
  EXPECT_NE(message(rule({{"recompute", "partial"}})).find("expected one of none, selective, full, full_k"), std::string::npos);
  EXPECT_NE(message(rule({{"sp", 1}})).find("expected true or false"), std::string::npos);
  EXPECT_NE(message(rule({{"zero", {{"min", 3}, {"max", 1}}}})).find("min above max"), std::string::npos);
  EXPECT_NE(message(rule({{"recompute", {{"min", 1}}}})).find("no bound on an enumeration"), std::string::npos);
  EXPECT_NE(message(rule(json::object())).find("refuses[0].when"), std::string::npos);
  EXPECT_NE(message(rule({{"zero", {{"atleast", 2}}}})).find("unknown key (expected min, max or in)"), std::string::npos);
  json two = rule({{"zero", 3}});
  two.push_back(two[0]);
  EXPECT_NE(message(two).find("'r' is used by another rule"), std::string::npos);
  EXPECT_NE(message(json::array({{{"id", "r"}, {"when", {{"zero", 3}}}, {"why", "w"}}})).find("source"), std::string::npos);
  // extends: the base must be given and the lifted rules must be its own.
  const FrameworkSpec base = framework_of(rule({{"zero", 3}}));
  json child = {{"name", "child"}, {"description", "d"}, {"version", "v"}, {"source", "s"}, {"extends", "fw"}, {"lifts", {"nope"}}};
  Result<FrameworkSpec> c = framework_from_json(child, "child.json", &base);
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("'nope' is not a rule of fw"), std::string::npos);
  child["lifts"] = {"r"};
  c = framework_from_json(child, "child.json", &base);
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_TRUE(c->rules.empty());
  EXPECT_FALSE(framework_from_json(child, "child.json", nullptr));
}

// The shipped files: every rule sourced, NeMo = Megatron-LM less PEFT and activation offload
// plus its own, names and aliases resolve, each names an existing stack.
TEST(Framework, ShippedFilesLoadWithSourcesAndResolve) {
  const PresetRegistry& reg = shipped_presets();
  const std::vector<std::string> ids = reg.framework_ids();
  EXPECT_EQ(ids, (std::vector<std::string>{"deepspeed", "megatron", "mindformers", "nemo", "torchtitan"}));
  for (const FrameworkSpec& fw : reg.frameworks()) {
    EXPECT_FALSE(fw.version.empty()) << fw.name;
    for (const FrameworkRule& r : fw.rules) {
      EXPECT_FALSE(r.why.empty()) << fw.name << " " << r.id;
      EXPECT_FALSE(r.source.empty()) << fw.name << " " << r.id;
    }
    if (!fw.stack.empty()) {
      EXPECT_TRUE(reg.stack(fw.stack)) << fw.name << " names stack " << fw.stack;
    }
  }
  EXPECT_EQ(reg.framework("megatron-lm")->name, "megatron");
  EXPECT_EQ(reg.framework("megatron-bridge")->name, "nemo");
  EXPECT_FALSE(reg.framework("megatorn"));
  const FrameworkSpec meg = *reg.framework("megatron"), nemo = *reg.framework("nemo");
  const ModelSpec m = *reg.model("llama3-8b");
  TrainingJob lora;
  set_job_mode(JobMode::lora, &lora);
  ParallelPlan p;
  EXPECT_GE(framework_refusal(meg, m, lora, p), 0);
  EXPECT_EQ(framework_refusal(nemo, m, lora, p), -1);
  set_job_mode(JobMode::qlora, &lora);
  EXPECT_GE(framework_refusal(nemo, m, lora, p), 0);
  // bf16 moments (the precision-aware optimizer): Megatron runs them with the distributed
  // optimizer only; the other frameworks' files (and exports) keep fp32 moments.
  TrainingJob bf16_moments;
  bf16_moments.moments = MomentsDtype::bf16;
  p.dp = 8, p.zero = 1;
  EXPECT_EQ(framework_refusal(meg, m, bf16_moments, p), -1);
  for (const char* other : {"nemo", "deepspeed", "torchtitan", "mindformers"})
    EXPECT_GE(framework_refusal(*reg.framework(other), m, bf16_moments, p), 0) << other;
  p.zero = 0;
  EXPECT_GE(framework_refusal(meg, m, bf16_moments, p), 0);
  EXPECT_EQ(framework_refusal(meg, m, TrainingJob{}, p), -1);
}

// Llama 2 70B at 4k on 64 H100s, global batch 512: the job the sweep tests run.
std::tuple<ModelSpec, ClusterSpec, TrainingJob> llama2_70b_on_64_h100() {
  const PresetRegistry& reg = shipped_presets();
  TrainingJob j;
  j.seq_len = 4096;
  j.global_batch = 512;
  return {*reg.model("llama2-70b"), cluster_with_gpus(*reg.cluster_for_gpu("h100-sxm"), 64), j};
}

// The checks: with --framework deepspeed no plan of ZeRO-2/3 with pp > 1 comes back,
// with megatron no ZeRO-3 with pp > 1; every plan the sweep refused is one a rule refuses
// and every plan it kept is one none refuses (the rules evaluated here, independently of the
// sweep's loop), and the per-rule counts add up.
TEST(Framework, SweepKeepsExactlyThePlansTheFrameworkRuns) {
  const PresetRegistry& reg = shipped_presets();
  const auto [m, c, j] = llama2_70b_on_64_h100();
  for (const char* name : {"deepspeed", "megatron", "torchtitan"}) {
    SCOPED_TRACE(name);
    const FrameworkSpec fw = *reg.framework(name);
    SweepOptions opt;
    opt.threads = 2;
    opt.keep_all = true;
    opt.framework = &fw;
    opt.mark_frameworks = reg.frameworks();
    const SweepResult r = run_sweep(m, c, j, 64, SweepSpace{}, opt);
    ASSERT_FALSE(r.top.empty());
    int64_t refused = 0, kept = 0;
    for (const PlanResult& x : r.all) {
      if (x.reason == RejectReason::framework_refuses) {
        EXPECT_GE(framework_refusal(fw, m, job_for(j, x), x.plan), 0);
        ++refused;
      } else if (x.reason == RejectReason::none || x.reason == RejectReason::does_not_fit) {
        EXPECT_EQ(framework_refusal(fw, m, job_for(j, x), x.plan), -1);
        ++kept;
      }
    }
    EXPECT_GT(refused, 0);
    EXPECT_GT(kept, 0);
    EXPECT_EQ(refused, r.rejected[static_cast<int>(RejectReason::framework_refuses)]);
    int64_t by_rule = 0;
    for (int64_t n : r.framework_rejected) by_rule += n;
    EXPECT_EQ(by_rule, refused);
    for (const PlanResult& x : r.top) {
      const std::string n = name;
      if (n == "deepspeed") {
        EXPECT_FALSE(x.plan.zero >= 2 && x.plan.pp > 1);
      } else if (n == "megatron") {
        EXPECT_FALSE(x.plan.zero == 3 && x.plan.pp > 1);
      } else {
        EXPECT_TRUE(x.plan.zero == 0 || x.plan.zero == 3);
      }
      // The marks agree with the rules for every framework.
      for (size_t k = 0; k < opt.mark_frameworks.size(); ++k)
        EXPECT_EQ((x.frameworks >> k & 1u) != 0, framework_refusal(opt.mark_frameworks[k], m, job_for(j, x), x.plan) < 0);
    }
  }
}

// Without --framework the sweep ranks everything and marks each plan; its best plan here
// (ZeRO-2 with a pipeline) is one DeepSpeed cannot run, and the DeepSpeed sweep's best is
// slower or equal.
TEST(Framework, UnrestrictedSweepMarksPlansAndRestrictionCostsThroughput) {
  const PresetRegistry& reg = shipped_presets();
  const auto [m, c, j] = llama2_70b_on_64_h100();
  SweepOptions opt;
  opt.threads = 2;
  opt.mark_frameworks = reg.frameworks();
  const SweepResult all = run_sweep(m, c, j, 64, SweepSpace{}, opt);
  const FrameworkSpec ds = *reg.framework("deepspeed");
  opt.framework = &ds;
  const SweepResult only = run_sweep(m, c, j, 64, SweepSpace{}, opt);
  ASSERT_FALSE(all.top.empty());
  ASSERT_FALSE(only.top.empty());
  EXPECT_GE(all.top.front().tokens_per_s, only.top.front().tokens_per_s);
  EXPECT_EQ(all.rejected[static_cast<int>(RejectReason::framework_refuses)], 0);
  bool any_mark = false;
  for (const PlanResult& x : all.top) any_mark |= x.frameworks != 0;
  EXPECT_TRUE(any_mark);
}

// explain with a framework names the refusal and proposes only changes the framework runs.
TEST(Framework, ExplainNamesTheRuleAndOffersOnlyRunnableChanges) {
  const PresetRegistry& reg = shipped_presets();
  const auto [m, c, j] = llama2_70b_on_64_h100();
  ParallelPlan p;
  p.dp = 16, p.tp = 2, p.pp = 2, p.sp = true, p.micro_batch = 2, p.zero = 2;
  p.grad_accum = static_cast<int>(j.global_batch / (p.micro_batch * p.dp));
  ASSERT_EQ(check_plan(m, c, j, p, 64), RejectReason::none);
  const FrameworkSpec ds = *reg.framework("deepspeed");
  const Explanation any = explain_plan(m, c, j, p, 64, 0);
  const Explanation e = explain_plan(m, c, j, p, 64, 0, {}, {}, &ds);
  EXPECT_TRUE(any.framework_refusal.empty());
  EXPECT_NE(e.framework_refusal.find("pipeline_zero23"), std::string::npos) << e.framework_refusal;
  bool dropped = false;
  for (const PlanChange& ch : any.changes) dropped |= framework_refusal(ds, m, ch.job, ch.plan) >= 0;
  EXPECT_TRUE(dropped);  // the unrestricted explanation offers a change DeepSpeed refuses (ZeRO-3)
  for (const PlanChange& ch : e.changes) EXPECT_EQ(framework_refusal(ds, m, ch.job, ch.plan), -1) << ch.description;
}

// DeepSpeed's activation_checkpointing.cpu_checkpointing moves every checkpoint to the host
// or none (deepspeed/runtime/activation_checkpointing/checkpointing.py v0.16.4): the plan's
// activation offload of every layer of each stage under full recompute, nothing less.
TEST(Framework, DeepSpeedOffloadsEveryCheckpointOrNone) {
  const FrameworkSpec ds = *shipped_presets().framework("deepspeed");
  const ModelSpec m = testing::gpt3_1_3b();  // 24 layers
  TrainingJob j;
  j.seq_len = 2048;
  j.global_batch = 64;
  ParallelPlan p;
  p.dp = 8, p.zero = 3, p.recompute = Recompute::full;
  auto refusal = [&](const ParallelPlan& q) {
    const int r = framework_refusal(ds, m, j, q);
    return r < 0 ? std::string() : ds.rules[static_cast<size_t>(r)].id;
  };
  p.activation_offload_layers = 24;
  EXPECT_EQ(refusal(p), "");
  p.activation_offload_layers = 23;
  EXPECT_EQ(refusal(p), "no_first_k_activation_offload");
  p.activation_offload_layers = 24, p.recompute = Recompute::selective;
  EXPECT_EQ(refusal(p), "activation_offload_needs_full_recompute");
  // Under PP every stage's layers: 12 on each of two stages.
  p.dp = 4, p.pp = 2, p.zero = 1, p.recompute = Recompute::full, p.activation_offload_layers = 12;
  EXPECT_EQ(refusal(p), "");
  p.activation_offload_layers = 11;
  EXPECT_EQ(refusal(p), "no_first_k_activation_offload");
}

}  // namespace
}  // namespace llmplan
