#include "simulator/sim_costs.h"

#include <algorithm>

#include "planner/cost/plan_check.h"
#include "planner/spec/recipe.h"

namespace llmplan {

namespace {

LinkTier group_tier(const ClusterSpec& c, const ParallelPlan& p, Group g) { return group_link(c, p, g).tier; }

CommCost split(double total, double latency, LinkTier tier) {
  CommCost cc;
  cc.latency = std::min(latency, total);
  cc.transfer = std::max(0.0, total - cc.latency);
  cc.tier = tier;
  return cc;
}

// The per-pass split of the in-layer collectives and of their latency parts (planner
// layer_comm_by_pass).
void split_layer_comm(const LayerTimes& lt, LayerRecompute policy, bool grad_flows, LinkTier tp_tier, LinkTier cp_tier,
                      LinkTier ep_tier, LayerCost* lc) {
  const LayerCommByPass total = layer_comm_by_pass(lt, policy, grad_flows);
  auto& tp = lc->comm[static_cast<int>(LayerComm::tp)];
  auto& ep = lc->comm[static_cast<int>(LayerComm::ep)];
  auto& cp = lc->comm[static_cast<int>(LayerComm::cp)];
  for (int pass = 0; pass < kPasses; ++pass) {
    tp[pass] = split(total.tp[pass], total.tp_latency[pass], tp_tier);
    ep[pass] = split(total.ep[pass], total.ep_latency[pass], ep_tier);
    cp[pass] = split(total.cp[pass], total.cp[pass], cp_tier);  // exposed remainder: not a bandwidth term any more
  }
}

}  // namespace

SimCosts default_costs(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& plan, const Efficiency& e,
                       const MemoryOptions& mem) {
  ParallelPlan dual;
  const ParallelPlan& p = cost_plan(plan, &dual);  // DualPipe: its rank-equivalent DualPipeV plan's stages
  SimCosts sc;
  sc.efficiency = e;
  sc.zero = p.zero;
  // The planner's DP/ZeRO collectives: the DP x CP group's link, its bucket sizes and the
  // bytes each parameter moves (the volumes follow from the layers' parameters below).
  const DpStep dp = dp_step(c, j, p, e, 0, 0, 0);
  sc.dp_group = dp.group;
  sc.dp_link = dp.link;
  sc.dp_tier = dp.link.tier;
  sc.bucket_bytes = dp.grad_bucket_bytes;
  sc.gather_bucket_bytes = dp.gather_bucket_bytes;
  if (p.zero == 3 && p.offload_params) sc.param_fetch_bandwidth = c.host_bandwidth;

  const LinkTier tp_tier = group_tier(c, p, Group::tp), cp_tier = group_tier(c, p, Group::cp), ep_tier = group_tier(c, p, Group::ep);

  if (p.pp > 1) {
    const double bytes = pp_boundary_bytes(m, j, p);
    const Link l = group_link(c, p, Group::pp);
    sc.p2p_bytes = bytes;
    sc.p2p = split(p2p_time(bytes, l, e), p2p_latency(bytes, l), l.tier);
  }

  const BytesPerParam bpp = bytes_per_param(j);
  const uint32_t lora_mask = j.mode == TrainMode::lora ? lora_target_mask(j.lora, m.family) : 0;
  const ParamCounts pc = count_params(m, p.tp, p.pp, p.ep, lora_mask, j.lora.rank);
  const int frozen_layers = j.frozen_layer_count(m.layers);
  const bool embedding_trainable = j.mode != TrainMode::lora && frozen_layers == 0;
  const HeadTimes head = head_times(m, c, j, p, e);

  // Per-layer costs for the kinds of layer a model has: [layer kind][frozen][policy], computed once.
  struct Kind {
    bool done = false;
    LayerTimes lt;
    double act = 0, working = 0, attention_working = 0, transient = 0, wgrad_buffer = 0;
    bool grad_flows = true, base_trainable = true;
  } kinds[kLayerKinds][2][3];
  auto kind = [&](int global_layer, LayerRecompute policy) -> const Kind& {
    const bool frozen = global_layer < frozen_layers;
    Kind& kd = kinds[layer_kind(m, global_layer)][frozen ? 1 : 0][static_cast<int>(policy)];
    if (!kd.done) {
      LayerContext lc = layer_context(m, j, p, global_layer);
      kd.lt = layer_times(m, c, j, p, lc, policy, e);
      // The bytes under the stack's conventions, as the memory model counts them.
      apply_memory_conventions(j, c.gpu, mem, &lc);
      const LayerMemoryBytes bytes = layer_memory_bytes(m, lc, policy, mem);
      kd.act = bytes.kept;
      kd.working = bytes.rematerialised;
      kd.attention_working = bytes.rematerialised_attention;
      kd.transient = bytes.transient;
      kd.wgrad_buffer = weight_grad_buffer_bytes(m, lc);
      kd.grad_flows = lc.grad_flows;
      kd.base_trainable = lc.base_trainable;
      kd.done = true;
    }
    return kd;
  };

  sc.stages.resize(p.pp);
  for (int s = 0; s < p.pp; ++s) {
    StageCost& st = sc.stages[s];
    const int n = pp_stage_layers(m.layers, p, s);
    st.layers.resize(n);
    for (int i = 0; i < n; ++i) {
      const int global = stage_layer_global_index(m.layers, p, s, i);
      const LayerRecompute policy = layer_recompute(p, i, n);
      const Kind& kd = kind(global, policy);
      LayerCost& lc = st.layers[i];
      lc.global_layer = global;
      lc.compute = {kd.lt.forward, kd.lt.backward, kd.lt.recompute};
      lc.weight_grad = kd.lt.weight_grad;
      split_layer_comm(kd.lt, policy, kd.grad_flows, tp_tier, cp_tier, ep_tier, &lc);
      const bool trains = j.mode == TrainMode::lora ? global >= frozen_layers : kd.base_trainable;
      const LayerParams lp = pc.layer(kind_dense_mlp(layer_kind(m, global)));
      const double trainable_params = j.mode == TrainMode::lora ? (trains ? lp.lora_per_layer_rank : 0) : (trains ? lp.per_layer_rank : 0);
      lc.grad_bytes = trainable_params * dp.grad_bytes_per_param;
      lc.weight_bytes = lp.per_layer_rank * bpp.weights;
      lc.trainable_weight_bytes = trainable_params * bpp.weights;
      lc.activation_bytes = kd.act;
      lc.working_bytes = kd.working;
      lc.attention_working_bytes = kd.attention_working;
      lc.forward_transient_bytes = kd.transient;
      lc.weight_grad_buffer_bytes = kd.wgrad_buffer;
      lc.grad_flows = kd.grad_flows;
    }
    const bool is_first = s == 0, is_last = s == head_stage(p);
    if (is_first) {
      st.embedding_weight_bytes = pc.embedding_rank * bpp.weights;
      if (embedding_trainable) {
        st.embedding_grad_bytes = pc.embedding_rank * dp.grad_bytes_per_param;
        st.embedding_trainable_weight_bytes = pc.embedding_rank * bpp.weights;
      }
    }
    if (is_last) {
      st.head_forward = head.forward;
      st.head_backward = head.backward;
      // (with the multi-token prediction modules, which run with the head)
      st.head_weight_bytes = (pc.head_rank + pc.mtp_rank) * bpp.weights;
      if (j.mode != TrainMode::lora) {
        st.head_grad_bytes = (pc.head_rank + pc.mtp_rank) * dp.grad_bytes_per_param;
        st.head_trainable_weight_bytes = (pc.head_rank + pc.mtp_rank) * bpp.weights;
      }
    }
    const double trainable = stage_params(m, j, p, pc, s).trainable;
    st.optimizer = optimizer_time(c, j, p, e, trainable).total();
    st.optimizer_offloaded = p.offload_optimizer;
    st.activation_offload_layers = std::min(p.activation_offload_layers, static_cast<int>(st.layers.size()));

    // Memory: the planner's events of this stage, and the facts its chunks' passes sum.
    st.memory = stage_memory_program(m, c, j, p, s, mem);
    const StageMemoryExtras x = stage_memory_extras(m, j, p, s, mem);
    st.first_chunk_extra_bytes = x.first_chunk_set;
    st.last_chunk_extra_bytes = x.last_chunk_set;
    st.head_input_bytes = x.head_input;
    st.logits_bytes = x.logits_set;
    st.head_weight_grad_bytes = x.head_weight_grad;
    st.activation_grad_bytes = x.activation_grads;
    st.backward_sides = x.backward_sides;
  }
  return sc;
}

}  // namespace llmplan
