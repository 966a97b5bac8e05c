// Communicator: the collectives the distributed executor needs, over the rank groups of
// one ParallelPlan, and the rank layout that places ranks in those groups.
//
// Rank layout (the planner's, so predictions and execution agree on which groups cross
// nodes): TP innermost, then CP, DP, PP outermost:
//   rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank
// rank_of / coords_of are the ONE place this formula lives; everything else calls them.
// A group (tp, cp, dp, pp) is the set of ranks that differ only in that coordinate; its
// members are numbered by that coordinate (the TP group's rank i has tp_rank i).
//
// Sides of the interface:
//   MpiCommunicator   (mpi_communicator.h) MPI_Comm_split of MPI_COMM_WORLD into the groups
//   LocalCommunicator (here) one process standing in for one rank: world size 1, or a
//                     rank proxy. Every collective produces a buffer of the right shape and
//                     size locally (all-reduce: unchanged; reduce-scatter: this rank's
//                     slice; all-gather: this rank's slice copied to every slot; all-to-all:
//                     out = in, as if every peer sent what this rank sends; broadcast,
//                     barrier: nothing; recv: zeros; in the backend's memory through a
//                     StandInMemory), so memory and compute are the rank's
//                     real ones; the traffic is only modelled (modelled() is true). Context
//                     parallel needs nothing more: its all-gathered whole-sequence q, k, v
//                     are this rank's slice cp times, so attention runs over all s keys in
//                     the buffers and with the work of a real rank.
//   NcclCommunicator  (executor/cuda/nccl_communicator.h) the same interface over NCCL for
//                     device buffers, one GPU per rank.
// Counts are elements of `dtype`; buffers are host memory for the CPU backend. Sums are
// element-wise in the dtype (f32 sums in f32). Errors: runtime Status carrying the MPI
// message; a peer that died surfaces as such an error or as the watchdog (see MpiCommunicator).
// Thread-safety: one thread drives a communicator.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/dtype.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"

namespace llmplan::exec {

struct RankCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;  // this rank's index in each group
  bool operator==(const RankCoords&) const = default;
};

// REQUIRES: 0 <= c.x < plan.x for every coordinate.
int rank_of(const ParallelPlan& plan, const RankCoords& c);
// REQUIRES: 0 <= rank < plan.world_size().
RankCoords coords_of(const ParallelPlan& plan, int rank);

// dp_cp: the DP x CP ranks of one (tp, pp) coordinate, ordered dp-major (= dp when cp = 1):
// parameters are replicated over it, so gradients are summed and ZeRO partitions over it
// (Megatron's data-parallel-with-context-parallel group).
// Expert parallel (MoE, plan.ep inside dp*cp, as Megatron-Core lays it out): with q the
// rank's index in dp_cp, the ep group is the ep consecutive q of one block (ep rank
// q % ep), which exchange tokens and each hold experts/ep of the routed experts (EP rank j:
// experts [j*E/ep, (j+1)*E/ep)); edp is the dp*cp/ep ranks holding the same experts
// (same q % ep; edp rank q / ep), over which expert gradients are summed and ZeRO
// partitions them. ep = 1: ep is this rank alone and edp = dp_cp.
enum class Group : uint8_t { world, tp, cp, dp, pp, dp_cp, ep, edp };
const char* to_string(Group g);  // "world", "tp", "cp", "dp", "pp", "dp_cp", "ep", "edp"
inline constexpr int kGroups = 8;
inline constexpr Group kSubgroups[] = {Group::tp, Group::cp, Group::dp, Group::pp, Group::dp_cp, Group::ep, Group::edp};

// How group g is cut out of the world (MPI_Comm_split, ncclCommSplit): ranks with equal
// colour form one group, ordered by key. colour = the coordinates other than g's (so two
// ranks share a group exactly when they differ only in g's coordinates), key = the rank's
// index in g. ep / edp: the coordinates are (tp, pp, q / ep, q % ep) with q the dp_cp index
// (the layout above), so ep's colour is (tp, pp, q / ep), key q % ep, and edp's colour is
// (tp, pp, q % ep), key q / ep. Group::world: colour 0, key = world rank.
// REQUIRES: c is a rank of plan; plan.ep (>= 1, 0 read as 1) divides dp * cp.
struct GroupSplit {
  int colour = 0, key = 0;
  bool operator==(const GroupSplit&) const = default;
};
GroupSplit group_split(const ParallelPlan& plan, const RankCoords& c, Group g);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank(Group g) const = 0;  // this process's index in g
  virtual int size(Group g) const = 0;
  virtual bool modelled() const = 0;    // true: collectives are local stand-ins (proxy)
  virtual std::string name() const = 0; // "mpi", "local"

  // In place: buf (count) = sum over the group.
  virtual Status all_reduce_sum(void* buf, int64_t count, DType t, Group g) = 0;
  // in (count * size(g)) summed over the group; out (count) = this rank's slice.
  virtual Status reduce_scatter_sum(const void* in, void* out, int64_t count, DType t, Group g) = 0;
  // in (count) from every rank; out (count * size(g)) = the slices in group-rank order.
  virtual Status all_gather(const void* in, void* out, int64_t count, DType t, Group g) = 0;
  virtual Status broadcast(void* buf, int64_t count, DType t, int root, Group g) = 0;
  // in (count * size(g)): block j goes to group rank j; out (count * size(g)): block j is
  // what group rank j sent this rank (MPI_Alltoall; MoE token dispatch and combine).
  // REQUIRES: in and out do not overlap.
  virtual Status all_to_all(const void* in, void* out, int64_t count, DType t, Group g) = 0;
  // Point to point, peer = group rank. tag distinguishes concurrent streams (micro-batch).
  virtual Status send(const void* buf, int64_t count, DType t, int peer, Group g, int tag) = 0;
  virtual Status recv(void* buf, int64_t count, DType t, int peer, Group g, int tag) = 0;
  // Send to and receive from the same peer at once (pipeline schedules pair a send with a
  // receive so that blocking point-to-point cannot deadlock, as Megatron's batched p2p).
  virtual Status sendrecv(const void* sbuf, void* rbuf, int64_t count, DType t, int peer, Group g, int send_tag, int recv_tag) = 0;
  // Non-blocking send (interleaved pipeline schedules, whose sends cannot all be paired
  // with a receive from the same peer): returns a handle, or -1 when the send is complete
  // already; buf must stay unchanged until test_send says true or wait_send returns.
  // Default: a blocking send (-1).
  virtual Result<int> isend(const void* buf, int64_t count, DType t, int peer, Group g, int tag) {
    if (Status s = send(buf, count, t, peer, g, tag); !s) return s;
    return -1;
  }
  virtual Result<bool> test_send(int handle) {
    (void)handle;
    return true;
  }
  virtual Status wait_send(int handle) {
    (void)handle;
    return Status::ok();
  }
  // Ring shift (context parallel's ring): sbuf goes to group rank (r + 1) % n, rbuf comes
  // from (r - 1 + n) % n, both at once so that no rank blocks the ring. REQUIRES: sbuf and
  // rbuf do not overlap. Default: refused (bad_input naming the communicator).
  virtual Status ring_shift(const void* sbuf, void* rbuf, int64_t count, DType t, Group g, int tag) {
    (void)sbuf, (void)rbuf, (void)count, (void)t, (void)g, (void)tag;
    return Status::bad_input("communicator " + name() + ": no ring shift (context parallel as a ring); use cp_exchange all_gather");
  }
  virtual Status barrier(Group g) = 0;
  // The caller made progress (a step finished); resets the watchdog. No-op by default.
  virtual void progress() {}

  // Overlap with compute (a GPU's communication stream). By default every collective's
  // result is there for whatever the caller does next. A communicator that can_defer()
  // may, while set_deferred(true), leave device buffers of the collectives issued then
  // in flight: the caller's later device work may run beside them, and must not read
  // their outputs or overwrite their inputs before fence() (after which it sees every
  // collective issued before the call). Host buffers are always complete on return.
  // Default (MPI, local): nothing to defer; set_deferred and fence do nothing.
  virtual bool can_defer() const { return false; }
  virtual void set_deferred(bool on) { (void)on; }
  virtual Status fence() { return Status::ok(); }

  RankCoords coords() const { return {rank(Group::tp), rank(Group::cp), rank(Group::dp), rank(Group::pp)}; }
};

// How a LocalCommunicator's stand-ins move the buffers they are given: move = memmove
// (dst == src does nothing), zero = memset. The default moves host memory; a GPU backend
// gives one that moves its device buffers too (executor/cuda/device_stand_in.h), so a rank
// proxy runs on one GPU with the rank's real device memory.
class StandInMemory {
 public:
  virtual ~StandInMemory() = default;
  virtual Status move(void* dst, const void* src, int64_t bytes) = 0;
  virtual Status zero(void* dst, int64_t bytes) = 0;
};
class HostStandInMemory final : public StandInMemory {
 public:
  Status move(void* dst, const void* src, int64_t bytes) override;
  Status zero(void* dst, int64_t bytes) override;
};

// Stands in for rank `rank` of `plan` in one process (rank 0 of a 1-rank plan: size 1).
// memory: how its stand-ins move buffers; nullptr = host memory.
class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(const ParallelPlan& plan, int rank, std::shared_ptr<StandInMemory> memory = nullptr);
  int rank(Group g) const override;
  int size(Group g) const override;
  bool modelled() const override { return world_ > 1; }
  std::string name() const override { return "local"; }
  Status all_reduce_sum(void*, int64_t, DType, Group) override { return Status::ok(); }
  Status reduce_scatter_sum(const void* in, void* out, int64_t count, DType t, Group g) override;
  Status all_gather(const void* in, void* out, int64_t count, DType t, Group g) override;
  Status broadcast(void*, int64_t, DType, int, Group) override { return Status::ok(); }
  Status all_to_all(const void* in, void* out, int64_t count, DType t, Group g) override;
  Status send(const void*, int64_t, DType, int, Group, int) override { return Status::ok(); }
  Status recv(void* buf, int64_t count, DType t, int, Group, int) override;
  // Stand-in: this rank's own buffer comes back (same shape and size).
  Status ring_shift(const void* sbuf, void* rbuf, int64_t count, DType t, Group, int) override;
  Status sendrecv(const void*, void* rbuf, int64_t count, DType t, int peer, Group g, int, int tag) override {
    return recv(rbuf, count, t, peer, g, tag);
  }
  Status barrier(Group) override { return Status::ok(); }

 private:
  ParallelPlan plan_;
  RankCoords c_;
  int rank_ = 0, world_ = 1;
  std::shared_ptr<StandInMemory> mem_;
};

// ---- launching

// World size the launcher started this process with, from the environment
// (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE, SLURM_NTASKS under srun); 0 = not launched by one.
int launcher_world_size();
// The same from the environment `env` (name -> value).
int launcher_world_size(const std::map<std::string, std::string>& env);
// This process's rank among the launcher's processes on this node, from the environment
// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, PMI_LOCAL_RANK, SLURM_LOCALID under
// srun); -1 = not known. One GPU per rank: the CUDA device ordinal.
int launcher_local_rank();
// The exact command that runs `plan_path` on `world` processes with OpenMPI here
// (root needs --allow-run-as-root; --oversubscribe when world exceeds the cores):
//   mpirun --allow-run-as-root --oversubscribe -np 8 llmplan execute best.json
std::string launch_command(int world, const std::string& plan_path, const std::string& extra_args = {});
// Its launcher part for a user (`root` or not) on a machine of `cores` cores (0: unknown):
// {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "8"}.
std::vector<std::string> mpirun_arguments(int world, bool root, unsigned cores);

}  // namespace llmplan::exec
