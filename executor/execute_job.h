// execute_job: everything `llmplan execute` does between reading the plan file and printing
// the comparison, as one library call that the CLI and the GUI share.
//
//  1. Which rank this process is: one process (a 1-rank plan, or the single-GPU equivalent
//     of a multi-rank plan on --backend cuda started without MPI), an MPI rank (the launcher
//     started one process per rank), or a rank proxy (proxy_rank >= 0: rank R's share run
//     here, its communication modelled by a LocalCommunicator).
//  2. The backend: the CPU, or a CUDA GPU (one per rank by node-local rank; NCCL between
//     real ranks, device stand-ins for a proxy). Without a CUDA or NCCL build, bad_input
//     saying how to rebuild.
//  3. The profile store (rank 0 only): the run is inserted with its prediction BEFORE it
//     starts, so a crash, an OOM or a launcher's SIGTERM still leaves it recorded (failed /
//     oom, never "running"); steps, the outcome and the CPU's per-op timings follow.
//  4. run_plan (runner.h), whose RunReport comes back.
//
// Errors: bad_input for an impossible request (a proxy rank outside the plan, a multi-rank
// plan started without MPI -- the message gives the mpirun line --, an unknown backend, a
// missing CUDA/NCCL build); runtime for device, MPI and database failures. OOM against
// memory_limit is a result (report.oom), recorded as such.
// Thread-safety: one call per process (it may block SIGTERM, and SIGINT with
// record_interrupts, and start a watcher thread, see execute_job.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "executor/runner.h"
#include "planner/io/plan_file.h"
#include "planner/spec/status.h"

namespace llmplan::exec {

struct ExecuteRequest {
  std::string plan_path;      // the plan file the PlanFile was read from (log, mpirun hint)
  RunOptions options;         // what to run; comm and device_backend are set by execute_job
  int proxy_rank = -1;        // >= 0: run rank R's share here (communication modelled)
  std::string db;             // profile database; "" = $LLMPLAN_DB or ~/.local/share/llmplan/profiles.db
  double watchdog_s = 300;    // an MPI rank aborts the job after this long without a step
  // A single process (the CLI): take SIGINT and SIGTERM from the moment the run is recorded,
  // record it as failed and exit 128 + signal. Off for a host that handles its own signals
  // (a GUI calling this in-process). MPI ranks always do it for SIGTERM.
  bool record_interrupts = false;
  // Called once on the leader just before the first step, with a one-line description
  // ("executing best.json on cpu: 3 warm-up + 20 steps ...").
  std::function<void(const std::string&)> on_start;
};

struct ExecuteResult {
  bool leader = true;         // false on MPI ranks > 0: they neither report steps nor record
  RunReport report;
  int64_t run_id = -1;        // the run's id in the profile store (leader only)
  std::string db_path;        // the store it was recorded in (leader only)
};

Result<ExecuteResult> execute_job(const PlanFile& plan, const ExecuteRequest& request);

// CUDA devices this process sees (CUDA_VISIBLE_DEVICES applied); 0 without a CUDA build,
// a driver or a device.
int visible_cuda_devices();

}  // namespace llmplan::exec
