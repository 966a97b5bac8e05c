#include "planner/cost/goodput.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "planner/spec/recipe.h"

namespace llmplan {

namespace {

double state_bytes(const ModelStateBytes& s) { return s.weights + s.master_weights + s.optimizer_states; }

// The slower of the nodes' combined bandwidth and the storage system's (0 = no limit).
double spread_bandwidth(double per_node, int nodes, double aggregate) {
  const double nodes_bw = per_node > 0 ? per_node * nodes : std::numeric_limits<double>::infinity();
  const double agg = aggregate > 0 ? aggregate : std::numeric_limits<double>::infinity();
  return std::min(nodes_bw, agg);
}

uint32_t lora_mask_of(const ModelSpec& m, const TrainingJob& j) { return j.mode == TrainMode::lora ? lora_target_mask(j.lora, m.family) : 0; }

}  // namespace

CheckpointSize checkpoint_totals(const ModelSpec& m, const TrainingJob& j, int world) {
  CheckpointSize out;
  // Every state once: the whole model as one rank would hold it, unsharded and on the GPU.
  const ParallelPlan whole;
  const ParamCounts whole_pc = count_params(m, 1, 1, 1, lora_mask_of(m, j), j.lora.rank);
  const ModelStateBytes trained = stage_state_bytes(m, j, whole, whole_pc, 0, /*with_frozen=*/false);
  out.total_bytes = state_bytes(trained);
  out.frozen_bytes = stage_state_bytes(m, j, whole, whole_pc, 0).weights - trained.weights;
  out.write_bytes_per_rank = out.total_bytes / std::max(1, world);
  return out;
}

CheckpointSize checkpoint_size(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p) {
  CheckpointSize out = checkpoint_totals(m, j, p.world_size());
  // A rank's shard: the memory model's states of each stage, before offload moves them.
  ParallelPlan on_gpu = p;
  on_gpu.offload_optimizer = false;
  const ParamCounts pc = count_params(m, p.tp, p.pp, p.ep, lora_mask_of(m, j), j.lora.rank);
  for (int s = 0; s < p.pp; ++s) out.rank_bytes = std::max(out.rank_bytes, state_bytes(stage_state_bytes(m, j, on_gpu, pc, s, false)));
  return out;
}

CheckpointTimes checkpoint_times(const CheckpointSize& size, const ClusterSpec& c, int gpus, const StorageSpec& s) {
  const int nodes = nodes_for(gpus, c.gpus_per_node);
  CheckpointTimes t;
  t.persist_s = size.total_bytes / spread_bandwidth(s.write_per_node, nodes, s.aggregate_write);
  const double read_bw = spread_bandwidth(s.read_per_node, nodes, s.aggregate_read);
  t.load_s = std::isfinite(read_bw) ? (size.total_bytes + size.frozen_bytes) / read_bw : 0;
  if (!std::isfinite(t.persist_s)) t.persist_s = 0;
  // Asynchronous: each rank's part goes to pinned host memory over its own host link first.
  t.blocking_s = s.async ? size.write_bytes_per_rank / c.host_bandwidth : t.persist_s;
  return t;
}

double job_mtbf_s(const FailureRates& f, int gpus, int gpus_per_node) {
  const double per_hour = f.per_gpu_hour * gpus + f.per_node_hour * nodes_for(gpus, gpus_per_node);
  return per_hour > 0 ? 3600.0 / per_hour : std::numeric_limits<double>::infinity();
}

double young_interval_s(double delta_s, double mtbf_s) { return std::sqrt(2 * delta_s * mtbf_s); }

double daly_interval_s(double delta_s, double mtbf_s) {
  if (delta_s >= 2 * mtbf_s) return mtbf_s;
  const double x = delta_s / (2 * mtbf_s);
  return std::sqrt(2 * delta_s * mtbf_s) * (1 + std::sqrt(x) / 3 + x / 9) - delta_s;
}

double productive_fraction(double tau_s, double delta_s, double restart_s, double mtbf_s) {
  if (!std::isfinite(mtbf_s)) return tau_s / (tau_s + delta_s);
  // expm1 keeps the small-(tau+delta)/M case exact.
  return tau_s / (mtbf_s * std::exp(restart_s / mtbf_s) * std::expm1((tau_s + delta_s) / mtbf_s));
}

Goodput estimate_goodput(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, int gpus,
                         double step_time_s, const GoodputOptions& opt) {
  return estimate_goodput(checkpoint_size(m, j, p), c, gpus, step_time_s, opt);
}

Goodput estimate_goodput(const CheckpointSize& size, const ClusterSpec& c, int gpus, double step_time_s, const GoodputOptions& opt) {
  Goodput g;
  g.size = size;
  g.times = checkpoint_times(g.size, c, gpus, opt.storage);
  g.mtbf_s = opt.mtbf_override_s > 0 ? opt.mtbf_override_s : job_mtbf_s(opt.failures, gpus, c.gpus_per_node);
  const double delta = g.times.blocking_s;
  // An asynchronous checkpoint becomes a restart point only once persisted: a failure in
  // that lag falls back one more interval, on average the lag itself lost in addition.
  g.restart_s = opt.relaunch_s + g.times.load_s + (opt.storage.async ? g.times.persist_s : 0);
  double tau = opt.interval_s > 0 ? opt.interval_s : std::isfinite(g.mtbf_s) ? daly_interval_s(delta, g.mtbf_s) : 0;
  // The next asynchronous save cannot start before the previous one is written.
  if (opt.storage.async) tau = std::max(tau, g.times.persist_s);
  if (std::isfinite(g.mtbf_s) || opt.interval_s > 0) {
    // Checkpoints fall between steps: the nearest whole number of steps, at least one.
    g.interval_steps = std::max<int64_t>(1, std::llround(tau / step_time_s));
    g.interval_s = static_cast<double>(g.interval_steps) * step_time_s;
    g.unexpected_fraction = productive_fraction(g.interval_s, delta, g.restart_s, g.mtbf_s);
  }
  // Planned interruptions per wall second, each a final checkpoint and a restart.
  g.planned_loss = std::min(1.0, opt.failures.planned_per_node_hour * nodes_for(gpus, c.gpus_per_node) / 3600.0 * (delta + g.restart_s));
  g.fraction = g.unexpected_fraction * (1 - g.planned_loss);
  return g;
}

}  // namespace llmplan
