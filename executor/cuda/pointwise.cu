// Elementwise CUDA ops (pointwise.h): one grid-stride kernel (for_each_index) over an
// element function, one device lambda per op with the CPU op's formula.
#include "executor/cuda/pointwise.h"

#include <limits>
#include <type_traits>

#include "executor/cpu/nf4.h"
#include "executor/cuda/check.h"
#include "executor/cuda/device_util.cuh"

namespace llmplan::exec::cuda {
using dev::load;
using dev::store;

namespace {
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
constexpr float kGeluK = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

// cpu::splitmix64_at and cpu::dropout_uniform, bit for bit.
__device__ __forceinline__ uint64_t splitmix64_at(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ double dropout_uniform(uint64_t seed, uint64_t index) {
  return static_cast<double>(splitmix64_at(seed, index) >> 11) * 0x1.0p-53;
}

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(bf16_t* p, float v) {
  atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __float2bfloat16_rn(v));
}
__device__ __forceinline__ void atomic_add(f16_t* p, float v) {
  atomicAdd(reinterpret_cast<__half*>(p), __float2half_rn(v));
}
// p[0] += a, p[1] += b in one native 32-bit atomic (p 4-byte aligned: an even column of a
// row of even length); each half rounded once, as the single-value adds.
__device__ __forceinline__ void atomic_add_pair(bf16_t* p, float a, float b) {
  atomicAdd(reinterpret_cast<__nv_bfloat162*>(p), __floats2bfloat162_rn(a, b));
}
__device__ __forceinline__ void atomic_add_pair(f16_t* p, float a, float b) {
  atomicAdd(reinterpret_cast<__half2*>(p), __floats2half2_rn(a, b));
}
}  // namespace

template <class S>
Status add(CudaContext& ctx, const S* a, const S* b, S* y, int64_t n) {
  return for_each_index(ctx, n, [=] __device__(int64_t i) { y[i] = store<S>(load(a[i]) + load(b[i])); }, "add");
}

template <class S>
Status add_inplace(CudaContext& ctx, S* y, const S* x, int64_t n) {
  return for_each_index(ctx, n, [=] __device__(int64_t i) { y[i] = store<S>(load(y[i]) + load(x[i])); }, "add_inplace");
}

template <class S>
Status add_row_bias(CudaContext& ctx, S* y, const S* b, int64_t rows, int64_t out) {
  return for_each_index(ctx, rows * out, [=] __device__(int64_t i) { y[i] = store<S>(load(y[i]) + load(b[i % out])); },
                  "add_row_bias");
}

template <class S>
Status scale(CudaContext& ctx, S* x, int64_t n, double s) {
  const float f = static_cast<float>(s);
  return for_each_index(ctx, n, [=] __device__(int64_t i) { x[i] = store<S>(load(x[i]) * f); }, "scale");
}

namespace {
// cpu::kNf4Levels in constant memory (the one table; copied at compile time).
__constant__ float kNf4LevelsDevice[16] = {
    cpu::kNf4Levels[0],  cpu::kNf4Levels[1],  cpu::kNf4Levels[2],  cpu::kNf4Levels[3],
    cpu::kNf4Levels[4],  cpu::kNf4Levels[5],  cpu::kNf4Levels[6],  cpu::kNf4Levels[7],
    cpu::kNf4Levels[8],  cpu::kNf4Levels[9],  cpu::kNf4Levels[10], cpu::kNf4Levels[11],
    cpu::kNf4Levels[12], cpu::kNf4Levels[13], cpu::kNf4Levels[14], cpu::kNf4Levels[15]};
}  // namespace

template <class S>
Status nf4_dequantize(CudaContext& ctx, const uint8_t* q, int64_t n, S* w) {
  const int64_t blocks = cpu::nf4_blocks(n);
  const uint8_t* packed = q;
  const uint8_t* codes = q + (n + 1) / 2;
  const uint8_t* scales = codes + blocks;  // fp32, little-endian, unaligned
  return for_each_index(ctx, n, [=] __device__(int64_t i) {
    const int64_t b = i / cpu::kNf4Block, g = b / cpu::kNf4Group;
    const uint8_t* sb = scales + 4 * g;
    const float scale = __uint_as_float(static_cast<unsigned>(sb[0]) | static_cast<unsigned>(sb[1]) << 8 |
                                        static_cast<unsigned>(sb[2]) << 16 | static_cast<unsigned>(sb[3]) << 24);
    const double absmax = codes[b] * static_cast<double>(scale) / 255.0;
    const int level = i % 2 == 0 ? packed[i / 2] & 0xF : packed[i / 2] >> 4;
    w[i] = store<S>(static_cast<float>(static_cast<double>(kNf4LevelsDevice[level]) * absmax));
  }, "nf4_dequantize");
}

template <class Src, class Dst>
Status cast(CudaContext& ctx, const Src* x, Dst* y, int64_t n) {
  return for_each_index(ctx, n, [=] __device__(int64_t i) { y[i] = store<Dst>(load(x[i])); }, "cast");
}

template <class Src, class Dst>
Status cast_rows(CudaContext& ctx, const Src* x, int64_t ld_x, Dst* y, int64_t ld_y, int64_t rows, int64_t cols) {
  return for_each_index(ctx, rows * cols, [=] __device__(int64_t e) {
    const int64_t r = e / cols, c = e - r * cols;
    y[r * ld_y + c] = store<Dst>(load(x[r * ld_x + c]));
  }, "cast_rows");
}

template <class S>
Status has_nonfinite(CudaContext& ctx, const S* x, int64_t n, int32_t* flag) {
  return for_each_index(ctx, n, [=] __device__(int64_t i) {
    if (!isfinite(load(x[i]))) *flag = 1;  // every writer stores 1: no atomic needed
  }, "has_nonfinite");
}

// y = x sigmoid(2u), u = k (x + c x^3)  (= 0.5 x (1 + tanh(u)); see cpu/activation.cpp).
template <class S>
Status gelu_forward(CudaContext& ctx, const S* x, S* y, int64_t n) {
  return for_each_index(ctx, n, [=] __device__(int64_t i) {
    const float v = load(x[i]);
    const float u = kGeluK * (v + kGeluC * v * v * v);
    y[i] = store<S>(v * sigmoid(2.0f * u));
  }, "gelu_forward");
}

template <class S>
Status gelu_backward(CudaContext& ctx, const S* x, const S* dy, S* dx, int64_t n) {
  return for_each_index(ctx, n, [=] __device__(int64_t i) {
    const float v = load(x[i]);
    const float s = sigmoid(2.0f * kGeluK * (v + kGeluC * v * v * v));
    const float du = kGeluK * (1.0f + 3.0f * kGeluC * v * v);
    dx[i] = store<S>(load(dy[i]) * (s + v * s * (1.0f - s) * 2.0f * du));
  }, "gelu_backward");
}

template <class S>
Status swiglu_forward(CudaContext& ctx, const S* gate, const S* up, S* y, int64_t n) {
  return for_each_index(ctx, n, [=] __device__(int64_t i) {
    const float g = load(gate[i]);
    y[i] = store<S>(g * sigmoid(g) * load(up[i]));
  }, "swiglu_forward");
}

template <class S>
Status swiglu_backward(CudaContext& ctx, const S* gate, const S* up, const S* dy, S* dgate, S* dup, int64_t n) {
  return for_each_index(ctx, n, [=] __device__(int64_t i) {
    const float g = load(gate[i]), u = load(up[i]), d = load(dy[i]);
    const float sg = sigmoid(g);
    dgate[i] = store<S>(d * u * sg * (1.0f + g * (1.0f - sg)));
    dup[i] = store<S>(d * g * sg);
  }, "swiglu_backward");
}

template <class S>
Status dropout_forward(CudaContext& ctx, const S* x, S* y, uint8_t* mask, int64_t n, double p,
                       uint64_t seed, uint64_t offset) {
  const float scale = static_cast<float>(1.0 / (1.0 - p));  // as the CPU op: double, then rounded
  return for_each_index(ctx, n, [=] __device__(int64_t i) {
    const bool keep = dropout_uniform(seed, offset + static_cast<uint64_t>(i)) >= p;
    mask[i] = keep ? 1 : 0;
    y[i] = store<S>(keep ? load(x[i]) * scale : 0.0f);
  }, "dropout_forward");
}

template <class S>
Status dropout_backward(CudaContext& ctx, const S* dy, const uint8_t* mask, S* dx, int64_t n, double p) {
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  return for_each_index(ctx, n, [=] __device__(int64_t i) {
    dx[i] = store<S>(mask[i] ? load(dy[i]) * scale : 0.0f);
  }, "dropout_backward");
}

template <class S>
Status embedding_forward(CudaContext& ctx, const int32_t* ids, const S* table, S* out, int64_t n,
                         int64_t h, bool accumulate) {
  return for_each_index(ctx, n * h, [=] __device__(int64_t e) {
    const int64_t i = e / h, j = e - i * h;
    const S v = table[static_cast<int64_t>(ids[i]) * h + j];
    out[e] = accumulate ? store<S>(load(out[e]) + load(v)) : v;
  }, "embedding_forward");
}

namespace {
// dtable += dout rows at ids[i] - v0 for the ids in [v0, v0 + rows); the rest skipped.
template <class S, class G>
Status scatter_add_rows(CudaContext& ctx, const int32_t* ids, const S* dout, G* dtable, int64_t n, int64_t h,
                        int64_t v0, int64_t rows, const char* name) {
  if constexpr (!std::is_same_v<G, float>) {
    // 16-bit gradients: one thread per PAIR of columns and the native paired atomic. Two
    // threads adding single 16-bit values to the two halves of one 32-bit word make the
    // hardware retry (the 16-bit atomic is a 32-bit compare-and-swap loop): measured 19 ms
    // for GPT-2's 16k x 768 token gradient on an H200, against well under 1 ms paired.
    if (h % 2 == 0) {
      const int64_t hp = h / 2;
      return for_each_index(ctx, n * hp, [=] __device__(int64_t e) {
        const int64_t i = e / hp, j = 2 * (e - i * hp);
        const int64_t local = static_cast<int64_t>(ids[i]) - v0;
        if (local < 0 || local >= rows) return;
        atomic_add_pair(dtable + local * h + j, load(dout[i * h + j]), load(dout[i * h + j + 1]));
      }, name);
    }
  }
  return for_each_index(ctx, n * h, [=] __device__(int64_t e) {
    const int64_t i = e / h, j = e - i * h;
    const int64_t local = static_cast<int64_t>(ids[i]) - v0;
    if (local < 0 || local >= rows) return;
    atomic_add(dtable + local * h + j, load(dout[e]));
  }, name);
}
}  // namespace

template <class S, class G>
Status embedding_backward(CudaContext& ctx, const int32_t* ids, const S* dout, G* dtable, int64_t n, int64_t h) {
  return scatter_add_rows(ctx, ids, dout, dtable, n, h, 0, std::numeric_limits<int64_t>::max(), "embedding_backward");
}

template <class S>
Status embedding_forward_shard(CudaContext& ctx, const int32_t* ids, const S* table, S* out, int64_t n, int64_t h,
                               int64_t v0, int64_t rows) {
  return for_each_index(ctx, n * h, [=] __device__(int64_t e) {
    const int64_t i = e / h, j = e - i * h;
    const int64_t local = static_cast<int64_t>(ids[i]) - v0;
    out[e] = local >= 0 && local < rows ? table[local * h + j] : store<S>(0.0f);
  }, "embedding_forward_shard");
}

template <class S, class G>
Status embedding_backward_shard(CudaContext& ctx, const int32_t* ids, const S* dout, G* dtable, int64_t n, int64_t h,
                                int64_t v0, int64_t rows) {
  return scatter_add_rows(ctx, ids, dout, dtable, n, h, v0, rows, "embedding_backward_shard");
}

// ---- mixture of experts (cpu/moe.h)

template <class S>
Status moe_router_softmax(CudaContext& ctx, const S* logits, float* probs, int64_t T, int64_t E) {
  return for_each_index(ctx, T, [=] __device__(int64_t t) {  // a thread per token: E is a few dozen
    const S* z = logits + t * E;
    float* p = probs + t * E;
    float mx = load(z[0]), sum = 0.0f;
    for (int64_t e = 1; e < E; ++e) mx = fmaxf(mx, load(z[e]));
    for (int64_t e = 0; e < E; ++e) sum += p[e] = expf(load(z[e]) - mx);
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
  }, "moe_router_softmax");
}

template <class S>
Status moe_dispatch(CudaContext& ctx, const S* x, const int32_t* rows, S* buf, int64_t T, int k, int64_t h) {
  return for_each_index(ctx, T * k * h, [=] __device__(int64_t e) {
    const int64_t at = e / h, i = e - at * h;
    const int32_t r = rows[at];
    if (r >= 0) buf[static_cast<int64_t>(r) * h + i] = x[at / k * h + i];
  }, "moe_dispatch");
}

template <class S>
Status moe_combine(CudaContext& ctx, const S* buf, const int32_t* rows, const float* gates, S* out, int64_t T, int k,
                   int64_t h) {
  return for_each_index(ctx, T * h, [=] __device__(int64_t e) {
    const int64_t t = e / h, i = e - t * h;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int64_t at = t * k + j;
      const int32_t r = rows[at];
      if (r < 0) continue;
      acc += (gates != nullptr ? gates[at] : 1.0f) * load(buf[static_cast<int64_t>(r) * h + i]);
    }
    out[e] = store<S>(acc);
  }, "moe_combine");
}

namespace {
// dgate[at] = dy[at / k] . buf[rows[at]], one warp per route (0 for a dropped one).
template <class S>
__global__ void moe_gate_grad_kernel(const S* dy, const S* buf, const int32_t* rows, float* dgate, int64_t routes, int k,
                                     int64_t h) {
  const int64_t at = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (at >= routes) return;  // warp-uniform
  const int lane = threadIdx.x & 31;
  const int32_t r = rows[at];
  float acc = 0.0f;
  if (r >= 0)
    for (int64_t i = lane; i < h; i += 32) acc += load(dy[at / k * h + i]) * load(buf[static_cast<int64_t>(r) * h + i]);
  acc = dev::warp_sum(acc);
  if (lane == 0) dgate[at] = acc;
}
}  // namespace

template <class S>
Status moe_combine_backward(CudaContext& ctx, const S* dy, const S* buf, const int32_t* rows, const float* gates, S* dbuf,
                            float* dgate, int64_t T, int k, int64_t h) {
  const int64_t routes = T * k;
  if (routes == 0) return Status::ok();
  if (Status s = for_each_index(ctx, routes * h, [=] __device__(int64_t e) {
        const int64_t at = e / h, i = e - at * h;
        const int32_t r = rows[at];
        if (r >= 0) dbuf[static_cast<int64_t>(r) * h + i] = store<S>(gates[at] * load(dy[at / k * h + i]));
      }, "moe_combine_backward");
      !s)
    return s;
  moe_gate_grad_kernel<S><<<static_cast<unsigned>((routes + 7) / 8), 256, 0, ctx.compute_stream()>>>(dy, buf, rows, dgate,
                                                                                                   routes, k, h);
  return launch_status("moe_gate_grad_kernel");
}

Status fill_positions(CudaContext& ctx, int32_t* positions, int64_t b, int64_t s) {
  return for_each_index(ctx, b * s, [=] __device__(int64_t e) { positions[e] = static_cast<int32_t>(e % s); },
                  "fill_positions");
}

namespace {
// One thread per (token, pair index i): the angle once, then every head (cpu/rope.cpp).
template <class S>
Status rotate(CudaContext& ctx, const S* x, const int32_t* positions, S* y, int64_t tokens, int64_t heads,
              int64_t d, double theta, double sign, const char* name) {
  const int64_t half = d / 2;
  return for_each_index(ctx, tokens * half, [=] __device__(int64_t e) {
    const int64_t t = e / half, i = e - t * half;
    const double angle = positions[t] * pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    double sn, cs;
    sincos(angle, &sn, &cs);
    const float c = static_cast<float>(cs);
    const float s = static_cast<float>(sign * sn);
    for (int64_t hd = 0; hd < heads; ++hd) {
      const int64_t base = (t * heads + hd) * d;
      const float x1 = load(x[base + i]);
      const float x2 = load(x[base + i + half]);
      y[base + i] = store<S>(x1 * c - x2 * s);
      y[base + i + half] = store<S>(x2 * c + x1 * s);
    }
  }, name);
}
}  // namespace

template <class S>
Status rope_forward(CudaContext& ctx, const S* x, const int32_t* positions, S* y, int64_t tokens,
                    int64_t heads, int64_t d, double theta) {
  return rotate(ctx, x, positions, y, tokens, heads, d, theta, 1.0, "rope_forward");
}

template <class S>
Status rope_backward(CudaContext& ctx, const S* dy, const int32_t* positions, S* dx, int64_t tokens,
                     int64_t heads, int64_t d, double theta) {
  return rotate(ctx, dy, positions, dx, tokens, heads, d, theta, -1.0, "rope_backward");
}

#define INST(S)                                                                                      \
  template Status add<S>(CudaContext&, const S*, const S*, S*, int64_t);                             \
  template Status add_inplace<S>(CudaContext&, S*, const S*, int64_t);                               \
  template Status add_row_bias<S>(CudaContext&, S*, const S*, int64_t, int64_t);                     \
  template Status has_nonfinite<S>(CudaContext&, const S*, int64_t, int32_t*);                       \
  template Status scale<S>(CudaContext&, S*, int64_t, double);                                       \
  template Status gelu_forward<S>(CudaContext&, const S*, S*, int64_t);                              \
  template Status gelu_backward<S>(CudaContext&, const S*, const S*, S*, int64_t);                   \
  template Status swiglu_forward<S>(CudaContext&, const S*, const S*, S*, int64_t);                  \
  template Status swiglu_backward<S>(CudaContext&, const S*, const S*, const S*, S*, S*, int64_t);   \
  template Status dropout_forward<S>(CudaContext&, const S*, S*, uint8_t*, int64_t, double, uint64_t, \
                                     uint64_t);                                                      \
  template Status dropout_backward<S>(CudaContext&, const S*, const uint8_t*, S*, int64_t, double);  \
  template Status embedding_forward<S>(CudaContext&, const int32_t*, const S*, S*, int64_t, int64_t, \
                                       bool);                                                        \
  template Status embedding_forward_shard<S>(CudaContext&, const int32_t*, const S*, S*, int64_t,    \
                                             int64_t, int64_t, int64_t);                             \
  template Status moe_router_softmax<S>(CudaContext&, const S*, float*, int64_t, int64_t);             \
  template Status moe_dispatch<S>(CudaContext&, const S*, const int32_t*, S*, int64_t, int, int64_t);  \
  template Status moe_combine<S>(CudaContext&, const S*, const int32_t*, const float*, S*, int64_t,    \
                                 int, int64_t);                                                      \
  template Status moe_combine_backward<S>(CudaContext&, const S*, const S*, const int32_t*,            \
                                          const float*, S*, float*, int64_t, int, int64_t);          \
  template Status rope_forward<S>(CudaContext&, const S*, const int32_t*, S*, int64_t, int64_t,      \
                                  int64_t, double);                                                  \
  template Status rope_backward<S>(CudaContext&, const S*, const int32_t*, S*, int64_t, int64_t,     \
                                   int64_t, double);
LLMPLAN_CUDA_FOR_STORAGE(INST)
#undef INST
#define INST_NF4(S) template Status nf4_dequantize<S>(CudaContext&, const uint8_t*, int64_t, S*);
LLMPLAN_CUDA_FOR_STORAGE(INST_NF4)
#undef INST_NF4
#define INSTG(S, G) \
  template Status embedding_backward<S, G>(CudaContext&, const int32_t*, const S*, G*, int64_t, int64_t); \
  template Status embedding_backward_shard<S, G>(CudaContext&, const int32_t*, const S*, G*, int64_t, int64_t, \
                                                 int64_t, int64_t);
LLMPLAN_CUDA_FOR_STORAGE_GRAD(INSTG)
#undef INSTG
#define CAST(A, B)                                                             \
  template Status cast<A, B>(CudaContext&, const A*, B*, int64_t);             \
  template Status cast_rows<A, B>(CudaContext&, const A*, int64_t, B*, int64_t, int64_t, int64_t);
CAST(float, bf16_t) CAST(float, f16_t) CAST(float, float) CAST(bf16_t, float) CAST(f16_t, float)
#undef CAST

}  // namespace llmplan::exec::cuda
