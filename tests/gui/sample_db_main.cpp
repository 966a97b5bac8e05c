// llmplan-gui-sample-db DB: appends synthetic example runs (labelled as such) to the
// profile database DB, for scripts/screenshot.sh.
#include <cstdio>

#include "tests/gui/sample_profiles.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: llmplan-gui-sample-db DATABASE\n");
    return 2;
  }
  auto r = llmplan::gui_test::write_sample_profiles(argv[1]);
  if (!r) {
    std::fprintf(stderr, "llmplan-gui-sample-db: %s\n", r.status().message().c_str());
    return r.status().exit_code();
  }
  std::printf("wrote %d sample runs to %s\n", r->runs, argv[1]);
  return 0;
}
