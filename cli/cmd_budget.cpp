// llmplan budget: what a budget of time, money or tokens buys, with goodput, cost and energy.
//   --gpus N --days D (or --dollars X)   the compute-optimal model and token count for that
//                                        compute (Hoffmann et al. 2022) and its best plan
//   --model M --tokens T --days D        the fewest GPUs (nodes doubling) that train T tokens in D days
//   --model M --tokens T [--gpus N]      days, GPU-hours, cost and energy of the best plan
#include <bit>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/budget.h"
#include "cli/commands.h"
#include "cli/print.h"
#include "planner/search/compute_optimal.h"
#include "planner/search/sweep.h"
#include "planner/spec/recipe.h"
#include "planner/spec/units.h"

namespace llmplan::cli {

namespace {

struct BudgetCommand {
  JobFlags job;
  BudgetFlags budget;
  double days = 0, dollars = 0;
  CLI::Option *days_opt = nullptr, *dollars_opt = nullptr, *gpus_opt = nullptr;
  std::string rule = "tokens-per-param";
  double tokens_per_param = 20;
  std::string shape = "derived";
  int max_gpus = 65536;
  int threads = 0;
  std::string json_out = "best.json";
  bool batch_given = false;
};

// The best plan of a setup by throughput at its goodput, with its reports.
struct BestPlan {
  PlanFile file;
  StepTime time;
  MemoryReport memory;
  Goodput goodput;
  double seconds = 0;  // the sweep's
};

// Ok with no value: no plan fits (`why` says how close the closest came).
Result<std::optional<BestPlan>> best_plan(Setup& s, const BudgetSetup& b, int threads, std::string* why) {
  SweepSpace space;
  space.precision = {s.file.job.precision};
  SweepOptions opt = sweep_options_for(s);
  opt.objective = Objective::cost;  // wall-clock GPU-hours per token at each plan's goodput
  opt.goodput = &b.goodput;
  opt.top_k = 1;
  opt.threads = threads;
  const SweepResult r = run_sweep(s.file.model, s.file.cluster, s.file.job, s.file.gpus, space, opt);
  if (r.top.empty()) {
    *why = r.has_closest ? "no plan fits; the closest, " + plan_summary(r.closest.plan) + ", needs " + gib(r.closest.peak_bytes)
                         : "no plan passes the structural checks";
    return std::optional<BestPlan>{};
  }
  BestPlan best;
  best.file = s.file;
  best.file.plan = r.top.front().plan;
  best.file.job = job_for(s.file.job, r.top.front());
  best.memory = estimate_memory(best.file.model, best.file.cluster, best.file.job, best.file.plan, opt.memory);
  best.time = estimate_time(best.file.model, best.file.cluster, best.file.job, best.file.plan, opt.efficiency);
  best.goodput = estimate_goodput(best.file.model, best.file.cluster, best.file.job, best.file.plan, best.file.gpus, best.time.total, b.goodput);
  best.seconds = r.seconds;
  return std::optional<BestPlan>{std::move(best)};
}

int finish(const BestPlan& best, const BudgetSetup& b, double tokens, const std::string& json_out, const Setup& s) {
  std::printf("\nBest plan: %s (stack %s)\n", plan_summary(best.file.plan).c_str(), s.stack.name.c_str());
  print_memory(best.memory, s.headroom_bytes);
  print_time(best.time, best.file.gpus);
  print_training_budget(training_budget(tokens, best.file.gpus, best.file.cluster.gpus_per_node, best.time, best.goodput.fraction,
                                        b.price_per_gpu_hour, b.energy),
                        best.goodput, b, best.file.gpus);
  if (Status st = write_json_file(json_out, plan_file_to_json(best.file, best.memory, best.time)); !st) return report(st);
  std::printf("wrote %s\n", json_out.c_str());
  return 0;
}

// The global batch when none is given: 1024 sequences, or a quarter of a sequence per GPU on
// more than 4096 GPUs (Llama 3 405B trained at 16M tokens a step on 16k GPUs), so that data
// parallelism is not starved.
int64_t default_global_batch(int gpus) { return std::max<int64_t>(1024, std::bit_ceil(static_cast<uint64_t>(gpus) / 4)); }

double params_of(const ModelSpec& m) { return static_cast<double>(count_params(m, 1, 1, 1, 0, 0).total); }

// --gpus N with --days or --dollars: iterate compute -> Chinchilla size -> best plan -> the
// compute that plan reaches, from a first guess of the MFU and goodput, until they settle.
int compute_optimal(const BudgetCommand& c, Setup& s, BudgetSetup& b, double seconds) {
  const bool by_law = c.rule == "law";
  const double peak = s.file.cluster.gpu.peak(compute_dtype(s.file.job, s.file.cluster.gpu));
  double mfu = 0.40, goodput = 0.90;  // first guesses; replaced by the plan's own after one round
  std::printf("Compute-optimal sizing for %s on %d x %s (%s: %s)\n", duration_text(seconds).c_str(), s.file.gpus, s.file.cluster.gpu.name.c_str(),
              by_law ? "the fitted law" : "tokens per parameter",
              by_law ? "Hoffmann et al. 2022 Approach 3, L = 1.69 + 406.4/N^0.34 + 410.7/D^0.28, C = 6ND"
                     : (format_count(c.tokens_per_param) + " tokens per parameter, C = 6ND (Hoffmann et al. 2022, Table 3)").c_str());
  std::printf("%5s %11s %9s %9s  %-26s %-44s %6s %8s\n", "round", "FLOP", "N target", "D target", "model", "best plan", "MFU", "goodput");
  std::optional<BestPlan> best;
  ComputeOptimal target;
  bool settled = false;
  for (int round = 1; round <= 8; ++round) {
    const double flops = s.file.gpus * peak * mfu * goodput * seconds;
    target = by_law ? optimal_by_law(flops) : optimal_by_tokens_per_param(flops, c.tokens_per_param);
    if (target.params < 2e8 || target.params > 1e14) {
      char compute[32];
      std::snprintf(compute, sizeof compute, "%.3g", flops);
      return report(Status::bad_input("budget: " + std::string(compute) + " FLOP gives a compute-optimal model of " + format_count(target.params) +
                                      " parameters, outside the 200M..100T that llmplan shapes; expected a larger or smaller --days, --dollars or --gpus"));
    }
    if (c.shape == "preset") {
      Result<ModelSpec> m = s.presets.nearest_model(target.params, c.job.family, true);
      if (!m) return report(m.status());
      s.file.model = *m;
    } else {
      s.file.model = derived_llama_shape(target.params, std::max<int64_t>(8192, s.file.job.seq_len));
    }
    std::string why;
    Result<std::optional<BestPlan>> bp = best_plan(s, b, c.threads, &why);
    if (!bp) return report(bp.status());
    char model[64];
    std::snprintf(model, sizeof model, "%s (%dL %lldh)", s.file.model.name.c_str(), s.file.model.layers, static_cast<long long>(s.file.model.hidden));
    if (!bp->has_value()) {
      std::printf("%5d %11.3e %9s %9s  %-26s %s\n", round, flops, format_count(target.params).c_str(), format_count(target.tokens).c_str(), model,
                  why.c_str());
      std::fprintf(stderr, "llmplan: budget: the compute-optimal model %s does not fit %d x %s: %s\n", s.file.model.name.c_str(), s.file.gpus,
                   s.file.cluster.gpu.name.c_str(), why.c_str());
      return 1;
    }
    best = std::move(**bp);
    std::printf("%5d %11.3e %9s %9s  %-26s %-44s %5.1f%% %7.1f%%\n", round, flops, format_count(target.params).c_str(),
                format_count(target.tokens).c_str(), model, plan_summary(best->file.plan).c_str(), 100 * best->time.mfu, 100 * best->goodput.fraction);
    std::fflush(stdout);
    // Settled: the plan reaches the compute its size was chosen for (within 3%; the size
    // goes as its square root).
    const double reached = best->time.mfu * best->goodput.fraction;
    settled = std::fabs(reached / (mfu * goodput) - 1) < 0.03;
    if (settled) break;
    mfu = best->time.mfu;
    goodput = best->goodput.fraction;
  }
  if (!settled)
    std::printf("(the size and the plan's efficiency did not settle in 8 rounds: the last round stands; the shapes' efficiencies differ)\n");
  const double tokens = best->time.tokens_per_s * best->goodput.fraction * seconds;
  const double n = params_of(best->file.model);
  const double flops = s.file.gpus * peak * best->time.mfu * best->goodput.fraction * seconds;
  const ComputeOptimal law = optimal_by_law(flops), ratio = optimal_by_tokens_per_param(flops, c.tokens_per_param);
  std::printf("\nCompute: %.3e FLOP in %s at the plan's %.1f%% MFU and %.1f%% goodput.\n", flops, duration_text(seconds).c_str(),
              100 * best->time.mfu, 100 * best->goodput.fraction);
  std::printf("  fitted law (Approach 3):   N = %s, D = %s\n", format_count(law.params).c_str(), format_count(law.tokens).c_str());
  std::printf("  %g tokens per parameter:   N = %s, D = %s\n", c.tokens_per_param, format_count(ratio.params).c_str(), format_count(ratio.tokens).c_str());
  Result<ModelSpec> nearest = s.presets.nearest_model(target.params, c.job.family, true);
  if (nearest) std::printf("  nearest preset:            %s (%s parameters)\n", nearest->name.c_str(), format_count(params_of(*nearest)).c_str());
  std::printf("Planned: %s, %s parameters (%d layers, hidden %lld, %d heads, %d KV heads, FFN %lld), %s tokens (%.1f per parameter)\n",
              best->file.model.name.c_str(), format_count(n).c_str(), best->file.model.layers, static_cast<long long>(best->file.model.hidden),
              best->file.model.heads, best->file.model.kv_heads, static_cast<long long>(best->file.model.ffn_hidden), format_count(tokens).c_str(),
              tokens / n);
  return finish(*best, b, tokens, c.json_out, s);
}

// --model M --tokens T --days D: GPU counts from one node, doubling, until one is fast enough.
int gpus_for_days(const BudgetCommand& c, const Setup& first, BudgetSetup& b) {
  const double limit_s = c.days * 86400;
  std::printf("GPUs to train %s tokens of %s in %s on %s (nodes doubling up to %d GPUs):\n", format_count(b.tokens).c_str(),
              first.file.model.name.c_str(), duration_text(limit_s).c_str(), first.file.cluster.gpu.name.c_str(), c.max_gpus);
  std::printf("%7s  %-44s %12s %6s %8s %10s\n", "GPUs", "best plan", "tokens/s", "MFU", "goodput", "days");
  const int node = first.file.cluster.gpus_per_node;
  for (int g = node; g <= c.max_gpus; g *= 2) {
    JobFlags jf = c.job;
    jf.gpus = g;
    if (!c.batch_given) jf.global_batch = default_global_batch(g);
    Result<Setup> setup = setup_from_flags(jf);
    if (!setup) return report(setup.status());
    if (c.job.precision.empty()) setup->file.job.precision = default_half_precision(setup->file.cluster.gpu);
    retarget_budget(*setup, c.budget, &b);
    std::string why;
    Result<std::optional<BestPlan>> bp = best_plan(*setup, b, c.threads, &why);
    if (!bp) return report(bp.status());
    if (!bp->has_value()) {
      std::printf("%7d  %s\n", g, why.c_str());
      std::fflush(stdout);
      continue;
    }
    const BestPlan& best = **bp;
    const double wall_s = b.tokens / (best.time.tokens_per_s * best.goodput.fraction);
    std::printf("%7d  %-44s %12.0f %5.1f%% %7.1f%% %10.1f\n", g, plan_summary(best.file.plan).c_str(), best.time.tokens_per_s, 100 * best.time.mfu,
                100 * best.goodput.fraction, wall_s / 86400);
    std::fflush(stdout);
    if (wall_s <= limit_s) return finish(best, b, b.tokens, c.json_out, *setup);
  }
  std::fprintf(stderr, "llmplan: budget: no GPU count up to --max-gpus %d trains %s tokens in %g days (the rows above)\n", c.max_gpus,
               format_count(b.tokens).c_str(), c.days);
  return 1;
}

}  // namespace

Runner register_budget(CLI::App* sub) {
  auto c = std::make_shared<BudgetCommand>();
  c->job.seq = 4096;            // a 2024-26 pre-training context
  c->job.global_batch = 1024;   // 4M tokens a step at 4096
  c->job.gpu = "h100-sxm";
  add_job_flags(sub, &c->job);
  add_budget_flags(sub, &c->budget);
  c->days_opt = sub->add_option("--days", c->days, "wall-clock days the training may take");
  c->dollars_opt = sub->add_option("--dollars", c->dollars, "money it may cost, USD (at --price-per-gpu-hour or the GPU's listed price)");
  sub->add_option("--rule", c->rule, "compute-optimal rule: tokens-per-param (Table 3) or law (Approach 3 fit)")->capture_default_str();
  sub->add_option("--tokens-per-param", c->tokens_per_param, "tokens per parameter of the tokens-per-param rule")->capture_default_str();
  sub->add_option("--shape", c->shape, "model for the compute-optimal size: derived (a Llama 3 shape) or preset (the nearest)")->capture_default_str();
  sub->add_option("--max-gpus", c->max_gpus, "largest GPU count --days may ask for")->capture_default_str();
  sub->add_option("--threads", c->threads, "sweep worker threads (0 = all cores)");
  sub->add_option("--json", c->json_out, "write the best plan here")->capture_default_str();
  return [c, sub]() {
    c->gpus_opt = sub->get_option("--gpus");
    const bool days = c->days_opt->count() > 0, dollars = c->dollars_opt->count() > 0;
    if (days && !(c->days > 0 && c->days <= 36500))
      return report(Status::bad_input("--days: expected a positive number of days up to 36500, got " + std::to_string(c->days)));
    if (dollars && !(c->dollars > 0 && c->dollars <= 1e12))
      return report(Status::bad_input("--dollars: expected a positive amount up to 1e12 USD, got " + std::to_string(c->dollars)));
    if (days && dollars) return report(Status::bad_input("--days and --dollars: give one, not both"));
    if (c->rule != "tokens-per-param" && c->rule != "law")
      return report(Status::bad_input("--rule: expected tokens-per-param or law, got '" + c->rule + "'"));
    if (!(c->tokens_per_param >= 1 && c->tokens_per_param <= 1e4))
      return report(Status::bad_input("--tokens-per-param: expected 1..10000, got " + std::to_string(c->tokens_per_param)));
    if (c->shape != "derived" && c->shape != "preset") return report(Status::bad_input("--shape: expected derived or preset, got '" + c->shape + "'"));
    if (c->max_gpus < 1 || c->max_gpus > (1 << 20))
      return report(Status::bad_input("--max-gpus: expected 1..1048576, got " + std::to_string(c->max_gpus)));
    if (c->threads < 0 || c->threads > 4096)
      return report(Status::bad_input("--threads: expected 0 (all cores) .. 4096, got " + std::to_string(c->threads)));
    const bool model_given = !c->job.model.empty() || !c->job.params.empty();
    const bool tokens_given = !c->budget.tokens.empty();
    if (!model_given && tokens_given)
      return report(Status::bad_input("--tokens: needs --model (or --params); without a model, budget sizes one for --days or --dollars"));
    if (!model_given && !days && !dollars)
      return report(Status::bad_input("budget: expected --days or --dollars (the compute-optimal model for them), or --model with --tokens"));
    if (model_given && !tokens_given)
      return report(Status::bad_input("--model: needs --tokens (to size a model for a budget, leave out --model)"));
    if (model_given && dollars) return report(Status::bad_input("--dollars: only without --model (with --model, give --tokens and --days or --gpus)"));
    if (model_given && days && c->gpus_opt->count() > 0)
      return report(Status::bad_input("--gpus: not with --model, --tokens and --days, which find the GPU count (leave out --days to cost --gpus)"));

    c->batch_given = sub->get_option("--global-batch")->count() > 0;
    if (!c->batch_given && !(model_given && days)) c->job.global_batch = default_global_batch(c->job.gpus);
    Result<Setup> setup = setup_from_flags(c->job);
    if (!setup) return report(setup.status());
    Setup& s = *setup;
    if (c->job.precision.empty()) s.file.job.precision = default_half_precision(s.file.cluster.gpu);
    Result<BudgetSetup> b = budget_setup(c->budget, s);
    if (!b) return report(b.status());
    if (!s.model_note.empty() && model_given) std::printf("%s\n", s.model_note.c_str());

    if (model_given && days) return gpus_for_days(*c, s, *b);
    if (model_given) {
      std::string why;
      Result<std::optional<BestPlan>> bp = best_plan(s, *b, c->threads, &why);
      if (!bp) return report(bp.status());
      if (!bp->has_value()) {
        std::fprintf(stderr, "llmplan: budget: %s on %d x %s: %s\n", s.file.model.name.c_str(), s.file.gpus, s.file.cluster.gpu.name.c_str(), why.c_str());
        return 1;
      }
      return finish(**bp, *b, b->tokens, c->json_out, s);
    }
    double seconds = c->days * 86400;
    if (dollars) {
      if (b->price_per_gpu_hour <= 0)
        return report(Status::bad_input("--dollars: needs a price: --price-per-gpu-hour (data/economics/prices.json lists none for " +
                                        s.file.cluster.gpu.name + ")"));
      seconds = c->dollars / (b->price_per_gpu_hour * s.file.gpus) * 3600;
      std::printf("%s at $%.4g per GPU-hour (%s) buys %s on %d GPUs\n", money_text(c->dollars).c_str(), b->price_per_gpu_hour,
                  b->price_note.c_str(), duration_text(seconds).c_str(), s.file.gpus);
    }
    return compute_optimal(*c, s, *b, seconds);
  };
}

}  // namespace llmplan::cli
