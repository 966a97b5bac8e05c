// Jobs, plans and costs the simulator tests share; the models and clusters are in
// tests/model_fixtures.h.
#pragma once

#include "planner/spec/specs.h"
#include "simulator/sim_costs.h"
#include "tests/model_fixtures.h"

namespace llmplan::testing {

inline TrainingJob job(int64_t seq_len, int64_t global_batch) {
  TrainingJob j;
  j.seq_len = seq_len;
  j.global_batch = global_batch;
  return j;
}

inline ParallelPlan plan(int dp, int tp, int pp, int vpp, Schedule sched, int micro_batch, int64_t global_batch) {
  ParallelPlan p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.vpp = vpp;
  p.sp = tp > 1;
  p.schedule = sched;
  p.micro_batch = micro_batch;
  p.grad_accum = static_cast<int>(global_batch / (static_cast<int64_t>(micro_batch) * dp));
  return p;
}

// Costs with every layer taking t_f forward and t_b backward (of which t_w the weight
// gradient, a split backward's W) and nothing else: no communication, no LM head, no
// optimizer step.
inline void make_uniform(SimCosts* c, double t_f, double t_b, double t_w = 0) {
  for (StageCost& st : c->stages) {
    for (LayerCost& l : st.layers) {
      l.compute = {t_f, t_b, 0};
      l.weight_grad = t_w;
      l.comm = {};
    }
    st.head_forward = st.head_backward = 0;
    st.optimizer = 0;
  }
  c->p2p = {};
  c->dp_group = 1;
}

}  // namespace llmplan::testing
