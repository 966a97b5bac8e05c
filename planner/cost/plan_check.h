// Structural checks of a plan against a model, cluster and job: does it divide, is it
// self-consistent, can the hardware run it. Each failure is a RejectReason, counted by
// the sweep and printed as a one-line message by the CLI. Memory fit is not checked
// here (memory_model.h does that).
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <initializer_list>
#include <string>

#include "planner/spec/recipe.h"
#include "planner/spec/specs.h"
#include "planner/spec/status.h"

namespace llmplan {

enum class RejectReason {
  none,
  world_size_mismatch,      // dp*tp*pp*cp != GPUs
  tp_heads,                 // tp does not divide heads or kv_heads
  tp_exceeds_node,          // tp spans nodes (allowed only when asked)
  pp_layers,                // pp > layers, or layers not divisible as the schedule needs
  vpp_layers,               // layers not divisible by pp*vpp, or vpp without pp
  activation_offload,       // activation_offload_layers negative or more than a stage's layers
  cp_sequence,              // cp does not divide the sequence (2*cp for load balance)
  cp_needs_flash,           // context parallel without fused attention
  ep_experts,               // ep does not divide experts or dp*cp, or ep on a dense model
  sp_needs_tp,              // sequence parallel with tp == 1
  moe_tp_needs_sp,          // MoE with tp > 1 and no sp
  batch_divisibility,       // global batch not divisible by micro_batch*dp
  interleave_microbatches,  // interleaved schedule needs micro-batches % pp == 0
  schedule_shape,           // the schedule's stages per rank, split or micro-batches do not hold
  zero_offload,             // offload without ZeRO (optimizer must be partitioned) or pp; parameter offload without ZeRO-3 and optimizer offload
  recompute_layers,         // full_k with k outside 1..layers per stage
  lora_zero3,               // ZeRO-3 with LoRA (adapters too small to shard usefully)
  precision_unsupported,    // the GPU has no peak for the precision
  frozen_all,               // every layer frozen: nothing to train
  framework_refuses,        // the framework the sweep is restricted to cannot run it (framework.h)
  does_not_fit,             // set by the memory model, counted by the sweep
  host_does_not_fit,        // fits the GPU, but its offloaded states exceed the node's host memory (likewise)
  kCount
};

const char* describe(RejectReason r);   // "tp does not divide heads/kv_heads"

// First structural problem of the plan, or none. `gpus` is the number of GPUs the plan
// must use exactly. `tp_across_nodes` allows tp > gpus_per_node.
RejectReason check_plan(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, int gpus,
                        bool tp_across_nodes = false);

// The same as a Status with the numbers filled in, for the CLI (bad_input).
Status check_plan_status(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, int gpus,
                         const std::string& origin);

// Sanity of the inputs themselves (absurd sizes) before any plan is looked at.
Status check_inputs(const ModelSpec& m, const TrainingJob& j, const std::string& origin);

// The plan whose every rank costs what the plan's ranks cost: the plan itself, except under
// DeepSeek's two-direction DualPipe (specs.h Schedule::dualpipe). Its step() on pp ranks is
// DualPipeV's step on pp/2 ranks with half the micro-batches, rank r playing rank
// min(r, pp-1-r) (deepseek-ai/DualPipe dualpipe.py vs dualpipev.py: num_half_ranks,
// half_rank, half_num_chunks in the same eight steps), and rank r holds the same two stages,
// r and pp-1-r, as that DualPipeV rank. So it is costed as DualPipeV with pp/2 and dp*2: the
// same world size and global batch, half the micro-batches per pipeline, and a data-parallel
// group of 2*dp, because rank r and its mirror pp-1-r of every replica hold copies of the
// same layers whose gradients are summed (dualpipe's example adds the mirror's gradients)
// and over which ZeRO partitions. The middle ranks' hand-over (pp/2-1 to pp/2), a
// point-to-point send where DualPipeV's V turns on one rank, is the one difference: see
// time_model.cpp and the simulator's StepBuilder. REQUIRES for dualpipe: pp even (check_plan).
ParallelPlan cost_plan(const ParallelPlan& p);
// The same without a copy where it is the plan itself (every schedule but DualPipe, whose
// plan is written into *storage): the cost entry points run millions of times a second in
// the sweep, and a plan holds a vector (stage_layers).
inline const ParallelPlan& cost_plan(const ParallelPlan& p, ParallelPlan* storage) {
  if (p.schedule != Schedule::dualpipe) return p;
  *storage = cost_plan(p);
  return *storage;
}

// (Under PipelineSplit::custom the functions below read plan.stage_layers: O(pp*vpp) for
// the first-layer ones, O(vpp) for the counts.)
// Layers held by pipeline stage `stage` of `pp`: as even as possible; when pp does not
// divide the layers the remainder goes to the last stages, which hold fewer in-flight
// micro-batches under 1F1B.
inline int layers_in_stage(int layers, int pp, int stage) {
  const int base = layers / pp, extra = layers % pp;
  return base + (stage >= pp - extra ? 1 : 0);
}
// Closed form of the sum of layers_in_stage over the stages before `stage`: each has `base`
// layers, and those from pp - extra on have one more. O(1) (and inline, as the two below)
// because the memory and time models ask for it per stage of every plan of a sweep.
inline int first_layer_of_stage(int layers, int pp, int stage) {
  const int base = layers / pp, extra = layers % pp;
  return stage * base + (stage > pp - extra ? stage - (pp - extra) : 0);
}

// The same under the plan's PipelineSplit. Virtual stage v of pp*vpp (the executor builds
// one; v = chunk*pp + stage), and pipeline stage s of pp (all its vpp chunks: the memory and
// time models cost one). first_layer_of_pp_stage is the stage's first layer as if its layers
// were contiguous (exact for vpp 1; under interleaving the layers before it in the order of
// stages, which is how frozen layers are counted).
// The virtual stage chunk c of pipeline stage s holds: c*pp + s (Megatron's interleaved
// layout), or under a V schedule (specs.h v_shape) s for chunk 0 and 2pp-1-s for chunk 1.
// (A V plan with other than two chunks is refused by check_plan; it is laid out as interleaved.)
inline bool placed_in_v(const ParallelPlan& p) { return v_shape(p.schedule) && p.vpp == 2; }
inline int chunk_virtual_stage(const ParallelPlan& p, int s, int c) { return placed_in_v(p) ? (c == 0 ? s : 2 * p.pp - 1 - s) : c * p.pp + s; }
// The pipeline stage that holds the LM head (the last virtual stage): pp-1, or 0 in a V.
inline int head_stage(const ParallelPlan& p) { return placed_in_v(p) ? 0 : p.pp - 1; }
int virtual_stage_layers(int layers, const ParallelPlan& p, int v);
int first_layer_of_virtual_stage(int layers, const ParallelPlan& p, int v);
namespace split_detail {  // the splits other than even
int pp_stage_layers(int layers, const ParallelPlan& p, int s);
int first_layer_of_pp_stage(int layers, const ParallelPlan& p, int s);
}  // namespace split_detail
inline int pp_stage_layers(int layers, const ParallelPlan& p, int s) {
  return p.pipeline_split == PipelineSplit::even ? layers_in_stage(layers, p.pp, s) : split_detail::pp_stage_layers(layers, p, s);
}
inline int first_layer_of_pp_stage(int layers, const ParallelPlan& p, int s) {
  return p.pipeline_split == PipelineSplit::even ? first_layer_of_stage(layers, p.pp, s)
                                                 : split_detail::first_layer_of_pp_stage(layers, p, s);
}
// The model's index of stage-local layer i of pipeline stage s (0 <= i < pp_stage_layers):
// the stage's chunks, virtual stages chunk_virtual_stage(p, s, c) for c = 0 .. vpp-1, in order.
int stage_layer_global_index(int layers, const ParallelPlan& p, int s, int i);
// The layers of each kind (recipe.h layer_kind) pipeline stage s holds, and of them those
// among its first `frozen_here` stage-local layers (the frozen ones, as the memory and time
// models count them). A model of one kind has them all as kind 0 (O(1)); otherwise the
// stage's layers are walked. Stages with equal counts cost the same.
struct StageLayerKinds {
  std::array<int, kLayerKinds> layers{}, frozen{};
  bool operator==(const StageLayerKinds&) const = default;
};
StageLayerKinds stage_layer_kinds(const ModelSpec& m, const ParallelPlan& p, int s, int frozen_here);
// Whether the stage holds a layer with the MoE MLP.
inline bool has_moe_layer(const ModelSpec& m, const StageLayerKinds& k) {
  if (!m.moe.enabled()) return false;
  for (int kind = 0; kind < kLayerKinds; ++kind)
    if (!kind_dense_mlp(kind) && k.layers[kind] > 0) return true;
  return false;
}
// The layers of each virtual stage v = 0 .. pp*vpp-1 under the plan's split.
std::vector<int> virtual_stage_counts(int layers, const ParallelPlan& p);
// Gives p (pp, vpp set) the split whose layers per virtual stage are `counts`: the first of
// `standard` that is legal and gives them (plan files keep naming the split they had), else
// custom with those counts. REQUIRES: counts has pp*vpp entries.
void set_split_from_counts(int layers, const std::vector<int>& counts, std::initializer_list<PipelineSplit> standard, ParallelPlan* p);
// Whether the split is legal: even with vpp 1 always (pp <= layers); even with vpp > 1 when
// pp*vpp divides the layers; account_embedding_loss when pp*vpp divides layers + 2 and every
// virtual stage keeps a layer; custom when plan.stage_layers has pp*vpp counts of at least
// one that sum to the layers.
bool pipeline_split_ok(int layers, const ParallelPlan& p);
// The split the sweep and Megatron-Core records take: even when it is legal, else
// account_embedding_loss when that is.
PipelineSplit default_pipeline_split(int layers, int pp, int vpp);
// The custom split the sweep proposes where neither of those is legal (vpp > 1): the embedding
// and the loss counted as a layer each (as account_embedding_loss) and each of the model's
// `mtp_layers` multi-token-prediction blocks as one more on the last virtual stage (which
// holds them: recipe.h; Megatron-Core's layout guide gives DeepSeek-V3's MTP a virtual stage
// of its own), the slots spread as evenly as pp*vpp virtual stages allow, the remainder one
// each on virtual stages 1, 2, ..., so the first and last virtual stage hold fewer layers.
// Megatron-Core runs it as a --pipeline-model-parallel-layout. Empty when a stage would be
// left without a layer or when default_pipeline_split is legal.
std::vector<int> balanced_stage_layers(int layers, int mtp_layers, int pp, int vpp);

}  // namespace llmplan
