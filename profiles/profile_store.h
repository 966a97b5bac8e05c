// ProfileStore: the SQLite database of every run llmplan predicted and measured — the run
// (its plan file, hardware, versions, predicted and measured breakdowns, outcome), its
// per-step measurements and its per-op timings, which calibration later fits the time
// model to. One file, default ~/.local/share/llmplan/profiles.db (see default_db_path).
//
// Thread-safety: one ProfileStore per thread (a store may move between threads, but is
// never used by two at once). Many stores, in one process or many, may share a file: the
// database is in WAL mode, every write is one BEGIN IMMEDIATE transaction, and a writer
// waits up to ProfileStoreOptions::busy_timeout_ms for another to finish. A process killed
// mid-write leaves the file as it was before that write.
//
// Errors are Status values that name the file: bad_input for a file that is not (or not
// yet understood as) a profile database and for ids that do not exist; runtime for I/O
// failures and lock timeouts. No exception leaves this API.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "planner/spec/status.h"

struct sqlite3;

namespace llmplan {

// `PRAGMA application_id` of a profile database: 'LLMP'. A file without it is not ours.
inline constexpr int32_t kProfileApplicationId = 0x4C4C4D50;

// running: started, not finished (or its process died without a word: a SIGKILL, a power
// cut); ok, oom: finished; failed: an error, a diverged loss, a SIGTERM (the launcher after
// another rank died, or a kill); stopped: interrupted by the user (SIGINT) before it
// finished. Every step a run completed has its `steps` row, however it ended.
enum class RunStatus { running, ok, oom, failed, stopped };
const char* to_string(RunStatus v);                     // "running", "ok", "oom", "failed", "stopped"
bool parse_enum(const std::string& s, RunStatus* out);  // false (and *out kept) if unknown

// One run: a row of table `runs`. JSON fields hold a whole JSON document or are empty.
struct RunRecord {
  int64_t id = 0;              // assigned by the store; 0 before insert
  std::string created_at;      // UTC ISO-8601, "2024-05-01T12:34:56Z"; empty = now
  std::string plan_json;       // the full plan file that was run
  std::string model;           // e.g. "gpt2-small"
  std::string hardware;        // GPU (or CPU) name, e.g. "NVIDIA H200"
  std::string host;            // host name
  std::string backend;         // "cpu", "cuda" or "proxy"
  std::string versions;        // e.g. "llmplan 0.1.0; GCC 12.2.0; OpenBLAS 0.3.21"
  std::string predicted_json;  // predicted memory/time breakdown
  std::string measured_json;   // measured breakdown; empty until finished
  RunStatus status = RunStatus::running;
  std::string error_message;         // why it failed or ran out of memory; empty if not
  int64_t steps_planned = 0;         // steps the run was asked to execute
  double tokens_per_s = 0;           // measured, tokens/s; 0 until finished
  double step_time_s = 0;            // measured, s per step; 0 until finished
  int64_t peak_bytes = 0;            // measured peak memory per GPU, bytes; 0 until finished
  int64_t predicted_peak_bytes = 0;  // bytes
  double predicted_step_time_s = 0;  // s
};

// How a run ended: what finish_run writes over the run's measured columns.
struct RunOutcome {
  RunStatus status = RunStatus::ok;
  std::string error_message;
  std::string measured_json;
  double tokens_per_s = 0;
  double step_time_s = 0;
  int64_t peak_bytes = 0;
};

// One training step's measurement: a row of `steps`. NaN (a diverged loss) round-trips.
struct StepRecord {
  int64_t step = 0;  // 0-based step index
  double loss = 0;
  double time_s = 0;  // wall time of the step, s
  double tokens_per_s = 0;
  int64_t peak_bytes = 0;  // peak memory during the step, bytes
};

// Timing of one kind of operation at one shape: a row of `op_timings`, for calibration.
struct OpTiming {
  std::string op;     // op kind, e.g. "matmul", "attention", "allreduce"
  std::string shape;  // e.g. "768x3072x2048" (m x n x k for a GEMM)
  std::string dtype;  // e.g. "bf16"
  double flops = 0;   // FLOPs of one call
  double bytes = 0;   // bytes moved by one call
  double time_s = 0;  // mean s per call, over `count` calls
  int64_t count = 0;  // calls measured
};

// What a listing shows of a run.
struct RunSummary {
  int64_t id = 0;
  std::string created_at;
  std::string model;
  std::string hardware;
  std::string backend;
  RunStatus status = RunStatus::running;
  int64_t steps_planned = 0;
  int64_t steps_recorded = 0;  // rows in `steps` for this run
  double tokens_per_s = 0;
  double step_time_s = 0;
  int64_t peak_bytes = 0;
  int64_t predicted_peak_bytes = 0;
  double predicted_step_time_s = 0;
};

struct ProfileStoreOptions {
  // How long a write waits for another writer's transaction to end before failing, ms.
  // Default: 10000.
  int busy_timeout_ms = 10000;
  // Schema migrations to bring the file up to; entry i takes version i to i + 1.
  // Default (empty): builtin_migrations(). Tests pass a longer list to exercise upgrades.
  std::vector<std::string> migrations;
  // Test hook: called inside record_run after all its rows are written, before COMMIT,
  // with the new run's id. Default: none.
  std::function<void(int64_t run_id)> before_commit;
};

// The schema's migrations, oldest first; the schema version is their count. Migration 1
// creates the tables. Append new migrations; never edit one that has shipped.
const std::vector<std::string>& builtin_migrations();

// The database path to use: `explicit_path` if not empty, else $LLMPLAN_DB if set and not
// empty, else $XDG_DATA_HOME/llmplan/profiles.db, else ~/.local/share/llmplan/profiles.db.
// Creates the chosen path's parent folder when missing. Error (bad_input) when the folder
// cannot be created or there is no $HOME to put the default under.
Result<std::string> default_db_path(const std::string& explicit_path = "");

class ProfileStore {
 public:
  // Opens `path`, creating and initialising it when missing or empty, and applies the
  // migrations it lacks (all in one transaction). Error (bad_input) when the file cannot
  // be opened or created, is not a SQLite database, is a SQLite database of something else
  // (no llmplan application_id and other tables), or has a newer schema than this code. A
  // file that fails SQLite's integrity check opens read-only (damage() says why) unless it
  // would need a migration (then bad_input).
  static Result<ProfileStore> open(const std::string& path, ProfileStoreOptions options = {});

  ProfileStore(ProfileStore&&) noexcept = default;
  ProfileStore& operator=(ProfileStore&&) noexcept = default;
  ~ProfileStore() = default;

  const std::string& path() const { return path_; }
  // Empty for a sound file; else what SQLite's integrity_check found. A damaged file opens
  // for reading (list, get, export) and every write is bad_input saying how to recover it.
  const std::string& damage() const { return damage_; }

  // Writes the run row alone; returns its id. REQUIRES: JSON fields valid JSON or empty
  // (else bad_input, nothing written). `run.id` is ignored.
  Result<int64_t> insert_run(const RunRecord& run);
  // Appends rows to run `run_id`. Error (bad_input, nothing written) if there is no such run.
  Status add_steps(int64_t run_id, const std::vector<StepRecord>& steps);
  Status add_op_timings(int64_t run_id, const std::vector<OpTiming>& timings);
  // Records how run `run_id` ended. Error (bad_input) if there is no such run or
  // measured_json is not valid JSON.
  Status finish_run(int64_t run_id, const RunOutcome& outcome);
  // insert_run + add_steps + add_op_timings in ONE transaction: all rows or none.
  Result<int64_t> record_run(const RunRecord& run, const std::vector<StepRecord>& steps,
                             const std::vector<OpTiming>& timings);

  // All runs, oldest (lowest id) first.
  Result<std::vector<RunSummary>> list_runs();
  // Error (bad_input) if there is no run `run_id`.
  Result<RunRecord> get_run(int64_t run_id);
  Result<std::vector<StepRecord>> get_steps(int64_t run_id);     // by step; empty if none
  Result<std::vector<OpTiming>> get_op_timings(int64_t run_id);  // in insertion order
  // Deletes the run with its steps and op timings. Error (bad_input) if there is no such run.
  Status delete_run(int64_t run_id);
  // {"run": {..., "plan": {...}, "predicted": {...}, "measured": {...}}, "steps": [...],
  //  "op_timings": [...]}: JSON columns embedded as JSON (null when empty). Error (runtime)
  // if a stored JSON column does not parse.
  Result<std::string> export_run_json(int64_t run_id);

 private:
  struct SqliteCloser {
    void operator()(sqlite3* db) const;
  };
  ProfileStore(std::unique_ptr<sqlite3, SqliteCloser> db, std::string path,
               ProfileStoreOptions options);

  Result<int64_t> insert_run_row(const RunRecord& run);
  Status insert_steps(int64_t run_id, const std::vector<StepRecord>& steps);
  Status insert_op_timings(int64_t run_id, const std::vector<OpTiming>& timings);
  Status require_run(int64_t run_id);
  Status writable() const;  // bad_input when damaged

  std::unique_ptr<sqlite3, SqliteCloser> db_;
  std::string path_;
  ProfileStoreOptions options_;
  std::string damage_;
};

// A plain-text table of runs, one line per run under a header line, for `llmplan profiles`.
std::string format_run_table(const std::vector<RunSummary>& runs);

}  // namespace llmplan
