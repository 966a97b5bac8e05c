#include "launch/model_shape.h"

namespace llmplan::launch_formats {

namespace {

std::string text(int64_t v) { return std::to_string(v); }
std::string text(bool v) { return v ? "true" : "false"; }
std::string text(Family v) { return to_string(v); }
std::string text(AttentionBias v) { return to_string(v); }

template <class T, class U>
bool differs(const std::optional<T>& stated, const U& actual, const char* field, std::optional<ShapeMismatch>* out) {
  if (!stated || static_cast<U>(*stated) == actual) return false;
  *out = ShapeMismatch{field, text(static_cast<U>(*stated)), text(actual)};
  return true;
}

}  // namespace

std::optional<ShapeMismatch> shape_mismatch(const ModelShape& s, const ModelSpec& m) {
  std::optional<ShapeMismatch> r;
  const int experts = m.moe.enabled() ? m.moe.experts : 0;
  (void)(differs(s.family, m.family, "family", &r) || differs(s.layers, int64_t{m.layers}, "layers", &r) ||
         differs(s.hidden, m.hidden, "hidden", &r) || differs(s.heads, int64_t{m.heads}, "heads", &r) ||
         differs(s.kv_heads, int64_t{m.kv_heads}, "kv_heads", &r) || differs(s.head_width, m.head_width(), "head_dim", &r) ||
         differs(s.ffn_hidden, m.ffn_hidden, "ffn_hidden", &r) || differs(s.vocab, m.vocab, "vocab", &r) ||
         differs(s.max_positions, m.max_positions, "max_positions", &r) ||
         differs(s.tied_embeddings, m.tied_embeddings, "tied_embeddings", &r) ||
         differs(s.attention_bias, m.attention_bias, "attention_bias", &r) || differs(s.qk_norm, m.qk_norm, "qk_norm", &r) ||
         differs(s.experts, int64_t{experts}, "moe.experts", &r) ||
         (experts > 0 && (differs(s.experts_per_token, int64_t{m.moe.experts_per_token}, "moe.experts_per_token", &r) ||
                          differs(s.expert_ffn_hidden, m.moe.expert_ffn_hidden, "moe.expert_ffn_hidden", &r) ||
                          differs(s.shared_experts, int64_t{m.moe.shared_experts}, "moe.shared_experts", &r))));
  return r;
}

std::string mismatch_text(const ShapeMismatch& d) { return d.field + ": " + d.stated + " vs " + d.model; }

ModelShape shape_of(const ModelSpec& m) {
  ModelShape s;
  s.family = m.family;
  s.layers = m.layers;
  s.hidden = m.hidden;
  s.heads = m.heads;
  s.kv_heads = m.kv_heads;
  s.head_width = m.head_width();
  s.ffn_hidden = m.ffn_hidden;
  s.vocab = m.vocab;
  s.max_positions = m.max_positions;
  s.tied_embeddings = m.tied_embeddings;
  s.attention_bias = m.attention_bias;
  s.qk_norm = m.qk_norm;
  s.experts = m.moe.enabled() ? m.moe.experts : 0;
  if (m.moe.enabled()) {
    s.experts_per_token = m.moe.experts_per_token;
    s.expert_ffn_hidden = m.moe.expert_ffn_hidden;
    s.shared_experts = m.moe.shared_experts;
  }
  return s;
}

std::vector<std::string> presets_with_shape(const PresetRegistry& reg, const ModelShape& stated) {
  std::vector<std::string> out;
  for (const std::string& id : reg.model_ids()) {
    Result<ModelSpec> m = reg.model(id);
    if (m && !shape_mismatch(stated, *m)) out.push_back(id);
  }
  return out;
}

}  // namespace llmplan::launch_formats
