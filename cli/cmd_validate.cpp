// llmplan validate: predict published training runs with their own plans and report the
// relative errors (see data/reference/README.md for the format and the comparison rules).
#include "cli/commands.h"
#include "cli/common.h"

namespace llmplan::cli {

Runner register_validate(CLI::App* sub) {
  (void)sub;
  return []() { return report(Status::runtime("validate: not implemented yet")); };
}

}  // namespace llmplan::cli
