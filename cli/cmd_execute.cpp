// llmplan execute: parse the flags, run a plan file's job for N steps on this machine
// (executor/execute_job.h: ranks, backend, profile store), print per-step loss, time and
// tokens/s, then predicted vs measured (memory per category, step time). Exit 1 on out-of-memory (with phase, layer and the
// planner's fixes) after recording the run as status "oom"; exit 2 on bad input.
// A multi-rank plan typed alone on GPUs that can hold it starts its ranks itself
// (executor/launch.h): this process becomes `mpirun -np N` (or `srun --ntasks N`) running
// the same command line with --no-launch.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "executor/comm/communicator.h"
#include "executor/execute_job.h"
#include "executor/launch.h"
#include "executor/process_memory.h"
#include "executor/runner.h"
#include "planner/cost/memory_model.h"
#include "planner/calibrate/calibration.h"
#include "planner/spec/units.h"

namespace llmplan::cli {

namespace {

struct ExecuteCommand {
  std::string plan_file;
  std::string backend = "cpu";
  int steps = 20;
  int warmup = 3;
  // kUnsetFlag: the plan's value; anything typed must be positive.
  int layers = kUnsetFlag;
  int64_t seq = kUnsetFlag;
  int micro_batch = kUnsetFlag;
  int grad_accum = kUnsetFlag;
  std::string data;
  std::string memory_limit;
  std::string json_out;
  std::string db;
  double lr = 1e-3;
  uint64_t seed = 1234;
  int proxy_rank = kUnsetFlag;
  double watchdog_s = 300;
  std::string calibration;
  std::string stack;  // predict with this stack profile's constants (e.g. calibrate --stack-out)
  // A multi-rank plan run without a launcher: its proxy's predicted run time. 15 s: the CPU
  // prediction runs about 4x under the measured time on a 2-core host (the README demo:
  // 3.30 s predicted, 14.5 s measured), so that this is about a minute there.
  double time_budget_s = 15;
  bool no_launch = false;  // never start the ranks with mpirun/srun: run in this process
};

// Replaces this process with the launcher of `d` running this same command line with
// --no-launch added (the ranks run; none launches again), after printing it. Returns only
// on failure: bad input (exit 2) when the launcher is not on PATH, runtime when exec fails.
int launch_ranks(const exec::LaunchDecision& d, int ranks) {
  const std::string& name = d.launcher.front();
  const char* path_env = std::getenv("PATH");
  const std::string path = exec::find_on_path(name, path_env ? path_env : "");
  if (path.empty())
    return report(Status::bad_input(name + " is not on PATH, and the plan's " + std::to_string(ranks) + " ranks are started with it (" +
                                    d.reason + "): " +
                                    (name == "mpirun" ? "install OpenMPI (apt-get install openmpi-bin)" : "load Slurm's tools") +
                                    ", or run in this process with --no-launch"));
  std::vector<std::string> own = exec::own_command_line();
  const std::string self = exec::own_executable();
  if (own.empty() || self.empty()) return report(Status::runtime("cannot read this process's command line (/proc/self) to start its ranks; run with --no-launch"));
  std::vector<std::string> args = d.launcher;
  args.push_back(self);
  args.insert(args.end(), own.begin() + 1, own.end());
  args.push_back("--no-launch");
  std::printf("llmplan execute: %s; starting them:\n  %s\n", d.reason.c_str(), exec::shell_line(args).c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(path.c_str(), argv.data());
  return report(Status::runtime("cannot start " + path + ": " + std::strerror(errno)));
}

// A multi-rank plan started alone, without a launcher or --proxy-rank: its heaviest rank
// (the first rank of the pipeline stage with the largest predicted peak) as a proxy,
// scaled down where the user did not pin the size -- one micro-batch per step, then half
// the layers, half the sequence, half the micro-batch -- until the prediction fits half of
// this machine's available memory and (warm-up + steps) x the predicted step time fits the
// time budget. Returns the proxy rank and fills `o`; `said` is what it ran and why.
Result<int> scale_to_this_machine(const PlanFile& f, const ExecuteCommand& c, bool steps_given, bool warmup_given, exec::RunOptions* o,
                                  std::string* said) {
  const MemoryReport mem = estimate_memory(f.model, f.cluster, f.job, f.plan);
  exec::RankCoords rc;
  rc.pp = mem.worst.stage;
  const int rank = exec::rank_of(f.plan, rc);
  if (!steps_given) o->steps = 3;
  if (!warmup_given) o->warmup = 1;
  exec::LocalCommunicator lc(f.plan, rank);
  exec::RunOptions probe = *o;
  probe.comm = &lc;
  const int chunks = f.plan.pp * std::max(1, f.plan.vpp);
  const double memory_budget = 0.5 * exec::available_memory_bytes();
  int layers = probe.layers > 0 ? probe.layers : f.model.layers;
  int64_t seq = probe.seq_len > 0 ? probe.seq_len : f.job.seq_len;
  int mb = probe.micro_batch > 0 ? probe.micro_batch : f.plan.micro_batch;
  int ga = probe.grad_accum > 0 ? probe.grad_accum : f.plan.grad_accum;
  double peak = 0, step = 0;
  for (int i = 0; i < 64; ++i) {
    probe.layers = layers, probe.seq_len = seq, probe.micro_batch = mb, probe.grad_accum = ga;
    Result<exec::RunReport> p = exec::predict_run(f, probe);
    if (!p) return p.status();
    peak = p->predicted_alloc.total;
    step = p->predicted_time.total;
    if (peak <= memory_budget && step * (probe.steps + probe.warmup) <= c.time_budget_s) break;
    const int fewer_layers = std::max(chunks, layers / 2 / chunks * chunks);
    if (c.grad_accum == kUnsetFlag && ga > 1) ga = 1;
    else if (c.layers == kUnsetFlag && fewer_layers < layers) layers = fewer_layers;
    else if (c.seq == kUnsetFlag && seq > 64) seq = std::max<int64_t>(64, seq / 2);
    else if (c.micro_batch == kUnsetFlag && mb > 1) mb = mb / 2;
    else break;  // as small as it goes: run it and say so
  }
  o->layers = layers, o->seq_len = seq, o->micro_batch = mb, o->grad_accum = ga;
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "this plan uses %d ranks and no launcher started this process: running rank %d's share (the heaviest: pipeline "
                "stage %d of %d) as a proxy here, scaled down to %d of %d layers, sequence %lld, micro-batch %d, %d micro-batch%s per "
                "step, %d + %d steps: predicted %.2f GiB of the %.2f GiB this machine has available, about %.0f s by the planner's "
                "prediction.\n  The whole plan: %s\n  (one rank's full share: --proxy-rank %d with --layers/--seq/--micro-batch/"
                "--grad-accum as you choose)",
                f.plan.world_size(), rank, rc.pp, f.plan.pp, layers, f.model.layers, static_cast<long long>(seq), mb, ga, ga == 1 ? "" : "es",
                o->warmup, o->steps, peak / kGiB, 2 * memory_budget / kGiB, step * (o->steps + o->warmup),
                exec::launch_command(f.plan.world_size(), c.plan_file).c_str(), rank);
  *said = buf;
  return rank;
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
  if (!r.oom && !r.resident_peak.name.empty())
    std::printf("  %-24s %16s %16s %+8.2f%%  %s\n", r.resident_peak.name.c_str(), mib(r.resident_peak.predicted).c_str(),
                mib(r.resident_peak.measured).c_str(), 100 * r.resident_peak.rel_error(), r.resident_peak.note.c_str());
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
  sub->add_option("--time-budget", c->time_budget_s,
                  "a multi-rank plan run alone: scale its heaviest rank's proxy down to this many seconds (predicted)")
      ->capture_default_str();
  sub->add_flag("--no-launch", c->no_launch,
                "a multi-rank plan on GPUs that can hold it: run in this process rather than start its ranks with mpirun (srun "
                "in a Slurm job)");
  return [c, sub]() {
    if (!(c->time_budget_s > 0 && c->time_budget_s <= 1e7))
      return report(Status::bad_input("--time-budget: expected a positive number of seconds, got " + std::to_string(c->time_budget_s)));
    for (auto [v, flag] : {std::pair<int64_t, const char*>{c->layers, "--layers"}, {c->seq, "--seq"}, {c->micro_batch, "--micro-batch"},
                           {c->grad_accum, "--grad-accum"}})
      if (Status st = positive_if_given(v, flag); !st) return report(st);
    if (c->proxy_rank != kUnsetFlag && c->proxy_rank < 0)
      return report(Status::bad_input("--proxy-rank: expected a rank >= 0, got " + std::to_string(c->proxy_rank)));
    Result<PlanFile> f = read_plan_file(c->plan_file);
    if (!f) return report(f.status());
    const auto given = [](int64_t v) { return v != kUnsetFlag ? v : 0; };  // 0: RunOptions' "the plan's"
    exec::ExecuteRequest req;
    req.plan_path = c->plan_file;
    req.proxy_rank = c->proxy_rank != kUnsetFlag ? c->proxy_rank : -1;
    req.db = c->db;
    req.watchdog_s = c->watchdog_s;
    req.record_interrupts = true;  // Ctrl-C or a kill: the run is recorded as failed, not left running
    exec::RunOptions& o = req.options;
    o.backend = c->backend;
    o.steps = c->steps;
    o.warmup = c->warmup;
    o.layers = static_cast<int>(given(c->layers));
    o.seq_len = given(c->seq);
    o.micro_batch = static_cast<int>(given(c->micro_batch));
    o.grad_accum = static_cast<int>(given(c->grad_accum));
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
    o.on_step = [](int step, int total, bool warm, double loss, double t, double tps) {
      std::printf("step %3d/%d%s  loss %.4f  %.3f s  %.1f tokens/s\n", step + 1, total, warm ? " (warm-up)" : "", loss, t, tps);
      std::fflush(stdout);
    };
    // A multi-rank plan typed alone (`llmplan execute best.json` after a sweep) where its
    // GPUs are: its ranks started here (mpirun) or in the Slurm job (srun), as torchrun does.
    if (f->plan.world_size() > 1 && c->proxy_rank == kUnsetFlag && !c->no_launch) {
      exec::LaunchInputs in;
      in.ranks = f->plan.world_size();
      in.backend = c->backend;
      in.cuda_devices = c->backend == "cuda" ? exec::visible_cuda_devices() : 0;
      in.env = exec::process_environment();
      in.root = ::geteuid() == 0;
      in.cores = std::thread::hardware_concurrency();
      const exec::LaunchDecision d = exec::decide_launch(in);
      if (!d.launcher.empty()) return launch_ranks(d, in.ranks);
      // On the CPU the proxy's own message below says what runs instead.
      if (c->backend == "cuda" && exec::launcher_world_size() == 0)
        std::printf("llmplan execute: not starting the plan's %d ranks: %s; running its single-rank equivalent here\n", in.ranks,
                    d.reason.c_str());
    }
    // Otherwise not a refusal, but its heaviest rank scaled down to this machine (CPU; the
    // CUDA backend runs the plan's single-rank equivalent on one GPU instead).
    if (f->plan.world_size() > 1 && exec::launcher_world_size() == 0 && c->proxy_rank == kUnsetFlag && c->backend == "cpu") {
      std::string said;
      Result<int> rank = scale_to_this_machine(*f, *c, sub->count("--steps") > 0, sub->count("--warmup") > 0, &o, &said);
      if (!rank) return report(rank.status());
      req.proxy_rank = *rank;
      std::printf("llmplan execute: %s\n", said.c_str());
    }
    req.on_start = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
    Result<exec::ExecuteResult> res = exec::execute_job(*f, req);
    if (!res) return report(res.status());
    const exec::RunReport& r = res->report;
    if (!res->leader) return r.oom ? 1 : 0;  // ranks > 0: rank 0 prints and records

    print_table(r);
    if (!c->json_out.empty()) {
      if (Status st = write_json_file(c->json_out, exec::report_to_json(r)); !st) return report(st);
      std::printf("wrote %s\n", c->json_out.c_str());
    }
    std::printf("recorded as run %lld in %s\n", static_cast<long long>(res->run_id), res->db_path.c_str());
    if (r.oom) {
      std::fprintf(stderr, "llmplan: out of memory in %s, %s%s: %s\n", exec::to_string(r.oom_where.phase), r.oom_where.part.c_str(),
                   r.oom_where.layer >= 0 ? (" " + std::to_string(r.oom_where.layer)).c_str() : "", r.oom_message.c_str());
      if (!r.fixes.empty()) {
        std::fprintf(stderr, "planner's suggested fixes (cheapest first):\n");
        for (const std::string& fx : r.fixes) std::fprintf(stderr, "  - %s\n", fx.c_str());
      }
      return 1;
    }
    return 0;
  };
}

}  // namespace llmplan::cli
