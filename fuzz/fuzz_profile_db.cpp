// Profile databases (`--db FILE`, profiles/profile_store.h): the input is written as the
// database file and opened with ProfileStore::open, then read as `llmplan profiles list`,
// `show ID` and `export ID` do. SQLite's own parser is Debian's and not instrumented; what
// is fuzzed is llmplan's handling of what it returns (foreign, future, damaged files,
// unexpected column contents).
#include "fuzz/fuzz_util.h"
#include "profiles/profile_store.h"

using namespace llmplan;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path db = fuzz::scratch_dir() / "profiles.db";
  // A WAL or journal left from the previous input would be replayed into this one.
  std::error_code ec;
  for (const char* suffix : {"-wal", "-shm", "-journal"}) fs::remove(db.string() + suffix, ec);
  const std::string path = fuzz::write_file(db, data, size);
  ProfileStoreOptions options;
  options.busy_timeout_ms = 0;  // no other process has the file
  Result<ProfileStore> store = ProfileStore::open(path, options);
  if (!store) {
    fuzz::expect_clear_error(store.status(), path);
    return 0;
  }
  Result<std::vector<RunSummary>> runs = store->list_runs();
  if (!runs) {
    if (runs.status().message().empty()) fuzz::violated("list_runs failed without a message");
    return 0;
  }
  (void)format_run_table(*runs);
  int shown = 0;
  for (const RunSummary& s : *runs) {
    if (++shown > 8) break;
    (void)store->get_run(s.id);
    (void)store->get_steps(s.id);
    (void)store->get_op_timings(s.id);
    Result<std::string> e = store->export_run_json(s.id);
    if (!e && e.status().message().empty()) fuzz::violated("export failed without a message");
  }
  return 0;
}
