// llmplan_cuda_peak: the measured ceilings that MFU and the time model's efficiencies are
// taken against -- the bf16 matrix-product rate through cuBLASLt (the same gemm() the ops
// use; fp32 accumulation, bf16 output) and the device-to-device copy bandwidth.
//
//   llmplan_cuda_peak [--m 8192] [--n 8192] [--k 8192] [--warmup 5] [--iters 20]
//
// Random operands (a GEMM on zeros runs faster than on data). Prints readable lines and
// key=value lines for scripts (peak_bf16_tflops=..., copy_tb_s=...). Exit codes: 0 done,
// 1 a CUDA failure, 2 bad arguments, 77 no CUDA device (the tests' skip code).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "executor/cuda/context.h"
#include "executor/cuda/linear.h"

using namespace llmplan;
using namespace llmplan::exec;

namespace {
struct Args {
  int64_t m = 8192, n = 8192, k = 8192;
  int warmup = 5, iters = 20;
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (f == "--m") a.m = std::atoll(v);
    else if (f == "--n") a.n = std::atoll(v);
    else if (f == "--k") a.k = std::atoll(v);
    else if (f == "--warmup") a.warmup = std::atoi(v);
    else if (f == "--iters") a.iters = std::atoi(v);
    else return false;
  }
  return a.m > 0 && a.n > 0 && a.k > 0 && a.warmup >= 0 && a.iters > 0;
}

int fail(const Status& s) {
  std::fprintf(stderr, "llmplan_cuda_peak: %s\n", s.message().c_str());
  return 1;
}

// Median milliseconds of `iters` timed runs of fn (after `warmup` untimed ones).
template <class Fn>
Result<double> time_median_ms(cuda::CudaContext& ctx, int warmup, int iters, Fn fn) {
  for (int i = 0; i < warmup; ++i)
    if (Status s = fn(); !s) return s;
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(t0, ctx.compute_stream());
    if (Status s = fn(); !s) return s;
    cudaEventRecord(t1, ctx.compute_stream());
    if (cudaEventSynchronize(t1) != cudaSuccess) return Status::runtime("cudaEventSynchronize failed");
    float e = 0;
    cudaEventElapsedTime(&e, t0, t1);
    ms.push_back(e);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr, "usage: llmplan_cuda_peak [--m N] [--n N] [--k N] [--warmup N] [--iters N]\n");
    return 2;
  }
  const cuda::DeviceProbe probe = cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("no CUDA device: %s\n", probe.reason.c_str());
    return 77;
  }
  Result<std::unique_ptr<cuda::CudaContext>> created = cuda::CudaContext::create();
  if (!created.ok()) return fail(created.status());
  cuda::CudaContext& ctx = **created;
  std::printf("device: %s (%d SMs, compute capability %d.%d)\n", ctx.device_name().c_str(), ctx.sm_count(),
              ctx.compute_capability()[0], ctx.compute_capability()[1]);

  // Operands: random bf16 in [-1, 1) from a fixed LCG.
  const int64_t na = a.m * a.k, nb = a.k * a.n, nc = a.m * a.n;
  std::vector<bf16_t> host(static_cast<size_t>(std::max(na, nb)));
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (bf16_t& h : host) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    h = float_to_bf16(static_cast<float>(static_cast<int64_t>(x >> 40) - (int64_t{1} << 23)) * 0x1.0p-23f);
  }
  auto A = Tensor::empty(ctx.allocator(), Shape{a.m, a.k}, DType::bf16, Category::workspace, "A");
  auto B = Tensor::empty(ctx.allocator(), Shape{a.k, a.n}, DType::bf16, Category::workspace, "B");
  auto C = Tensor::empty(ctx.allocator(), Shape{a.m, a.n}, DType::bf16, Category::workspace, "C");
  if (!A.ok()) return fail(A.status());
  if (!B.ok()) return fail(B.status());
  if (!C.ok()) return fail(C.status());
  if (Status s = cuda::copy_to_device(ctx, A->raw(), host.data(), na * 2); !s) return fail(s);
  if (Status s = cuda::copy_to_device(ctx, B->raw(), host.data(), nb * 2); !s) return fail(s);

  cuda::GemmArgs g;
  g.m = a.m;
  g.n = a.n;
  g.k = a.k;
  g.a = A->raw();
  g.lda = a.k;
  g.b = B->raw();
  g.ldb = a.n;
  g.c = C->raw();
  g.ldc = a.n;
  g.a_type = g.b_type = g.c_type = DType::bf16;
  Result<double> gemm_ms = time_median_ms(ctx, a.warmup, a.iters, [&] { return cuda::gemm(ctx, g); });
  if (!gemm_ms.ok()) return fail(gemm_ms.status());
  const double tflops = 2.0 * static_cast<double>(a.m) * static_cast<double>(a.n) * static_cast<double>(a.k) /
                        (*gemm_ms * 1e-3) / 1e12;
  std::printf("bf16 gemm %lldx%lldx%lld (cuBLASLt, fp32 accumulation): %.1f TFLOP/s (median %.3f ms of %d)\n",
              static_cast<long long>(a.m), static_cast<long long>(a.n), static_cast<long long>(a.k), tflops,
              *gemm_ms, a.iters);

  // Device copy: C's bytes from A's, as many as both hold.
  const int64_t bytes = std::min(na, nc) * 2;
  Result<double> copy_ms = time_median_ms(ctx, 2, a.iters, [&] { return cuda::copy_on_device(ctx, C->raw(), A->raw(), bytes); });
  if (!copy_ms.ok()) return fail(copy_ms.status());
  const double tb_s = 2.0 * static_cast<double>(bytes) / (*copy_ms * 1e-3) / 1e12;  // read + write
  std::printf("device copy %.2f GiB: %.2f TB/s counting bytes read and written (median %.3f ms)\n",
              static_cast<double>(bytes) / (1 << 30), tb_s, *copy_ms);
  if (Status s = ctx.synchronize(); !s) return fail(s);
  std::printf("peak_bf16_tflops=%.1f\ncopy_tb_s=%.2f\n", tflops, tb_s);
  return 0;
}
