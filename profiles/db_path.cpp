// default_db_path: where the profile database lives when nobody says.
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "profiles/profile_store.h"

namespace llmplan {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

Result<std::string> default_db_path(const std::string& explicit_path) {
  namespace fs = std::filesystem;
  fs::path path = explicit_path;
  if (path.empty()) path = env("LLMPLAN_DB");
  // The XDG base-directory rule: data under $XDG_DATA_HOME, which defaults to ~/.local/share.
  if (path.empty() && !env("XDG_DATA_HOME").empty()) {
    path = fs::path(env("XDG_DATA_HOME")) / "llmplan" / "profiles.db";
  }
  if (path.empty()) {
    if (env("HOME").empty()) {
      return Status::bad_input(
          "no profile database path: HOME is not set; pass --db or set LLMPLAN_DB");
    }
    path = fs::path(env("HOME")) / ".local" / "share" / "llmplan" / "profiles.db";
  }
  std::error_code error;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), error);
  if (error) {
    return Status::bad_input(path.string() + ": cannot create the folder " +
                             path.parent_path().string() + ": " + error.message());
  }
  return path.string();
}

}  // namespace llmplan
