#include "executor/cuda/cuda_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "executor/cuda/ops.h"
#include "executor/model/model_impl.h"

namespace llmplan::exec::cuda {
namespace {

Status materialized_dropout_is_cpu_only() {
  return Status::bad_input("executor (cuda): dropout of the attention probabilities with materialized attention is "
                           "CPU-only; use flash attention or a model without dropout");
}

// LLMPLAN_CUDA_OP_TIMES=1: every op is timed -- the device synchronised before and after,
// wall time between -- and a table of the time per op kind goes to stderr when the model is
// destroyed. Slows the run (no overlap of launch and execution); for finding where a step's
// time goes, not for measuring it.
struct OpTimes {
  CudaContext* ctx = nullptr;
  std::map<std::string, std::pair<double, int64_t>> by_op;  // seconds, calls
  ~OpTimes() {
    double total = 0;
    for (auto& [k, v] : by_op) total += v.first;
    std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(by_op.begin(), by_op.end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
    std::fprintf(stderr, "\nCUDA op times (LLMPLAN_CUDA_OP_TIMES, synchronised per op), %.3f s in all:\n", total);
    for (auto& [k, v] : rows)
      std::fprintf(stderr, "  %-34s %9.4f s %6.1f%% %8lld calls %9.1f us/call\n", k.c_str(), v.first, 100 * v.first / total,
                   static_cast<long long>(v.second), 1e6 * v.first / static_cast<double>(v.second));
  }
  template <class F>
  auto time(const char* name, F&& f) {
    (void)ctx->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    auto r = f();
    (void)ctx->synchronize();
    auto& e = by_op[name];
    e.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++e.second;
    return r;
  }
};

std::shared_ptr<OpTimes> op_times_from_env(CudaContext& ctx) {
  const char* v = std::getenv("LLMPLAN_CUDA_OP_TIMES");
  if (v == nullptr || std::string(v).empty() || std::string(v) == "0") return nullptr;
  auto t = std::make_shared<OpTimes>();
  t->ctx = &ctx;
  return t;
}

// The CUDA backend of ModelImpl: every op enqueued on the context's compute stream, scratch
// from the context's allocator (freed blocks are reused in stream order, see
// cuda_allocator.h). GEMMs need no row chunks: cuBLASLt multiplies 16-bit operands itself.
template <class S, class G>
struct CudaOps {
  static constexpr bool kHostMemory = false;
  CudaContext* ctx = nullptr;
  std::shared_ptr<OpTimes> times;  // null unless LLMPLAN_CUDA_OP_TIMES
  template <class F>
  Status timed(const char* name, F&& f) const {
    return times ? times->time(name, std::forward<F>(f)) : f();
  }

  int64_t chunk_rows(int64_t n) const { return n; }
  int64_t linear_workspace_bytes(DType, int64_t rows, int64_t, int64_t out) const {
    return cuda::linear_workspace_bytes(rows, out);
  }
  int64_t norm_workspace_bytes(DType, int64_t n, int64_t h) const { return cuda::norm_workspace_bytes(n, h); }
  // The flash forward kernels use no scratch (the size covers the backward's D and dQ).
  int64_t attention_workspace_bytes(DType s, const cpu::AttentionDims& dm, bool flash, bool backward = true) const {
    return flash && !backward ? 0 : cuda::attention_workspace_bytes(s, dm, flash);
  }
  int64_t attention_dropout_workspace_bytes(DType, const cpu::AttentionDims&) const { return 0; }

  Status fill(Tensor& t, const std::vector<double>& v, int64_t offset) const {
    const int64_t es = dtype_size(t.dtype());
    std::vector<std::byte> host(v.size() * static_cast<size_t>(es));
    for (size_t k = 0; k < v.size(); ++k) {
      const float x = static_cast<float>(v[k]);
      switch (t.dtype()) {
        case DType::f32: std::memcpy(&host[k * 4], &x, 4); break;
        case DType::bf16: {
          const bf16_t b = float_to_bf16(x);
          std::memcpy(&host[k * 2], &b, 2);
          break;
        }
        case DType::f16: {
          const f16_t h = float_to_f16(x);
          std::memcpy(&host[k * 2], &h, 2);
          break;
        }
        default: return Status::bad_input("executor (cuda): no " + std::string(to_string(t.dtype())) + " tensors on the GPU");
      }
    }
    // copy_to_device may return before the copy is done only when the source may be reused.
    return copy_to_device(*ctx, static_cast<std::byte*>(t.raw()) + offset * es, host.data(), static_cast<int64_t>(host.size()));
  }
  Status zero(void* p, int64_t bytes) const { return timed("zero", [&] { return fill_bytes(*ctx, p, 0, bytes); }); }
  Result<Tensor> zeros(Shape shape, DType dt, Category c, std::string name) const {
    return cuda::zeros(*ctx, shape, dt, c, std::move(name));
  }
  Status copy(void* dst, const void* src, int64_t bytes) const {
    return timed("copy", [&] { return copy_on_device(*ctx, dst, src, bytes); });
  }
  // QLoRA's NF4 base weights (cpu/nf4.h), dequantized before each use as on the CPU.
  template <class T>
  Status nf4_dequantize(const uint8_t* q, int64_t n, T* w) const {
    return timed("nf4_dequantize", [&] { return cuda::nf4_dequantize<T>(*ctx, q, n, w); });
  }
  Status copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width, int64_t rows) const {
    return timed("copy", [&] { return copy_2d_on_device(*ctx, dst, dst_pitch, src, src_pitch, width, rows); });
  }
  Status scale(S* x, int64_t n, double s) const { return cuda::scale<S>(*ctx, x, n, s); }
  // Between device and host (MoE routing is decided on the host): the download waits for
  // the work before it; the upload's source may be reused on return.
  Status download(void* host, const void* dev, int64_t bytes) const {
    return timed("download", [&] { return copy_to_host(*ctx, host, dev, bytes); });
  }
  Status upload(void* dev, const void* host, int64_t bytes) const {
    return timed("upload", [&] { return copy_to_device(*ctx, dev, host, bytes); });
  }

  // Device copies of the micro-batch in out.buffers: allocated at a slot's first one.
  // whole_doc (CP, whole_n ids): the whole sequences' doc ids, which attention reads at the
  // keys' positions.
  Status stage_batch(const Batch& b, const int32_t* positions, int64_t n, const int32_t* whole_doc, int64_t whole_n,
                     detail::StagedBatch& out) const {
    std::vector<Tensor>& buf = out.buffers;
    const int64_t sizes[5] = {n, n, n, n, whole_doc != nullptr ? whole_n : 1};
    if (buf.size() != 5 || buf[0].numel() != n || buf[4].numel() != sizes[4]) {
      buf.clear();
      const char* names[5] = {"batch.tokens", "batch.targets", "batch.doc_ids", "batch.positions", "batch.doc_ids_whole"};
      for (int i = 0; i < 5; ++i) {
        Result<Tensor> t = Tensor::empty(ctx->allocator(), Shape{sizes[i]}, DType::i32, Category::workspace, names[i]);
        if (!t) return t.status();
        buf.push_back(std::move(*t));
      }
    }
    const int32_t* src[5] = {b.tokens, b.targets, b.doc_ids, positions, whole_doc};
    for (int i = 0; i < 5; ++i)
      if (src[i] != nullptr)
        if (Status s = copy_to_device(*ctx, buf[static_cast<size_t>(i)].raw(), src[i], sizes[i] * 4); !s) return s;
    out.tokens = buf[0].data<int32_t>();
    out.targets = b.targets ? buf[1].data<int32_t>() : nullptr;
    out.doc = b.doc_ids ? buf[2].data<int32_t>() : nullptr;
    out.positions = buf[3].data<int32_t>();
    out.whole_doc = whole_doc ? buf[4].data<int32_t>() : nullptr;
    return Status::ok();
  }

  // Attention sinks: dims.sinks (host doubles) as a device copy of heads floats in *out, which
  // the caller drops after the op it feeds (later work on the compute stream reuses the
  // block only after that op). Nothing when the dims have none.
  Status device_sinks(const cpu::AttentionDims& dm, Tensor* out) const {
    if (dm.sinks.empty()) return Status::ok();
    const std::vector<float> f(dm.sinks.begin(), dm.sinks.end());
    Result<Tensor> t = Tensor::empty(ctx->allocator(), Shape{static_cast<int64_t>(f.size())}, DType::f32, Category::workspace,
                                     "attention.sinks");
    if (!t) return t.status();
    *out = std::move(*t);
    return copy_to_device(*ctx, out->raw(), f.data(), static_cast<int64_t>(f.size()) * 4);
  }
  // f(sinks) with dims.sinks as a device copy (nullptr when none), timed as `name`.
  template <class F>
  Status with_device_sinks(const char* name, const cpu::AttentionDims& dm, F&& f) const {
    return timed(name, [&]() -> Status {
      Tensor sk;
      if (Status st = device_sinks(dm, &sk); !st) return st;
      return f(sk.defined() ? sk.data<float>() : nullptr);
    });
  }
  template <class T>
  Status attention_forward_materialized(const T* q, const T* k, const T* v, const int32_t* doc, T* o, T* probs,
                                        const cpu::AttentionDims& dm, std::span<std::byte> ws) const {
    return with_device_sinks("attention_forward_materialized", dm, [&](const float* sk) {
      return cuda::attention_forward_materialized<T>(*ctx, q, k, v, doc, o, probs, dm, ws, sk);
    });
  }
  template <class T>
  Status attention_forward_flash(const T* q, const T* k, const T* v, const int32_t* doc, T* o, float* lse,
                                 const cpu::AttentionDims& dm, std::span<std::byte> ws) const {
    return with_device_sinks("attention_forward_flash", dm, [&](const float* sk) {
      return cuda::attention_forward_flash<T>(*ctx, q, k, v, doc, o, lse, dm, ws, sk);
    });
  }
  template <class T, class GT>
  Status attention_sink_grad(const T* o, const T* dout, const float* lse, const T* probs, const cpu::AttentionDims& dm,
                             GT* gs) const {
    return with_device_sinks("attention_sink_backward", dm, [&](const float* sk) {
      return cuda::attention_sink_backward<T, GT>(*ctx, o, dout, lse, probs, dm, sk, gs);
    });
  }

  // The ops whose CUDA twin takes the CPU op's arguments after the context.
#define LL_CUDA_OP(name)                                                                      \
  template <class... T, class... Args>                                                        \
  Status name(Args&&... args) const {                                                         \
    return timed(#name, [&] { return cuda::name<T...>(*ctx, std::forward<Args>(args)...); }); \
  }
  LL_CUDA_OP(layernorm_forward)
  LL_CUDA_OP(layernorm_backward)
  LL_CUDA_OP(rmsnorm_forward)
  LL_CUDA_OP(rmsnorm_backward)
  LL_CUDA_OP(attention_backward_materialized)
  LL_CUDA_OP(attention_backward_flash)
  LL_CUDA_OP(attention_merge_partial)
  LL_CUDA_OP(dropout_forward)
  LL_CUDA_OP(dropout_backward)
  LL_CUDA_OP(gelu_forward)
  LL_CUDA_OP(gelu_backward)
  LL_CUDA_OP(swiglu_forward)
  LL_CUDA_OP(swiglu_backward)
  LL_CUDA_OP(rope_forward)
  LL_CUDA_OP(rope_backward)
  LL_CUDA_OP(embedding_forward)
  LL_CUDA_OP(embedding_backward)
  LL_CUDA_OP(embedding_forward_shard)
  LL_CUDA_OP(embedding_backward_shard)
  LL_CUDA_OP(vocab_parallel_ce_max)
  LL_CUDA_OP(vocab_parallel_ce_sums)
  LL_CUDA_OP(vocab_parallel_ce_backward)
  LL_CUDA_OP(moe_router_softmax)
  LL_CUDA_OP(moe_dispatch)
  LL_CUDA_OP(moe_combine)
  LL_CUDA_OP(moe_combine_backward)
  LL_CUDA_OP(add)
  LL_CUDA_OP(add_inplace)
  LL_CUDA_OP(cast)
#undef LL_CUDA_OP

  template <class T>
  Status linear_forward(const T* x, const T* w, const T* b, T* y, int64_t n, int64_t in, int64_t out,
                        std::span<std::byte>) const {
    return timed(out > 8 * in ? "linear_forward (head)" : "linear_forward",
                 [&] { return cuda::linear_forward<T>(*ctx, x, w, b, y, n, in, out); });
  }
  template <class T, class GT>
  Status linear_backward(const T* dy, const T* x, const T* w, T* dx, GT* dw, GT* db, int64_t n, int64_t in, int64_t out,
                         std::span<std::byte> ws) const {
    return timed(out > 8 * in ? "linear_backward (head)" : "linear_backward",
                 [&] { return cuda::linear_backward<T, GT>(*ctx, dy, x, w, dx, dw, db, n, in, out, ws); });
  }
  // Logits rows padded to a multiple of 8 elements (16 bytes in 16-bit): cuBLASLt's tensor-
  // core kernels need aligned rows (linear.h); the padding is never read. The planner counts
  // b s V, so an unaligned vocabulary measures up to 7 elements a row more.
  int64_t logits_row_stride(int64_t v) const { return (v + 7) / 8 * 8; }
  template <class T>
  Status linear_forward_ld(const T* x, const T* w, T* y, int64_t n, int64_t in, int64_t out, int64_t ld) const {
    return timed("linear_forward (head)", [&] { return cuda::linear_forward<T>(*ctx, x, w, nullptr, y, n, in, out, ld); });
  }
  template <class T, class GT>
  Status linear_backward_ld(const T* dy, int64_t ld, const T* x, const T* w, T* dx, GT* dw, int64_t n, int64_t in,
                            int64_t out) const {
    return timed("linear_backward (head)", [&] {
      return cuda::linear_backward<T, GT>(*ctx, dy, x, w, dx, dw, nullptr, n, in, out, {}, ld);
    });
  }
  template <class Src, class Dst>
  Status cast_rows(const Src* x, int64_t ldx, Dst* y, int64_t ldy, int64_t rows, int64_t cols) const {
    return timed("cast", [&] { return cuda::cast_rows<Src, Dst>(*ctx, x, ldx, y, ldy, rows, cols); });
  }
  template <class T, class... Args>
  Status attention_forward_dropout(Args&&...) const {
    return materialized_dropout_is_cpu_only();
  }
  template <class T, class... Args>
  Status attention_backward_dropout(Args&&...) const {
    return materialized_dropout_is_cpu_only();
  }

  // The sum and count come back to the host (the copy waits for the kernels).
  template <class A>
  Result<cpu::VocabCeLoss> vocab_parallel_ce_loss(const int32_t* targets, const A* mx, const A* sums, int64_t n) const {
    Result<Block> out = ctx->allocator().allocate(2 * sizeof(double), Category::workspace, "loss.workspace");
    if (!out) return out.status();
    auto* dev = static_cast<double*>(out->data());
    if (Status s = timed("vocab_parallel_ce_loss", [&] { return cuda::vocab_parallel_ce_loss<A>(*ctx, targets, mx, sums, n, dev); }); !s)
      return s;
    double host[2] = {0, 0};
    if (Status s = copy_to_host(*ctx, host, dev, sizeof host); !s) return s;
    return cpu::VocabCeLoss{host[0], static_cast<int64_t>(host[1])};
  }

  // The loss comes back to the host (the copy waits for the forward).
  template <class T>
  Result<double> cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t v, double denom) const {
    Result<Block> ws = ctx->allocator().allocate(256 + cross_entropy_workspace_bytes(n), Category::workspace, "loss.workspace");
    if (!ws) return ws.status();
    auto* base = static_cast<std::byte*>(ws->data());
    double* loss_dev = reinterpret_cast<double*>(base);
    std::span<std::byte> scratch(base + 256, static_cast<size_t>(ws->bytes() - 256));
    if (Status s = timed("cross_entropy_forward", [&] { return cuda::cross_entropy_forward<T>(*ctx, logits, targets, loss_dev, n, v, denom, scratch); }); !s)
      return s;
    double loss = 0;
    if (Status s = copy_to_host(*ctx, &loss, loss_dev, sizeof(double)); !s) return s;
    return loss;
  }
  template <class T>
  Status cross_entropy_backward(const T* logits, const int32_t* targets, T* dlogits, int64_t n, int64_t v, double dloss,
                                double denom) const {
    Result<Block> ws = ctx->allocator().allocate(cross_entropy_workspace_bytes(n), Category::workspace, "loss.workspace");
    if (!ws) return ws.status();
    std::span<std::byte> scratch(static_cast<std::byte*>(ws->data()), static_cast<size_t>(ws->bytes()));
    return timed("cross_entropy_backward", [&] { return cuda::cross_entropy_backward<T>(*ctx, logits, targets, dlogits, n, v, dloss, denom, scratch); });
  }
};

template <class S, class G>
Result<std::unique_ptr<Model>> build(CudaContext& ctx, const ModelConfig& c) {
  CudaOps<S, G> ops;
  ops.ctx = &ctx;
  ops.times = op_times_from_env(ctx);
  return detail::build_model_with<S, G>(ctx.allocator(), c, std::move(ops));
}

}  // namespace

// The CUDA backend's instances of the model template (executor/model/), one per storage and
// gradient type pair that build_cuda_model accepts: explicit, so that every member is
// compiled for each pair here. (model.cpp holds the CPU ones.)
}  // namespace llmplan::exec::cuda

namespace llmplan::exec {  // explicit instantiations belong to a namespace enclosing the template's
template class detail::ModelImpl<float, float, cuda::CudaOps<float, float>>;
template class detail::ModelImpl<bf16_t, bf16_t, cuda::CudaOps<bf16_t, bf16_t>>;
template class detail::ModelImpl<bf16_t, float, cuda::CudaOps<bf16_t, float>>;
template class detail::ModelImpl<f16_t, f16_t, cuda::CudaOps<f16_t, f16_t>>;
template class detail::ModelImpl<f16_t, float, cuda::CudaOps<f16_t, float>>;
}  // namespace llmplan::exec

namespace llmplan::exec::cuda {

Result<std::unique_ptr<Model>> build_cuda_model(CudaContext& ctx, const ModelConfig& c) {
  if (Status st = detail::check_model_config(c); !st) return st;
  // Context parallel's query and key slices run the SIMT flash kernels; the materialized
  // ones take whole sequences.
  if (c.plan.cp > 1 && !c.plan.flash_attention)
    return Status::bad_input("executor (cuda): cp " + std::to_string(c.plan.cp) +
                             " needs flash attention on the GPU (the materialized kernels take whole sequences): set "
                             "plan.flash_attention true or use --backend cpu");
  if (c.spec.dropout && !c.plan.flash_attention)
    return materialized_dropout_is_cpu_only();
  // Latent attention's query and key heads are wider than its value heads; the flash kernels
  // take both up to kFlashMaxHeadDim, the materialized ones any width.
  if (c.spec.mla.enabled() && c.plan.flash_attention &&
      (c.spec.head_width() > kFlashMaxHeadDim || c.spec.mla.v_head_dim > kFlashMaxHeadDim))
    return Status::bad_input("executor (cuda): model " + c.spec.name + " has latent attention with " +
                             std::to_string(c.spec.head_width()) + "-wide query heads, wider than the CUDA flash kernels' " +
                             std::to_string(kFlashMaxHeadDim) + ": set plan.flash_attention false (materialized) or use --backend cpu");
  // Interleaved 1F1B: the stage's vpp chunks, each its own model (as on the CPU).
  return detail::build_stage(c, [&ctx](const ModelConfig& ck) -> Result<std::unique_ptr<Model>> {
    const DType s = ck.storage, g = ck.grad;
    if (s == DType::f32 && g == DType::f32) return build<float, float>(ctx, ck);
    if (s == DType::bf16 && g == DType::bf16) return build<bf16_t, bf16_t>(ctx, ck);
    if (s == DType::bf16 && g == DType::f32) return build<bf16_t, float>(ctx, ck);
    if (s == DType::f16 && g == DType::f16) return build<f16_t, f16_t>(ctx, ck);
    if (s == DType::f16 && g == DType::f32) return build<f16_t, float>(ctx, ck);
    return Status::bad_input(std::string("executor (cuda): unsupported storage/gradient dtypes ") + to_string(s) + "/" +
                             to_string(g));
  });
}

}  // namespace llmplan::exec::cuda
