// llmplan sweep: every plan of a job on N GPUs, ranked; the best written as plan JSON.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>

#include "cli/budget.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/print.h"
#include "planner/search/fit_advice.h"
#include "planner/search/sweep.h"
#include "planner/spec/units.h"
#include "simulator/step_simulator.h"

namespace llmplan::cli {

namespace {

struct SweepCommand {
  JobFlags job;
  std::vector<int> tp, pp, vpp, cp, ep, micro_batch, zero;
  std::vector<std::string> recompute;
  std::vector<std::string> cp_exchange;
  std::vector<std::string> schedules;
  std::string sp = "both", offload = "both", flash = "both";  // "on", "off" or "both" (vary)
  std::string activation_offload = "off";  // "on": offload the fewest layers' activations that make a plan fit
  int max_tp = kUnsetFlag, max_pp = kUnsetFlag;  // unset: no bound
  int top = 10;
  int threads = 0;
  std::string objective = "tokens-per-s";
  std::string json_out = "best.json";
  std::string csv_out;
  BudgetFlags budget;
  bool pareto = false;
  bool tp_across_nodes = false;
  int simulate_top = 0;
  std::string from;       // a framework's launch configuration: its model, cluster and job, and its plan to compare
  std::string format;     // of --from ("" = detected)
};

// The plan fields a single change of a configuration moves (grad_accum follows from the
// micro-batch; the schedule from vpp): how many differ between a and b.
int fields_differing(const ParallelPlan& a, const ParallelPlan& b) {
  return (a.dp != b.dp) + (a.tp != b.tp) + (a.pp != b.pp) + (a.vpp != b.vpp) + (a.cp != b.cp) + (a.ep != b.ep) + (a.sp != b.sp) +
         (a.micro_batch != b.micro_batch) + (a.zero != b.zero) + (a.recompute != b.recompute) + (a.offload_optimizer != b.offload_optimizer) + (a.offload_params != b.offload_params) +
         (a.flash_attention != b.flash_attention) + (a.cp > 1 && a.cp_exchange != b.cp_exchange) +
         (a.activation_offload_layers != b.activation_offload_layers);
}

// What changes between a configuration's plan and another, in words ("tp 4 -> 2").
std::string change_text(const ParallelPlan& a, const ParallelPlan& b) {
  std::string out;
  auto add = [&](const char* name, const std::string& x, const std::string& y) {
    if (x != y) out += (out.empty() ? "" : ", ") + std::string(name) + " " + x + " -> " + y;
  };
  add("dp", std::to_string(a.dp), std::to_string(b.dp));
  add("tp", std::to_string(a.tp), std::to_string(b.tp));
  add("pp", std::to_string(a.pp), std::to_string(b.pp));
  add("vpp", std::to_string(a.vpp), std::to_string(b.vpp));
  add("cp", std::to_string(a.cp), std::to_string(b.cp));
  add("ep", std::to_string(a.ep), std::to_string(b.ep));
  add("sp", a.sp ? "on" : "off", b.sp ? "on" : "off");
  add("micro-batch", std::to_string(a.micro_batch), std::to_string(b.micro_batch));
  add("ZeRO", std::to_string(a.zero), std::to_string(b.zero));
  add("recompute", to_string(a.recompute), to_string(b.recompute));
  add("optimizer offload", a.offload_optimizer ? "on" : "off", b.offload_optimizer ? "on" : "off");
  add("parameter offload", a.offload_params ? "on" : "off", b.offload_params ? "on" : "off");
  add("flash attention", a.flash_attention ? "on" : "off", b.flash_attention ? "on" : "off");
  if (a.cp > 1) add("cp exchange", to_string(a.cp_exchange), to_string(b.cp_exchange));
  add("activation offload layers", std::to_string(a.activation_offload_layers), std::to_string(b.activation_offload_layers));
  return out;
}

// --from: the configuration's own plan beside the sweep's: its memory and speed, its rank
// among the fitting plans, the best single change and the best plan.
void print_config_comparison(const Setup& s, const SweepOptions& opt, const SweepResult& r) {
  const PlanFile& f = s.file;
  const ParallelPlan& mine = f.plan;
  const MemoryReport mem = estimate_memory(f.model, f.cluster, f.job, mine, opt.memory);
  const StepTime time = estimate_time(f.model, f.cluster, f.job, mine, opt.efficiency);
  const bool fits = mem.fits(s.headroom_bytes);
  int faster = 0, fitting = 0;
  const PlanResult* best_single = nullptr;
  for (const PlanResult& x : r.all) {
    if (x.reason != RejectReason::none || x.precision != f.job.precision) continue;
    ++fitting;
    if (x.tokens_per_s > time.tokens_per_s) ++faster;
    if (fields_differing(mine, x.plan) == 1 && x.tokens_per_s > time.tokens_per_s && (!best_single || x.tokens_per_s > best_single->tokens_per_s))
      best_single = &x;
  }
  std::printf("\nYour configuration's plan: %s\n", plan_summary(mine).c_str());
  std::printf("  peak %s on stage %d: %s; %.0f tokens/s, MFU %.1f%%, step %.3f s\n", gib(mem.worst.total).c_str(), mem.worst.stage,
              fits ? "fits" : "does NOT fit", time.tokens_per_s, 100 * time.mfu, time.total);
  if (s.framework) {
    const std::string why = framework_refusal_text(*s.framework, f.model, f.job, mine);
    if (!why.empty()) std::printf("  %s\n", why.c_str());
  }
  if (fits) std::printf("  %d of the %d fitting plans are predicted faster\n", faster, fitting);
  if (best_single)
    std::printf("  best single change: %s: %.0f tokens/s (%+.1f%%), peak %s\n", change_text(mine, best_single->plan).c_str(),
                best_single->tokens_per_s, 100 * (best_single->tokens_per_s / time.tokens_per_s - 1), gib(best_single->peak_bytes).c_str());
  else
    std::printf("  no single change of the plan is predicted faster%s\n", fits ? "" : " (and fits)");
  if (!r.top.empty())
    std::printf("  best plan: %s: %.0f tokens/s (%+.1f%%)\n", change_text(mine, r.top.front().plan).c_str(), r.top.front().tokens_per_s,
                100 * (r.top.front().tokens_per_s / time.tokens_per_s - 1));
}

// A pin given as on|off (parse_on_off) becomes the one value the sweep tries; "both" (the
// default) tries both.
constexpr const char* kBothValues = "both";

Status on_off(const std::string& v, const char* flag, std::vector<int>* out, const char* choices = "on, off or both") {
  if (v == kBothValues) return Status::ok();
  Result<bool> on = parse_on_off(v, flag, choices);
  if (!on) return on.status();
  *out = {*on ? 1 : 0};
  return Status::ok();
}

Status positive_list(const std::vector<int>& v, const char* flag) {
  for (int x : v)
    if (x < 1) return Status::bad_input(std::string(flag) + ": expected positive integers, got " + std::to_string(x));
  return Status::ok();
}

// With --tokens: the days and the cost of the token budget at each plan's goodput; with
// --schedules, each plan's pipeline schedule.
struct BudgetColumns {
  double tokens = 0;  // 0: no columns
  double price_per_gpu_hour = 0;
  int gpus = 0;
  bool schedule = false;
};

void print_row(int rank, const PlanResult& r, const BudgetColumns& bc, const std::vector<FrameworkSpec>& frameworks) {
  const ParallelPlan& p = r.plan;
  // CP with its exchange: r = ring, ag = all-gather.
  const std::string cp = std::to_string(p.cp) + (p.cp == 1 ? "" : p.cp_exchange == CpExchange::ring ? "r" : "ag");
  // Offload: "on" for the optimizer's, "a<k>" for k layers' activations.
  const std::string off = p.activation_offload_layers > 0 ? "a" + std::to_string(p.activation_offload_layers) : p.offload_params ? "prm" : p.offload_optimizer ? "on" : "-";
  std::printf("%4d  %3d %3d %3d %3d %4s %3s %4d %5d %4d %-9s %3s %5s  %s %5s %9.2f %12.0f %6.1f%% %8.3f", rank, p.dp, p.tp, p.pp, p.vpp, cp.c_str(),
              p.sp ? "on" : "-", p.micro_batch, p.grad_accum, p.zero, recompute_text(p).c_str(), off.c_str(),
              p.flash_attention ? "on" : "off", to_string(r.precision), to_string(r.amp), r.peak_bytes / kGiB, r.tokens_per_s, 100 * r.mfu,
              r.step_time_s);
  if (bc.schedule) std::printf(" %-11s", p.pp > 1 ? to_string(p.schedule) : "-");
  if (!frameworks.empty()) std::printf(" %*s", static_cast<int>(std::max<size_t>(7, frameworks.size())), framework_letters(r.frameworks, frameworks).c_str());
  if (bc.tokens > 0) {
    const double wall_s = bc.tokens / (r.tokens_per_s * r.goodput);
    std::printf(" %7.1f %7.1f%%", wall_s / 86400, 100 * r.goodput);
    if (bc.price_per_gpu_hour > 0) std::printf(" %10s", money_text(wall_s / 3600 * bc.gpus * bc.price_per_gpu_hour).c_str());
  }
  std::printf("\n");
}

// Simulates the first k plans and returns them ordered by simulated step time (its
// tokens/s written into each result), followed by the rest in analytic order.
std::vector<PlanResult> rerank_by_simulation(const PlanFile& base, const std::vector<PlanResult>& top, int k) {
  const size_t n = std::min<size_t>(top.size(), static_cast<size_t>(k));
  std::vector<PlanResult> sim(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(n));
  std::printf("\nSimulating the analytic top %zu:\n  %-52s %12s %12s %8s\n", n, "plan", "analytic s", "simulated s", "diff");
  SimOptions so;
  so.record_events = false;
  so.record_memory = false;
  const double tokens = static_cast<double>(base.job.global_batch) * base.job.seq_len;
  for (PlanResult& x : sim) {
    Result<SimResult> r = simulate_step(base.model, base.cluster, job_for(base.job, x), x.plan, so);
    if (!r && r.status().exit_code() == 2) {  // a plan the simulator does not model: keep its analytic time
      std::printf("  %-52s %12.4f %12s  (%s)\n", plan_summary(x.plan).c_str(), x.step_time_s, "-", r.status().message().c_str());
      continue;
    }
    if (!r) {
      report(r.status());
      return {};
    }
    std::printf("  %-52s %12.4f %12.4f %+7.1f%%\n", plan_summary(x.plan).c_str(), x.step_time_s, r->total, 100 * (r->total / x.step_time_s - 1));
    x.mfu *= x.step_time_s / r->total;
    x.step_time_s = r->total;
    x.tokens_per_s = tokens / r->total;
  }
  std::stable_sort(sim.begin(), sim.end(), [](const PlanResult& a, const PlanResult& b) { return a.step_time_s < b.step_time_s; });
  sim.insert(sim.end(), top.begin() + static_cast<std::ptrdiff_t>(n), top.end());
  return sim;
}

void print_header(const BudgetColumns& bc, const std::vector<FrameworkSpec>& frameworks) {
  std::printf("%4s  %3s %3s %3s %3s %4s %3s %4s %5s %4s %-9s %3s %5s  %-9s %9s %12s %7s %8s", "rank", "dp", "tp", "pp", "vpp", "cp", "sp", "mb",
              "accum", "zero", "recompute", "off", "flash", "precision", "peak GiB", "tokens/s", "MFU", "step s");
  if (bc.schedule) std::printf(" %-11s", "schedule");
  if (!frameworks.empty()) std::printf(" %*s", static_cast<int>(std::max<size_t>(7, frameworks.size())), "runs on");
  if (bc.tokens > 0) std::printf(" %7s %8s", "days", "goodput");
  if (bc.tokens > 0 && bc.price_per_gpu_hour > 0) std::printf(" %10s", "cost");
  std::printf("\n");
}

}  // namespace

Runner register_sweep(CLI::App* sub) {
  auto c = std::make_shared<SweepCommand>();
  add_job_flags(sub, &c->job);
  sub->add_option("--tp", c->tp, "pin tensor-parallel degree(s)")->delimiter(',');
  sub->add_option("--pp", c->pp, "pin pipeline degree(s)")->delimiter(',');
  sub->add_option("--vpp", c->vpp, "pin virtual stages")->delimiter(',');
  sub->add_option("--cp", c->cp, "pin context-parallel degree(s)")->delimiter(',');
  sub->add_option("--ep", c->ep, "pin expert-parallel degree(s)")->delimiter(',');
  sub->add_option("--micro-batch", c->micro_batch, "pin micro-batch size(s)")->delimiter(',');
  sub->add_option("--zero", c->zero, "pin ZeRO stage(s)")->delimiter(',');
  sub->add_option("--recompute", c->recompute, "pin recompute policy (none, selective, full)")->delimiter(',');
  sub->add_option("--sp", c->sp, "pin sequence parallel: on, off or both")->capture_default_str();
  sub->add_option("--offload", c->offload, "pin offload: on (optimizer states), params (optimizer states and ZeRO-3 parameters), off, or both (every choice)")->capture_default_str();
  sub->add_option("--flash", c->flash, "pin flash attention: on, off or both")->capture_default_str();
  sub->add_option("--activation-offload", c->activation_offload,
                  "on: a plan that does not fit offloads the activations of the fewest layers per stage that make it fit")
      ->capture_default_str();
  sub->add_option("--cp-exchange", c->cp_exchange, "pin the CP exchange (ring, all_gather)")->delimiter(',');
  sub->add_option("--schedules", c->schedules,
                  std::string("pipeline schedules to try where pp > 1 (") + kScheduleNames +
                      ", or all; default 1f1b and interleaved, which execute runs)")
      ->delimiter(',');
  sub->add_option("--max-tp", c->max_tp, "upper bound on tp");
  sub->add_option("--max-pp", c->max_pp, "upper bound on pp");
  sub->add_flag("--tp-across-nodes", c->tp_across_nodes, "allow tp larger than a node");
  sub->add_option("--top", c->top, "plans to print")->capture_default_str();
  sub->add_option("--threads", c->threads, "worker threads (0 = all cores)");
  sub->add_option("--objective", c->objective, "tokens-per-s, memory or cost")->capture_default_str();
  sub->add_option("--json", c->json_out, "write the best plan here")->capture_default_str();
  sub->add_option("--csv", c->csv_out, "write every enumerated plan here");
  add_budget_flags(sub, &c->budget);
  sub->add_flag("--pareto", c->pareto, "print the memory-throughput Pareto front");
  sub->add_option("--simulate-top", c->simulate_top, "re-rank the analytic top K by simulated step time");
  sub->add_option("--from", c->from,
                  "a framework's launch configuration (as llmplan import reads it): sweep its model, cluster and job, and compare its plan "
                  "with the best single change and the best plan");
  sub->add_option("--format", c->format, "the --from configuration's format (default: detected)");
  return [c, sub]() {
    Result<Setup> setup = [&]() -> Result<Setup> {
      if (c->from.empty()) {
        if (!c->format.empty()) return Status::bad_input("--format: only with --from");
        return setup_from_flags(c->job);
      }
      for (const char* flag : {"--gpus", "--seq", "--global-batch", "--mode", "--params", "--cluster", "--precision", "--fp8"})
        if (sub->get_option(flag)->count() > 0)
          return Status::bad_input(std::string(flag) + ": the job comes from --from " + c->from + " (give --model or --gpu only where it names none)");
      ConfigFlags cf;
      cf.format = c->format;
      cf.model = c->job.model;
      cf.gpu = sub->get_option("--gpu")->count() > 0 ? c->job.gpu : "";
      cf.gpus_per_node = c->job.gpus_per_node == kUnsetFlag ? 0 : c->job.gpus_per_node;
      return setup_from_config(c->from, cf, c->job);
    }();
    if (!setup) return report(setup.status());
    Setup& s = *setup;
    SweepSpace space;
    SweepOptions opt;
    for (auto [v, flag] : {std::pair{&c->tp, "--tp"}, {&c->pp, "--pp"}, {&c->vpp, "--vpp"}, {&c->cp, "--cp"}, {&c->ep, "--ep"},
                           {&c->micro_batch, "--micro-batch"}})
      if (Status st = positive_list(*v, flag); !st) return report(st);
    space.tp = c->tp;
    space.pp = c->pp;
    space.vpp = c->vpp;
    space.cp = c->cp;
    space.ep = c->ep;
    space.micro_batch = c->micro_batch;
    for (int z : c->zero)
      if (z < 0 || z > 3) return report(Status::bad_input("--zero: expected 0..3, got " + std::to_string(z)));
    space.zero = c->zero;
    for (const auto& r : c->recompute) {
      Recompute rc;
      if (!parse_enum(r, &rc) || rc == Recompute::full_k)
        return report(Status::bad_input("--recompute: expected none, selective or full, got '" + r + "'"));
      space.recompute.push_back(rc);
    }
    if (Status st = on_off(c->sp, "--sp", &space.sp); !st) return report(st);
    if (c->offload == "params") space.offload = {2};  // optimizer and ZeRO-3 parameters (SweepSpace::offload)
    else if (Status st = on_off(c->offload, "--offload", &space.offload, "on, params, off or both"); !st) return report(st);
    if (Status st = on_off(c->flash, "--flash", &space.flash); !st) return report(st);
    // on|off only: "both" would mean nothing more than on (a plan that fits offloads nothing).
    Result<bool> act_offload = parse_on_off(c->activation_offload, "--activation-offload");
    if (!act_offload) return report(act_offload.status());
    space.activation_offload = *act_offload;
    for (const auto& x : c->cp_exchange) {
      CpExchange e;
      if (!parse_enum(x, &e)) return report(Status::bad_input("--cp-exchange: expected ring or all_gather, got '" + x + "'"));
      space.cp_exchange.push_back(e);
    }
    if (Status st = parse_sweep_schedules(c->schedules, "--schedules", &space.schedule); !st) return report(st);
    for (auto [v, flag] : {std::pair{c->max_tp, "--max-tp"}, {c->max_pp, "--max-pp"}})
      if (Status st = positive_if_given(v, flag, "a positive bound"); !st) return report(st);
    space.max_tp = c->max_tp != kUnsetFlag ? c->max_tp : 0;
    space.max_pp = c->max_pp != kUnsetFlag ? c->max_pp : 0;
    if (c->threads < 0 || c->threads > 4096)
      return report(Status::bad_input("--threads: expected 0 (all cores) .. 4096, got " + std::to_string(c->threads)));
    space.tp_across_nodes = c->tp_across_nodes;
    if (!c->job.precision.empty() || !c->from.empty()) {
      space.precision = {s.file.job.precision};
    } else {
      // Unpinned: the GPU's 16-bit format (bf16 where it has one) at O2.
      s.file.job.precision = default_half_precision(s.file.cluster.gpu);
      space.precision = {s.file.job.precision};
    }
    // The stack's conventions; the stack not named, a plan fits only under every known
    // stack's memory conventions (the costliest error is "fits" for a run that dies), and
    // its peak is the upper end.
    opt = sweep_options_for(s);
    if (!parse_enum(c->objective, &opt.objective))
      return report(Status::bad_input("--objective: expected tokens-per-s, memory or cost, got '" + c->objective + "'"));
    if (c->top < 1) return report(Status::bad_input("--top: expected a positive count, got " + std::to_string(c->top)));
    if (c->simulate_top < 0) return report(Status::bad_input("--simulate-top: expected a count >= 0, got " + std::to_string(c->simulate_top)));
    opt.top_k = std::max(c->top, c->simulate_top);
    opt.threads = c->threads;
    opt.keep_all = !c->csv_out.empty() || !c->from.empty();
    // Goodput, days and cost: with a token budget, or to rank by cost (only then are the
    // reliability, price and power files read).
    if (Status st = check_budget_flags(c->budget); !st) return report(st);
    std::optional<BudgetSetup> budget;
    if (!c->budget.tokens.empty() || opt.objective == Objective::cost) {
      Result<BudgetSetup> b = budget_setup(c->budget, s);
      if (!b) return report(b.status());
      budget = std::move(*b);
      opt.goodput = &budget->goodput;
    }
    const double train_tokens = budget ? budget->tokens : 0;
    const BudgetColumns columns{train_tokens, budget ? budget->price_per_gpu_hour : 0, s.file.gpus, !space.schedule.empty()};
    const auto start = std::chrono::steady_clock::now();
    bool printed_progress = false;
    opt.progress = [&](int64_t done, int64_t total) {
      if (std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) return;
      std::fprintf(stderr, "\rsweep: %lld of ~%lld plans evaluated...", static_cast<long long>(done), static_cast<long long>(total));
      printed_progress = true;
    };

    if (!s.model_note.empty()) std::printf("%s\n", s.model_note.c_str());
    const SweepResult r = run_sweep(s.file.model, s.file.cluster, s.file.job, s.file.gpus, space, opt);
    if (printed_progress) std::fprintf(stderr, "\n");

    std::printf("Sweep of %s on %d x %s: %lld plans enumerated, %lld evaluated, %lld fit, in %.2f s (%.0f plans/s)\n",
                s.file.model.name.c_str(), s.file.gpus, s.file.cluster.gpu.name.c_str(), static_cast<long long>(r.enumerated),
                static_cast<long long>(r.evaluated), static_cast<long long>(r.fitting), r.seconds, r.enumerated / std::max(r.seconds, 1e-9));
    std::printf("Rejected:\n");
    for (int i = 1; i < static_cast<int>(RejectReason::kCount); ++i)
      if (r.rejected[i] > 0) std::printf("  %10lld  %s\n", static_cast<long long>(r.rejected[i]), describe(static_cast<RejectReason>(i)));
    if (s.framework)  // each framework rule with the plans it refused
      for (size_t i = 0; i < r.framework_rejected.size(); ++i)
        if (r.framework_rejected[i] > 0) {
          const FrameworkRule& rule = s.framework->rules[i];
          std::printf("  %10lld    %s: %s (rule %s; %s)\n", static_cast<long long>(r.framework_rejected[i]), s.framework->name.c_str(),
                      rule.why.c_str(), rule.id.c_str(), rule.source.c_str());
        }

    if (!c->csv_out.empty()) {
      std::ofstream csv(c->csv_out);
      if (!csv) return report(Status::runtime(c->csv_out + ": cannot write file"));
      csv << "dp,tp,pp,vpp,cp,ep,sp,micro_batch,grad_accum,zero,recompute,offload,flash,precision,amp,status,peak_gib,tokens_per_s,mfu,step_s,cp_exchange,"
             "peak_low_gib,peak_stack,activation_offload_layers,frameworks,recompute_layers\n";
      for (const PlanResult& x : r.all) {
        const ParallelPlan& p = x.plan;
        csv << p.dp << ',' << p.tp << ',' << p.pp << ',' << p.vpp << ',' << p.cp << ',' << p.ep << ',' << p.sp << ',' << p.micro_batch << ','
            << p.grad_accum << ',' << p.zero << ',' << to_string(p.recompute) << ',' << p.offload_optimizer << ',' << p.flash_attention << ','
            << to_string(x.precision) << ',' << to_string(x.amp) << ',' << (x.reason == RejectReason::none ? "fits" : describe(x.reason)) << ','
            << x.peak_bytes / kGiB << ',' << x.tokens_per_s << ',' << x.mfu << ',' << x.step_time_s << ',' << to_string(p.cp_exchange) << ','
            << x.peak_low_bytes / kGiB << ',' << (x.peak_convention < 0 ? s.stack.name : opt.also_fit[static_cast<size_t>(x.peak_convention)].stack)
            << ',' << p.activation_offload_layers << ',';
        bool first_fw = true;  // the frameworks that run it, joined by '+'
        for (size_t k = 0; k < opt.mark_frameworks.size(); ++k)
          if (x.frameworks >> k & 1u) csv << (first_fw ? "" : "+") << opt.mark_frameworks[k].name, first_fw = false;
        csv << ',' << p.recompute_layers << '\n';
      }
      std::printf("wrote %zu plans to %s\n", r.all.size(), c->csv_out.c_str());
    }

    if (!c->from.empty()) print_config_comparison(s, opt, r);
    if (r.top.empty()) {
      std::printf("\nNo plan fits in %s per GPU", gib(s.file.cluster.gpu.memory_bytes - s.headroom_bytes).c_str());
      if (r.has_closest && r.closest.reason == RejectReason::host_does_not_fit) {
        std::printf(" with what it offloads in the node's %s of host memory; the closest, %s, fits the GPU (%s) but needs %s of host memory per node.\n",
                    gib(s.file.cluster.host_memory_bytes).c_str(), plan_summary(r.closest.plan).c_str(), gib(r.closest.peak_bytes).c_str(),
                    gib(r.closest.host_bytes_per_node).c_str());
      } else if (r.has_closest) {
        std::printf("; the closest, %s, needs %s (short by %s).\n", plan_summary(r.closest.plan).c_str(), gib(r.closest.peak_bytes).c_str(),
                    gib(r.closest.peak_bytes - (s.file.cluster.gpu.memory_bytes - s.headroom_bytes)).c_str());
      } else {
        std::printf("; no plan even passed the structural checks above.\n");
      }
      print_fit_advice_for(s, space, opt);
      // The failure itself on stderr too (the contract: messages there, details on stdout).
      std::fprintf(stderr, "llmplan: sweep: no plan fits in %s per GPU (the reasons and the closest plan are above)\n",
                   gib(s.file.cluster.gpu.memory_bytes - s.headroom_bytes).c_str());
      return 1;
    }
    std::vector<PlanResult> ranked = r.top;
    if (c->simulate_top > 0) {
      ranked = rerank_by_simulation(s.file, r.top, c->simulate_top);
      if (ranked.empty()) return 1;
    }
    const size_t shown = std::min<size_t>(ranked.size(), static_cast<size_t>(c->top));
    if (!opt.also_fit.empty()) {
      std::printf("\npeak GiB below: the largest over the memory conventions of %s", s.stack.name.c_str());
      for (const MemoryConvention& mc : opt.also_fit) std::printf(", %s", mc.stack.c_str());
      std::printf("; a plan fits only under all of them (--stack NAME: one stack's own number)\n");
    }
    std::printf("\nTop %zu plans by %s%s:\n", shown, to_string(opt.objective), c->simulate_top > 0 ? " (simulated step time)" : "");
    print_header(columns, opt.mark_frameworks);
    for (size_t i = 0; i < shown; ++i) print_row(static_cast<int>(i + 1), ranked[i], columns, opt.mark_frameworks);
    if (c->pareto) {
      std::printf("\nPareto front (memory vs throughput), %zu plans:\n", r.pareto.size());
      print_header(columns, opt.mark_frameworks);
      for (size_t i = 0; i < r.pareto.size(); ++i) print_row(static_cast<int>(i + 1), r.pareto[i], columns, opt.mark_frameworks);
    }
    if (!opt.mark_frameworks.empty()) std::printf("runs on: %s\n", framework_legend(opt.mark_frameworks).c_str());

    PlanFile best = s.file;
    best.plan = ranked.front().plan;
    best.job = job_for(s.file.job, ranked.front());
    const MemoryReport mem = estimate_memory(best.model, best.cluster, best.job, best.plan, opt.memory);
    const StepTime time = estimate_time(best.model, best.cluster, best.job, best.plan, opt.efficiency);
    std::printf("\nBest plan: %s (stack %s%s%s)\n", plan_summary(best.plan).c_str(), s.stack.name.c_str(),
                s.framework ? ", framework " : "", s.framework ? s.framework->name.c_str() : "");
    print_memory(mem, s.headroom_bytes);
    if (!s.stack_given) print_memory_over_stacks(s.presets, best, s.headroom_bytes);
    print_time(time, best.gpus);
    if (train_tokens > 0) {
      const Goodput g = estimate_goodput(best.model, best.cluster, best.job, best.plan, best.gpus, time.total, budget->goodput);
      print_training_budget(
          training_budget(train_tokens, best.gpus, best.cluster.gpus_per_node, time, g.fraction, budget->price_per_gpu_hour, budget->energy), g,
          *budget, best.gpus);
    }
    if (Status st = write_json_file(c->json_out, plan_file_to_json(best, mem, time)); !st) return report(st);
    std::printf("wrote %s\n", c->json_out.c_str());
    return 0;
  };
}

Runner register_presets(CLI::App* sub) {
  auto root = std::make_shared<std::string>();
  sub->add_option("--data-root", *root, "folder with models/ and data/");
  return [root]() {
    Result<PresetRegistry> reg = load_presets(*root);
    if (!reg) return report(reg.status());
    std::printf("models:");
    for (const auto& id : reg->model_ids()) std::printf(" %s", id.c_str());
    std::printf("\ngpus:");
    for (const auto& id : reg->gpu_ids()) std::printf(" %s", id.c_str());
    std::printf("\nclusters:");
    for (const auto& id : reg->cluster_ids()) std::printf(" %s", id.c_str());
    std::printf("\nstacks:");
    for (const auto& id : reg->stack_ids()) std::printf(" %s", id.c_str());
    std::printf("\nframeworks:");
    for (const auto& id : reg->framework_ids()) std::printf(" %s", id.c_str());
    std::printf("\nread from: %s\n", (root->empty() ? default_data_root() : *root).c_str());
    return 0;
  };
}

}  // namespace llmplan::cli
