#include "simulator/sim_json.h"

#include "planner/io/plan_file.h"

namespace llmplan {

nlohmann::json breakdown_to_json(const SimBreakdown& b) {
  return {{"compute_s", b.compute},     {"recompute_s", b.recompute}, {"tp_comm_s", b.tp_comm}, {"cp_comm_s", b.cp_comm},
          {"ep_comm_s", b.ep_comm},     {"pp_comm_s", b.pp_comm},     {"dp_comm_s", b.dp_comm}, {"bubble_s", b.bubble},
          {"optimizer_s", b.optimizer}, {"offload_s", b.offload},     {"total_s", b.total}};
}

nlohmann::json sim_result_to_json(const SimResult& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageResult& s : r.stages) {
    nlohmann::json items = nlohmann::json::object();
    for (int i = 0; i < kMemoryItems; ++i) items[to_string(static_cast<MemoryItem>(i))] = s.peak_items[i];
    stages.push_back({{"stage", s.stage},
                      {"layers", s.layers},
                      {"busy_s", s.busy},
                      {"compute_end_s", s.compute_end},
                      {"breakdown", breakdown_to_json(s.breakdown)},
                      {"peak_bytes", s.peak_bytes},
                      {"peak_time_s", s.peak_time},
                      {"peak_phase", to_string(s.peak_phase)},
                      {"peak_microbatch", s.peak_microbatch},
                      {"peak_chunk", s.peak_chunk},
                      {"peak_inflight_microbatches", s.peak_inflight},
                      {"max_inflight_chunks", s.max_inflight_chunks},
                      {"peak_items_bytes", items},
                      {"analytic_memory", memory_to_json(s.analytic)}});
  }
  // DualPipe: the rank-equivalent DualPipeV plan that was simulated (SimResult::dualpipe).
  return {{"schedule", r.dualpipe ? "dualpipe" : to_string(r.schedule)},
          {"simulated_as", r.dualpipe ? "dualpipev on pp/2 ranks, stage s standing for ranks s and pp-1-s" : to_string(r.schedule)},
          {"pp", r.pp},
          {"vpp", r.vpp},
          {"microbatches", r.microbatches},
          {"ranks_per_stage", r.ranks_per_stage},
          {"step_time_s", r.total},
          {"critical_stage", r.critical_stage},
          {"bubble_fraction", r.bubble_fraction},
          {"tokens_per_s", r.tokens_per_s},
          {"mfu", r.mfu},
          {"breakdown", breakdown_to_json(r.breakdown)},
          {"analytic", time_to_json(r.analytic)},
          {"stages", stages}};
}

}  // namespace llmplan
