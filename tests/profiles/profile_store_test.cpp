// ProfileStore reads and writes: round trips, export, delete, errors for missing runs and
// bad JSON, default path resolution, the run table.
#include "profiles/profile_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "profile_test_util.h"

namespace llmplan {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing_util::query_int;
using testing_util::sample_run;

const std::vector<StepRecord> kSteps = {
    {0, 10.9, 0.52, 31500.0, 100'000'000},
    {1, std::nan(""), 0.51, 32100.0, 110'000'000},  // a diverged loss must survive as NaN
    {2, 9.75, 0.50, 32768.0, 120'000'000},
};
const std::vector<OpTiming> kTimings = {
    {"matmul", "768x3072x2048", "bf16", 2.0 * 768 * 3072 * 2048, 3.0e7, 1.2e-5, 400},
    {"attention", "4x12x512x64", "bf16", 1.6e9, 2.5e7, 3.4e-5, 96},
};

class ProfileStoreTest : public testing_util::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    path_ = file("profiles.db");
    Result<ProfileStore> opened = ProfileStore::open(path_);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    store_.emplace(std::move(opened).value());
  }
  ProfileStore& store() { return *store_; }

  std::string path_;
  std::optional<ProfileStore> store_;
};

TEST_F(ProfileStoreTest, RecordRunRoundTripsEveryField) {
  RunRecord run = sample_run();
  run.measured_json = R"({"peak_bytes": 120000000})";
  run.status = RunStatus::oom;
  run.error_message = "out of memory in backward, stage 0, layer 3";
  run.tokens_per_s = 32000.5;
  run.step_time_s = 0.51;
  run.peak_bytes = 120'000'000;
  Result<int64_t> id = store().record_run(run, kSteps, kTimings);
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_GT(*id, 0);

  Result<RunRecord> got = store().get_run(*id);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->id, *id);
  EXPECT_EQ(got->created_at, run.created_at);
  EXPECT_EQ(got->plan_json, run.plan_json);
  EXPECT_EQ(got->model, run.model);
  EXPECT_EQ(got->hardware, run.hardware);
  EXPECT_EQ(got->host, run.host);
  EXPECT_EQ(got->backend, run.backend);
  EXPECT_EQ(got->versions, run.versions);
  EXPECT_EQ(got->predicted_json, run.predicted_json);
  EXPECT_EQ(got->measured_json, run.measured_json);
  EXPECT_EQ(got->status, RunStatus::oom);
  EXPECT_EQ(got->error_message, run.error_message);
  EXPECT_EQ(got->steps_planned, 50);
  EXPECT_DOUBLE_EQ(got->tokens_per_s, 32000.5);
  EXPECT_DOUBLE_EQ(got->step_time_s, 0.51);
  EXPECT_EQ(got->peak_bytes, 120'000'000);
  EXPECT_EQ(got->predicted_peak_bytes, 123456789);
  EXPECT_DOUBLE_EQ(got->predicted_step_time_s, 0.5);

  Result<std::vector<StepRecord>> steps = store().get_steps(*id);
  ASSERT_TRUE(steps.ok()) << steps.status().message();
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_EQ((*steps)[2].step, 2);
  EXPECT_DOUBLE_EQ((*steps)[0].loss, 10.9);
  EXPECT_TRUE(std::isnan((*steps)[1].loss));
  EXPECT_DOUBLE_EQ((*steps)[2].tokens_per_s, 32768.0);
  EXPECT_EQ((*steps)[2].peak_bytes, 120'000'000);

  Result<std::vector<OpTiming>> timings = store().get_op_timings(*id);
  ASSERT_TRUE(timings.ok()) << timings.status().message();
  ASSERT_EQ(timings->size(), 2u);
  EXPECT_EQ((*timings)[0].op, "matmul");
  EXPECT_EQ((*timings)[0].shape, "768x3072x2048");
  EXPECT_DOUBLE_EQ((*timings)[0].flops, 2.0 * 768 * 3072 * 2048);
  EXPECT_EQ((*timings)[1].dtype, "bf16");
  EXPECT_DOUBLE_EQ((*timings)[1].time_s, 3.4e-5);
  EXPECT_EQ((*timings)[1].count, 96);
}

TEST_F(ProfileStoreTest, InsertRunStampsCreatedAtInUtcWhenEmpty) {
  RunRecord run = sample_run();
  run.created_at.clear();
  Result<int64_t> id = store().insert_run(run);
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_THAT(store().get_run(*id)->created_at,
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"));
}

TEST_F(ProfileStoreTest, IncrementalWritesThenFinish) {
  Result<int64_t> id = store().insert_run(sample_run());
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_TRUE(store().get_steps(*id)->empty());  // insert_run writes the run row alone
  ASSERT_TRUE(store().add_steps(*id, {kSteps[0]}).is_ok());
  ASSERT_TRUE(store().add_steps(*id, {kSteps[2]}).is_ok());
  ASSERT_TRUE(store().add_op_timings(*id, kTimings).is_ok());
  Status finished = store().finish_run(
      *id, {RunStatus::ok, "", R"({"peak_bytes": 7})", 31000.0, 0.53, 125'000'000});
  ASSERT_TRUE(finished.is_ok()) << finished.message();

  Result<RunRecord> run = store().get_run(*id);
  EXPECT_EQ(run->status, RunStatus::ok);
  EXPECT_EQ(run->measured_json, R"({"peak_bytes": 7})");
  EXPECT_DOUBLE_EQ(run->tokens_per_s, 31000.0);
  EXPECT_DOUBLE_EQ(run->step_time_s, 0.53);
  EXPECT_EQ(run->peak_bytes, 125'000'000);
  EXPECT_EQ(store().get_steps(*id)->size(), 2u);
  EXPECT_EQ(store().get_op_timings(*id)->size(), 2u);
}

TEST_F(ProfileStoreTest, ExportEmbedsJsonColumnsAsObjects) {
  Result<int64_t> id = store().record_run(sample_run(), kSteps, kTimings);
  ASSERT_TRUE(id.ok()) << id.status().message();
  Result<std::string> text = store().export_run_json(*id);
  ASSERT_TRUE(text.ok()) << text.status().message();

  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << *text;
  const nlohmann::json& run = doc["run"];
  EXPECT_EQ(run["id"], *id);
  EXPECT_EQ(run["model"], "gpt2-small");
  EXPECT_EQ(run["status"], "running");
  ASSERT_TRUE(run["plan"].is_object());
  EXPECT_EQ(run["plan"]["plan"]["tp"], 2);
  ASSERT_TRUE(run["predicted"].is_object());
  EXPECT_EQ(run["predicted"]["peak_bytes"], 123456789);
  EXPECT_TRUE(run["measured"].is_null());  // not finished: no measurement yet
  ASSERT_EQ(doc["steps"].size(), 3u);
  EXPECT_EQ(doc["steps"][2]["step"], 2);
  EXPECT_DOUBLE_EQ(doc["steps"][0]["loss"].get<double>(), 10.9);
  EXPECT_TRUE(doc["steps"][1]["loss"].is_null());  // NaN has no JSON spelling
  ASSERT_EQ(doc["op_timings"].size(), 2u);
  EXPECT_EQ(doc["op_timings"][0]["shape"], "768x3072x2048");
  EXPECT_EQ(doc["op_timings"][1]["count"], 96);
}

TEST_F(ProfileStoreTest, ExportOfMissingRunIsBadInput) {
  Result<std::string> text = store().export_run_json(41);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().kind(), ErrorKind::bad_input);
  EXPECT_THAT(text.status().message(), HasSubstr("no run with id 41"));
}

TEST_F(ProfileStoreTest, DeleteCascadesToStepsAndTimingsOfThatRunOnly) {
  Result<int64_t> doomed = store().record_run(sample_run(), kSteps, kTimings);
  Result<int64_t> kept = store().record_run(sample_run("llama2-7b"), kSteps, kTimings);
  ASSERT_TRUE(doomed.ok() && kept.ok());
  ASSERT_TRUE(store().delete_run(*doomed).is_ok());

  EXPECT_EQ(store().get_run(*doomed).status().kind(), ErrorKind::bad_input);
  std::string where = " WHERE run_id = " + std::to_string(*doomed);
  EXPECT_EQ(query_int(path_, "SELECT count(*) FROM steps" + where), 0);
  EXPECT_EQ(query_int(path_, "SELECT count(*) FROM op_timings" + where), 0);
  EXPECT_EQ(store().get_steps(*kept)->size(), 3u);
  EXPECT_EQ(store().get_op_timings(*kept)->size(), 2u);
  ASSERT_EQ(store().list_runs()->size(), 1u);
  EXPECT_EQ(store().list_runs()->front().id, *kept);
}

TEST_F(ProfileStoreTest, DeleteOfMissingRunIsBadInputNamingIdAndFile) {
  ASSERT_TRUE(store().insert_run(sample_run()).ok());
  Status deleted = store().delete_run(999);
  ASSERT_FALSE(deleted.is_ok());
  EXPECT_EQ(deleted.kind(), ErrorKind::bad_input);
  EXPECT_THAT(deleted.message(), HasSubstr("no run with id 999"));
  EXPECT_THAT(deleted.message(), HasSubstr(path_));
  EXPECT_EQ(store().list_runs()->size(), 1u);
}

TEST_F(ProfileStoreTest, WritesToMissingRunAreBadInputAndWriteNothing) {
  EXPECT_EQ(store().add_steps(7, kSteps).kind(), ErrorKind::bad_input);
  EXPECT_EQ(store().add_op_timings(7, kTimings).kind(), ErrorKind::bad_input);
  EXPECT_EQ(store().finish_run(7, {}).kind(), ErrorKind::bad_input);
  EXPECT_EQ(query_int(path_, "SELECT count(*) FROM steps"), 0);
  EXPECT_EQ(query_int(path_, "SELECT count(*) FROM op_timings"), 0);
}

TEST_F(ProfileStoreTest, InvalidJsonIsRefusedAndNothingIsWritten) {
  RunRecord run = sample_run();
  run.predicted_json = "{not json";
  Result<int64_t> id = store().record_run(run, kSteps, kTimings);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().kind(), ErrorKind::bad_input);
  EXPECT_THAT(id.status().message(), HasSubstr("predicted_json"));
  EXPECT_EQ(query_int(path_, "SELECT count(*) FROM runs"), 0);
  EXPECT_EQ(query_int(path_, "SELECT count(*) FROM steps"), 0);

  Result<int64_t> good = store().insert_run(sample_run());
  ASSERT_TRUE(good.ok());
  RunOutcome outcome;
  outcome.measured_json = "[1, 2";
  EXPECT_EQ(store().finish_run(*good, outcome).kind(), ErrorKind::bad_input);
  EXPECT_EQ(store().get_run(*good)->status, RunStatus::running);
}

TEST_F(ProfileStoreTest, ListRunsSummarisesInIdOrderWithStepCounts) {
  Result<int64_t> first = store().record_run(sample_run("a"), kSteps, {});
  Result<int64_t> second = store().insert_run(sample_run("b"));
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(
      store().finish_run(*second, {RunStatus::failed, "NCCL timeout", "", 0, 0, 0}).is_ok());

  Result<std::vector<RunSummary>> runs = store().list_runs();
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].id, *first);
  EXPECT_EQ((*runs)[0].model, "a");
  EXPECT_EQ((*runs)[0].steps_recorded, 3);
  EXPECT_EQ((*runs)[0].steps_planned, 50);
  EXPECT_EQ((*runs)[1].model, "b");
  EXPECT_EQ((*runs)[1].status, RunStatus::failed);
  EXPECT_EQ((*runs)[1].steps_recorded, 0);
  EXPECT_EQ((*runs)[1].predicted_peak_bytes, 123456789);

  std::string table = format_run_table(*runs);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3);  // header + one line per run
  EXPECT_THAT(table, HasSubstr("failed"));
  EXPECT_THAT(table, HasSubstr("3/50"));
}

TEST(RunStatusNames, RoundTrip) {
  for (RunStatus v : {RunStatus::running, RunStatus::ok, RunStatus::oom, RunStatus::failed}) {
    RunStatus parsed = RunStatus::running;
    ASSERT_TRUE(parse_enum(to_string(v), &parsed));
    EXPECT_EQ(parsed, v);
  }
  RunStatus kept = RunStatus::oom;
  EXPECT_FALSE(parse_enum("crashed", &kept));
  EXPECT_EQ(kept, RunStatus::oom);
}

// Sets environment variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      it->second ? setenv(it->first.c_str(), it->second->c_str(), 1) : unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class DefaultDbPathTest : public testing_util::TempDirTest {};

TEST_F(DefaultDbPathTest, HomeDefaultCreatesTheFolder) {
  ScopedEnv env;
  env.set("HOME", dir_.c_str());
  env.set("LLMPLAN_DB", nullptr);
  env.set("XDG_DATA_HOME", nullptr);
  Result<std::string> path = default_db_path();
  ASSERT_TRUE(path.ok()) << path.status().message();
  EXPECT_EQ(*path, file(".local/share/llmplan/profiles.db"));
  EXPECT_TRUE(std::filesystem::is_directory(file(".local/share/llmplan")));
}

TEST_F(DefaultDbPathTest, ExplicitPathBeatsEnvironmentWhichBeatsDefault) {
  ScopedEnv env;
  env.set("HOME", dir_.c_str());
  env.set("XDG_DATA_HOME", nullptr);
  env.set("LLMPLAN_DB", file("env/p.db").c_str());
  EXPECT_EQ(*default_db_path(), file("env/p.db"));
  EXPECT_TRUE(std::filesystem::is_directory(file("env")));
  EXPECT_EQ(*default_db_path(file("explicit/x.db")), file("explicit/x.db"));
  env.set("LLMPLAN_DB", nullptr);
  env.set("XDG_DATA_HOME", file("xdg").c_str());
  EXPECT_EQ(*default_db_path(), file("xdg/llmplan/profiles.db"));
}

TEST_F(DefaultDbPathTest, UncreatableFolderIsBadInput) {
  ASSERT_TRUE(
      testing_util::exec_sql(file("plain-file"), "CREATE TABLE t(x)"));  // a file, not a folder
  Result<std::string> path = default_db_path(file("plain-file/sub/p.db"));
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().kind(), ErrorKind::bad_input);
  EXPECT_THAT(path.status().message(), HasSubstr("plain-file/sub/p.db"));
}

}  // namespace
}  // namespace llmplan
