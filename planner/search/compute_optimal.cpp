#include "planner/search/compute_optimal.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "planner/spec/recipe.h"
#include "planner/spec/units.h"

namespace llmplan {

double chinchilla_loss(const ChinchillaLaw& law, double params, double tokens) {
  return law.E + law.A / std::pow(params, law.alpha) + law.B / std::pow(tokens, law.beta);
}

ComputeOptimal optimal_by_law(double flops, const ChinchillaLaw& law) {
  const double s = law.alpha + law.beta;
  const double g = std::pow(law.alpha * law.A / (law.beta * law.B), 1 / s);
  ComputeOptimal o;
  o.params = g * std::pow(flops / 6, law.beta / s);
  o.tokens = flops / (6 * o.params);
  return o;
}

ComputeOptimal optimal_by_tokens_per_param(double flops, double tokens_per_param) {
  ComputeOptimal o;
  o.params = std::sqrt(flops / (6 * tokens_per_param));
  o.tokens = tokens_per_param * o.params;
  return o;
}

ModelSpec derived_llama_shape(double params, int64_t max_positions) {
  // Candidates within kClose of the count compete on proportion (layers nearest the heads,
  // in log scale); without one, the nearest count wins. Nearby counts then get the same
  // proportions, so a planner iterating on the size does not jump between a deep-narrow
  // and a shallow-wide model (whose efficiencies differ).
  constexpr double kClose = 0.03;
  ModelSpec best;
  double best_err = std::numeric_limits<double>::infinity();
  bool best_close = false;
  constexpr int64_t kHeadDim = 128;
  // Pass 0 keeps layers within half to twice the heads; pass 1, for counts that the
  // 128,256-token embeddings dominate (a few hundred million), any layer count.
  for (int pass = 0; pass < 2 && best.heads == 0; ++pass)
  for (int heads = 4; heads <= 512; heads = heads < 16 ? heads * 2 : heads + 8) {
    ModelSpec m;
    m.family = Family::llama;
    m.heads = heads;
    m.kv_heads = std::min(heads, 8);
    m.head_dim = kHeadDim;
    m.hidden = kHeadDim * heads;
    m.ffn_hidden = (m.hidden * 7 / 2 + 255) / 256 * 256;
    m.vocab = 128256;
    m.max_positions = max_positions;
    m.layers = 1;
    const double one = static_cast<double>(count_params(m, 1, 1, 1, 0, 0).total);
    m.layers = 2;
    const double per_layer = static_cast<double>(count_params(m, 1, 1, 1, 0, 0).total) - one;
    const double rest = one - per_layer;  // embeddings, head, final norm
    const int layers = static_cast<int>(std::llround((params - rest) / per_layer));
    for (int l : {layers, layers + 1, layers - 1}) {
      if (l < 1 || (pass == 0 && (l < std::max(2, heads / 2) || l > 2 * heads))) continue;
      const double n = rest + per_layer * l;
      const double count_err = std::fabs(std::log(n / params));
      const bool close = count_err <= kClose;
      const double err = close ? std::fabs(std::log(static_cast<double>(l) / heads)) : count_err;
      if ((close && !best_close) || (close == best_close && err < best_err)) {
        best_err = err;
        best_close = close;
        best = m;
        best.layers = l;
      }
    }
  }
  if (best.heads == 0) {  // smaller than any shape: the smallest
    best.family = Family::llama;
    best.heads = best.kv_heads = 4;
    best.head_dim = kHeadDim;
    best.hidden = 4 * kHeadDim;
    best.ffn_hidden = (best.hidden * 7 / 2 + 255) / 256 * 256;
    best.vocab = 128256;
    best.max_positions = max_positions;
    best.layers = 1;
  }
  best.name = "derived-" + format_count(static_cast<double>(count_params(best, 1, 1, 1, 0, 0).total));
  best.source = "llmplan derived_llama_shape for " + format_count(params) +
                " parameters: Llama 3 proportions (head width 128, 8 KV heads, SwiGLU FFN 3.5 h, vocabulary 128,256)";
  return best;
}

}  // namespace llmplan
