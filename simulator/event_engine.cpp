#include "simulator/event_engine.h"

#include <algorithm>
#include <queue>
#include <string>

namespace llmplan {

int EventEngine::add(const EngineTask& t) {
  const int id = static_cast<int>(tasks_.size());
  tasks_.push_back(t);
  if (t.stage >= 0) {
    int32_t& last = last_[static_cast<size_t>(t.stage) * kStreams + static_cast<int>(t.stream)];
    tasks_.back().stream_prev = last;
    if (last >= 0) edges_.push_back({last, id});
    last = id;
  }
  return id;
}

namespace {

struct Event {
  double time;
  uint64_t seq;     // insertion order: ties run first-in first-out (deterministic)
  int32_t task;
  uint32_t version;  // a finish event is stale when the flow was re-timed since
  bool latency_done;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

}  // namespace

Status EventEngine::run(bool link_sharing) {
  const size_t n = tasks_.size();
  std::vector<int32_t> offset(n + 1, 0), succ(edges_.size()), deps_left(n, 0);
  for (const Edge& e : edges_) {
    ++offset[e.from + 1];
    ++deps_left[e.to];
  }
  for (size_t i = 0; i < n; ++i) offset[i + 1] += offset[i];
  {
    std::vector<int32_t> fill(offset.begin(), offset.end() - 1);
    for (const Edge& e : edges_) succ[fill[e.from]++] = e.to;
  }

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue;
  uint64_t seq = 0;
  std::vector<uint32_t> version(n, 0);
  // Flow state (transfers in progress), per task.
  std::vector<double> remaining(n, 0), rate(n, 0), updated(n, 0);
  std::vector<std::vector<int32_t>> active(static_cast<size_t>(stages_) * 4);  // [(stage*2+tier)*2+dir]
  std::vector<uint32_t> stamp(n, 0);
  uint32_t stamp_now = 0;
  auto resource = [](int stage, LinkTier tier, int dir) { return (stage * 2 + static_cast<int>(tier)) * 2 + dir; };
  auto out_res = [&](const EngineTask& t) { return resource(t.stage, t.tier, 0); };
  auto in_res = [&](const EngineTask& t) { return resource(t.peer >= 0 ? t.peer : t.stage, t.tier, 1); };

  // Flows on the two directions of `t`, each once.
  std::vector<int32_t> affected;
  auto collect = [&](const EngineTask& t) {
    affected.clear();
    ++stamp_now;
    for (int r : {out_res(t), in_res(t)}) {
      for (int32_t f : active[r]) {
        if (stamp[f] != stamp_now) {
          stamp[f] = stamp_now;
          affected.push_back(f);
        }
      }
    }
  };
  auto advance = [&](int32_t f, double now) {
    remaining[f] = std::max(0.0, remaining[f] - rate[f] * (now - updated[f]));
    updated[f] = now;
  };
  auto retime = [&](int32_t f, double now) {
    const EngineTask& t = tasks_[f];
    const size_t k = std::max(active[out_res(t)].size(), active[in_res(t)].size());
    rate[f] = 1.0 / static_cast<double>(std::max<size_t>(1, k));
    queue.push({now + remaining[f] / rate[f], seq++, f, ++version[f], false});
  };

  auto join = [&](int32_t id, double now) {
    if (!link_sharing) {
      queue.push({now + tasks_[id].transfer, seq++, id, version[id], false});
      return;
    }
    const EngineTask& t = tasks_[id];
    collect(t);
    for (int32_t f : affected) advance(f, now);
    remaining[id] = t.transfer;
    updated[id] = now;
    active[out_res(t)].push_back(id);
    active[in_res(t)].push_back(id);
    affected.push_back(id);
    for (int32_t f : affected) retime(f, now);
  };
  auto leave = [&](int32_t id, double now) {
    const EngineTask& t = tasks_[id];
    for (int r : {out_res(t), in_res(t)}) {
      auto& v = active[r];
      v.erase(std::find(v.begin(), v.end(), id));
    }
    collect(t);
    for (int32_t f : affected) {
      advance(f, now);
      retime(f, now);
    }
  };
  auto start = [&](int32_t id, double now) {
    EngineTask& t = tasks_[id];
    t.start = now;
    if (t.transfer > 0 && t.latency <= 0) {
      join(id, now);
    } else {
      queue.push({now + t.latency, seq++, id, version[id], t.transfer > 0});
    }
  };

  for (size_t i = 0; i < n; ++i)
    if (deps_left[i] == 0) start(static_cast<int32_t>(i), 0.0);

  size_t finished = 0;
  while (!queue.empty()) {
    const Event ev = queue.top();
    queue.pop();
    if (ev.latency_done) {
      join(ev.task, ev.time);
      continue;
    }
    if (ev.version != version[ev.task]) continue;  // re-timed since
    EngineTask& t = tasks_[ev.task];
    t.end = ev.time;
    ++finished;
    if (link_sharing && t.transfer > 0) leave(ev.task, ev.time);
    for (int32_t k = offset[ev.task]; k < offset[ev.task + 1]; ++k) {
      const int32_t s = succ[k];
      if (ev.task != tasks_[s].stream_prev) tasks_[s].binding = ev.task;
      if (--deps_left[s] == 0) start(s, ev.time);
    }
  }
  if (finished != n) {
    return Status::runtime("step simulator: " + std::to_string(n - finished) + " of " + std::to_string(n) +
                           " operations never started (a dependency cycle in the schedule)");
  }
  return Status::ok();
}

}  // namespace llmplan
