// OpTimeLog: wall time per kind of operation and shape over a run's measured steps, for
// calibration (`llmplan calibrate` fits a stack profile's GEMM, attention and elementwise
// constants from it; planner/cost/stack_profile.h). The CPU backend times every op it runs when
// ModelConfig::op_times is set (a steady_clock read before and after each call: tens of
// nanoseconds against ops of micro- to milliseconds).
//
// Thread-safety: one log per model; the model's ops run on one host thread (BLAS's own
// threads stay inside a call).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "executor/dtype.h"

namespace llmplan::exec {

struct OpTimeEntry {
  std::string op;        // the op's name, e.g. "linear_forward", "attention_backward_flash", "swiglu_forward"
  DType dtype = DType::f32;
  int64_t m = 0, n = 0, k = 0;  // GEMM: rows, output columns, inner dimension; attention: tokens, keys, head width; else 0
  double flops = 0;      // per call (GEMMs and attention; 0 for the rest)
  double seconds = 0;    // all calls
  int64_t calls = 0;
};

class OpTimeLog {
 public:
  void add(const char* op, DType dtype, int64_t m, int64_t n, int64_t k, double flops, double seconds) {
    OpTimeEntry& e = by_key_[{op, static_cast<int>(dtype), m, n, k}];
    if (e.calls == 0) e = OpTimeEntry{op, dtype, m, n, k, flops, 0, 0};
    e.seconds += seconds;
    ++e.calls;
  }
  void clear() { by_key_.clear(); }
  std::vector<OpTimeEntry> entries() const {
    std::vector<OpTimeEntry> out;
    for (const auto& [key, e] : by_key_) out.push_back(e);
    return out;
  }

 private:
  std::map<std::tuple<std::string, int, int64_t, int64_t, int64_t>, OpTimeEntry> by_key_;
};

}  // namespace llmplan::exec
