// The CPU ops, one header per family. Every op is a plain function over raw pointers and
// dimensions, templated on the storage type; forward and backward side by side.
#pragma once

#include "executor/cpu/activation.h"     // gelu (tanh), swiglu
#include "executor/cpu/attention.h"      // causal GQA attention: materialized and flash
#include "executor/cpu/cross_entropy.h"  // loss over the vocabulary, ignore index -1
#include "executor/cpu/dropout.h"        // 1-byte masks, counter-based RNG
#include "executor/cpu/elementwise.h"    // residual add, casts, non-finite check
#include "executor/cpu/embedding.h"      // token and learned position embeddings
#include "executor/cpu/linear.h"         // y = x W^T + b over CBLAS
#include "executor/cpu/moe.h"            // MoE router softmax, dispatch and combine
#include "executor/cpu/norm.h"           // LayerNorm, RMSNorm (backward from the input only)
#include "executor/cpu/optimizer.h"      // AdamW, SGD momentum, gradient-norm clipping
#include "executor/cpu/rope.h"           // rotary embedding, rotate-half (HF Llama)
