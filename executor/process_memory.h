// The process's resident memory as the kernel counts it: an independent witness beside
// the tracking allocator's own accounting (which the memory comparison is built on).
// Linux: VmRSS and VmHWM from /proc/self/status; the high-water mark is reset by writing
// "5" to /proc/self/clear_refs (proc(5), Linux 4.0 and later). Elsewhere: zeros and false.
// Also the machine's available memory, which sizes what a run may take.
//
// Thread-safety: reads the process's own files; safe from any thread.
#pragma once

namespace llmplan::exec {

struct ResidentMemory {
  double rss = 0;   // bytes resident now (VmRSS)
  double peak = 0;  // bytes, the most resident since start or the last reset (VmHWM)
};
ResidentMemory resident_memory();
// true when the kernel took the reset (the next peak then covers only what follows).
bool reset_resident_peak();
// The machine's memory available to a new process, bytes (/proc/meminfo MemAvailable;
// elsewhere all physical memory).
double available_memory_bytes();

}  // namespace llmplan::exec
