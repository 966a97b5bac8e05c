// cuBLASLt GEMMs (linear.h). Host code only: the descriptors are built per call (cheap,
// host memory), the algorithm comes from the heuristic once per shape and is cached in
// the context.
#include "executor/cuda/linear.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "executor/cuda/check.h"
#include "executor/cuda/pointwise.h"
#include "executor/cuda/rowwise.h"

namespace llmplan::exec::cuda {

namespace {
Status blas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status::runtime(std::string(what) + ": " + cublasLtGetStatusName(s) + " (" + cublasLtGetStatusString(s) + ")");
}
#define LLMPLAN_BLAS_TRY(call)                                            \
  do {                                                                    \
    if (Status s_ = blas_status((call), #call); !s_) return s_;           \
  } while (0)

Result<cudaDataType_t> cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: return Status::bad_input(std::string("gemm: unsupported dtype ") + to_string(t));
  }
}

// Largest power of two (<= 256) dividing the address and, for batches, the stride in bytes:
// cuBLASLt assumes 256-byte alignment unless told otherwise.
uint32_t alignment(const void* p, int64_t stride_bytes) {
  uint64_t x = reinterpret_cast<uintptr_t>(p) | 256u;
  if (stride_bytes != 0) x |= static_cast<uint64_t>(stride_bytes);
  return static_cast<uint32_t>(x & (~x + 1));  // lowest set bit
}

struct Desc {
  cublasLtMatmulDesc_t d = nullptr;
  ~Desc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() { if (l) cublasLtMatrixLayoutDestroy(l); }
};
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  ~Pref() { if (p) cublasLtMatmulPreferenceDestroy(p); }
};

// A column-major (rows, cols, ld) matrix layout, batched when batch > 1.
Status make_layout(Layout& out, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int batch,
                   int64_t stride) {
  LLMPLAN_BLAS_TRY(cublasLtMatrixLayoutCreate(&out.l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = batch;
    LLMPLAN_BLAS_TRY(cublasLtMatrixLayoutSetAttribute(out.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    LLMPLAN_BLAS_TRY(cublasLtMatrixLayoutSetAttribute(out.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                      sizeof(stride)));
  }
  return Status::ok();
}

// C stays as it is (beta == 1) or becomes 0 (beta == 0) when the inner dimension is empty.
Status empty_product(CudaContext& ctx, const GemmArgs& g) {
  if (g.bias != nullptr || (g.beta != 0.0f && g.beta != 1.0f)) {
    return Status::bad_input("gemm with k = 0: only beta 0 or 1 and no bias are supported");
  }
  if (g.beta == 1.0f) return Status::ok();
  const int64_t es = dtype_size(g.c_type);
  for (int i = 0; i < g.batch; ++i) {
    char* c = static_cast<char*>(g.c) + i * g.stride_c * es;
    LLMPLAN_CUDA_TRY(cudaMemset2DAsync(c, static_cast<size_t>(g.ldc * es), 0, static_cast<size_t>(g.n * es),
                                       static_cast<size_t>(g.m), ctx.compute_stream()));
  }
  return Status::ok();
}

Status add_bias(CudaContext& ctx, const GemmArgs& g) {
  switch (g.c_type) {
    case DType::f32: return add_row_bias(ctx, static_cast<float*>(g.c), static_cast<const float*>(g.bias), g.m, g.n);
    case DType::bf16: return add_row_bias(ctx, static_cast<bf16_t*>(g.c), static_cast<const bf16_t*>(g.bias), g.m, g.n);
    case DType::f16: return add_row_bias(ctx, static_cast<f16_t*>(g.c), static_cast<const f16_t*>(g.bias), g.m, g.n);
    default: return Status::bad_input("gemm bias: unsupported dtype");
  }
}

// One cuBLASLt matmul; with_bias selects the BIAS epilogue. found = false (and ok) when the
// heuristic offers no algorithm for this problem.
Status run_matmul(CudaContext& ctx, const GemmArgs& g, bool with_bias, bool* found) {
  *found = false;
  Result<cudaDataType_t> at = cuda_type(g.a_type), ct = cuda_type(g.c_type);
  if (!at.ok()) return at.status();
  if (!ct.ok()) return ct.status();
  const cublasComputeType_t compute =
      g.a_type == DType::f32 && ctx.tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

  // Column-major: C^T (n, m) = op(B)^T (n, k) * op(A)^T (k, m); cuBLASLt's A is our B.
  Desc op;
  LLMPLAN_BLAS_TRY(cublasLtMatmulDescCreate(&op.d, compute, CUDA_R_32F));
  const cublasOperation_t op_a = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LLMPLAN_BLAS_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  LLMPLAN_BLAS_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (with_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = *ct;
    LLMPLAN_BLAS_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    LLMPLAN_BLAS_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
    LLMPLAN_BLAS_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                    sizeof(bias_type)));
  }
  Layout la, lb, lc;
  if (Status s = make_layout(la, *at, g.tb ? g.k : g.n, g.tb ? g.n : g.k, g.ldb, g.batch, g.stride_b); !s) return s;
  if (Status s = make_layout(lb, *at, g.ta ? g.m : g.k, g.ta ? g.k : g.m, g.lda, g.batch, g.stride_a); !s) return s;
  if (Status s = make_layout(lc, *ct, g.n, g.m, g.ldc, g.batch, g.stride_c); !s) return s;

  const int64_t es_ab = dtype_size(g.a_type), es_c = dtype_size(g.c_type);
  const uint32_t align_a = alignment(g.b, g.stride_b * es_ab), align_b = alignment(g.a, g.stride_a * es_ab);
  const uint32_t align_c = alignment(g.c, g.stride_c * es_c);
  const CudaContext::GemmKey key{g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, static_cast<int64_t>(g.a_type),
                                 static_cast<int64_t>(g.c_type), g.batch, g.stride_a, g.stride_b, g.stride_c,
                                 with_bias, static_cast<int64_t>(compute), align_a, align_b, align_c,
                                 ctx.blas_workspace_bytes(), g.beta != 0.0f};
  auto cached = ctx.gemm_algos().find(key);
  if (cached == ctx.gemm_algos().end()) {
    Pref pref;
    LLMPLAN_BLAS_TRY(cublasLtMatmulPreferenceCreate(&pref.p));
    const uint64_t ws = static_cast<uint64_t>(ctx.blas_workspace_bytes());
    LLMPLAN_BLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    LLMPLAN_BLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                          sizeof(align_a)));
    LLMPLAN_BLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                          sizeof(align_b)));
    LLMPLAN_BLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                          sizeof(align_c)));
    LLMPLAN_BLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                          sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx.blas(), op.d, la.l, lb.l, lc.l, lc.l, pref.p, 1,
                                                              &result, &returned);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && returned == 0)) return Status::ok();
    LLMPLAN_BLAS_TRY(hs);
    cached = ctx.gemm_algos().emplace(key, result.algo).first;
  }
  LLMPLAN_BLAS_TRY(cublasLtMatmul(ctx.blas(), op.d, &g.alpha, g.b, la.l, g.a, lb.l, &g.beta, g.c, lc.l, g.c, lc.l,
                                  &cached->second, ctx.blas_workspace(),
                                  static_cast<size_t>(ctx.blas_workspace_bytes()), ctx.compute_stream()));
  *found = true;
  return Status::ok();
}
}  // namespace

Status gemm(CudaContext& ctx, const GemmArgs& g) {
  if (g.a_type != g.b_type) return Status::bad_input("gemm: A and B must have the same dtype");
  if (g.c_type != g.a_type && g.c_type != DType::f32) return Status::bad_input("gemm: C must be f32 or A's dtype");
  if (g.bias != nullptr && g.batch > 1) return Status::bad_input("gemm: bias with batch > 1 is not supported");
  if (g.m == 0 || g.n == 0 || g.batch == 0) return Status::ok();
  if (g.k == 0) return empty_product(ctx, g);
  bool found = false;
  if (Status s = run_matmul(ctx, g, g.bias != nullptr, &found); !s || found) return s;
  if (g.bias != nullptr) {  // no algorithm with the bias epilogue: plain GEMM, then the bias
    if (Status s = run_matmul(ctx, g, false, &found); !s) return s;
    if (found) return add_bias(ctx, g);
  }
  return Status::runtime("gemm: cuBLASLt has no algorithm for m=" + std::to_string(g.m) + " n=" +
                         std::to_string(g.n) + " k=" + std::to_string(g.k) + " " + to_string(g.a_type) + " -> " +
                         to_string(g.c_type));
}

int64_t linear_workspace_bytes(int64_t n, int64_t out) { return column_sums_workspace_bytes(n, out); }

namespace {
// An output width that is not a multiple of 8 (GPT-2's vocabulary, 50257) keeps cuBLASLt
// off its tensor-core kernels for the whole GEMM (measured on an H200: 124 TFLOP/s against
// 711 for 50304 columns): such a GEMM runs as an aligned part of the first out / 64 * 64
// columns and a small remainder.
int64_t aligned_split(int64_t out) { return out % 8 != 0 && out >= 128 ? out / 64 * 64 : out; }
}  // namespace

template <class S>
Status linear_forward(CudaContext& ctx, const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in,
                      int64_t out, int64_t ld_y) {
  if (const int64_t n1 = aligned_split(out); n1 < out) {
    const int64_t ld = ld_y > 0 ? ld_y : out;
    if (Status s = linear_forward<S>(ctx, x, w, b, y, n, in, n1, ld); !s) return s;
    return linear_forward<S>(ctx, x, w + n1 * in, b ? b + n1 : nullptr, y + n1, n, in, out - n1, ld);
  }
  GemmArgs g;
  g.ta = false;
  g.tb = true;  // y (n, out) = x (n, in) w^T
  g.m = n;
  g.n = out;
  g.k = in;
  g.a = x;
  g.lda = in;
  g.b = w;
  g.ldb = in;
  g.c = y;
  g.ldc = ld_y > 0 ? ld_y : out;
  g.a_type = g.b_type = g.c_type = dtype_of<S>;
  g.bias = b;
  return gemm(ctx, g);
}

template <class S, class G>
Status linear_backward(CudaContext& ctx, const S* dy, const S* x, const S* w, S* dx, G* dw, G* db, int64_t n,
                       int64_t in, int64_t out, std::span<std::byte> ws, int64_t ld_dy) {
  const int64_t ldd = ld_dy > 0 ? ld_dy : out;
  if (db != nullptr && ldd != out) return Status::bad_input("linear_backward: a bias gradient needs a dense dy (ld_dy = out)");
  if (const int64_t n1 = aligned_split(out); n1 < out) {  // see aligned_split
    if (db != nullptr)
      if (Status s = column_sums_accumulate(ctx, dy, db, n, out, ws); !s) return s;
    // dw rows and the dx sum split at n1; the remainder's dx is added (beta = 1) onto the first part's.
    if (Status s = linear_backward<S, G>(ctx, dy, x, w, dx, dw, nullptr, n, in, n1, ws, ldd); !s) return s;
    if (dw != nullptr)
      if (Status s = linear_backward<S, G>(ctx, dy + n1, x, w + n1 * in, nullptr, dw + n1 * in, nullptr, n, in, out - n1, ws, ldd); !s)
        return s;
    if (dx == nullptr) return Status::ok();
    GemmArgs g;
    g.m = n;
    g.n = in;
    g.k = out - n1;
    g.beta = 1.0f;
    g.a = dy + n1;
    g.lda = ldd;
    g.b = w + n1 * in;
    g.ldb = in;
    g.c = dx;
    g.ldc = in;
    g.a_type = g.b_type = g.c_type = dtype_of<S>;
    return gemm(ctx, g);
  }
  if (dw != nullptr) {  // dw (out, in) += dy^T (out, n) x (n, in)
    GemmArgs g;
    g.ta = true;
    g.m = out;
    g.n = in;
    g.k = n;
    g.beta = 1.0f;
    g.a = dy;
    g.lda = ldd;
    g.b = x;
    g.ldb = in;
    g.c = dw;
    g.ldc = in;
    g.a_type = g.b_type = dtype_of<S>;
    g.c_type = dtype_of<G>;
    if (Status s = gemm(ctx, g); !s) return s;
  }
  if (db != nullptr) {
    if (Status s = column_sums_accumulate(ctx, dy, db, n, out, ws); !s) return s;
  }
  if (dx != nullptr) {  // dx (n, in) = dy (n, out) w (out, in)
    GemmArgs g;
    g.m = n;
    g.n = in;
    g.k = out;
    g.a = dy;
    g.lda = ldd;
    g.b = w;
    g.ldb = in;
    g.c = dx;
    g.ldc = in;
    g.a_type = g.b_type = g.c_type = dtype_of<S>;
    if (Status s = gemm(ctx, g); !s) return s;
  }
  return Status::ok();
}

template Status linear_forward<float>(CudaContext&, const float*, const float*, const float*, float*, int64_t,
                                      int64_t, int64_t, int64_t);
template Status linear_forward<bf16_t>(CudaContext&, const bf16_t*, const bf16_t*, const bf16_t*, bf16_t*, int64_t,
                                       int64_t, int64_t, int64_t);
template Status linear_forward<f16_t>(CudaContext&, const f16_t*, const f16_t*, const f16_t*, f16_t*, int64_t,
                                      int64_t, int64_t, int64_t);
#define INSTG(S, G)                                                                                       \
  template Status linear_backward<S, G>(CudaContext&, const S*, const S*, const S*, S*, G*, G*, int64_t, \
                                        int64_t, int64_t, std::span<std::byte>, int64_t);
INSTG(float, float) INSTG(bf16_t, bf16_t) INSTG(bf16_t, float) INSTG(f16_t, f16_t) INSTG(f16_t, float)
#undef INSTG

}  // namespace llmplan::exec::cuda
