// decide_launch (executor/launch.h): when `llmplan execute PLAN` typed alone starts the
// plan's ranks itself (mpirun on this machine's GPUs, srun in a Slurm job) and why not
// otherwise; and the helpers that find the launcher and print its command line.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "executor/launch.h"

namespace llmplan::exec {
namespace {

using Args = std::vector<std::string>;

LaunchInputs gpus(int ranks, int devices, Environment env = {}) {
  LaunchInputs in;
  in.ranks = ranks;
  in.backend = "cuda";
  in.cuda_devices = devices;
  in.env = std::move(env);
  in.cores = 64;
  return in;
}

TEST(Launch, EnoughGpusStartTheRanksWithMpirun) {
  const LaunchDecision d = decide_launch(gpus(8, 8));
  EXPECT_EQ(d.launcher, (Args{"mpirun", "-np", "8"})) << d.reason;
  EXPECT_NE(d.reason.find("8 CUDA devices for the plan's 8 ranks"), std::string::npos) << d.reason;
  // More devices than ranks: still one process per rank.
  EXPECT_EQ(decide_launch(gpus(4, 8)).launcher, (Args{"mpirun", "-np", "4"}));
  // As root OpenMPI needs its flag; more ranks than cores, --oversubscribe.
  LaunchInputs in = gpus(8, 8);
  in.root = true;
  in.cores = 4;
  EXPECT_EQ(decide_launch(in).launcher, (Args{"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "8"}));
}

TEST(Launch, ASlurmJobWithTheTasksStartsThemWithSrun) {
  // srun spreads the tasks over the job's nodes: this node's devices do not matter.
  const LaunchDecision d = decide_launch(gpus(16, 0, {{"SLURM_JOB_ID", "4242"}, {"SLURM_NTASKS", "16"}}));
  EXPECT_EQ(d.launcher, (Args{"srun", "--ntasks", "16"})) << d.reason;
  EXPECT_NE(d.reason.find("Slurm job 4242 has 16 tasks"), std::string::npos) << d.reason;
  // Too few tasks: none, and how to get them (mpirun would not find the slots either).
  const LaunchDecision few = decide_launch(gpus(16, 8, {{"SLURM_JOB_ID", "4242"}, {"SLURM_NTASKS", "8"}}));
  EXPECT_TRUE(few.launcher.empty());
  EXPECT_NE(few.reason.find("--ntasks 16"), std::string::npos) << few.reason;
}

TEST(Launch, AProcessALauncherStartedRunsAsItsRank) {
  for (const Environment& env : {Environment{{"OMPI_COMM_WORLD_SIZE", "8"}}, Environment{{"PMI_SIZE", "8"}}, Environment{{"PMIX_RANK", "3"}},
                                 // an srun step: SLURM_NTASKS with SLURM_STEP_ID
                                 Environment{{"SLURM_JOB_ID", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "8"}}}) {
    const LaunchDecision d = decide_launch(gpus(8, 8, env));
    EXPECT_TRUE(d.launcher.empty()) << env.begin()->first;
    EXPECT_NE(d.reason.find("a launcher started this process"), std::string::npos) << d.reason;
  }
}

TEST(Launch, TheCpuBackendRunsTheProxyInstead) {
  LaunchInputs in = gpus(8, 8);
  in.backend = "cpu";
  const LaunchDecision d = decide_launch(in);
  EXPECT_TRUE(d.launcher.empty());
  EXPECT_NE(d.reason.find("the cpu backend runs one rank's share here"), std::string::npos) << d.reason;
  in.env = {{"SLURM_JOB_ID", "1"}, {"SLURM_NTASKS", "8"}};
  EXPECT_TRUE(decide_launch(in).launcher.empty());
}

TEST(Launch, TooFewGpusRunHereAndSaySo) {
  const LaunchDecision d = decide_launch(gpus(8, 1));
  EXPECT_TRUE(d.launcher.empty());
  EXPECT_EQ(d.reason, "this machine has 1 CUDA device for the plan's 8 ranks (one device per rank)");
  EXPECT_TRUE(decide_launch(gpus(8, 0)).launcher.empty());
  // A one-rank plan has nothing to start.
  EXPECT_TRUE(decide_launch(gpus(1, 8)).launcher.empty());
}

TEST(Launch, FindsTheLauncherOnPath) {
  const std::string dir = ::testing::TempDir() + "/llmplan_launch_" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string exe = dir + "/mpirun", plain = dir + "/srun";
  std::ofstream(exe) << "#!/bin/sh\n";
  std::ofstream(plain) << "not executable\n";
  ASSERT_EQ(::chmod(exe.c_str(), 0755), 0);
  EXPECT_EQ(find_on_path("mpirun", "/nonexistent:" + dir + ":/usr/bin"), exe);
  EXPECT_EQ(find_on_path("srun", "/nonexistent:" + dir), "");  // not executable
  EXPECT_EQ(find_on_path("mpirun", "/nonexistent"), "");
  EXPECT_EQ(find_on_path("mpirun", dir), exe);
  std::remove(exe.c_str());
  std::remove(plain.c_str());
  ::rmdir(dir.c_str());
}

TEST(Launch, PrintsTheCommandAsTheShellWouldReadIt) {
  EXPECT_EQ(shell_line({"mpirun", "-np", "8", "/opt/bin/llmplan", "execute", "best.json", "--db", "/tmp/my runs.db", "--data", "it's"}),
            "mpirun -np 8 /opt/bin/llmplan execute best.json --db '/tmp/my runs.db' --data 'it'\\''s'");
}

}  // namespace
}  // namespace llmplan::exec
