// Runner: executes a plan file's training job for N steps on a backend (the CPU, or a GPU
// through RunOptions::device_backend) and compares what it measured with what the planner
// predicts for exactly what ran.
//
// What runs (single rank, unless a communicator is given): the dp=1/tp=1/pp=1/cp=1
// equivalent of the plan, with micro_batch, grad_accum (= global / (micro * dp) of the
// plan), recompute, flash attention, precision, optimizer, LoRA/freezing kept; ZeRO and
// offload dropped (no data-parallel group to shard over); `layers` > 0 scales the depth.
// The report's `label` says which of these changes were made. The prediction is
// recomputed (estimate_memory / estimate_time) for that executed config, never read from
// the file: on the CPU for the "cpu-host" device (cpu_host_gpu below), on a GPU for the
// plan's own GPU preset.
//
// Measured: per-step loss, wall time (to the device's completion), tokens/s; allocator
// peaks per Category, per Phase and overall. Compared with the planner's lines on the
// allocator side: weights, gradients, optimizer states, master weights, activations,
// logits+loss, and the backward working set against the measured workspace category
// (activation gradients, recompute, op scratch). GPU-only lines (CUDA context, cuBLAS
// workspace, caching-allocator fragmentation, the device's peak used memory) are measured
// on a GPU and listed as having no counterpart on the CPU.
//
// Out of memory against `memory_limit` is a result, not an error: the report has oom set,
// with the phase, layer and part where it happened and the planner's suggested fixes.
// Errors (Status) are for bad input (bad_input) and failures other than OOM (runtime).
// Thread-safety: one run per thread; OpenBLAS threads the GEMMs (OPENBLAS_NUM_THREADS).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/allocator.h"
#include "executor/backend.h"
#include "executor/comm/communicator.h"
#include "executor/model.h"
#include "executor/trainer.h"
#include "planner/calibrate/calibration.h"
#include "planner/cost/memory_model.h"
#include "planner/io/plan_file.h"
#include "planner/cost/time_model.h"

namespace llmplan::exec {

// The CPU as a planner "GPU": peak 150 GFLOP/s in every dtype (16-bit storage computes in
// fp32 here), 20 GB/s memory bandwidth (PLATFORM.md: this machine's 2 Zen 3 cores reach
// 145-160 GFLOP/s in sgemm), capacity = `memory_bytes`.
GpuSpec cpu_host_gpu(double memory_bytes);

struct StepMeasure;

struct RunOptions {
  std::string backend = "cpu";  // "cpu" or "cuda" (device_backend must then be set). Default: cpu
  // The backend to run on; nullptr: a CPU backend made for the run. The CLI makes the CUDA
  // one (executor/cuda/cuda_backend.h), which this library does not link.
  ExecBackend* device_backend = nullptr;
  // Predict with a calibrated device (planner/calibrate/calibration.h). REQUIRES: measured on the
  // device the executed config names -- the plan's GPU preset, or cpu-host on the CPU
  // backend (bad_input otherwise).
  std::optional<Calibration> calibration;
  // Predict step time with these constants (a stack profile's, e.g. one `llmplan calibrate
  // --stack-out` fitted for this device); unset: the planner's defaults.
  std::optional<Efficiency> efficiency;
  int steps = 20;               // optimizer steps measured. Default: 20
  int warmup = 3;               // extra steps first, not in the medians. Default: 3
  int layers = 0;               // > 0: run this many layers instead of the model's
  int64_t seq_len = 0;          // > 0: sequence length instead of the job's
  int micro_batch = 0;          // > 0: micro-batch instead of the plan's
  int grad_accum = 0;           // > 0: micro-batches per step instead of the plan's
  std::string data;             // token file / .txt / folder; "" = synthetic tokens
  int64_t memory_limit = 0;     // bytes; 0 = none
  uint64_t seed = 1234;         // init, data order, dropout
  TrainerOptions trainer;
  ModelOptions model;
  std::function<void(int step, int total, bool warmup, double loss, double time_s, double tokens_per_s)> on_step;
  // Called with each step's measurement as soon as it is taken (before on_step), so that a
  // run that dies later keeps what it measured (execute_job records it).
  std::function<void(const StepMeasure&)> on_step_measured;
  // Distributed (world size > 1): this rank's communicator -- an MpiCommunicator, or a
  // LocalCommunicator for a rank proxy; on the CUDA backend an NcclCommunicator over the
  // device backend's context (check_distributed_backend says what runs there).
  // nullptr: the single-rank equivalent runs (above).
  // Implemented so far: data parallel with ZeRO 0-3 (comm/data_parallel.h), tensor parallel with or without
  // SP (model.h), pipeline parallel with GPipe, 1F1B and interleaved 1F1B (vpp > 1)
  // (comm/pipeline.h), context parallel, and expert parallel (ep > 1, MoE) with data,
  // context, pipeline and tensor parallel (with SP) and ZeRO.
  Communicator* comm = nullptr;
  int64_t bucket_bytes = 25 * 1024 * 1024;  // DP bucket (also the prediction's dp_bucket_bytes). Default: 25 MiB
  std::function<void(Model&)> on_done;      // tests: called with the trained model (ZeRO-3: gathered whole) before teardown
};

struct StepMeasure {
  int step = 0;             // 0-based, warm-up steps included
  bool warmup = false;
  double loss = 0;          // mean over the step's micro-batches (per token)
  double time_s = 0;
  double tokens_per_s = 0;
  bool skipped = false;     // fp16 overflow: no update
  double loss_scale = 1;
  double grad_norm = 0;
  int64_t peak_bytes = 0;   // allocator peak during this step
};

struct CompareLine {
  std::string name;         // "activations", "peak (allocator side)", "step time"
  double predicted = 0;     // bytes or s
  double measured = 0;
  bool gpu_only = false;    // no CPU counterpart: measured is n/a
  std::string note;
  double rel_error() const { return predicted != 0 ? (measured - predicted) / predicted : 0; }
};

struct RunReport {
  PlanFile original;
  PlanFile executed;            // the config that ran (this rank's share of it when distributed)
  int rank = 0;                 // world rank that ran (distributed / proxy), else 0
  RankCoords coords;            // its place in the layout
  bool comm_modelled = false;   // rank proxy: collectives were local stand-ins
  std::string label;            // what was changed to run it here
  int64_t tokens_per_step = 0;
  std::vector<StepMeasure> steps;
  MemoryStats memory;           // allocator stats over the measured steps (bytes)
  StageMemory predicted_gpu;    // the planner's full per-GPU prediction
  StageMemory predicted_alloc;  // the same with GPU-only lines set to 0
  StepTime predicted_time;      // on cpu_host_gpu
  std::vector<CompareLine> memory_lines;
  CompareLine step_time;
  // CPU backend: the kernel's witness of the allocator-side peak -- the process's peak
  // resident memory over the run (VmHWM, reset before the model is built) less what was
  // resident before (the runtime's fixed part: libraries, thread stacks), against the
  // predicted allocator peak. Its name is empty where the kernel gives no figure.
  CompareLine resident_peak;
  double median_step_s = 0, tokens_per_s = 0;
  double model_flops_per_s = 0;  // the executed config's model FLOPs (planner, 6N + attention) / median step
  std::string backend = "cpu", device_name;
  DeviceMemoryLines device;      // GPU: measured memory outside the allocator's categories
  bool oom = false;
  std::string oom_message;
  Where oom_where;
  std::vector<std::string> fixes;  // planner explain: fitting changes first
  // CPU backend: wall time per op kind and shape over the measured steps (op_time_log.h),
  // which execute stores in the profile database's op_timings for `llmplan calibrate`.
  std::vector<OpTimeEntry> op_times;
};

// Whether `backend` ("cpu", "cuda") runs `plan` distributed over a real (modelled = false)
// or modelled (a rank proxy) communicator. The CPU runs everything run_plan implements;
// so does the CUDA backend (one GPU per rank over NCCL, or a rank proxy on one GPU) but
// for cp with materialized attention (bad_input naming plan.flash_attention: the GPU's
// materialized kernels take whole sequences) and, over NCCL (not modelled), interleaved
// pipelines (plan.vpp > 1: their unpaired sends could deadlock NCCL's blocking
// point-to-point).
Status check_distributed_backend(const std::string& backend, const ParallelPlan& plan, bool modelled);

// Builds the model and trainer, runs warmup + steps, measures and compares. Errors: see top.
Result<RunReport> run_plan(const PlanFile& plan, const RunOptions& options);
// What run_plan would execute and predict (executed, label, rank, predicted_*), without
// running anything. Errors: as run_plan's bad_input.
Result<RunReport> predict_run(const PlanFile& plan, const RunOptions& options);

nlohmann::json report_to_json(const RunReport& r);

}  // namespace llmplan::exec
