// Internal to profiles/: recognising a profile database and bringing its schema up to the
// version the code knows. The schema version is `PRAGMA user_version`; our files carry
// `PRAGMA application_id` = kProfileApplicationId, set by the first migration's transaction.
//
// Thread-safety: as the connection (one thread at a time); many processes may migrate the
// same file at once — the migration transaction serialises them and each re-checks.
#pragma once

#include <sqlite3.h>

#include <string>
#include <vector>

#include "planner/spec/status.h"

namespace llmplan::schema {

// OK when `db` is a profile database at a version <= migrations.size(), or an empty
// database that migrate() will initialise. Else bad_input naming `path` and what was
// expected: not SQLite at all, another application's SQLite file, or a newer schema.
// Reads only, so a foreign file is never modified.
Status check_file(sqlite3* db, const std::string& path, const std::vector<std::string>& migrations);

// Applies migrations[user_version..] and sets user_version and application_id, all in one
// BEGIN IMMEDIATE transaction (nothing changes when one fails). A no-op when up to date.
Status migrate(sqlite3* db, const std::string& path, const std::vector<std::string>& migrations);

}  // namespace llmplan::schema
