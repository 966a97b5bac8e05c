// Compute-optimal model size for a training budget (Hoffmann et al. 2022, "Training
// Compute-Optimal Large Language Models", arXiv 2203.15556, "Chinchilla"), with training
// compute C = 6 N D (N parameters, D tokens; the paper's approximation, sec. 3).
//
// Two rules, both stated wherever llmplan uses them:
//   - the fitted law (the paper's Approach 3, eq. 10): loss L(N, D) = E + A / N^alpha +
//     B / D^beta with E = 1.69, A = 406.4, B = 410.7, alpha = 0.34, beta = 0.28, whose
//     minimum under C = 6 N D is N_opt = G (C/6)^a, D_opt = G^-1 (C/6)^b, a = beta /
//     (alpha + beta), b = alpha / (alpha + beta), G = (alpha A / (beta B))^(1/(alpha+beta))
//     (eq. 4). It favours smaller models than Approaches 1 and 2 (a = 0.46 vs 0.50).
//   - the rule of thumb: about 20 tokens per parameter, D = 20 N, so N = sqrt(C / 120):
//     what the paper's Table 3 (Approach 1's projections) works out to.
//
// derived_llama_shape turns a parameter count into a dense Llama-3-style transformer shape.
// Pure functions. Thread-safety: pure.
#pragma once

#include "planner/spec/specs.h"

namespace llmplan {

struct ChinchillaLaw {
  double E = 1.69, A = 406.4, B = 410.7, alpha = 0.34, beta = 0.28;
};

struct ComputeOptimal {
  double params = 0;  // N
  double tokens = 0;  // D
};

double chinchilla_loss(const ChinchillaLaw& law, double params, double tokens);
// REQUIRES: flops > 0.
ComputeOptimal optimal_by_law(double flops, const ChinchillaLaw& law = {});
ComputeOptimal optimal_by_tokens_per_param(double flops, double tokens_per_param = 20);

// A dense Llama-3-style shape with about `params` parameters: head width 128, 8 key/value
// heads (fewer heads: as many), SwiGLU FFN 3.5 h rounded up to a multiple of 256 (Llama 3
// 8B and 70B), vocabulary 128,256, untied embeddings; query heads a multiple of 8 from 16
// up (so tp 8 divides them), layers within half to twice the heads (Llama 3: 32 layers
// for 32 heads, 80 for 64, 126 for 128): of the pairs within 3% of the count, the one
// with layers nearest the heads; when none is that close, the nearest count. Below about
// 1e9 the embeddings dominate and the layers may leave that range; below about 1.5e8 the
// result is the smallest shape (4 heads, one layer).
ModelSpec derived_llama_shape(double params, int64_t max_positions = 8192);

}  // namespace llmplan
