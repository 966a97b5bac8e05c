#include "executor/process_memory.h"

#include <fstream>
#include <string>
#include <unistd.h>

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

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

bool reset_resident_peak() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace llmplan::exec
