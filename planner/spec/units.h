// Human-friendly quantities: counts like "7B", "1.3e9", "350M", "1T"; byte sizes like
// "4GiB", "80GB", "512MiB"; and GiB formatting for tables. Pure functions.
#pragma once

#include <string>

#include "planner/spec/status.h"

namespace llmplan {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

// "7B" -> 7e9, "350M" -> 3.5e8, "1.5T" -> 1.5e12, "1.3e9" -> 1.3e9, "12k" -> 12000.
// Suffixes are case-insensitive. Fails (bad_input) on anything else, negatives, NaN/inf.
// `what` names the flag or field for the message, e.g. "--params".
Result<double> parse_count(const std::string& text, const std::string& what);

// "4GiB", "4 GiB", "80GB" (1e9), "512MiB", "0" -> bytes. A bare number is bytes.
Result<double> parse_bytes(const std::string& text, const std::string& what);

// 12.3456e9 bytes -> "11.50 GiB".
std::string format_gib(double bytes, int decimals = 2);

// 6.74e9 -> "6.74B", 1.24e8 -> "124M".
std::string format_count(double count);

}  // namespace llmplan
