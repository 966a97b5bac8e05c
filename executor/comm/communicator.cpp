#include "executor/comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace llmplan::exec {

int rank_of(const ParallelPlan& p, const RankCoords& c) { return ((c.pp * p.dp + c.dp) * p.cp + c.cp) * p.tp + c.tp; }

RankCoords coords_of(const ParallelPlan& p, int rank) {
  RankCoords c;
  c.tp = rank % p.tp;
  rank /= p.tp;
  c.cp = rank % p.cp;
  rank /= p.cp;
  c.dp = rank % p.dp;
  c.pp = rank / p.dp;
  return c;
}

const char* to_string(Group g) {
  switch (g) {
    case Group::world: return "world";
    case Group::tp: return "tp";
    case Group::cp: return "cp";
    case Group::dp: return "dp";
    case Group::pp: return "pp";
    case Group::dp_cp: return "dp_cp";
    case Group::ep: return "ep";
    case Group::edp: return "edp";
  }
  return "?";
}

GroupSplit group_split(const ParallelPlan& p, const RankCoords& k, Group g) {
  switch (g) {
    case Group::world: return {0, rank_of(p, k)};
    case Group::tp: return {(k.pp * p.dp + k.dp) * p.cp + k.cp, k.tp};
    case Group::cp: return {(k.pp * p.dp + k.dp) * p.tp + k.tp, k.cp};
    case Group::dp: return {(k.pp * p.cp + k.cp) * p.tp + k.tp, k.dp};
    case Group::pp: return {(k.dp * p.cp + k.cp) * p.tp + k.tp, k.pp};
    case Group::dp_cp: return {k.pp * p.tp + k.tp, k.dp * p.cp + k.cp};
    case Group::ep:
    case Group::edp: {
      // The EP layout (communicator.h): q = the dp_cp index, cut into dp*cp/ep blocks of ep.
      const int ep = std::max(1, p.ep), q = k.dp * p.cp + k.cp, blocks = p.dp * p.cp / ep;
      if (g == Group::ep) return {(k.pp * p.tp + k.tp) * blocks + q / ep, q % ep};
      return {(k.pp * p.tp + k.tp) * ep + q % ep, q / ep};
    }
  }
  return {};
}

Status HostStandInMemory::move(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(bytes));
  return Status::ok();
}
Status HostStandInMemory::zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
  return Status::ok();
}

LocalCommunicator::LocalCommunicator(const ParallelPlan& plan, int rank, std::shared_ptr<StandInMemory> memory)
    : plan_(plan),
      c_(coords_of(plan, rank)),
      rank_(rank),
      world_(plan.world_size()),
      mem_(memory ? std::move(memory) : std::make_shared<HostStandInMemory>()) {}

int LocalCommunicator::rank(Group g) const { return group_split(plan_, c_, g).key; }

int LocalCommunicator::size(Group g) const {
  switch (g) {
    case Group::world: return world_;
    case Group::tp: return plan_.tp;
    case Group::cp: return plan_.cp;
    case Group::dp: return plan_.dp;
    case Group::pp: return plan_.pp;
    case Group::dp_cp: return plan_.dp * plan_.cp;
    case Group::ep: return std::max(1, plan_.ep);
    case Group::edp: return plan_.dp * plan_.cp / std::max(1, plan_.ep);
  }
  return 1;
}

Status LocalCommunicator::reduce_scatter_sum(const void* in, void* out, int64_t count, DType t, Group g) {
  const int64_t b = count * dtype_size(t);
  return mem_->move(out, static_cast<const char*>(in) + rank(g) * b, b);
}

Status LocalCommunicator::all_gather(const void* in, void* out, int64_t count, DType t, Group g) {
  const int64_t b = count * dtype_size(t);
  for (int i = 0; i < size(g); ++i)
    if (Status s = mem_->move(static_cast<char*>(out) + i * b, in, b); !s) return s;
  return Status::ok();
}

Status LocalCommunicator::all_to_all(const void* in, void* out, int64_t count, DType t, Group g) {
  return mem_->move(out, in, count * size(g) * dtype_size(t));
}

Status LocalCommunicator::recv(void* buf, int64_t count, DType t, int, Group, int) {
  return mem_->zero(buf, count * dtype_size(t));
}

Status LocalCommunicator::ring_shift(const void* sbuf, void* rbuf, int64_t count, DType t, Group, int) {
  return mem_->move(rbuf, sbuf, count * dtype_size(t));
}

namespace {

// The launchers' world-size variables, in the order they are trusted.
constexpr const char* kWorldSizeVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"};

}  // namespace

int launcher_world_size() {
  std::map<std::string, std::string> env;
  for (const char* v : kWorldSizeVariables)
    if (const char* s = std::getenv(v)) env[v] = s;
  if (const char* s = std::getenv("SLURM_STEP_ID")) env["SLURM_STEP_ID"] = s;
  return launcher_world_size(env);
}

int launcher_world_size(const std::map<std::string, std::string>& env) {
  for (const char* v : kWorldSizeVariables) {
    if (auto it = env.find(v); it != env.end() && !it->second.empty()) {
      // SLURM_NTASKS is set in a batch allocation even outside srun; trust it only with a step.
      if (std::strcmp(v, "SLURM_NTASKS") == 0 && !env.count("SLURM_STEP_ID")) continue;
      return std::atoi(it->second.c_str());
    }
  }
  return 0;
}

int launcher_local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* s = std::getenv(v); s && *s) {
      if (std::strcmp(v, "SLURM_LOCALID") == 0 && !std::getenv("SLURM_STEP_ID")) continue;  // as launcher_world_size
      return std::atoi(s);
    }
  }
  return -1;
}

std::vector<std::string> mpirun_arguments(int world, bool root, unsigned cores) {
  std::vector<std::string> args = {"mpirun"};
  if (root) args.push_back("--allow-run-as-root");
  if (cores == 0 || static_cast<unsigned>(world) > cores) args.push_back("--oversubscribe");
  args.insert(args.end(), {"-np", std::to_string(world)});
  return args;
}

std::string launch_command(int world, const std::string& plan_path, const std::string& extra_args) {
  std::string cmd;
  for (const std::string& a : mpirun_arguments(world, geteuid() == 0, std::thread::hardware_concurrency())) cmd += a + " ";
  cmd += "llmplan execute " + plan_path;
  if (!extra_args.empty()) cmd += " " + extra_args;
  return cmd;
}

}  // namespace llmplan::exec
