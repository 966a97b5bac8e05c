// Training-stack profiles (`--stack FILE`, data/stacks/*.json, what `calibrate
// --stack-out` writes): load_stack_file (planner/cost/stack_profile.h).
#include "fuzz/fuzz_util.h"
#include "planner/cost/stack_profile.h"

using namespace llmplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "stack.json");
  Result<StackProfile> s = load_stack_file(path);
  if (!s) {
    fuzz::expect_clear_error(s.status(), path);
    return 0;
  }
  // `calibrate --stack-out` and `validate --write-stacks` write profiles: they must read back.
  Result<StackProfile> again = stack_from_json(to_json(*s), "written stack");
  if (!again) fuzz::violated("a written stack does not read back: " + again.status().message());
  return 0;
}
