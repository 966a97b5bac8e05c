#include "executor/execute_job.h"

#include <unistd.h>

#include <signal.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "executor/comm/mpi_communicator.h"
#if LLMPLAN_HAVE_CUDA_BACKEND
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_stand_in.h"
#endif
#if LLMPLAN_HAVE_NCCL
#include "executor/cuda/nccl_communicator.h"
#endif
#include "planner/cost/memory_model.h"
#include "planner/cost/time_model.h"
#include "profiles/profile_store.h"

namespace llmplan::exec {

namespace {

// A run that is interrupted -- mpirun terminating every rank with SIGTERM when one dies, a
// kill, or Ctrl-C (SIGINT) -- must not stay "running" in the profile store. A handler
// (any thread may take a process-directed signal: OpenBLAS's and MPI's threads too) writes
// the signal's number to a pipe; a watcher thread reads it and, on the leader, records the
// run as failed before exiting with 128 + the signal; other ranks (run_id < 0) just exit.
// The pipe is the one piece of process-wide state: a signal handler can reach no other.
int g_signal_pipe[2] = {-1, -1};

extern "C" void forward_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  const ssize_t n = ::write(g_signal_pipe[1], &b, 1);  // async-signal-safe
  (void)n;
}

// SIGTERM always; SIGINT too unless the launching shell set it to be ignored (a background
// job), which is kept as POSIX expects.
void watch_interrupts(bool sigint, std::string db_path, int64_t run_id) {
  if (g_signal_pipe[0] < 0 && ::pipe(g_signal_pipe) != 0) return;
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  if (sigint) {
    struct sigaction old {};
    sigaction(SIGINT, nullptr, &old);
    if (old.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, nullptr);
  }
  std::thread([db_path, run_id] {
    unsigned char b = 0;
    while (::read(g_signal_pipe[0], &b, 1) != 1) {
      if (errno != EINTR) return;
    }
    const int sig = b;
    const bool interrupted = sig == SIGINT;
    if (run_id >= 0) {
      std::fprintf(stderr, "llmplan: %s; recording run %lld as %s\n",
                   interrupted ? "interrupted (SIGINT)" : "terminated (SIGTERM: the launcher after another rank failed, or a kill)",
                   static_cast<long long>(run_id), interrupted ? "stopped" : "failed");
      if (Result<ProfileStore> st = ProfileStore::open(db_path)) {
        RunOutcome out;
        out.status = interrupted ? RunStatus::stopped : RunStatus::failed;
        out.error_message = interrupted ? "interrupted (SIGINT) before it finished"
                                        : "terminated (SIGTERM) before it finished: the launcher after another rank died, or a kill";
        (void)st->finish_run(run_id, out);
      }
    }
    std::_Exit(128 + sig);
  }).detach();
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return "cpu: " + line.substr(line.find(':') + 2);
  return "cpu";
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? buf : "";
}

}  // namespace

Result<ExecuteResult> execute_job(const PlanFile& plan, const ExecuteRequest& req) {
  const PlanFile* f = &plan;
  RunOptions o = req.options;
  if (!(req.watchdog_s > 0 && std::isfinite(req.watchdog_s)))
    return Status::bad_input("--watchdog: expected a positive number of seconds, got " + std::to_string(req.watchdog_s));
  const std::string& backend = o.backend;
  // ---- which rank this process is: single process, MPI rank, or rank proxy
  const int world = f->plan.world_size();
  // Started without MPI on CUDA: one GPU here, and the runner executes the plan's
  // single-rank equivalent (its label says so).
  const bool single_gpu_equivalent = world > 1 && backend == "cuda" && launcher_world_size() == 0;
  std::unique_ptr<Communicator> comm;
  if (req.proxy_rank >= 0) {
    if (req.proxy_rank >= world)
      return Status::bad_input("--proxy-rank " + std::to_string(req.proxy_rank) + ": the plan has ranks 0.." + std::to_string(world - 1));
    // A 1-rank plan is its own rank 0: nothing to stand in for.
    if (world > 1) comm = std::make_unique<LocalCommunicator>(f->plan, req.proxy_rank);
  } else if (world > 1 && !single_gpu_equivalent) {
    if (launcher_world_size() == 0)
      return Status::bad_input("this plan uses " + std::to_string(world) + " ranks; start one process per rank with MPI:\n  " +
                               launch_command(world, req.plan_path) + "\n(or run one rank's share here with --proxy-rank R)");
    Result<std::unique_ptr<Communicator>> mc = create_mpi_communicator(f->plan, req.watchdog_s);
    if (!mc) return mc.status();
    comm = std::move(*mc);
  }
  const int my_rank = comm ? comm->rank(Group::world) : 0;
  const bool leader = my_rank == 0 || req.proxy_rank >= 0;  // reports, stores
  o.comm = comm.get();
  std::unique_ptr<ExecBackend> device;
  // NCCL's, or a CUDA rank proxy's; destroyed before the device and the MPI communicator.
  std::unique_ptr<Communicator> device_comm;
  if (backend == "cuda") {
#if LLMPLAN_HAVE_CUDA_BACKEND
    cuda::CudaOptions co;
    // The same refusals predict_run makes, before a GPU and NCCL are set up for nothing.
    if (comm)
      if (Status s = check_distributed_backend("cuda", f->plan, comm->modelled()); !s) return s;
    if (comm && !comm->modelled()) {  // a proxy runs on the default device
      // One GPU per rank: the rank's index among the node's MPI processes picks the device
      // (MPI's shared-memory split; the launcher's variable where that is unavailable).
      int local = mpi_node_local_rank();
      if (local < 0) local = launcher_local_rank();
      Result<int> dev = cuda::device_for_local_rank(local, cuda::probe_devices().count);
      if (!dev) return dev.status().with_context("rank " + std::to_string(my_rank));
      co.device = *dev;
    }
    Result<std::unique_ptr<ExecBackend>> b = cuda::make_cuda_backend(co);
    if (!b) return b.status();
    device = std::move(*b);
    o.device_backend = device.get();
    if (comm && comm->modelled()) {
      // A rank proxy on this GPU: the stand-in collectives move device buffers.
      device_comm = cuda::make_device_proxy_communicator(*cuda::context_of(*device), f->plan, req.proxy_rank);
      o.comm = device_comm.get();
    } else if (comm) {
#if LLMPLAN_HAVE_NCCL
      Result<std::unique_ptr<Communicator>> nc = cuda::create_nccl_communicator(*cuda::context_of(*device), *comm);
      if (!nc) return nc.status();
      device_comm = std::move(*nc);
      o.comm = device_comm.get();
#else
      return Status::bad_input("--backend cuda with " + std::to_string(world) + " ranks: this llmplan was built without "
                               "NCCL (cmake found no nccl.h / libnccl); rebuild with NCCL or use --backend cpu");
#endif
    }
#else
    return Status::bad_input("--backend cuda: this llmplan was built without the CUDA toolkit (cmake said "
                             "'CUDA parts off'); rebuild where nvcc is on PATH");
#endif
  } else if (backend != "cpu") {
    return Status::bad_input("--backend: expected cpu or cuda, got '" + backend + "'");
  }
  Result<std::string> db_path = default_db_path(req.db);
  if (!db_path) return db_path.status();
  ExecuteResult result;
  result.leader = leader;
  if (!leader) {  // ranks > 0 compute and communicate; rank 0 reports and records
    watch_interrupts(false, "", -1);
    o.on_step = nullptr;
    Result<RunReport> r = run_plan(*f, o);
    if (!r) return r.status();
    result.report = std::move(*r);
    return result;
  }
  Result<ProfileStore> store = ProfileStore::open(*db_path);
  if (!store) return store.status();

  // ---- profile store: the run is recorded before it starts, so a failure is kept
  RunRecord rec;
  rec.plan_json = plan_file_to_json(*f, estimate_memory(f->model, f->cluster, f->job, f->plan),
                                    estimate_time(f->model, f->cluster, f->job, f->plan)).dump();
  rec.model = f->model.name + (o.layers > 0 && o.layers != f->model.layers ? " (" + std::to_string(o.layers) + " layers)" : "");
  rec.hardware = (device ? device->device_name() : cpu_name()) + (comm && !comm->modelled() ? " x" + std::to_string(world) + " ranks (" + (device_comm ? "nccl" : "mpi") + ")" : "") +
                 (req.proxy_rank >= 0 ? " (proxy of rank " + std::to_string(req.proxy_rank) + ")" : "");
  rec.host = host_name();
  rec.backend = backend;
  rec.versions = "llmplan 0.1.0";
  rec.steps_planned = o.warmup + o.steps;
  Result<RunReport> pred = predict_run(*f, o);
  if (!pred) return pred.status();
  {
    const nlohmann::json pj = report_to_json(*pred);
    const PlanFile& ex = pred->executed;
    rec.predicted_json = nlohmann::json{{"memory", pj["predicted_gpu"]},
                                        {"time", pj["predicted_time"]},
                                        {"device", pred->executed.cluster.gpu.name},
                                        {"calibrated", o.calibration.has_value() || o.efficiency.has_value()},
                                        // What ran, so that calibrate can predict it again with other constants.
                                        {"executed", plan_file_to_json(ex, estimate_memory(ex.model, ex.cluster, ex.job, ex.plan),
                                                                       estimate_time(ex.model, ex.cluster, ex.job, ex.plan))}}
                             .dump();
    rec.predicted_peak_bytes = static_cast<int64_t>(pred->predicted_alloc.total);
    rec.predicted_step_time_s = pred->predicted_time.total;
    rec.model = pred->executed.model.name +
                (pred->executed.model.layers != f->model.layers ? " (" + std::to_string(pred->executed.model.layers) + " layers)" : "");
  }
  Result<int64_t> id = store->insert_run(rec);
  if (!id) return id.status();
  if ((comm && !comm->modelled()) || req.record_interrupts) watch_interrupts(req.record_interrupts, *db_path, *id);

  if (req.on_start) {
    char line[1024];
    std::snprintf(line, sizeof line, "executing %s on %s: %d warm-up + %d steps%s", req.plan_path.c_str(),
                  device ? device->device_name().c_str() : "cpu", o.warmup, o.steps,
                  comm ? (comm->modelled() ? (" as a proxy of rank " + std::to_string(req.proxy_rank) + " (communication modelled)").c_str()
                                           : (" on " + std::to_string(world) + " MPI ranks").c_str())
                       : "");
    req.on_start(line);
  }
  // Each step's row is written as the step ends, so that an interrupted or failing run
  // keeps what it measured. A write that fails does not stop the training; the first such
  // error is returned at the end.
  Status step_rows;
  o.on_step_measured = [&](const StepMeasure& s) {
    if (!step_rows) return;
    step_rows = store->add_steps(*id, {StepRecord{s.step, s.loss, s.time_s, s.tokens_per_s, s.peak_bytes}});
  };
  Result<RunReport> r = run_plan(*f, o);
  if (!r) {
    RunOutcome out;
    out.status = RunStatus::failed;
    out.error_message = r.status().message();
    (void)store->finish_run(*id, out);
    return r.status();
  }
  const nlohmann::json rj = report_to_json(*r);
  if (!step_rows) return step_rows;
  RunOutcome out;
  out.status = r->oom ? RunStatus::oom : RunStatus::ok;
  out.error_message = r->oom_message;
  out.measured_json = rj.dump();
  out.tokens_per_s = r->tokens_per_s;
  out.step_time_s = r->median_step_s;
  out.peak_bytes = r->device.measured ? r->device.used_peak : r->memory.peak_total;
  if (Status st = store->finish_run(*id, out); !st) return st;
  if (!r->op_times.empty()) {
    std::vector<OpTiming> ops;
    for (const OpTimeEntry& e : r->op_times)
      ops.push_back({e.op, std::to_string(e.m) + "x" + std::to_string(e.n) + "x" + std::to_string(e.k), to_string(e.dtype), e.flops, 0,
                     e.seconds / static_cast<double>(e.calls), e.calls});
    if (Status st = store->add_op_timings(*id, ops); !st) return st;
  }
  result.report = std::move(*r);
  result.run_id = *id;
  result.db_path = store->path();
  return result;
}

int visible_cuda_devices() {
#if LLMPLAN_HAVE_CUDA_BACKEND
  return cuda::probe_devices().count;
#else
  return 0;
#endif
}

}  // namespace llmplan::exec
