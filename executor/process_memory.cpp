#include "executor/process_memory.h"

#include <fstream>
#include <string>

namespace llmplan::exec {

ResidentMemory resident_memory() {
  ResidentMemory m;
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    double kib = 0;
    if (key == "VmRSS:" && in >> kib) m.rss = kib * 1024;
    else if (key == "VmHWM:" && in >> kib) m.peak = kib * 1024;
    std::string rest;
    std::getline(in, rest);
  }
  return m;
}

bool reset_resident_peak() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace llmplan::exec
