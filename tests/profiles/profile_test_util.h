// Helpers for the profile store tests: a per-test temporary folder, a filled-in sample run,
// and direct SQLite reads that check what the store wrote behind its API.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "profiles/profile_store.h"

namespace llmplan::testing_util {

// A fresh folder per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "llmplan-profiles-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

inline RunRecord sample_run(const std::string& model = "gpt2-small") {
  RunRecord run;
  run.created_at = "2024-05-01T12:34:56Z";
  run.plan_json = R"({"schema_version": 1, "plan": {"tp": 2, "pp": 1, "dp": 4}})";
  run.model = model;
  run.hardware = "NVIDIA H200";
  run.host = "node17";
  run.backend = "cuda";
  run.versions = "llmplan 0.1.0; GCC 12.2.0; cuBLAS 13.0";
  run.predicted_json = R"({"peak_bytes": 123456789, "step_time_s": 0.5})";
  run.status = RunStatus::running;
  run.steps_planned = 50;
  run.predicted_peak_bytes = 123456789;
  run.predicted_step_time_s = 0.5;
  return run;
}

// Runs `sql` on `path` with a connection of its own; the first column of the first row.
// Fails the test (and returns "") when it cannot.
inline std::string query_text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string result;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      result = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    } else {
      ADD_FAILURE() << path << ": " << sql << ": " << sqlite3_errmsg(db);
    }
    sqlite3_finalize(stmt);
  } else {
    ADD_FAILURE() << path << ": cannot open";
  }
  sqlite3_close(db);
  return result;
}

inline int64_t query_int(const std::string& path, const std::string& sql) {
  std::string text = query_text(path, sql);
  return text.empty() ? -1 : std::stoll(text);
}

// Runs statements that return no rows (to forge files); true on success.
inline bool exec_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  bool ok = sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
            sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
  if (!ok) ADD_FAILURE() << path << ": " << sql << ": " << sqlite3_errmsg(db);
  sqlite3_close(db);
  return ok;
}

}  // namespace llmplan::testing_util
