#include "executor/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "executor/cpu/attention_dropout.h"
#include "executor/cpu/nf4.h"
#include "executor/cpu/ops.h"
#include "executor/model/model_impl.h"

namespace llmplan::exec {

LayerContext model_layer_context(const ModelConfig& c, int layer) {
  LayerContext lc = layer_context(c.spec, c.job, c.plan, layer);
  lc.act_bytes = static_cast<int>(dtype_size(c.storage));
  return lc;
}

namespace detail {

Status check_model_config(const ModelConfig& c) {
  const ModelSpec& m = c.spec;
  if (const int cp = c.plan.cp; cp != 1) {
    if (cp < 1 || c.comm == nullptr || c.comm->size(Group::cp) != cp)
      return Status::bad_input("executor: cp " + std::to_string(cp) + " needs a communicator with a CP group of that size");
    if (c.job.seq_len % (2 * cp) != 0)  // each rank holds two of 2*cp chunks (load-balanced causal attention)
      return Status::bad_input("executor: 2 * cp (" + std::to_string(2 * cp) + ") must divide seq_len " + std::to_string(c.job.seq_len));
  }
  if (c.plan.pp < 1 || c.stage < 0 || c.stage >= c.plan.pp || c.plan.vpp < 1 || c.chunk < 0 || c.chunk >= c.plan.vpp)
    return Status::bad_input("executor: stage " + std::to_string(c.stage) + " chunk " + std::to_string(c.chunk) + " of pp " +
                             std::to_string(c.plan.pp) + " vpp " + std::to_string(c.plan.vpp));
  if ((c.plan.vpp > 1 && c.plan.pp == 1) || !pipeline_split_ok(c.spec.layers, c.plan))
    return Status::bad_input("executor: vpp " + std::to_string(c.plan.vpp) + " needs pp > 1 and layers divisible by pp*vpp (" +
                             std::to_string(c.spec.layers) + " layers; plus 2 with plan.pipeline_split " + to_string(c.plan.pipeline_split) + ")");
  if (const int t = c.plan.tp; t > 1) {
    if (c.comm == nullptr || c.comm->size(Group::tp) != t)
      return Status::bad_input("executor: tp " + std::to_string(t) + " needs a communicator with a TP group of that size");
    if (m.heads % t != 0 || m.kv_heads % t != 0 || m.ffn_hidden % t != 0)
      return Status::bad_input("executor: tp " + std::to_string(t) + " must divide heads, kv_heads and ffn_hidden of " + m.name);
    if (c.plan.sp && (static_cast<int64_t>(c.plan.micro_batch) * (c.job.seq_len / std::max(1, c.plan.cp))) % t != 0)
      return Status::bad_input("executor: sequence parallel needs micro_batch * seq_len / cp divisible by tp " + std::to_string(t));
  } else if (c.plan.tp != 1) {
    return Status::bad_input("executor: tp must be >= 1");
  }
  if (const MoeSpec& e = m.moe; e.enabled()) {
    if (e.experts_per_token < 1 || e.experts_per_token > e.experts || e.expert_ffn_hidden <= 0 || !(e.capacity_factor > 0))
      return Status::bad_input("executor: model " + m.name + ": MoE needs 1 <= experts_per_token <= experts, expert_ffn_hidden > 0 "
                               "and capacity_factor > 0");
    if (c.plan.tp > 1 && m.shared_ffn_width() % c.plan.tp != 0)
      return Status::bad_input("executor: tp " + std::to_string(c.plan.tp) + " must divide the shared experts' width " +
                               std::to_string(m.shared_ffn_width()) + " of " + m.name);
    if (c.plan.tp > 1 && !c.plan.sp)
      return Status::bad_input("executor: model " + m.name + " is a mixture of experts: plan.tp " + std::to_string(c.plan.tp) +
                               " needs plan.sp (each TP rank routes its own sequence shard), as the planner requires");
    const int ep = c.plan.ep;
    if (ep < 1 || e.experts % ep != 0)
      return Status::bad_input("executor: ep " + std::to_string(ep) + " must be >= 1 and divide the " + std::to_string(e.experts) +
                               " experts of " + m.name);
    if (ep > 1 && (c.comm == nullptr || c.comm->size(Group::ep) != ep))
      return Status::bad_input("executor: ep " + std::to_string(ep) + " needs a communicator with an EP group of that size");
  } else if (c.plan.ep != 1) {
    return Status::bad_input("executor: ep " + std::to_string(c.plan.ep) + " on " + m.name + ", which has no experts");
  }
  if (m.heads <= 0 || m.kv_heads <= 0 || m.heads % m.kv_heads != 0 || m.hidden <= 0 || m.vocab <= 0)
    return Status::bad_input("executor: model " + m.name + ": heads, kv_heads, hidden, vocab must be positive, kv_heads | heads");
  if (m.family == Family::gpt && c.job.seq_len > m.max_positions)
    return Status::bad_input("executor: seq_len " + std::to_string(c.job.seq_len) + " exceeds the model's max_positions " +
                             std::to_string(m.max_positions));
  if (m.dropout && !(c.options.dropout_p >= 0 && c.options.dropout_p < 1))
    return Status::bad_input("executor: dropout_p must be in [0, 1)");
  if (c.job.qlora()) {
    // QLoRA's base weights are NF4 tensors each rank quantizes whole (tp 1), dequantized at
    // each use by the dense layers' linears.
    std::string clash;
    if (c.plan.tp > 1) clash = "plan.tp " + std::to_string(c.plan.tp) + " (each rank would quantize its own slice: tp 1)";
    else if (c.plan.zero >= 3) clash = "plan.zero 3 (ZeRO-3 gathers 16-bit parameters: 0, 1 or 2)";
    else if (m.moe.enabled()) clash = "a mixture of experts (" + m.name + "; dense models)";
    else if (c.storage != DType::bf16 && c.storage != DType::f16 && c.storage != DType::f32 && c.storage != DType::f64)
      clash = std::string("storage ") + to_string(c.storage);
    if (!clash.empty())
      return Status::bad_input("executor: job.mode qlora (4-bit NF4 base weights) does not run with " + clash);
  }
  if (const MlaSpec& a = m.mla; a.enabled()) {
    // Latent attention runs as DeepSeek builds it: a Llama-family block (RMSNorm, rotary),
    // its own latent norms instead of QK-norm, no biases, no adapters on its projections.
    if (a.kv_lora_rank <= 0 || a.q_lora_rank < 0 || a.qk_nope_head_dim <= 0 || a.qk_rope_head_dim <= 0 || a.qk_rope_head_dim % 2 != 0 ||
        a.v_head_dim <= 0)
      return Status::bad_input("executor: model " + m.name + ": mla needs kv_lora_rank, qk_nope_head_dim, v_head_dim > 0, an even "
                               "qk_rope_head_dim > 0 and q_lora_rank >= 0");
    std::string clash;
    if (m.family != Family::llama) clash = "family gpt (latent attention is a Llama-family block with rotary embeddings)";
    else if (m.qk_norm) clash = "qk_norm (latent attention normalises its latents instead)";
    else if (m.attention_bias != AttentionBias::none) clash = "attention_bias (latent attention's projections have none)";
    else if (c.plan.cp > 1) clash = "plan.cp " + std::to_string(c.plan.cp) + " (context parallel gathers keys and values of one width)";
    else if (c.job.mode == TrainMode::lora) clash = "job.mode lora (the executor puts no adapters on latent attention)";
    if (!clash.empty())
      return Status::bad_input("executor: model " + m.name + " has multi-head latent attention, which the executor does not run together with " + clash);
  }
  if (m.mtp_layers > 0) {
    // Multi-token prediction runs on one stage of one rank's whole vocabulary: its modules
    // read the shared embedding and head there, their gradients outside ZeRO-2/3's units.
    std::string clash;
    if (m.family != Family::llama) clash = "family gpt (DeepSeek's modules are Llama-family blocks)";
    else if (c.plan.tp > 1 || c.plan.pp > 1 || c.plan.cp > 1)
      clash = "tp, pp or cp > 1 (tp " + std::to_string(c.plan.tp) + ", pp " + std::to_string(c.plan.pp) + ", cp " +
              std::to_string(c.plan.cp) + "; the modules run with the whole head on one stage)";
    else if (c.plan.zero >= 2) clash = "plan.zero " + std::to_string(c.plan.zero) + " (0 or 1)";
    else if (c.job.mode == TrainMode::lora) clash = "job.mode lora (its modules train with the head)";
    else if (layer_kind(m, m.layers) != layer_kind(m, m.layers - 1) ||
             (m.mtp_layers > 1 && layer_kind(m, m.layers + m.mtp_layers - 1) != layer_kind(m, m.layers - 1)))
      clash = "module blocks of another layer kind than the last layer's";
    if (!clash.empty())
      return Status::bad_input("executor: model " + m.name + " has multi-token prediction (mtp_layers " + std::to_string(m.mtp_layers) +
                               "), which the executor does not run together with " + clash);
  }
  // The 2024-26 blocks are planned (planner/spec/recipe.h) but the executor's layers are the
  // GPT and Llama blocks with one MLP kind and full attention: refuse what it cannot build.
  std::string planned_only;
  auto add = [&](const char* what) { planned_only += (planned_only.empty() ? "" : ", ") + std::string(what); };
  if (m.moe.enabled() && m.moe.load_imbalance != 1.0) add("an imbalanced expert load (moe.load_imbalance; the executor routes with capacity_factor)");
  if (!planned_only.empty())
    return Status::bad_input("executor: model " + m.name + " has " + planned_only +
                             ", which llmplan plans but does not execute yet; expected a GPT- or Llama-family model without them");
  return Status::ok();
}

}  // namespace detail

namespace {

// The CPU backend of ModelImpl: host memory, the cpu:: ops called directly. 16-bit GEMMs
// run in chunks of kChunk rows because the CPU's BLAS has no bf16/fp16 GEMM: each chunk's
// operands are widened to fp32 in scratch, and the chunk bounds that scratch.
template <class S, class G>
struct CpuOps {
  static constexpr bool kHostMemory = true;
  static constexpr bool kWide = std::is_same_v<S, float> || std::is_same_v<S, double>;
  static constexpr int64_t kChunk = 256;  // rows per 16-bit GEMM
  TrackingAllocator* alloc = nullptr;
  OpTimeLog* times = nullptr;  // ModelConfig::op_times

  // Runs f, timing it into `times` under op's name and shape when a log is set.
  template <class F>
  Status timed(const char* op, int64_t m, int64_t n, int64_t k, double flops, F&& f) const {
    if (times == nullptr) {
      f();
      return Status::ok();
    }
    const auto t0 = std::chrono::steady_clock::now();
    f();
    times->add(op, dtype_of<S>, m, n, k, flops, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return Status::ok();
  }

  int64_t chunk_rows(int64_t n) const { return kWide ? n : std::min<int64_t>(n, kChunk); }
  int64_t linear_workspace_bytes(DType s, int64_t rows, int64_t in, int64_t out) const {
    return cpu::linear_workspace_bytes(s, rows, in, out);
  }
  int64_t norm_workspace_bytes(DType g, int64_t, int64_t h) const { return cpu::norm_workspace_bytes(g, h); }
  // The CPU ops size their scratch for forward and backward alike.
  int64_t attention_workspace_bytes(DType s, const cpu::AttentionDims& dm, bool flash, bool /*backward*/ = true) const {
    return cpu::attention_workspace_bytes(s, dm, flash);
  }
  int64_t attention_dropout_workspace_bytes(DType s, const cpu::AttentionDims& dm) const {
    return cpu::attention_dropout_workspace_bytes(s, dm);
  }

  // t[offset + i] = v[i].
  Status fill(Tensor& t, const std::vector<double>& v, int64_t offset) const {
    for (size_t k = 0; k < v.size(); ++k) {
      const int64_t i = offset + static_cast<int64_t>(k);
      const double x = v[k];
      switch (t.dtype()) {
        case DType::f32: t.data<float>()[i] = static_cast<float>(x); break;
        case DType::f64: t.data<double>()[i] = x; break;
        case DType::bf16: t.data<bf16_t>()[i] = float_to_bf16(static_cast<float>(x)); break;
        case DType::f16: t.data<f16_t>()[i] = float_to_f16(static_cast<float>(x)); break;
        default: break;
      }
    }
    return Status::ok();
  }
  Status zero(void* p, int64_t bytes) const {
    if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
    return Status::ok();
  }
  Result<Tensor> zeros(Shape shape, DType dt, Category c, std::string name) const {
    return Tensor::zeros(*alloc, shape, dt, c, std::move(name));
  }
  Status copy(void* dst, const void* src, int64_t bytes) const {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::ok();
  }
  // rows rows of `width` bytes, each at its own pitch (bytes) in dst and in src.
  Status copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width, int64_t rows) const {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<std::byte*>(dst) + r * dst_pitch, static_cast<const std::byte*>(src) + r * src_pitch, static_cast<size_t>(width));
    return Status::ok();
  }
  // Host memory both ways (ModelImpl's host views read the CPU's tensors in place; these
  // serve the values it computes on the host).
  Status download(void* host, const void* src, int64_t bytes) const { return copy(host, src, bytes); }
  Status upload(void* dst, const void* host, int64_t bytes) const { return copy(dst, host, bytes); }
  Status scale(S* x, int64_t n, double s) const {
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kWide) x[i] = static_cast<S>(x[i] * s);
      else if constexpr (std::is_same_v<S, bf16_t>) x[i] = float_to_bf16(static_cast<float>(bf16_to_float(x[i]) * s));
      else x[i] = float_to_f16(static_cast<float>(f16_to_float(x[i]) * s));
    }
    return Status::ok();
  }
  // Dense logits: the strided head ops below are never called on the CPU.
  int64_t logits_row_stride(int64_t v) const { return v; }
  template <class T, class... Args>
  Status linear_forward_ld(Args&&...) const { return Status::runtime("CpuOps: strided logits are not used on the CPU"); }
  template <class T, class GT, class... Args>
  Status linear_backward_ld(Args&&...) const { return Status::runtime("CpuOps: strided logits are not used on the CPU"); }
  template <class Src, class Dst, class... Args>
  Status cast_rows(Args&&...) const { return Status::runtime("CpuOps: strided logits are not used on the CPU"); }
  Status stage_batch(const Batch& b, const int32_t* positions, int64_t, const int32_t* whole_doc, int64_t,
                     detail::StagedBatch& out) const {
    out = {b.tokens, b.targets, b.doc_ids, positions, whole_doc, nullptr, {}};  // host_targets: set by the model
    return Status::ok();
  }

  // The ops: cpu:: by the same name, which cannot fail; each timed when a log is set. The
  // GEMMs and flash attention with their shapes and FLOPs (what calibration fits), the
  // rest by name alone.
  // linear_forward(x, w, b, y, n, in, out, ws); linear_backward(dy, x, w, dx, dw, db, n, in, out, ws).
  template <class... T, class... Args>
  Status linear_forward(Args&&... args) const {
    const auto a = std::forward_as_tuple(args...);
    const int64_t n = std::get<4>(a), in = std::get<5>(a), out = std::get<6>(a);
    return timed("linear_forward", n, out, in, 2.0 * n * in * out, [&] { cpu::linear_forward<T...>(std::forward<Args>(args)...); });
  }
  template <class... T, class... Args>
  Status linear_backward(Args&&... args) const {
    const auto a = std::forward_as_tuple(args...);
    const int64_t n = std::get<6>(a), in = std::get<7>(a), out = std::get<8>(a);
    const double gemms = (std::get<3>(a) != nullptr ? 1.0 : 0.0) + (std::get<4>(a) != nullptr ? 1.0 : 0.0);
    return timed("linear_backward", n, out, in, gemms * 2.0 * n * in * out, [&] { cpu::linear_backward<T...>(std::forward<Args>(args)...); });
  }
  // Flash attention: m = query rows, n = key rows, k = head width (per sequence and head).
  template <class... T, class... Args>
  Status attention_forward_flash(Args&&... args) const {
    const cpu::AttentionDims& d = std::get<sizeof...(Args) - 2>(std::forward_as_tuple(args...));
    return timed("attention_forward_flash", d.q_rows > 0 ? d.q_rows : d.s, d.k_rows > 0 ? d.k_rows : d.s, d.head_dim, 0,
                 [&] { cpu::attention_forward_flash<T...>(std::forward<Args>(args)...); });
  }
  template <class... T, class... Args>
  Status attention_backward_flash(Args&&... args) const {
    const cpu::AttentionDims& d = std::get<sizeof...(Args) - 2>(std::forward_as_tuple(args...));
    return timed("attention_backward_flash", d.q_rows > 0 ? d.q_rows : d.s, d.k_rows > 0 ? d.k_rows : d.s, d.head_dim, 0,
                 [&] { cpu::attention_backward_flash<T...>(std::forward<Args>(args)...); });
  }
#define LL_CPU_OP(name)                                                                      \
  template <class... T, class... Args>                                                       \
  Status name(Args&&... args) const {                                                        \
    return timed(#name, 0, 0, 0, 0, [&] { cpu::name<T...>(std::forward<Args>(args)...); }); \
  }
  // The sinks' gradient (cpu::attention_sink_backward, in doubles) added into gs (heads).
  template <class T, class GT>
  Status attention_sink_grad(const T* o, const T* dout, const acc_t<T>* lse, const T* probs, const cpu::AttentionDims& dm,
                             GT* gs) const {
    std::vector<double> ds(static_cast<size_t>(dm.heads), 0.0);
    cpu::attention_sink_backward<T>(o, dout, lse, probs, dm, ds.data());
    for (size_t h = 0; h < ds.size(); ++h) gs[h] = from_double<GT>(to_double(gs[h]) + ds[h]);
    return Status::ok();
  }
  LL_CPU_OP(nf4_dequantize)
  LL_CPU_OP(layernorm_forward)
  LL_CPU_OP(layernorm_backward)
  LL_CPU_OP(rmsnorm_forward)
  LL_CPU_OP(rmsnorm_backward)
  LL_CPU_OP(attention_forward_materialized)
  LL_CPU_OP(attention_backward_materialized)
  LL_CPU_OP(attention_merge_partial)
  LL_CPU_OP(attention_forward_dropout)
  LL_CPU_OP(attention_backward_dropout)
  LL_CPU_OP(dropout_forward)
  LL_CPU_OP(dropout_backward)
  LL_CPU_OP(gelu_forward)
  LL_CPU_OP(gelu_backward)
  LL_CPU_OP(swiglu_forward)
  LL_CPU_OP(swiglu_backward)
  LL_CPU_OP(rope_forward)
  LL_CPU_OP(rope_backward)
  LL_CPU_OP(embedding_forward)
  LL_CPU_OP(embedding_backward)
  LL_CPU_OP(embedding_forward_shard)
  LL_CPU_OP(embedding_backward_shard)
  LL_CPU_OP(vocab_parallel_ce_max)
  LL_CPU_OP(vocab_parallel_ce_sums)
  LL_CPU_OP(vocab_parallel_ce_backward)
  LL_CPU_OP(moe_router_softmax)
  LL_CPU_OP(moe_dispatch)
  LL_CPU_OP(moe_combine)
  LL_CPU_OP(moe_combine_backward)
  LL_CPU_OP(add)
  LL_CPU_OP(add_inplace)
  LL_CPU_OP(cast)
  LL_CPU_OP(cross_entropy_backward)
#undef LL_CPU_OP
  template <class T>
  Result<double> cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t v, double denom) const {
    return cpu::cross_entropy_forward<T>(logits, targets, n, v, denom);
  }
  template <class A>
  Result<cpu::VocabCeLoss> vocab_parallel_ce_loss(const int32_t* targets, const A* mx, const A* sums, int64_t n) const {
    return cpu::vocab_parallel_ce_loss<A>(targets, mx, sums, n);
  }
};

template <class S, class G>
Result<std::unique_ptr<Model>> build(TrackingAllocator& a, const ModelConfig& c) {
  return detail::build_model_with<S, G>(a, c, CpuOps<S, G>{&a, c.op_times});
}

}  // namespace

// The CPU backend's instances of the model template (executor/model/), one per storage and
// gradient type pair that build_chunk accepts: explicit, so that every member is compiled
// for each pair here, whichever paths a run takes. (cuda/cuda_model.cpp holds the CUDA ones.)
template class detail::ModelImpl<float, float, CpuOps<float, float>>;
template class detail::ModelImpl<double, double, CpuOps<double, double>>;
template class detail::ModelImpl<bf16_t, bf16_t, CpuOps<bf16_t, bf16_t>>;
template class detail::ModelImpl<bf16_t, float, CpuOps<bf16_t, float>>;
template class detail::ModelImpl<f16_t, f16_t, CpuOps<f16_t, f16_t>>;
template class detail::ModelImpl<f16_t, float, CpuOps<f16_t, float>>;

namespace {

// Interleaved 1F1B: a stage's vpp model chunks presented as one Model (model.h, chunks()).
class ChunkedModel final : public Model {
 public:
  explicit ChunkedModel(std::vector<std::unique_ptr<Model>> chunks) : chunks_(std::move(chunks)) {
    adapters_.resize(chunks_.size());
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const int param_off = static_cast<int>(params_.size());
      adapters_[c].unit_off = static_cast<int>(units_.size());
      for (const ParamRef& p : chunks_[c]->params()) params_.push_back(p);
      for (const std::vector<int>& u : chunks_[c]->units()) {
        std::vector<int> v;
        for (int i : u) v.push_back(i + param_off);
        units_.push_back(std::move(v));
      }
    }
  }
  Result<double> forward_backward(const Batch&, double, double, uint64_t) override { return whole(); }
  Result<double> forward_loss(const Batch&, double, uint64_t) override { return whole(); }
  Result<double> stage_forward(int, const Batch&, const void*, void*, double, double, uint64_t) override { return whole(); }
  Status stage_backward(int, const Batch&, const void*, void*) override { return whole(); }
  Status stage_backward_input(int, const Batch&, const void*, void*) override { return whole(); }
  Status stage_backward_weight(int) override { return whole(); }
  std::vector<ParamRef>& params() override { return params_; }
  void zero_grads() override {
    for (auto& c : chunks_) c->zero_grads();
  }
  const ModelConfig& config() const override { return chunks_.front()->config(); }
  const Where& where() const override { return chunks_[static_cast<size_t>(active_)]->where(); }
  const std::vector<std::vector<int>>& units() const override { return units_; }
  void set_param_hooks(ParamHooks* hooks) override {
    for (size_t c = 0; c < chunks_.size(); ++c) {
      adapters_[c].hooks = hooks;
      chunks_[c]->set_param_hooks(hooks ? &adapters_[c] : nullptr);
    }
  }
  int chunks() const override { return static_cast<int>(chunks_.size()); }
  Model& chunk(int c) override {
    active_ = c;
    return *chunks_[static_cast<size_t>(c)];
  }

 private:
  // A chunk's unit numbers are its own; the hooks' are the stage's (units() order).
  struct Offset final : ParamHooks {
    ParamHooks* hooks = nullptr;
    int unit_off = 0;
    Status use_weights(int u, int next) override { return hooks->use_weights(u + unit_off, next < 0 ? -1 : next + unit_off); }
    void release_weights(int u) override { hooks->release_weights(u + unit_off); }
    Status begin_grads(int u) override { return hooks->begin_grads(u + unit_off); }
    Status end_grads(int u) override { return hooks->end_grads(u + unit_off); }
  };
  static Status whole() {
    return Status::bad_input("executor: an interleaved stage runs its chunks (Model::chunk) through stage_forward/stage_backward");
  }
  std::vector<std::unique_ptr<Model>> chunks_;
  std::vector<ParamRef> params_;
  std::vector<std::vector<int>> units_;
  std::vector<Offset> adapters_;
  int active_ = 0;
};

Result<std::unique_ptr<Model>> build_chunk(TrackingAllocator& alloc, const ModelConfig& c);

}  // namespace

Result<std::unique_ptr<Model>> detail::build_stage(const ModelConfig& c,
                                                   const std::function<Result<std::unique_ptr<Model>>(const ModelConfig&)>& chunk) {
  if (c.plan.vpp <= 1) return chunk(c);
  std::vector<std::unique_ptr<Model>> chunks;
  for (int k = 0; k < c.plan.vpp; ++k) {
    ModelConfig ck = c;
    ck.chunk = k;
    Result<std::unique_ptr<Model>> m = chunk(ck);
    if (!m) return m.status();
    chunks.push_back(std::move(*m));
  }
  return std::unique_ptr<Model>(new ChunkedModel(std::move(chunks)));
}

Result<std::unique_ptr<Model>> build_model(TrackingAllocator& alloc, const ModelConfig& c) {
  if (Status st = detail::check_model_config(c); !st) return st;
  return detail::build_stage(c, [&alloc](const ModelConfig& ck) { return build_chunk(alloc, ck); });
}

namespace {

Result<std::unique_ptr<Model>> build_chunk(TrackingAllocator& alloc, const ModelConfig& c) {
  const DType s = c.storage, g = c.grad;
  if (s == DType::f32 && g == DType::f32) return build<float, float>(alloc, c);
  if (s == DType::f64 && g == DType::f64) return build<double, double>(alloc, c);
  if (s == DType::bf16 && g == DType::bf16) return build<bf16_t, bf16_t>(alloc, c);
  if (s == DType::bf16 && g == DType::f32) return build<bf16_t, float>(alloc, c);
  if (s == DType::f16 && g == DType::f16) return build<f16_t, f16_t>(alloc, c);
  if (s == DType::f16 && g == DType::f32) return build<f16_t, float>(alloc, c);
  return Status::bad_input(std::string("executor: unsupported storage/gradient dtypes ") + to_string(s) + "/" + to_string(g));
}

}  // namespace

CpuOpScratch cpu_op_scratch_bytes(const ModelSpec& m, const TrainingJob& j, const ParallelPlan& p, DType storage) {
  CpuOpScratch out;
  {  // executor/model/: dims (one rank's whole sequences), cp_dims, ring_dims
    const int t = std::max(1, p.tp), cp = std::max(1, p.cp);
    cpu::AttentionDims dm;
    dm.b = p.micro_batch;
    dm.s = j.seq_len;
    dm.heads = m.heads / t;
    dm.kv_heads = m.kv_heads / t;
    dm.head_dim = m.head_width();
    if (cp > 1) {
      dm.q_rows = j.seq_len / cp;
      if (p.cp_exchange == CpExchange::ring) dm.k_rows = j.seq_len / cp;
    }
    // Materialised attention with dropout runs its own kernels (attn_bwd_kernel).
    out.attention = cp == 1 && m.dropout && !p.flash_attention ? cpu::attention_dropout_workspace_bytes(storage, dm)
                                                               : cpu::attention_workspace_bytes(storage, dm, p.flash_attention);
  }
  if (storage == DType::f32 || storage == DType::f64) return out;
  constexpr int64_t kChunk = CpuOps<bf16_t, float>::kChunk;
  const int64_t t = std::max(1, p.tp), n = static_cast<int64_t>(p.micro_batch) * (j.seq_len / std::max(1, p.cp));
  const int64_t ns = p.sp ? n / t : n, h = m.hidden;
  int64_t worst = 0;
  auto gemm = [&](int64_t rows, int64_t in, int64_t out) {
    worst = std::max(worst, cpu::linear_workspace_bytes(storage, std::min(rows, kChunk), in, out));
  };
  gemm(n, h, m.q_width() / t);
  gemm(n, h, m.kv_width() / t);
  gemm(n, m.q_width() / t, h);
  if (m.moe.enabled()) {
    const int64_t rows = static_cast<int64_t>(moe_expert_rows(m, static_cast<double>(ns)));
    const int64_t local = m.moe.experts / std::max(1, p.ep);
    const int64_t call = local == 1 ? rows : rows / m.moe.experts;  // one GEMM over all blocks, or one block
    gemm(call, h, m.moe.expert_ffn_hidden);
    gemm(call, m.moe.expert_ffn_hidden, h);
    gemm(ns, h, m.moe.experts);
    const int64_t fs = m.shared_ffn_width() / t;
    if (fs > 0) {
      gemm(n, h, fs);
      gemm(n, fs, h);
    }
  }
  bool dense_layer = !m.moe.enabled();  // a dense MLP on some layer (a MoE model's first or every n-th)
  const uint32_t kinds = layer_kinds_present(m);
  for (int k = 0; k < kLayerKinds; ++k) dense_layer = dense_layer || (((kinds >> k) & 1u) != 0 && kind_dense_mlp(k));
  if (dense_layer) {
    gemm(n, h, m.ffn_hidden / t);
    gemm(n, m.ffn_hidden / t, h);
  }
  // The head multiplies the (SP: gathered) micro-batch by this rank's vocabulary rows.
  out.layer = worst;
  out.head = cpu::linear_workspace_bytes(storage, std::min(n, kChunk), h, (m.vocab + t - 1) / t);
  return out;
}

}  // namespace llmplan::exec
