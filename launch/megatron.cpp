// The megatron format (launch/launch.h). Not written yet: every call is refused with a clear
// message until it is.
#include "launch/formats.h"

namespace llmplan::launch_formats {

Result<ExportResult> export_megatron(const PlanFile&, const ExportOptions&) {
  return Status::bad_input("--to megatron: not implemented yet");
}

Result<ImportedConfig> import_megatron(const std::vector<LaunchFile>&, const ImportOptions&, const std::string& origin) {
  return Status::bad_input(origin + ": reading megatron configurations is not implemented yet");
}

}  // namespace llmplan::launch_formats
