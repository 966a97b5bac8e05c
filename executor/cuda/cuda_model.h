// The executor's model (executor/model.h) on a GPU: the same ModelImpl as the CPU backend
// (executor/model_impl.h) over the CUDA ops, so the tensors a step keeps -- names, sizes,
// categories, order -- are the CPU's and the planner's recipe, in device memory from the
// context's caching allocator.
//
// Implemented: GPT and Llama blocks, fp32 / bf16 / fp16 storage with the gradient types of
// precision_scheme, recompute none / selective / full, flash and materialized attention,
// residual and embedding dropout, LoRA, frozen layers, document masks; tp = pp = 1.
// Not on the GPU (bad_input naming it): tensor parallel (its vocabulary-parallel embedding
// and cross-entropy loop over the host), pipeline stages, dropout of the attention
// probabilities (materialized attention with dropout: the CPU has a fused kernel, the GPU
// not), fp64.
//
// Batches stay host memory (model.h's Batch); each micro-batch's tokens, targets, document
// ids and positions are copied to device buffers (Category::workspace, 16 bytes a token)
// that live as long as the model. The loss of a micro-batch is read back to the host, which
// waits for its forward to finish; the backward is enqueued after.
// Thread-safety: as CudaContext.
#pragma once

#include <memory>

#include "executor/cuda/context.h"
#include "executor/model.h"
#include "planner/status.h"

namespace llmplan::exec::cuda {

// REQUIRES: ctx outlives the model. Errors: bad_input (see top), runtime (OOM, CUDA).
Result<std::unique_ptr<Model>> build_cuda_model(CudaContext& ctx, const ModelConfig& config);

}  // namespace llmplan::exec::cuda
