// Many processes on one file, and a writer killed in the middle of a transaction.
// Children are fork()ed from the test, open their own ProfileStore (a SQLite connection
// must not cross a fork), report through their exit status, and leave with _exit so they
// run none of the parent's gtest or static teardown.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "profile_test_util.h"
#include "profiles/profile_store.h"

namespace llmplan {
namespace {

using testing_util::query_int;
using testing_util::query_text;
using testing_util::sample_run;

constexpr int kWriters = 4;
constexpr int kRunsPerWriter = 100;
constexpr int kStepsPerRun = 3;

// One writer: waits on `start_gate` so all writers begin (and initialise the new file)
// together, then writes its runs, alternating the one-transaction and incremental paths.
// Returns the exit status: 0 on success, else which stage failed.
int write_runs(const std::string& path, int writer, int start_gate) {
  char byte;
  if (read(start_gate, &byte, 1) != 0) return 10;  // EOF when the parent closes its end
  Result<ProfileStore> store = ProfileStore::open(path);
  if (!store.ok()) {
    std::fprintf(stderr, "writer %d: %s\n", writer, store.status().message().c_str());
    return 11;
  }
  std::vector<StepRecord> steps;
  for (int s = 0; s < kStepsPerRun; ++s) steps.push_back({s, 5.0 - s, 0.1, 1000.0, 1 << 20});
  for (int i = 0; i < kRunsPerWriter; ++i) {
    RunRecord run = sample_run("writer-" + std::to_string(writer));
    run.status = RunStatus::ok;
    if (i % 2 == 0) {
      if (!store->record_run(run, steps, {{"matmul", "64x64x64", "fp32", 5.2e5, 4.9e4, 1e-6, 1}})
               .ok())
        return 12;
      continue;
    }
    Result<int64_t> id = store->insert_run(run);
    if (!id.ok()) return 13;
    if (!store->add_steps(*id, steps)) return 14;
    if (!store->finish_run(*id, {RunStatus::ok, "", "{}", 1000.0, 0.1, 1 << 20})) return 15;
  }
  return 0;
}

class ConcurrencyTest : public testing_util::TempDirTest {};

TEST_F(ConcurrencyTest, FourProcessesWriteFourHundredRunsWithoutLoss) {
  std::string path = file("shared.db");  // does not exist yet: the writers race to create it
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(gate[1]);
      _exit(write_runs(path, w, gate[0]));
    }
    children.push_back(pid);
  }
  close(gate[0]);
  close(gate[1]);  // opens the gate
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "writer " << pid << " died";
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "writer " << pid << " failed at stage " << WEXITSTATUS(status);
  }

  Result<ProfileStore> store = ProfileStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  Result<std::vector<RunSummary>> runs = store->list_runs();
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  EXPECT_EQ(runs->size(), size_t{kWriters * kRunsPerWriter});
  for (const RunSummary& run : *runs) EXPECT_EQ(run.steps_recorded, kStepsPerRun) << run.id;
  EXPECT_EQ(query_int(path, "SELECT count(DISTINCT id) FROM runs"), kWriters * kRunsPerWriter);
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM steps"),
            kWriters * kRunsPerWriter * kStepsPerRun);
  for (int w = 0; w < kWriters; ++w) {
    std::string model = "'writer-" + std::to_string(w) + "'";
    EXPECT_EQ(query_int(path, "SELECT count(*) FROM runs WHERE model = " + model), kRunsPerWriter);
  }
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM runs WHERE status = 'running'"), 0);
}

class CrashTest : public testing_util::TempDirTest {};

TEST_F(CrashTest, WriterKilledMidTransactionLeavesNoPartialRun) {
  std::string path = file("crash.db");
  {
    Result<ProfileStore> store = ProfileStore::open(path);
    ASSERT_TRUE(store.ok()) << store.status().message();
    ASSERT_TRUE(store->record_run(sample_run(), {{0, 1.0, 0.1, 10.0, 5}}, {}).ok());
  }  // closed before fork: a connection must not cross it

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ProfileStoreOptions options;
    options.before_commit = [](int64_t) { raise(SIGKILL); };  // dies holding the write lock
    Result<ProfileStore> store = ProfileStore::open(path, options);
    if (!store.ok()) _exit(11);
    // Bigger than SQLite's 2 MiB page cache, so uncommitted pages spill into the WAL file.
    RunRecord run = sample_run("killed");
    run.plan_json = "\"" + std::string(4 << 20, 'x') + "\"";
    std::vector<StepRecord> steps(5000);
    for (int s = 0; s < 5000; ++s) steps[s] = {s, 1.0, 0.1, 10.0, 5};
    store->record_run(run, steps, {{"matmul", "8x8x8", "fp32", 1024, 768, 1e-7, 3}});
    _exit(12);  // not reached: the hook kills us
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
  // The uncommitted transaction really reached the disk (the parent's close emptied the
  // WAL, so all of it is the child's); recovery must ignore it.
  EXPECT_GT(std::filesystem::file_size(path + "-wal"), 1u << 20);

  EXPECT_EQ(query_text(path, "PRAGMA integrity_check"), "ok");
  Result<ProfileStore> store = ProfileStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  Result<std::vector<RunSummary>> runs = store->list_runs();
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().model, "gpt2-small");
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM steps"), 1);
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM op_timings"), 0);
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM steps WHERE run_id NOT IN (SELECT id FROM runs)"),
            0);
  // And the file takes writes again: the dead writer's lock is gone.
  EXPECT_TRUE(store->record_run(sample_run("after"), {}, {}).ok());
}

}  // namespace
}  // namespace llmplan
