// The torchtitan format (launch/launch.h). Not written yet: every call is refused with a clear
// message until it is.
#include "launch/formats.h"

namespace llmplan::launch_formats {

Result<ExportResult> export_torchtitan(const PlanFile&, const ExportOptions&) {
  return Status::bad_input("--to torchtitan: not implemented yet");
}

Result<ImportedConfig> import_torchtitan(const std::vector<LaunchFile>&, const ImportOptions&, const std::string& origin) {
  return Status::bad_input(origin + ": reading torchtitan configurations is not implemented yet");
}

}  // namespace llmplan::launch_formats
