#include "simulator/trace.h"

#include <array>
#include <fstream>

#include "planner/spec/specs.h"

namespace llmplan {

nlohmann::json chrome_trace_json(const SimResult& r) {
  using nlohmann::json;
  json events = json::array();
  const int ranks = r.ranks_per_stage;
  std::vector<std::array<bool, kStreams>> used(r.pp);
  for (auto& u : used) u.fill(false);
  for (const SimEvent& e : r.events) used[e.stage][static_cast<int>(e.stream)] = true;

  for (int s = 0; s < r.pp; ++s) {
    const std::string name = "stage " + std::to_string(s) + " (rank " + std::to_string(s * ranks) + ", stands for ranks " +
                             std::to_string(s * ranks) + "-" + std::to_string((s + 1) * ranks - 1) + ")";
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", s}, {"tid", 0}, {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", s}, {"tid", 0}, {"args", {{"sort_index", s}}}});
    for (int k = 0; k < kStreams; ++k) {
      if (!used[s][k] && k != static_cast<int>(Stream::compute)) continue;
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", s},
                        {"tid", k},
                        {"args", {{"name", to_string(static_cast<Stream>(k))}}}});
      events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", s}, {"tid", k}, {"args", {{"sort_index", k}}}});
    }
  }
  for (const SimEvent& e : r.events) {
    const double ts = e.start * 1e6, end = e.end * 1e6;
    json args = json::object();
    if (e.microbatch >= 0) args["microbatch"] = e.microbatch;
    if (e.chunk >= 0) args["chunk"] = e.chunk;
    if (e.layer >= 0) args["layer"] = e.layer;
    if (e.peer >= 0) args["peer_stage"] = e.peer;
    if (e.bytes > 0) args["bytes"] = e.bytes;
    events.push_back({{"ph", "X"},
                      {"name", event_name(e)},
                      {"cat", to_string(e.kind)},
                      {"pid", e.stage},
                      {"tid", static_cast<int>(e.stream)},
                      {"ts", ts},
                      {"dur", end - ts},
                      {"args", args}});
  }
  for (const StageResult& st : r.stages) {
    for (const MemorySample& m : st.memory) {
      events.push_back({{"ph", "C"},
                        {"name", "memory"},
                        {"pid", st.stage},
                        {"tid", 0},
                        {"ts", m.time * 1e6},
                        {"args", {{"GiB", m.bytes / (1024.0 * 1024.0 * 1024.0)}}}});
    }
  }
  json other = {{"schedule", to_string(r.schedule)},
                {"pp", r.pp},
                {"vpp", r.vpp},
                {"microbatches", r.microbatches},
                {"step_time_s", r.total},
                {"bubble_fraction", r.bubble_fraction}};
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

Status write_chrome_trace(const SimResult& r, const std::string& path) {
  std::ofstream out(path);
  if (!out) return Status::runtime(path + ": cannot open for writing");
  out << chrome_trace_json(r).dump();
  out.close();
  if (!out) return Status::runtime(path + ": write failed");
  return Status::ok();
}

}  // namespace llmplan
