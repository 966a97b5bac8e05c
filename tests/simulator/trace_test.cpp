// The Chrome trace is valid trace-event JSON: parses back, every slice is complete
// ("ph": "X" with dur >= 0) or a matched B/E pair, processes and threads are named, and
// no stream has overlapping slices.
#include "simulator/trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include "sim_fixtures.h"
#include "simulator/sim_json.h"

namespace llmplan {
namespace {

SimResult simulate(const ParallelPlan& p, int nodes, int64_t gb) {
  const ModelSpec m = testing::llama2_7b();
  auto r = simulate_step(m, testing::dgx_a100(nodes), testing::job(4096, gb), p);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : SimResult{};
}

void expect_valid_trace(const SimResult& r, const std::string& file) {
  const std::string path = std::string(LLMPLAN_BINARY_DIR) + "/" + file;
  ASSERT_TRUE(write_chrome_trace(r, path).is_ok());
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << path << " is not valid JSON";
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("traceEvents") && j["traceEvents"].is_array());

  std::set<int> named_pids;
  std::set<std::pair<int, int>> named_tids;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;  // (pid, tid) -> (ts, end)
  std::map<std::pair<int, int>, std::vector<double>> open;                       // B without E yet
  size_t complete = 0;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string());
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer());
    const std::string ph = e["ph"];
    const int pid = e["pid"];
    const int tid = e.value("tid", 0);
    if (ph == "M") {
      if (e["name"] == "process_name") named_pids.insert(pid);
      if (e["name"] == "thread_name") named_tids.insert({pid, tid});
      ASSERT_TRUE(e["args"].contains("name") || e["args"].contains("sort_index"));
      continue;
    }
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number());
    const double ts = e["ts"];
    EXPECT_GE(ts, 0);
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur") && e["dur"].is_number());
      ASSERT_TRUE(e.contains("name") && e["name"].is_string() && !e["name"].get<std::string>().empty());
      const double dur = e["dur"];
      EXPECT_GE(dur, 0);
      slices[{pid, tid}].push_back({ts, ts + dur});
      ++complete;
    } else if (ph == "B") {
      open[{pid, tid}].push_back(ts);
    } else if (ph == "E") {
      auto& o = open[{pid, tid}];
      ASSERT_FALSE(o.empty()) << "E without B";
      slices[{pid, tid}].push_back({o.back(), ts});
      o.pop_back();
    } else {
      EXPECT_EQ(ph, "C") << "unexpected phase";
    }
  }
  for (const auto& [key, o] : open) EXPECT_TRUE(o.empty()) << "B without E on pid " << key.first;
  EXPECT_EQ(complete, r.events.size());
  EXPECT_EQ(static_cast<int>(named_pids.size()), r.pp);
  for (auto& [key, v] : slices) {
    EXPECT_TRUE(named_tids.count(key)) << "unnamed thread " << key.second << " of pid " << key.first;
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i) {
      // Seconds -> microseconds may move an end by one ulp (1e-9 us here); nothing more.
      EXPECT_LE(v[i - 1].second, v[i].first + 1e-6)
          << "overlap on pid " << key.first << " tid " << key.second << " at " << v[i].first << " us";
    }
  }
}

TEST(Trace, InterleavedTpPpDpIsValid) {
  ParallelPlan p = testing::plan(2, 2, 4, 2, Schedule::interleaved, 1, 32);
  p.zero = 1;
  p.recompute = Recompute::selective;
  const SimResult r = simulate(p, 2, 32);
  expect_valid_trace(r, "sim_trace_interleaved.json");
  // Every layer's forward and backward of every micro-batch is on its stage (a backward
  // producing gradient buckets is cut at the bucket boundaries: one or more slices).
  for (int s = 0; s < 4; ++s) {
    std::set<std::pair<int, int>> f, b;
    double compute = 0;
    for (const SimEvent& e : r.events) {
      if (e.stage != s) continue;
      if (e.kind == EventKind::forward) f.insert({e.microbatch, e.layer});
      if (e.kind == EventKind::backward) b.insert({e.microbatch, e.layer});
      if (e.kind == EventKind::forward || e.kind == EventKind::backward || e.kind == EventKind::head_forward ||
          e.kind == EventKind::head_backward) {
        compute += e.end - e.start;
      }
    }
    EXPECT_EQ(f.size(), 16u * 8) << "stage " << s;
    EXPECT_EQ(b.size(), 16u * 8) << "stage " << s;
    // The slices account for exactly the compute the breakdown reports.
    EXPECT_NEAR(compute, r.stages[s].breakdown.compute, 1e-9 * compute) << "stage " << s;
  }
}

TEST(Trace, Zero3AndGPipeAreValid) {
  ParallelPlan p = testing::plan(4, 1, 2, 1, Schedule::gpipe, 1, 16);
  p.zero = 3;
  p.recompute = Recompute::full;
  expect_valid_trace(simulate(p, 1, 16), "sim_trace_zero3.json");
}

TEST(SimJson, SummaryHasStepTimeAnalyticAndStages) {
  ParallelPlan p = testing::plan(1, 2, 4, 1, Schedule::one_f_one_b, 1, 8);
  const SimResult r = simulate(p, 1, 8);
  const nlohmann::json j = sim_result_to_json(r);
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), r.total);
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_TRUE(j["analytic"].is_object());
  ASSERT_EQ(j["stages"].size(), 4u);
  EXPECT_DOUBLE_EQ(j["stages"][3]["peak_bytes"].get<double>(), r.stages[3].peak_bytes);
  EXPECT_DOUBLE_EQ(j["breakdown"]["total_s"].get<double>(), r.total);
}

TEST(Trace, UnwritablePathIsARuntimeError) {
  const Status s = write_chrome_trace(SimResult{}, "/nonexistent-dir/x/trace.json");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.kind(), ErrorKind::runtime);
  EXPECT_NE(s.message().find("/nonexistent-dir/x/trace.json"), std::string::npos);
}

}  // namespace
}  // namespace llmplan
