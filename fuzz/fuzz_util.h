// Helpers shared by the libFuzzer targets (docs/design.md "CI matrix and fuzzing"). Each
// target hands the fuzz input to a loader exactly as the CLI does: written to a file, then
// read by the loader's file function, so the size check, the regular-file check and the
// parser all run.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "planner/spec/status.h"

namespace llmplan::fuzz {

// A folder of this process's own under $TMPDIR (default /tmp), removed at a normal exit.
// One per process, so `-jobs`/`-fork` workers never share files.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/llmplan-fuzz-XXXXXX";
    if (!mkdtemp(templ.data())) {
      std::perror("llmplan fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return std::filesystem::path(templ);
  }();
  return dir;
}

// Writes the input to `path` (replacing it) and returns the path as a string.
inline std::string write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "llmplan fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path.string();
}

inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  return write_file(scratch_dir() / name, data, size);
}

// Fails the run (a libFuzzer crash with the reason on stderr).
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "llmplan fuzz: contract violated: %s\n", what.c_str());
  std::abort();
}

// The loaders' contract on bad input (docs/design.md "Error handling"): a bad_input
// Status (the CLI's exit code 2) with a message naming the file.
inline void expect_clear_error(const Status& s, const std::string& path) {
  if (s.is_ok()) violated("a failed Result with an ok Status");
  if (s.kind() != ErrorKind::bad_input) violated("a runtime error for bad input: " + s.message());
  if (s.message().find(path) == std::string::npos) violated("a message that does not name the file: " + s.message());
}

// A figure the CLI prints from an accepted file: finite and not negative, else the loader
// let an absurd value through to a formula.
inline void expect_finite(double v, const char* what) {
  if (!std::isfinite(v) || v < 0) violated(std::string(what) + " = " + std::to_string(v) + " from an accepted file");
}

}  // namespace llmplan::fuzz
