#include "cli/budget.h"

#include <cmath>
#include <cstdio>

#include "planner/spec/units.h"

namespace llmplan::cli {

namespace {

bool given(const CLI::Option* o) { return o && o->count() > 0; }

// "11.50 GiB", "5.16 TiB".
std::string bytes_text(double bytes) {
  char buf[64];
  if (bytes >= 1024 * kGiB) std::snprintf(buf, sizeof buf, "%.2f TiB", bytes / (1024 * kGiB));
  else if (bytes >= kGiB) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / kGiB);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / kMiB);
  return buf;
}

// A typed number must be finite and in [lo, hi] (NaN fails); the message names the flag.
Status in_range(double v, const char* flag, double lo, double hi, const char* expected) {
  if (!(v >= lo && v <= hi)) {
    char got[64];
    std::snprintf(got, sizeof got, "%g", v);
    return Status::bad_input(std::string(flag) + ": expected " + expected + ", got " + (std::isnan(v) ? std::string("NaN") : got));
  }
  return Status::ok();
}

}  // namespace

void add_budget_flags(CLI::App* app, BudgetFlags* f, bool with_tokens) {
  if (with_tokens) app->add_option("--tokens", f->tokens, "train this many tokens (e.g. 15T): days, GPU-hours, cost and energy");
  f->price_opt = app->add_option("--price-per-gpu-hour", f->price_per_gpu_hour,
                                 "USD per GPU-hour (default: the GPU's first offer in data/economics/prices.json)");
  app->add_option("--failure-source", f->failure_source, "interruption rates from this record of data/reliability/failures.json");
  f->mtbf_opt = app->add_option("--mtbf-hours", f->mtbf_hours, "the job's mean time between failures, in place of the failure data's");
  app->add_option("--restart-minutes", f->restart_minutes, "relaunch time after a failure, before the checkpoint reload")->capture_default_str();
  app->add_option("--storage-write-gbs", f->storage_write_gbs, "checkpoint write bandwidth per node, GB/s")->capture_default_str();
  f->read_opt = app->add_option("--storage-read-gbs", f->storage_read_gbs, "checkpoint read bandwidth per node, GB/s (default: the write's)");
  f->aggregate_opt = app->add_option("--storage-aggregate-gbs", f->storage_aggregate_gbs,
                                     "the storage system's total bandwidth, GB/s (default: no limit beyond the nodes')");
  app->add_flag("--async-checkpoint", f->async_checkpoint, "asynchronous checkpoints: training blocks only for the copy to host memory");
  f->interval_opt = app->add_option("--checkpoint-minutes", f->checkpoint_minutes, "checkpoint this often (default: Daly's optimal interval)");
  f->power_opt = app->add_option("--gpu-power-w", f->gpu_power_w, "GPU board power, W (default: data/economics/power.json)");
  f->pue_opt = app->add_option("--pue", f->pue, "facility power usage effectiveness (default: data/economics/power.json)");
  f->grid_opt = app->add_option("--grid-intensity", f->grid_intensity, "grid carbon intensity, g CO2 per kWh: report CO2");
}

void retarget_budget(const Setup& s, const BudgetFlags& f, BudgetSetup* b) {
  b->energy = b->data.energy_for(s.file.cluster);
  if (given(f.power_opt)) b->energy.gpu_tdp_w = f.gpu_power_w;
  if (given(f.pue_opt)) b->energy.pue = f.pue;
  if (given(f.grid_opt)) b->energy.grid_g_co2_per_kwh = f.grid_intensity;
  b->price_per_gpu_hour = 0;
  b->price_note = "no price: --price-per-gpu-hour (data/economics/prices.json lists none for " + s.file.cluster.gpu.name + ")";
  if (given(f.price_opt)) {
    b->price_per_gpu_hour = f.price_per_gpu_hour;
    b->price_note = "--price-per-gpu-hour";
  } else if (const PriceOffer* o = b->data.default_offer(s.file.cluster.gpu.name)) {
    b->price_per_gpu_hour = o->per_gpu_hour;
    b->price_note = o->provider + ", " + o->offer + ", " + o->date + " (data/economics/prices.json)";
  }
}

Status check_budget_flags(const BudgetFlags& f) {
  if (given(f.price_opt)) {
    if (Status st = in_range(f.price_per_gpu_hour, "--price-per-gpu-hour", 1e-6, 1e6, "a positive price in USD up to 1e6"); !st) return st;
  }
  if (given(f.mtbf_opt))
    if (Status st = in_range(f.mtbf_hours, "--mtbf-hours", 1e-3, 1e9, "a positive number of hours"); !st) return st;
  if (Status st = in_range(f.restart_minutes, "--restart-minutes", 0, 1e6, "0 or more minutes"); !st) return st;
  if (Status st = in_range(f.storage_write_gbs, "--storage-write-gbs", 1e-6, 1e9, "a positive bandwidth in GB/s"); !st) return st;
  if (given(f.read_opt))
    if (Status st = in_range(f.storage_read_gbs, "--storage-read-gbs", 1e-6, 1e9, "a positive bandwidth in GB/s"); !st) return st;
  if (given(f.aggregate_opt))
    if (Status st = in_range(f.storage_aggregate_gbs, "--storage-aggregate-gbs", 1e-6, 1e12, "a positive bandwidth in GB/s"); !st) return st;
  if (given(f.interval_opt))
    if (Status st = in_range(f.checkpoint_minutes, "--checkpoint-minutes", 1e-3, 1e7, "a positive number of minutes"); !st) return st;
  if (given(f.power_opt))
    if (Status st = in_range(f.gpu_power_w, "--gpu-power-w", 1, 1e5, "a positive power in W"); !st) return st;
  if (given(f.pue_opt))
    if (Status st = in_range(f.pue, "--pue", 1, 5, "a PUE in [1, 5]"); !st) return st;
  if (given(f.grid_opt))
    if (Status st = in_range(f.grid_intensity, "--grid-intensity", 0, 1e4, "g CO2 per kWh in [0, 10000]"); !st) return st;
  return Status::ok();
}

Result<BudgetSetup> budget_setup(const BudgetFlags& f, const Setup& s) {
  if (Status st = check_budget_flags(f); !st) return st;
  Result<EconomicsData> data = load_economics(s.data_root, s.presets);
  if (!data) return data.status();
  BudgetSetup b;
  b.data = std::move(*data);
  if (!f.tokens.empty()) {
    Result<double> t = parse_count(f.tokens, "--tokens");
    if (!t) return t.status();
    if (!(*t >= 1 && *t <= 1e18)) return Status::bad_input("--tokens: expected 1 to 1e18 tokens, got " + f.tokens);
    // Fewer tokens than one step trains cannot be a budget.
    const double step_tokens = static_cast<double>(s.file.job.global_batch) * static_cast<double>(s.file.job.seq_len);
    if (*t < step_tokens)
      return Status::bad_input("--tokens: " + f.tokens + " is less than one step (" + format_count(step_tokens) +
                               " tokens = --global-batch x --seq); expected at least that");
    b.tokens = *t;
  }
  const std::string id = f.failure_source.empty() ? b.data.default_failure_source : f.failure_source;
  const FailureSource* src = b.data.failure_source(id);
  if (!src) {
    std::string ids;
    for (const FailureSource& x : b.data.failure_sources) ids += (ids.empty() ? "" : ", ") + x.id;
    return Status::bad_input("--failure-source: expected one of " + ids + " (data/reliability/failures.json), got '" + id + "'");
  }
  b.goodput = b.data.default_goodput_options();
  b.goodput.failures = src->rates;
  char note[256];
  std::snprintf(note, sizeof note, "%s: %.3g per GPU-hour + %.3g per node-hour unexpected, %.3g per node-hour planned", src->id.c_str(),
                src->rates.per_gpu_hour, src->rates.per_node_hour, src->rates.planned_per_node_hour);
  b.failure_note = note;
  if (given(f.mtbf_opt)) {
    b.goodput.mtbf_override_s = f.mtbf_hours * 3600;
    b.failure_note = "--mtbf-hours " + std::to_string(f.mtbf_hours) + " (planned interruptions from " + src->id + ")";
  }
  b.goodput.relaunch_s = f.restart_minutes * 60;
  b.goodput.storage.write_per_node = f.storage_write_gbs * 1e9;
  b.goodput.storage.read_per_node = (given(f.read_opt) ? f.storage_read_gbs : f.storage_write_gbs) * 1e9;
  if (given(f.aggregate_opt)) b.goodput.storage.aggregate_write = b.goodput.storage.aggregate_read = f.storage_aggregate_gbs * 1e9;
  b.goodput.storage.async = f.async_checkpoint;
  if (given(f.interval_opt)) b.goodput.interval_s = f.checkpoint_minutes * 60;
  retarget_budget(s, f, &b);
  return b;
}

std::string duration_text(double s) {
  char buf[64];
  if (s >= 2 * 86400) std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
  else if (s >= 2 * 3600) std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else if (s >= 120) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string money_text(double usd) {
  char buf[64];
  if (usd >= 1e9) std::snprintf(buf, sizeof buf, "$%.2fB", usd / 1e9);
  else if (usd >= 1e6) std::snprintf(buf, sizeof buf, "$%.2fM", usd / 1e6);
  else if (usd >= 1e4) std::snprintf(buf, sizeof buf, "$%.1fk", usd / 1e3);
  else std::snprintf(buf, sizeof buf, "$%.2f", usd);
  return buf;
}

void print_training_budget(const TrainingBudget& b, const Goodput& g, const BudgetSetup& bs, int gpus) {
  std::printf("\nTraining %s tokens on %d GPUs:\n", format_count(b.tokens).c_str(), gpus);
  std::printf("  checkpoint     %s (%s per rank written, fully parallel save), %s to write, %s blocking (%s), %s to read back\n",
              bytes_text(g.size.total_bytes).c_str(), bytes_text(g.size.write_bytes_per_rank).c_str(),
              duration_text(g.times.persist_s).c_str(), duration_text(g.times.blocking_s).c_str(),
              bs.goodput.storage.async ? "asynchronous" : "synchronous", duration_text(g.times.load_s).c_str());
  if (std::isfinite(g.mtbf_s)) {
    std::printf("  failures       job MTBF %s (%s)\n", duration_text(g.mtbf_s).c_str(), bs.failure_note.c_str());
    std::printf("  checkpointing  every %lld steps (%s of training; %s), restart %s (relaunch + reload%s)\n",
                static_cast<long long>(g.interval_steps), duration_text(g.interval_s).c_str(),
                bs.goodput.interval_s > 0 ? "--checkpoint-minutes" : "Daly's optimum", duration_text(g.restart_s).c_str(),
                bs.goodput.storage.async ? " + the persist lag" : "");
  } else {
    std::printf("  failures       none modelled (rates 0)\n");
  }
  std::printf("  goodput        %.1f%% of wall-clock time trains (%.1f%% after unexpected interruptions, %.2f%% lost to planned ones)\n",
              100 * g.fraction, 100 * g.unexpected_fraction, 100 * g.planned_loss);
  std::printf("  time           %s wall-clock (%s of uninterrupted training), %.0f GPU-hours\n", duration_text(b.wall_s).c_str(),
              duration_text(b.productive_s).c_str(), b.gpu_hours);
  if (bs.price_per_gpu_hour > 0)
    std::printf("  cost           %s at $%.4g per GPU-hour (%s)\n", money_text(b.cost).c_str(), bs.price_per_gpu_hour, bs.price_note.c_str());
  else
    std::printf("  cost           %s\n", bs.price_note.c_str());
  if (b.energy_kwh > 0) {
    std::printf("  energy         %.4g MWh: %.0f W per GPU at this plan's utilisation (TDP %.0f W), %.0f W per node beside, PUE %.2f\n",
                b.energy_kwh / 1000, b.gpu_power_w, bs.energy.gpu_tdp_w, bs.energy.node_overhead_w, bs.energy.pue);
    if (b.co2_kg > 0 || bs.energy.grid_g_co2_per_kwh > 0)
      std::printf("  CO2            %.4g t at %.0f g per kWh\n", b.co2_kg / 1000, bs.energy.grid_g_co2_per_kwh);
  } else {
    std::printf("  energy         no board power known for this GPU: --gpu-power-w\n");
  }
}

}  // namespace llmplan::cli
