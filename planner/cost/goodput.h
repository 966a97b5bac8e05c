// Goodput of a long training job: how large a checkpoint of the plan is and how long it
// takes to write and to read back, the job's failure rate, the checkpoint interval that
// loses the least time, and the fraction of wall-clock time that trains.
//
// The model (docs/design.md "Goodput, cost and energy"): failures arrive as a Poisson
// process of mean time between failures M (the job's: its GPUs' and nodes' rates summed);
// the job checkpoints every tau seconds of training, each checkpoint blocking training for
// delta seconds; after a failure it relaunches and reloads the last checkpoint (R seconds)
// and redoes the work since. Daly's complete model gives the expected wall time of T_s
// seconds of training, failures during checkpoints and restarts included (Daly 2006, "A
// higher order estimate of the optimum checkpoint interval for restart dumps", Future
// Generation Computer Systems 22(3), 2006):  T_w = M e^(R/M) (e^((tau+delta)/M) - 1) T_s / tau,  so the productive fraction
// is T_s / T_w. Planned interruptions (maintenance) cost a checkpoint and a restart each and
// lose no work.
//
// Pure functions. Thread-safety: pure.
#pragma once

#include "planner/cost/memory_model.h"
#include "planner/spec/specs.h"

namespace llmplan {

// ---- What a checkpoint holds

// A checkpoint is what a restart needs to continue bit-for-bit: the trained weights, their
// fp32 master copies and the optimizer states (Adam m, v), each once. Gradients are not
// saved (a step is restarted whole). Frozen weights (LoRA, QLoRA, frozen layers) are not
// written again each time: they are the base model, read back at restart.
struct CheckpointSize {
  double total_bytes = 0;     // one checkpoint, every state once
  double frozen_bytes = 0;    // frozen weights, read at restart only
  // The most state bytes one rank holds (the stage that holds most, weights + master +
  // optimizer as the memory model shards them, offloaded ones included): what a rank writes
  // when each writes its own shard.
  double rank_bytes = 0;
  // What each rank writes under a fully parallel save, which spreads replicated tensors
  // over their replicas (Megatron-Core dist_checkpointing's FullyParallelSaveStrategyWrapper,
  // PyTorch DCP's deduplicated save plans): total_bytes / world size.
  double write_bytes_per_rank = 0;
};
// REQUIRES: check_plan(m, c, j, p, ...) == none.
CheckpointSize checkpoint_size(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p);
// What every plan of the job on `world` ranks shares: total_bytes, frozen_bytes and
// write_bytes_per_rank (rank_bytes 0). What goodput needs; the sweep computes it once per job.
CheckpointSize checkpoint_totals(const ModelSpec& m, const TrainingJob& j, int world);

// Where checkpoints go. Bandwidths in bytes/s; 0 = no such limit (at least one of the
// per-node and aggregate write limits must be set).
struct StorageSpec {
  double write_per_node = 10e9;  // a node's client write bandwidth to the file system
  double read_per_node = 10e9;   // ... and read bandwidth (restart)
  double aggregate_write = 0;    // the storage system's sustained write bandwidth, all nodes together
  double aggregate_read = 0;
  // Asynchronous checkpointing (torch.distributed.checkpoint.async_save, Megatron-Core
  // --async-save): training blocks only while each rank copies its part to host memory
  // (ClusterSpec::host_bandwidth); the write to storage runs behind the next steps.
  bool async = false;
};

struct CheckpointTimes {
  double blocking_s = 0;  // training stops this long per checkpoint
  double persist_s = 0;   // until the checkpoint is durable on storage (= blocking_s when synchronous)
  double load_s = 0;      // reading it back at restart (frozen weights included)
};
// Writes spread evenly over the nodes (fully parallel save): the slower of the nodes'
// combined client bandwidth and the storage system's.
CheckpointTimes checkpoint_times(const CheckpointSize& size, const ClusterSpec& c, int gpus, const StorageSpec& s);

// ---- Failures

// Rates of interruptions, per GPU-hour (causes in a GPU: its memory, SRAM, system processor)
// and per node-hour (the rest: host, network, software). data/reliability/ has them with
// their sources.
struct FailureRates {
  double per_gpu_hour = 0;          // unexpected interruptions
  double per_node_hour = 0;
  double planned_per_node_hour = 0; // planned (maintenance): a checkpoint and a restart, no lost work
};
// The job's mean time between unexpected interruptions, s (+inf when the rates are 0).
double job_mtbf_s(const FailureRates& f, int gpus, int gpus_per_node);

// The checkpoint interval tau (training seconds between checkpoints) for checkpoint cost
// delta and MTBF M, s. Young 1974 ("A first order approximation to the optimum checkpoint
// interval", CACM 17(9)): sqrt(2 delta M). Daly 2006's higher-order optimum: sqrt(2 delta M) (1 +
// sqrt(delta/(2M))/3 + delta/(18 M)) - delta for delta < 2M, else M.
double young_interval_s(double delta_s, double mtbf_s);
double daly_interval_s(double delta_s, double mtbf_s);
// Daly's productive fraction T_s / T_w for interval tau, checkpoint cost delta, restart R
// and MTBF M (all s); 1 - delta/(tau + delta) when M is infinite.
double productive_fraction(double tau_s, double delta_s, double restart_s, double mtbf_s);

// ---- The plan's goodput

struct GoodputOptions {
  FailureRates failures;
  double mtbf_override_s = 0;  // > 0: the job's MTBF, in place of the rates'
  StorageSpec storage;
  // Relaunching after a failure before the reload: detection, rescheduling, process start,
  // NCCL initialisation. Default 10 min: an assumption, no published figure for a large
  // job was found (set it from your own logs).
  double relaunch_s = 600;
  double interval_s = 0;  // > 0: checkpoint this often (training seconds); 0: Daly's optimum
};

struct Goodput {
  CheckpointSize size;
  CheckpointTimes times;
  double mtbf_s = 0;           // the job's, unexpected interruptions
  double interval_s = 0;       // training seconds between checkpoints, a whole number of steps
  int64_t interval_steps = 0;
  double restart_s = 0;        // relaunch + reload (+ an asynchronous checkpoint's persist lag)
  double unexpected_fraction = 1;  // productive fraction under unexpected interruptions
  double planned_loss = 0;     // fraction of wall time lost to planned interruptions
  double fraction = 1;         // productive fraction of wall-clock time, everything counted
};
// REQUIRES: check_plan(m, c, j, p, ...) == none; step_time_s > 0; gpus = the plan's world size.
Goodput estimate_goodput(const ModelSpec& m, const ClusterSpec& c, const TrainingJob& j, const ParallelPlan& p, int gpus,
                         double step_time_s, const GoodputOptions& opt);
// The same from the plan's checkpoint size (the sweep computes it once per plan shape).
Goodput estimate_goodput(const CheckpointSize& size, const ClusterSpec& c, int gpus, double step_time_s, const GoodputOptions& opt);

}  // namespace llmplan
