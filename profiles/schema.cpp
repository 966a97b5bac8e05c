#include "profiles/schema.h"

#include <cstdio>

#include "profiles/profile_store.h"
#include "profiles/sqlite_statement.h"

namespace llmplan {

// Entry i takes the schema from version i to i + 1. REAL columns may be NULL because SQLite
// stores a NaN as NULL; ids are AUTOINCREMENT so a deleted run's id is never reused.
const std::vector<std::string>& builtin_migrations() {
  static const std::vector<std::string> migrations = {
      // 1: the tables.
      R"sql(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created_at TEXT NOT NULL,
  plan_json TEXT NOT NULL,
  model TEXT NOT NULL,
  hardware TEXT NOT NULL,
  host TEXT NOT NULL,
  backend TEXT NOT NULL,
  versions TEXT NOT NULL,
  predicted_json TEXT NOT NULL,
  measured_json TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'oom', 'failed')),
  error_message TEXT NOT NULL,
  steps_planned INTEGER NOT NULL,
  tokens_per_s REAL,
  step_time_s REAL,
  peak_bytes INTEGER NOT NULL,
  predicted_peak_bytes INTEGER NOT NULL,
  predicted_step_time_s REAL
);
CREATE TABLE steps (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  loss REAL,
  time_s REAL,
  tokens_per_s REAL,
  peak_bytes INTEGER NOT NULL
);
CREATE INDEX steps_by_run ON steps(run_id, step);
CREATE TABLE op_timings (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  op TEXT NOT NULL,
  shape TEXT NOT NULL,
  dtype TEXT NOT NULL,
  flops REAL,
  bytes REAL,
  time_s REAL,
  count INTEGER NOT NULL
);
CREATE INDEX op_timings_by_run ON op_timings(run_id);
CREATE INDEX op_timings_by_op ON op_timings(op, dtype, shape);  -- calibration reads by kind
)sql",
      // 2: run status 'stopped' (interrupted by the user). SQLite cannot change a CHECK
      // constraint in place, so every table is rebuilt (https://sqlite.org/lang_altertable.html,
      // "Making Other Kinds Of Table Schema Changes"): the copies first, children
      // referencing the new runs, the old tables dropped children first (so that dropping
      // runs cascades to nothing), then renamed back, which rewrites the REFERENCES
      // clauses. The id sequence is carried over, so deleted ids stay unused.
      R"sql(
CREATE TABLE runs_v2 (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created_at TEXT NOT NULL,
  plan_json TEXT NOT NULL,
  model TEXT NOT NULL,
  hardware TEXT NOT NULL,
  host TEXT NOT NULL,
  backend TEXT NOT NULL,
  versions TEXT NOT NULL,
  predicted_json TEXT NOT NULL,
  measured_json TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'oom', 'failed', 'stopped')),
  error_message TEXT NOT NULL,
  steps_planned INTEGER NOT NULL,
  tokens_per_s REAL,
  step_time_s REAL,
  peak_bytes INTEGER NOT NULL,
  predicted_peak_bytes INTEGER NOT NULL,
  predicted_step_time_s REAL
);
INSERT INTO runs_v2 SELECT * FROM runs;
DELETE FROM sqlite_sequence WHERE name = 'runs_v2';
INSERT INTO sqlite_sequence (name, seq) SELECT 'runs_v2', seq FROM sqlite_sequence WHERE name = 'runs';
CREATE TABLE steps_v2 (
  run_id INTEGER NOT NULL REFERENCES runs_v2(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  loss REAL,
  time_s REAL,
  tokens_per_s REAL,
  peak_bytes INTEGER NOT NULL
);
INSERT INTO steps_v2 SELECT * FROM steps;
CREATE TABLE op_timings_v2 (
  run_id INTEGER NOT NULL REFERENCES runs_v2(id) ON DELETE CASCADE,
  op TEXT NOT NULL,
  shape TEXT NOT NULL,
  dtype TEXT NOT NULL,
  flops REAL,
  bytes REAL,
  time_s REAL,
  count INTEGER NOT NULL
);
INSERT INTO op_timings_v2 SELECT * FROM op_timings;
DROP TABLE op_timings;
DROP TABLE steps;
DROP TABLE runs;
ALTER TABLE runs_v2 RENAME TO runs;
ALTER TABLE steps_v2 RENAME TO steps;
ALTER TABLE op_timings_v2 RENAME TO op_timings;
CREATE INDEX steps_by_run ON steps(run_id, step);
CREATE INDEX op_timings_by_run ON op_timings(run_id);
CREATE INDEX op_timings_by_op ON op_timings(op, dtype, shape);
)sql",
  };
  return migrations;
}

namespace schema {
namespace {

const char* const kExpected =
    "expected an llmplan profile database (SQLite, application_id 0x4C4C4D50)";

struct FileIdentity {
  int64_t application_id = 0;
  int64_t user_version = 0;
  int64_t tables = 0;  // tables, indexes and views in the schema
};

Result<int64_t> read_integer(sqlite3* db, const std::string& path, std::string_view sql) {
  Result<sqlite::Statement> stmt = sqlite::Statement::prepare(db, path, sql);
  if (!stmt.ok()) return stmt.status();
  Result<bool> row = stmt->step();
  if (!row.ok()) return row.status();
  if (!*row) return Status::runtime(path + ": " + std::string(sql) + " returned no row");
  return stmt->integer(0);
}

Result<FileIdentity> read_identity(sqlite3* db, const std::string& path) {
  FileIdentity identity;
  for (auto [field, sql] : {std::pair{&identity.application_id, "PRAGMA application_id"},
                            std::pair{&identity.user_version, "PRAGMA user_version"},
                            std::pair{&identity.tables, "SELECT count(*) FROM sqlite_master"}}) {
    Result<int64_t> value = read_integer(db, path, sql);
    if (!value.ok()) {
      // SQLite answers some damaged schemas with "out of memory" without allocating
      // anything large (fuzz_profile_db found one: a schema page of spliced records).
      // Reading these three integers needs no memory to speak of, so it is the file's fault.
      const bool damaged_schema = (sqlite3_errcode(db) & 0xff) == SQLITE_NOMEM;
      if (value.status().kind() != ErrorKind::bad_input && !damaged_schema) return value.status();
      // The file's fault (e.g. "file is not a database"): say what it is and what we want.
      const std::string what =
          damaged_schema ? "SQLite cannot read its schema (\"out of memory\" on a damaged file)" : sqlite3_errmsg(db);
      return Status::bad_input(path + ": " + what + "; " + kExpected);
    }
    *field = *value;
  }
  return identity;
}

// OK for one of our files at a version we know, or an empty file; else why not.
Status judge(const FileIdentity& identity, const std::string& path, size_t known_version) {
  char text[160];
  if (identity.application_id == kProfileApplicationId) {
    if (identity.user_version <= static_cast<int64_t>(known_version)) return Status::ok();
    std::snprintf(text, sizeof text,
                  "profile database schema version %lld is newer than this llmplan's (%zu); "
                  "use a newer llmplan or another database",
                  static_cast<long long>(identity.user_version), known_version);
  } else if (identity.application_id != 0) {
    std::snprintf(text, sizeof text,
                  "a SQLite database of another application (application_id 0x%08llX)",
                  static_cast<unsigned long long>(identity.application_id) & 0xffffffffULL);
  } else if (identity.tables > 0 || identity.user_version != 0) {
    std::snprintf(
        text, sizeof text,
        "a SQLite database of something else (%lld schema objects, no llmplan application_id)",
        static_cast<long long>(identity.tables));
  } else {
    return Status::ok();  // empty: migrate() makes it ours
  }
  std::string message = path + ": " + text;
  if (identity.application_id != kProfileApplicationId) message += std::string("; ") + kExpected;
  return Status::bad_input(std::move(message));
}

Status migrate_locked(sqlite3* db, const std::string& path,
                      const std::vector<std::string>& migrations) {
  Result<FileIdentity> identity = read_identity(db, path);  // again: another process may have won
  if (!identity.ok()) return identity.status();
  if (Status s = judge(*identity, path, migrations.size()); !s) return s;
  for (size_t v = static_cast<size_t>(identity->user_version); v < migrations.size(); ++v) {
    Status s =
        sqlite::exec(db, path, migrations[v], "applying schema migration " + std::to_string(v + 1));
    if (!s) return s;
  }
  // PRAGMAs take no bound parameters; these are the code's own constants, not outside values.
  return sqlite::exec(db, path,
                      "PRAGMA user_version = " + std::to_string(migrations.size()) +
                          "; PRAGMA application_id = " + std::to_string(kProfileApplicationId),
                      "recording the schema version");
}

}  // namespace

Status check_file(sqlite3* db, const std::string& path,
                  const std::vector<std::string>& migrations) {
  // One snapshot: another process may commit the first migration between single reads,
  // and tables without the application_id would look like somebody else's database.
  return sqlite::in_read_transaction(db, path, [&] {
    Result<FileIdentity> identity = read_identity(db, path);
    return identity.ok() ? judge(*identity, path, migrations.size()) : identity.status();
  });
}

Status migrate(sqlite3* db, const std::string& path, const std::vector<std::string>& migrations) {
  // The usual case, up to date, needs no write lock. Both values change in one commit, so
  // reads that straddle it at worst send us down the locked path, which checks again.
  Result<int64_t> version = read_integer(db, path, "PRAGMA user_version");
  Result<int64_t> app = read_integer(db, path, "PRAGMA application_id");
  if (version.ok() && app.ok() && *app == kProfileApplicationId &&
      *version == static_cast<int64_t>(migrations.size())) {
    return Status::ok();
  }
  return sqlite::in_write_transaction(db, path,
                                      [&] { return migrate_locked(db, path, migrations); });
}

}  // namespace schema
}  // namespace llmplan
