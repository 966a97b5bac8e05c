// llmplan profiles list | show ID | export ID --json FILE | delete ID: the profile database.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "planner/io/plan_file.h"
#include "profiles/profile_store.h"

namespace llmplan::cli {

namespace {
struct ProfilesCommand {
  std::string action;
  int64_t id = 0;
  std::string json_out;
  std::string db;
  CLI::App* sub = nullptr;
};
}  // namespace

Runner register_profiles(CLI::App* sub) {
  auto c = std::make_shared<ProfilesCommand>();
  c->sub = sub;
  sub->add_option("action", c->action, "list, show, export or delete")->required();
  sub->add_option("id", c->id, "run id (show, export, delete)");
  sub->add_option("--json", c->json_out, "export: write to this file ('-' or none = stdout)");
  sub->add_option("--db", c->db, "profile database (default $LLMPLAN_DB or ~/.local/share/llmplan/profiles.db)");
  return [c]() {
    const std::string& a = c->action;
    if (a != "list" && a != "show" && a != "export" && a != "delete")
      return report(Status::bad_input("profiles: action: expected list, show, export or delete, got '" + a + "'"));
    if (a != "list" && c->id <= 0) return report(Status::bad_input("profiles " + a + ": expected a run id (a positive integer)"));
    if (a == "list" && c->sub->get_option("id")->count() > 0)
      return report(Status::bad_input("profiles list: takes no run id (use profiles show ID for one run)"));
    Result<std::string> path = default_db_path(c->db);
    if (!path) return report(path.status());
    Result<ProfileStore> store = ProfileStore::open(*path);
    if (!store) return report(store.status());
    if (!store->damage().empty() && a != "delete")
      std::fprintf(stderr, "llmplan: warning: %s is damaged (SQLite integrity_check: %s); showing what is still readable\n",
                   store->path().c_str(), store->damage().c_str());
    if (a == "list") {
      Result<std::vector<RunSummary>> runs = store->list_runs();
      if (!runs) return report(runs.status());
      std::printf("%s", format_run_table(*runs).c_str());
      return 0;
    }
    if (a == "delete") {
      if (Status s = store->delete_run(c->id); !s) return report(s);
      std::printf("deleted run %lld\n", static_cast<long long>(c->id));
      return 0;
    }
    if (a == "export") {
      Result<std::string> j = store->export_run_json(c->id);
      if (!j) return report(j.status());
      if (c->json_out.empty() || c->json_out == "-") {
        std::printf("%s\n", j->c_str());
        return 0;
      }
      if (Status s = write_json_file(c->json_out, nlohmann::json::parse(*j)); !s) return report(s);
      std::printf("wrote %s\n", c->json_out.c_str());
      return 0;
    }
    Result<RunRecord> r = store->get_run(c->id);
    if (!r) return report(r.status());
    Result<std::vector<StepRecord>> steps = store->get_steps(c->id);
    if (!steps) return report(steps.status());
    std::printf("run %lld  %s  %s  %s on %s (%s)\n", static_cast<long long>(r->id), r->created_at.c_str(), to_string(r->status),
                r->model.c_str(), r->hardware.c_str(), r->backend.c_str());
    std::printf("  peak %s measured, %s predicted (allocator side); step %.4f s measured, %.4f s predicted; %.1f tokens/s\n",
                gib(static_cast<double>(r->peak_bytes)).c_str(), gib(static_cast<double>(r->predicted_peak_bytes)).c_str(),
                r->step_time_s, r->predicted_step_time_s, r->tokens_per_s);
    if (!r->error_message.empty()) std::printf("  error: %s\n", r->error_message.c_str());
    for (const StepRecord& s : *steps)
      std::printf("  step %3lld  loss %.4f  %.3f s  %.1f tokens/s  peak %s\n", static_cast<long long>(s.step), s.loss, s.time_s,
                  s.tokens_per_s, gib(static_cast<double>(s.peak_bytes)).c_str());
    return 0;
  };
}

}  // namespace llmplan::cli
