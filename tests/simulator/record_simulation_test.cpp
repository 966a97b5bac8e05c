// simulate_reference_records (simulator/record_simulation.h): one row per record the
// planner can cost, in file order, with the simulated and analytic steps and only the term
// differences above its 0.5% threshold.
#include <gtest/gtest.h>

#include <cmath>

#include "planner/io/presets.h"
#include "simulator/record_simulation.h"

namespace llmplan {
namespace {

TEST(RecordSimulation, OneRowPerCostableRecordInFileOrder) {
  Result<PresetRegistry> presets = PresetRegistry::load(default_data_root());
  ASSERT_TRUE(presets) << presets.status().message();
  Result<ReferenceSet> set = load_reference_files(default_reference_paths());
  ASSERT_TRUE(set) << set.status().message();
  ValidationOptions opt;
  // The costable records, counted here from the record preparation alone.
  std::vector<std::string> costable;
  for (const ReferenceRecord& r : set->records) {
    if (r.kind.find("throughput") == std::string::npos) continue;
    const PreparedRecord p = prepare_record(r, *presets, opt);
    if (p.skip.empty() && p.has_architecture && p.hardware_known) costable.push_back(r.id);
  }
  ASSERT_GT(costable.size(), 100u);
  const std::vector<RecordSimulation> rows = simulate_reference_records(*set, *presets, opt);
  ASSERT_EQ(rows.size(), costable.size());
  int simulated = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RecordSimulation& r = rows[i];
    EXPECT_EQ(r.id, costable[i]);
    if (!r.error.empty()) continue;
    ++simulated;
    EXPECT_GT(r.analytic_s, 0) << r.id;
    EXPECT_GT(r.simulated_s, 0) << r.id;
    for (const auto& [term, d] : r.term_differences) EXPECT_GE(std::fabs(d), 0.005 * r.analytic_s) << r.id << " " << term;
  }
  EXPECT_GT(simulated, 100);
}

}  // namespace
}  // namespace llmplan
