// The formats behind launch.h, one source file each. Internal to llmplan_launch: callers
// use export_plan / import_files, which dispatch here.
//
// Each exporter writes every plan field its framework has a key for and refuses (bad_input
// naming the plan field, e.g. "plan.zero: torchtitan has no ZeRO-1 ...") one it cannot
// express; each importer fills a PlanFile from the keys it knows, lists every other key in
// ImportedConfig::unknown_keys and refuses contradictory ones naming the key.
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "launch/launch.h"

namespace llmplan::launch_formats {

// The name a message gives file `name` of `origin` (a folder of an export's files, or the
// file itself): "<folder>/<name>", or `origin` when it already names the file.
std::string file_origin(const std::string& origin, const std::string& name);

Result<ExportResult> export_megatron(const PlanFile& f, const ExportOptions& opt);
Result<ImportedConfig> import_megatron(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin);

Result<ExportResult> export_nemo(const PlanFile& f, const ExportOptions& opt);
Result<ImportedConfig> import_nemo(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin);

Result<ExportResult> export_deepspeed(const PlanFile& f, const ExportOptions& opt);
Result<ImportedConfig> import_deepspeed(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin);

Result<ExportResult> export_torchtitan(const PlanFile& f, const ExportOptions& opt);
Result<ImportedConfig> import_torchtitan(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin);

Result<ExportResult> export_mindformers(const PlanFile& f, const ExportOptions& opt);
Result<ImportedConfig> import_mindformers(const std::vector<LaunchFile>& files, const ImportOptions& opt, const std::string& origin);

}  // namespace llmplan::launch_formats
