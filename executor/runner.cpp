#include "executor/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "executor/backend.h"
#include "executor/comm/data_parallel.h"
#include "executor/comm/pipeline.h"
#include "executor/data.h"
#include "executor/process_memory.h"
#include "planner/search/explain.h"
#include "planner/cost/plan_check.h"

namespace llmplan::exec {

GpuSpec cpu_host_gpu(double memory_bytes) {
  GpuSpec g;
  g.name = "cpu-host";
  g.source = "PLATFORM.md: 2 Zen 3 cores, sgemm 145-160 GFLOP/s; ~20 GB/s memory bandwidth";
  g.memory_bytes = memory_bytes;
  g.memory_bandwidth = 20e9;
  g.peak_flops[static_cast<int>(Dtype::fp32)] = 150e9;
  g.peak_flops[static_cast<int>(Dtype::fp16)] = 150e9;
  g.peak_flops[static_cast<int>(Dtype::bf16)] = 150e9;
  return g;
}

namespace {

// Shrinks the executed job as asked (--layers, --seq, --micro-batch, --grad-accum) and, on
// the CPU backend, puts it on the cpu-host device; on a GPU the plan's own GPU stays (the
// prediction is for the device the plan names). The prediction follows `e`. The
// data-parallel degree of `e.plan` is kept (1 for single-rank runs).
// A custom split's counts scaled to `layers` in proportion (largest remainders first, each
// virtual stage keeping at least one layer), so the scaled run keeps the plan's shape: which
// stages are lighter and which heavier. REQUIRES: layers >= counts.size() >= 1.
std::vector<int> scaled_stage_layers(const std::vector<int>& counts, int layers) {
  const size_t n = counts.size();
  int64_t total = 0;
  for (int c : counts) total += c;
  std::vector<int> out(n, 1);
  std::vector<std::pair<double, size_t>> remainders;
  int64_t left = layers - static_cast<int64_t>(n);  // beyond each stage's one layer
  const int64_t share_total = total - static_cast<int64_t>(n);
  for (size_t v = 0; v < n && share_total > 0; ++v) {
    const double share = static_cast<double>(counts[v] - 1) * static_cast<double>(layers - static_cast<int64_t>(n)) / static_cast<double>(share_total);
    const int whole = static_cast<int>(share);
    out[v] += whole;
    left -= whole;
    remainders.push_back({share - whole, v});
  }
  if (remainders.empty())
    for (size_t v = 0; v < n; ++v) remainders.push_back({0.0, v});
  std::stable_sort(remainders.begin(), remainders.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; left > 0; i = (i + 1) % remainders.size(), --left) ++out[remainders[i].second];
  return out;
}

void scale_down(const PlanFile& f, const RunOptions& o, PlanFile* e, std::vector<std::string>* changes) {
  if (o.layers > 0 && o.layers != f.model.layers) {
    changes->push_back("layers " + std::to_string(f.model.layers) + " -> " + std::to_string(o.layers));
    e->model.layers = o.layers;
    e->plan.recompute_layers = std::min(e->plan.recompute_layers, o.layers);
    if (e->plan.pipeline_split == PipelineSplit::custom) {
      e->plan.stage_layers = scaled_stage_layers(e->plan.stage_layers, o.layers);
      std::string counts;
      for (int c : e->plan.stage_layers) counts += (counts.empty() ? "" : ",") + std::to_string(c);
      changes->push_back("stage layers " + counts);
    }
  }
  if (o.seq_len > 0 && o.seq_len != e->job.seq_len) {
    changes->push_back("seq " + std::to_string(e->job.seq_len) + " -> " + std::to_string(o.seq_len));
    e->job.seq_len = o.seq_len;
  }
  if (o.micro_batch > 0 && o.micro_batch != e->plan.micro_batch) {
    changes->push_back("micro-batch " + std::to_string(e->plan.micro_batch) + " -> " + std::to_string(o.micro_batch));
    e->plan.micro_batch = o.micro_batch;
  }
  if (o.grad_accum > 0 && o.grad_accum != e->plan.grad_accum) {
    changes->push_back("accumulation " + std::to_string(e->plan.grad_accum) + " -> " + std::to_string(o.grad_accum));
    e->plan.grad_accum = o.grad_accum;
  }
  e->job.global_batch = static_cast<int64_t>(e->plan.grad_accum) * e->plan.micro_batch * e->plan.dp;
  e->gpus = e->plan.world_size();
  e->cluster.nodes = 1;
  e->cluster.gpus_per_node = e->plan.world_size();
  // The executor routes each batch by capacity_factor: its experts' load is the batch's
  // own. A planned imbalance (the hottest expert's margin over balanced) is not something a
  // run can be told to have, so the run and its prediction both go balanced, said here.
  if (e->model.moe.enabled() && e->model.moe.load_imbalance != 1.0) {
    std::ostringstream imbalance;
    imbalance << e->model.moe.load_imbalance;
    changes->push_back("moe.load_imbalance " + imbalance.str() + " -> 1 (routed by capacity_factor)");
    e->model.moe.load_imbalance = 1.0;
  }
  if (o.backend == "cuda") {
    // The CUDA attention ops have no probability dropout (the CPU's fused variant): the
    // run and its prediction both go without dropout rather than differ silently.
    if (e->model.dropout && !e->plan.flash_attention) {
      e->model.dropout = false;
      changes->push_back("dropout off (attention-probability dropout is CPU-only)");
    }
    return;
  }
  e->cluster.gpu = cpu_host_gpu(o.memory_limit > 0 ? static_cast<double>(o.memory_limit) : 1e15);
  e->cluster.name = "cpu-host";
  changes->push_back("device cpu-host (150 GFLOP/s, 20 GB/s)");
}

std::string join_changes(const std::vector<std::string>& changes) {
  std::string s;
  for (const std::string& c : changes) s += (s.empty() ? "" : "; ") + c;
  return s;
}

// The single-rank config this machine runs for `f`, and the label saying what changed.
PlanFile single_rank(const PlanFile& f, const RunOptions& o, std::string* label, const Communicator* comm = nullptr) {
  PlanFile e = f;
  std::vector<std::string> changes;
  const ParallelPlan& p = f.plan;
  // The executor's GEMMs are 16-bit (cuBLASLt and BLAS in bf16/fp16/fp32): an FP8 plan runs
  // its linears in 16 bits, and is predicted so, rather than compared with an FP8 prediction.
  if (f.job.fp8_linear()) changes.push_back(std::string("FP8 recipe ") + to_string(f.job.fp8) + " run in 16 bits (no FP8 GEMMs in the executor)");
  e.job.fp8 = Fp8Recipe::none;
  // The executor's Adam keeps fp32 moments: a plan with bf16 moments (Megatron-Core's
  // precision-aware optimizer) runs and is predicted with fp32 ones.
  if (f.job.moments != MomentsDtype::fp32) changes.push_back("optimizer moments in fp32 (the plan's bf16 moments are Transformer Engine's FusedAdam's)");
  e.job.moments = MomentsDtype::fp32;
  // The executor's attention kernels take one causal sequence, with no per-document mask:
  // a plan with packed documents runs, and is predicted, with whole-sequence attention.
  if (f.job.packed_documents())
    changes.push_back("whole-sequence attention (the plan's packed documents of " + std::to_string(f.job.doc_len) +
                      " tokens are not masked apart)");
  e.job.doc_len = 0;
  const int64_t micro_per_step = microbatches_per_step(f.job, p);
  if (comm) {  // distributed data parallel: the plan's dp and ZeRO stay
    changes.push_back(std::string(comm->modelled() ? "rank proxy of" : "rank") + " " + std::to_string(comm->rank(Group::world)) +
                      " of dp" + std::to_string(p.dp) +
                      (p.cp > 1 ? " cp" + std::to_string(p.cp) + (p.cp_exchange == CpExchange::ring ? " ring" : " all-gather") : std::string()) +
                      (p.ep > 1 ? " ep" + std::to_string(p.ep) : std::string()) + (p.tp > 1 ? " tp" + std::to_string(p.tp) + (p.sp ? " sp" : "") : std::string()) +
                      (p.pp > 1 ? " pp" + std::to_string(p.pp) + (p.vpp > 1 ? " vpp" + std::to_string(p.vpp) : std::string()) + (p.schedule == Schedule::gpipe ? " gpipe" : splits_backward(p.schedule) ? std::string(" ") + to_string(p.schedule) : " 1f1b") : std::string()) + (p.zero ? " ZeRO-" + std::to_string(p.zero) : std::string()) + " over " +
                      comm->name() + (comm->modelled() ? " (communication modelled, not run)" : ""));
    if (p.offload_optimizer) changes.push_back(p.offload_params ? "optimizer and parameter offload dropped" : "optimizer offload dropped");
    e.plan.offload_optimizer = e.plan.offload_params = false;
    e.plan.grad_accum = static_cast<int>(micro_per_step);  // per DP rank already
    scale_down(f, o, &e, &changes);
    *label = join_changes(changes);
    return e;
  }
  if (p.world_size() > 1 || p.ep > 1) {
    changes.push_back("runs the dp=1/tp=1/pp=1 equivalent of dp" + std::to_string(p.dp) + " tp" + std::to_string(p.tp) +
                      " pp" + std::to_string(p.pp) + " cp" + std::to_string(p.cp) + " (rank 0's share needs the distributed executor)");
  }
  if (p.zero > 0) changes.push_back("ZeRO-" + std::to_string(p.zero) + " dropped (no data-parallel group)");
  if (p.offload_optimizer) changes.push_back(p.offload_params ? "optimizer and parameter offload dropped" : "optimizer offload dropped");
  e.plan.dp = e.plan.tp = e.plan.pp = e.plan.cp = e.plan.ep = e.plan.vpp = 1;
  e.plan.pipeline_split = PipelineSplit::even;  // one stage: every split is the whole model
  e.plan.stage_layers.clear();
  e.plan.sp = false;
  e.plan.zero = 0;
  e.plan.offload_optimizer = e.plan.offload_params = false;
  e.plan.schedule = Schedule::one_f_one_b;
  e.plan.grad_accum = static_cast<int>(micro_per_step);
  e.job.global_batch = micro_per_step * p.micro_batch;
  scale_down(f, o, &e, &changes);
  *label = join_changes(changes);
  return e;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

MemoryItem item_of(Category c) {
  switch (c) {
    case Category::weights: return MemoryItem::weights;
    case Category::gradients: return MemoryItem::gradients;
    case Category::optimizer_states: return MemoryItem::optimizer_states;
    case Category::master_weights: return MemoryItem::master_weights;
    case Category::activations: return MemoryItem::activations;
    case Category::logits_loss: return MemoryItem::logits_loss;
    case Category::workspace: return MemoryItem::backward_working;
    case Category::communication: return MemoryItem::comm_buffers;
    case Category::gathered_params: return MemoryItem::gathered_params;
  }
  return MemoryItem::weights;
}

void compare(RunReport& r) {
  const StageMemory& pa = r.predicted_alloc;
  const DeviceMemoryLines& dev = r.device;
  // On a GPU the cuBLASLt workspace lives in Category::workspace for the whole run; it is
  // the planner's separate "workspace" line, so it is taken out of the allocator-side lines.
  const double blas_ws = static_cast<double>(dev.blas_workspace);
  for (int c = 0; c < kCategories; ++c) {
    const Category cat = static_cast<Category>(c);
    CompareLine l;
    l.name = to_string(cat);
    // Each category's own peak over the step against the planner's largest value of that
    // line at any moment (they need not coincide with the total's peak).
    l.predicted = pa.item_peak[static_cast<int>(item_of(cat))];
    l.measured = static_cast<double>(r.memory.peak[c]) - (cat == Category::workspace ? blas_ws : 0);
    if (cat == Category::workspace) {
      l.note = dev.measured ? "vs planner backward_working (forward transient or recompute + activation gradients) + op scratch; cuBLASLt workspace excluded"
                            : "vs planner backward_working (forward transient or recompute + activation gradients) + op scratch (CPU 16-bit GEMMs add fp32 copies)";
      // QLoRA's dequantized weight is the executor's workspace too (the planner's workspace line).
      if (const double dq = qlora_dequantized_weight_bytes(r.executed.model, r.executed.job, r.executed.plan); dq > 0) {
        l.predicted += dq;
        l.note += "; + QLoRA's dequantized weight";
      }
    }
    r.memory_lines.push_back(l);
  }
  for (MemoryItem it : {MemoryItem::workspace, MemoryItem::cuda_context, MemoryItem::fragmentation}) {
    CompareLine l;
    l.name = to_string(it);
    l.predicted = r.predicted_gpu.bytes[static_cast<int>(it)];
    l.gpu_only = !dev.measured;
    if (it == MemoryItem::workspace) {
      l.note = "cuBLAS workspace";
      l.measured = blas_ws;
    } else if (it == MemoryItem::cuda_context) {
      l.note = "CUDA context + libraries (measured with cudaMemGetInfo around their creation)";
      l.measured = static_cast<double>(dev.context + dev.libraries);
    } else {
      l.note = "caching allocator: reserved minus requested at the reserved peak (cache + rounding)";
      l.measured = static_cast<double>(std::max<int64_t>(0, dev.reserved_peak - r.memory.peak_total));
    }
    r.memory_lines.push_back(l);
  }
  if (dev.measured) {
    CompareLine l;
    l.name = "peak device memory";
    l.predicted = r.predicted_gpu.total;
    l.measured = static_cast<double>(dev.used_peak);
    l.note = "all of the GPU's used memory at its peak (cudaMemGetInfo, as nvidia-smi), vs the planner's total";
    r.memory_lines.push_back(l);
  }
  CompareLine total;
  total.name = "peak (allocator side)";
  total.predicted = pa.total;
  total.measured = static_cast<double>(r.memory.peak_total) - blas_ws;
  total.note = std::string("predicted peak phase ") + to_string(pa.peak_phase) + ", measured " + to_string(r.memory.peak_phase);
  r.memory_lines.push_back(total);
  const char* phases[] = {"forward", "backward", "optimizer"};
  for (int ph = 0; ph < 3; ++ph) {
    CompareLine l;
    l.name = std::string("peak in ") + phases[ph];
    l.predicted = pa.phase_total[static_cast<size_t>(ph)];
    l.measured = static_cast<double>(r.memory.phase[static_cast<size_t>(ph)].total) - blas_ws;
    r.memory_lines.push_back(l);
  }
}

}  // namespace

namespace {

class CpuBackend final : public ExecBackend {
 public:
  std::string name() const override { return "cpu"; }
  std::string device_name() const override { return "host"; }
  TrackingAllocator& allocator() override { return alloc_; }
  Result<std::unique_ptr<Model>> build_model(const ModelConfig& c) override { return exec::build_model(alloc_, c); }
  Result<std::unique_ptr<Trainer>> create_trainer(Model& m, const TrainingJob& job, const PrecisionScheme& scheme,
                                                  const TrainerOptions& options, const TrainerShard* shard) override {
    return Trainer::create(alloc_, m, job, scheme, options, shard);
  }
  Status synchronize() override { return Status::ok(); }
  DeviceMemoryLines device_memory() override { return {}; }

 private:
  CpuAllocator alloc_;
};

}  // namespace

std::unique_ptr<ExecBackend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

Status check_distributed_backend(const std::string& backend, const ParallelPlan& p, bool modelled) {
  if (backend != "cuda") return Status::ok();
  if (p.cp > 1 && !p.flash_attention)
    return Status::bad_input("--backend cuda: plan.cp " + std::to_string(p.cp) +
                             " with plan.flash_attention false: the GPU's materialized attention takes whole sequences, "
                             "context parallel's slices need flash; set plan.flash_attention true or use --backend cpu");
  // Interleaved 1F1B sends without a paired receive (MPI's isend, which never blocks the
  // sender). NCCL's point-to-point waits for the peer's receive on an in-order stream, so
  // two stages each sending to the other first could wait forever. GPipe and plain 1F1B
  // pair or chain theirs (Pipeline's sendrecv). A proxy does not communicate.
  if (!modelled && p.pp > 1 && p.vpp > 1)
    return Status::bad_input("--backend cuda over NCCL: plan.vpp " + std::to_string(p.vpp) +
                             ": interleaved 1F1B's unpaired sends could deadlock NCCL's blocking point-to-point; set "
                             "plan.vpp 1 (schedule 1f1b or gpipe), run a rank proxy (--proxy-rank), or use --backend cpu");
  return Status::ok();
}

Result<RunReport> predict_run(const PlanFile& f, const RunOptions& o) {
  if (o.backend != "cpu" && o.backend != "cuda") return Status::bad_input("--backend: expected cpu or cuda, got '" + o.backend + "'");
  if (o.steps < 1) return Status::bad_input("--steps: expected a positive number of steps, got " + std::to_string(o.steps));
  if (o.warmup < 0) return Status::bad_input("--warmup: expected 0 or more warm-up steps, got " + std::to_string(o.warmup));
  if (o.layers < 0 || o.layers > f.model.layers)
    return Status::bad_input("--layers: expected 1.." + std::to_string(f.model.layers) + " (the model's layers or fewer), got " +
                             std::to_string(o.layers));
  if (!(o.trainer.lr > 0 && std::isfinite(o.trainer.lr)))
    return Status::bad_input("--lr: expected a positive finite learning rate, got " + std::to_string(o.trainer.lr));
  if (o.seq_len < 0 || o.seq_len > (int64_t{1} << 24)) return Status::bad_input("--seq: expected 1..16777216 tokens");
  if (o.micro_batch < 0 || o.grad_accum < 0) return Status::bad_input("--micro-batch/--grad-accum: expected positive integers");
  if (f.plan.schedule == Schedule::dualpipe)
    return Status::bad_input("plan.schedule: dualpipe (two directions, two copies of each stage, mirror ranks' gradients summed) is "
                             "planned and simulated, not executed; plan.schedule dualpipev on pp/2 ranks runs the same per-rank "
                             "order and stages, and the executor runs it");
  if (f.plan.pp > 1 && splits_backward(f.plan.schedule)) {
    if (o.backend != "cpu")
      return Status::bad_input(std::string("plan.schedule: ") + to_string(f.plan.schedule) +
                               " runs its split backward (B then W) on --backend cpu only; the CUDA path has not been run");
  }
  RunReport r;
  r.original = f;
  const ParallelPlan& fp = f.plan;
  const Communicator* comm = o.comm && fp.world_size() > 1 ? o.comm : nullptr;
  if (comm) {
    if (Status s = check_distributed_backend(o.backend, fp, comm->modelled()); !s) return s;
    if (fp.vpp > 1 && fp.schedule == Schedule::gpipe)
      return Status::bad_input("distributed executor: vpp " + std::to_string(fp.vpp) +
                               " runs interleaved 1F1B; set schedule 1f1b (GPipe has no interleaved variant here)");
    // Interleaved stages hold equal model chunks (or, under the embedding/loss split, chunks
    // of layers + 2 slots); plain stages may be uneven but not empty.
    // (A custom split is scaled to --layers in proportion: scale_down.)
    const int chunks = fp.pp * std::max(1, fp.vpp);
    const bool split_holds = fp.pipeline_split == PipelineSplit::custom ? o.layers >= chunks : pipeline_split_ok(o.layers, fp);
    if (o.layers > 0 && chunks > 1 && (!split_holds || o.layers < fp.pp)) {
      std::string need;
      int example = chunks;
      if (fp.pipeline_split == PipelineSplit::custom) {
        need = std::to_string(chunks) + " model chunks of at least one layer (pipeline_split custom, scaled in proportion): use at "
               "least " + std::to_string(chunks);
      } else if (fp.pipeline_split == PipelineSplit::account_embedding_loss) {
        example = 2 * chunks - 2;
        need = std::to_string(chunks) + " model chunks of layers + 2 slots (pipeline_split account_embedding_loss): use a count that "
               "plus 2 is a multiple of " + std::to_string(chunks) + ", at least " + std::to_string(example);
      } else if (fp.vpp > 1) {
        need = std::to_string(chunks) + " model chunks of equal layers: use a multiple of " + std::to_string(chunks);
      } else {
        need = "stages: use at least " + std::to_string(chunks);
      }
      const std::string shape = fp.vpp > 1 || fp.pipeline_split != PipelineSplit::even
                                    ? "pp " + std::to_string(fp.pp) + " x vpp " + std::to_string(fp.vpp) + " = "
                                    : "pp " + std::to_string(fp.pp) + " ";
      return Status::bad_input("--layers " + std::to_string(o.layers) + ": the plan's pipeline has " + shape + need + " (e.g. --layers " +
                               std::to_string(example) + ")");
    }
    if (comm->size(Group::world) != fp.world_size())
      return Status::bad_input("communicator has " + std::to_string(comm->size(Group::world)) + " ranks, the plan needs " +
                               std::to_string(fp.world_size()));
    r.rank = comm->rank(Group::world);
    r.coords = comm->coords();
    r.comm_modelled = comm->modelled();
  }
  r.executed = single_rank(f, o, &r.label, comm);
  if (o.calibration) {
    GpuSpec& g = r.executed.cluster.gpu;
    if (o.calibration->device != g.name)
      return Status::bad_input("--calibration: measured on device '" + o.calibration->device + "', but the plan's GPU is '" +
                               g.name + "'");
    g = calibrated_gpu(g, *o.calibration);
    char note[160];
    std::snprintf(note, sizeof note, "calibrated: %.3f x the time model's speed (%d %s run%s)", o.calibration->compute_scale,
                  o.calibration->runs, o.calibration->backend.c_str(), o.calibration->runs == 1 ? "" : "s");
    r.label += std::string(r.label.empty() ? "" : "; ") + note;
  }
  const PlanFile& e = r.executed;
  if (Status s = check_plan_status(e.model, e.cluster, e.job, e.plan, e.gpus, "executed config"); !s) return s;
  MemoryOptions gpu_opt;
  gpu_opt.dp_bucket_bytes = static_cast<double>(o.bucket_bytes);
  MemoryOptions gpu_only_zero = gpu_opt;
  gpu_only_zero.cuda_context_bytes = 0;
  gpu_only_zero.gemm_workspace_bytes = 0;
  gpu_only_zero.fragmentation_fraction = 0;
  gpu_only_zero.nccl_bytes_per_group = 0;
  // The CPU backend's 16-bit GEMMs take fp32 tiles where a GPU has its cuBLAS workspace.
  if (o.backend == "cpu") {
    const CpuOpScratch scratch = cpu_op_scratch_bytes(e.model, e.job, e.plan, precision_scheme(e.job).storage);
    gpu_only_zero.backward_gemm_scratch_bytes = static_cast<double>(scratch.layer);
    gpu_only_zero.head_gemm_scratch_bytes = static_cast<double>(scratch.head);
    gpu_only_zero.attention_scratch_bytes = static_cast<double>(scratch.attention);
  }
  if (e.plan.pp > 1) {  // this rank's stage
    r.predicted_gpu = estimate_stage_memory(e.model, e.cluster, e.job, e.plan, r.coords.pp, gpu_opt);
    r.predicted_alloc = estimate_stage_memory(e.model, e.cluster, e.job, e.plan, r.coords.pp, gpu_only_zero);
  } else {
    r.predicted_gpu = estimate_memory(e.model, e.cluster, e.job, e.plan, gpu_opt).worst;
    r.predicted_alloc = estimate_memory(e.model, e.cluster, e.job, e.plan, gpu_only_zero).worst;
  }
  r.predicted_time = estimate_time(e.model, e.cluster, e.job, e.plan, o.efficiency ? *o.efficiency : Efficiency{});
  if (o.calibration) {  // utilisation is of the device's real peak, not the calibrated one
    r.predicted_time.mfu *= o.calibration->compute_scale;
    r.predicted_time.hfu *= o.calibration->compute_scale;
  }
  r.tokens_per_step = e.job.global_batch * e.job.seq_len;

  return r;
}

Result<RunReport> run_plan(const PlanFile& f, const RunOptions& o) {
  Result<RunReport> prepared = predict_run(f, o);
  if (!prepared) return prepared.status();
  RunReport r = std::move(*prepared);
  const PlanFile& e = r.executed;
  const Communicator* comm = o.comm && f.plan.world_size() > 1 ? o.comm : nullptr;

  // ---- data
  const int64_t b = e.plan.micro_batch, s = e.job.seq_len;
  std::optional<DataLoader> loader;
  if (!o.data.empty()) {
    Result<TokenData> td = read_token_data(o.data);
    if (!td) return td.status();
    if (td->vocab > e.model.vocab)
      return Status::bad_input(o.data + ": token ids up to " + std::to_string(td->vocab - 1) + " exceed the model's vocab " +
                               std::to_string(e.model.vocab));
    Result<DataLoader> dl = comm ? DataLoader::create(std::move(*td), s, comm->size(Group::dp), comm->rank(Group::dp))
                                 : DataLoader::create(std::move(*td), s, 1, 0);
    if (!dl) return dl.status();
    loader.emplace(std::move(*dl));
  }

  std::unique_ptr<ExecBackend> own_backend;
  ExecBackend* backend = o.device_backend;
  if (backend == nullptr) {
    if (o.backend != "cpu")
      return Status::bad_input("--backend " + o.backend + ": no such backend in this build (the CUDA backend needs a "
                               "build with the CUDA toolkit and a GPU at run time)");
    own_backend = make_cpu_backend();
    backend = own_backend.get();
  }
  TrackingAllocator& alloc = backend->allocator();
  if (o.memory_limit > 0) alloc.set_limit(o.memory_limit);
  const PrecisionScheme ps = precision_scheme(e.job);
  ModelConfig mc;
  mc.spec = e.model;
  mc.job = e.job;
  mc.plan = e.plan;
  mc.storage = ps.storage;
  mc.grad = ps.grad;
  mc.options = o.model;
  mc.options.seed = o.seed;
  mc.comm = comm ? o.comm : nullptr;
  mc.stage = comm ? r.coords.pp : 0;
  OpTimeLog op_times;  // CPU backend: every op timed, kept from the measured steps (calibration)
  mc.op_times = backend->name() == "cpu" ? &op_times : nullptr;

  auto fail_oom = [&](const Status& st, const Where& w) -> Result<RunReport> {
    if (!alloc.last_oom()) return st;
    r.oom = true;
    r.oom_message = st.message();
    r.oom_where = w;
    r.memory = alloc.stats();
    r.device = backend->device_memory();
    r.backend = backend->name();
    r.device_name = backend->device_name();
    const Explanation ex = explain_plan(e.model, e.cluster, e.job, e.plan, 1, 0);
    for (const PlanChange& c : ex.changes) {
      if (r.fixes.size() >= 5) break;
      r.fixes.push_back(c.description + (c.fits ? " (fits" : " (does not fit") + ", " +
                        std::to_string(static_cast<int>(c.throughput_change * 100)) + "% throughput)");
    }
    compare(r);
    return r;
  };

  // The kernel's count of resident memory from here on (process_memory.h).
  const bool resident_witness = backend->name() == "cpu" && reset_resident_peak();
  const double resident_before = resident_witness ? resident_memory().rss : 0;
  Result<std::unique_ptr<Model>> model = backend->build_model(mc);
  if (!model) return fail_oom(model.status(), Where{Phase::other, -1, "weights and gradients"});
  std::unique_ptr<DataParallel> dpar;
  std::optional<TrainerShard> shard;
  // Parameters are replicated over DP x CP: both sum gradients and ZeRO partitions over them.
  if (comm && e.plan.dp * e.plan.cp > 1) {  // TP-only plans have no DP group to synchronise
    Result<std::unique_ptr<DataParallel>> d = DataParallel::create(alloc, **model, *o.comm, e.plan.zero, o.bucket_bytes,
                                                                       backend->bucket_ops());
    if (!d) return fail_oom(d.status(), Where{Phase::other, -1, "data-parallel buckets"});
    dpar = std::move(*d);
    if (e.plan.zero >= 1) shard = dpar->shard();
  }
  Result<std::unique_ptr<Trainer>> trainer = backend->create_trainer(**model, e.job, ps, o.trainer, shard ? &*shard : nullptr);
  if (!trainer) return fail_oom(trainer.status(), Where{Phase::other, -1, "optimizer states and master weights"});
  // Routed experts differ over EP: without ZeRO their squares are summed over EP here; with
  // ZeRO-1 every rank's partition is summed over DP x CP by the shard, which covers them.
  // They are whole on every TP rank (MoE under TP: experts are split over EP only), so they
  // are not summed over TP.
  const bool ep_norm = e.plan.ep > 1 && e.plan.zero == 0;
  if (comm && (e.plan.tp > 1 || e.plan.pp > 1 || ep_norm))
    (*trainer)->set_norm_reduce([c = o.comm, ep_norm](double split_sq, double expert_sq, double rep_sq) {
      (void)c->all_reduce_sum(&split_sq, 1, DType::f64, Group::tp);
      if (ep_norm) (void)c->all_reduce_sum(&expert_sq, 1, DType::f64, Group::ep);
      double x = split_sq + expert_sq + rep_sq;
      (void)c->all_reduce_sum(&x, 1, DType::f64, Group::pp);
      return x;
    });
  std::unique_ptr<Pipeline> pipe;
  if (comm && e.plan.pp > 1) {
    Result<std::unique_ptr<Pipeline>> pl = Pipeline::create(alloc, **model, *o.comm, backend->bucket_ops());
    if (!pl) return fail_oom(pl.status(), Where{Phase::other, -1, "pipeline buffers"});
    pipe = std::move(*pl);
  }
  Model& m = **model;
  Trainer& t = **trainer;
  // Global micro-batch index of this rank's first micro-batch in a step: DP rank d takes
  // the d-th contiguous share, so data and dropout equal a single-process run's.
  const int64_t dp_rank = comm ? comm->rank(Group::dp) : 0;
  const int64_t dp_size = comm ? comm->size(Group::dp) : 1;

  const int total = o.warmup + o.steps;
  PackedBatch batch;
  std::vector<double> times;
  const int64_t accum = e.plan.grad_accum;
  const int64_t global_accum = accum * dp_size;
  const double denom = static_cast<double>(global_accum * b * s);  // every target of the global step counts (no ignored ids)
  for (int step = 0; step < total; ++step) {
    if (step == o.warmup) alloc.reset_peaks(), op_times.clear();  // measured peaks and op times cover the measured steps
    const auto t0 = std::chrono::steady_clock::now();
    m.zero_grads();
    double loss = 0;
    if (pipe) {  // every micro-batch of the step through this stage under the schedule
      std::vector<PackedBatch> batches(static_cast<size_t>(accum));
      for (int64_t mb = 0; mb < accum; ++mb) {
        const int64_t g = step * global_accum + dp_rank * accum + mb;
        if (loader) loader->next(b, &batches[static_cast<size_t>(mb)]);
        else synthetic_batch(b, s, e.model.vocab, o.seed * 1000003 + static_cast<uint64_t>(g), &batches[static_cast<size_t>(mb)]);
      }
      Result<double> l = pipe->run_step(
          accum,
          [&](int64_t j) {
            PackedBatch& pb = batches[static_cast<size_t>(j)];
            return Batch{pb.tokens.data(), pb.targets.data(), loader ? pb.doc_ids.data() : nullptr};
          },
          [&](int64_t j) { return o.seed + static_cast<uint64_t>(step * global_accum + dp_rank * accum + j); }, t.loss_scale(), denom);
      if (!l) return fail_oom(l.status(), m.where());
      loss = *l;
      if (Status st = o.comm->all_reduce_sum(&loss, 1, DType::f64, Group::pp); !st) return st;  // from the last stage
      // The tied sum reads the embedding's gradient partition (ZeRO 2, 3): complete first.
      if (dpar)
        if (Status st = dpar->complete_pending(); !st) return st;
      if (Status st = pipe->sync_tied_embedding(); !st) return st;
    }
    for (int64_t mb = 0; mb < (pipe ? 0 : accum); ++mb) {
      if (loader) loader->next(b, &batch);
      const int64_t g = step * global_accum + dp_rank * accum + mb;  // global micro-batch index
      if (!loader) synthetic_batch(b, s, e.model.vocab, o.seed * 1000003 + static_cast<uint64_t>(g), &batch);
      Result<double> l = m.forward_backward({batch.tokens.data(), batch.targets.data(), loader ? batch.doc_ids.data() : nullptr},
                                            t.loss_scale(), denom, o.seed + static_cast<uint64_t>(g));
      if (!l) return fail_oom(l.status(), m.where());
      loss += *l;
    }
    if (const char* die = std::getenv("LLMPLAN_TEST_DIE_AT_STEP"); die && comm && comm->rank(Group::world) == comm->size(Group::world) - 1 &&
                                                                    std::atoi(die) == step)
      std::_Exit(9);  // tests: the last rank dies mid-step, before the gradient sync
    if (dpar) {
      if (Status st = dpar->sync_grads(); !st) return st;
      // Each DP x CP rank's loss is its tokens' share of the global mean.
      if (Status st = o.comm->all_reduce_sum(&loss, 1, DType::f64, Group::dp_cp); !st) return st;
      // A proxy has no peers to add their shares: report its own tokens' mean loss, which
      // estimates the global one (each DP rank holds 1/dp of the step's tokens).
      if (o.comm->modelled()) loss *= o.comm->size(Group::dp_cp);
    }
    alloc.set_phase(Phase::optimizer);
    const StepOutcome so = t.step();
    if (Status st = t.last_error(); !st) return st;
    if (dpar && !so.skipped)
      if (Status st = dpar->gather_weights(); !st) return st;
    if (Status st = backend->synchronize(); !st) return st;  // the step ends when the device is done
    alloc.set_phase(Phase::other);
    if (o.comm) o.comm->progress();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    StepMeasure sm;
    sm.step = step;
    sm.warmup = step < o.warmup;
    sm.loss = loss;
    sm.time_s = dt;
    sm.tokens_per_s = static_cast<double>(r.tokens_per_step) / dt;
    sm.skipped = so.skipped;
    sm.loss_scale = so.loss_scale;
    sm.grad_norm = so.grad_norm;
    sm.peak_bytes = alloc.stats().peak_total;
    r.steps.push_back(sm);
    if (o.on_step_measured) o.on_step_measured(sm);
    if (!sm.warmup) times.push_back(dt);
    if (o.on_step) o.on_step(step, total, sm.warmup, loss, dt, sm.tokens_per_s);
    // Outside fp16's loss scaling (which skips an overflowing step and lowers the scale), a
    // non-finite loss or gradient norm (the trainer then skips the step) means training
    // diverged: every later step would be skipped and the run recorded as a good one.
    if (r.executed.job.precision != Precision::fp16 && (!std::isfinite(loss) || so.skipped))
      return Status::runtime("step " + std::to_string(step + 1) + ": the " + (std::isfinite(loss) ? "gradient norm" : "loss") +
                             " is not finite (training diverged: lower --lr); stopped");
  }
  r.memory = alloc.stats();  // before a ZeRO-3 model is gathered whole for on_done
  if (resident_witness) {
    r.resident_peak.name = "peak resident (kernel)";
    r.resident_peak.measured = resident_memory().peak - resident_before;
    r.resident_peak.note = "VmHWM over the run less VmRSS before the model was built, vs the allocator-side peak predicted";
  }
  r.device = backend->device_memory();
  r.backend = backend->name();
  r.device_name = backend->device_name();
  if (o.on_done) {
    if (dpar)
      if (Status st = dpar->unshard_weights(); !st) return st;
    o.on_done(m);
  }
  r.median_step_s = median(times);
  r.op_times = op_times.entries();
  r.tokens_per_s = r.median_step_s > 0 ? static_cast<double>(r.tokens_per_step) / r.median_step_s : 0;
  r.model_flops_per_s = r.median_step_s > 0 ? r.predicted_time.model_flops / r.median_step_s : 0;
  compare(r);
  r.resident_peak.predicted = r.predicted_alloc.total;
  r.step_time.name = "step time";
  r.step_time.predicted = r.predicted_time.total;
  r.step_time.measured = r.median_step_s;
  r.step_time.note = "median of measured steps; predicted on " + e.cluster.gpu.name;
  return r;
}

nlohmann::json report_to_json(const RunReport& r) {
  using nlohmann::json;
  json j;
  j["label"] = r.label;
  j["rank"] = r.rank;
  j["coords"] = {{"tp", r.coords.tp}, {"cp", r.coords.cp}, {"dp", r.coords.dp}, {"pp", r.coords.pp}};
  j["communication"] = r.comm_modelled ? "modelled (rank proxy)" : "executed";
  j["executed"] = {{"model", r.executed.model.name},
                   {"layers", r.executed.model.layers},
                   {"micro_batch", r.executed.plan.micro_batch},
                   {"grad_accum", r.executed.plan.grad_accum},
                   {"seq_len", r.executed.job.seq_len},
                   {"precision", to_string(r.executed.job.precision)},
                   {"amp", to_string(r.executed.job.amp)},
                   {"recompute", to_string(r.executed.plan.recompute)},
                   {"flash_attention", r.executed.plan.flash_attention},
                   {"tokens_per_step", r.tokens_per_step}};
  json steps = json::array();
  for (const StepMeasure& s : r.steps)
    steps.push_back({{"step", s.step}, {"warmup", s.warmup}, {"loss", s.loss}, {"time_s", s.time_s},
                     {"tokens_per_s", s.tokens_per_s}, {"skipped", s.skipped}, {"loss_scale", s.loss_scale},
                     {"grad_norm", s.grad_norm}, {"peak_bytes", s.peak_bytes}});
  j["steps"] = steps;
  json mem = json::array();
  for (const CompareLine& l : r.memory_lines) {
    json x = {{"name", l.name}, {"predicted_bytes", l.predicted}, {"gpu_only", l.gpu_only}, {"note", l.note}};
    if (!l.gpu_only) {
      x["measured_bytes"] = l.measured;
      x["rel_error"] = l.rel_error();
    }
    mem.push_back(x);
  }
  j["memory"] = mem;
  json per_cat = json::object();
  for (int c = 0; c < kCategories; ++c) per_cat[to_string(static_cast<Category>(c))] = r.memory.peak[static_cast<size_t>(c)];
  j["measured_peak_per_category"] = per_cat;
  j["measured_peak_bytes"] = r.memory.peak_total;
  j["measured_peak_phase"] = to_string(r.memory.peak_phase);
  j["predicted_gpu"] = memory_to_json(r.predicted_gpu);
  j["predicted_time"] = time_to_json(r.predicted_time);
  if (!r.resident_peak.name.empty())
    j["resident_peak"] = {{"predicted_bytes", r.resident_peak.predicted}, {"measured_bytes", r.resident_peak.measured}, {"note", r.resident_peak.note}};
  j["step_time"] = {{"predicted_s", r.step_time.predicted}, {"measured_s", r.step_time.measured},
                    {"rel_error", r.step_time.rel_error()}};
  j["tokens_per_s"] = r.tokens_per_s;
  j["backend"] = r.backend;
  j["device_name"] = r.device_name;
  j["model_flops_per_s"] = r.model_flops_per_s;
  j["step_time_s"] = r.step_time.measured;
  j["predicted_step_time_s"] = r.step_time.predicted;
  if (r.device.measured) {
    j["peak_memory_bytes"] = r.device.used_peak;
    j["device_memory"] = {{"context", r.device.context}, {"libraries", r.device.libraries},
                          {"blas_workspace", r.device.blas_workspace}, {"reserved_peak", r.device.reserved_peak},
                          {"used_peak", r.device.used_peak}, {"used_at_start", r.device.used_at_start}};
  } else {
    j["peak_memory_bytes"] = r.memory.peak_total;
  }
  j["predicted_peak_memory_bytes"] = r.device.measured ? r.predicted_gpu.total : r.predicted_alloc.total;
  j["oom"] = r.oom;
  if (r.oom) {
    j["oom_detail"] = {{"message", r.oom_message}, {"phase", to_string(r.oom_where.phase)},
                       {"layer", r.oom_where.layer}, {"part", r.oom_where.part}, {"fixes", r.fixes}};
  }
  return j;
}

}  // namespace llmplan::exec
