#include "profiles/profile_store.h"

#include <sqlite3.h>

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

#include "profiles/schema.h"
#include "profiles/sqlite_statement.h"

namespace llmplan {

using sqlite::Statement;

const char* to_string(RunStatus v) {
  switch (v) {
    case RunStatus::running: return "running";
    case RunStatus::ok: return "ok";
    case RunStatus::oom: return "oom";
    case RunStatus::failed: return "failed";
    case RunStatus::stopped: return "stopped";
  }
  return "?";
}

bool parse_enum(const std::string& s, RunStatus* out) {
  for (RunStatus v : {RunStatus::running, RunStatus::ok, RunStatus::oom, RunStatus::failed, RunStatus::stopped}) {
    if (s == to_string(v)) {
      *out = v;
      return true;
    }
  }
  return false;
}

namespace {

// The columns of `runs` in the order read_run() reads them.
constexpr const char* kRunColumns =
    "id, created_at, plan_json, model, hardware, host, backend, versions, predicted_json, "
    "measured_json, status, error_message, steps_planned, tokens_per_s, step_time_s, peak_bytes, "
    "predicted_peak_bytes, predicted_step_time_s";

std::string utc_now_iso8601() {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// JSON columns hold a whole JSON document or nothing, so export can always embed them.
Status check_json(const std::string& path, const char* field, const std::string& text) {
  if (text.empty() || nlohmann::json::accept(text)) return Status::ok();
  return Status::bad_input(path + ": run field " + field +
                           " is not valid JSON (expected a JSON document or empty)");
}

Status no_such_run(const std::string& path, int64_t run_id) {
  return Status::bad_input(path + ": no run with id " + std::to_string(run_id));
}

Result<RunStatus> read_status(const Statement& stmt, int column, const std::string& path) {
  RunStatus status = RunStatus::running;
  std::string text = stmt.text(column);
  if (parse_enum(text, &status)) return status;
  return Status::runtime(path + ": unknown run status \"" + text + "\"");
}

Result<RunRecord> read_run(const Statement& stmt, const std::string& path) {
  Result<RunStatus> status = read_status(stmt, 10, path);
  if (!status.ok()) return status.status();
  RunRecord run;
  run.id = stmt.integer(0);
  run.created_at = stmt.text(1);
  run.plan_json = stmt.text(2);
  run.model = stmt.text(3);
  run.hardware = stmt.text(4);
  run.host = stmt.text(5);
  run.backend = stmt.text(6);
  run.versions = stmt.text(7);
  run.predicted_json = stmt.text(8);
  run.measured_json = stmt.text(9);
  run.status = *status;
  run.error_message = stmt.text(11);
  run.steps_planned = stmt.integer(12);
  run.tokens_per_s = stmt.real(13);
  run.step_time_s = stmt.real(14);
  run.peak_bytes = stmt.integer(15);
  run.predicted_peak_bytes = stmt.integer(16);
  run.predicted_step_time_s = stmt.real(17);
  return run;
}

// Switching to WAL takes an exclusive lock without calling the busy handler, so when
// several processes open a new file at once the losers get SQLITE_BUSY at once: retry them
// for up to `busy_timeout_ms`. Once the file is in WAL (a persistent setting) this is a no-op.
Status enable_wal(sqlite3* db, const std::string& path, int busy_timeout_ms) {
  constexpr int kRetryMs = 10;
  auto keep_mode = [](void* out, int, char** values, char**) {
    *static_cast<std::string*>(out) = values[0] != nullptr ? values[0] : "";
    return 0;
  };
  for (int waited_ms = 0;; waited_ms += kRetryMs) {
    std::string mode;
    int rc = sqlite3_exec(db, "PRAGMA journal_mode = WAL", keep_mode, &mode, nullptr);
    if ((rc & 0xff) == SQLITE_BUSY && waited_ms < busy_timeout_ms) {
      sqlite3_sleep(kRetryMs);
      continue;
    }
    if (rc != SQLITE_OK) return sqlite::error(db, rc, path, "switching to WAL mode");
    if (mode == "wal" || mode == "memory") return Status::ok();  // ":memory:" has no WAL
    return Status::runtime(path + ": cannot switch the database to WAL mode (journal mode is \"" +
                           mode + "\")");
  }
}

// Per connection: foreign keys are off by default in SQLite and must be asked for on each.
// WAL lets readers run alongside one writer and survives a writer killed mid-transaction.
Status configure_connection(sqlite3* db, const std::string& path, int busy_timeout_ms) {
  Status status = sqlite::exec(db, path, "PRAGMA foreign_keys = ON", "enabling foreign keys");
  return status ? enable_wal(db, path, busy_timeout_ms) : status;
}

}  // namespace

void ProfileStore::SqliteCloser::operator()(sqlite3* db) const { sqlite3_close_v2(db); }

ProfileStore::ProfileStore(std::unique_ptr<sqlite3, SqliteCloser> db, std::string path,
                           ProfileStoreOptions options)
    : db_(std::move(db)), path_(std::move(path)), options_(std::move(options)) {}

Result<ProfileStore> ProfileStore::open(const std::string& path, ProfileStoreOptions options) {
  if (path.empty()) return Status::bad_input("profile database path is empty");
  if (options.migrations.empty()) options.migrations = builtin_migrations();
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::unique_ptr<sqlite3, SqliteCloser> db(raw);  // closes even a failed open's handle
  if (rc != SQLITE_OK) {
    return sqlite::error(
        raw, rc, path, "opening the profile database (does its folder exist and is it writable?)");
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);
  // Judge the file before changing anything in it, so a foreign file is left untouched.
  if (Status s = schema::check_file(raw, path, options.migrations); !s) return s;
  // A damaged file (SQLite's integrity_check: a torn write, a disk error, a hand edit) is
  // opened for reading only: writing into it could lose what is still readable.
  std::string damage;
  {
    Result<sqlite::Statement> check = sqlite::Statement::prepare(raw, path, "PRAGMA integrity_check(3)");
    if (!check.ok()) return check.status();
    for (Result<bool> row = check->step(); row.ok() && *row; row = check->step()) {
      const std::string line = check->text(0);
      if (line != "ok") damage += (damage.empty() ? "" : "; ") + line;
    }
  }
  if (!damage.empty()) {
    ProfileStore store(std::move(db), path, std::move(options));
    store.damage_ = std::move(damage);
    // Too old to read without a migration, which would write: nothing to offer.
    Result<sqlite::Statement> v = sqlite::Statement::prepare(store.db_.get(), path, "PRAGMA user_version");
    if (v.ok() && v->step().ok() && v->integer(0) != static_cast<int64_t>(store.options_.migrations.size())) return store.writable();
    return store;
  }
  if (Status s = configure_connection(raw, path, options.busy_timeout_ms); !s) return s;
  if (Status s = schema::migrate(raw, path, options.migrations); !s) return s;
  return ProfileStore(std::move(db), path, std::move(options));
}

Status ProfileStore::writable() const {
  if (damage_.empty()) return Status::ok();
  return Status::bad_input(path_ + ": the profile database is damaged (SQLite integrity_check: " + damage_ +
                           "); llmplan reads what is left but will not write to it. Recover it with `sqlite3 '" + path_ +
                           "' .recover | sqlite3 recovered.db` and give --db recovered.db, or move it away to start a new one");
}

Status ProfileStore::require_run(int64_t run_id) {
  Result<Statement> stmt = Statement::prepare(db_.get(), path_, "SELECT 1 FROM runs WHERE id = ?1");
  if (!stmt.ok()) return stmt.status();
  if (Status s = stmt->bind(run_id); !s) return s;
  Result<bool> row = stmt->step();
  if (!row.ok()) return row.status();
  return *row ? Status::ok() : no_such_run(path_, run_id);
}

Result<int64_t> ProfileStore::insert_run_row(const RunRecord& run) {
  for (auto [field, text] :
       {std::pair{"plan_json", &run.plan_json}, std::pair{"predicted_json", &run.predicted_json},
        std::pair{"measured_json", &run.measured_json}}) {
    if (Status s = check_json(path_, field, *text); !s) return s;
  }
  Result<Statement> stmt = Statement::prepare(
      db_.get(), path_,
      "INSERT INTO runs (created_at, plan_json, model, hardware, host, backend, versions, "
      "predicted_json, measured_json, status, error_message, steps_planned, tokens_per_s, "
      "step_time_s, peak_bytes, predicted_peak_bytes, predicted_step_time_s) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)");
  if (!stmt.ok()) return stmt.status();
  Status status =
      stmt->bind(run.created_at.empty() ? utc_now_iso8601() : run.created_at, run.plan_json,
                 run.model, run.hardware, run.host, run.backend, run.versions, run.predicted_json,
                 run.measured_json, std::string_view(to_string(run.status)), run.error_message,
                 run.steps_planned, run.tokens_per_s, run.step_time_s, run.peak_bytes,
                 run.predicted_peak_bytes, run.predicted_step_time_s);
  if (status) status = stmt->run();
  if (!status) return status;
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_.get()));
}

Status ProfileStore::insert_steps(int64_t run_id, const std::vector<StepRecord>& steps) {
  Result<Statement> stmt =
      Statement::prepare(db_.get(), path_,
                         "INSERT INTO steps (run_id, step, loss, time_s, tokens_per_s, peak_bytes) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!stmt.ok()) return stmt.status();
  for (const StepRecord& step : steps) {
    Status s =
        stmt->bind(run_id, step.step, step.loss, step.time_s, step.tokens_per_s, step.peak_bytes);
    if (s) s = stmt->run();
    if (!s) return s;
    stmt->reset();
  }
  return Status::ok();
}

Status ProfileStore::insert_op_timings(int64_t run_id, const std::vector<OpTiming>& timings) {
  Result<Statement> stmt = Statement::prepare(
      db_.get(), path_,
      "INSERT INTO op_timings (run_id, op, shape, dtype, flops, bytes, time_s, count) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  if (!stmt.ok()) return stmt.status();
  for (const OpTiming& t : timings) {
    Status s = stmt->bind(run_id, t.op, t.shape, t.dtype, t.flops, t.bytes, t.time_s, t.count);
    if (s) s = stmt->run();
    if (!s) return s;
    stmt->reset();
  }
  return Status::ok();
}

Result<int64_t> ProfileStore::insert_run(const RunRecord& run) {
  if (Status w = writable(); !w) return w;
  int64_t id = 0;
  Status status = sqlite::in_write_transaction(db_.get(), path_, [&]() -> Status {
    Result<int64_t> inserted = insert_run_row(run);
    if (!inserted.ok()) return inserted.status();
    id = *inserted;
    return Status::ok();
  });
  if (!status) return status;
  return id;
}

Status ProfileStore::add_steps(int64_t run_id, const std::vector<StepRecord>& steps) {
  if (Status w = writable(); !w) return w;
  return sqlite::in_write_transaction(db_.get(), path_, [&] {
    Status s = require_run(run_id);
    return s ? insert_steps(run_id, steps) : s;
  });
}

Status ProfileStore::add_op_timings(int64_t run_id, const std::vector<OpTiming>& timings) {
  if (Status w = writable(); !w) return w;
  return sqlite::in_write_transaction(db_.get(), path_, [&] {
    Status s = require_run(run_id);
    return s ? insert_op_timings(run_id, timings) : s;
  });
}

Status ProfileStore::finish_run(int64_t run_id, const RunOutcome& outcome) {
  if (Status w = writable(); !w) return w;
  if (Status s = check_json(path_, "measured_json", outcome.measured_json); !s) return s;
  return sqlite::in_write_transaction(db_.get(), path_, [&]() -> Status {
    Result<Statement> stmt = Statement::prepare(
        db_.get(), path_,
        "UPDATE runs SET status = ?1, error_message = ?2, measured_json = ?3, tokens_per_s = ?4, "
        "step_time_s = ?5, peak_bytes = ?6 WHERE id = ?7");
    if (!stmt.ok()) return stmt.status();
    Status s = stmt->bind(std::string_view(to_string(outcome.status)), outcome.error_message,
                          outcome.measured_json, outcome.tokens_per_s, outcome.step_time_s,
                          outcome.peak_bytes, run_id);
    if (s) s = stmt->run();
    if (s && sqlite3_changes(db_.get()) == 0) s = no_such_run(path_, run_id);
    return s;
  });
}

Result<int64_t> ProfileStore::record_run(const RunRecord& run, const std::vector<StepRecord>& steps,
                                         const std::vector<OpTiming>& timings) {
  if (Status w = writable(); !w) return w;
  int64_t id = 0;
  Status status = sqlite::in_write_transaction(db_.get(), path_, [&]() -> Status {
    Result<int64_t> inserted = insert_run_row(run);
    if (!inserted.ok()) return inserted.status();
    id = *inserted;
    Status s = insert_steps(id, steps);
    if (s) s = insert_op_timings(id, timings);
    if (s && options_.before_commit) options_.before_commit(id);
    return s;
  });
  if (!status) return status;
  return id;
}

Result<std::vector<RunSummary>> ProfileStore::list_runs() {
  Result<Statement> stmt = Statement::prepare(
      db_.get(), path_,
      "SELECT id, created_at, model, hardware, backend, status, steps_planned, "
      "(SELECT count(*) FROM steps WHERE steps.run_id = runs.id), tokens_per_s, step_time_s, "
      "peak_bytes, predicted_peak_bytes, predicted_step_time_s FROM runs ORDER BY id");
  if (!stmt.ok()) return stmt.status();
  std::vector<RunSummary> runs;
  for (;;) {
    Result<bool> row = stmt->step();
    if (!row.ok()) return row.status();
    if (!*row) return runs;
    Result<RunStatus> status = read_status(*stmt, 5, path_);
    if (!status.ok()) return status.status();
    runs.push_back({stmt->integer(0), stmt->text(1), stmt->text(2), stmt->text(3), stmt->text(4),
                    *status, stmt->integer(6), stmt->integer(7), stmt->real(8), stmt->real(9),
                    stmt->integer(10), stmt->integer(11), stmt->real(12)});
  }
}

Result<RunRecord> ProfileStore::get_run(int64_t run_id) {
  Result<Statement> stmt = Statement::prepare(
      db_.get(), path_, std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?1");
  if (!stmt.ok()) return stmt.status();
  if (Status s = stmt->bind(run_id); !s) return s;
  Result<bool> row = stmt->step();
  if (!row.ok()) return row.status();
  if (!*row) return no_such_run(path_, run_id);
  return read_run(*stmt, path_);
}

Result<std::vector<StepRecord>> ProfileStore::get_steps(int64_t run_id) {
  Result<Statement> stmt = Statement::prepare(
      db_.get(), path_,
      "SELECT step, loss, time_s, tokens_per_s, peak_bytes FROM steps WHERE run_id = ?1 "
      "ORDER BY step, rowid");
  if (!stmt.ok()) return stmt.status();
  if (Status s = stmt->bind(run_id); !s) return s;
  std::vector<StepRecord> steps;
  for (;;) {
    Result<bool> row = stmt->step();
    if (!row.ok()) return row.status();
    if (!*row) return steps;
    steps.push_back(
        {stmt->integer(0), stmt->real(1), stmt->real(2), stmt->real(3), stmt->integer(4)});
  }
}

Result<std::vector<OpTiming>> ProfileStore::get_op_timings(int64_t run_id) {
  Result<Statement> stmt = Statement::prepare(
      db_.get(), path_,
      "SELECT op, shape, dtype, flops, bytes, time_s, count FROM op_timings WHERE run_id = ?1 "
      "ORDER BY rowid");
  if (!stmt.ok()) return stmt.status();
  if (Status s = stmt->bind(run_id); !s) return s;
  std::vector<OpTiming> timings;
  for (;;) {
    Result<bool> row = stmt->step();
    if (!row.ok()) return row.status();
    if (!*row) return timings;
    timings.push_back({stmt->text(0), stmt->text(1), stmt->text(2), stmt->real(3), stmt->real(4),
                       stmt->real(5), stmt->integer(6)});
  }
}

Status ProfileStore::delete_run(int64_t run_id) {
  if (Status w = writable(); !w) return w;
  return sqlite::in_write_transaction(db_.get(), path_, [&]() -> Status {
    Result<Statement> stmt = Statement::prepare(db_.get(), path_, "DELETE FROM runs WHERE id = ?1");
    if (!stmt.ok()) return stmt.status();
    Status s = stmt->bind(run_id);
    if (s) s = stmt->run();  // steps and op_timings go with it: ON DELETE CASCADE
    if (s && sqlite3_changes(db_.get()) == 0) s = no_such_run(path_, run_id);
    return s;
  });
}

}  // namespace llmplan
