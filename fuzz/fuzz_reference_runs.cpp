// Reference-run files (`llmplan validate --data FILE`, data/reference/): the records loader
// load_reference_files (planner/validate/validate.h), then the predictions validate makes
// from the records. Records with null plan knobs would have the sweep fill them; that is
// left out here (fully_specified_throughput_only), as one sweep per input is too slow to fuzz.
#include "fuzz/fuzz_util.h"
#include "planner/validate/validate.h"

using namespace llmplan;

namespace {
const PresetRegistry& presets() {
  static const PresetRegistry reg = [] {
    Result<PresetRegistry> r = PresetRegistry::load(default_data_root());
    if (!r) fuzz::violated("cannot load the shipped presets: " + r.status().message());
    return std::move(*r);
  }();
  return reg;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const PresetRegistry& reg = presets();
  const std::string path = fuzz::write_input(data, size, "runs.json");
  Result<ReferenceSet> set = load_reference_files({path});
  if (!set) {
    fuzz::expect_clear_error(set.status(), path);
    return 0;
  }
  ValidationOptions opt;
  opt.fully_specified_throughput_only = true;
  for (const ReferenceRecord& r : set->records) (void)prepare_record(r, reg, opt);
  const std::vector<ValidationRow> rows = validate_records(*set, reg, opt);
  for (const ValidationRow& row : rows)
    if (!row.skipped) fuzz::expect_finite(row.predicted, ("predicted " + row.id).c_str());
  (void)summarize(rows);
  return 0;
}
