// When no plan of a job fits its GPUs: the smallest changes of the job after which some
// plan does, each found by the sweep (its best plan by throughput, with that plan's peak):
//   - the fewest GPUs (more than the job's; within a node any count, beyond it whole nodes),
//   - the longest sequence that fits on the job's GPUs (a multiple of 128, global batch in
//     sequences kept),
//   - LoRA, then QLoRA, on the base model (pretraining or full fine-tuning only: rank 8 on
//     q and v, the CLI's --mode lora defaults),
//   - FP8 linear layers (tensorwise scaling) where the GPU has FP8 tensor cores,
//   - activation offload and optimizer offload, where the sweep's space left them out.
// The GPU count is an exact scan in increasing order (what a sweep over GPU counts finds),
// bounded by FitAdviceOptions::max_gpus.
//
// Thread-safety: as run_sweep (the progress callback is called from this thread).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "planner/search/sweep.h"

namespace llmplan {

struct JobChange {
  std::string description;  // "24 GPUs (3 nodes; from 8)", "sequence 3072 (from 8192)", "LoRA r8 on q,v"
  int gpus = 0;
  TrainingJob job;
  ParallelPlan plan;        // the best plan after the change
  double peak_bytes = 0;    // its worst-stage peak
  double tokens_per_s = 0;
};

struct FitAdvice {
  std::vector<JobChange> changes;  // in the order listed above; only the ones that make a plan fit
  int min_gpus = 0;                // 0: no count up to max_gpus fits
  int64_t max_seq = 0;             // 0: not even 128 tokens fit
  int sweeps = 0;                  // sweeps run
  int max_gpus = 0;                // the largest GPU count the scan would try
};

struct FitAdviceOptions {
  int max_gpus = 0;  // 0: max(1024, 64 x the job's GPUs), at most 65536
  // GPUs per node of the node type (a job on part of one node has the part in its
  // ClusterSpec). 0: the cluster's gpus_per_node.
  int node_gpus = 0;
  // Called before each sweep of the GPU scan with the count about to be tried.
  std::function<void(int)> progress;
};

// `space` and `opt` as the sweep that found nothing (opt.top_k is set to 1 here).
FitAdvice advise_fit(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, int gpus, const SweepSpace& space, SweepOptions opt,
                     const FitAdviceOptions& fo = {});

}  // namespace llmplan
