// format_run_table: runs as aligned plain text, predicted beside measured.
#include <cstdio>

#include "profiles/profile_store.h"

namespace llmplan {

std::string format_run_table(const std::vector<RunSummary>& runs) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char line[256];
  std::snprintf(line, sizeof line,
                "%6s  %-20s  %-16s  %-16s  %-7s  %-7s  %11s  %10s  %10s  %10s  %10s\n", "id",
                "created (UTC)", "model", "hardware", "backend", "status", "steps", "tokens/s",
                "step s", "peak GiB", "pred GiB");
  std::string table = line;
  for (const RunSummary& r : runs) {
    std::string steps = std::to_string(r.steps_recorded) + "/" + std::to_string(r.steps_planned);
    std::snprintf(
        line, sizeof line,
        "%6lld  %-20.20s  %-16.16s  %-16.16s  %-7.7s  %-7s  %11s  %10.1f  %10.3f  %10.2f  %10.2f\n",
        static_cast<long long>(r.id), r.created_at.c_str(), r.model.c_str(), r.hardware.c_str(),
        r.backend.c_str(), to_string(r.status), steps.c_str(), r.tokens_per_s, r.step_time_s,
        r.peak_bytes / kGiB, r.predicted_peak_bytes / kGiB);
    table += line;
  }
  return table;
}

}  // namespace llmplan
