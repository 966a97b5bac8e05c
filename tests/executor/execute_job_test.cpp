// execute_job (executor/execute_job.h), the orchestration `llmplan execute` and the GUI
// share: the run lands in the profile store with its steps and outcome (ok, or oom against
// a memory limit), and impossible requests are bad input naming what to change.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <string>

#include "executor/execute_job.h"
#include "profiles/profile_store.h"
#include "tiny_plans.h"

namespace llmplan::exec {
namespace {

std::string temp_db(const std::string& name) {
  const std::string p = ::testing::TempDir() + "/llmplan_execute_job_" + std::to_string(::getpid()) + "_" + name + ".db";
  std::remove(p.c_str());
  return p;
}

ExecuteRequest request(const std::string& db) {
  ExecuteRequest req;
  req.plan_path = "tiny.json";
  req.db = db;
  req.options.steps = 2;
  req.options.warmup = 1;
  return req;
}

TEST(ExecuteJob, RecordsTheRunWithItsStepsAndOutcome) {
  const PlanFile f = testing::tiny_plan(Family::gpt, Precision::fp32, Recompute::none, true);
  ExecuteRequest req = request(temp_db("ok"));
  int steps_seen = 0;
  std::string started;
  req.options.on_step = [&](int, int, bool, double, double, double) { ++steps_seen; };
  req.on_start = [&](const std::string& line) { started = line; };
  Result<ExecuteResult> r = execute_job(f, req);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_TRUE(r->leader);
  EXPECT_FALSE(r->report.oom);
  EXPECT_EQ(steps_seen, 3);
  EXPECT_NE(started.find("executing tiny.json on cpu: 1 warm-up + 2 steps"), std::string::npos) << started;
  Result<ProfileStore> store = ProfileStore::open(req.db);
  ASSERT_TRUE(store) << store.status().message();
  Result<RunRecord> run = store->get_run(r->run_id);
  ASSERT_TRUE(run) << run.status().message();
  EXPECT_EQ(run->status, RunStatus::ok);
  EXPECT_EQ(run->steps_planned, 3);
  Result<std::vector<StepRecord>> steps = store->get_steps(r->run_id);
  ASSERT_TRUE(steps);
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_DOUBLE_EQ((*steps)[2].loss, r->report.steps[2].loss);
  EXPECT_EQ(run->peak_bytes, r->report.memory.peak_total);
}

TEST(ExecuteJob, OutOfMemoryIsAResultRecordedAsOom) {
  const PlanFile f = testing::tiny_plan(Family::llama, Precision::fp32, Recompute::none, true);
  ExecuteRequest req = request(temp_db("oom"));
  req.options.memory_limit = 64 * 1024;  // far below the tiny model's weights and moments
  Result<ExecuteResult> r = execute_job(f, req);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_TRUE(r->report.oom);
  Result<ProfileStore> store = ProfileStore::open(req.db);
  ASSERT_TRUE(store);
  Result<RunRecord> run = store->get_run(r->run_id);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->status, RunStatus::oom);
}

TEST(ExecuteJob, ADivergingRunStopsAndIsRecordedAsFailed) {
  const PlanFile f = testing::tiny_plan(Family::gpt, Precision::fp32, Recompute::none, true);
  ExecuteRequest req = request(temp_db("diverge"));
  req.options.steps = 30;
  req.options.trainer.lr = 1e38;  // AdamW moves each weight by ~lr a step: fp32 overflows to inf within a few
  Result<ExecuteResult> r = execute_job(f, req);
  ASSERT_FALSE(r) << "the run did not diverge";
  EXPECT_EQ(r.status().kind(), ErrorKind::runtime);
  EXPECT_NE(r.status().message().find("training diverged"), std::string::npos) << r.status().message();
  Result<ProfileStore> store = ProfileStore::open(req.db);
  ASSERT_TRUE(store);
  Result<std::vector<RunSummary>> runs = store->list_runs();
  ASSERT_TRUE(runs);
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].status, RunStatus::failed);
}

// A zero-bubble schedule with ZeRO-2 (the 7B/8-GPU sweep's best zbv plan has it): the split
// backward cannot run ZeRO-2's gradient hooks, and the message names both ways out.
TEST(ExecuteJob, SplitScheduleWithZero2NamesZero1AndOneFOneB) {
  PlanFile f = testing::tiny_plan(Family::llama, Precision::fp32, Recompute::none, true);
  f.plan.dp = 2;
  f.plan.pp = 2;
  f.plan.zero = 2;
  f.plan.grad_accum = 2;
  f.plan.micro_batch = 4;
  f.job.global_batch = 16;
  f.plan.schedule = Schedule::zb_h1;
  ExecuteRequest req = request(temp_db("zb_zero2"));
  req.proxy_rank = 0;
  Result<ExecuteResult> r = execute_job(f, req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().exit_code(), 2);
  EXPECT_NE(r.status().message().find("plan.zero 1"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("plan.schedule 1f1b"), std::string::npos) << r.status().message();
}

TEST(ExecuteJob, ImpossibleRequestsNameWhatToChange) {
  PlanFile two = testing::tiny_plan(Family::gpt, Precision::fp32, Recompute::none, true);
  two.plan.dp = 2;
  two.plan.grad_accum = 1;
  ExecuteRequest req = request(temp_db("bad"));
  req.proxy_rank = 2;
  Result<ExecuteResult> r = execute_job(two, req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().kind(), ErrorKind::bad_input);
  EXPECT_NE(r.status().message().find("--proxy-rank 2: the plan has ranks 0..1"), std::string::npos) << r.status().message();

  req.proxy_rank = -1;  // two ranks, no MPI launcher: the mpirun line to use
  r = execute_job(two, req);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("mpirun"), std::string::npos) << r.status().message();

  const PlanFile one = testing::tiny_plan(Family::gpt, Precision::fp32, Recompute::none, true);
  req.options.data = "/dev/zero";  // would read until memory runs out
  r = execute_job(one, req);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("/dev/zero: not a regular file"), std::string::npos) << r.status().message();

  req.options.data.clear();
  req.options.trainer.lr = std::numeric_limits<double>::quiet_NaN();  // would record a NaN loss as an ok run
  r = execute_job(one, req);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("--lr: expected a positive finite learning rate"), std::string::npos) << r.status().message();
  req.options.trainer.lr = 1e-3;
  req.options.layers = one.model.layers + 1000000;  // would allocate a million layers before saying no
  r = execute_job(one, req);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("--layers: expected 1.." + std::to_string(one.model.layers)), std::string::npos)
      << r.status().message();
  req.options.layers = 0;
  req.watchdog_s = -1;
  r = execute_job(one, req);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("--watchdog: expected a positive number of seconds"), std::string::npos) << r.status().message();
  req.watchdog_s = 300;
  req.options.backend = "tpu";
  r = execute_job(one, req);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("--backend: expected cpu or cuda, got 'tpu'"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace llmplan::exec
