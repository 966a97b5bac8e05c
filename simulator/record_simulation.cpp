#include "simulator/record_simulation.h"

#include <cmath>

#include "simulator/step_simulator.h"

namespace llmplan {

std::vector<RecordSimulation> simulate_reference_records(const ReferenceSet& set, const PresetRegistry& presets,
                                                         const ValidationOptions& opt) {
  SimOptions so;
  so.efficiency = opt.efficiency;
  so.memory = opt.memory;
  so.record_events = false;
  so.record_memory = false;
  std::vector<RecordSimulation> out;
  for (const ReferenceRecord& r : set.records) {
    if (r.kind.find("throughput") == std::string::npos) continue;
    const PreparedRecord p = prepare_record(r, presets, opt);
    if (!p.skip.empty() || !p.has_architecture || !p.hardware_known) continue;
    so.efficiency = p.efficiency;
    RecordSimulation rs;
    rs.id = r.id;
    rs.group = r.group;
    Result<SimResult> sim = simulate_step(p.model, p.cluster, p.job, p.plan, so);
    if (!sim) {
      rs.error = sim.status().message();
      out.push_back(std::move(rs));
      continue;
    }
    const StepTime& a = sim->analytic;
    const SimBreakdown& b = sim->breakdown;
    const std::pair<const char*, double> terms[] = {{"bubble", b.bubble - a.bubble}, {"dp", b.dp_comm - a.dp_comm},   {"tp", b.tp_comm - a.tp_comm},
                                                    {"pp", b.pp_comm - a.pp_comm}, {"cp", b.cp_comm - a.cp_comm},   {"ep", b.ep_comm - a.ep_comm},
                                                    {"compute", (b.compute + b.recompute) - (a.compute + a.recompute)}};
    for (const auto& [name, d] : terms)
      if (std::fabs(d) >= 0.005 * a.total) rs.term_differences.emplace_back(name, d);
    rs.analytic_s = a.total;
    rs.simulated_s = sim->total;
    out.push_back(std::move(rs));
  }
  return out;
}

}  // namespace llmplan
