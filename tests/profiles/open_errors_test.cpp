// Opening files that are not (yet) profile databases, and schema migrations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "profile_test_util.h"
#include "profiles/profile_store.h"

namespace llmplan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::exec_sql;
using testing_util::query_int;
using testing_util::query_text;
using testing_util::sample_run;

class OpenTest : public testing_util::TempDirTest {
 protected:
  static std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  static std::string random_bytes(size_t n) {
    std::mt19937 rng(12345);
    std::string bytes(n, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
    return bytes;
  }
  // Opening `path` must fail as bad input, naming the file; returns the message.
  static std::string expect_bad_input(const std::string& path, ProfileStoreOptions options = {}) {
    Result<ProfileStore> store = ProfileStore::open(path, std::move(options));
    EXPECT_FALSE(store.ok());
    if (store.ok()) return "";
    EXPECT_EQ(store.status().kind(), ErrorKind::bad_input);
    EXPECT_THAT(store.status().message(), HasSubstr(path));
    return store.status().message();
  }
  // A profile database at the built-in schema with one run in it; returns the run's id.
  int64_t make_profile_db(const std::string& path) {
    Result<ProfileStore> store = ProfileStore::open(path);
    EXPECT_TRUE(store.ok()) << store.status().message();
    Result<int64_t> id = store->record_run(sample_run(), {{0, 1.0, 0.1, 10.0, 5}}, {});
    EXPECT_TRUE(id.ok());
    return id.ok() ? *id : 0;
  }
};

TEST_F(OpenTest, NewFileIsInitialisedAsAProfileDatabase) {
  std::string path = file("new.db");
  ASSERT_TRUE(ProfileStore::open(path).ok());
  EXPECT_EQ(query_int(path, "PRAGMA application_id"), kProfileApplicationId);
  EXPECT_EQ(query_int(path, "PRAGMA user_version"),
            static_cast<int64_t>(builtin_migrations().size()));
  EXPECT_EQ(query_text(path, "PRAGMA journal_mode"), "wal");
}

TEST_F(OpenTest, EmptyExistingFileIsInitialised) {
  std::string path = file("empty.db");
  write_bytes(path, "");
  Result<ProfileStore> store = ProfileStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_TRUE(store->insert_run(sample_run()).ok());
}

TEST_F(OpenTest, RandomBytesAreRefusedAndLeftUntouched) {
  std::string path = file("random.db");
  std::string bytes = random_bytes(8192);
  write_bytes(path, bytes);
  EXPECT_THAT(expect_bad_input(path), HasSubstr("expected an llmplan profile database"));
  EXPECT_EQ(read_bytes(path), bytes);
}

TEST_F(OpenTest, TextFileIsRefused) {
  std::string path = file("notes.txt");
  write_bytes(path, "model: gpt2-small\nthis is not a database\n");
  EXPECT_THAT(expect_bad_input(path), HasSubstr("expected an llmplan profile database"));
}

TEST_F(OpenTest, ForeignSqliteDatabaseIsRefusedAndLeftUntouched) {
  std::string path = file("foreign.db");
  ASSERT_TRUE(
      exec_sql(path, "CREATE TABLE people (name TEXT); INSERT INTO people VALUES ('ada');"));
  EXPECT_THAT(expect_bad_input(path), HasSubstr("no llmplan application_id"));
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM people"), 1);
  EXPECT_EQ(query_text(path, "PRAGMA journal_mode"), "delete");  // not switched to WAL
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM sqlite_master WHERE name = 'runs'"), 0);
}

TEST_F(OpenTest, OtherApplicationsIdIsRefused) {
  std::string path = file("other-app.db");
  ASSERT_TRUE(exec_sql(path, "PRAGMA application_id = 1234"));
  EXPECT_THAT(expect_bad_input(path), HasSubstr("another application (application_id 0x000004D2)"));
}

TEST_F(OpenTest, CorruptedProfileDatabaseGivesErrorsNotACrash) {
  std::string path = file("corrupt.db");
  make_profile_db(path);
  std::string bytes = read_bytes(path);
  ASSERT_GT(bytes.size(), 4096u * 3);
  bytes.replace(4096, bytes.size() - 4096, random_bytes(bytes.size() - 4096));  // keep page 1
  write_bytes(path, bytes);

  Result<ProfileStore> store = ProfileStore::open(path);
  if (!store.ok()) {
    EXPECT_EQ(store.status().kind(), ErrorKind::bad_input);
    EXPECT_THAT(store.status().message(), HasSubstr(path));
    return;
  }
  Result<std::vector<RunSummary>> runs = store->list_runs();
  ASSERT_FALSE(runs.ok());
  EXPECT_EQ(runs.status().kind(), ErrorKind::bad_input);
  EXPECT_THAT(runs.status().message(), HasSubstr(path));
}

// Found by fuzz_profile_db: a header whose schema format number SQLite does not know
// (bytes 44-47, 1 to 4 are valid) made every statement fail "unsupported file format",
// which was reported as a runtime error (exit 1) instead of the file's fault.
TEST_F(OpenTest, UnknownSchemaFormatIsBadInput) {
  std::string path = file("format.db");
  make_profile_db(path);
  ASSERT_TRUE(exec_sql(path, "PRAGMA journal_mode = DELETE"));  // all of it in the main file
  std::string bytes = read_bytes(path);
  ASSERT_GT(bytes.size(), 100u);
  bytes.replace(44, 4, std::string("\0\0\0\5", 4));
  write_bytes(path, bytes);
  EXPECT_THAT(expect_bad_input(path), HasSubstr("unsupported file format"));
}

// The inputs fuzz_profile_db crashed on, kept in its seed corpus (tests/fuzz/profile_db/),
// are bad input naming the file: a damaged schema page SQLite answers with "out of memory"
// (was runtime, exit 1), and a header with an unknown schema format number.
TEST_F(OpenTest, FuzzerFindingsAreBadInput) {
  const std::string corpus = LLMPLAN_SOURCE_ROOT "/tests/fuzz/profile_db/";
  for (const char* name : {"crash-schema-out-of-memory.db", "crash-unsupported-format.db"}) {
    SCOPED_TRACE(name);
    const std::string path = file(name);
    std::filesystem::copy_file(corpus + name, path);
    const std::string message = expect_bad_input(path);
    EXPECT_THAT(message, HasSubstr("expected an llmplan profile database"));
  }
  EXPECT_THAT(expect_bad_input(file("crash-schema-out-of-memory.db")), HasSubstr("cannot read its schema"));
}

// A file that says it is a profile database of the current version (application_id,
// user_version) but has none of its tables: reading it is the file's fault, not a runtime
// error.
TEST_F(OpenTest, ProfileIdentityWithoutTablesIsBadInputOnRead) {
  std::string path = file("hollow.db");
  ASSERT_TRUE(exec_sql(path, "PRAGMA application_id = " + std::to_string(kProfileApplicationId) +
                                 "; PRAGMA user_version = " + std::to_string(builtin_migrations().size())));
  Result<ProfileStore> store = ProfileStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  Result<std::vector<RunSummary>> runs = store->list_runs();
  ASSERT_FALSE(runs.ok());
  EXPECT_EQ(runs.status().kind(), ErrorKind::bad_input);
  EXPECT_THAT(runs.status().message(), HasSubstr(path));
  EXPECT_THAT(runs.status().message(), HasSubstr("no such table"));
}

// A file that fails SQLite's integrity check (here an index entry no longer matching its
// row: one flipped byte in the steps_by_run index page) opens for reading, says it is
// damaged, and refuses every write with how to recover it.
TEST_F(OpenTest, DamagedDatabaseIsReadableButNeverWritten) {
  std::string path = file("damaged.db");
  const int64_t id = make_profile_db(path);
  const int64_t page = query_int(path, "SELECT rootpage FROM sqlite_master WHERE name = 'steps_by_run'");
  const int64_t page_size = query_int(path, "PRAGMA page_size");
  ASSERT_EQ(query_text(path, "PRAGMA integrity_check"), "ok");
  std::string bytes = read_bytes(path);
  bytes[static_cast<size_t>(page * page_size - 3)] ^= 0x01;  // in the last cell's key
  write_bytes(path, bytes);
  ASSERT_NE(query_text(path, "PRAGMA integrity_check"), "ok");
  const std::string before = read_bytes(path);

  Result<ProfileStore> store = ProfileStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_THAT(store->damage(), HasSubstr("missing from index steps_by_run"));
  Result<std::vector<RunSummary>> runs = store->list_runs();
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  EXPECT_EQ(runs->size(), 1u);
  for (const Status& s : {store->delete_run(id), store->add_steps(id, {{1, 1.0, 0.1, 10.0, 5}}), store->insert_run(sample_run()).status()}) {
    EXPECT_EQ(s.kind(), ErrorKind::bad_input) << s.message();
    EXPECT_THAT(s.message(), HasSubstr(path + ": the profile database is damaged"));
    EXPECT_THAT(s.message(), HasSubstr(".recover"));
  }
  EXPECT_EQ(read_bytes(path), before);  // nothing written
}

TEST_F(OpenTest, SchemaFromTheFutureIsRefused) {
  std::string path = file("future.db");
  make_profile_db(path);
  int64_t future = static_cast<int64_t>(builtin_migrations().size()) + 1;
  ASSERT_TRUE(exec_sql(path, "PRAGMA user_version = " + std::to_string(future)));
  std::string message = expect_bad_input(path);
  EXPECT_THAT(message, HasSubstr("schema version " + std::to_string(future) + " is newer"));
}

TEST_F(OpenTest, PathInMissingFolderIsRefused) {
  std::string path = "/nonexistent-llmplan-folder/sub/profiles.db";
  EXPECT_THAT(expect_bad_input(path), HasSubstr("folder"));
  EXPECT_FALSE(std::filesystem::exists("/nonexistent-llmplan-folder"));
}

TEST_F(OpenTest, FolderAsDatabaseAndEmptyPathAreRefused) {
  expect_bad_input(dir_.string());
  Result<ProfileStore> store = ProfileStore::open("");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().kind(), ErrorKind::bad_input);
}

TEST_F(OpenTest, ReopeningKeepsDataAndDoesNotRerunMigrations) {
  std::string path = file("p.db");
  int64_t id = make_profile_db(path);
  // Migration 1 is CREATE TABLE: running it again would fail "table runs already exists".
  Result<ProfileStore> store = ProfileStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  Result<RunRecord> run = store->get_run(id);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->model, "gpt2-small");
  EXPECT_EQ(store->get_steps(id)->size(), 1u);
  EXPECT_EQ(query_int(path, "PRAGMA user_version"),
            static_cast<int64_t>(builtin_migrations().size()));
}

TEST_F(OpenTest, AppendedMigrationUpgradesAnExistingDatabaseKeepingItsData) {
  std::string path = file("p.db");
  int64_t id = make_profile_db(path);
  ProfileStoreOptions v2;
  v2.migrations = builtin_migrations();
  v2.migrations.push_back("ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT 'none'");
  {
    Result<ProfileStore> store = ProfileStore::open(path, v2);
    ASSERT_TRUE(store.ok()) << store.status().message();
    EXPECT_EQ(store->get_run(id)->model, "gpt2-small");
  }
  EXPECT_EQ(query_int(path, "PRAGMA user_version"), static_cast<int64_t>(v2.migrations.size()));
  EXPECT_EQ(query_text(path, "SELECT note FROM runs WHERE id = " + std::to_string(id)), "none");
  EXPECT_TRUE(ProfileStore::open(path, v2).ok());  // and again: already up to date
  // The upgraded file is now from the future for code that knows only the built-in list.
  EXPECT_THAT(expect_bad_input(path), HasSubstr("is newer"));
}

// A database written by the first schema (no 'stopped' status) upgrades in place: every
// run, step and timing kept, deleted ids still never reused, the cascade from runs to
// their rows intact, and the new status accepted.
TEST_F(OpenTest, VersionOneDatabaseUpgradesToTheStoppedStatusKeepingEverything) {
  const std::string path = file("v1.db");
  ProfileStoreOptions v1;
  v1.migrations = {builtin_migrations()[0]};
  int64_t kept = 0, dropped = 0;
  {
    Result<ProfileStore> store = ProfileStore::open(path, v1);
    ASSERT_TRUE(store.ok()) << store.status().message();
    Result<int64_t> a = store->record_run(sample_run("a"), {{0, 2.5, 0.1, 10.0, 5}, {1, 2.4, 0.1, 10.0, 5}},
                                          {{"matmul", "8x8x8", "bf16", 1024, 0, 1e-6, 3}});
    Result<int64_t> b = store->record_run(sample_run("b"), {{0, 3.0, 0.2, 5.0, 7}}, {});
    ASSERT_TRUE(a.ok() && b.ok());
    kept = *a;
    dropped = *b;
    ASSERT_TRUE(static_cast<bool>(store->delete_run(dropped)));
    RunOutcome stopped;
    stopped.status = RunStatus::stopped;
    EXPECT_FALSE(static_cast<bool>(store->finish_run(kept, stopped))) << "version 1 has no 'stopped'";
  }
  Result<ProfileStore> store = ProfileStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ(query_int(path, "PRAGMA user_version"), static_cast<int64_t>(builtin_migrations().size()));
  EXPECT_EQ(store->get_run(kept)->model, "a");
  EXPECT_EQ(store->get_steps(kept)->size(), 2u);
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM op_timings WHERE run_id = " + std::to_string(kept)), 1);
  RunOutcome stopped;
  stopped.status = RunStatus::stopped;
  stopped.error_message = "interrupted (SIGINT) before it finished";
  const Status finished = store->finish_run(kept, stopped);
  ASSERT_TRUE(static_cast<bool>(finished)) << finished.message();
  EXPECT_EQ(store->get_run(kept)->status, RunStatus::stopped);
  Result<int64_t> next = store->insert_run(sample_run("c"));
  ASSERT_TRUE(next.ok());
  EXPECT_GT(*next, dropped) << "a deleted run's id is reused";
  ASSERT_TRUE(static_cast<bool>(store->delete_run(kept)));
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM steps"), 0) << "deleting a run no longer cascades to its steps";
  EXPECT_EQ(query_int(path, "SELECT count(*) FROM op_timings"), 0);
  EXPECT_THAT(query_text(path, "SELECT sql FROM sqlite_master WHERE name = 'steps'"), HasSubstr("runs"));
  EXPECT_THAT(query_text(path, "SELECT sql FROM sqlite_master WHERE name = 'steps'"), Not(HasSubstr("runs_v2")));
}

TEST_F(OpenTest, FailingMigrationChangesNothing) {
  std::string path = file("p.db");
  make_profile_db(path);
  ProfileStoreOptions broken;
  broken.migrations = builtin_migrations();
  broken.migrations.push_back("ALTER TABLE runs ADD COLUMN half_done INTEGER; THIS IS NOT SQL");
  Result<ProfileStore> store = ProfileStore::open(path, broken);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("schema migration " + std::to_string(builtin_migrations().size() + 1)));
  EXPECT_EQ(query_int(path, "PRAGMA user_version"),
            static_cast<int64_t>(builtin_migrations().size()));
  EXPECT_EQ(
      query_int(path, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'half_done'"),
      0);
  EXPECT_TRUE(ProfileStore::open(path).ok());
}

}  // namespace
}  // namespace llmplan
