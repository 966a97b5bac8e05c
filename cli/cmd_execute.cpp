// llmplan execute: run a plan file's job for N steps on this machine, print per-step loss,
// time and tokens/s, then predicted vs measured (memory per category, step time); store
// the run in the profile database. Exit 1 on out-of-memory (with phase, layer and the
// planner's fixes) after recording the run as status "oom"; exit 2 on bad input.
#include <unistd.h>

#include <pthread.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <thread>
#include <cstdio>
#include <fstream>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/runner.h"
#if LLMPLAN_HAVE_CUDA_BACKEND
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_stand_in.h"
#endif
#if LLMPLAN_HAVE_NCCL
#include "executor/cuda/nccl_communicator.h"
#endif
#include "planner/calibrate/calibration.h"
#include "planner/spec/units.h"
#include "profiles/profile_store.h"

namespace llmplan::cli {

namespace {

struct ExecuteCommand {
  std::string plan_file;
  std::string backend = "cpu";
  int steps = 20;
  int warmup = 3;
  int layers = 0;
  int64_t seq = 0;
  int micro_batch = 0;
  int grad_accum = 0;
  std::string data;
  std::string memory_limit;
  std::string json_out;
  std::string db;
  double lr = 1e-3;
  uint64_t seed = 1234;
  int proxy_rank = -1;
  double watchdog_s = 300;
  std::string calibration;
  std::string stack;  // predict with this stack profile's constants (e.g. calibrate --stack-out)
};

// A distributed run: mpirun terminates every rank with SIGTERM when one of them dies. The
// signal is blocked in the main thread BEFORE MPI starts (block_sigterm), so MPI's own
// threads inherit the mask and no thread but ours takes it; then a dedicated thread waits
// for it (watch_sigterm). On rank 0, once the run is in the profile store, that thread
// records the run as failed before exiting, so the store never keeps a dead run as
// "running"; on the other ranks (run_id < 0) it just exits.
sigset_t block_sigterm() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by threads started later (MPI's)
  return set;
}

void watch_sigterm(sigset_t set, std::string db_path, int64_t run_id) {
  std::thread([set, db_path, run_id] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) return;
    if (run_id >= 0) {
      std::fprintf(stderr, "llmplan: rank 0 terminated by the launcher (another rank failed); recording run %lld as failed\n",
                   static_cast<long long>(run_id));
      if (Result<ProfileStore> st = ProfileStore::open(db_path)) {
        RunOutcome out;
        out.status = RunStatus::failed;
        out.error_message = "terminated by the launcher: another rank died or aborted";
        (void)st->finish_run(run_id, out);
      }
    }
    std::_Exit(143);
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

std::string mib(double bytes) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3f MiB", bytes / (1024.0 * 1024.0));
  return b;
}

void print_table(const exec::RunReport& r) {
  std::printf("\npredicted vs measured (executed config: %s)\n", r.label.c_str());
  std::printf("  %-24s %16s %16s %9s  %s\n", "memory line", "predicted", "measured", "error", "note");
  for (const exec::CompareLine& l : r.memory_lines) {
    if (l.gpu_only) {
      std::printf("  %-24s %16s %16s %9s  GPU-only: %s\n", l.name.c_str(), mib(l.predicted).c_str(), "n/a", "", l.note.c_str());
      continue;
    }
    char err[32] = "";
    if (l.predicted != 0) std::snprintf(err, sizeof err, "%+.2f%%", 100 * l.rel_error());
    else if (l.measured != 0) std::snprintf(err, sizeof err, "(pred 0)");
    std::printf("  %-24s %16s %16s %9s  %s\n", l.name.c_str(), mib(l.predicted).c_str(), mib(l.measured).c_str(), err,
                l.note.c_str());
  }
  if (!r.oom)
    std::printf("  %-24s %14.4f s %14.4f s %+8.1f%%  %s\n", "step time", r.step_time.predicted, r.step_time.measured,
                100 * r.step_time.rel_error(), r.step_time.note.c_str());
  if (!r.oom)
    std::printf("  %-24s %16.1f %16.1f\n", "tokens/s", r.predicted_time.tokens_per_s, r.tokens_per_s);
}

}  // namespace

Runner register_execute(CLI::App* sub) {
  auto c = std::make_shared<ExecuteCommand>();
  sub->add_option("plan", c->plan_file, "plan JSON (from llmplan sweep --json)")->required();
  sub->add_option("--backend", c->backend, "cpu, or cuda (one GPU: the plan's single-rank equivalent; needs a CUDA build)")->capture_default_str();
  sub->add_option("--steps", c->steps, "measured optimizer steps")->capture_default_str();
  sub->add_option("--warmup", c->warmup, "warm-up steps before measuring")->capture_default_str();
  sub->add_option("--layers", c->layers, "run this many layers instead of the model's (the prediction follows)");
  sub->add_option("--seq", c->seq, "sequence length instead of the plan's (the prediction follows)");
  sub->add_option("--micro-batch", c->micro_batch, "micro-batch instead of the plan's (the prediction follows)");
  sub->add_option("--grad-accum", c->grad_accum, "micro-batches per step instead of the plan's (the prediction follows)");
  sub->add_option("--data", c->data, "token file (.bin uint16, .u32.bin), .txt, or a folder of .txt (byte-level); default synthetic");
  sub->add_option("--memory-limit", c->memory_limit, "fail like a GPU of this size (e.g. 8GiB)");
  sub->add_option("--json", c->json_out, "also write the report as JSON to this file");
  sub->add_option("--db", c->db, "profile database (default $LLMPLAN_DB or ~/.local/share/llmplan/profiles.db)");
  sub->add_option("--lr", c->lr, "learning rate")->capture_default_str();
  sub->add_option("--seed", c->seed, "seed for init, data and dropout")->capture_default_str();
  sub->add_option("--proxy-rank", c->proxy_rank, "run rank R's share of a multi-rank plan in this one process (communication modelled)");
  sub->add_option("--calibration", c->calibration, "predict with this calibration (from llmplan calibrate)");
  sub->add_option("--stack", c->stack, "predict with this stack profile (data/stacks id or a file, e.g. from llmplan calibrate --stack-out)");
  sub->add_option("--watchdog", c->watchdog_s, "seconds without a finished step before a rank aborts the job")->capture_default_str();
  return [c]() {
    Result<PlanFile> f = read_plan_file(c->plan_file);
    if (!f) return report(f.status());
    // ---- which rank this process is: single process, MPI rank, or rank proxy
    const int world = f->plan.world_size();
    // Started without MPI on CUDA: one GPU here, and the runner executes the plan's
    // single-rank equivalent (its label says so).
    const bool single_gpu_equivalent = world > 1 && c->backend == "cuda" && exec::launcher_world_size() == 0;
    std::unique_ptr<exec::Communicator> comm;
    sigset_t sigterm{};
    if (c->proxy_rank >= 0) {
      if (c->proxy_rank >= world)
        return report(Status::bad_input("--proxy-rank " + std::to_string(c->proxy_rank) + ": the plan has ranks 0.." + std::to_string(world - 1)));
      // A 1-rank plan is its own rank 0: nothing to stand in for.
      if (world > 1) comm = std::make_unique<exec::LocalCommunicator>(f->plan, c->proxy_rank);
    } else if (world > 1 && !single_gpu_equivalent) {
      if (exec::launcher_world_size() == 0)
        return report(Status::bad_input("this plan uses " + std::to_string(world) + " ranks; start one process per rank with MPI:\n  " +
                                        exec::launch_command(world, c->plan_file) +
                                        "\n(or run one rank's share here with --proxy-rank R)"));
      sigterm = block_sigterm();  // before MPI_Init: see watch_sigterm
      Result<std::unique_ptr<exec::Communicator>> mc = exec::create_mpi_communicator(f->plan, c->watchdog_s);
      if (!mc) return report(mc.status());
      comm = std::move(*mc);
    }
    const int my_rank = comm ? comm->rank(exec::Group::world) : 0;
    const bool leader = my_rank == 0 || c->proxy_rank >= 0;  // prints, stores
    exec::RunOptions o;
    o.comm = comm.get();
    o.backend = c->backend;
    o.steps = c->steps;
    o.warmup = c->warmup;
    o.layers = c->layers;
    o.seq_len = c->seq;
    o.micro_batch = c->micro_batch;
    o.grad_accum = c->grad_accum;
    o.data = c->data;
    o.seed = c->seed;
    o.trainer.lr = c->lr;
    if (!c->calibration.empty()) {
      Result<Calibration> cal = read_calibration_file(c->calibration);
      if (!cal) return report(cal.status());
      o.calibration = *cal;
    }
    if (!c->stack.empty()) {
      if (!c->calibration.empty()) return report(Status::bad_input("--stack and --calibration: give one (both set the prediction's speed)"));
      Result<PresetRegistry> reg = load_presets("");
      if (!reg) return report(reg.status());
      Result<StackProfile> st = reg->stack(c->stack, "--stack");
      if (!st) return report(st.status());
      o.efficiency = st->efficiency;
    }
    if (!c->memory_limit.empty()) {
      Result<double> lim = parse_bytes(c->memory_limit, "--memory-limit");
      if (!lim) return report(lim.status());
      if (*lim <= 0) return report(Status::bad_input("--memory-limit: expected a positive size, got " + c->memory_limit));
      o.memory_limit = static_cast<int64_t>(*lim);
    }
    std::unique_ptr<exec::ExecBackend> device;
    // NCCL's, or a CUDA rank proxy's; destroyed before the device and the MPI communicator.
    std::unique_ptr<exec::Communicator> device_comm;
    if (c->backend == "cuda") {
#if LLMPLAN_HAVE_CUDA_BACKEND
      exec::cuda::CudaOptions co;
      // The same refusals predict_run makes, before a GPU and NCCL are set up for nothing.
      if (comm)
        if (Status s = exec::check_distributed_backend("cuda", f->plan, comm->modelled()); !s) return report(s);
      if (comm && !comm->modelled()) {  // a proxy runs on the default device
        // One GPU per rank: the rank's index among the node's MPI processes picks the device
        // (MPI's shared-memory split; the launcher's variable where that is unavailable).
        int local = exec::mpi_node_local_rank();
        if (local < 0) local = exec::launcher_local_rank();
        Result<int> dev = exec::cuda::device_for_local_rank(local, exec::cuda::probe_devices().count);
        if (!dev) return report(dev.status().with_context("rank " + std::to_string(my_rank)));
        co.device = *dev;
      }
      Result<std::unique_ptr<exec::ExecBackend>> b = exec::cuda::make_cuda_backend(co);
      if (!b) return report(b.status());
      device = std::move(*b);
      o.device_backend = device.get();
      if (comm && comm->modelled()) {
        // A rank proxy on this GPU: the stand-in collectives move device buffers.
        device_comm = exec::cuda::make_device_proxy_communicator(*exec::cuda::context_of(*device), f->plan, c->proxy_rank);
        o.comm = device_comm.get();
      } else if (comm) {
#if LLMPLAN_HAVE_NCCL
        Result<std::unique_ptr<exec::Communicator>> nc = exec::cuda::create_nccl_communicator(*exec::cuda::context_of(*device), *comm);
        if (!nc) return report(nc.status());
        device_comm = std::move(*nc);
        o.comm = device_comm.get();
#else
        return report(Status::bad_input("--backend cuda with " + std::to_string(world) + " ranks: this llmplan was built without "
                                        "NCCL (cmake found no nccl.h / libnccl); rebuild with NCCL or use --backend cpu"));
#endif
      }
#else
      return report(Status::bad_input("--backend cuda: this llmplan was built without the CUDA toolkit (cmake said "
                                      "'CUDA parts off'); rebuild where nvcc is on PATH"));
#endif
    } else if (c->backend != "cpu") {
      return report(Status::bad_input("--backend: expected cpu or cuda, got '" + c->backend + "'"));
    }
    Result<std::string> db_path = default_db_path(c->db);
    if (!db_path) return report(db_path.status());
    if (!leader) {  // ranks > 0 compute and communicate; rank 0 prints and records
      watch_sigterm(sigterm, "", -1);
      Result<exec::RunReport> r = exec::run_plan(*f, o);
      if (!r) return report(r.status());
      return r->oom ? 1 : 0;
    }
    Result<ProfileStore> store = ProfileStore::open(*db_path);
    if (!store) return report(store.status());

    // ---- profile store: the run is recorded before it starts, so a failure is kept
    RunRecord rec;
    rec.plan_json = plan_file_to_json(*f, estimate_memory(f->model, f->cluster, f->job, f->plan),
                                      estimate_time(f->model, f->cluster, f->job, f->plan)).dump();
    rec.model = f->model.name + (c->layers > 0 && c->layers != f->model.layers ? " (" + std::to_string(c->layers) + " layers)" : "");
    rec.hardware = (device ? device->device_name() : cpu_name()) + (comm && !comm->modelled() ? " x" + std::to_string(world) + " ranks (" + (device_comm ? "nccl" : "mpi") + ")" : "") +
                   (c->proxy_rank >= 0 ? " (proxy of rank " + std::to_string(c->proxy_rank) + ")" : "");
    rec.host = host_name();
    rec.backend = c->backend;
    rec.versions = "llmplan 0.1.0";
    rec.steps_planned = o.warmup + o.steps;
    Result<exec::RunReport> pred = exec::predict_run(*f, o);
    if (!pred) return report(pred.status());
    {
      const nlohmann::json pj = exec::report_to_json(*pred);
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
    if (!id) return report(id.status());
    if (comm && !comm->modelled()) watch_sigterm(sigterm, *db_path, *id);

    o.on_step = [](int step, int total, bool warm, double loss, double t, double tps) {
      std::printf("step %3d/%d%s  loss %.4f  %.3f s  %.1f tokens/s\n", step + 1, total, warm ? " (warm-up)" : "", loss, t, tps);
      std::fflush(stdout);
    };
    std::printf("executing %s on %s: %d warm-up + %d steps%s\n", c->plan_file.c_str(), device ? device->device_name().c_str() : "cpu", o.warmup, o.steps,
                comm ? (comm->modelled() ? (" as a proxy of rank " + std::to_string(c->proxy_rank) + " (communication modelled)").c_str()
                                         : (" on " + std::to_string(world) + " MPI ranks").c_str())
                     : "");
    Result<exec::RunReport> r = exec::run_plan(*f, o);
    if (!r) {
      RunOutcome out;
      out.status = RunStatus::failed;
      out.error_message = r.status().message();
      (void)store->finish_run(*id, out);
      return report(r.status());
    }
    const nlohmann::json rj = exec::report_to_json(*r);
    std::vector<StepRecord> steps;
    for (const exec::StepMeasure& s : r->steps) steps.push_back({s.step, s.loss, s.time_s, s.tokens_per_s, s.peak_bytes});
    if (Status st = store->add_steps(*id, steps); !st) return report(st);
    RunOutcome out;
    out.status = r->oom ? RunStatus::oom : RunStatus::ok;
    out.error_message = r->oom_message;
    out.measured_json = rj.dump();
    out.tokens_per_s = r->tokens_per_s;
    out.step_time_s = r->median_step_s;
    out.peak_bytes = r->device.measured ? r->device.used_peak : r->memory.peak_total;
    if (Status st = store->finish_run(*id, out); !st) return report(st);
    if (!r->op_times.empty()) {
      std::vector<OpTiming> ops;
      for (const exec::OpTimeEntry& e : r->op_times)
        ops.push_back({e.op, std::to_string(e.m) + "x" + std::to_string(e.n) + "x" + std::to_string(e.k), exec::to_string(e.dtype), e.flops, 0,
                       e.seconds / static_cast<double>(e.calls), e.calls});
      if (Status st = store->add_op_timings(*id, ops); !st) return report(st);
    }

    print_table(*r);
    if (!c->json_out.empty()) {
      if (Status st = write_json_file(c->json_out, rj); !st) return report(st);
      std::printf("wrote %s\n", c->json_out.c_str());
    }
    std::printf("recorded as run %lld in %s\n", static_cast<long long>(*id), store->path().c_str());
    if (r->oom) {
      std::fprintf(stderr, "llmplan: out of memory in %s, %s%s: %s\n", exec::to_string(r->oom_where.phase), r->oom_where.part.c_str(),
                   r->oom_where.layer >= 0 ? (" " + std::to_string(r->oom_where.layer)).c_str() : "", r->oom_message.c_str());
      if (!r->fixes.empty()) {
        std::fprintf(stderr, "planner's suggested fixes (cheapest first):\n");
        for (const std::string& fx : r->fixes) std::fprintf(stderr, "  - %s\n", fx.c_str());
      }
      return 1;
    }
    return 0;
  };
}

}  // namespace llmplan::cli
