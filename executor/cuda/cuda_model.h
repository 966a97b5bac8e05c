// The executor's model (executor/model.h) on a GPU: the same ModelImpl as the CPU backend
// (executor/model/) over the CUDA ops, so the tensors a step keeps -- names, sizes,
// categories, order -- are the CPU's and the planner's recipe, in device memory from the
// context's caching allocator.
//
// Implemented: GPT and Llama blocks, mixture-of-experts layers (routing decided on the
// host: the router's probabilities are read back, the routes' rows and gates sent down),
// fp32 / bf16 / fp16 storage with the gradient types of precision_scheme, recompute none /
// selective / full, flash and materialized attention, residual and embedding dropout,
// LoRA, frozen layers, document masks; tensor parallel (the vocabulary-parallel embedding
// and loss are ops), pipeline stages, context parallel (flash attention: its slices run
// the SIMT kernels) and expert parallel.
// Not on the GPU (bad_input naming it): context parallel with materialized attention,
// dropout of the attention probabilities (materialized attention with dropout: the CPU
// has a fused kernel, the GPU not), fp64.
//
// Batches stay host memory (model.h's Batch); each micro-batch's tokens, targets, document
// ids and positions (with CP also the whole sequences' document ids) are copied to device
// buffers (Category::workspace, 16 bytes a token) that each pipeline slot keeps. The loss
// of a micro-batch is read back to the host, which waits for its forward to finish; the
// backward is enqueued after. MoE layers also wait, for the router's probabilities.
// Thread-safety: as CudaContext.
#pragma once

#include <memory>

#include "executor/cuda/context.h"
#include "executor/model.h"
#include "planner/spec/status.h"

namespace llmplan::exec::cuda {

// REQUIRES: ctx outlives the model. Errors: bad_input (see top), runtime (OOM, CUDA).
Result<std::unique_ptr<Model>> build_cuda_model(CudaContext& ctx, const ModelConfig& config);

}  // namespace llmplan::exec::cuda
