// Discrete-event engine of the step simulator (internal to simulator/): tasks on
// per-rank streams, dependencies between tasks, and link tiers whose bandwidth is divided
// among the transfers crossing them at the same time.
//
//  - A stream runs its tasks one at a time in the order they were added.
//  - A task starts when the previous task of its stream and all its dependencies have
//    ended. Collectives of TP/DP groups need no rendezvous here: the simulator plays one
//    representative rank per stage, and its group peers reach the collective at the same
//    moment by symmetry.
//  - A communication task first waits its latency, then moves its transfer; a transfer
//    uses the outgoing and incoming direction of its tier on its rank (a collective) or
//    outgoing on the sender and incoming on the receiver (a send); while k transfers use
//    a direction, each gets 1/k of it, and a transfer moves at the rate of its most
//    shared direction.
//
// Thread-safety: an Engine is used by one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/spec/status.h"
#include "simulator/events.h"
#include "simulator/sim_costs.h"

namespace llmplan {

struct EngineTask {
  double latency = 0;   // s: a compute task's duration, a transfer's fixed part
  double transfer = 0;  // s at full bandwidth (communication only)
  int32_t stage = -1;   // -1: a pseudo task on no stream (a barrier)
  int32_t peer = -1;    // send: the receiving stage; -1 for a collective
  Stream stream = Stream::compute;
  EventKind kind = EventKind::forward;
  LinkTier tier = LinkTier::intra_node;
  int32_t microbatch = -1, chunk = -1, layer = -1;
  double bytes = 0;
  // Filled by run():
  double start = -1, end = -1;  // s
  int32_t binding = -1;         // the dependency (not the stream predecessor) that ended last
  int32_t stream_prev = -1;     // the previous task on the same stream
};

class EventEngine {
 public:
  explicit EventEngine(int stages) : stages_(stages), last_(static_cast<size_t>(stages) * kStreams, -1) {}
  // Appends a task to the end of its stream; returns its id.
  int add(const EngineTask& t);
  // `after` starts no earlier than `before` ends. REQUIRES: both ids valid.
  void depend(int before, int after) {
    if (before >= 0 && after >= 0) edges_.push_back({before, after});
  }
  // Plays every task; fails (runtime) when some task can never start (a dependency cycle).
  Status run(bool link_sharing);

  std::vector<EngineTask>& tasks() { return tasks_; }
  const std::vector<EngineTask>& tasks() const { return tasks_; }
  void reserve(size_t n) { tasks_.reserve(n); }

 private:
  struct Edge { int32_t from, to; };
  int stages_;
  std::vector<EngineTask> tasks_;
  std::vector<Edge> edges_;
  std::vector<int32_t> last_;  // [stage * kStreams + stream] -> last task id
};

}  // namespace llmplan
