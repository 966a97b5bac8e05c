#include "simulator/step_simulator.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "planner/cost/plan_check.h"
#include "simulator/event_engine.h"

namespace llmplan {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Tasks of one pass (forward, backward or a split backward's part, of one chunk for one
// micro-batch) on a stage.
struct OpRef {
  int first = -1;  // first compute-stream task (where the input arrives)
  int last = -1;   // last task of the pass (compute or its trailing blocking collective)
  int send = -1;   // the pipeline send of its output (-1: none)
};

// Splits a stream of bytes into buckets of `cap` bytes; never spans a flush.
class Bucketizer {
 public:
  explicit Bucketizer(double cap) : cap_(cap > 0 ? cap : kInf) {}
  // Adds bytes; calls emit(bytes) for every bucket that fills up.
  template <class F>
  void add(double bytes, F&& emit) {
    pending_ += bytes;
    while (pending_ >= cap_) {
      emit(cap_);
      pending_ -= cap_;
    }
  }
  template <class F>
  void flush(F&& emit) {
    if (pending_ > 0) emit(pending_);
    pending_ = 0;
  }
  bool empty() const { return pending_ <= 0; }

 private:
  double cap_;
  double pending_ = 0;
};

class StepBuilder {
 public:
  // `dualpipe`: p is a DualPipe plan's rank-equivalent DualPipeV plan (plan_check.h
  // cost_plan), whose V turns on one rank where DualPipe hands over between two.
  StepBuilder(const SimCosts& costs, const ParallelPlan& p, int64_t m, const SimOptions& opt, bool dualpipe = false)
      : costs_(costs), plan_(p), pp_(p.pp), vpp_(p.vpp), m_(m), opt_(opt), dualpipe_(dualpipe), engine_(p.pp),
        programs_(pipeline_schedule(effective_schedule(p), p.pp, p.vpp, m)) {}

  Status build_and_run();

  const EventEngine& engine() const { return engine_; }
  const std::vector<StageProgram>& programs() const { return programs_; }
  // The pass of `kind` over (chunk, mb) on `stage`; a backward and a B share a slot (a
  // micro-batch's chunk runs one or the other).
  const OpRef& op(int stage, PassKind kind, int chunk, int mb) const { return ops_[stage][slot(kind)][static_cast<size_t>(chunk) * m_ + mb]; }
  // The virtual stage of chunk c of stage s (plan_check.h), and the reverse.
  int virtual_stage(int s, int c) const { return chunk_virtual_stage(plan_, s, c); }
  const std::vector<int>& compute_tasks(int stage) const { return compute_[stage]; }
  const std::vector<int>& dp_tasks(int stage) const { return dp_[stage]; }
  int last_task(int stage) const { return last_[stage]; }
  int barrier() const { return barrier_; }
  int vpp() const { return vpp_; }
  // Sends block the compute stream unless the stack overlaps an interleaved schedule's
  // sends (Efficiency::pp_p2p_overlap, the planner's fact of the stack's code).
  bool blocking_p2p() const { return opt_.blocking_p2p && !(opt_.efficiency.pp_p2p_overlap > 0 && vpp_ > 1); }
  // Stage s's chunk c is its layers chunk_first(s, c) .. + chunk_layers(s, c) (the stage's
  // costs list its chunks' layers in chunk order): vpp equal runs, or the plan's own counts
  // (the embedding/loss and custom splits, plan_check.h virtual_stage_layers).
  int chunk_first(int s, int c) const { return chunk_first_[static_cast<size_t>(s)][static_cast<size_t>(c)]; }
  int chunk_layers(int s, int c) const { return chunk_first(s, c + 1) - chunk_first(s, c); }

 private:
  bool dp_active() const { return costs_.dp_group > 1; }
  CommCost dp_cost(double bytes, bool allreduce) const;
  int add_compute(int stage, EventKind kind, double seconds, int mb, int chunk, int layer);
  int add_comm(int stage, Stream stream, EventKind kind, const CommCost& cc, int mb, int chunk, int layer, double bytes,
               int peer = -1);
  int add_dp(int stage, Stream stream, EventKind kind, double bytes, bool allreduce, int mb, int chunk, int layer);
  // Appends the in-layer collectives of one pass after task `prev`; returns the last task
  // the pass's next compute waits for. They block, but for the EP all-to-alls of a
  // DualPipeV F&B pair (`hidden` non-null), which only start after `prev` and are collected
  // in `hidden` for the pair's end to wait for.
  int add_layer_comm(int stage, const LayerCost& L, Pass pass, int prev, int mb, int chunk, std::vector<int>* hidden = nullptr);
  static int slot(PassKind k) { return k == PassKind::forward ? 0 : k == PassKind::weight_grad ? 2 : 1; }
  // ZeRO-3: gathers one layer's weights before its next compute-stream visit, holding at
  // most two gathered layers (the current one and one prefetched).
  int zero3_gather(int stage, double bytes, int mb, int chunk, int layer);
  void build_stage(int s);

  const SimCosts& costs_;
  const ParallelPlan& plan_;
  int pp_, vpp_;
  int64_t m_;
  const SimOptions& opt_;
  bool dualpipe_;
  EventEngine engine_;
  std::vector<StageProgram> programs_;
  std::vector<std::array<std::vector<OpRef>, 3>> ops_;
  std::vector<std::vector<int>> compute_, dp_;
  std::vector<int> last_;    // per stage: the last task of its last pass
  std::vector<int> visits_;  // ZeRO-3: compute task of each layer visit of the current stage
  std::vector<std::pair<int, int>> placement_;  // virtual stage -> (stage, chunk)
  std::vector<std::vector<int>> chunk_first_;  // per stage, vpp + 1 offsets into its layers
  int barrier_ = -1;
};

CommCost StepBuilder::dp_cost(double bytes, bool allreduce) const {
  const Link& l = costs_.dp_link;
  const Efficiency& e = costs_.efficiency;
  const int n = costs_.dp_group;
  const double total = allreduce ? allreduce_time(bytes, n, l, e) : allgather_time(bytes, n, l, e);
  const double fixed = allreduce ? allreduce_latency(bytes, n, l) : allgather_latency(bytes, n, l);
  CommCost cc;
  cc.latency = std::min(fixed, total);
  cc.transfer = std::max(0.0, total - cc.latency);
  cc.tier = costs_.dp_tier;
  return cc;
}

int StepBuilder::add_compute(int stage, EventKind kind, double seconds, int mb, int chunk, int layer) {
  EngineTask t;
  t.stage = stage;
  t.stream = Stream::compute;
  t.kind = kind;
  t.latency = seconds;
  t.microbatch = mb;
  t.chunk = chunk;
  t.layer = layer;
  const int id = engine_.add(t);
  compute_[stage].push_back(id);
  return id;
}

int StepBuilder::add_comm(int stage, Stream stream, EventKind kind, const CommCost& cc, int mb, int chunk, int layer, double bytes,
                          int peer) {
  EngineTask t;
  t.stage = stage;
  t.stream = stream;
  t.kind = kind;
  t.latency = cc.latency;
  t.transfer = cc.transfer;
  t.tier = cc.tier;
  t.peer = peer;
  t.microbatch = mb;
  t.chunk = chunk;
  t.layer = layer;
  t.bytes = bytes;
  return engine_.add(t);
}

int StepBuilder::add_dp(int stage, Stream stream, EventKind kind, double bytes, bool allreduce, int mb, int chunk, int layer) {
  const int id = add_comm(stage, stream, kind, dp_cost(bytes, allreduce), mb, chunk, layer, bytes);
  dp_[stage].push_back(id);
  return id;
}

int StepBuilder::add_layer_comm(int stage, const LayerCost& L, Pass pass, int prev, int mb, int chunk, std::vector<int>* hidden) {
  static constexpr Stream kStream[kLayerComms] = {Stream::tp, Stream::cp, Stream::ep};
  static constexpr EventKind kKind[kLayerComms] = {EventKind::tp_comm, EventKind::cp_comm, EventKind::ep_comm};
  for (int k = 0; k < kLayerComms; ++k) {
    const CommCost& cc = L.comm[k][static_cast<int>(pass)];
    if (cc.total() <= 0) continue;
    const int id = add_comm(stage, kStream[k], kKind[k], cc, mb, chunk, L.global_layer, 0);
    engine_.depend(prev, id);
    if (hidden != nullptr && kKind[k] == EventKind::ep_comm) {
      hidden->push_back(id);
      continue;
    }
    prev = id;
  }
  return prev;
}

int StepBuilder::zero3_gather(int stage, double bytes, int mb, int chunk, int layer) {
  // With parameter offload the shard is first copied from the host, in series with the gather.
  CommCost cc = dp_cost(bytes, false);
  cc.transfer += param_fetch_time(bytes, costs_.dp_group, costs_.param_fetch_bandwidth, costs_.efficiency);
  const int id = add_comm(stage, Stream::dp_gather, EventKind::dp_param_gather, cc, mb, chunk, layer, bytes);
  dp_[stage].push_back(id);
  // Two buffers: this gather may start once the visit two before it has computed.
  const size_t n = visits_.size();
  if (n >= 2) engine_.depend(visits_[n - 2], id);
  return id;
}

void StepBuilder::build_stage(int s) {
  const StageCost& sc = costs_.stages[s];
  const int n = static_cast<int>(sc.layers.size());
  const int last_virtual = pp_ * vpp_ - 1;
  const StageProgram& prog = programs_[s];
  // ZeRO-3 visits each unit; a one-rank group only when its parameters come from the host.
  const bool zero3 = (dp_active() || costs_.param_fetch_bandwidth > 0) && costs_.zero == 3;
  const bool bucketed = dp_active() && costs_.zero < 3;
  visits_.clear();

  // The last pass of each chunk that produces weight gradients (a backward, or a split
  // backward's W) reduces them; the first forward of each chunk waits for the ZeRO-1/2
  // parameter gathers.
  std::vector<int> last_grads(vpp_, -1), first_f(vpp_, -1), chunk_order;
  for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
    const PipelineOp& o = prog[i];
    if (o.kind == PassKind::backward || o.kind == PassKind::weight_grad) last_grads[o.chunk] = i;
    if (o.forward() && first_f[o.chunk] < 0) {
      first_f[o.chunk] = i;
      chunk_order.push_back(o.chunk);
    }
  }

  // ZeRO-1/2: the updated parameters are all-gathered by bucket in the order the
  // forwards need them; each layer's first forward waits for the bucket holding its last byte.
  std::vector<int> param_gather(n, -1);
  if (bucketed && costs_.zero >= 1) {
    for (int c : chunk_order) {
      Bucketizer bk(costs_.gather_bucket_bytes);  // 0: one gather per layer (flushed below)
      std::vector<int> waiting;
      auto emit = [&](double bytes) {
        const int id = add_dp(s, Stream::dp_gather, EventKind::dp_param_gather, bytes, false, -1, c, -1);
        for (int li : waiting) param_gather[li] = id;
        waiting.clear();
      };
      for (int jl = 0; jl < chunk_layers(s, c); ++jl) {
        const int li = chunk_first(s, c) + jl;
        double bytes = sc.layers[li].trainable_weight_bytes;
        if (s == 0 && c == 0 && jl == 0) bytes += sc.embedding_trainable_weight_bytes;
        if (virtual_stage(s, c) == last_virtual && jl == chunk_layers(s, c) - 1) bytes += sc.head_trainable_weight_bytes;
        if (bytes <= 0) continue;
        waiting.push_back(li);
        bk.add(bytes, emit);  // emit() hands the waiting layers the bucket and clears them
        if (costs_.gather_bucket_bytes <= 0) bk.flush(emit);
        if (!bk.empty() && (waiting.empty() || waiting.back() != li)) waiting.push_back(li);  // its tail is still pending
      }
      bk.flush(emit);
    }
  }

  // ZeRO-3: the all-gather of layer jl of chunk c before a pass over it (the embedding
  // rides with the pipeline's first layer, the head with its last); -1 without ZeRO-3.
  auto zero3_layer_gather = [&](int c, int jl, int mb) {
    if (!zero3) return -1;
    const LayerCost& L = sc.layers[chunk_first(s, c) + jl];
    double bytes = L.weight_bytes;
    if (s == 0 && c == 0 && jl == 0) bytes += sc.embedding_weight_bytes;
    if (virtual_stage(s, c) == last_virtual && jl == chunk_layers(s, c) - 1) bytes += sc.head_weight_bytes;
    return zero3_gather(s, bytes, mb, c, L.global_layer);
  };
  // DualPipeV's F&B pairs (a forward followed by a whole backward: steps 4 and 5 of its
  // order) overlap each one's EP all-to-all with the other's compute (DeepSeek-V3 report,
  // Sec. 3.2.1): their all-to-alls do not hold up their own next layer; the pair's end waits
  // for all of them, so the overlap is bounded by the pair's compute.
  auto in_pair = [&](int i) {
    if (plan_.schedule != Schedule::dualpipev) return false;
    const int n_ops = static_cast<int>(prog.size());
    const bool first = prog[i].kind == PassKind::forward && i + 1 < n_ops && prog[i + 1].kind == PassKind::backward;
    const bool second = prog[i].kind == PassKind::backward && i > 0 && prog[i - 1].kind == PassKind::forward;
    return first || second;
  };
  std::vector<int> pair_hidden;  // the current pair's EP all-to-alls
  int prev_send = -1, prev_last = -1;
  for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
    const PipelineOp& o = prog[i];
    const int c = o.chunk, mb = o.microbatch;
    const int k = virtual_stage(s, c);
    const bool paired = in_pair(i);
    std::vector<int>* hidden = paired ? &pair_hidden : nullptr;
    const size_t hidden_before = pair_hidden.size();
    OpRef ref;
    int prev = -1;
    auto first_compute = [&](int id) {
      if (ref.first < 0) {
        ref.first = id;
        engine_.depend(prev_last, id);  // the previous pass's trailing blocking collective
        // (A pair's backward runs beside its forward's send.)
        if (blocking_p2p() && !(paired && o.kind == PassKind::backward)) engine_.depend(prev_send, id);
      }
    };
    // A pipeline send to the stage holding virtual stage `to`; none when this stage holds
    // it (a V's turn: the chunk hands its output to its own other chunk) -- but under
    // DualPipe, where the turn is the middle ranks' hand-over (pp/2-1 to pp/2, dualpipe.py
    // is_middle_rank), a send to the mirror this stage stands for.
    auto send_to = [&](int to, Stream stream) {
      const int peer = placement_[to].first;
      if (peer == s && !dualpipe_) return -1;
      const int id = add_comm(s, stream, EventKind::pp_send, costs_.p2p, mb, c, -1, costs_.p2p_bytes, peer);
      engine_.depend(ref.last, id);
      return id;
    };
    if (o.forward()) {
      for (int jl = 0; jl < chunk_layers(s, c); ++jl) {
        const int li = chunk_first(s, c) + jl;
        const LayerCost& L = sc.layers[li];
        const int gather = zero3_layer_gather(c, jl, mb);
        const int t = add_compute(s, EventKind::forward, L.compute[0], mb, c, L.global_layer);
        first_compute(t);
        engine_.depend(prev, t);
        engine_.depend(gather, t);
        if (i == first_f[c]) engine_.depend(param_gather[li], t);
        if (zero3) visits_.push_back(t);
        prev = add_layer_comm(s, L, Pass::forward, t, mb, c, hidden);
      }
      if (chunk_layers(s, c) == 0) {
        // A chunk of no layer (the embedding's or the loss's alone, plan_check.h
        // pipeline_split_ok): an instant pass, so that the chunk's pass has a first task
        // and its hand-over its place in the order.
        const int t = add_compute(s, EventKind::forward, 0, mb, c, -1);
        first_compute(t);
        engine_.depend(prev, t);
        prev = t;
      }
      if (k == last_virtual) {
        const int t = add_compute(s, EventKind::head_forward, sc.head_forward, mb, c, -1);
        engine_.depend(prev, t);
        prev = t;
      }
      ref.last = prev;
      if (k < last_virtual) ref.send = send_to(k + 1, Stream::pp_send_next);
      // Its output leaves after its last all-to-all (handed over in place at a V's turn).
      if (pair_hidden.size() > hidden_before && ref.send < 0 && k < last_virtual) {
        ref.send = add_comm(s, Stream::pp_send_next, EventKind::pp_send, CommCost{}, mb, c, -1, 0, s);
        engine_.depend(ref.last, ref.send);
      }
      for (size_t h = hidden_before; h < pair_hidden.size(); ++h) engine_.depend(pair_hidden[h], ref.send);
    } else {
      // A backward produces the weight gradients (its whole time), a split backward's B
      // none (its time less the W's GEMMs; the LM head's backward stays whole in the B, as
      // the planner's bubble counts it) and its W all of them.
      const bool input_only = o.kind == PassKind::input_grad, weights_only = o.kind == PassKind::weight_grad;
      const bool reduce_now = bucketed && i == last_grads[c];
      // Gradient buckets of the last gradient-producing pass of a chunk: a bucket is
      // reduced as soon as the pass has produced its last byte. A pass producing gradients
      // is split at the bucket boundaries, its time spread evenly over the bytes it produces.
      double pending = 0;
      int producer = -1;
      auto emit = [&](double bytes) {
        const int id = add_dp(s, Stream::dp_reduce, EventKind::dp_grad_sync, bytes, costs_.zero == 0, -1, c, -1);
        engine_.depend(producer, id);
      };
      auto producing_pass = [&](EventKind kind, double seconds, double grads, int layer) {
        const double cap = costs_.bucket_bytes > 0 ? costs_.bucket_bytes : kInf;
        double done = 0;
        auto segment = [&](double upto) {
          const double share = grads > 0 ? (upto - done) / grads : 1.0;
          const int t = add_compute(s, kind, seconds * share, mb, c, layer);
          first_compute(t);
          engine_.depend(prev, t);
          prev = producer = t;
          done = upto;
          return t;
        };
        if (input_only) grads = 0;
        if (!reduce_now || grads <= 0) return segment(grads);
        if (costs_.bucket_bytes <= 0) {  // one reduction per producing pass (ZeRO-2: per layer)
          const int t = segment(grads);
          emit(grads);
          return t;
        }
        int t = -1;
        while (pending + (grads - done) >= cap) {
          t = segment(done + (cap - pending));
          emit(cap);
          pending = 0;
        }
        if (done < grads || t < 0) {
          pending += grads - done;
          t = segment(grads);
        }
        return t;
      };
      if (k == last_virtual) {
        const double head_grads = sc.head_grad_bytes * (zero3 ? 0 : 1);
        if (weights_only) producing_pass(EventKind::weight_grad, 0, head_grads, -1);  // the head's gradients, made by its B
        else producing_pass(EventKind::head_backward, sc.head_backward, head_grads, -1);
      }
      if (chunk_layers(s, c) == 0 && k != last_virtual)
        producing_pass(weights_only ? EventKind::weight_grad : EventKind::backward, 0, 0, -1);  // the embedding's chunk alone
      for (int jl = chunk_layers(s, c) - 1; jl >= 0; --jl) {
        const int li = chunk_first(s, c) + jl;
        const LayerCost& L = sc.layers[li];
        auto reduce_scatter = [&](int after) {  // ZeRO-3: after the pass that makes the layer's gradients
          if (!zero3) return;
          double grads = L.grad_bytes;
          if (s == 0 && c == 0 && jl == 0) grads += sc.embedding_grad_bytes;
          if (k == last_virtual && jl == chunk_layers(s, c) - 1) grads += sc.head_grad_bytes;
          if (grads > 0) {
            const int rs = add_dp(s, Stream::dp_reduce, EventKind::dp_grad_sync, grads, false, mb, c, L.global_layer);
            engine_.depend(after, rs);
          }
        };
        if (weights_only) {
          reduce_scatter(producing_pass(EventKind::weight_grad, L.weight_grad, zero3 ? 0 : L.grad_bytes, L.global_layer));
          continue;
        }
        const int gather = zero3_layer_gather(c, jl, mb);
        const bool recompute = L.compute[2] > 0 || L.comm[0][2].total() > 0 || L.comm[1][2].total() > 0 || L.comm[2][2].total() > 0;
        int visit = -1;
        if (recompute) {
          const int t = add_compute(s, EventKind::recompute, L.compute[2], mb, c, L.global_layer);
          first_compute(t);
          engine_.depend(prev, t);
          engine_.depend(gather, t);
          visit = t;
          prev = add_layer_comm(s, L, Pass::recompute, t, mb, c, hidden);
        }
        const size_t before = engine_.tasks().size();
        const double seconds = input_only ? L.compute[1] - L.weight_grad : L.compute[1];
        const int b = producing_pass(EventKind::backward, seconds, zero3 ? 0 : L.grad_bytes, L.global_layer);
        engine_.depend(gather, static_cast<int>(before));  // the pass's first segment
        if (visit < 0) visit = static_cast<int>(before);
        if (zero3) visits_.push_back(visit);
        prev = add_layer_comm(s, L, Pass::backward, b, mb, c, hidden);
        if (!input_only) reduce_scatter(b);
      }
      if (reduce_now) {
        // The embedding's gradients come last, all at once, then the partial bucket.
        if (s == 0 && c == 0) pending += sc.embedding_grad_bytes;
        const double cap = costs_.bucket_bytes > 0 ? costs_.bucket_bytes : pending;
        while (pending > 0 && pending >= cap) {
          emit(cap);
          pending -= cap;
        }
        if (pending > 0) emit(pending);
      }
      if (paired && o.kind == PassKind::backward) {  // the pair's end: every all-to-all of both done
        const int join = add_compute(s, EventKind::ep_comm, 0, mb, c, -1);
        engine_.depend(prev, join);
        for (int h : pair_hidden) engine_.depend(h, join);
        pair_hidden.clear();
        prev = join;
      }
      ref.last = prev;
      if (k > 0 && !weights_only) ref.send = send_to(k - 1, Stream::pp_send_prev);
    }
    ops_[s][slot(o.kind)][static_cast<size_t>(c) * m_ + mb] = ref;
    if (o.kind != PassKind::weight_grad) prev_send = ref.send;  // a W sends nothing; the op after it still waits for the B's send
    prev_last = ref.last;
  }
  last_[s] = prev_last;
}

Status StepBuilder::build_and_run() {
  ops_.resize(pp_);
  compute_.resize(pp_);
  dp_.resize(pp_);
  last_.assign(pp_, -1);
  placement_.assign(static_cast<size_t>(pp_) * vpp_, {-1, -1});
  for (int s = 0; s < pp_; ++s)
    for (int c = 0; c < vpp_; ++c) placement_[virtual_stage(s, c)] = {s, c};
  size_t layers = 0;
  for (const StageCost& sc : costs_.stages) layers += sc.layers.size();
  chunk_first_.assign(static_cast<size_t>(pp_), std::vector<int>(static_cast<size_t>(vpp_) + 1, 0));
  for (int s = 0; s < pp_; ++s)
    for (int c = 0; c < vpp_; ++c)
      chunk_first_[s][c + 1] = chunk_first_[s][c] + virtual_stage_layers(static_cast<int>(layers), plan_, virtual_stage(s, c));
  engine_.reserve(static_cast<size_t>(m_) * layers * 7 + static_cast<size_t>(pp_) * m_ * vpp_ * 4 + 1024);
  for (int s = 0; s < pp_; ++s)
    for (auto& slot : ops_[s]) slot.assign(static_cast<size_t>(m_) * vpp_, OpRef{});
  for (int s = 0; s < pp_; ++s) build_stage(s);

  // Between stages: a forward needs the previous virtual stage's activation, a backward
  // (or a B) the next virtual stage's gradient -- sent, or handed over on the same stage.
  auto ready = [](const OpRef& r) { return r.send >= 0 ? r.send : r.last; };
  const int last_virtual = pp_ * vpp_ - 1;
  for (int s = 0; s < pp_; ++s) {
    for (int c = 0; c < vpp_; ++c) {
      const int k = virtual_stage(s, c);
      for (int mb = 0; mb < m_; ++mb) {
        const auto [fwd_stage, fwd_chunk] = k > 0 ? placement_[k - 1] : std::pair{-1, -1};
        const auto [bwd_stage, bwd_chunk] = k < last_virtual ? placement_[k + 1] : std::pair{-1, -1};
        if (k > 0) engine_.depend(ready(op(fwd_stage, PassKind::forward, fwd_chunk, mb)), op(s, PassKind::forward, c, mb).first);
        if (k < last_virtual)
          engine_.depend(ready(op(bwd_stage, PassKind::backward, bwd_chunk, mb)), op(s, PassKind::backward, c, mb).first);
      }
    }
  }

  // Every stage's gradients reduced -> global gradient norm -> optimizer step.
  EngineTask bar;
  bar.kind = EventKind::barrier;
  barrier_ = engine_.add(bar);
  for (int s = 0; s < pp_; ++s) {
    engine_.depend(last_[s], barrier_);
    for (int id : dp_[s]) engine_.depend(id, barrier_);
  }
  for (int s = 0; s < pp_; ++s) {
    const int t = add_compute(s, EventKind::optimizer, costs_.stages[s].optimizer, -1, -1, -1);
    engine_.depend(barrier_, t);
  }
  return engine_.run(opt_.link_sharing);
}

// ---------------------------------------------------------------- analysis

// Splits each stage's compute-stream timeline into what it ran and what it waited for.
void account_time(const StepBuilder& b, const SimCosts& costs, double total, int s, StageResult* r) {
  const auto& tasks = b.engine().tasks();
  SimBreakdown& bd = r->breakdown;
  double dp_done = 0;
  for (int id : b.dp_tasks(s)) dp_done = std::max(dp_done, tasks[id].end);
  double prev_end = 0;
  for (int id : b.compute_tasks(s)) {
    const EngineTask& t = tasks[id];
    const double gap = t.start - prev_end;
    if (gap > 0) {
      const EngineTask* w = t.binding >= 0 ? &tasks[t.binding] : nullptr;
      const EventKind wk = w ? w->kind : EventKind::barrier;
      switch (wk) {
        case EventKind::tp_comm: bd.tp_comm += gap; break;
        case EventKind::cp_comm: bd.cp_comm += gap; break;
        case EventKind::ep_comm: bd.ep_comm += gap; break;
        case EventKind::dp_grad_sync:
        case EventKind::dp_param_gather: bd.dp_comm += gap; break;
        case EventKind::pp_send: {
          // In flight from w->start: that part of the wait is the transfer, before it the sender's work.
          const double in_flight = std::max(0.0, t.start - std::max(prev_end, w->start));
          bd.pp_comm += in_flight;
          bd.bubble += gap - in_flight;
          break;
        }
        case EventKind::barrier: {
          // Own trailing blocking collective, then own gradient reduction, then the others.
          const EngineTask& last = tasks[b.last_task(s)];
          const double trailing = std::clamp(last.end - prev_end, 0.0, gap);
          if (last.kind == EventKind::tp_comm) bd.tp_comm += trailing;
          if (last.kind == EventKind::cp_comm) bd.cp_comm += trailing;
          if (last.kind == EventKind::ep_comm) bd.ep_comm += trailing;
          const double own = w ? std::clamp(dp_done - prev_end - trailing, 0.0, gap - trailing) : 0.0;
          bd.dp_comm += own;
          bd.bubble += gap - trailing - own;
          break;
        }
        default: bd.bubble += gap; break;
      }
    }
    const double d = t.end - t.start;
    switch (t.kind) {
      case EventKind::forward:
      case EventKind::backward:
      case EventKind::weight_grad:
      case EventKind::head_forward:
      case EventKind::head_backward: bd.compute += d; break;
      case EventKind::recompute: bd.recompute += d; break;
      case EventKind::optimizer: (costs.stages[s].optimizer_offloaded ? bd.offload : bd.optimizer) += d; break;
      default: break;
    }
    if (t.kind != EventKind::optimizer) r->compute_end = t.end;
    prev_end = t.end;
  }
  bd.bubble += std::max(0.0, total - prev_end);
  bd.total = total;
  r->busy = bd.compute + bd.recompute;
}

// Memory over the step: the planner's events of each pass (pass_memory_events, and
// split_backward_memory_events for a B and its W) placed at the pass's start or end as
// scheduled, frees first at equal times, over what the stage holds all step.
void account_memory(const StepBuilder& b, const SimCosts& costs, int s, bool record, StageResult* r) {
  const auto& tasks = b.engine().tasks();
  const StageCost& sc = costs.stages[s];
  const StageMemoryProgram& mp = sc.memory;
  const int pp = static_cast<int>(costs.stages.size());
  const StageProgram& prog = b.programs()[s];
  const int vpp = b.vpp();
  const int last_virtual = pp * vpp - 1;

  // Per chunk, what one micro-batch's pass keeps and needs: its layers' activations, the
  // largest forward transient and backward working set, and (last virtual stage) the
  // logits and the final-norm + head inputs; under a split backward, the output gradients
  // its W reads. Activation offload: the stage's first k layers keep theirs in host
  // memory, the GPU one of them (PassMemory::offload_resident: not at the head's moments).
  std::vector<PassMemory> chunk(vpp);
  const double offload_buffer = sc.activation_offload_layers > 0 ? sc.layers[0].activation_bytes : 0;
  for (int c = 0; c < vpp; ++c) {
    PassMemory& pm = chunk[c];
    bool grads = false;
    double remat_mlp = 0;  // the largest layer's re-materialised bytes that are live at its MLP's backward
    for (int jl = 0; jl < b.chunk_layers(s, c); ++jl) {
      const int layer = b.chunk_first(s, c) + jl;
      const LayerCost& L = sc.layers[layer];
      pm.weight_grad_buffer += L.weight_grad_buffer_bytes;
      if (layer >= sc.activation_offload_layers) pm.kept += L.activation_bytes;
      pm.transient = std::max(pm.transient, L.forward_transient_bytes);
      if (L.grad_flows) {
        pm.working = std::max(pm.working, L.working_bytes);
        remat_mlp = std::max(remat_mlp, L.working_bytes - L.attention_working_bytes);
        grads = true;
      }
    }
    if (c == 0) pm.kept += sc.first_chunk_extra_bytes;
    if (b.virtual_stage(s, c) == last_virtual) {
      pm.weight_grad_buffer += sc.head_weight_grad_bytes;  // the logits' gradient, for the head's W
      pm.kept += sc.last_chunk_extra_bytes;
      pm.head_set = sc.last_chunk_extra_bytes;
      pm.head_input = sc.head_input_bytes;
      pm.logits = sc.logits_bytes;
      pm.offload_resident = offload_buffer;
    }
    if (grads) {  // the backward's larger moment, with what is re-materialised there
      const BackwardMoment moment = backward_moment(sc.backward_sides, pm.working, remat_mlp);
      pm.working = moment.remat + moment.grads;
    }
  }
  std::vector<PassMemoryEvents> events(vpp);
  std::vector<SplitBackwardMemoryEvents> split(vpp);
  for (int c = 0; c < vpp; ++c) {
    chunk[c].split_backward = true;
    split[c] = split_backward_memory_events(pass_memory_events(chunk[c], mp));
    chunk[c].split_backward = false;  // a whole backward leaves no W
    chunk[c].weight_grad_buffer = 0;
    events[c] = pass_memory_events(chunk[c], mp);
  }

  struct Delta {
    double time;
    bool frees;  // frees come first at equal times
    int op;      // program index (-1: optimizer)
    const MemoryEvent* event;
  };
  std::vector<Delta> deltas;
  deltas.reserve(prog.size() * 4 + 2);
  for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
    const PipelineOp& o = prog[i];
    const OpRef& ref = b.op(s, o.kind, o.chunk, o.microbatch);
    const double start = tasks[ref.first].start, end = tasks[ref.last].end;
    const PassMemoryEvents& ev = events[o.chunk];
    const SplitBackwardMemoryEvents& sp = split[o.chunk];
    const MemoryEvent* list = ev.backward.data();
    int count = ev.backward_count;
    if (o.kind == PassKind::forward) list = ev.forward.data(), count = ev.forward_count;
    if (o.kind == PassKind::input_grad) list = sp.input_grad.data(), count = sp.input_grad_count;
    if (o.kind == PassKind::weight_grad) list = &sp.weight_grad_end, count = 1;
    for (int k = 0; k < count; ++k)
      deltas.push_back({at_pass_end(list[k].moment) ? end : start, frees_first(list[k].moment), i, &list[k]});
  }
  const EngineTask& optim = tasks[b.compute_tasks(s).back()];
  const std::array<MemoryEvent, 2> optimizer = optimizer_memory_events(mp);
  deltas.push_back({optim.start, frees_first(optimizer[0].moment), -1, &optimizer[0]});
  deltas.push_back({optim.end, frees_first(optimizer[1].moment), -1, &optimizer[1]});
  std::stable_sort(deltas.begin(), deltas.end(),
                   [](const Delta& x, const Delta& y) { return x.time != y.time ? x.time < y.time : x.frees > y.frees; });

  std::array<double, kMemoryItems> cur = mp.held;
  cur[static_cast<int>(MemoryItem::activations)] += offload_buffer;
  std::vector<int> held(vpp, 0);
  int64_t held_total = 0;
  r->peak_bytes = -1;
  if (record) r->memory.reserve(deltas.size() + 1);
  for (size_t i = 0; i < deltas.size(); ++i) {
    const Delta& d = deltas[i];
    apply(d.event->change, cur);
    // The in-flight count changes at a forward's start and a backward's end.
    if (d.event->moment == MemoryMoment::forward_start) {
      ++held[prog[d.op].chunk];
      ++held_total;
    } else if (d.event->moment == MemoryMoment::weight_grad_end ||
               (d.event->moment == MemoryMoment::backward_end && prog[d.op].kind == PassKind::backward)) {
      --held[prog[d.op].chunk];
      --held_total;
    }
    r->max_inflight_chunks = std::max(r->max_inflight_chunks, held_total);
    std::array<double, kMemoryItems> items = cur;
    const double total = with_fragmentation(items, mp.fragmentation_fraction);
    if (total > r->peak_bytes) {
      r->peak_bytes = total;
      r->peak_time = d.time;
      r->peak_items = items;
      r->peak_inflight = static_cast<double>(held_total) / vpp;
      if (d.op < 0) {
        r->peak_phase = Phase::optimizer;
        r->peak_microbatch = r->peak_chunk = -1;
      } else {
        r->peak_phase = prog[d.op].forward() ? Phase::forward : Phase::backward;
        r->peak_microbatch = prog[d.op].microbatch;
        r->peak_chunk = prog[d.op].chunk;
      }
    }
    if (record && (i + 1 == deltas.size() || deltas[i + 1].time != d.time)) {
      if (r->memory.empty()) {
        std::array<double, kMemoryItems> start = mp.held;
        r->memory.push_back({0, with_fragmentation(start, mp.fragmentation_fraction)});
      }
      r->memory.push_back({d.time, total});
    }
  }
}

void record_events(const StepBuilder& b, SimResult* res) {
  const auto& tasks = b.engine().tasks();
  res->events.reserve(tasks.size() + tasks.size() / 8);
  for (const EngineTask& t : tasks) {
    if (t.stage < 0 || t.kind == EventKind::barrier || !(t.end > t.start)) continue;
    SimEvent e;
    e.stage = t.stage;
    e.stream = t.stream;
    e.kind = t.kind;
    e.microbatch = t.microbatch;
    e.chunk = t.chunk;
    e.layer = t.layer;
    e.peer = t.peer;
    e.bytes = t.bytes;
    e.start = t.start;
    e.end = t.end;
    res->events.push_back(e);
    if (t.kind == EventKind::pp_send) {  // the receiver's view of the same transfer
      SimEvent r = e;
      r.stage = t.peer;
      r.peer = t.stage;
      r.kind = EventKind::pp_recv;
      r.stream = t.stream == Stream::pp_send_next ? Stream::pp_recv_prev : Stream::pp_recv_next;
      res->events.push_back(r);
    }
  }
}

Status check_costs(const ModelSpec& m, const ParallelPlan& p, const SimCosts& costs) {
  if (static_cast<int>(costs.stages.size()) != p.pp) {
    return Status::bad_input("simulate_step: costs have " + std::to_string(costs.stages.size()) + " stages, the plan " +
                             std::to_string(p.pp));
  }
  for (int s = 0; s < p.pp; ++s) {
    const int n = static_cast<int>(costs.stages[s].layers.size());
    if (n != pp_stage_layers(m.layers, p, s) || n == 0) {
      return Status::bad_input("simulate_step: stage " + std::to_string(s) + " costs have " + std::to_string(n) +
                               " layers, expected " + std::to_string(pp_stage_layers(m.layers, p, s)));
    }
  }
  return Status::ok();
}

}  // namespace

int SimResult::worst_memory_stage() const {
  int w = 0;
  for (int s = 1; s < static_cast<int>(stages.size()); ++s)
    if (stages[s].peak_bytes > stages[w].peak_bytes) w = s;
  return w;
}

Result<SimResult> simulate_step(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& plan,
                                const SimOptions& opt) {
  const Status ok = check_plan_status(m, c, j, plan, plan.world_size(), "simulate_step");
  if (!ok) return ok;
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);  // DualPipe: its rank-equivalent DualPipeV plan
  return simulate_step(m, c, j, plan, default_costs(m, c, j, p, opt.efficiency, opt.memory), opt);
}

Result<SimResult> simulate_step(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& plan,
                                const SimCosts& costs, const SimOptions& opt) {
  Status ok = check_plan_status(m, c, j, plan, plan.world_size(), "simulate_step");
  if (!ok) return ok;
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);  // DualPipe: its rank-equivalent DualPipeV plan
  ok = check_costs(m, p, costs);
  if (!ok) return ok;

  SimResult res;
  res.schedule = effective_schedule(p);
  res.dualpipe = plan.schedule == Schedule::dualpipe;
  res.pp = p.pp;
  res.vpp = p.vpp;
  res.microbatches = microbatches_per_step(j, p);
  res.ranks_per_stage = p.dp * p.tp * p.cp;

  StepBuilder b(costs, p, res.microbatches, opt, res.dualpipe);
  ok = b.build_and_run();
  if (!ok) return ok;

  const auto& tasks = b.engine().tasks();
  for (int s = 0; s < p.pp; ++s) res.total = std::max(res.total, tasks[b.compute_tasks(s).back()].end);
  res.stages.resize(p.pp);
  double most_work = -1;
  for (int s = 0; s < p.pp; ++s) {
    StageResult& r = res.stages[s];
    r.stage = s;
    r.layers = static_cast<int>(costs.stages[s].layers.size());
    account_time(b, costs, res.total, s, &r);
    account_memory(b, costs, s, opt.record_memory, &r);
    r.analytic = estimate_stage_memory(m, c, j, p, s, opt.memory);
    const double work = r.busy + r.breakdown.tp_comm + r.breakdown.cp_comm + r.breakdown.ep_comm;
    if (work > most_work) {
      most_work = work;
      res.critical_stage = s;
    }
  }
  res.breakdown = res.stages[res.critical_stage].breakdown;
  res.bubble_fraction = res.total > 0 ? res.breakdown.bubble / res.total : 0;
  res.analytic = estimate_time(m, c, j, plan, opt.efficiency);
  const double tokens = static_cast<double>(j.global_batch) * static_cast<double>(j.seq_len);
  res.tokens_per_s = res.total > 0 ? tokens / res.total : 0;
  const double peak = c.gpu.peak(compute_dtype(j, c.gpu));
  res.mfu = res.total > 0 && peak > 0 ? res.analytic.model_flops / (res.total * p.world_size() * peak) : 0;
  if (opt.record_events) record_events(b, &res);
  return res;
}

std::string event_name(const SimEvent& e) {
  char buf[96];
  const char* pass = "";
  switch (e.kind) {
    case EventKind::forward: pass = "F"; break;
    case EventKind::backward: pass = "B"; break;
    case EventKind::recompute: pass = "R"; break;
    case EventKind::weight_grad: pass = "W"; break;
    default: break;
  }
  const double mib = e.bytes / (1024.0 * 1024.0);
  switch (e.kind) {
    case EventKind::forward:
    case EventKind::backward:
    case EventKind::recompute:
    case EventKind::weight_grad:
      std::snprintf(buf, sizeof buf, "%s mb%d c%d L%d", pass, e.microbatch, e.chunk, e.layer);
      break;
    case EventKind::head_forward: std::snprintf(buf, sizeof buf, "head F mb%d", e.microbatch); break;
    case EventKind::head_backward: std::snprintf(buf, sizeof buf, "head B mb%d", e.microbatch); break;
    case EventKind::tp_comm:
    case EventKind::cp_comm:
    case EventKind::ep_comm: std::snprintf(buf, sizeof buf, "%s mb%d L%d", to_string(e.kind), e.microbatch, e.layer); break;
    case EventKind::pp_send:
      std::snprintf(buf, sizeof buf, "send %s mb%d c%d -> s%d", e.stream == Stream::pp_send_next ? "act" : "grad", e.microbatch,
                    e.chunk, e.peer);
      break;
    case EventKind::pp_recv:
      std::snprintf(buf, sizeof buf, "recv %s mb%d <- s%d", e.stream == Stream::pp_recv_prev ? "act" : "grad", e.microbatch, e.peer);
      break;
    case EventKind::dp_grad_sync: std::snprintf(buf, sizeof buf, "grad sync %.1f MiB", mib); break;
    case EventKind::dp_param_gather: std::snprintf(buf, sizeof buf, "param gather %.1f MiB", mib); break;
    case EventKind::optimizer: std::snprintf(buf, sizeof buf, "optimizer"); break;
    default: std::snprintf(buf, sizeof buf, "%s", to_string(e.kind)); break;
  }
  return buf;
}

}  // namespace llmplan
