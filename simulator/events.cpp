#include "simulator/events.h"

namespace llmplan {

const char* to_string(Stream s) {
  static const char* kNames[] = {"compute",      "tp",           "cp",        "ep",       "pp send next",
                                 "pp send prev", "pp recv prev", "pp recv next", "dp reduce", "dp gather"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kStreams);
  return kNames[static_cast<int>(s)];
}

const char* to_string(EventKind k) {
  static const char* kNames[] = {"forward", "backward", "recompute", "weight grad", "head forward", "head backward",
                                 "tp comm", "cp comm",  "ep comm",      "pp send",         "pp recv",
                                 "dp grad sync", "dp param gather", "optimizer", "barrier"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<int>(EventKind::kCount));
  return kNames[static_cast<int>(k)];
}

}  // namespace llmplan
