#include "planner/spec/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace llmplan {
namespace {

std::string lower_trimmed(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (!std::isspace(static_cast<unsigned char>(c))) out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// Splits "1.5gib" into 1.5 and "gib"; false when no number leads the text.
bool split_number(const std::string& s, double* number, std::string* suffix) {
  if (s.empty()) return false;
  char* end = nullptr;
  *number = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return false;
  *suffix = std::string(end);
  return std::isfinite(*number);
}

}  // namespace

Result<double> parse_count(const std::string& text, const std::string& what) {
  const std::string s = lower_trimmed(text);
  double n = 0;
  std::string suffix;
  const std::string expected = " (expected a positive count such as 7B, 350M, 1.3e9)";
  if (!split_number(s, &n, &suffix)) return Status::bad_input(what + ": '" + text + "' is not a number" + expected);
  double scale = 1;
  if (suffix == "k") scale = 1e3;
  else if (suffix == "m") scale = 1e6;
  else if (suffix == "b" || suffix == "g") scale = 1e9;
  else if (suffix == "t") scale = 1e12;
  else if (!suffix.empty()) return Status::bad_input(what + ": unknown suffix '" + suffix + "' in '" + text + "'" + expected);
  if (n <= 0) return Status::bad_input(what + ": '" + text + "' must be positive" + expected);
  return n * scale;
}

Result<double> parse_bytes(const std::string& text, const std::string& what) {
  const std::string s = lower_trimmed(text);
  double n = 0;
  std::string suffix;
  const std::string expected = " (expected a size such as 4GiB, 512MiB, 80GB)";
  if (!split_number(s, &n, &suffix)) return Status::bad_input(what + ": '" + text + "' is not a size" + expected);
  double scale = 1;
  if (suffix.empty() || suffix == "b") scale = 1;
  else if (suffix == "kib") scale = 1024.0;
  else if (suffix == "mib") scale = kMiB;
  else if (suffix == "gib" || suffix == "g") scale = kGiB;
  else if (suffix == "tib") scale = kGiB * 1024.0;
  else if (suffix == "kb") scale = 1e3;
  else if (suffix == "mb") scale = 1e6;
  else if (suffix == "gb") scale = 1e9;
  else if (suffix == "tb") scale = 1e12;
  else return Status::bad_input(what + ": unknown unit '" + suffix + "' in '" + text + "'" + expected);
  if (n < 0) return Status::bad_input(what + ": '" + text + "' must not be negative" + expected);
  return n * scale;
}

std::string format_gib(double bytes, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f GiB", decimals, bytes / kGiB);
  return buf;
}

std::string format_count(double count) {
  char buf[64];
  const double a = std::fabs(count);
  if (a >= 1e12) std::snprintf(buf, sizeof buf, "%.3gT", count / 1e12);
  else if (a >= 1e9) std::snprintf(buf, sizeof buf, "%.3gB", count / 1e9);
  else if (a >= 1e6) std::snprintf(buf, sizeof buf, "%.3gM", count / 1e6);
  else if (a >= 1e3) std::snprintf(buf, sizeof buf, "%.3gk", count / 1e3);
  else std::snprintf(buf, sizeof buf, "%.3g", count);
  return buf;
}

}  // namespace llmplan
