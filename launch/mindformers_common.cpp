#include "launch/mindformers_common.h"

#include <algorithm>
#include <cmath>

#include "planner/cost/plan_check.h"

namespace llmplan::launch_formats::mindformers {

std::string lora_cell(const std::string& target) {
  for (const LoraName& n : kLoraNames)
    if (target == n.llmplan) return n.cell;
  return "";
}

std::string lora_target(const std::string& cell) {
  for (const LoraName& n : kLoraNames)
    if (cell == n.cell) return n.llmplan;  // the first name of each cell: q k v o gate up down
  return "";
}

const char* dtype_name(Precision p) {
  switch (p) {
    case Precision::bf16: return "bfloat16";
    case Precision::fp16: return "float16";
    case Precision::fp32: return "float32";
  }
  return "float32";
}

std::vector<std::vector<int>> offsets_for(int layers, int pp, int chunks, const std::vector<int>& per_stage) {
  const int avg = layers / (pp * chunks);
  std::vector<std::vector<int>> out(static_cast<size_t>(chunks), std::vector<int>(static_cast<size_t>(pp)));
  for (int c = 0; c < chunks; ++c)
    for (int s = 0; s < pp; ++s) out[static_cast<size_t>(c)][static_cast<size_t>(s)] = per_stage[static_cast<size_t>(c * pp + s)] - avg;
  return out;
}

int max_device_memory_gb(double memory_bytes) {
  const double gib = memory_bytes / (1024.0 * 1024.0 * 1024.0);
  return std::max(1, static_cast<int>(std::floor(gib)) - 6);
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

}  // namespace llmplan::launch_formats::mindformers
