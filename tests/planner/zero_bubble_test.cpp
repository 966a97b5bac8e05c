// Split-backward pipeline schedules (ZB-H1, ZB-V, DualPipeV) in the planner's closed forms,
// against an independent reference: each schedule's per-rank order of operations as
// PyTorch's torch.distributed.pipelining runs it (pytorch/pytorch 00722e648b74,
// torch/distributed/pipelining/schedules.py: _get_1f1b_rank_ops with enable_zero_bubble and
// one local stage for ZB-H1, ScheduleZBVZeroBubble._calculate_single_rank_operations,
// ScheduleDualPipeV._calculate_single_rank_operations; the simulator's pipeline_schedule),
// walked op by op for the memory counts and played with given durations for the step time.
#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "planner/cost/framework.h"
#include "planner/cost/memory_model.h"
#include "planner/cost/plan_check.h"
#include "planner/cost/time_model.h"
#include "planner/search/explain.h"
#include "planner/search/sweep.h"
#include "planner/spec/recipe.h"
#include "simulator/schedule.h"
#include "tests/shipped_presets.h"

namespace llmplan {
namespace {

using testing::shipped_presets;

// ---------------------------------------------------------------- the reference orders

// The per-rank orders (simulator/schedule.h: PyTorch's, transcribed; schedule_test.cpp
// checks them against hand-written orders).
using Program = StageProgram;
Program order(Schedule s, int pp, int m, int r) {
  ParallelPlan p;
  p.pp = pp;
  p.vpp = s == Schedule::zb_h1 ? 1 : 2;
  p.schedule = s;
  return pipeline_schedule(effective_schedule(p), pp, p.vpp, m)[static_cast<size_t>(r)];
}

// Walks a program: the most chunk activation sets held (a forward's until its W, or its
// whole backward), the most B's waiting for their W, and the most of each chunk held.
struct Walk {
  int held = 0, pending = 0;
  int chunk_held[2] = {0, 0};
};
Walk walk(const Program& prog) {
  Walk w;
  int held[2] = {0, 0}, pending = 0;
  for (const PipelineOp& o : prog) {
    if (o.kind == PassKind::forward) ++held[o.chunk];
    if (o.kind == PassKind::input_grad) ++pending;
    if (o.kind == PassKind::weight_grad) --pending, --held[o.chunk];
    if (o.kind == PassKind::backward) --held[o.chunk];
    w.held = std::max(w.held, held[0] + held[1]);
    w.pending = std::max(w.pending, pending);
    for (int c = 0; c < 2; ++c) w.chunk_held[c] = std::max(w.chunk_held[c], held[c]);
  }
  return w;
}

// The (held, pending) pairs at the moments memory can peak -- a forward's start, a
// backward's or B's largest moment (the current micro-batch included) -- that no other
// moment of the order matches or exceeds in both, chunk sets.
std::set<std::pair<int, int>> peak_front(const Program& prog) {
  std::vector<std::pair<int, int>> at;
  int held = 0, pending = 0;
  for (const PipelineOp& o : prog) {
    if (o.kind == PassKind::forward) at.push_back({++held, pending});
    if (o.kind == PassKind::input_grad) at.push_back({held, ++pending});
    if (o.kind == PassKind::backward) at.push_back({held--, pending});
    if (o.kind == PassKind::weight_grad) --held, --pending;
  }
  std::set<std::pair<int, int>> front;
  for (const auto& a : at) {
    bool dominated = false;
    for (const auto& b : at) dominated = dominated || (b != a && b.first >= a.first && b.second >= a.second);
    if (!dominated) front.insert(a);
  }
  return front;
}

ParallelPlan pipeline(Schedule s, int pp) {
  ParallelPlan p;
  p.pp = pp;
  p.vpp = s == Schedule::zb_h1 ? 1 : 2;
  p.schedule = s;
  return p;
}

// ---------------------------------------------------------------- memory counts

TEST(ZeroBubble, InflightAndPendingCountsAreTheOrdersWalkedOpByOp) {
  int checked = 0;
  for (Schedule s : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev}) {
    const int chunks = s == Schedule::zb_h1 ? 1 : 2;  // chunk sets per stage set
    for (int pp = 2; pp <= 13; ++pp) {
      const ParallelPlan p = pipeline(s, pp);
      for (int m = s == Schedule::dualpipev ? 2 * pp : 1; m <= 4 * pp + 2; ++m) {
        for (int r = 0; r < pp; ++r) {
          SCOPED_TRACE(std::string(to_string(s)) + " pp " + std::to_string(pp) + " m " + std::to_string(m) + " rank " + std::to_string(r));
          const Program prog = order(s, pp, m, r);
          const Walk w = walk(prog);
          // The moments memory can peak at: exactly the walked front where the planner
          // lists it; otherwise its one moment bounds every walked one.
          std::array<SplitBackwardCounts, 3> at{};
          const int n = split_backward_peak_counts(p, m, r, at);
          std::set<std::pair<int, int>> planned;
          for (int i = 0; i < n; ++i)
            planned.insert({static_cast<int>(at[i].inflight * chunks), static_cast<int>(at[i].pending * chunks)});
          const std::set<std::pair<int, int>> front = peak_front(prog);
          if (s != Schedule::zbv || m >= 2 * pp - 1) {
            EXPECT_EQ(planned, front);
          }
          for (const auto& [h, pend] : front) {
            EXPECT_TRUE(std::any_of(planned.begin(), planned.end(), [&](const auto& q) { return q.first >= h && q.second >= pend; }))
                << h << " held, " << pend << " pending";
          }
          EXPECT_DOUBLE_EQ(inflight_microbatches(p, m, r) * chunks, w.held);
          // ZB-V's pending count is exact from m >= 2pp - 1 (the order's own padding) and an
          // upper bound below it; the others are exact.
          if (s == Schedule::zbv && m < 2 * pp - 1) {
            EXPECT_GE(pending_weight_grad_sets(p, m, r) * chunks, w.pending);
          }
          else EXPECT_DOUBLE_EQ(pending_weight_grad_sets(p, m, r) * chunks, w.pending);
          if (r == 0) {
            EXPECT_DOUBLE_EQ(first_chunk_sets(p, m), w.chunk_held[0]);  // the embedding's chunk
          }
          // The head's chunk: ZB-H1's last rank, rank 0's chunk 1 in a V.
          if (s == Schedule::zb_h1 && r == pp - 1) {
            EXPECT_DOUBLE_EQ(last_chunk_sets(p, m), w.chunk_held[0]);
          }
          if (s != Schedule::zb_h1 && r == 0) {
            EXPECT_DOUBLE_EQ(last_chunk_sets(p, m), w.chunk_held[1]);
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 3000);
}

// ---------------------------------------------------------------- step time

// Plays the programs of every rank with the given durations per chunk: each op starts when
// its rank is free and its input is there (a forward needs the previous stage's forward, a
// backward the next stage's backward, or on the last stage its own forward; a W its B).
double play(Schedule s, int pp, int m, double f, double i, double wt) {
  const bool v = s != Schedule::zb_h1;
  const int stages = v ? 2 * pp : pp;
  auto stage_of = [&](int r, int c) { return !v ? r : (c == 0 ? r : 2 * pp - 1 - r); };
  std::vector<Program> progs;
  for (int r = 0; r < pp; ++r) progs.push_back(order(s, pp, m, r));
  std::map<std::tuple<int, int, int>, double> end;  // (F=0 / B=1 / W=2, stage, mb) -> time
  std::vector<size_t> next(pp, 0);
  std::vector<double> clock(pp, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r)
      while (next[r] < progs[r].size()) {
        const PipelineOp& o = progs[r][next[r]];
        const int st = stage_of(r, o.chunk);
        std::tuple<int, int, int> dep{-1, 0, 0};
        if (o.kind == PassKind::forward && st > 0) dep = {0, st - 1, o.microbatch};
        if (o.kind == PassKind::input_grad || o.kind == PassKind::backward) dep = st == stages - 1 ? std::tuple{0, st, o.microbatch} : std::tuple{1, st + 1, o.microbatch};
        if (o.kind == PassKind::weight_grad) dep = {1, st, o.microbatch};
        double ready = 0;
        if (std::get<0>(dep) >= 0) {
          auto it = end.find(dep);
          if (it == end.end()) break;
          ready = it->second;
        }
        const double d = o.kind == PassKind::forward ? f : o.kind == PassKind::input_grad ? i : o.kind == PassKind::weight_grad ? wt : i + wt;
        clock[r] = std::max(clock[r], ready) + d;
        if (o.kind == PassKind::forward) end[{0, st, o.microbatch}] = clock[r];
        if (o.kind == PassKind::input_grad || o.kind == PassKind::backward) end[{1, st, o.microbatch}] = clock[r];
        ++next[r];
        progress = true;
      }
  }
  for (int r = 0; r < pp; ++r) EXPECT_EQ(next[r], progs[r].size()) << "deadlock on rank " << r;
  return *std::max_element(clock.begin(), clock.end());
}

// The planner's bubble for a critical stage of the given per-chunk F, B (input gradient),
// W: equal stages of vpp chunks each.
double planner_bubble(Schedule s, int pp, double f, double i, double wt) {
  const ParallelPlan p = pipeline(s, pp);
  CriticalStage w;
  w.fwd = p.vpp * f;
  w.wgrad = p.vpp * wt;
  w.max_stage = p.vpp * (f + i + wt);
  w.sum_stage = pp * w.max_stage;
  return pipeline_bubble(p, w);
}

// Equal F, B, W: each schedule's step is its work plus the paper's bubble, exactly --
// ZB-H1 (p-1)(F + B - W) (Qi et al. 2024 Sec. 2.1), ZB-V and DualPipeV the same over their
// half-size chunks (their V fills in p-1 chunk forwards).
TEST(ZeroBubble, StepTimeWithEqualCostsIsWorkPlusThePapersBubble) {
  for (Schedule s : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev})
    for (int pp : {2, 3, 4, 8, 16})
      for (int m : {2 * pp, 3 * pp + 1, 64}) {
        SCOPED_TRACE(std::string(to_string(s)) + " pp " + std::to_string(pp) + " m " + std::to_string(m));
        const double unit = 1.0, chunks = s == Schedule::zb_h1 ? 1 : 2;
        const double played = play(s, pp, m, unit, unit, unit);
        const double work = m * chunks * 3 * unit;
        const double paper = (pp - 1) * (unit + unit - unit);
        EXPECT_DOUBLE_EQ(played - work, paper);
        EXPECT_DOUBLE_EQ(planner_bubble(s, pp, unit, unit, unit), paper);
      }
}

// Unequal costs: ZB-H1's bubble stays max(F, F + B - W) per stage exactly (checked on the
// orders); a V's formula is an approximation: the orders play out between 0.6x and 1.9x
// of it on these costs (the most when W is twice F and B: a V cannot run W before its B).
TEST(ZeroBubble, UnequalCostsZbH1ExactAndVWithinAFactorOfTwo) {
  const std::vector<std::tuple<double, double, double>> costs = {{1, 2, 1}, {2, 1, 1}, {1, 1, 2}, {1, 1, 0.5}, {1, 1.5, 0.7}, {1, 2, 0.5}};
  for (const auto& [f, i, wt] : costs)
    for (int pp : {4, 8}) {
      const int m = 3 * pp;
      SCOPED_TRACE("F " + std::to_string(f) + " B " + std::to_string(i) + " W " + std::to_string(wt) + " pp " + std::to_string(pp));
      EXPECT_NEAR(play(Schedule::zb_h1, pp, m, f, i, wt) - m * (f + i + wt), planner_bubble(Schedule::zb_h1, pp, f, i, wt), 1e-9);
      for (Schedule s : {Schedule::zbv, Schedule::dualpipev}) {
        const double played = play(s, pp, m, f, i, wt) - 2 * m * (f + i + wt), model = planner_bubble(s, pp, f, i, wt);
        EXPECT_LE(played, 1.9 * model + 1e-9) << to_string(s);
        EXPECT_GE(played, 0.6 * model - 1e-9) << to_string(s);
      }
    }
}

// ---------------------------------------------------------------- the recipe's W buffers

// A Llama layer's W-gradient buffers: the output gradients of q|k|v, o, gate|up and down,
// per token (h + 2 kv + h + 2f + h, split by t where column-parallel), in bf16.
TEST(ZeroBubble, WeightGradBuffersAreTheLinearOutputsGradients) {
  const ModelSpec m = *shipped_presets().model("llama3-8b");
  LayerContext c;
  c.b = 2;
  c.s = 4096;
  c.t = 2;
  const double tokens = 2.0 * 4096, h = 4096, kv = 1024, f = 14336;
  EXPECT_DOUBLE_EQ(weight_grad_buffer_bytes(m, c), tokens * ((h + 2 * kv) / 2 + h + 2 * f / 2 + h) * 2);
  // LoRA: only the adapters train: A's r-wide output and B's, the target's width on the
  // rank (q: h / t, v: kv / t, column-parallel; down: h, row-parallel, whole).
  c.base_trainable = false;
  c.lora_targets = projection_bit(Projection::q) | projection_bit(Projection::v) | projection_bit(Projection::down);
  c.lora_rank = 16;
  EXPECT_DOUBLE_EQ(weight_grad_buffer_bytes(m, c), tokens * ((16 + h / 2) + (16 + kv / 2) + (16 + h)) * 2);
  // No gradient reaches a frozen bottom layer.
  c.grad_flows = false;
  EXPECT_EQ(weight_grad_buffer_bytes(m, c), 0);
}

// ---------------------------------------------------------------- plans

struct Job {
  ModelSpec m;
  ClusterSpec c;
  TrainingJob j;
};
Job llama3_8b_on_8() {
  const PresetRegistry& reg = shipped_presets();
  Job x{*reg.model("llama3-8b"), cluster_with_gpus(*reg.cluster_for_gpu("h100-sxm"), 8), {}};
  x.j.seq_len = 4096;
  x.j.global_batch = 64;
  return x;
}

TEST(ZeroBubble, CheckPlanRefusesShapesTheScheduleCannotRunNamingTheField) {
  Job x = llama3_8b_on_8();  // 32 layers
  ParallelPlan p;
  p.dp = 2, p.pp = 4, p.micro_batch = 1;
  p.schedule = Schedule::zb_h1;
  EXPECT_EQ(check_plan(x.m, x.c, x.j, p, 8), RejectReason::none);
  p.vpp = 2;
  EXPECT_EQ(check_plan(x.m, x.c, x.j, p, 8), RejectReason::schedule_shape);
  EXPECT_NE(check_plan_status(x.m, x.c, x.j, p, 8, "plan.json").message().find("'plan.schedule'"), std::string::npos);
  p.schedule = Schedule::zbv;
  EXPECT_EQ(check_plan(x.m, x.c, x.j, p, 8), RejectReason::none);  // 32 layers over 8 chunks
  p.vpp = 4;
  EXPECT_EQ(check_plan(x.m, x.c, x.j, p, 8), RejectReason::schedule_shape);
  EXPECT_NE(check_plan_status(x.m, x.c, x.j, p, 8, "plan.json").message().find("'plan.vpp'"), std::string::npos);
  // 30 layers: interleaved takes them over 8 chunks with the embedding/loss split (32 slots),
  // a V only as 8 equal chunks.
  ModelSpec odd = x.m;
  odd.layers = 30;
  p.vpp = 2;
  p.pipeline_split = PipelineSplit::account_embedding_loss;
  p.schedule = Schedule::interleaved;
  EXPECT_EQ(check_plan(odd, x.c, x.j, p, 8), RejectReason::none);
  p.schedule = Schedule::zbv;
  EXPECT_EQ(check_plan(odd, x.c, x.j, p, 8), RejectReason::schedule_shape);
  p.pipeline_split = PipelineSplit::even;
  // DualPipeV needs at least 2*pp micro-batches: 64 / (2 * 8) = 4 < 8.
  p.schedule = Schedule::dualpipev;
  p.micro_batch = 8;
  EXPECT_EQ(check_plan(x.m, x.c, x.j, p, 8), RejectReason::schedule_shape);
  EXPECT_NE(check_plan_status(x.m, x.c, x.j, p, 8, "plan.json").message().find("'job.global_batch'"), std::string::npos);
  p.micro_batch = 4;  // 8 micro-batches
  EXPECT_EQ(check_plan(x.m, x.c, x.j, p, 8), RejectReason::none);
}

// A V puts the embedding and the LM head on rank 0: its parameters and the head's tensors
// are stage 0's, and the last stage holds neither.
TEST(ZeroBubble, VPlacesTheHeadOnTheFirstStage) {
  Job x = llama3_8b_on_8();
  ParallelPlan one;
  one.dp = 2, one.pp = 4, one.micro_batch = 1;
  ParallelPlan v = one;
  v.vpp = 2;
  v.schedule = Schedule::zbv;
  const ParamCounts pc = count_params(x.m, 1, 4, 1, 0, 0);
  const double first_1f1b = stage_state_bytes(x.m, x.j, one, pc, 0).weights;
  const double first_v = stage_state_bytes(x.m, x.j, v, pc, 0).weights, last_v = stage_state_bytes(x.m, x.j, v, pc, 3).weights;
  const double weight_bytes = first_1f1b / (pc.embedding_rank + 8 * pc.per_layer_rank);  // bytes per parameter
  EXPECT_DOUBLE_EQ(first_v - first_1f1b, pc.head_rank * weight_bytes);
  EXPECT_DOUBLE_EQ(last_v, 8 * pc.per_layer_rank * weight_bytes);
  EXPECT_EQ(head_stage(v), 0);
  EXPECT_EQ(head_stage(one), 3);
}

// Same shape: ZB-H1 holds 1F1B's stage-0 activations on every stage plus the W buffers, so
// no stage holds less than under 1F1B and the last one holds more; it is faster.
TEST(ZeroBubble, ZbH1CostsMemoryAndSavesBubble) {
  Job x = llama3_8b_on_8();
  ParallelPlan p;
  p.dp = 2, p.pp = 4, p.micro_batch = 1;
  ParallelPlan zb = p;
  zb.schedule = Schedule::zb_h1;
  const MemoryReport a = estimate_memory(x.m, x.c, x.j, p), b = estimate_memory(x.m, x.c, x.j, zb);
  EXPECT_GT(b.last.total, a.last.total);
  EXPECT_GE(b.worst.total, a.worst.total);
  EXPECT_GT(b.last.weight_grad_buffer_bytes, 0);
  EXPECT_EQ(a.last.weight_grad_buffer_bytes, 0);
  EXPECT_DOUBLE_EQ(b.last.inflight_microbatches, 4);
  // The logits live from the head's F to the loss's B, back to back on the last stage under
  // both: at most one set at the peak (the head's W keeps their gradient, counted in the W
  // buffers; ZB-H1's last stage peaks in a B, after the logits went).
  const int logits = static_cast<int>(MemoryItem::logits_loss);
  EXPECT_LE(b.last.bytes[logits], a.last.bytes[logits]);
  EXPECT_EQ(b.last.peak_phase, Phase::backward);
  const StepTime ta = estimate_time(x.m, x.c, x.j, p), tb = estimate_time(x.m, x.c, x.j, zb);
  EXPECT_LT(tb.bubble, ta.bubble);
  EXPECT_NEAR(tb.total - tb.bubble, ta.total - ta.bubble, 1e-12 * ta.total);
}

// The sweep takes the split-backward schedules only when asked, on the shapes they take,
// and then finds plans at least as fast.
TEST(ZeroBubble, SweepEnumeratesTheSchedulesWhenAsked) {
  Job x = llama3_8b_on_8();
  SweepSpace classic;
  classic.pp = {4};
  SweepOptions opt;
  opt.threads = 2;
  opt.keep_all = true;
  const SweepResult a = run_sweep(x.m, x.c, x.j, 8, classic, opt);
  SweepSpace all = classic;
  all.schedule = {Schedule::one_f_one_b, Schedule::interleaved, Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev};
  const SweepResult b = run_sweep(x.m, x.c, x.j, 8, all, opt);
  std::map<Schedule, int> seen;
  for (const PlanResult& r : a.all) ++seen[r.plan.schedule];
  EXPECT_EQ(seen.count(Schedule::zb_h1) + seen.count(Schedule::zbv) + seen.count(Schedule::dualpipev), 0u);
  seen.clear();
  for (const PlanResult& r : b.all) {
    ++seen[r.plan.schedule];
    if (r.plan.schedule == Schedule::zb_h1) {
      EXPECT_EQ(r.plan.vpp, 1);
    }
    if (v_shape(r.plan.schedule)) {
      EXPECT_EQ(r.plan.vpp, 2);
    }
  }
  EXPECT_GT(seen[Schedule::zb_h1], 0);
  EXPECT_GT(seen[Schedule::zbv], 0);
  EXPECT_GT(seen[Schedule::dualpipev], 0);
  ASSERT_FALSE(a.top.empty());
  ASSERT_FALSE(b.top.empty());
  EXPECT_GE(b.top[0].tokens_per_s, a.top[0].tokens_per_s);
  // With one stage per rank, the best ZB-H1 plan beats the best 1F1B one (interleaving with
  // many virtual stages may still win overall).
  double best_1f1b = 0, best_zb = 0;
  for (const PlanResult& r : b.all) {
    if (r.reason != RejectReason::none) continue;
    if (r.plan.schedule == Schedule::one_f_one_b) best_1f1b = std::max(best_1f1b, r.tokens_per_s);
    if (r.plan.schedule == Schedule::zb_h1) best_zb = std::max(best_zb, r.tokens_per_s);
  }
  EXPECT_GT(best_1f1b, 0);
  EXPECT_GT(best_zb, best_1f1b);
  // A list of zero-bubble schedules alone drops 1F1B and interleaved plans with a pipeline,
  // never the plans without one.
  SweepSpace only_zbv;
  only_zbv.pp = {1, 4};
  only_zbv.schedule = {Schedule::zbv};
  const SweepResult c = run_sweep(x.m, x.c, x.j, 8, only_zbv, opt);
  int pp1 = 0, zbv = 0;
  for (const PlanResult& r : c.all) {
    if (r.plan.pp == 1) ++pp1;
    else EXPECT_EQ(r.plan.schedule, Schedule::zbv);
    zbv += r.plan.pp > 1;
  }
  EXPECT_GT(pp1, 0);
  EXPECT_GT(zbv, 0);
}

// Framework support: Megatron-Core (and NeMo on it), DeepSpeed and MindFormers refuse the
// three; torchtitan runs ZB-V and DualPipeV and refuses one-stage ZB-H1.
TEST(ZeroBubble, FrameworksRunWhatTheirSchedulesHave) {
  const PresetRegistry& reg = shipped_presets();
  Job x = llama3_8b_on_8();
  for (Schedule s : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev}) {
    ParallelPlan p = pipeline(s, 4);
    p.dp = 2;
    for (const char* name : {"megatron", "nemo", "deepspeed", "mindformers"}) {
      const FrameworkSpec fw = *reg.framework(name);
      const int rule = framework_refusal(fw, x.m, x.j, p);
      ASSERT_GE(rule, 0) << name << " " << to_string(s);
      // DeepSpeed's engine refuses a V's two stages per rank first.
      const std::string id = fw.rules[static_cast<size_t>(rule)].id;
      if (std::string(name) == "deepspeed" && v_shape(s)) {
        EXPECT_TRUE(id == "no_zero_bubble" || id == "no_interleaved_pipeline") << id;
      } else {
        EXPECT_EQ(id, "no_zero_bubble") << name;
      }
    }
    const FrameworkSpec titan = *reg.framework("torchtitan");
    p.zero = 3;
    const int rule = framework_refusal(titan, x.m, x.j, p);
    if (s == Schedule::zb_h1) {
      ASSERT_GE(rule, 0);
      EXPECT_EQ(titan.rules[static_cast<size_t>(rule)].id, "no_single_stage_zero_bubble");
    } else {
      EXPECT_EQ(rule, -1) << to_string(s);
    }
  }
}

// Explain offers a zero-bubble schedule as a faster fit of a pipelined plan, with its cost.
TEST(ZeroBubble, ExplainNamesAFasterScheduleWithItsMemory) {
  Job x = llama3_8b_on_8();
  ParallelPlan p;
  p.dp = 2, p.pp = 4, p.micro_batch = 1;
  const Explanation e = explain_plan(x.m, x.c, x.j, p, 8, 0, {}, {});
  ASSERT_FALSE(e.faster_schedules.empty());
  for (const PlanChange& c : e.faster_schedules) {
    EXPECT_TRUE(splits_backward(c.plan.schedule));
    EXPECT_GT(c.throughput_change, 0);
    EXPECT_TRUE(c.fits);
    EXPECT_NE(c.description.find("schedule 1f1b -> "), std::string::npos);
  }
}

}  // namespace
}  // namespace llmplan
