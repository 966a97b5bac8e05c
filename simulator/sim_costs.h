// What each simulated operation costs: durations of every compute and communication
// operation of one step, and the bytes each one allocates, per pipeline stage. The
// default costs come from the planner (one source of truth): per-layer times from
// layer_times() with their latency parts, collectives from allreduce_time / allgather_time
// / p2p_time and their *_latency over group_link(), memory from
// activation_bytes_per_layer() and stage_memory_program(), whose events the simulator
// plays (memory_events.h).
// Tests replace fields to check the simulator against closed forms.
//
// The LM head, the optimizer step, the per-pass split of in-layer collectives and the
// DP/ZeRO collectives (link, bucket sizes, bytes per parameter) come from the planner's
// head_times, optimizer_time, layer_comm_by_pass and dp_step; the simulator plays out
// what the analytic model expresses with its overlap constants. Tests compare the
// simulated step time and memory peak with estimate_time / estimate_stage_memory where
// they must agree.
//
// Thread-safety: plain values; default_costs is pure.
#pragma once

#include <array>
#include <vector>

#include "planner/cost/memory_events.h"
#include "planner/cost/memory_model.h"
#include "planner/spec/specs.h"
#include "planner/cost/time_model.h"

namespace llmplan {

// Which link a transfer crosses is the planner's (Link::tier of group_link). Transfers that
// cross the same tier of the same rank at the same time share its bandwidth (each direction
// separately).

// A communication operation alone on its link: `latency` (alpha terms and kernel launch,
// never shared) followed by `transfer` (beta terms: seconds at the tier's full bandwidth,
// stretched while other transfers share the tier).
struct CommCost {
  double latency = 0;   // s
  double transfer = 0;  // s at full bandwidth
  LinkTier tier = LinkTier::intra_node;
  double total() const { return latency + transfer; }
};

enum class Pass : uint8_t { forward, backward, recompute };
constexpr int kPasses = 3;
// Blocking collectives inside a layer: the compute stream waits for them.
enum class LayerComm : uint8_t { tp, cp, ep };
constexpr int kLayerComms = 3;

// One transformer layer on one rank for one micro-batch.
struct LayerCost {
  int global_layer = 0;                  // index in the model, 0..layers-1
  std::array<double, kPasses> compute{};  // s: forward, backward, recompute (extra forward work in backward)
  double weight_grad = 0;           // s, of compute[backward]: its weight-gradient GEMMs (a split backward's W)
  std::array<std::array<CommCost, kPasses>, kLayerComms> comm{};  // [LayerComm][Pass], blocking, after the compute
  double grad_bytes = 0;            // gradient bytes its backward hands the DP reduction (fp32 under mixed precision), per rank
  double weight_bytes = 0;          // 16-bit weight bytes of the layer on this rank (ZeRO-3 gathers)
  double trainable_weight_bytes = 0;  // of which trainable (ZeRO-1/2 parameter all-gather)
  double activation_bytes = 0;      // kept from its forward to its backward, one micro-batch
  double working_bytes = 0;         // re-materialised during its backward (layer_rematerialised_bytes)
  double attention_working_bytes = 0;  // of which only at its attention's backward (LayerMemoryBytes::rematerialised_attention)
  double forward_transient_bytes = 0;  // transient while its forward runs (layer_forward_transient_bytes)
  double weight_grad_buffer_bytes = 0;  // split backward: output gradients its B leaves for its W (recipe.h)
  bool grad_flows = true;           // false: frozen below every trainable weight (no backward)
};

// One pipeline stage (one representative rank of it).
struct StageCost {
  std::vector<LayerCost> layers;  // stage order: with v chunks, chunk c holds the c-th n/v block
  double head_forward = 0;        // s, LM head + loss after the last layer (the head's stage only: plan_check.h head_stage)
  double head_backward = 0;       // s
  double embedding_grad_bytes = 0;    // produced after chunk 0's backward on stage 0
  double head_grad_bytes = 0;         // produced by the head backward on the head's stage
  double embedding_weight_bytes = 0;  // ZeRO gathers of the embedding (stage 0) ...
  double head_weight_bytes = 0;       // ... and of the LM head (the head's stage)
  double embedding_trainable_weight_bytes = 0, head_trainable_weight_bytes = 0;
  double optimizer = 0;           // s, optimizer step on the GPU, or host transfers + CPU step when offloaded
  bool optimizer_offloaded = false;
  // Activation offload: the stage's first k layers keep their activations in host memory
  // but for one layer's worth on the GPU, and none at the head's moments (the planner's
  // memory model, PassMemory::offload_resident).
  // Their host transfers are not simulated (the analytic model's `offload` term has them).
  int activation_offload_layers = 0;

  // ---- memory, bytes per rank: what the stage holds all step and what its passes hold
  // beside their activations (the planner's stage_memory_program), and the chunk-level
  // facts the simulator sums per chunk for each pass's events (pass_memory_events).
  StageMemoryProgram memory;
  double first_chunk_extra_bytes = 0;  // per micro-batch with chunk 0 (stage 0: embedding dropout mask)
  double last_chunk_extra_bytes = 0;   // per micro-batch with the last chunk (last stage: final-norm and LM-head inputs)
  double head_input_bytes = 0;         // of which made after the last layer's forward (the LM-head input)
  double logits_bytes = 0;             // per micro-batch on the last stage, loss to head backward
  double head_weight_grad_bytes = 0;   // split backward: the logits' gradient the head's W reads (0: the head is frozen)
  double activation_grad_bytes = 0;    // during a backward: output gradient + widest intermediate gradient
  BackwardSides backward_sides;        // the two moments activation_grad_bytes is the larger of (backward_moment)
};

struct SimCosts {
  std::vector<StageCost> stages;  // pp entries
  CommCost p2p;                   // one micro-batch's boundary activation (or its gradient) between stages
  double p2p_bytes = 0;           // its size, bytes (for the trace)
  // Data-parallel / ZeRO collectives, timed per bucket with the planner's allreduce_time
  // (ZeRO-0 gradients) and allgather_time (reduce-scatter, parameter gathers).
  int dp_group = 1;               // ranks sharing a gradient: dp * cp
  int zero = 0;                   // ZeRO stage 0..3
  Link dp_link;                   // planner group_link(Group::dp)
  LinkTier dp_tier = LinkTier::inter_node;
  // Bucket sizes (planner dp_step): bytes per gradient reduction and per ZeRO-1/2
  // parameter all-gather; 0: one collective per layer (and one for the embedding, one
  // for the head), as ZeRO-2 issues them.
  double bucket_bytes = 25.0 * 1024 * 1024;
  double gather_bucket_bytes = 0;
  // ZeRO-3 parameter offload: the host link each gather's shard first crosses (planner
  // param_fetch_time), bytes/s; 0: parameters on the GPU.
  double param_fetch_bandwidth = 0;
  Efficiency efficiency;          // for the per-bucket collectives
};

// The costs of every operation of one step of plan p, from the planner's time and
// memory models. REQUIRES: check_plan(m, c, j, p, p.world_size(), true) == none.
SimCosts default_costs(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, const Efficiency& e = {},
                       const MemoryOptions& mem = {});

}  // namespace llmplan
