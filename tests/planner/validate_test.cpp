// `llmplan validate` against the shipped published runs (data/reference): the accuracy
// bounds of the time and memory models, the source FLOP formulas, the analytic ZeRO /
// DeepSpeed-estimator references, the reader's errors, and that the shipped Efficiency
// defaults are still what `llmplan validate --fit` finds. A change that loses accuracy
// fails here; tighten the bounds when the model improves.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "planner/cost/time_model.h"
#include "planner/io/presets.h"
#include "planner/spec/spec_json.h"
#include "planner/spec/units.h"
#include "planner/validate/validate.h"

namespace llmplan {
namespace {

struct Shipped {
  ReferenceSet set;
  PresetRegistry presets;
  std::vector<ValidationRow> rows;
};

// Loaded once: validating all 187 records takes milliseconds, but the sweeps that fill
// missing knobs and the fit are worth sharing between tests.
const Shipped& shipped() {
  static const Shipped s = [] {
    Result<ReferenceSet> set = load_reference_runs(default_reference_path());
    EXPECT_TRUE(set.ok()) << set.status().message();
    Result<PresetRegistry> reg = PresetRegistry::load(default_data_root());
    EXPECT_TRUE(reg.ok()) << reg.status().message();
    Shipped out{std::move(*set), std::move(*reg), {}};
    out.rows = validate_records(out.set, out.presets, ValidationOptions{});
    return out;
  }();
  return s;
}

const SummaryLine& line(const std::vector<SummaryLine>& lines, const std::string& group, bool throughput, bool assumed) {
  for (const SummaryLine& l : lines)
    if (l.group == group && l.throughput == throughput && l.assumed == assumed) return l;
  static const SummaryLine none;
  ADD_FAILURE() << "no summary line " << group << (throughput ? " throughput" : " memory") << (assumed ? " assumed" : "");
  return none;
}
// The line is a reference into `lines`: a temporary vector would be gone before it is read
// (ASan found `line(summarize(rows), ...)` reading freed memory).
const SummaryLine& line(std::vector<SummaryLine>&& lines, const std::string& group, bool throughput, bool assumed) = delete;

const ValidationRow& row(const std::string& id, bool throughput) {
  for (const ValidationRow& r : shipped().rows)
    if (r.id == id && r.throughput == throughput) return r;
  static const ValidationRow none;
  ADD_FAILURE() << "no row " << id;
  return none;
}

// ---------------------------------------------------------------- FLOP formulas

// formulas.md §2c consistency check: the MPT-7B row on 8 x A100-80GB at seq 2048
// (4641 tok/s/GPU, N = 6,658,859,008) is 200.4 model TFLOP/s by llm-foundry's formula.
TEST(SourceFlops, LlmFoundryReproducesTheMpt7bRow) {
  const double per_token = llm_foundry_flops(1, 2048, 6658859008.0, 32, 4096, false) / 2048;
  EXPECT_NEAR(per_token * 4641 / 1e12, 200.4, 0.05);
  // HFU multiplies by 4/3 with activation checkpointing.
  EXPECT_DOUBLE_EQ(llm_foundry_flops(1, 2048, 1e9, 32, 4096, true), 4.0 / 3.0 * llm_foundry_flops(1, 2048, 1e9, 32, 4096, false));
}

// Narayanan et al. 2021 Eq. 3 with c = 4 is the 96·B·s·l·h² form; as written (and as
// Megatron-DeepSpeed's throughput_calculator computes it) c scales every term, the logit
// term included (formulas.md §2a's remark that it does not is about the paper's c = 4).
TEST(SourceFlops, MegatronEq3) {
  const double B = 512, s = 2048, l = 24, h = 2304, V = 51200;
  const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(megatron_eq3_flops(B, s, l, h, V, 4) / eq3, 1.0, 1e-12);
  EXPECT_NEAR(megatron_eq3_flops(B, s, l, h, V, 3) / eq3, 0.75, 1e-12);
  // The 1.7B row: 137 TFLOP/s per GPU on 32 GPUs is a 3.53 s iteration.
  EXPECT_NEAR(eq3 / (137e12 * 32), 3.53, 0.01);
}

// Megatron-Core's count for a standard GPT is 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)).
TEST(SourceFlops, MegatronCoreForStandardGpt) {
  const double B = 192, s = 4096, L = 24, h = 2048, V = 131072;
  const double expected = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
  EXPECT_NEAR(megatron_core_flops(B, s, L, h, 16, 16, 128, 4 * h, false, V) / expected, 1.0, 1e-12);
  // GQA shrinks the K/V projections; SwiGLU's third matrix adds half the MLP.
  EXPECT_LT(megatron_core_flops(B, s, L, h, 16, 4, 128, 4 * h, false, V), megatron_core_flops(B, s, L, h, 16, 16, 128, 4 * h, false, V));
}

TEST(SourceFlops, ChowdheryIsSixNPlusFullAttention) {
  EXPECT_DOUBLE_EQ(chowdhery_flops(2, 1024, 1e9, 12, 768), 2 * 1024 * (6e9 + 12.0 * 12 * 768 * 1024));
}

// ---------------------------------------------------------------- accuracy bounds

// The throughput targets of the issue: median |error| <= 10% (met: 5.1% overall, 5.1%
// on the held-out half) and no record worse than 25% (met: max 24.9%, the held-out MPT
// 3B fp8 run at seq 32768). llm.c's GPT-2 124M ("up to ~60%" MFU, a best-step claim) was
// at -26.6% until the time model counted llm.c's fused classifier (6 bytes per logit
// against the fp32 aten loss's 36: framework_efficiency); it is now at -14.5%. History:
// before the fit's objective counted every record's excess over a margin (fit_efficiency),
// 3 records were over 25% (MPT 760m on A100-80GB at seq 512, which runs slower than the
// same model at seq 2048 and than the A100-40GB run at seq 512: 29.1%; llm.c 124M: 25.7%;
// torchtitan's 8B CP2 run: 25.5%) with a median of 5.0% (5.2% held out). The bounds below
// are the ones reached, with a little margin, so a regression fails.
TEST(ValidateShipped, ThroughputOfFullySpecifiedRecords) {
  const std::vector<SummaryLine> lines = summarize(shipped().rows);
  const SummaryLine& all = line(lines, "ALL", true, false);
  EXPECT_GE(all.all.n, 150);
  EXPECT_LE(all.all.median_abs, 0.10);  // the target
  EXPECT_LE(all.all.median_abs, 0.06);  // reached: 5.1%
  EXPECT_LE(all.held_out.median_abs, 0.06) << "held-out half (not fitted)";  // reached: 5.1%
  EXPECT_LE(all.held_out.max_abs, 0.25) << "held-out half: " << all.held_out.worst_id;  // the target; reached 24.9%
  EXPECT_LE(all.all.max_abs, 0.25) << all.all.worst_id;  // the target; reached 24.9%
  int within = 0, n = 0;
  for (const ValidationRow& r : shipped().rows) {
    if (!r.throughput || r.skipped || r.assumed) continue;
    ++n;
    within += std::fabs(r.error) <= 0.25;
  }
  EXPECT_EQ(within, n) << within << " of " << n << " within 25%";  // reached: 154 of 154

  // Per source group: TP/PP-heavy, FSDP-only and FSDP+TP/PP/CP behave differently.
  const std::map<std::string, std::pair<double, double>> bounds = {
      // Narayanan's rows were all over-predicted by 5-12% with the 12%-margin fit
      // (tp_overlap 0.40); the 17%-margin fit (tp_overlap 0.50) has them at -0.5 to +5%.
      // Megatron's GPT trains with attention and hidden dropout 0.1 (its masks now counted).
      {"narayanan2021_table1", {0.06, 0.07}},  // reached 3.2% / 5.3%
      {"mpt", {0.06, 0.25}},                   // reached 5.1% / 24.9%
      // Worse in median than with the 12%-margin fit (5.7%; held out 1.8% -> 7.1%), better
      // at the worst (24.1% -> 16.7%).
      {"torchtitan", {0.09, 0.19}},            // reached 8.0% / 16.7%
      {"llmc", {0.17, 0.17}},                  // reached 14.9% / 15.2% ("up to ~60%", "~50%" MFU claims)
  };
  for (const auto& [group, b] : bounds) {
    const SummaryLine& l = line(lines, group, true, false);
    EXPECT_GT(l.all.n, 0) << group;
    EXPECT_LE(l.all.median_abs, b.first) << group;
    EXPECT_LE(l.all.max_abs, b.second) << group << " worst " << l.all.worst_id;
  }
}

// Records with null plan knobs are predicted with the sweep's fastest fitting plan and
// reported apart; the bound is loose because the knobs are guesses.
TEST(ValidateShipped, AssumedRecordsAreKeptApartAndListTheirRules) {
  int assumed = 0;
  for (const ValidationRow& r : shipped().rows) {
    if (r.skipped) continue;
    EXPECT_EQ(r.assumed, !r.assumptions.empty()) << r.id;
    if (r.assumed && r.throughput) {
      ++assumed;
      EXPECT_FALSE(r.fitting_subset) << r.id;
    }
  }
  EXPECT_GE(assumed, 6);  // 7: the torchtitan 405B rows gained their micro-batch from torchtitan's default
  const std::vector<SummaryLine> lines = summarize(shipped().rows);
  const SummaryLine& all = line(lines, "ALL", true, true);
  EXPECT_LE(all.all.median_abs, 0.25);  // reached: 12.8% (Megatron-Core, torchtitan 405B, DeepSpeed-Azure)
  const ValidationRow& mcore = row("mcore_h100_weak_7.1B", true);
  bool sweep_rule = false;
  for (const std::string& a : mcore.assumptions) sweep_rule |= a.find("micro_batch=") == 0 && a.find("sweep") != std::string::npos;
  EXPECT_TRUE(sweep_rule) << "micro_batch is null in the record: the sweep must fill it and say so";
}

// Megatron-Core's weak-scaling table (H100, 48 data-parallel replicas, global batch 192 to
// 1152, so one or a few micro-batches per step): the DP reduce-scatter and all-gather are
// a large share of the step and run overlapped (--overlap-grad-reduce
// --overlap-param-gather). While the overlap was a fitted constant near 0 the 32B row was
// predicted 38% slow; as a fact of Megatron-Core's code, charged its HBM traffic, the six
// rows are within 10%.
TEST(ValidateShipped, MegatronWeakScalingHidesItsDataParallelTraffic) {
  const std::vector<SummaryLine> lines = summarize(shipped().rows);
  const SummaryLine& weak = line(lines, "mcore_h100_weak", true, true);
  EXPECT_EQ(weak.all.n, 6);
  EXPECT_LE(weak.all.median_abs, 0.05);  // 3.3%
  EXPECT_LE(weak.all.max_abs, 0.11) << weak.all.worst_id;  // 8.8%
  EXPECT_GT(row("mcore_h100_weak_32B", true).error, -0.10);
}

// A hidden collective still moves its bytes through HBM: the exposed DP time of a step
// whose reduction is wholly hidden is its HBM traffic at the memory's bandwidth, by hand.
TEST(DpExposed, HiddenCollectivesCostTheirHbmTraffic) {
  DpStep d;
  d.link.bandwidth = 100e9;
  d.hbm_bandwidth = 2000e9;
  d.grads = {DpKind::reduce_scatter, 1e9, 1, 0.5};
  d.params = {DpKind::allgather, 1e9, 1, 0.25};
  Efficiency e;
  e.network = 0.8, e.memory = 0.5, e.overlap = 1, e.gather_overlap = 1;
  const double share = 100e9 * 0.8 / (2000e9 * 0.5);  // link bytes/s over HBM bytes/s = 0.08
  // Wholly hidden: 3 HBM bytes per received byte for the reduce-scatter, 2 for the gather.
  EXPECT_NEAR(dp_exposed_time(d, 4, 10, 10, e), 0.5 * 3 * share + 0.25 * 2 * share, 1e-12);
  // Nothing to hide behind: the durations themselves, no traffic term.
  e.overlap = 0, e.gather_overlap = 0;
  EXPECT_NEAR(dp_exposed_time(d, 4, 10, 10, e), 0.75, 1e-12);
  // Half the reduction hidden: the other half exposed, the hidden half's traffic.
  e.overlap = 0.025;  // 0.025 x 10 s of backward = 0.25 s
  EXPECT_NEAR(dp_exposed_time(d, 4, 10, 10, e), 0.25 + 0.25 * 3 * share + 0.25, 1e-12);
  // ZeRO-3: every micro-batch gathers twice and reduces once.
  d.per_microbatch = true;
  e.overlap = 1, e.gather_overlap = 1;
  EXPECT_NEAR(dp_exposed_time(d, 4, 10, 10, e), 4 * (0.5 * 3 * share + 2 * 0.25 * 2 * share), 1e-12);
}

// Interleaved sends that overlap the next chunk (Megatron-Core's overlap_p2p_comm) cost
// only the fill and drain and what outlasts a chunk; blocking sends cost every hop.
TEST(PpExposed, OverlappedSendsCostOnlyWhatOutlastsAChunk) {
  ParallelPlan p;
  p.pp = 4, p.vpp = 2;
  CriticalStage w;
  w.fwd = 0.010, w.bwd = 0.020;  // per micro-batch on the stage: chunks of 5 and 10 ms
  Efficiency e;
  const double hop = 0.002, md = 8;
  // Blocking: 2 (pp - 2) fill/drain hops + one each way per micro-batch per chunk.
  EXPECT_NEAR(pp_exposed_time(p, md, hop, w, e), (2 * 2 + 2 * 8 * 2) * hop, 1e-15);
  e.pp_p2p_overlap = 1;
  // Overlapped: each send shorter than its chunk is hidden; the fill and drain are not.
  EXPECT_NEAR(pp_exposed_time(p, md, hop, w, e), 2 * 2 * hop, 1e-15);
  // A 7 ms send outlasts the 5 ms forward chunk by 2 ms, not the 10 ms backward one.
  EXPECT_NEAR(pp_exposed_time(p, md, 0.007, w, e), 2 * 2 * 0.007 + 8 * 2 * 0.002, 1e-15);
  // Without interleaving Megatron sends blocking (batch_p2p_comm) whatever the stack says.
  p.vpp = 1;
  EXPECT_NEAR(pp_exposed_time(p, md, hop, w, e), (2 * 2 + 2 * 8) * hop, 1e-15);
  p.pp = 1;
  EXPECT_EQ(pp_exposed_time(p, md, hop, w, e), 0);
}

// Only records whose null fields cannot be filled by a stated rule are skipped.
TEST(ValidateShipped, SkipsOnlyWithAReason) {
  std::map<std::string, int> reasons;
  for (const ValidationRow& r : shipped().rows)
    if (r.skipped) ++reasons[r.skip_reason];
  EXPECT_EQ(reasons["missing seq_len"], 8);  // torchtitan async-TP rows
  int total = 0;
  for (const auto& [reason, n] : reasons) total += n;
  EXPECT_LE(total, 10);  // + DeepSpeed-Azure 1T/2T: no plan fits (ZeRO-3 gathers two 8-16B-param layers)
}

// Every record with oom: false ran; the planner says "does not fit" for none of those it
// costs (MPT 350M at micro-batch 18 on 40 GB fits under llm-foundry's loss: flash-attn's
// cross-entropy, 4 B per logit, where the executor's 6 B did not). A record for which no
// plan with its published knobs fits is a memory error too, not a quiet skip: none now
// (DeepSpeed-Azure's 1T and 2T fit once DeepSpeed's ZeRO-3 gathers modules within its
// window rather than two 8-16B-parameter layers, the 2T with cpu_checkpointing).
TEST(ValidateShipped, FewRunsThatRanArePredictedNotToFit) {
  int oom = 0;
  std::set<std::string> no_plan;
  for (const ValidationRow& r : shipped().rows) {
    if (!r.throughput || !r.predicted_oom) continue;
    if (r.skipped) no_plan.insert(r.id);
    else ++oom;
  }
  EXPECT_EQ(oom, 0);
  EXPECT_EQ(no_plan, std::set<std::string>{});
}

// A measured peak above the largest prediction over every stack's conventions is the error
// that says "fits" for a run that dies. NOT met yet: 10 of the 15 memory rows with an
// architecture are above it (8 of torchtitan's 12, by 1-34%; BERT-large's nvidia-smi figure;
// the ZeRO paper's checkpointed GPT-2 activations). The bound keeps it from getting worse.
TEST(ValidateShipped, MeasuredPeaksAgainstTheStacksUpperEnd) {
  int rows = 0, above = 0;
  for (const ValidationRow& r : shipped().rows) {
    if (r.throughput || r.skipped || r.predicted_upper <= 0) continue;
    ++rows;
    EXPECT_GE(r.predicted_upper, r.predicted) << r.id;  // the upper end covers the record's own stack
    above += r.published > r.predicted_upper;
  }
  EXPECT_EQ(rows, 15);
  // 7: the 70B 2D and the four 405B torchtitan runs (3.8-14.6% above: torchtitan logs the
  // caching allocator's reserved peak), BERT-large on a V100, the ZeRO paper's checkpointed
  // activations. Was 10 before the loss's reserved blocks and torchtitan's pipelined FSDP
  // conventions (caching_allocator.h, zero3_pp_unsharded, pp_buffers_per_microbatch).
  EXPECT_LE(above, 7);
}

// The ZeRO paper's model-state figures (Rajbhandari et al. 2020 §5, 7.5B, N_d = 64):
// exact to the paper's rounding (it prints 1.9 GB for 1.875 GB).
TEST(ValidateShipped, ZeroPaperModelStatesToRounding) {
  for (const char* id : {"zero_paper_7p5B_nd64_baseline_dp", "zero_paper_7p5B_nd64_zero1_Pos", "zero_paper_7p5B_nd64_zero2_Pos+g",
                         "zero_paper_7p5B_nd64_zero3_Pos+g+p"}) {
    const ValidationRow& r = row(id, false);
    EXPECT_FALSE(r.skipped) << id << ": " << r.skip_reason;
    EXPECT_FALSE(r.assumed) << id;
    EXPECT_LE(std::fabs(r.error), 0.015) << id;
  }
}

// DeepSpeed's estimator (t5-3b, 2851M params, 8 GPUs). ZeRO-2 with optimizer offload is
// 2 bytes/param on the GPU: exact. The others differ by convention, not by rounding, and
// are pinned to the planner's values so that a change of convention is deliberate:
// - ZeRO-2, no offload: the record comes from DeepSpeed's older doc formula 4Ψ + 16Ψ/N
//   (README); the planner's ZeRO paper convention gives 2Ψ + 14Ψ/N = 9.96 GiB.
// - ZeRO-3: the estimator counts 18 bytes/param (it adds an fp32 gradient partition) plus
//   4 x its largest layer (32M params, given only in the record's notes); the planner
//   counts 16/N: 5.31 GiB without offload, 2Ψ/N = 0.66 GiB with offload.
// - ZeRO-3 with parameter offload: the planner does not model parameter offload (the
//   record's `offload` cannot say which state is offloaded), so 0.66 against 0.12.
TEST(ValidateShipped, DeepSpeedEstimatorModelStates) {
  EXPECT_LE(std::fabs(row("deepspeed_estimator_t5_3b_8gpu_zero2_offload_optimizer_cpu", false).error), 0.005);
  const double psi = 2851e6;
  EXPECT_NEAR(row("deepspeed_estimator_t5_3b_8gpu_zero2_no_offload", false).predicted, (2 * psi + 14 * psi / 8) / kGiB, 1e-9);
  EXPECT_NEAR(row("deepspeed_estimator_t5_3b_8gpu_zero3_no_offload_zero_init", false).predicted, 16 * psi / 8 / kGiB, 1e-9);
  EXPECT_NEAR(row("deepspeed_estimator_t5_3b_8gpu_zero3_offload_optimizer_zero_init", false).predicted, 2 * psi / 8 / kGiB, 1e-9);
  EXPECT_NEAR(row("deepspeed_estimator_t5_3b_8gpu_zero3_offload_all_zero_init", false).predicted, 2 * psi / 8 / kGiB, 1e-9);
}

// Measured memory (torchtitan: PyTorch's peak reserved memory, max over ranks). The
// planner describes torchtitan with its own conventions (framework_memory_options):
// per-operator selective checkpointing, F.cross_entropy on fp32-upcast logits replayed
// through the caching allocator (12 bytes per logit allocated at the loss backward, 14
// reserved; 16 and 18 under TP's loss_parallel), FSDP2's root unit (embedding, norm,
// output) gathered from forward to the end of backward, and under PP the stage's
// parameters gathered and its gradients accumulated unsharded in fp32 all step. Before
// them: median 40.1%, max 86.3%, none within 10%. Now 8 of 12 within 10%; NOT met by
// - the 70B FSDP+TP run (-8.6%, within) and the 405B PP runs (-9% to -20%): Float8 with
//   FSDP float8 all-gathers and AsyncTP's symmetric-memory buffers are not modelled;
// - the 2025 H200 run (+42%): the same per-GPU work as the 2024 8-GPU Float8 run, which
//   measured 62 GiB beside model states against this run's 44 GiB; torchtitan compiles
//   the loss since 2025 (components/loss.py), which the record's fields cannot say.
// Bounds reached, with margin.
TEST(ValidateShipped, MeasuredMemory) {
  const std::vector<SummaryLine> lines = summarize(shipped().rows);
  const SummaryLine& tt = line(lines, "torchtitan", false, false);
  EXPECT_EQ(tt.all.n, 12);
  EXPECT_LE(tt.all.median_abs, 0.10);  // reached 7.2%
  EXPECT_LE(tt.all.max_abs, 0.45) << tt.all.worst_id;  // reached 42.5% (H200 run, predicted above)
  int within = 0;
  for (const ValidationRow& r : shipped().rows) within += !r.throughput && !r.skipped && !r.assumed && r.group == "torchtitan" && std::fabs(r.error) <= 0.10;
  EXPECT_GE(within, 7);  // reached: 8 of 12 within 10%
  // BERT-large fine-tuning on one V100, nvidia-smi: vocab derived from params (assumed).
  const ValidationRow& bert = row("hf_memory_anatomy_bert_large_v100", false);
  EXPECT_TRUE(bert.assumed);
  EXPECT_LE(std::fabs(bert.error), 0.15);  // reached -10.8%
  // The ZeRO paper's activation figures are "about" values: order of magnitude only.
  for (const char* id : {"zero_paper_gpt2_1p5B_activations_no_ckpt", "zero_paper_gpt2_1p5B_activations_ckpt"}) {
    const ValidationRow& r = row(id, false);
    EXPECT_GT(r.predicted / r.published, 0.3) << id;
    EXPECT_LT(r.predicted / r.published, 3.0) << id;
  }
}

// ---------------------------------------------------------------- the fit

TEST(ValidateFit, HalvesAreDeterministicAndDisjoint) {
  std::map<std::string, std::pair<int, int>> halves;  // group -> (fitted, held out)
  for (const ValidationRow& r : shipped().rows) {
    if (!r.throughput || r.skipped || r.assumed) continue;
    (r.fitting_subset ? halves[r.group].first : halves[r.group].second)++;
  }
  for (const auto& [group, h] : halves) EXPECT_LE(std::abs(h.first - h.second), 1) << group;
  EXPECT_TRUE(in_fitting_subset(0));
  EXPECT_FALSE(in_fitting_subset(1));
}

// A file marked evaluation_only (records added after the constants were fitted, to measure
// them) keeps every record out of the fitting half, also when read with other files; the
// shipped Megatron-Bridge 25.11/26.02 dense file is one, and the other shipped files are not.
TEST(ValidateFit, EvaluationOnlyFilesNeverEnterTheFittingHalf) {
  const std::string dense = default_data_root() + "/data/reference/published_runs_mbridge_2511_2602_dense.json";
  Result<ReferenceSet> one = load_reference_runs(dense);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_TRUE(one->evaluation_only);
  Result<ReferenceSet> both = load_reference_files({default_reference_path(), dense});
  ASSERT_TRUE(both.ok()) << both.status().message();
  const Result<PresetRegistry> presets = PresetRegistry::load(default_data_root());
  ASSERT_TRUE(presets.ok());
  int eval_compared = 0, fitted_elsewhere = 0;
  for (const ValidationRow& r : validate_records(*both, *presets, ValidationOptions{})) {
    if (!r.throughput || r.skipped || r.assumed) continue;
    if (r.group.rfind("mbridge2511", 0) == 0 || r.group.rfind("mbridge2602_perf", 0) == 0) {
      ++eval_compared;
      EXPECT_FALSE(r.fitting_subset) << r.id;
    } else if (r.fitting_subset) {
      ++fitted_elsewhere;
    }
  }
  EXPECT_GE(eval_compared, 20);
  EXPECT_GT(fitted_elsewhere, 50);
  nlohmann::json doc = {{"schema", "llmplan-reference-runs/1"}, {"description", ""}, {"evaluation_only", "yes"}, {"records", nlohmann::json::array()}};
  Result<ReferenceSet> bad = parse_reference_runs(doc, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("evaluation_only"), std::string::npos) << bad.status().message();
}

// The shipped Efficiency defaults are the fit's output: re-fitting from the prior cannot
// do better than them (stale defaults after a model change fail here: run
// `llmplan validate --fit` and paste the printed constants into planner/cost/time_model.h).
TEST(ValidateFit, ShippedDefaultsAreTheFitsOptimum) {
  const Shipped& s = shipped();
  ValidationOptions start;
  start.efficiency = fit_prior();
  const FitReport fit = fit_efficiency(s.set, s.presets, start);
  EXPECT_LT(fit.objective_fitted, fit.objective_start);
  EXPECT_GE(fit.rows, 70);
  const double shipped_objective = fit_objective(s.set, s.presets, ValidationOptions{});
  EXPECT_LE(shipped_objective, fit.objective_fitted + 1e-3);
}

// ---------------------------------------------------------------- the reader

nlohmann::json shipped_json() {
  Result<nlohmann::json> j = read_json_file(default_reference_path());
  EXPECT_TRUE(j.ok());
  return *j;
}

void expect_bad_input(const nlohmann::json& doc, const std::string& field, const std::string& what) {
  Result<ReferenceSet> r = parse_reference_runs(doc, "runs.json");
  ASSERT_FALSE(r.ok()) << field;
  EXPECT_EQ(r.status().exit_code(), 2);
  EXPECT_NE(r.status().message().find("runs.json"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
}

TEST(ValidateReader, DuplicateIdsAndDegreesOffTheGpuCountAreNamed) {
  nlohmann::json doc = shipped_json();
  doc["records"][5]["id"] = doc["records"][2]["id"];
  expect_bad_input(doc, "records[5].id", "is also records[2]'s");
  doc = shipped_json();
  nlohmann::json& r = doc["records"][0];
  ASSERT_TRUE(r["plan"]["dp"].is_number() && r["cluster"]["n_gpus"].is_number());
  r["plan"]["dp"] = r["plan"]["dp"].get<int>() * 2;
  expect_bad_input(doc, "records[0]", "but cluster.n_gpus is");
}

// Found by fuzz_reference_runs: each degree may be up to 10^7, and the reader multiplied
// all four in 64 bits (10^28: signed overflow, undefined behaviour) before comparing with
// n_gpus; with n_gpus null nothing was checked and prepare_degrees / world_size()
// multiplied them in int. The given degrees must now fit the record's GPUs (10^7 when
// n_gpus is null), checked through the file loader the CLI uses.
TEST(ValidateReader, HugeDegreesAreNamedNotAnOverflow) {
  nlohmann::json doc = {{"schema", "llmplan-reference-runs/1"}, {"description", "fuzz"}, {"records", nlohmann::json::array()}};
  nlohmann::json rec = shipped_json()["records"][0];  // narayanan2021_table1_1.7B, 32 GPUs
  ASSERT_EQ(rec["cluster"]["n_gpus"], 32);
  for (const char* d : {"dp", "tp", "pp", "cp"}) rec["plan"][d] = 10000000;
  doc["records"].push_back(rec);
  const std::string path = ::testing::TempDir() + "/llmplan_runs_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << doc.dump();
  Result<ReferenceSet> set = load_reference_files({path});
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().exit_code(), 2);
  EXPECT_NE(set.status().message().find(path + ": records[0]"), std::string::npos) << set.status().message();
  EXPECT_NE(set.status().message().find("dp*tp*pp*cp = 10000000*10000000*10000000*10000000 = more than 32 GPUs but cluster.n_gpus is 32"),
            std::string::npos)
      << set.status().message();
  std::remove(path.c_str());

  // One degree missing: the given ones must fit n_gpus.
  doc["records"][0]["plan"]["pp"] = nullptr;
  expect_bad_input(doc, "records[0]", "plan dp*tp*cp = 10000000*10000000*10000000 uses more than cluster.n_gpus = 32");
  // n_gpus null: at most 10^7 GPUs, and a missing degree is still allowed.
  doc["records"][0]["cluster"]["n_gpus"] = nullptr;
  expect_bad_input(doc, "records[0]", "uses more than the most GPUs a record may have, 10000000");
  doc["records"][0]["plan"]["dp"] = 8;
  doc["records"][0]["plan"]["tp"] = 4;
  doc["records"][0]["plan"]["cp"] = 1;
  EXPECT_TRUE(parse_reference_runs(doc, "runs.json").ok());
}

TEST(ValidateReader, MissingFieldIsNamed) {
  nlohmann::json doc = shipped_json();
  doc["records"][3]["plan"].erase("micro_batch");
  expect_bad_input(doc, "records[3].plan.micro_batch", "missing");
}

TEST(ValidateReader, WrongTypeUnknownFieldAndSchemaAreNamed) {
  nlohmann::json doc = shipped_json();
  doc["records"][5]["model"]["layers"] = "many";
  expect_bad_input(doc, "records[5].model.layers", "expected an integer");
  doc = shipped_json();
  doc["records"][1]["plan"]["pipeline"] = 2;
  expect_bad_input(doc, "records[1].plan.pipeline", "unknown field");
  doc = shipped_json();
  doc["records"][0]["measured"]["memory_scope"] = "everything";
  expect_bad_input(doc, "records[0].measured.memory_scope", "expected one of");
  doc = shipped_json();
  doc["schema"] = "llmplan-reference-runs/2";
  expect_bad_input(doc, "schema", "llmplan-reference-runs/1");
}

// Any file of the format works: a one-record file with a null micro-batch is predicted
// with a filled knob, and a null seq_len is skipped with its reason.
TEST(ValidateReader, AnyFileOfTheFormat) {
  const nlohmann::json full = shipped_json();
  nlohmann::json doc = {{"schema", "llmplan-reference-runs/1"}, {"description", "test"}, {"records", nlohmann::json::array()}};
  nlohmann::json rec = full["records"][0];  // narayanan2021_table1_1.7B
  rec["plan"]["micro_batch"] = nullptr;
  doc["records"].push_back(rec);
  rec["id"] = "no_seq";
  rec["model"]["seq_len"] = nullptr;
  doc["records"].push_back(rec);
  Result<ReferenceSet> set = parse_reference_runs(doc, "mini.json");
  ASSERT_TRUE(set.ok()) << set.status().message();
  const std::vector<ValidationRow> rows = validate_records(*set, shipped().presets, ValidationOptions{});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_FALSE(rows[0].skipped) << rows[0].skip_reason;
  EXPECT_TRUE(rows[0].assumed);
  EXPECT_TRUE(rows[1].skipped);
  EXPECT_EQ(rows[1].skip_reason, "missing seq_len");
}

// Two MoE plans differ most in how they split the experts, so the plan's text names EP when
// it splits them (the tuned-gap table printed ep8 and ep1 plans alike before).
TEST(PlanText, NamesExpertParallelismWhenItSplitsTheExperts) {
  ParallelPlan p;
  p.dp = 8;
  p.ep = 8;
  EXPECT_NE(plan_text(p).find(" ep8 "), std::string::npos) << plan_text(p);
  p.ep = 1;
  EXPECT_EQ(plan_text(p).find(" ep"), std::string::npos) << plan_text(p);
}

// The signed bias per GPU: a median of the signed errors (not of |error|), skipped and
// memory rows left out, counted against hand-sorted lists.
TEST(ValidateBias, SignedMedianPerGpuAndStack) {
  auto r = [](const std::string& gpu, const std::string& stack, double error, bool throughput = true, bool skipped = false) {
    ValidationRow x;
    x.gpu = gpu, x.stack = stack, x.error = error, x.throughput = throughput, x.skipped = skipped;
    return x;
  };
  const std::vector<ValidationRow> rows = {r("b200", "megatron-bridge", 0.10), r("b200", "megatron-bridge", -0.30),
                                           r("b200", "torchtitan", 0.04),      r("h100-sxm", "torchtitan", -0.2),
                                           r("h100-sxm", "torchtitan", 0.9, false), r("h100-sxm", "torchtitan", 0.5, true, true)};
  const std::vector<BiasLine> gpu = summarize_bias(rows, BiasKey::gpu);
  ASSERT_EQ(gpu.size(), 2u);
  EXPECT_EQ(gpu[0].key, "b200");
  EXPECT_EQ(gpu[0].n, 3);
  EXPECT_DOUBLE_EQ(gpu[0].median, 0.04);  // sorted -0.30, 0.04, 0.10: a |error| median would be 0.10
  EXPECT_DOUBLE_EQ(gpu[0].min, -0.30);
  EXPECT_DOUBLE_EQ(gpu[0].max, 0.10);
  EXPECT_EQ(gpu[0].faster, 2);
  EXPECT_EQ(gpu[1].n, 1);  // the memory and the skipped rows are not counted
  EXPECT_DOUBLE_EQ(gpu[1].median, -0.2);
  const std::vector<BiasLine> stack = summarize_bias(rows, BiasKey::stack);
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_EQ(stack[1].key, "torchtitan");
  EXPECT_EQ(stack[1].n, 2);
  EXPECT_DOUBLE_EQ(stack[1].median, 0.5 * (-0.2 + 0.04));  // an even count: the mean of the middle two
}

}  // namespace
}  // namespace llmplan
