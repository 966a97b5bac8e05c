// The mindformers format (launch/launch.h). Not written yet: every call is refused with a clear
// message until it is.
#include "launch/formats.h"

namespace llmplan::launch_formats {

Result<ExportResult> export_mindformers(const PlanFile&, const ExportOptions&) {
  return Status::bad_input("--to mindformers: not implemented yet");
}

Result<ImportedConfig> import_mindformers(const std::vector<LaunchFile>&, const ImportOptions&, const std::string& origin) {
  return Status::bad_input(origin + ": reading mindformers configurations is not implemented yet");
}

}  // namespace llmplan::launch_formats
