#include "profiles/sqlite_statement.h"

#include <limits>

namespace llmplan::sqlite {

Status error(sqlite3* db, int rc, const std::string& path, std::string_view doing) {
  std::string message = path + ": " + std::string(doing) + ": " +
                        (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {  // primary code; the extended code is in the high bits
    // SQLITE_ERROR: our SQL is fixed (and tested), so SQLite refusing it names a fault of
    // the file -- a schema it cannot read ("unsupported file format": a header's schema
    // format past 4) or tables that are not the ones a profile database of its version has.
    case SQLITE_ERROR:
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_CANTOPEN:
    case SQLITE_CONSTRAINT:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH: return Status::bad_input(std::move(message));
    default: return Status::runtime(std::move(message));
  }
}

Result<Statement> Statement::prepare(sqlite3* db, const std::string& path, std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return sqlite::error(db, rc, path, "preparing SQL");
  }
  return Statement(stmt, db, path);
}

Status Statement::error(int rc, std::string_view doing) const {
  return sqlite::error(db_, rc, *path_, doing);
}

Result<bool> Statement::step() {
  int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  std::string sql = sqlite3_sql(stmt_.get());
  for (char& c : sql) c = (c == '\n' ? ' ' : c);
  if (sql.size() > 48) sql = sql.substr(0, 45) + "...";
  return error(rc, "running \"" + sql + "\"");
}

Status Statement::run() {
  for (;;) {
    Result<bool> row = step();
    if (!row.ok()) return row.status();
    if (!*row) return Status::ok();
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_.get());
  sqlite3_clear_bindings(stmt_.get());
}

double Statement::real(int column) const {
  if (sqlite3_column_type(stmt_.get(), column) == SQLITE_NULL) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return sqlite3_column_double(stmt_.get(), column);
}

std::string Statement::text(int column) const {
  const unsigned char* chars = sqlite3_column_text(stmt_.get(), column);
  int bytes = sqlite3_column_bytes(stmt_.get(), column);  // after _text: the UTF-8 length
  return chars == nullptr ? std::string()
                          : std::string(reinterpret_cast<const char*>(chars), bytes);
}

Status exec(sqlite3* db, const std::string& path, const std::string& sql, std::string_view doing) {
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::ok() : error(db, rc, path, doing);
}

namespace {

Status in_transaction(sqlite3* db, const std::string& path, const char* begin,
                      const std::function<Status()>& body) {
  Status status = exec(db, path, begin, "starting a transaction");
  if (!status) return status;
  status = body();
  if (status) status = exec(db, path, "COMMIT", "committing");
  // After a failed COMMIT the transaction may still be open; when SQLite already rolled it
  // back this ROLLBACK fails harmlessly.
  if (!status) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  return status;
}

}  // namespace

Status in_write_transaction(sqlite3* db, const std::string& path,
                            const std::function<Status()>& body) {
  return in_transaction(db, path, "BEGIN IMMEDIATE", body);
}

Status in_read_transaction(sqlite3* db, const std::string& path,
                           const std::function<Status()>& body) {
  return in_transaction(db, path, "BEGIN DEFERRED", body);
}

}  // namespace llmplan::sqlite
