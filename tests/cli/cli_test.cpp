// End-to-end checks of the llmplan binary: exit codes and messages for bad input, and
// the files it writes. Each case runs the real executable.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "planner/io/plan_file.h"
#include "planner/spec/spec_json.h"

namespace {

struct CliRun {
  int exit_code;
  std::string output;  // stdout + stderr
};

// Runs a shell command line; its stdout (redirect inside `cmd` for stderr).
CliRun run_shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

CliRun run(const std::string& args) { return run_shell(std::string(LLMPLAN_BINARY_DIR) + "/cli/llmplan " + args + " 2>&1"); }

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "/llmplan_cli_" + name; }

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Each bad input: exit 2, a one-line message naming the flag/file/field, no crash.
struct BadCase {
  const char* args;
  const char* must_mention;
};
// So ctest lists each case by its command line, not as "16-byte object <...>".
void PrintTo(const BadCase& c, std::ostream* os) { *os << '"' << c.args << '"'; }
std::string bad_case_name(const ::testing::TestParamInfo<BadCase>& info) {
  std::string name = std::to_string(info.index) + "_";
  for (const char* ch = info.param.args; *ch != '\0' && name.size() < 48; ++ch)
    name += std::isalnum(static_cast<unsigned char>(*ch)) ? *ch : '_';
  return name;
}

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, ExitsTwoNamingTheField) {
  const CliRun r = run(GetParam().args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(GetParam().must_mention), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("nan"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Cli, BadInput,
    ::testing::Values(BadCase{"memory --model no-such-model", "unknown model preset 'no-such-model'"},
                      BadCase{"memory --model llama2-7b --gpus 0", "--gpus"},
                      // In this build's folder: a fixed /tmp path is shared with every other
                      // checkout's tests, and one whose schema is newer made this case fail.
                      BadCase{"calibrate --db " LLMPLAN_BINARY_DIR "/llmplan-cli-test-calibrate-empty.db --backend cuda", "no finished cuda run"},
                      BadCase{"memory --model llama2-7b --gpus -4", "--gpus"},
                      BadCase{"memory --model llama2-7b --gpus 8 --tp 3", "--tp: expected a divisor of heads"},
                      BadCase{"memory --model llama2-7b --gpus 8 --tp 2 --dp 8", "expected equal"},
                      BadCase{"memory --model llama2-7b --seq 1099511627776", "--seq"},
                      BadCase{"memory --model llama2-7b --seq 0", "--seq"},
                      BadCase{"memory --model llama2-7b --seq 4096 --doc-len 5000", "--doc-len"},
                      BadCase{"sweep --model llama2-7b --gpus 8 --doc-len -1", "--doc-len"},
                      BadCase{"memory --params 1e15", "--params"},
                      BadCase{"memory --params -7B", "--params"},
                      BadCase{"memory --params 7Q", "--params"},
                      BadCase{"memory --model llama2-7b --gpu no-such-gpu", "unknown GPU preset"},
                      BadCase{"memory --model llama2-7b --zero 5", "--zero"},
                      BadCase{"memory --model llama2-7b --recompute sometimes", "--recompute"},
                      BadCase{"memory --model llama2-7b --global-batch 510 --gpus 8", "job.global_batch"},
                      BadCase{"memory --model llama2-7b --headroom 4parsecs", "--headroom"},
                      BadCase{"sweep --params 7B --gpus 0", "--gpus"},
                      BadCase{"sweep --params 7B --objective speed", "--objective"},
                      BadCase{"memory --model /nonexistent/model.json", "/nonexistent/model.json"},
                      BadCase{"memory --bogus-flag", "bogus"},
                      BadCase{"memory --model llama2-7b --stack no-such-stack", "--stack: unknown stack 'no-such-stack'"},
                      BadCase{"memory --model llama2-7b --activation-offload-layers -1", "--activation-offload-layers"},
                      BadCase{"explain /dev/zero", "/dev/zero: not a regular file"},
                      BadCase{"sweeep --gpus 8", "unknown subcommand 'sweeep' (expected one of sweep, simulate"},
                      // Values that were read as "not given" or slipped past a range check (NaN).
                      BadCase{"memory --model llama2-7b --micro-batch -1", "--micro-batch: expected a positive integer, got -1"},
                      BadCase{"memory --model llama2-7b --zero -1", "--zero: expected 0, 1, 2 or 3, got -1"},
                      BadCase{"memory --model llama2-7b --tp -1", "--tp: expected a positive integer, got -1"},
                      BadCase{"memory --model llama2-7b --mode lora --lora-alpha nan", "--lora-alpha: expected a positive number"},
                      BadCase{"memory --model llama2-7b --mode lora --lora-alpha -1", "--lora-alpha: expected a positive number"},
                      BadCase{"memory --model llama2-7b --frozen-fraction nan", "--frozen-fraction: expected 0..1"},
                      BadCase{"memory --model llama2-7b --gpus-per-node 0", "--gpus-per-node: expected 1..65536, got 0"},
                      BadCase{"memory --model llama2-7b --gpus 8 --gpus-per-node 3", "--gpus 8: not a whole number of nodes of 3"},
                      BadCase{"sweep --model llama2-7b --threads -1", "--threads: expected 0 (all cores)"},
                      BadCase{"execute examples/no-such-plan.json --layers 0", "--layers: expected a positive integer, got 0"},
                      BadCase{"execute examples/no-such-plan.json --grad-accum 0", "--grad-accum: expected a positive integer, got 0"},
                      BadCase{"execute examples/no-such-plan.json --proxy-rank -1", "--proxy-rank: expected a rank >= 0, got -1"},
                      BadCase{"sweep --model llama2-7b --max-tp 0", "--max-tp: expected a positive bound, got 0"},
                      BadCase{"execute /dev/zero", "/dev/zero: not a regular file"},
                      // One vocabulary with the sweep's pins: the old spellings name the new one.
                      BadCase{"memory --model llama2-7b --tp 2 --sp", "write --sp on"},
                      BadCase{"memory --model llama2-7b --zero 1 --offload", "write --offload on"},
                      BadCase{"memory --model llama2-7b --no-flash", "--flash off"},
                      BadCase{"memory --model llama2-7b --flash no", "--flash: expected on or off, got 'no'"},
                      BadCase{"sweep --model llama2-7b --sp yes", "--sp: expected on, off or both, got 'yes'"},
                      BadCase{"sweep --params 7B --offload all", "--offload: expected on, params, off or both, got 'all'"},
                      BadCase{"memory --model llama2-7b --offload all", "--offload: expected on, params or off, got 'all'"},
                      BadCase{"sweep --params 7B --activation-offload both", "--activation-offload: expected on or off, got 'both'"},
                      BadCase{"sweep --params 7B --stack /nonexistent/stack.json", "/nonexistent/stack.json"},
                      BadCase{"memory --model llama2-7b --fp8 e5m2", "--fp8: expected one of none, tensorwise"},
                      BadCase{"memory --model llama2-7b --gpu h100-sxm --fp8 mxfp8", "needs MX block-scaling tensor cores"},
                      BadCase{"memory --model llama2-7b --gpu a100-80g --fp8", "needs FP8 tensor cores"},
                      BadCase{"sweep --params 7B --activation-offload maybe", "--activation-offload: expected on or off"},
                      // Split-backward schedules: the sweep's list, a shape the schedule cannot run.
                      BadCase{"sweep --params 7B --schedules zb-h2", "--schedules: expected gpipe, 1f1b, interleaved, zb-h1"},
                      BadCase{"memory --model llama2-7b --gpus 8 --pp 2 --dp 4 --schedule zb-h1 --vpp 2", "'plan.schedule': zb-h1 runs one stage per rank"},
                      // Goodput, cost and budgets (cli/budget.h, cmd_budget.cpp).
                      BadCase{"sweep --params 7B --tokens 1000", "--tokens: 1000 is less than one step"},
                      BadCase{"sweep --params 7B --tokens 1T --price-per-gpu-hour -2", "--price-per-gpu-hour: expected a positive price"},
                      BadCase{"sweep --params 7B --tokens 1T --grid-intensity nan", "--grid-intensity: expected g CO2 per kWh"},
                      BadCase{"sweep --params 7B --tokens 1T --failure-source nope", "--failure-source: expected one of llama3-405b-2024"},
                      BadCase{"sweep --params 7B --tokens 1T --storage-write-gbs 0", "--storage-write-gbs: expected a positive bandwidth"},
                      BadCase{"budget --gpus 8 --days 0", "--days: expected a positive number of days"},
                      BadCase{"budget --gpus 8 --days -3", "--days: expected a positive number of days"},
                      BadCase{"budget --gpus 8", "expected --days or --dollars"},
                      BadCase{"budget --gpus 8 --dollars 1000 --gpu ascend-910b", "--dollars: needs a price"},
                      BadCase{"budget --gpus 8 --days 30 --pue 0.5", "--pue: expected a PUE in [1, 5]"},
                      BadCase{"budget --gpus 1 --days 0.01", "outside the 200M..100T"},
                      BadCase{"budget --model llama2-7b --tokens 1T --gpus 8 --mtbf-hours 0", "--mtbf-hours: expected a positive number"},
                      BadCase{"budget --model llama2-7b --tokens 100 --gpus 8", "--tokens: 100 is less than one step"},
                      BadCase{"budget --tokens 1T --days 30", "--tokens: needs --model"},
                      BadCase{"budget --model llama2-7b --tokens 1T --days 30 --gpus 64", "--gpus: not with --model, --tokens and --days"}),
    bad_case_name);

// The single-plan commands spell --sp, --offload and --flash as the sweep's pins do (on|off).
// A token budget: the sweep's table gains days, goodput and cost, and the best plan its
// checkpoint, failure, goodput, time, cost and energy lines; budget finds a GPU count.
TEST(Cli, TokenBudgetReportsGoodputCostAndEnergy) {
  const std::string plan = temp_path("budget_" + std::to_string(::getpid()) + ".json");
  const CliRun s = run("sweep --params 7B --gpus 8 --gpu h100-sxm --tokens 1T --objective cost --top 3 --json " + plan);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  for (const char* part : {"days  goodput       cost", "checkpoint", "job MTBF", "goodput", "GPU-hours", "at $3.78 per GPU-hour", "MWh"})
    EXPECT_NE(s.output.find(part), std::string::npos) << part << "\n" << s.output;
  const CliRun b = run("budget --model llama2-7b --tokens 200B --days 14 --gpu h100-sxm --max-gpus 64 --json " + plan);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("GPUs to train 200B tokens of llama2-7b"), std::string::npos) << b.output;
  const CliRun c = run("budget --gpus 64 --gpu h100-sxm --days 7 --grid-intensity 400 --json " + plan);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  for (const char* part : {"Compute-optimal sizing", "fitted law (Approach 3)", "20 tokens per parameter", "Planned: derived-", "CO2"})
    EXPECT_NE(c.output.find(part), std::string::npos) << part << "\n" << c.output;
  std::remove(plan.c_str());
}

// `llmplan execute best.json` after a sweep on 8 GPUs, as the README's usage line types it:
// an 8-rank plan with no launcher runs its heaviest rank's proxy scaled down, and says so.
// (TinyLlama: the README's 7B does the same in 2.5 minutes here, most of it the embedding.)
TEST(Cli, MultiRankPlanAloneRunsItsHeaviestRankScaledDown) {
  const std::string plan = temp_path("alone_" + std::to_string(::getpid()) + ".json"), db = temp_path("alone_" + std::to_string(::getpid()) + ".db");
  ASSERT_EQ(run("sweep --gpus 8 --model tinyllama-1.1b --json " + plan).exit_code, 0);
  const CliRun r = run("execute " + plan + " --db " + db + " --time-budget 1 --steps 1 --warmup 0");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"this plan uses 8 ranks and no launcher started this process: running rank 0's share", "scaled down to 1 of 22 layers",
                           "The whole plan: mpirun", "as a proxy of rank 0", "recorded as run 1"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  std::remove(plan.c_str());
  std::remove(db.c_str());
}

// `llmplan execute PLAN` with nothing else on GPUs starts the plan's ranks itself where they
// are (mpirun on this machine's GPUs, srun in a Slurm job; executor/launch.h decides, its
// cases in execute_tests). Each case runs the real binary in an environment of its own:
// no launcher's variables but those given, and no CUDA device (CUDA_VISIBLE_DEVICES empty).
std::string launch_env(const std::string& set) {
  return "env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_SIZE -u PMIX_RANK -u SLURM_JOB_ID -u SLURM_NTASKS -u SLURM_STEP_ID "
         "CUDA_VISIBLE_DEVICES= " + set + " " + std::string(LLMPLAN_BINARY_DIR) + "/cli/llmplan ";
}

class ExecuteLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_path("launch_" + std::to_string(::getpid()));
    ASSERT_EQ(std::system(("mkdir -p " + dir_ + "/bin").c_str()), 0);
    plan_ = dir_ + "/best.json";
    ASSERT_EQ(run("sweep --gpus 8 --model tinyllama-1.1b --json " + plan_).exit_code, 0);
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_, plan_;
};

// No GPU here: the 8 ranks are not started, and the reason is said.
TEST_F(ExecuteLaunch, TooFewGpusRunsHereSayingWhy) {
  const CliRun r = run_shell(launch_env("") + "execute " + plan_ + " --backend cuda --steps 1 --warmup 0 --db " + dir_ + "/p.db 2>&1");
  EXPECT_NE(r.output.find("not starting the plan's 8 ranks: this machine has 0 CUDA devices for the plan's 8 ranks (one device per rank); "
                          "running its single-rank equivalent here"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("starting them"), std::string::npos) << r.output;
  // --no-launch: not even considered.
  const CliRun quiet = run_shell(launch_env("") + "execute " + plan_ + " --backend cuda --no-launch --steps 1 --warmup 0 --db " + dir_ + "/p.db 2>&1");
  EXPECT_EQ(quiet.output.find("not starting"), std::string::npos) << quiet.output;
}

// A Slurm job with the tasks: this process becomes `srun --ntasks 8` running the same
// command line with --no-launch (a stand-in srun prints what it was given).
TEST_F(ExecuteLaunch, ASlurmJobStartsTheRanksWithSrun) {
  std::ofstream(dir_ + "/bin/srun") << "#!/bin/sh\necho \"srun was given: $*\"\n";
  ASSERT_EQ(std::system(("chmod +x " + dir_ + "/bin/srun").c_str()), 0);
  const std::string bin = std::string(LLMPLAN_BINARY_DIR) + "/cli/llmplan";
  const CliRun r = run_shell(launch_env("SLURM_JOB_ID=77 SLURM_NTASKS=8 PATH=" + dir_ + "/bin:/usr/bin:/bin") + "execute " + plan_ +
                             " --backend cuda --steps 2 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("llmplan execute: Slurm job 77 has 8 tasks for the plan's 8 ranks; starting them:\n  srun --ntasks 8 "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("srun was given: --ntasks 8 " + bin + " execute " + plan_ + " --backend cuda --steps 2 --no-launch\n"), std::string::npos)
      << r.output;
  // Without srun on PATH: bad input naming it and the way out.
  const CliRun missing = run_shell(launch_env("SLURM_JOB_ID=77 SLURM_NTASKS=8 PATH=" + dir_) + "execute " + plan_ + " --backend cuda 2>&1");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("llmplan: srun is not on PATH"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("--no-launch"), std::string::npos) << missing.output;
}

// The CPU run's memory has a witness beside the allocator's own accounting: the kernel's
// peak resident memory over the run, against the predicted allocator-side peak. GPT-2 124M
// at 2 layers holds about 860 MiB: the runtime's own resident memory beyond it (OpenBLAS
// buffers, thread stacks, the allocator's free lists) must stay within 10%.
TEST(Cli, ExecuteMemoryHasTheKernelsWitness) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory and quarantine are resident too";
#endif
  const std::string plan = temp_path("rss_" + std::to_string(::getpid()) + ".json"), db = temp_path("rss_" + std::to_string(::getpid()) + ".db"),
                    out = temp_path("rss_" + std::to_string(::getpid()) + ".out.json");
  ASSERT_EQ(run("sweep --model gpt2-124m --gpus 1 --json " + plan).exit_code, 0);
  const CliRun r = run("execute " + plan + " --layers 2 --seq 128 --micro-batch 1 --grad-accum 1 --steps 1 --warmup 0 --db " + db + " --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("peak resident (kernel)"), std::string::npos) << r.output;
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_TRUE(j.contains("resident_peak")) << j.dump();
  const double predicted = j["resident_peak"]["predicted_bytes"], measured = j["resident_peak"]["measured_bytes"];
  EXPECT_GT(predicted, 500.0 * 1024 * 1024);
  EXPECT_NEAR(measured / predicted, 1, 0.10) << measured << " vs " << predicted;
  for (const std::string& f : {plan, db, out}) std::remove(f.c_str());
}

TEST(Cli, VersionIsPrinted) {
  const CliRun v = run("--version");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_EQ(v.output.rfind("llmplan 0.", 0), 0u) << v.output;
}

// No plan fits: sweep and explain say what change of the job would make one fit.
// Llama 3.1 405B on one A100 node's GPU: with ZeRO-3 parameter and optimizer offload the GPU
// holds only the gathered layers, but the host would hold 16 B x 405B = 6.5 TB of states,
// beyond the node's 2 TiB; the sweep says that it is the host memory that runs out.
TEST(Cli, NoFitSaysWhatWouldFit) {
  const CliRun s = run("sweep --model llama3.1-405b --gpus 1 --json " + temp_path("nofit_" + std::to_string(::getpid()) + ".json"));
  EXPECT_EQ(s.exit_code, 1) << s.output;
  EXPECT_NE(s.output.find("What would make a plan fit"), std::string::npos) << s.output;
  EXPECT_NE(s.output.find("; from 1)"), std::string::npos) << s.output;
  EXPECT_NE(s.output.find("fits in GPU memory, but what it offloads does not fit in the node's host memory"), std::string::npos) << s.output;
  EXPECT_NE(s.output.find("offload-params, fits the GPU"), std::string::npos) << s.output;
  const CliRun e = run("explain --model llama3.1-405b --gpus 1");
  EXPECT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("What would make a plan fit"), std::string::npos) << e.output;
}

TEST(Cli, MemoryTakesOnOffFlagsAsTheSweepSpellsThem) {
  const auto plan_of = [](const std::string& flags) {
    const CliRun r = run("memory --model llama2-7b --gpus 8 --tp 2 --zero 1 --json - " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output)["plan"];
  };
  const nlohmann::json defaults = plan_of(""), set = plan_of("--sp on --offload on --flash off");
  EXPECT_FALSE(defaults["sp"].get<bool>());
  EXPECT_FALSE(defaults["offload_optimizer"].get<bool>());
  EXPECT_TRUE(defaults["flash_attention"].get<bool>());
  EXPECT_TRUE(set["sp"].get<bool>());
  EXPECT_TRUE(set["offload_optimizer"].get<bool>());
  EXPECT_FALSE(set["flash_attention"].get<bool>());
  EXPECT_FALSE(set.contains("offload_params"));  // written only when on
}

// --offload params: ZeRO-3's parameter shard offloaded beside the optimizer; without ZeRO-3
// the plan is invalid, exit 2 naming the rule.
TEST(Cli, OffloadParamsIsZero3sParameterOffload) {
  const CliRun r = run("memory --model llama2-7b --gpus 8 --zero 3 --offload params --json -");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json plan = nlohmann::json::parse(r.output)["plan"];
  EXPECT_TRUE(plan["offload_optimizer"].get<bool>());
  EXPECT_TRUE(plan["offload_params"].get<bool>());
  const CliRun zero2 = run("memory --model llama2-7b --gpus 8 --zero 2 --offload params");
  EXPECT_EQ(zero2.exit_code, 2);
  EXPECT_NE(zero2.output.find("parameter offload"), std::string::npos) << zero2.output;
}

// --stage-layers sets a custom split; a count below 1, too few counts or counts that miss the
// model's layers are exit 2 naming the flag or the field.
TEST(Cli, StageLayersSetACustomSplitAndBadCountsNameTheFlag) {
  const CliRun r = run("memory --model llama2-7b --gpus 8 --pp 4 --stage-layers 6,9,9,8 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json plan = nlohmann::json::parse(r.output)["plan"];
  EXPECT_EQ(plan["pipeline_split"], "custom");
  EXPECT_EQ(plan["stage_layers"], nlohmann::json({6, 9, 9, 8}));
  const CliRun negative = run("memory --model llama2-7b --gpus 8 --pp 4 --stage-layers 6,9,9,-8");
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_NE(negative.output.find("--stage-layers"), std::string::npos) << negative.output;
  const CliRun few = run("memory --model llama2-7b --gpus 8 --pp 4 --stage-layers 16,16");
  EXPECT_EQ(few.exit_code, 2);
  EXPECT_NE(few.output.find("pp*vpp = 4"), std::string::npos) << few.output;
  const CliRun sum = run("memory --model llama2-7b --gpus 8 --pp 4 --stage-layers 6,9,9,7");
  EXPECT_EQ(sum.exit_code, 2);
  EXPECT_NE(sum.output.find("plan.stage_layers"), std::string::npos) << sum.output;
}

TEST(Cli, MalformedModelFileNamesFileAndPosition) {
  const std::string p = temp_path("bad.json");
  write(p, "{\"name\": \"x\", \"layers\": ");
  const CliRun r = run("memory --model " + p);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(p), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("malformed JSON"), std::string::npos) << r.output;
}

TEST(Cli, ModelFileWithWrongFieldNamesTheField) {
  const std::string p = temp_path("neg.json");
  write(p, R"({"name":"x","family":"llama","layers":-3,"hidden":4096,"heads":32,"vocab":32000})");
  const CliRun r = run("memory --model " + p);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("field 'layers'"), std::string::npos) << r.output;
  write(p, R"({"name":"x","family":"llama","layers":2,"hidden":4096,"heads":32,"vocab":32000,"colour":"red"})");
  const CliRun u = run("memory --model " + p);
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_NE(u.output.find("unknown field 'colour'"), std::string::npos) << u.output;
}

TEST(Cli, AbsurdModelIsRejected) {
  const std::string p = temp_path("huge.json");
  write(p, R"({"name":"huge","family":"gpt","layers":10000,"hidden":1048576,"heads":8192,"vocab":100000})");
  const CliRun r = run("memory --model " + p);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("1e14"), std::string::npos) << r.output;
}

TEST(Cli, SweepWritesAPlanThatExplainReads) {
  const std::string best = temp_path("best.json");
  const CliRun s = run("sweep --gpus 8 --params 7B --json " + best);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("llama2-7b"), std::string::npos);
  EXPECT_NE(s.output.find("Rejected"), std::string::npos);
  const auto f = llmplan::read_plan_file(best);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->plan.world_size(), 8);
  const CliRun e = run("explain " + best);
  EXPECT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("The plan fits"), std::string::npos) << e.output;
}

// A LoRA plan without its adapters block is refused (defaults would hide the omission).
TEST(Cli, LoraPlanWithoutItsAdaptersIsRefused) {
  const std::string plan = temp_path("lora.json");
  const CliRun s = run("sweep --gpus 8 --model llama2-7b --mode lora --json " + plan);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  std::ifstream in(plan);
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_TRUE(j["job"].contains("lora"));
  EXPECT_EQ(run("explain " + plan).exit_code, 0);
  j["job"].erase("lora");
  const std::string broken = temp_path("lora_broken.json");
  std::ofstream(broken) << j.dump();
  const CliRun e = run("explain " + broken);
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_NE(e.output.find("field 'job.lora': expected the adapters of a LoRA job"), std::string::npos) << e.output;
}

// A kill during execute (SIGTERM, as mpirun sends when another rank dies): the run is
// recorded as failed, not left "running", and keeps the rows of the steps it completed.
TEST(Cli, InterruptedExecuteIsRecordedAsFailed) {
  const std::string bin = std::string(LLMPLAN_BINARY_DIR) + "/cli/llmplan";
  const std::string plan = temp_path("int_plan.json"), db = temp_path("int.db"), log = temp_path("int.log");
  std::remove(db.c_str());
  // An earlier run's log would satisfy the wait below before this run's shell has even
  // truncated it (the redirection happens in the forked child), and the kill would land
  // before the run exists.
  std::remove(log.c_str());
  ASSERT_EQ(run("sweep --model gpt2-124m --gpus 1 --json " + plan).exit_code, 0);
  const std::string script = bin + " execute " + plan + " --layers 1 --seq 32 --micro-batch 1 --grad-accum 1 --warmup 0 --steps 1000000 --db " +
                             db + " > " + log + " 2>&1 & pid=$!; for i in $(seq 1 600); do grep -q 'step ' " + log +
                             " && break; sleep 0.1; done; kill -TERM $pid; wait $pid; echo rc=$?";
  const std::string out = run_shell(script).output;
  EXPECT_NE(out.find("rc=143"), std::string::npos) << out;
  const CliRun list = run("profiles list --db " + db);
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find("failed"), std::string::npos) << list.output;
  EXPECT_EQ(list.output.find("running"), std::string::npos) << list.output;
  // The step the log showed before the kill has its row.
  const CliRun show = run("profiles show 1 --db " + db);
  EXPECT_EQ(show.exit_code, 0) << show.output;
  EXPECT_NE(show.output.find("  step   0  loss "), std::string::npos) << show.output;
}

// Ctrl-C (SIGINT) stops a run: recorded as "stopped", with its completed steps' rows. The
// shell runs the job with job control (set -m), so that it does not ignore SIGINT as a
// plain background job does.
TEST(Cli, CtrlCStopsExecuteAndRecordsItAsStopped) {
  const std::string bin = std::string(LLMPLAN_BINARY_DIR) + "/cli/llmplan";
  const std::string plan = temp_path("stop_plan.json"), db = temp_path("stop.db"), log = temp_path("stop.log");
  std::remove(db.c_str());
  std::remove(log.c_str());  // as above: no earlier run's log to satisfy the wait
  ASSERT_EQ(run("sweep --model gpt2-124m --gpus 1 --json " + plan).exit_code, 0);
  const std::string script = temp_path("stop.sh");
  std::ofstream(script) << "set -m\n"
                        << bin << " execute " << plan << " --layers 1 --seq 32 --micro-batch 1 --grad-accum 1 --warmup 0 --steps 1000000 --db "
                        << db << " > " << log << " 2>&1 &\npid=$!\nfor i in $(seq 1 600); do grep -q 'step ' " << log
                        << " && break; sleep 0.1; done\nkill -INT $pid\nwait $pid\necho rc=$?\n";
  const std::string out = run_shell("bash " + script + " 2>&1").output;
  EXPECT_NE(out.find("rc=130"), std::string::npos) << out;
  const CliRun show = run("profiles show 1 --db " + db);
  EXPECT_EQ(show.exit_code, 0) << show.output;
  EXPECT_NE(show.output.find("stopped"), std::string::npos) << show.output;
  EXPECT_NE(show.output.find("interrupted (SIGINT)"), std::string::npos) << show.output;
  EXPECT_NE(show.output.find("  step   0  loss "), std::string::npos) << show.output;
}

TEST(Cli, PlanFileErrorsNameTheField) {
  const std::string best = temp_path("best2.json");
  ASSERT_EQ(run("sweep --gpus 8 --params 7B --json " + best).exit_code, 0);
  auto j = *llmplan::read_json_file(best);
  j["plan"]["tp"] = 3;
  const std::string bad = temp_path("bad_plan.json");
  write(bad, j.dump());
  const CliRun r = run("explain " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
  j = *llmplan::read_json_file(best);
  j["plan"].erase("micro_batch");
  write(bad, j.dump());
  const CliRun m = run("explain " + bad);
  EXPECT_EQ(m.exit_code, 2);
  EXPECT_NE(m.output.find("plan.micro_batch"), std::string::npos) << m.output;
}

TEST(Cli, NoPlanFitsExitsOneWithReasonsAndShortfall) {
  // Without offload (with it, the host memory runs out first: NoFitSaysWhatWouldFit).
  const CliRun r = run("sweep --model llama3-405b --gpus 8 --gpu a100-40g --offload off --json " + temp_path("none.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("No plan fits"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("short by"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not fit in GPU memory"), std::string::npos) << r.output;
  // The failure is said on stderr too, not only in the report on stdout.
  const std::string cmd = std::string(LLMPLAN_BINARY_DIR) + "/cli/llmplan sweep --model llama3-405b --gpus 8 --gpu a100-40g --offload off --json " +
                          temp_path("none2.json") + " 2>&1 >/dev/null";
  const std::string err = run_shell(cmd).output;
  EXPECT_NE(err.find("llmplan: sweep: no plan fits in"), std::string::npos) << err;
}

TEST(Cli, GlobalBatchNotDivisibleByAnyDpIsExplained) {
  // 7 sequences cannot be split over 2, 4 or 8 data-parallel ranks; dp = 1 needs tp*pp = 8.
  const CliRun r = run("sweep --params 7B --gpus 8 --global-batch 7 --max-tp 1 --max-pp 1 --json " + temp_path("gb.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("global batch not divisible"), std::string::npos) << r.output;
}

TEST(Cli, ParamsPicksNearestPresetAndSaysSo) {
  const CliRun r = run("memory --params 7B --gpus 8");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--params 7B: using preset llama2-7b"), std::string::npos) << r.output;
}

}  // namespace

namespace {

// Sweeps with `sweep_flags`, simulates the best plan with a trace; the simulate run and the trace's events.
struct SimulatedSweep {
  CliRun run;
  nlohmann::json events;
};
SimulatedSweep sweep_and_simulate(const std::string& sweep_flags, const std::string& name) {
  const std::string best = temp_path(name + "_best.json"), trace = temp_path(name + "_trace.json");
  SimulatedSweep out{run("sweep " + sweep_flags + " --json " + best), nlohmann::json::array()};
  if (out.run.exit_code != 0) return out;
  out.run = run("simulate " + best + " --trace " + trace);
  const auto t = llmplan::read_json_file(trace);
  if (t.ok() && t->contains("traceEvents")) out.events = (*t)["traceEvents"];
  return out;
}

TEST(Cli, SimulateReadsTheSweepPlanAndWritesATrace) {
  const SimulatedSweep s = sweep_and_simulate("--gpus 8 --params 7B --pp 2", "sim");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.output;
  EXPECT_NE(s.run.output.find("Bubble fraction"), std::string::npos) << s.run.output;
  EXPECT_GT(s.events.size(), 10u);
  const CliRun bad = run("simulate " + temp_path("missing.json"));
  EXPECT_EQ(bad.exit_code, 2);
}

// A zero-bubble plan from the sweep is simulated with its weight-gradient passes apart: the
// trace has W slices beside the F and B ones.
TEST(Cli, SimulatePlaysAZeroBubblePlanWithWeightGradientEvents) {
  const SimulatedSweep s = sweep_and_simulate("--gpus 8 --params 7B --pp 4 --schedules zbv", "zbv");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.output;
  EXPECT_NE(s.run.output.find(" zbv,"), std::string::npos) << s.run.output;
  int weight_grads = 0;
  for (const auto& e : s.events)
    if (e.contains("name") && e["name"].get<std::string>().rfind("W mb", 0) == 0) ++weight_grads;
  EXPECT_GT(weight_grads, 0);
}

TEST(Cli, SimulateTopReranksBySimulatedTime) {
  const CliRun r = run("sweep --gpus 8 --params 7B --pp 2 --simulate-top 3 --top 3 --json " + temp_path("simtop.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Simulating the analytic top 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(simulated step time)"), std::string::npos) << r.output;
}

}  // namespace

namespace {

// Without --stack a plan's memory is also given over every known stack's conventions (the
// range a plan must fit in when the stack is unknown); with --stack, that stack's own.
TEST(Cli, MemoryReportsTheRangeOverStacksUnlessOneIsGiven) {
  const CliRun a = run("memory --model llama3-8b --gpus 8 --tp 2 --seq 8192 --global-batch 64");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("Peak over the known stacks' memory conventions"), std::string::npos) << a.output;
  const CliRun b = run("memory --model llama3-8b --gpus 8 --tp 2 --seq 8192 --global-batch 64 --stack torchtitan");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(b.output.find("Peak over the known stacks"), std::string::npos) << b.output;
  const CliRun p = run("presets");
  EXPECT_NE(p.output.find("megatron-core"), std::string::npos) << p.output;
}

// validate reads both shipped files and counts what it compared and skipped per group.
TEST(Cli, ValidateCoversThe2024To2026Records) {
  const CliRun r = run("validate --summary-only");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mbridge_perf_moe"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Coverage per group"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mbridge_perf           compared  13, skipped   0"), std::string::npos) << r.output;
}

// --write-stacks is checked before the fit runs: a folder that is not there, or the flag
// without a fit to write, is a bad flag value (exit 2, the flag named), not an I/O failure
// after minutes of fitting.
TEST(Cli, ValidateWriteStacksNeedsAnExistingFolderAndAFit) {
  const CliRun missing = run("validate --fit-stacks --summary-only --write-stacks /nonexistent-llmplan-folder");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--write-stacks"), std::string::npos) << missing.output;
  const CliRun no_fit = run("validate --summary-only --write-stacks .");
  EXPECT_EQ(no_fit.exit_code, 2) << no_fit.output;
  EXPECT_NE(no_fit.output.find("needs --fit"), std::string::npos) << no_fit.output;
}

TEST(Cli, ValidateSimulateComparesEveryCostedRecord) {
  const CliRun r = run("validate --simulate");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("records simulated: median |difference|"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("narayanan2021_table1"), std::string::npos) << r.output;
}

}  // namespace
