#include "planner/search/sweep.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <tuple>
#include <thread>

namespace llmplan {

const char* to_string(Objective o) {
  switch (o) {
    case Objective::tokens_per_s: return "tokens-per-s";
    case Objective::memory: return "memory";
    case Objective::cost: return "cost";
  }
  return "?";
}

bool parse_enum(const std::string& s, Objective* out) {
  if (s == "tokens-per-s" || s == "throughput") *out = Objective::tokens_per_s;
  else if (s == "memory") *out = Objective::memory;
  else if (s == "cost") *out = Objective::cost;
  else return false;
  return true;
}

Status parse_sweep_schedules(const std::vector<std::string>& names, const std::string& field, std::vector<Schedule>* out) {
  for (const std::string& x : names) {
    if (x == "all") {
      *out = {Schedule::one_f_one_b, Schedule::interleaved, Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev, Schedule::dualpipe};
      continue;
    }
    Schedule sc;
    if (!parse_enum(x, &sc)) return Status::bad_input(field + ": expected " + kScheduleNames + " or all, got '" + x + "'");
    out->push_back(sc);
  }
  return Status::ok();
}

bool closer_miss(const PlanResult& a, const PlanResult& b) {
  const bool a_host = a.reason == RejectReason::host_does_not_fit, b_host = b.reason == RejectReason::host_does_not_fit;
  if (a_host != b_host) return a_host;
  return a_host ? a.host_bytes_per_node < b.host_bytes_per_node : a.peak_bytes < b.peak_bytes;
}

TrainingJob job_for(const TrainingJob& j, const PlanResult& r) {
  TrainingJob out = j;
  out.precision = r.precision;
  out.amp = r.amp;
  return out;
}

namespace {

std::vector<int> divisors_up_to(int n, int cap) {
  std::vector<int> out;
  for (int d = 1; d <= n && d <= cap; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Every vpp >= 1 whose pp*vpp chunks split the layers (even or embedding/loss split) with at
// least one layer each; vpp 1 only without a pipeline. Where neither split interleaves on
// this pp at all (DeepSeek-V3's 61 layers), the vpps of the balanced custom split instead: a
// custom split is one of countless on its vpp, so it is proposed where it opens interleaving,
// not beside the standard splits (which keeps the sweep's plan count where it was).
std::vector<int> legal_vpps(int layers, int mtp_layers, int pp) {
  std::vector<int> out = {1};
  if (pp <= 1) return out;
  for (int v = 2; pp * v <= layers + 2; ++v) {
    ParallelPlan p;
    p.pp = pp, p.vpp = v;
    p.pipeline_split = default_pipeline_split(layers, pp, v);
    if (pipeline_split_ok(layers, p)) out.push_back(v);
  }
  if (out.size() > 1) return out;
  for (int v = 2; 2 * pp * v <= layers + 2; ++v)
    if (!balanced_stage_layers(layers, mtp_layers, pp, v).empty()) out.push_back(v);
  return out;
}

std::vector<int> powers_of_two_dividing(int n, int cap) {
  std::vector<int> out;
  for (int d = 1; d <= n && d <= cap; d *= 2)
    if (n % d == 0) out.push_back(d);
  return out;
}

template <class T>
std::vector<T> or_default(const std::vector<T>& pinned, std::vector<T> fallback) {
  return pinned.empty() ? fallback : pinned;
}

// A total order on plans so that ties rank the same way whatever the thread split.
auto plan_key(const PlanResult& r) {
  const ParallelPlan& p = r.plan;
  // Every knob the sweep varies, so that no two plans tie (--csv's order is then the same
  // every run, whatever order the threads finish in).
  return std::make_tuple(static_cast<int>(r.precision), p.tp, p.pp, p.cp, p.vpp, p.ep, p.sp, !p.flash_attention, -p.micro_batch,
                         static_cast<int>(p.recompute), p.recompute_layers, p.zero, p.offload_optimizer, p.offload_params,
                         static_cast<int>(p.cp_exchange), static_cast<int>(p.schedule), p.activation_offload_layers);
}

// Better-first order for the objective: tokens/s (throughput), peak memory, or cost
// (GPU-hours per token: same ranking as throughput at a fixed GPU count, ties broken by
// memory).
bool better(const PlanResult& a, const PlanResult& b, Objective o) {
  switch (o) {
    case Objective::memory:
      if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
      if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
      break;
    case Objective::cost:
      if (a.gpu_hours_per_1b_tokens != b.gpu_hours_per_1b_tokens) return a.gpu_hours_per_1b_tokens < b.gpu_hours_per_1b_tokens;
      if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
      break;
    case Objective::tokens_per_s:
      if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
      if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
      break;
  }
  return plan_key(a) < plan_key(b);
}

struct WorkItem {
  int tp, pp, cp;
};

struct ThreadState {
  SweepResult r;
  std::vector<PlanResult> fitting_front;  // candidates for the Pareto front
};

// The time and memory inputs of one plan shape (tp, pp, cp, dp, precision from the work
// item; ep, sp, flash, micro-batch from the loops), filled by the first plan of that
// shape that passes check_plan and reused by the ZeRO, offload, recompute and vpp
// choices after it: they change none of it (but vpp for a model of several layer kinds,
// whose stages hold other kinds when interleaved).
struct ShapeInputs {
  bool ready = false;
  PipelineSplit split = PipelineSplit::even;  // the per-stage layers it was computed for
  int vpp = 0;                                // ... and the vpp, for a model of several layer kinds
  bool v_shape = false;                       // ... and the V placement (specs.h v_shape), likewise
  bool dualpipe = false;                      // ... and DualPipe's rank-equivalent plan (pp/2, dp*2: plan_check.h cost_plan)
  StepTimeInputs time;
  MemoryInputs memory;
  std::vector<MemoryInputs> also;  // per SweepOptions::also_fit
};

// Keeps the k best in `top` (sorted best first); no allocation once it holds k entries.
void offer_top(std::vector<PlanResult>& top, const PlanResult& x, int k, Objective o) {
  if (static_cast<int>(top.size()) == k && !better(x, top.back(), o)) return;
  auto it = std::upper_bound(top.begin(), top.end(), x, [o](const PlanResult& a, const PlanResult& b) { return better(a, b, o); });
  if (static_cast<int>(top.size()) == k) top.pop_back();
  top.insert(it, x);
}

// Adds x to a Pareto front (min memory, max tokens/s) unless dominated.
void offer_pareto(std::vector<PlanResult>& front, const PlanResult& x) {
  for (const PlanResult& f : front)
    if (f.peak_bytes <= x.peak_bytes && f.tokens_per_s >= x.tokens_per_s) return;
  front.erase(std::remove_if(front.begin(), front.end(),
                             [&](const PlanResult& f) { return x.peak_bytes <= f.peak_bytes && x.tokens_per_s >= f.tokens_per_s; }),
              front.end());
  front.push_back(x);
}

}  // namespace

SweepResult run_sweep(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, int gpus, const SweepSpace& space,
                      const SweepOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  const int max_tp = space.max_tp > 0 ? space.max_tp : (space.tp_across_nodes ? gpus : std::min(gpus, c.gpus_per_node));
  const int max_pp = space.max_pp > 0 ? space.max_pp : m.layers;
  const bool mixed_layers = layer_kinds_present(m) != 1;  // ShapeInputs: recomputed per vpp
  const std::vector<int> tps = or_default(space.tp, powers_of_two_dividing(gpus, max_tp));
  const std::vector<int> pps = or_default(space.pp, divisors_up_to(gpus, std::min(max_pp, m.layers)));
  const std::vector<int> cps = or_default(space.cp, j.seq_len >= 8192 ? powers_of_two_dividing(gpus, 16) : std::vector<int>{1});
  // Virtual stages: every count that splits the layers over pp*vpp chunks, evenly or with
  // the embedding/loss split (plan_check.h), per pipeline degree (legal_vpps); pinned
  // with --vpp. The progress estimate counts three.
  const std::vector<int> vpps = or_default(space.vpp, {1, 2, 4});
  const std::vector<int> eps = or_default(space.ep, m.moe.enabled() ? divisors_up_to(m.moe.experts, gpus) : std::vector<int>{1});
  const std::vector<int> zeros = or_default(space.zero, {0, 1, 2, 3});
  const std::vector<Recompute> recs = or_default(space.recompute, {Recompute::none, Recompute::selective, Recompute::full});
  // The sweep chooses the recompute (and may then try full recompute of the first k layers).
  const bool recompute_free = std::find(recs.begin(), recs.end(), Recompute::none) != recs.end() &&
                              std::find(recs.begin(), recs.end(), Recompute::full) != recs.end();
  const std::vector<int> sps = or_default(space.sp, {0, 1});
  const std::vector<int> offs = or_default(space.offload, {0, 1, 2});
  const std::vector<int> flashes = or_default(space.flash, {1, 0});
  const std::vector<CpExchange> exchanges = or_default(space.cp_exchange, {CpExchange::ring, CpExchange::all_gather});
  const std::vector<Precision> precs = or_default(space.precision, {j.precision});

  std::vector<WorkItem> work;
  for (int tp : tps)
    for (int pp : pps)
      for (int cp : cps)
        if (gpus % (tp * pp * cp) == 0) work.push_back({tp, pp, cp});

  // Rough total for progress: items x inner combinations.
  const int64_t inner = static_cast<int64_t>(vpps.size()) * eps.size() * zeros.size() * recs.size() * sps.size() * offs.size() *
                        flashes.size() * exchanges.size() * precs.size() * 7;
  const int64_t total_estimate = static_cast<int64_t>(work.size()) * inner;

  const int n_threads = std::max(1, std::min<int>(opt.threads > 0 ? opt.threads : static_cast<int>(std::thread::hardware_concurrency()),
                                                  static_cast<int>(work.size())));
  std::vector<ThreadState> states(n_threads);
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex progress_mutex;
  auto last_progress = start;

  auto worker = [&](ThreadState& ts) {
    SweepResult& r = ts.r;
    r.top.reserve(opt.top_k + 1);
    r.framework_rejected.assign(opt.framework ? opt.framework->rules.size() : 0, 0);
    ParallelPlan p;
    int64_t local = 0;
    std::vector<ShapeInputs> shapes;  // [ep][sp][flash][exchange][micro-batch] of the current work item and precision
    std::vector<char> fits_without_recompute;  // [zero][offload] of the current shape
    std::vector<TrainingJob> jobs_also(opt.also_fit.size());  // the job under each SweepOptions::also_fit convention
    for (size_t w = next++; w < work.size(); w = next++) {
      const WorkItem it = work[w];
      p.tp = it.tp;
      p.pp = it.pp;
      p.cp = it.cp;
      p.dp = gpus / (it.tp * it.pp * it.cp);
      const int64_t per_dp = j.global_batch % p.dp == 0 ? j.global_batch / p.dp : 0;
      std::vector<int> mbs = or_default(space.micro_batch, powers_of_two_dividing(static_cast<int>(std::min<int64_t>(per_dp, 1 << 20)),
                                                                                 space.max_micro_batch));
      if (mbs.empty()) mbs.push_back(1);
      // This pipeline degree's virtual-stage counts and the split each takes, once per work
      // item rather than per plan.
      // With each, the schedules asked for (SweepSpace::schedule) that take that shape: the
      // classic one (1F1B, or interleaved with virtual stages) always; ZB-H1 with one stage
      // per rank; ZB-V and DualPipeV with two chunks in a V (check_plan decides the rest).
      struct VppSplit {
        int vpp;
        PipelineSplit split;
        Schedule schedule;
        std::vector<int> stage_layers;  // under the custom split
      };
      std::vector<VppSplit> vpp_splits;
      for (int v : space.vpp.empty() ? legal_vpps(m.layers, m.mtp_layers, it.pp) : vpps) {
        std::vector<int> balanced = balanced_stage_layers(m.layers, m.mtp_layers, it.pp, v);
        const PipelineSplit split = balanced.empty() ? default_pipeline_split(m.layers, it.pp, v) : PipelineSplit::custom;
        const Schedule classic = v > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
        // (Without a pipeline the schedule means nothing: the plan is kept whatever the list.)
        if (it.pp == 1 || space.schedule.empty() || std::find(space.schedule.begin(), space.schedule.end(), classic) != space.schedule.end())
          vpp_splits.push_back({v, split, classic, balanced});
        if (it.pp == 1) continue;
        for (Schedule sc : space.schedule)
          if (sc == Schedule::gpipe || (sc == Schedule::zb_h1 && v == 1) || (v_shape(sc) && v == 2 && split == PipelineSplit::even) ||
              (sc == Schedule::dualpipe && v == 2 && split == PipelineSplit::even && it.pp % 2 == 0))
            vpp_splits.push_back({v, split, sc, balanced});
      }
      for (Precision prec : precs) {
        // The job with this precision: built once here, not per plan (it holds a vector).
        TrainingJob jj = j;
        jj.precision = prec;
        jj.amp = prec == Precision::fp32 ? AmpLevel::O0 : (j.precision == Precision::fp32 ? AmpLevel::O2 : j.amp);
        for (size_t k = 0; k < opt.also_fit.size(); ++k) {
          jobs_also[k] = jj;
          jobs_also[k].grads = opt.also_fit[k].grads;
        }
        // Goodput's checkpoint is the job's, the same for every plan on these GPUs.
        const CheckpointSize checkpoint = opt.goodput ? checkpoint_totals(m, jj, gpus) : CheckpointSize{};
        shapes.assign(eps.size() * sps.size() * flashes.size() * exchanges.size() * mbs.size(), ShapeInputs{});
        // The CP exchange means nothing without CP: one pass then.
        const size_t n_exchanges = it.cp > 1 ? exchanges.size() : 1;
        for (const auto& [vpp, split, schedule, stage_layers] : vpp_splits) {
          p.stage_layers = stage_layers;  // once per split: the loops below leave it
          for (size_t i_ep = 0; i_ep < eps.size(); ++i_ep)
            for (size_t i_sp = 0; i_sp < sps.size(); ++i_sp)
              for (size_t i_flash = 0; i_flash < flashes.size(); ++i_flash)
                for (size_t i_x = 0; i_x < n_exchanges; ++i_x)
                  for (size_t i_mb = 0; i_mb < mbs.size(); ++i_mb) {
                    const int ep = eps[i_ep], sp = sps[i_sp], flash = flashes[i_flash], mb = mbs[i_mb];
                    ShapeInputs& shape =
                        shapes[(((i_ep * sps.size() + i_sp) * flashes.size() + i_flash) * exchanges.size() + i_x) * mbs.size() + i_mb];
                    // Per (zero, offload) of this shape: whether the plan fits without recompute
                    // (and without activation offload), which decides whether full recompute
                    // of only the first k layers is searched (below).
                    fits_without_recompute.assign(zeros.size() * offs.size(), 0);
                    for (Recompute rc : recs)
                      for (size_t i_zo = 0; i_zo < zeros.size() * offs.size(); ++i_zo) {
                          const int zero = zeros[i_zo / offs.size()], off = offs[i_zo % offs.size()];
                          if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) return;
                          if (vpp > 1 && it.pp == 1) continue;  // vpp is meaningless without pp: not a plan
                          if (sp && it.tp == 1) continue;       // likewise: sp == tp1 plan
                          if (off == 2 && zero != 3) continue;  // parameter offload is ZeRO-3's
                          // Fused attention keeps no scores, so selective recompute equals none.
                          if (flash && rc == Recompute::selective) continue;
                          p.vpp = vpp;
                          // Layers that pp*vpp does not divide: Megatron-Core's embedding/loss
                          // split when it is legal (plan_check.h).
                          p.pipeline_split = split;
                          p.ep = ep;
                          p.sp = sp != 0;
                          p.flash_attention = flash != 0;
                          p.cp_exchange = it.cp > 1 ? exchanges[i_x] : CpExchange::ring;
                          p.micro_batch = mb;
                          p.recompute = rc;
                          p.zero = zero;
                          p.offload_optimizer = off != 0;
                          p.offload_params = off == 2;
                          p.schedule = schedule;
                          p.grad_accum = per_dp > 0 ? static_cast<int>(per_dp / mb) : 0;
                          ++r.enumerated;
                          if (++local % 4096 == 0) {
                            done += 4096;
                            if (opt.progress) {
                              std::lock_guard<std::mutex> lock(progress_mutex);
                              const auto now = std::chrono::steady_clock::now();
                              if (now - last_progress > std::chrono::milliseconds(100)) {
                                last_progress = now;
                                opt.progress(done.load(), total_estimate);
                              }
                            }
                          }
                          PlanResult pr;
                          pr.plan = p;
                          pr.precision = prec;
                          pr.amp = jj.amp;
                          pr.reason = check_plan(m, c, jj, p, gpus, space.tp_across_nodes);
                          if (pr.reason != RejectReason::none) {
                            ++r.rejected[static_cast<int>(pr.reason)];
                            if (opt.keep_all) r.all.push_back(pr);
                            continue;
                          }
                          if (opt.framework) {
                            const int rule = framework_refusal(*opt.framework, m, jj, p);
                            if (rule >= 0) {
                              pr.reason = RejectReason::framework_refuses;
                              ++r.rejected[static_cast<int>(pr.reason)];
                              ++r.framework_rejected[static_cast<size_t>(rule)];
                              if (opt.keep_all) r.all.push_back(pr);
                              continue;
                            }
                          }
                          ++r.evaluated;
                          if (!shape.ready || shape.split != p.pipeline_split || shape.dualpipe != (p.schedule == Schedule::dualpipe) ||
                              (mixed_layers && (shape.vpp != p.vpp || shape.v_shape != v_shape(p.schedule))) ||
                              (p.pipeline_split == PipelineSplit::custom && shape.vpp != p.vpp)) {
                            shape.split = p.pipeline_split;
                            shape.vpp = p.vpp;
                            shape.v_shape = v_shape(p.schedule);
                            shape.dualpipe = p.schedule == Schedule::dualpipe;
                            shape.also.clear();
                            shape.time = step_time_inputs(m, c, jj, p, opt.efficiency);
                            shape.memory = memory_inputs(m, c.gpu, jj, p, opt.memory);
                            shape.ready = true;
                          }
                          // Memory (under every convention of the envelope) and time of plan q into pr.
                          bool gpu_fits = false;  // the last cost()'s plan fits the GPU (host memory aside)
                          double recompute_s = 0;  // the last cost()'s recompute time per step
                          auto cost = [&](const ParallelPlan& q, PlanResult* out) {
                            MemoryPeak mem = estimate_memory_peak(m, c, jj, q, shape.memory, opt.memory);
                            const StepTime st = estimate_time(m, c, jj, q, shape.time, opt.efficiency);
                            out->plan = q;
                            out->peak_low_bytes = mem.total;
                            out->peak_convention = -1;
                            // The other stacks' conventions only where the own one fits the GPU: a
                            // plan that does not fit under one convention does not fit the envelope.
                            if (!opt.also_fit.empty() && mem.gpu_fits(opt.headroom_bytes)) {
                              if (shape.also.size() != opt.also_fit.size()) {
                                shape.also.clear();
                                for (size_t k = 0; k < opt.also_fit.size(); ++k) shape.also.push_back(memory_inputs(m, c.gpu, jobs_also[k], q, opt.also_fit[k].memory));
                              }
                              for (size_t k = 0; k < opt.also_fit.size(); ++k) {
                                if (opt.also_fit[k].zero3_only && q.zero != 3) continue;
                                const MemoryPeak other = estimate_memory_peak(m, c, jobs_also[k], q, shape.also[k], opt.also_fit[k].memory);
                                out->peak_low_bytes = std::min(out->peak_low_bytes, other.total);
                                if (other.total > mem.total) mem = other, out->peak_convention = static_cast<int>(k);
                              }
                            }
                            out->peak_bytes = mem.total;
                            out->host_bytes_per_node = mem.host_bytes_per_node;
                            out->peak_stage = mem.stage;
                            out->peak_phase = mem.phase;
                            out->step_time_s = st.total;
                            out->tokens_per_s = st.tokens_per_s;
                            out->mfu = st.mfu;
                            out->bubble_fraction = st.bubble_fraction();
                            out->exposed_comm_s = st.tp_comm + st.pp_comm + st.dp_comm + st.cp_comm + st.ep_comm;
                            out->goodput = opt.goodput ? estimate_goodput(checkpoint, c, gpus, st.total, *opt.goodput).fraction : 1;
                            out->gpu_hours_per_1b_tokens = gpus * 1e9 / (st.tokens_per_s * out->goodput) / 3600.0;
                            gpu_fits = mem.gpu_fits(opt.headroom_bytes);
                            recompute_s = st.recompute;
                            return mem.fits(opt.headroom_bytes);
                          };
                          const int offload_max = space.activation_offload ? pp_stage_layers(m.layers, cost_plan(p), 0) : 0;
                          bool fits = cost(p, &pr);
                          // Activation offload (SweepSpace::activation_offload): a plan that does
                          // not fit the GPU offloads the fewest layers that make it fit, found by
                          // bisection (GPU memory falls and offload time grows with the layers
                          // offloaded, so the fewest is the fastest; more would be dominated, and
                          // would only fill more host memory, which is checked at the fewest).
                          // ... when the framework the sweep is restricted to can offload them.
                          auto framework_offloads = [&] {
                            if (!opt.framework) return true;
                            ParallelPlan q = p;
                            q.activation_offload_layers = std::max(2, offload_max);
                            return framework_refusal(*opt.framework, m, jj, q) < 0;
                          };
                          if (!fits && !gpu_fits && space.activation_offload && framework_offloads()) {
                            ParallelPlan q = p;
                            PlanResult trial = pr;
                            // Offloading 1 or 2 layers saves nothing (the double buffer holds two).
                            const int k = fewest_offload_layers(2, offload_max, [&](int layers) {
                              q.activation_offload_layers = layers;
                              cost(q, &trial);
                              return gpu_fits;
                            });
                            q.activation_offload_layers = k;
                            // A framework that offloads every layer or none (DeepSpeed's
                            // cpu_checkpointing) runs the stage's whole count instead, which
                            // framework_offloads() has already let through.
                            if (k > 0 && opt.framework && framework_refusal(*opt.framework, m, jj, q) >= 0) q.activation_offload_layers = offload_max;
                            if (k > 0 && cost(q, &trial)) pr = trial, fits = true;
                          }
                          if (!fits) {
                            pr.reason = gpu_fits ? RejectReason::host_does_not_fit : RejectReason::does_not_fit;
                            ++r.rejected[static_cast<int>(pr.reason)];
                            if (!r.has_closest || closer_miss(pr, r.closest)) {
                              r.closest = pr;
                              r.has_closest = true;
                            }
                          } else {
                            ++r.fitting;
                            offer_top(r.top, pr, opt.top_k, opt.objective);
                            offer_pareto(ts.fitting_front, pr);
                          }
                          if (opt.keep_all) r.all.push_back(pr);
                          if (rc == Recompute::none) fits_without_recompute[i_zo] = fits && pr.plan.activation_offload_layers == 0;
                          // Full recompute of only the first k layers of each chunk (Megatron's
                          // --recompute-method block --recompute-num-layers k): where the plan
                          // fits with full recompute and not without, the fewest k that fits
                          // (found by bisection: memory falls and time grows with k, so fewer
                          // is faster and more would be dominated). Only when the sweep may
                          // choose the recompute (none is among its policies). Such a plan enters
                          // the ranking (and --csv), not the Pareto front: unless every plan is
                          // kept, the search is skipped when even recomputing nothing would not
                          // enter this thread's ranking, which depends on the thread split.
                          const int max_k = rc == Recompute::full ? pp_stage_layers(m.layers, p, 0) / p.vpp : 0;
                          if (fits && max_k > 1 && recompute_free && !fits_without_recompute[i_zo] && pr.plan.activation_offload_layers == 0) {
                            if (!opt.keep_all && static_cast<int>(r.top.size()) == opt.top_k) {
                              // pr was the last plan costed (it fit at once): at best the plan saves its recompute.
                              PlanResult bound = pr;
                              const double faster = pr.step_time_s / std::max(1e-12, pr.step_time_s - recompute_s);
                              bound.step_time_s /= faster;
                              bound.tokens_per_s *= faster;
                              bound.gpu_hours_per_1b_tokens /= faster;
                              if (!better(bound, r.top.back(), opt.objective)) continue;
                            }
                            ParallelPlan q = pr.plan;
                            q.recompute = Recompute::full_k;
                            q.recompute_layers = 1;
                            if (opt.framework && framework_refusal(*opt.framework, m, jj, q) >= 0) continue;
                            PlanResult trial = pr;
                            const int k = fewest_offload_layers(0, max_k - 1, [&](int layers) {
                              q.recompute_layers = layers;
                              return cost(q, &trial);
                            });
                            if (k == 0) continue;
                            q.recompute_layers = k;
                            cost(q, &trial);
                            // Not counted in enumerated/evaluated/fitting: a variant of the full
                            // plan counted above, searched or not depending on the thread split.
                            offer_top(r.top, trial, opt.top_k, opt.objective);
                            if (opt.keep_all) r.all.push_back(trial);
                          }
                      }
                  }
        }
      }
    }
  };

  std::vector<std::thread> threads;
  for (int i = 1; i < n_threads; ++i) threads.emplace_back(worker, std::ref(states[i]));
  worker(states[0]);
  for (auto& t : threads) t.join();

  SweepResult out;
  out.framework_rejected.assign(opt.framework ? opt.framework->rules.size() : 0, 0);
  for (ThreadState& ts : states) {
    SweepResult& r = ts.r;
    out.enumerated += r.enumerated;
    out.evaluated += r.evaluated;
    out.fitting += r.fitting;
    for (size_t i = 0; i < out.rejected.size(); ++i) out.rejected[i] += r.rejected[i];
    for (size_t i = 0; i < out.framework_rejected.size(); ++i) out.framework_rejected[i] += r.framework_rejected[i];
    for (const PlanResult& x : r.top) offer_top(out.top, x, opt.top_k, opt.objective);
    for (const PlanResult& x : ts.fitting_front) offer_pareto(out.pareto, x);
    if (r.has_closest && (!out.has_closest || closer_miss(r.closest, out.closest))) {
      out.closest = r.closest;
      out.has_closest = true;
    }
    if (opt.keep_all) out.all.insert(out.all.end(), r.all.begin(), r.all.end());
  }
  std::sort(out.pareto.begin(), out.pareto.end(), [](const PlanResult& a, const PlanResult& b) { return a.peak_bytes < b.peak_bytes; });
  // Threads finish work items in any order: sort so that --csv is the same every run.
  std::sort(out.all.begin(), out.all.end(), [](const PlanResult& a, const PlanResult& b) { return plan_key(a) < plan_key(b); });
  // Which frameworks run each reported plan: only these, so that the hot loop pays nothing.
  if (!opt.mark_frameworks.empty()) {
    auto mark = [&](PlanResult& x) {
      TrainingJob jj = job_for(j, x);
      x.frameworks = frameworks_running(opt.mark_frameworks, m, jj, x.plan);
    };
    for (PlanResult& x : out.top) mark(x);
    for (PlanResult& x : out.pareto) mark(x);
    for (PlanResult& x : out.all) mark(x);
    if (out.has_closest) mark(out.closest);
  }
  out.cancelled = opt.cancel && opt.cancel->load();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace llmplan
