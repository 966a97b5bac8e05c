// llmplan simulate: one training step of a plan played out event by event, next to the
// analytic prediction, with a Chrome trace that Perfetto opens.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "planner/spec/units.h"
#include "simulator/sim_json.h"
#include "simulator/step_simulator.h"
#include "simulator/trace.h"

namespace llmplan::cli {

namespace {

struct SimulateCommand {
  std::string plan_file;
  std::string trace_out;
  std::string json_out;
  std::string stack;      // "" = the default profile
  std::string data_root;
};

void print_row(const char* what, double simulated, double analytic) {
  std::printf("  %-22s %12.4f %12.4f\n", what, simulated, analytic);
}

}  // namespace

Runner register_simulate(CLI::App* sub) {
  auto c = std::make_shared<SimulateCommand>();
  sub->add_option("plan", c->plan_file, "plan JSON (from llmplan sweep)")->required();
  sub->add_option("--trace", c->trace_out, "write a Chrome trace-event JSON (open in Perfetto)");
  sub->add_option("--json", c->json_out, "write the summary as JSON");
  sub->add_option("--stack", c->stack, "training-stack profile (data/stacks) or stack file; default llmplan");
  sub->add_option("--data-root", c->data_root, "folder with models/ and data/ (for --stack)");
  return [c]() {
    Result<PlanFile> f = read_plan_file(c->plan_file);
    if (!f) return report(f.status());
    SimOptions opt;
    if (!c->stack.empty()) {
      Result<PresetRegistry> reg = load_presets(c->data_root);
      if (!reg) return report(reg.status());
      Result<StackProfile> st = reg->stack(c->stack, "--stack");
      if (!st) return report(st.status());
      opt.efficiency = st->efficiency;
      opt.memory = stack_memory_options(*st, opt.memory);
      f->job = stack_job(*st, f->job);
    }
    opt.record_events = !c->trace_out.empty();
    Result<SimResult> r = simulate_step(f->model, f->cluster, f->job, f->plan, opt);
    if (!r) return report(r.status());
    const SimResult& s = *r;
    const StepTime& a = s.analytic;
    const SimBreakdown& b = s.breakdown;
    std::printf("Simulated one step of %s on %d x %s: %s, %lld micro-batches per pipeline, %d ranks per simulated stage\n",
                f->model.name.c_str(), f->gpus, f->cluster.gpu.name.c_str(), plan_summary(f->plan).c_str(),
                static_cast<long long>(s.microbatches), s.ranks_per_stage);
    if (s.dualpipe)
      std::printf("DualPipe simulated as its rank-equivalent DualPipeV on %d ranks (the same per-rank order and stages): stage s below "
                  "stands for ranks s and %d-s, %lld micro-batches per direction\n",
                  s.pp, 2 * s.pp - 1, static_cast<long long>(s.microbatches));
    std::printf("\nStep time (s), critical stage %d      simulated     analytic\n", s.critical_stage);
    print_row("compute", b.compute, a.compute);
    print_row("recompute", b.recompute, a.recompute);
    print_row("TP comm (exposed)", b.tp_comm, a.tp_comm);
    print_row("PP comm (exposed)", b.pp_comm, a.pp_comm);
    print_row("DP comm (exposed)", b.dp_comm, a.dp_comm);
    print_row("CP comm (exposed)", b.cp_comm, a.cp_comm);
    print_row("EP comm (exposed)", b.ep_comm, a.ep_comm);
    print_row("bubble", b.bubble, a.bubble);
    print_row("optimizer", b.optimizer, a.optimizer);
    print_row("offload", b.offload, a.offload);
    print_row("total", s.total, a.total);
    std::printf("  %-22s %11.1f%% %11.1f%%\n", "difference", 100 * (s.total / a.total - 1), 0.0);
    std::printf("\nBubble fraction %.1f%% (analytic %.1f%%); %.0f tokens/s, MFU %.1f%%\n", 100 * s.bubble_fraction,
                100 * a.bubble_fraction(), s.tokens_per_s, 100 * s.mfu);
    std::printf("\n%6s %7s %10s %12s %12s %10s %12s\n", "stage", "layers", "busy s", "peak GiB", "analytic GiB", "peak at s", "phase");
    for (const StageResult& st : s.stages) {
      std::printf("%6d %7d %10.4f %12.2f %12.2f %10.4f %12s\n", st.stage, st.layers, st.busy, st.peak_bytes / kGiB, st.analytic.total / kGiB,
                  st.peak_time, to_string(st.peak_phase));
    }
    if (!c->trace_out.empty()) {
      if (Status st = write_chrome_trace(s, c->trace_out); !st) return report(st);
      std::printf("wrote %s (%zu events; open in https://ui.perfetto.dev)\n", c->trace_out.c_str(), s.events.size());
    }
    if (!c->json_out.empty()) {
      if (Status st = write_json_file(c->json_out, sim_result_to_json(s)); !st) return report(st);
      std::printf("wrote %s\n", c->json_out.c_str());
    }
    return 0;
  };
}

}  // namespace llmplan::cli
