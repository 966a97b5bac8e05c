// The CUDA ops, one header per family; each op mirrors the CPU op of the same name
// (executor/cpu/ops.h) with the CudaContext as first argument, device pointers, and a
// Status for launch failures. Tests compare every one against its CPU twin
// (tests/executor_cuda/).
#pragma once

#include "executor/cuda/attention.h"   // causal GQA attention: materialized (GEMMs) and flash (fused)
#include "executor/cuda/context.h"     // CudaContext: device, streams, cuBLASLt, allocator; copies
#include "executor/cuda/linear.h"      // cuBLASLt GEMM and the linear layer (bf16/fp16, fp32/tf32)
#include "executor/cuda/optimizer.h"   // AdamW, SGD: fused multi-tensor steps
#include "executor/cuda/pointwise.h"   // add, casts, non-finite check, GELU, SwiGLU, dropout, embeddings, rope
#include "executor/cuda/rowwise.h"     // LayerNorm, RMSNorm, cross-entropy, column sums
