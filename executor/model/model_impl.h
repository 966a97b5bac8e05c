// ModelImpl, whole: the class (model_class.h) and its members, one concern per file. The
// two backends include this: executor/model.cpp over the CPU ops, executor/cuda/cuda_model.cpp
// over the CUDA ops, so both run the same forward, backward, recompute and parallel code.
#pragma once

#include "executor/model/model_class.h"

#include "executor/model/parameters.h"
#include "executor/model/linear_norm_attention.h"
#include "executor/model/latent_attention.h"
#include "executor/model/context_parallel.h"
#include "executor/model/moe.h"
#include "executor/model/layer_forward.h"
#include "executor/model/layer_backward.h"
#include "executor/model/multi_token.h"
#include "executor/model/vocab_parallel.h"
#include "executor/model/step.h"

#undef LL_TRY
