// Internal to profiles/: a prepared SQLite statement (RAII over sqlite3_stmt) whose values
// are always bound by position, so no value is ever spliced into SQL text; and the one
// place that turns a SQLite result code into a Status naming the database file.
//
// Thread-safety: as the connection it was prepared on (one thread at a time).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "planner/spec/status.h"

namespace llmplan::sqlite {

// "<path>: <doing>: <SQLite's message>". The file's fault (not a database, corrupt, a
// schema SQLite cannot read or without our tables, cannot be opened, a constraint such as
// a missing run) is bad_input; the rest (locked, I/O, full disk, out of memory) is runtime. Read right after the failing call: SQLite's message is per call.
Status error(sqlite3* db, int rc, const std::string& path, std::string_view doing);

class Statement {
 public:
  // Prepares one statement of `sql` on `db`; errors name `path`.
  static Result<Statement> prepare(sqlite3* db, const std::string& path, std::string_view sql);

  // Binds `values` to ?1..?N in order: integers, doubles (NaN is stored as NULL) and text.
  template <class... Values>
  Status bind(const Values&... values) {
    int index = 0;
    int rc = SQLITE_OK;
    ((rc = rc == SQLITE_OK ? bind_one(++index, values) : rc), ...);
    return rc == SQLITE_OK ? Status::ok() : error(rc, "binding values");
  }
  // Steps once: true when a row is ready to read, false when the statement is done.
  Result<bool> step();
  // Steps until done, ignoring rows (for INSERT, UPDATE, DELETE, DDL).
  Status run();
  // Ready to bind and step again; bound values are replaced by the next bind().
  void reset();

  int64_t integer(int column) const { return sqlite3_column_int64(stmt_.get(), column); }
  double real(int column) const;  // NULL reads as NaN (SQLite stores NaN as NULL)
  std::string text(int column) const;

 private:
  struct Finalizer {
    void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
  };
  Statement(sqlite3_stmt* stmt, sqlite3* db, const std::string& path)
      : stmt_(stmt), db_(db), path_(&path) {}
  Status error(int rc, std::string_view doing) const;
  int bind_one(int index, int64_t value) { return sqlite3_bind_int64(stmt_.get(), index, value); }
  int bind_one(int index, int value) { return bind_one(index, static_cast<int64_t>(value)); }
  int bind_one(int index, double value) { return sqlite3_bind_double(stmt_.get(), index, value); }
  int bind_one(int index, std::string_view value) {
    return sqlite3_bind_text64(stmt_.get(), index, value.data(), value.size(), SQLITE_TRANSIENT,
                               SQLITE_UTF8);
  }

  std::unique_ptr<sqlite3_stmt, Finalizer> stmt_;
  sqlite3* db_;
  const std::string* path_;  // the store's path, which outlives its statements
};

// Runs `sql` (one or more statements, no values) to completion.
Status exec(sqlite3* db, const std::string& path, const std::string& sql, std::string_view doing);

// Runs `body` between BEGIN IMMEDIATE and COMMIT, and rolls back when either fails.
// IMMEDIATE takes the write lock up front, so a writer waits for another (busy_timeout)
// instead of failing when a read transaction cannot be upgraded to a write one.
Status in_write_transaction(sqlite3* db, const std::string& path,
                            const std::function<Status()>& body);
// Runs `body` in a read transaction (BEGIN DEFERRED): its reads see one snapshot.
Status in_read_transaction(sqlite3* db, const std::string& path,
                           const std::function<Status()>& body);

}  // namespace llmplan::sqlite
