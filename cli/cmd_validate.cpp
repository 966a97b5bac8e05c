// llmplan validate: predict published training runs with their own plans and report the
// relative errors (see data/reference/README.md for the format and the comparison rules).
// --fit re-fits the time model's Efficiency constants on the fitting half of the fully
// specified throughput records and reports errors with them; paste the printed constants
// into planner/cost/time_model.h to make them the defaults.
#include <algorithm>
#include <map>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "simulator/record_simulation.h"
#include "cli/common.h"
#include "cli/print.h"
#include "planner/io/plan_file.h"
#include "planner/validate/tuned_plans.h"
#include "planner/validate/validate.h"

namespace llmplan::cli {

namespace {

struct ValidateCommand {
  std::vector<std::string> data;  // empty = the shipped files (default_reference_paths)
  std::string write_stacks;       // --fit: write the fitted stack profiles into this folder
  std::string data_root;   // presets
  std::string json_out;    // "" = none, "-" = stdout (JSON only)
  std::string group;       // "" = every group
  std::string explain;     // one record id: print its plan and breakdowns
  bool fit = false;
  bool fit_stacks_only = false;  // --fit-stacks: the stacks from the compiled-in generic constants
  std::string fit_start = "prior";  // --fit-start: the generic fit's starting point
  bool quiet_rows = false;
  bool simulate = false;   // simulated vs analytic step time per record
  bool tuned_gap = false;  // --tuned-gap: the sweep's best plan against each published tuned plan
  int threads = 1;
};

std::string percent(double e) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100 * e);
  return b;
}

std::string value_text(double v, Metric m) {
  char b[32];
  if (m == Metric::mfu || m == Metric::hfu || m == Metric::step_time) std::snprintf(b, sizeof b, "%.3f", v);
  else if (v >= 1000) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// One line per comparison: id, group, kind (record kind / compared metric), the values,
// the set it belongs to, and the plan with every assumption and note.
void print_rows(const std::vector<ValidationRow>& rows) {
  const char* fmt = "%-50s %-20s %-18s %10s %10s %8s %-3s %-4s %s\n";
  std::printf(fmt, "id", "group", "kind/metric", "published", "predicted", "error", "set", "oom?", "plan; assumptions; notes");
  for (const ValidationRow& r : rows) {
    const std::string kind = std::string(r.throughput ? "thru" : "mem") + (r.unit.empty() ? "" : " " + r.unit);
    if (r.skipped) {
      std::printf(fmt, r.id.c_str(), r.group.c_str(), kind.c_str(), "-", "-", "-", "-", "", ("skipped: " + r.skip_reason).c_str());
      continue;
    }
    const char* set = r.assumed ? "A" : (r.throughput ? (r.fitting_subset ? "F" : "H") : "S");
    std::string tail = r.plan;
    if (!r.assumptions.empty()) tail += "; assumed " + join(r.assumptions, ", ");
    if (!r.notes.empty()) tail += "; " + join(r.notes, ", ");
    std::printf(fmt, r.id.c_str(), r.group.c_str(), kind.c_str(), value_text(r.published, r.metric).c_str(),
                value_text(r.predicted, r.metric).c_str(), percent(r.error).c_str(), set, r.predicted_oom ? "OOM" : "", tail.c_str());
  }
  std::printf("set: F fitting half, H held-out half (fully specified throughput); S fully specified memory; A assumed (a null field filled by a stated rule)\n");
  std::printf("oom?: the planner says the plan does not fit, although the run completed\n");
}

std::string stats_text(const ErrorStats& s) {
  if (s.n == 0) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "n=%d med %.1f%% max %.1f%%", s.n, 100 * s.median_abs, 100 * s.max_abs);
  return b;
}

void print_summary(const std::vector<SummaryLine>& lines, const char* title) {
  std::printf("\n%s\n", title);
  std::printf("%-22s %-10s %-9s %-30s %-30s %-30s %s\n", "group", "metric", "set", "all", "fitted half", "held-out half",
              "skipped/ran-but-OOM");
  for (const SummaryLine& l : lines) {
    const bool split = l.throughput && !l.assumed;
    std::printf("%-22s %-10s %-9s %-30s %-30s %-30s %d/%d%s\n", l.group.c_str(), l.throughput ? "throughput" : "memory",
                l.assumed ? "assumed" : "specified", stats_text(l.all).c_str(), split ? stats_text(l.fitted).c_str() : "",
                split ? stats_text(l.held_out).c_str() : "", l.skipped, l.predicted_oom, l.predicted_oom > 0 ? "  <- MEMORY ERROR" : "");
  }
}

// Per group: how many records were compared, skipped (by reason) and predicted not to
// fit although they ran. The last is the planner's costliest error, so it is counted here
// and not left to the rows' oom? column.
void print_bias(const std::vector<ValidationRow>& rows) {
  std::printf("\nSigned throughput error (predicted/published - 1; + = predicted faster than it ran), every compared row:\n");
  std::printf("%-6s %-24s %4s %9s %9s %9s %s\n", "by", "key", "n", "median", "min", "max", "predicted faster");
  for (BiasKey key : {BiasKey::gpu, BiasKey::stack})
    for (const BiasLine& b : summarize_bias(rows, key))
      std::printf("%-6s %-24s %4d %+8.1f%% %+8.1f%% %+8.1f%% %d of %d\n", key == BiasKey::gpu ? "gpu" : "stack", b.key.c_str(), b.n,
                  100 * b.median, 100 * b.min, 100 * b.max, b.faster, b.n);
}

void print_coverage(const std::vector<ValidationRow>& rows) {
  struct Count {
    int compared = 0, skipped = 0, ran_but_oom = 0, above_upper = 0, memory_rows = 0;
    std::map<std::string, int> reasons;
    std::vector<std::string> oom_ids;
  };
  std::vector<std::string> order;
  std::map<std::string, Count> by_group;
  for (const ValidationRow& r : rows) {
    if (!by_group.count(r.group)) order.push_back(r.group);
    Count& c = by_group[r.group];
    if (r.skipped) {
      ++c.skipped, ++c.reasons[r.skip_reason];
      if (r.predicted_oom && r.ran) ++c.ran_but_oom, c.oom_ids.push_back(r.id + " (no plan with its published knobs fits)");
      continue;
    }
    ++c.compared;
    if (r.predicted_oom && r.ran) ++c.ran_but_oom, c.oom_ids.push_back(r.id + (r.throughput ? "" : " (memory row)"));
    if (!r.throughput && r.predicted_upper > 0) {
      ++c.memory_rows;
      if (r.published > r.predicted_upper) ++c.above_upper, c.oom_ids.push_back(r.id + " measured above the stacks' upper end");
    }
  }
  std::printf("\nCoverage per group (comparisons):\n");
  int compared = 0, skipped = 0, oom = 0;
  for (const std::string& g : order) {
    const Count& c = by_group[g];
    compared += c.compared, skipped += c.skipped, oom += c.ran_but_oom;
    std::printf("  %-22s compared %3d, skipped %3d, ran but predicted OOM %d", g.c_str(), c.compared, c.skipped, c.ran_but_oom);
    if (c.memory_rows > 0) std::printf(", measured peaks above the stacks' upper end %d of %d", c.above_upper, c.memory_rows);
    std::printf("\n");
    for (const auto& [why, n] : c.reasons) std::printf("      skipped %2d: %s\n", n, why.c_str());
    for (const std::string& id : c.oom_ids)
      std::printf("      MEMORY ERROR: %s\n", (id.find("upper end") != std::string::npos ? id : id + " ran, the planner says it does not fit").c_str());
  }
  std::printf("  %-22s compared %3d, skipped %3d, ran but predicted OOM %d\n", "ALL", compared, skipped, oom);
}

nlohmann::json stats_json(const ErrorStats& s) {
  return {{"n", s.n}, {"median_abs_error", s.median_abs}, {"max_abs_error", s.max_abs}, {"worst_id", s.worst_id}};
}

nlohmann::json efficiency_json(Efficiency e) {
  nlohmann::json j;
  const auto names = efficiency_field_names();
  for (size_t i = 0; i < names.size(); ++i) j[names[i]] = *efficiency_field(&e, static_cast<int>(i));
  return j;
}

nlohmann::json to_json(const std::vector<ValidationRow>& rows, const std::vector<SummaryLine>& lines, const std::string& data) {
  nlohmann::json j = {{"schema", "llmplan-validation/1"}, {"data", data}, {"rows", nlohmann::json::array()}, {"summary", nlohmann::json::array()}};
  for (const ValidationRow& r : rows) {
    nlohmann::json x = {{"id", r.id},           {"group", r.group},       {"confidence", r.confidence},     {"kind", r.kind},
                        {"throughput", r.throughput}, {"metric", to_string(r.metric)}, {"unit", r.unit},   {"skipped", r.skipped},
                        {"assumed", r.assumed}, {"assumptions", r.assumptions}, {"notes", r.notes}, {"fitting_subset", r.fitting_subset},
                        {"predicted_oom", r.predicted_oom}, {"plan", r.plan}, {"peak_fraction", r.peak_fraction},
                        {"stack", r.stack}, {"gpu", r.gpu}, {"predicted_upper_gib", r.predicted_upper}};
    if (r.skipped) x["skip_reason"] = r.skip_reason;
    else x.update({{"published", r.published}, {"predicted", r.predicted}, {"error", r.error}});
    j["rows"].push_back(x);
  }
  for (const SummaryLine& l : lines)
    j["summary"].push_back({{"group", l.group}, {"throughput", l.throughput}, {"assumed", l.assumed}, {"all", stats_json(l.all)},
                            {"fitted", stats_json(l.fitted)}, {"held_out", stats_json(l.held_out)}, {"skipped", l.skipped},
                            {"predicted_oom", l.predicted_oom}});
  for (BiasKey key : {BiasKey::gpu, BiasKey::stack})
    for (const BiasLine& b : summarize_bias(rows, key))
      j["bias"].push_back({{"by", key == BiasKey::gpu ? "gpu" : "stack"}, {"key", b.key}, {"n", b.n}, {"median", b.median},
                           {"min", b.min}, {"max", b.max}, {"predicted_faster", b.faster}});
  return j;
}

void print_fit(const FitReport& f) {
  std::printf("Fit: Nelder-Mead on %d fitting-subset throughput rows, %d evaluations; objective %.4f -> %.4f\n", f.rows, f.evaluations,
              f.objective_start, f.objective_fitted);
  const auto names = efficiency_field_names();
  Efficiency start = f.start, fitted = f.fitted;
  for (size_t i = 0; i < names.size(); ++i)
    std::printf("  %-20s %-10.4g -> %.6g\n", names[i].c_str(), *efficiency_field(&start, static_cast<int>(i)),
                *efficiency_field(&fitted, static_cast<int>(i)));
  std::printf("(planner/cost/time_model.h and data/stacks/llmplan.json keep these as the default constants)\n");
}

void print_stack_fits(const std::vector<FitReport>& fits) {
  const auto names = stack_fit_field_names();
  for (const FitReport& f : fits) {
    std::printf("Stack %s: Nelder-Mead on %d of its fitting-half rows, %d evaluations; objective %.4f -> %.4f\n", f.stack.c_str(), f.rows,
                f.evaluations, f.objective_start, f.objective_fitted);
    for (const EfficiencyField& ef : efficiency_fields())
      if (std::find(names.begin(), names.end(), ef.name) != names.end())
        std::printf("  %-20s %-10.4g -> %.6g\n", ef.name, f.start.*ef.field, f.fitted.*ef.field);
  }
  std::printf("(data/stacks/<stack>.json keeps these; stacks with fewer than %d fitting rows keep the generic constants)\n",
              kMinStackFitRows);
}

// The rebuilt job of one record with the planner's memory and time breakdowns.
int explain_record(const ReferenceSet& set, const PresetRegistry& presets, const ValidationOptions& opt, const std::string& id) {
  for (const ReferenceRecord& r : set.records) {
    if (r.id != id) continue;
    const PreparedRecord p = prepare_record(r, presets, opt);
    std::printf("%s (%s, %s)\n", r.id.c_str(), r.group.c_str(), r.kind.c_str());
    for (const auto& a : p.assumptions) std::printf("  assumed: %s\n", a.c_str());
    for (const auto& n : p.notes) std::printf("  note: %s\n", n.c_str());
    if (!p.skip.empty()) return report(Status::runtime(id + ": skipped: " + p.skip));
    if (!p.has_architecture) return report(Status::runtime(id + ": no architecture (params-only analytic record)"));
    PlanFile f;
    f.model = p.model;
    f.cluster = p.cluster;
    f.job = p.job;
    f.plan = p.plan;
    f.gpus = p.gpus;
    print_setup(f);
    print_memory(estimate_memory(p.model, p.cluster, p.job, p.plan, p.memory), 0);
    print_time(estimate_time(p.model, p.cluster, p.job, p.plan, p.efficiency), p.gpus);
    return 0;
  }
  return report(Status::bad_input("--explain: no record with id '" + id + "'"));
}

// The step simulator against the analytic model on every record the planner can cost
// (simulator/record_simulation.h): the per-record table and the median/max difference,
// with the terms that differ most named for each record.
int simulate_records(const ReferenceSet& set, const PresetRegistry& presets, const ValidationOptions& opt) {
  std::printf("%-52s %-22s %11s %11s %8s  %s\n", "record", "group", "analytic s", "simulated s", "diff", "largest term differences (sim - analytic, s)");
  std::vector<double> diffs;
  int within5 = 0;
  for (const RecordSimulation& r : simulate_reference_records(set, presets, opt)) {
    if (!r.error.empty()) {
      std::printf("%-52s %-22s %s\n", r.id.c_str(), r.group.c_str(), r.error.c_str());
      continue;
    }
    std::string why;
    for (const auto& [name, d] : r.term_differences) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%s %+.3f", why.empty() ? "" : ", ", name.c_str(), d);
      why += buf;
    }
    const double diff = r.relative_difference();
    diffs.push_back(std::fabs(diff));
    within5 += std::fabs(diff) <= 0.05;
    std::printf("%-52s %-22s %11.4f %11.4f %+7.1f%%  %s\n", r.id.c_str(), r.group.c_str(), r.analytic_s, r.simulated_s, 100 * diff, why.c_str());
  }
  if (diffs.empty()) return report(Status::runtime("no record could be simulated"));
  std::sort(diffs.begin(), diffs.end());
  std::printf("\n%zu records simulated: median |difference| %.2f%%, max %.2f%%, %d within 5%%\n", diffs.size(),
              100 * diffs[diffs.size() / 2], 100 * diffs.back(), within5);
  return 0;
}

// --tuned-gap: per fully specified record, the published plan's predicted step time over
// the sweep's best plan's, both under the record's stack profile.
int run_tuned_gap(const ReferenceSet& set, const PresetRegistry& presets, const ValidationOptions& opt) {
  const std::vector<TunedPlanGap> gaps = tuned_plan_gaps(set, presets, opt, [](int i, int n, const std::string& id) {
    std::fprintf(stderr, "\r[%d/%d] sweeping %-60s", i + 1, n, id.c_str());
    std::fflush(stderr);
  });
  std::fprintf(stderr, "\r%90s\r", "");
  std::printf("Published tuned plans against the sweep's best, same model and stack, among the plans the record's framework runs "
              "(speedup = published / best predicted step time)\n\n");
  std::printf("%-50s %-14s %-11s %8s  %-44s %s\n", "id", "stack", "framework", "speedup", "published plan", "sweep's best plan");
  std::vector<double> speedups;
  int skipped = 0;
  for (const TunedPlanGap& g : gaps) {
    if (!g.skip.empty()) {
      ++skipped;
      continue;
    }
    speedups.push_back(g.speedup);
    std::printf("%-50s %-14s %-11s %7.3fx  %-44s %s\n", g.id.c_str(), g.stack.c_str(), g.framework.empty() ? "-" : g.framework.c_str(), g.speedup,
                g.published_plan.c_str(), g.best_plan.c_str());
  }
  std::sort(speedups.begin(), speedups.end());
  if (!speedups.empty())
    std::printf("\n%zu compared (%d not fully specified or skipped): median %.3fx, max %.3fx\n", speedups.size(), skipped,
                speedups[speedups.size() / 2], speedups.back());
  return 0;
}

int run_validate(const ValidateCommand& c) {
  // Checked before any fitting (minutes): a folder that is not there is a bad flag value.
  if (!c.write_stacks.empty()) {
    if (!c.fit && !c.fit_stacks_only) return report(Status::bad_input("--write-stacks: needs --fit or --fit-stacks (it writes the fitted profiles)"));
    std::error_code ec;
    if (!std::filesystem::is_directory(c.write_stacks, ec))
      return report(Status::bad_input("--write-stacks: expected an existing folder, got '" + c.write_stacks + "'"));
  }
  const std::vector<std::string> paths = c.data.empty() ? default_reference_paths() : c.data;
  std::string path;
  for (const std::string& p : paths) path += (path.empty() ? "" : " + ") + p;
  Result<ReferenceSet> set = load_reference_files(paths);
  if (!set) return report(set.status());
  if (!c.group.empty()) {
    std::erase_if(set->records, [&](const ReferenceRecord& r) { return r.group != c.group; });
    if (set->records.empty()) return report(Status::bad_input("--group: no record of group '" + c.group + "' in " + path));
  }
  Result<PresetRegistry> presets = load_presets(c.data_root);
  if (!presets) return report(presets.status());
  ValidationOptions opt;
  opt.sweep_threads = c.threads;
  const bool json_only = c.json_out == "-";
  if (c.tuned_gap) return run_tuned_gap(*set, *presets, opt);
  if (c.fit || c.fit_stacks_only) {
    FitReport f;
    f.fitted = Efficiency{};
    if (c.fit) {
      ValidationOptions start = opt;
      // The objective has several basins (validate.h fit_prior): a refit after a change to
      // the model starts from the shipped constants, a fresh one from the physical priors.
      start.efficiency = c.fit_start == "defaults" ? Efficiency{} : fit_prior();
      // The generic constants (the default profile's, compiled into planner/cost/time_model.h)
      // are fitted on the first file alone -- by default the 2020-24 set they have always
      // come from -- so that a file of new records moves only its own stacks' profiles.
      ReferenceSet generic = *set;
      const std::string first = paths.front();
      if (paths.size() > 1) {
        Result<ReferenceSet> one = load_reference_runs(first);
        if (!one) return report(one.status());
        generic = *one;
        if (!c.group.empty()) std::erase_if(generic.records, [&](const ReferenceRecord& r) { return r.group != c.group; });
      }
      f = fit_efficiency(generic, *presets, start);
      if (!json_only) std::printf("Generic fit on %s\n", first.c_str());
      if (!json_only) print_fit(f);
    } else if (!json_only) {
      std::printf("Stack fits from the compiled-in generic constants (planner/cost/time_model.h)\n");
    }
    opt.efficiency = f.fitted;
    // Then each stack with enough records of its own, from the generic constants, on the
    // files after the first: the first file's records already made the generic constants
    // (re-fitting a stack on them overfits: torchtitan's 4 fitting rows took its held-out
    // median from 7.1% to 10.5%), while the later files' records are new to the model.
    ReferenceSet stack_set = *set;
    if (paths.size() > 1) {
      Result<ReferenceSet> later = load_reference_files(std::vector<std::string>(paths.begin() + 1, paths.end()));
      if (!later) return report(later.status());
      stack_set = *later;
      if (!c.group.empty()) std::erase_if(stack_set.records, [&](const ReferenceRecord& r) { return r.group != c.group; });
    }
    const std::vector<FitReport> fits = fit_stacks(stack_set, *presets, opt, f.fitted);
    if (!json_only) print_stack_fits(fits);
    for (const StackProfile& st : presets->stacks()) {
      // A stack that shares another's efficiency (the same kernels) takes that one's fit.
      const FitReport* own = nullptr;
      const std::string from = st.efficiency_from.empty() ? st.name : st.efficiency_from;
      for (const FitReport& x : fits)
        if (x.stack == from) own = &x;
      const Efficiency e = own ? own->fitted : with_stack_kernel_facts(f.fitted, st);
      opt.stack_efficiency[st.name] = e;
      if (!c.write_stacks.empty()) {
        StackProfile out = st;
        out.efficiency = e;
        if (!st.efficiency_from.empty())
          out.fitted_on = "validate --fit: the " + from + " stack's (efficiency_from: the same kernels), " +
                          (own ? "its records' fitting half (" + std::to_string(own->rows) + " rows)" : "the generic constants");
        else
          out.fitted_on = own ? "validate --fit: its own records' fitting half (" + std::to_string(own->rows) + " rows), from the generic fit"
                              : "validate --fit: the generic constants (fewer than " + std::to_string(kMinStackFitRows) +
                                    " fitting rows of its own outside the generic fit's file)";
        const std::string file = c.write_stacks + "/" + st.name + ".json";
        if (Status s = write_json_file(file, to_json(out)); !s) return report(s);
        if (!json_only) std::printf("wrote %s\n", file.c_str());
      }
    }
  }
  if (!c.explain.empty()) return explain_record(*set, *presets, opt, c.explain);
  if (c.simulate) return simulate_records(*set, *presets, opt);
  const std::vector<ValidationRow> rows = validate_records(*set, *presets, opt);
  const std::vector<SummaryLine> lines = summarize(rows);
  if (json_only) {
    std::printf("%s\n", to_json(rows, lines, path).dump(2).c_str());
    return 0;
  }
  std::printf("Validation of %s: %zu records, %zu comparisons\n\n", path.c_str(), set->records.size(), rows.size());
  if (!c.quiet_rows) print_rows(rows);
  print_coverage(rows);
  print_summary(lines, "Error |predicted/published - 1| per group (fitted/held-out: the fit's deterministic halves):");
  print_summary(summarize_by_confidence(rows), "Per confidence level:");
  print_bias(rows);
  if (!c.json_out.empty()) {
    nlohmann::json j = to_json(rows, lines, path);
    if (c.fit) j["fitted_efficiency"] = efficiency_json(opt.efficiency);
    if (Status s = write_json_file(c.json_out, j); !s) return report(s);
    std::printf("wrote %s\n", c.json_out.c_str());
  }
  return 0;
}

}  // namespace

Runner register_validate(CLI::App* sub) {
  auto c = std::make_shared<ValidateCommand>();
  sub->add_option("--data", c->data,
                  "reference runs file(s) (schema llmplan-reference-runs/1; repeatable; default: data/reference/published_runs.json, "
                  "published_runs_2024_2026.json, published_runs_mbridge_2602_moe.json and published_runs_mbridge_2511_2602_dense.json)");
  sub->add_option("--write-stacks", c->write_stacks, "with --fit: write the fitted stack profiles (data/stacks format) into this folder");
  sub->add_option("--data-root", c->data_root, "folder with models/ and data/ for the GPU presets");
  sub->add_option("--json", c->json_out, "write rows and summaries as JSON to this file ('-' = stdout, JSON only)");
  sub->add_option("--group", c->group, "only the records of this group");
  sub->add_option("--explain", c->explain, "print one record's rebuilt plan with the memory and time breakdowns");
  sub->add_flag("--fit-stacks", c->fit_stacks_only, "fit only the stack profiles, from the compiled-in generic constants, and report with them");
  sub->add_option("--fit-start", c->fit_start,
                  "with --fit: start the generic fit from the physical priors ('prior') or from the compiled-in constants ('defaults')")
      ->check(CLI::IsMember({"prior", "defaults"}))
      ->capture_default_str();
  sub->add_flag("--fit", c->fit, "re-fit the time model's efficiency constants on the fitting half first, and print them");
  sub->add_flag("--summary-only", c->quiet_rows, "print the summaries without the per-record table");
  sub->add_flag("--simulate", c->simulate, "compare the step simulator with the analytic model on every costed record");
  sub->add_flag("--tuned-gap", c->tuned_gap,
                "sweep every fully specified record's model and GPUs, and print how much faster than the published plan the best plan is predicted");
  sub->add_option("--threads", c->threads, "threads for the sweeps that fill missing plan knobs")->capture_default_str();
  return [c]() { return run_validate(*c); };
}

}  // namespace llmplan::cli
