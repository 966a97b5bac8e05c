#include "planner/spec/spec_json.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "planner/spec/json_fields.h"
#include "planner/spec/recipe.h"

namespace llmplan {

using nlohmann::json;

namespace {

// Bounds that reject absurd input before it can overflow a formula.
constexpr int64_t kMaxLayers = 10000;
constexpr int64_t kMaxHidden = 1 << 20;
constexpr int64_t kMaxHeads = 1 << 16;
constexpr int64_t kMaxVocab = 100'000'000;
constexpr int64_t kMaxSeq = 1 << 24;          // 16M tokens
constexpr int64_t kMaxBatch = 100'000'000;
constexpr int64_t kMaxDegree = 1 << 20;

// The keys a file spells the checked fields with: llmplan's own, or a Hugging Face config's,
// so that an error names the key the user wrote.
struct ShapeKeys {
  const char* heads = "heads";
  const char* kv_heads = "kv_heads";
  const char* hidden = "hidden";
  const char* experts_per_token = "moe.experts_per_token";
  const char* experts = "moe.experts";
  const char* first_dense_layers = "moe.first_dense_layers";
};
constexpr ShapeKeys kGpt2ConfigKeys{"n_head", "n_head", "n_embd", "", "", ""};
constexpr ShapeKeys kHfConfigKeys{"num_attention_heads", "num_key_value_heads", "hidden_size", "num_experts_per_tok", "num_local_experts",
                                  "first_k_dense_replace"};

Status check_model_shape(const ModelSpec& m, const std::string& origin, const std::string& prefix, const ShapeKeys& keys = {}) {
  auto field = [&](const char* k) { return origin + ": field '" + (prefix.empty() ? std::string(k) : prefix + "." + k) + "': "; };
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0)
    return Status::bad_input(field(keys.kv_heads) + "expected a divisor of " + keys.heads + " (" + std::to_string(m.heads) + "), got " +
                             std::to_string(m.kv_heads));
  if (m.head_dim == 0 && m.hidden % m.heads != 0)
    return Status::bad_input(field(keys.heads) + "expected a divisor of " + keys.hidden + " (" + std::to_string(m.hidden) +
                             ") or an explicit head_dim, got " + std::to_string(m.heads));
  if (m.moe.enabled() && (m.moe.experts_per_token < 1 || m.moe.experts_per_token > m.moe.experts))
    return Status::bad_input(field(keys.experts_per_token) + "expected 1.." + std::to_string(m.moe.experts) + " (" + keys.experts +
                             "), got " + std::to_string(m.moe.experts_per_token));
  const auto n = [](auto v) { return std::to_string(v); };
  if (m.moe.enabled() && m.moe.first_dense_layers >= m.layers)
    return Status::bad_input(field(keys.first_dense_layers) + "expected fewer than the " + n(m.layers) + " layers (some layer MoE), got " +
                             n(m.moe.first_dense_layers));
  // The hottest expert takes at most every token's k routes: experts / k times its share.
  if (m.moe.enabled() && m.moe.load_imbalance > static_cast<double>(m.moe.experts) / m.moe.experts_per_token)
    return Status::bad_input(field("moe.load_imbalance") + "expected at most experts / experts_per_token = " +
                             n(static_cast<double>(m.moe.experts) / m.moe.experts_per_token) + ", got " + n(m.moe.load_imbalance));
  if (m.global_attention_every > 0 && m.sliding_window == 0)
    return Status::bad_input(field("global_attention_every") + "expected 0 without a sliding_window, got " + n(m.global_attention_every));
  if (m.mla.enabled()) {
    // Latent attention has as many key/value heads as query heads, no biases and no QK-norm
    // (DeepSeek-V2 sec. 2.1); its per-head widths are the mla object's.
    if (m.kv_heads != m.heads)
      return Status::bad_input(field(keys.kv_heads) + "expected " + keys.heads + " (" + n(m.heads) +
                               ") under multi-head latent attention, got " + n(m.kv_heads));
    if (m.qk_norm || m.attention_bias != AttentionBias::none)
      return Status::bad_input(field(m.qk_norm ? "qk_norm" : "attention_bias") +
                               "expected none under multi-head latent attention (its latents have their own norms)");
    if (m.head_dim != 0 && m.head_dim != m.mla.qk_head_dim() && m.head_dim != m.mla.qk_rope_head_dim)
      return Status::bad_input(field("head_dim") + "expected 0 or qk_nope_head_dim + qk_rope_head_dim (" + n(m.mla.qk_head_dim()) +
                               ") under multi-head latent attention, got " + n(m.head_dim));
  }
  return Status::ok();
}

}  // namespace

Result<json> read_json_file(const std::string& path) {
  // Regular files only: a folder, a FIFO or /dev/zero would read as "malformed" or forever.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) return Status::bad_input(path + ": cannot open file (expected a readable JSON file)");
  if (!std::filesystem::is_regular_file(status))
    return Status::bad_input(path + ": not a regular file (expected a JSON file" +
                             (std::filesystem::is_directory(status) ? std::string(", got a folder)") : std::string(")")));
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Status::bad_input(path + ": cannot read its size (expected a readable JSON file)");
  if (size > kMaxJsonFileBytes)
    return Status::bad_input(path + ": " + std::to_string(size) + " bytes, larger than any llmplan JSON file can be (at most " +
                             std::to_string(kMaxJsonFileBytes >> 20) + " MiB)");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::bad_input(path + ": cannot open file (expected a readable JSON file)");
  std::stringstream buf;
  buf << in.rdbuf();
  // Nesting deeper than any of our formats is refused (nothing deeper is built: later
  // copies and walks of the document recurse). The parser itself is iterative.
  bool too_deep = false;
  const json::parser_callback_t depth_guard = [&too_deep](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  json j = json::parse(buf.str(), depth_guard, /*allow_exceptions=*/false);
  if (too_deep) return Status::bad_input(path + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (expected a JSON document of llmplan's formats)");
  if (j.is_discarded()) {
    // Parse again with exceptions only to get the position; the message stays ours. A number
    // out of range (1e400) is an out_of_range, not a parse_error.
    try {
      json again = json::parse(buf.str(), depth_guard);
      (void)again;
    } catch (const json::parse_error& e) {
      return Status::bad_input(path + ": malformed JSON at byte " + std::to_string(e.byte) + " (expected a JSON document)");
    } catch (const json::exception& e) {
      return Status::bad_input(path + ": malformed JSON: " + e.what() + " (expected a JSON document with finite numbers)");
    }
    return Status::bad_input(path + ": malformed JSON (expected a JSON document)");
  }
  return j;
}

bool looks_like_hf_config(const json& j) {
  // (A multimodal config holds its language model's keys in text_config: Gemma 3.)
  return j.is_object() && (j.contains("hidden_size") || j.contains("n_embd") || j.contains("num_hidden_layers") ||
                           (j.contains("text_config") && j.contains("architectures")));
}

Result<ModelSpec> model_from_json(const json& j, const std::string& origin) {
  if (looks_like_hf_config(j)) return model_from_hf_config(j, origin);
  ModelSpec m;
  FieldReader r(j, origin, "");
  r.get("name", &m.name);
  r.get("source", &m.source, false);
  r.allow("description");
  r.get_enum("family", &m.family, "gpt, llama");
  r.get("layers", &m.layers, 1, kMaxLayers);
  r.get("hidden", &m.hidden, 1, kMaxHidden);
  r.get("heads", &m.heads, 1, kMaxHeads);
  m.kv_heads = m.heads;
  r.get("kv_heads", &m.kv_heads, 1, kMaxHeads, false);
  r.get("head_dim", &m.head_dim, 0, kMaxHidden, false);
  m.ffn_hidden = 4 * m.hidden;
  r.get("ffn_hidden", &m.ffn_hidden, 1, 16 * kMaxHidden, false);
  r.get("vocab", &m.vocab, 1, kMaxVocab);
  m.max_positions = 2048;
  r.get("max_positions", &m.max_positions, 1, kMaxSeq, false);
  m.tied_embeddings = m.family == Family::gpt;
  r.get("tied_embeddings", &m.tied_embeddings, false);
  m.dropout = m.family == Family::gpt;
  r.get("dropout", &m.dropout, false);
  // A GPT block has every bias and a LayerNorm: the Llama-family options do not apply.
  if (m.family == Family::gpt) {
    AttentionBias bias = AttentionBias::all;
    bool qk_norm = false;
    r.get_enum("attention_bias", &bias, kAttentionBiasNames, false);
    r.get("qk_norm", &qk_norm, false);
    if (bias != AttentionBias::all)
      return Status::bad_input(origin + ": field 'attention_bias': expected all (or no key) for family gpt, whose blocks have every bias, got " +
                               to_string(bias));
    if (qk_norm) return Status::bad_input(origin + ": field 'qk_norm': expected false for family gpt (QK-norm is a llama-family block's RMSNorm)");
  } else {
    r.get_enum("attention_bias", &m.attention_bias, kAttentionBiasNames, false);
    r.get("qk_norm", &m.qk_norm, false);
  }
  // Layer kinds and the 2024-26 blocks (specs.h): sliding windows on either family; latent
  // attention, sinks, post-norms and multi-token prediction on llama-family blocks.
  r.get("sliding_window", &m.sliding_window, 0, kMaxSeq, false);
  r.get("global_attention_every", &m.global_attention_every, 0, kMaxLayers, false);
  r.get("attention_sinks", &m.attention_sinks, false);
  r.get("post_norms", &m.post_norms, false);
  r.get("mtp_layers", &m.mtp_layers, 0, 16, false);
  if (const json* mla = r.raw("mla"); mla && !mla->is_null()) {
    FieldReader ar(*mla, origin, "mla");
    ar.get("q_lora_rank", &m.mla.q_lora_rank, 0, kMaxHidden, false);
    ar.get("kv_lora_rank", &m.mla.kv_lora_rank, 1, kMaxHidden);
    ar.get("qk_nope_head_dim", &m.mla.qk_nope_head_dim, 1, kMaxHidden);
    ar.get("qk_rope_head_dim", &m.mla.qk_rope_head_dim, 0, kMaxHidden);
    ar.get("v_head_dim", &m.mla.v_head_dim, 1, kMaxHidden);
    if (Status s = ar.finish(); !s) return s;
  }
  if (m.family == Family::gpt && (m.mla.enabled() || m.attention_sinks || m.post_norms || m.mtp_layers > 0))
    return Status::bad_input(origin + ": field '" +
                             std::string(m.mla.enabled() ? "mla" : m.attention_sinks ? "attention_sinks" : m.post_norms ? "post_norms" : "mtp_layers") +
                             "': expected none for family gpt (a llama-family block's option)");
  if (const json* moe = r.raw("moe"); moe && !moe->is_null()) {
    FieldReader mr(*moe, origin, "moe");
    mr.get("experts", &m.moe.experts, 1, 100000);
    mr.get("experts_per_token", &m.moe.experts_per_token, 1, 100000);
    m.moe.expert_ffn_hidden = m.ffn_hidden;
    mr.get("expert_ffn_hidden", &m.moe.expert_ffn_hidden, 1, 16 * kMaxHidden, false);
    mr.get("shared_experts", &m.moe.shared_experts, 0, 1000, false);
    mr.get("shared_expert_ffn_hidden", &m.moe.shared_expert_ffn_hidden, 0, 16 * kMaxHidden, false);
    mr.get("capacity_factor", &m.moe.capacity_factor, 0.1, 100, false);
    mr.get("first_dense_layers", &m.moe.first_dense_layers, 0, kMaxLayers, false);
    mr.get("layer_freq", &m.moe.layer_freq, 1, kMaxLayers, false);
    mr.get("expert_bias", &m.moe.expert_bias, false);
    mr.get("load_imbalance", &m.moe.load_imbalance, 1, 100000, false);
    if (m.moe.expert_bias && m.family == Family::gpt) mr.fail("expert_bias", "expected false for family gpt (a GPT expert has its biases already)");
    if (Status s = mr.finish(); !s) return s;
  }
  if (Status s = r.finish(); !s) return s;
  if (Status s = check_model_shape(m, origin, ""); !s) return s;
  return m;
}

namespace {

// Hugging Face architectures (config.json "architectures"), and for those the recipe cannot
// describe yet, what it lacks. Sources: the transformers modeling files of the same names.
struct HfArchitecture {
  const char* name;
  const char* missing;  // nullptr: read in full
};
constexpr HfArchitecture kHfArchitectures[] = {
    {"GPT2LMHeadModel", nullptr},
    {"LlamaForCausalLM", nullptr},
    {"MistralForCausalLM", nullptr},
    {"MixtralForCausalLM", nullptr},
    {"Qwen2ForCausalLM", nullptr},
    {"Qwen3ForCausalLM", nullptr},
    {"Qwen3MoeForCausalLM", nullptr},
    {"DeepseekV3ForCausalLM", nullptr},  // multi-head latent attention, dense first layers, MTP
    {"DeepseekV2ForCausalLM", nullptr},
    {"GptOssForCausalLM", nullptr},  // alternating sliding-window layers, attention sinks, expert biases
    {"Gemma3ForCausalLM", nullptr},  // 5:1 local/global layers, QK-norm, post-norms, GeGLU
    {"Gemma3ForConditionalGeneration", nullptr},  // its text_config, the vision tower left out
    {"Gemma2ForCausalLM", nullptr},
    {"Qwen2MoeForCausalLM", "the shared expert's sigmoid gate (shared_expert_gate) and dense layers by decoder_sparse_step"},
};

// Keys of HF configs that change nothing the planner models (numerics, tokens, inference,
// bookkeeping); they are not listed as unread.
constexpr const char* kHfIrrelevantKeys[] = {
    "architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
    "transformers_version", "use_cache", "initializer_range", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "attention_dropout", "pretraining_tp",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "norm_topk_prob", "tokenizer_class",
    "max_window_layers", "mlp_bias", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_activation",
    "summary_first_dropout", "summary_proj_to_labels", "summary_type", "summary_use_proj", "task_specific_params",
    "activation_function", "n_ctx", "scale_attn_weights", "reorder_and_upcast_attn", "scale_attn_by_inverse_layer_idx",
    "id2label", "label2id", "bias", "auto_map", "quantization_config",
    // DeepSeek-V2/V3 routing numerics (group-limited top-k, scaling, balance loss weight; the
    // balancing method is read from topk_method), gpt-oss's SwiGLU clamp and context,
    // Gemma's attention scale, soft-capping and local RoPE base: none changes a tensor's size
    // or a FLOP count the planner models.
    "n_group", "topk_group", "routed_scaling_factor", "scoring_func", "aux_loss_alpha", "seq_aux", "ep_size",
    "swiglu_limit", "initial_context_length", "query_pre_attn_scalar", "rope_local_base_freq", "final_logit_softcapping",
    "attn_logit_softcapping", "cache_implementation", "use_bidirectional_attention"};

// A layer_types list (transformers' per-layer attention kinds: gpt-oss, Gemma 3 from 4.53)
// as the pattern ModelSpec describes: every n-th layer full, the others windowed
// (global_attention_every; 0: every layer windowed; -1: every layer full).
Result<int> layer_pattern(const json& types, int layers, const std::string& field) {
  if (!types.is_array() || static_cast<int>(types.size()) != layers)
    return Status::bad_input(field + "expected a list of " + std::to_string(layers) + " layer kinds (num_hidden_layers), got " +
                             json_value_text(types));
  int first_full = -1, full = 0;
  for (int i = 0; i < layers; ++i) {
    const json& t = types[static_cast<size_t>(i)];
    if (!t.is_string() || (t != "sliding_attention" && t != "full_attention"))
      return Status::bad_input(field + "expected sliding_attention or full_attention at layer " + std::to_string(i) + ", got " +
                               json_value_text(t));
    if (t == "full_attention") full += 1, first_full = first_full < 0 ? i : first_full;
  }
  if (full == layers) return -1;
  const int n = first_full < 0 ? 0 : first_full + 1;
  for (int i = 0; i < layers; ++i) {
    const bool is_full = n > 0 && (i + 1) % n == 0;
    if ((types[static_cast<size_t>(i)] == "full_attention") != is_full)
      return Status::bad_input(field + "expected every " + std::to_string(n) + "th layer full and the others sliding (the pattern llmplan " +
                               "models), got " + json_value_text(types[static_cast<size_t>(i)]) + " at layer " + std::to_string(i));
  }
  return n;
}

}  // namespace

Result<ModelSpec> model_from_hf_config(const json& j, const std::string& origin) {
  ModelSpec m;
  FieldReader r(j, origin, "");
  const bool gpt2 = j.contains("n_embd");
  std::string model_type, act, architecture;
  r.get("model_type", &model_type, false);
  if (const json* arch = r.raw("architectures"); arch && arch->is_array() && !arch->empty() && (*arch)[0].is_string())
    architecture = (*arch)[0].get<std::string>();
  if (architecture == "Gemma3ForConditionalGeneration" && j.contains("text_config") && j.at("text_config").is_object()) {
    // Gemma 3's multimodal checkpoints (google/gemma-3-27b-pt, -it): the language model is
    // text_config, a Gemma3TextConfig whose omitted keys take that class's defaults; the
    // SigLIP vision tower and its projector are not modelled.
    json text = j.at("text_config");
    text["architectures"] = json::array({"Gemma3ForCausalLM"});
    if (!text.contains("model_type")) text["model_type"] = "gemma3_text";
    Result<ModelSpec> inner = model_from_hf_config(text, origin + " (text_config)");
    if (!inner) return inner;
    ModelSpec m = *inner;
    if (const json* name = j.contains("_name_or_path") ? &j.at("_name_or_path") : nullptr; name && name->is_string()) m.name = name->get<std::string>();
    m.source += "; Gemma3ForConditionalGeneration: its text_config read, the vision_config (SigLIP encoder) and the multimodal projector not modelled";
    return m;
  }
  if (!architecture.empty()) {
    const HfArchitecture* known = nullptr;
    std::string supported;
    for (const HfArchitecture& a : kHfArchitectures) {
      if (architecture == a.name) known = &a;
      if (!a.missing) supported += (supported.empty() ? "" : ", ") + std::string(a.name);
    }
    if (!known)
      return Status::bad_input(origin + ": field 'architectures': " + architecture + " is not an architecture llmplan reads (expected one of " +
                               supported + ", or an llmplan model file)");
    if (known->missing)
      return Status::bad_input(origin + ": field 'architectures': " + architecture + " needs " + known->missing +
                               ", which llmplan's recipe does not model yet (readable: " + supported + ")");
  }
  std::vector<std::string> notes;
  if (gpt2) {
    m.family = Family::gpt;
    r.get("n_layer", &m.layers, 1, kMaxLayers);
    r.get("n_embd", &m.hidden, 1, kMaxHidden);
    r.get("n_head", &m.heads, 1, kMaxHeads);
    m.kv_heads = m.heads;
    m.ffn_hidden = 4 * m.hidden;
    r.get("n_inner", &m.ffn_hidden, 1, 16 * kMaxHidden, false);
    r.get("vocab_size", &m.vocab, 1, kMaxVocab);
    m.max_positions = 1024;
    r.get("n_positions", &m.max_positions, 1, kMaxSeq, false);
    m.tied_embeddings = true;
    m.dropout = true;
  } else {
    // The 2024-26 architectures this reader knows by name (transformers model_type).
    if (model_type.empty()) {
      if (architecture.rfind("DeepseekV3", 0) == 0) model_type = "deepseek_v3";
      else if (architecture.rfind("DeepseekV2", 0) == 0) model_type = "deepseek_v2";
      else if (architecture.rfind("GptOss", 0) == 0) model_type = "gpt_oss";
      else if (architecture.rfind("Gemma3", 0) == 0) model_type = "gemma3_text";
      else if (architecture.rfind("Gemma2", 0) == 0) model_type = "gemma2";
    }
    const bool deepseek = model_type == "deepseek_v3" || model_type == "deepseek_v2";
    const bool gpt_oss = model_type == "gpt_oss";
    const bool gemma3 = model_type == "gemma3_text" || model_type == "gemma3", gemma2 = model_type == "gemma2";
    const bool gemma = gemma3 || gemma2;
    r.get("hidden_act", &act, false);
    // Gemma's MLP is gated GELU (transformers GemmaMLP: down(act(gate(x)) * up(x)) with
    // hidden_activation gelu_pytorch_tanh): three matrices, the llama-family block.
    if (gemma) act.clear(), r.allow("hidden_activation");
    // Gated activations (silu/swiglu) mean a Llama-style block; gelu/relu a GPT block.
    const bool gated = act.empty() || act == "silu" || act == "swiglu" || act == "swish";
    m.family = gated ? Family::llama : Family::gpt;
    r.get("num_hidden_layers", &m.layers, 1, kMaxLayers);
    r.get("hidden_size", &m.hidden, 1, kMaxHidden);
    r.get("num_attention_heads", &m.heads, 1, kMaxHeads);
    m.kv_heads = m.heads;
    r.get("num_key_value_heads", &m.kv_heads, 1, kMaxHeads, false);
    // transformers' DeepseekV3Config sets head_dim to qk_rope_head_dim (for RoPE): not a
    // width here, latent attention has its own (mla).
    if (gemma) m.head_dim = 256;  // Gemma2Config / Gemma3TextConfig default
    if (deepseek) r.allow("head_dim");
    else r.get("head_dim", &m.head_dim, 0, kMaxHidden, false);
    m.ffn_hidden = 4 * m.hidden;
    r.get("intermediate_size", &m.ffn_hidden, 1, 16 * kMaxHidden, false);
    // Gemma's config classes default the vocabulary, the context and tying (the 27B
    // checkpoints' text_config omits them): Gemma3TextConfig 262208 / 131072 / tied,
    // Gemma2Config 256000 / 8192 / tied.
    if (gemma3) m.vocab = 262208, m.max_positions = 131072;
    if (gemma2) m.vocab = 256000, m.max_positions = 8192;
    r.get("vocab_size", &m.vocab, 1, kMaxVocab, !gemma);
    if (!gemma) m.max_positions = 2048;
    r.get("max_position_embeddings", &m.max_positions, 1, kMaxSeq, false);
    m.tied_embeddings = gemma;
    r.get("tie_word_embeddings", &m.tied_embeddings, false);
    m.dropout = false;
    if (m.family == Family::llama) {
      // Qwen2 has q/k/v biases without a config key (transformers Qwen2Attention); Llama,
      // Mistral, Qwen3 and gpt-oss configs say attention_bias (all four projections when true).
      bool bias = false;
      r.get("attention_bias", &bias, false);
      if (model_type == "qwen2") m.attention_bias = AttentionBias::qkv;
      else if (bias) m.attention_bias = AttentionBias::all;
      // Qwen3, Qwen3-MoE and Gemma 3 normalise every query and key head (q_norm, k_norm).
      m.qk_norm = model_type == "qwen3" || model_type == "qwen3_moe" || gemma3;
      // Gemma 2/3 normalise the attention and MLP outputs too (post_attention_layernorm,
      // post_feedforward_layernorm beside input_layernorm, pre_feedforward_layernorm).
      m.post_norms = gemma;
    } else {
      r.allow("attention_bias");
    }
    if (deepseek) {
      // Multi-head latent attention (DeepseekV3Attention); q_lora_rank null: q projected
      // directly (DeepSeek-V2-Lite).
      r.get("kv_lora_rank", &m.mla.kv_lora_rank, 1, kMaxHidden);
      r.get("q_lora_rank", &m.mla.q_lora_rank, 0, kMaxHidden, false);
      r.get("qk_nope_head_dim", &m.mla.qk_nope_head_dim, 1, kMaxHidden);
      r.get("qk_rope_head_dim", &m.mla.qk_rope_head_dim, 0, kMaxHidden);
      r.get("v_head_dim", &m.mla.v_head_dim, 1, kMaxHidden);
      if (m.attention_bias != AttentionBias::none)
        return Status::bad_input(origin + ": field 'attention_bias': true needs biases on latent attention's projections, which llmplan's recipe does not model (expected false)");
      // Mixture of experts from first_k_dense_replace on, every moe_layer_freq-th layer
      // (DeepseekV3DecoderLayer), with n_shared_experts of the routed experts' width.
      r.get("n_routed_experts", &m.moe.experts, 1, 100000);
      m.moe.experts_per_token = 8;
      r.get("num_experts_per_tok", &m.moe.experts_per_token, 1, 100000, false);
      m.moe.expert_ffn_hidden = m.ffn_hidden;
      r.get("moe_intermediate_size", &m.moe.expert_ffn_hidden, 1, 16 * kMaxHidden, false);
      r.get("n_shared_experts", &m.moe.shared_experts, 0, 1000, false);
      if (m.moe.shared_experts > 0) m.moe.shared_expert_ffn_hidden = m.moe.expert_ffn_hidden;
      r.get("first_k_dense_replace", &m.moe.first_dense_layers, 0, kMaxLayers, false);
      r.get("moe_layer_freq", &m.moe.layer_freq, 1, kMaxLayers, false);
      r.get("num_nextn_predict_layers", &m.mtp_layers, 0, 16, false);
      // noaux_tc: DeepSeek-V3's auxiliary-loss-free balancing; otherwise an auxiliary loss.
      std::string topk_method;
      r.get("topk_method", &topk_method, false);
      m.moe.load_imbalance = topk_method == "noaux_tc" ? kMoeLoadImbalanceLossFree : kMoeLoadImbalanceAuxLoss;
      notes.push_back("moe.load_imbalance " + std::string(topk_method == "noaux_tc" ? "1.04 (auxiliary-loss-free balancing, topk_method noaux_tc)"
                                                                                      : "1.72 (auxiliary-loss balancing)") +
                      ": the hottest expert over balanced, Wang et al. 2024 (arXiv 2408.15664)");
    }
    if (gpt_oss) {
      // GptOssAttention has a sink logit per head; GptOssExperts biases on every expert's
      // gate_up_proj and down_proj, GptOssTopKRouter a bias. Routing uses an auxiliary loss
      // (router_aux_loss_coef).
      m.attention_sinks = true;
      m.moe.expert_bias = true;
      m.moe.load_imbalance = kMoeLoadImbalanceAuxLoss;
      notes.push_back("moe.load_imbalance 1.72 (auxiliary-loss balancing): the hottest expert over balanced, Wang et al. 2024 (arXiv 2408.15664)");
      int per_token = 0;
      r.get("experts_per_token", &per_token, 1, 100000, false);  // the same as num_experts_per_tok
      if (per_token > 0 && r.has("num_experts_per_tok") && j.at("num_experts_per_tok") != per_token)
        return Status::bad_input(origin + ": field 'experts_per_token': expected num_experts_per_tok (" +
                                 json_value_text(j.at("num_experts_per_tok")) + "), got " + std::to_string(per_token));
      if (!r.has("num_experts_per_tok") && per_token > 0) m.moe.experts_per_token = per_token;
    }
    if (gpt_oss || gemma) {
      // Windowed and full layers: layer_types when given, else Gemma 3's
      // sliding_window_pattern (default 6: every 6th layer global) or Gemma 2's alternation.
      int64_t window = gemma ? 4096 : 128;
      r.get("sliding_window", &window, 1, kMaxSeq, false);
      int every = gemma2 ? 2 : 6;
      if (const json* types = r.raw("layer_types")) {
        const Result<int> n = layer_pattern(*types, m.layers, origin + ": field 'layer_types': ");
        if (!n) return n.status();
        every = *n;
        r.allow("sliding_window_pattern");
      } else if (gemma3) {
        r.get("sliding_window_pattern", &every, 1, kMaxLayers, false);
        if (every == 1) every = -1;
      } else if (gpt_oss) {
        return Status::bad_input(origin + ": field 'layer_types': missing (expected gpt-oss's list of sliding_attention / full_attention)");
      }
      if (every >= 0) m.sliding_window = window, m.global_attention_every = every;
    } else {
      // Sliding windows: Qwen configs carry one switched off; Mistral 7B v0.1 a 4096-token one
      // on every layer, which is full attention for the sequences up to it.
      bool sliding = false;
      r.get("use_sliding_window", &sliding, false);
      if (sliding)
        return Status::bad_input(origin + ": field 'use_sliding_window': true needs sliding-window attention from max_window_layers on, which llmplan's layer pattern (every n-th layer global) does not describe (expected false)");
      int64_t window = 0;
      r.get("sliding_window", &window, 0, kMaxSeq, false);
      if (window > 0 && !r.has("use_sliding_window"))
        notes.push_back("sliding_window " + std::to_string(window) + " read as full attention (the same for sequences up to it)");
    }
    const char* experts_key = r.has("num_local_experts") ? "num_local_experts" : r.has("num_experts") ? "num_experts" : nullptr;
    if (experts_key && !deepseek) {
      r.get(experts_key, &m.moe.experts, 1, 100000);
      if (m.moe.experts_per_token == 0) m.moe.experts_per_token = 2;
      r.get("num_experts_per_tok", &m.moe.experts_per_token, 1, 100000, false);
      m.moe.expert_ffn_hidden = m.ffn_hidden;
      r.get("moe_intermediate_size", &m.moe.expert_ffn_hidden, 1, 16 * kMaxHidden, false);
      // Qwen3-MoE: a layer is MoE when (i + 1) % decoder_sparse_step == 0 and i is not in
      // mlp_only_layers; only the all-MoE case is one layer kind.
      int step = 1;
      r.get("decoder_sparse_step", &step, 1, kMaxLayers, false);
      const json* dense = r.raw("mlp_only_layers");
      if (step != 1 || (dense && dense->is_array() && !dense->empty()))
        return Status::bad_input(origin + ": fields 'decoder_sparse_step' / 'mlp_only_layers': dense layers between the MoE ones, which llmplan's recipe does not model yet (expected 1 and [])");
    }
    if (gpt_oss && !m.moe.enabled()) return Status::bad_input(origin + ": field 'num_local_experts': missing (expected gpt-oss's expert count)");
  }
  r.get("_name_or_path", &m.name, false);
  for (const char* k : kHfIrrelevantKeys) r.allow(k);
  if (m.name.empty()) m.name = model_type.empty() ? "hf-model" : model_type;
  m.source = "Hugging Face config.json: " + origin;
  if (!architecture.empty()) m.source += " (" + architecture + ")";
  for (const std::string& n : notes) m.source += "; " + n;
  // HF configs carry many unrelated keys: not rejected, but named in the source.
  if (const std::vector<std::string> unread = r.unread(); !unread.empty()) {
    m.source += "; keys not read: ";
    for (size_t i = 0; i < unread.size(); ++i) m.source += (i ? ", " : "") + unread[i];
  }
  if (Status s = r.finish(/*reject_unknown=*/false); !s) return s;
  if (Status s = check_model_shape(m, origin, "", gpt2 ? kGpt2ConfigKeys : kHfConfigKeys); !s) return s;
  return m;
}

json to_json(const ModelSpec& m) {
  json j = {{"name", m.name},
            {"source", m.source},
            {"family", to_string(m.family)},
            {"layers", m.layers},
            {"hidden", m.hidden},
            {"heads", m.heads},
            {"kv_heads", m.kv_heads},
            {"head_dim", m.head_width()},
            {"ffn_hidden", m.ffn_hidden},
            {"vocab", m.vocab},
            {"max_positions", m.max_positions},
            {"tied_embeddings", m.tied_embeddings},
            {"dropout", m.dropout},
            {"moe", nullptr}};
  if (m.family != Family::gpt) {
    j["attention_bias"] = to_string(m.attention_bias);
    j["qk_norm"] = m.qk_norm;
  }
  if (m.moe.enabled()) {
    j["moe"] = {{"experts", m.moe.experts},
                {"experts_per_token", m.moe.experts_per_token},
                {"expert_ffn_hidden", m.moe.expert_ffn_hidden},
                {"shared_experts", m.moe.shared_experts},
                {"capacity_factor", m.moe.capacity_factor}};
    // The 2024-26 fields only where they differ from their defaults (earlier files unchanged).
    if (m.moe.shared_expert_ffn_hidden > 0) j["moe"]["shared_expert_ffn_hidden"] = m.moe.shared_expert_ffn_hidden;
    if (m.moe.first_dense_layers > 0) j["moe"]["first_dense_layers"] = m.moe.first_dense_layers;
    if (m.moe.layer_freq > 1) j["moe"]["layer_freq"] = m.moe.layer_freq;
    if (m.moe.expert_bias) j["moe"]["expert_bias"] = true;
    if (m.moe.load_imbalance != 1.0) j["moe"]["load_imbalance"] = m.moe.load_imbalance;
  }
  if (m.mla.enabled()) {
    j["mla"] = {{"q_lora_rank", m.mla.q_lora_rank},
                {"kv_lora_rank", m.mla.kv_lora_rank},
                {"qk_nope_head_dim", m.mla.qk_nope_head_dim},
                {"qk_rope_head_dim", m.mla.qk_rope_head_dim},
                {"v_head_dim", m.mla.v_head_dim}};
    j.erase("head_dim");  // the mla object's widths
  }
  if (m.sliding_window > 0) {
    j["sliding_window"] = m.sliding_window;
    j["global_attention_every"] = m.global_attention_every;
  }
  if (m.attention_sinks) j["attention_sinks"] = true;
  if (m.post_norms) j["post_norms"] = true;
  if (m.mtp_layers > 0) j["mtp_layers"] = m.mtp_layers;
  return j;
}

Result<GpuSpec> gpu_from_json(const json& j, const std::string& origin) {
  GpuSpec g;
  FieldReader r(j, origin, "gpu");
  r.get("name", &g.name);
  r.get("source", &g.source, false);
  r.allow("description");
  double gib = 0, gbs = 0;
  r.get("memory_gib", &gib, 0.001, 1e6);
  r.get("memory_bandwidth_gbs", &gbs, 0.001, 1e7);
  g.memory_bytes = gib * 1024.0 * 1024.0 * 1024.0;
  g.memory_bandwidth = gbs * 1e9;
  FieldReader pr = r.child("peak_tflops");
  static const char* kNames[] = {"fp32", "tf32", "fp16", "bf16", "fp8"};
  for (int i = 0; i < 5; ++i) {
    double tf = 0;
    pr.get(kNames[i], &tf, 0, 1e6, false);
    g.peak_flops[i] = tf * 1e12;
  }
  double fp4 = 0;
  pr.get("fp4", &fp4, 0, 1e6, false);
  g.fp4_flops = fp4 * 1e12;
  if (Status s = pr.finish(); !s) return s;
  r.get("mma_sync_fraction", &g.mma_sync_fraction, 0.01, 1.0, false);
  r.get("tensor_flops_per_exp", &g.tensor_flops_per_exp, 0, 1e5, false);
  r.get("fp8_gemm_any_layout", &g.fp8_gemm_any_layout, false);
  r.get("mx_block_scaling", &g.mx_block_scaling, false);
  if (Status s = r.finish(); !s) return s;
  if (g.peak(Dtype::fp32) <= 0 && g.peak(Dtype::bf16) <= 0 && g.peak(Dtype::fp16) <= 0)
    return Status::bad_input(origin + ": field 'gpu.peak_tflops': expected at least one positive peak (fp32, fp16 or bf16)");
  return g;
}

json to_json(const GpuSpec& g) {
  return {{"name", g.name},
          {"source", g.source},
          {"memory_gib", g.memory_bytes / (1024.0 * 1024.0 * 1024.0)},
          {"memory_bandwidth_gbs", g.memory_bandwidth / 1e9},
          {"peak_tflops",
           {{"fp32", g.peak_flops[0] / 1e12},
            {"tf32", g.peak_flops[1] / 1e12},
            {"fp16", g.peak_flops[2] / 1e12},
            {"bf16", g.peak_flops[3] / 1e12},
            {"fp8", g.peak_flops[4] / 1e12},
            {"fp4", g.fp4_flops / 1e12}}},
          {"mma_sync_fraction", g.mma_sync_fraction},
          {"tensor_flops_per_exp", g.tensor_flops_per_exp},
          {"fp8_gemm_any_layout", g.fp8_gemm_any_layout},
          {"mx_block_scaling", g.mx_block_scaling}};
}

Result<ClusterSpec> cluster_from_json(const json& j, const std::string& origin) {
  ClusterSpec c;
  FieldReader r(j, origin, "cluster");
  r.get("name", &c.name);
  r.get("source", &c.source, false);
  r.allow("description");
  const json* gpu = r.raw("gpu");
  if (!gpu || !gpu->is_object()) {
    r.fail("gpu", "expected a GPU object (plan files hold the GPU inline)");
    return r.finish();
  }
  Result<GpuSpec> g = gpu_from_json(*gpu, origin);
  if (!g) return g.status();
  c.gpu = *g;
  r.get("gpus_per_node", &c.gpus_per_node, 1, 1 << 16);
  r.get("nodes", &c.nodes, 1, kMaxDegree, false);
  double bw = 0, lat = 0;
  r.get("intra_node_bandwidth_gbs", &bw, 1e-3, 1e6);
  r.get("intra_node_latency_us", &lat, 0, 1e6);
  c.intra_node_bandwidth = bw * 1e9;
  c.intra_node_latency = lat * 1e-6;
  r.get("inter_node_bandwidth_gbs", &bw, 1e-3, 1e6);
  r.get("inter_node_latency_us", &lat, 0, 1e6);
  c.inter_node_bandwidth = bw * 1e9;
  c.inter_node_latency = lat * 1e-6;
  double host = c.host_bandwidth / 1e9;
  r.get("host_bandwidth_gbs", &host, 1e-3, 1e6, false);
  c.host_bandwidth = host * 1e9;
  double host_gib = 0;
  r.get("host_memory_gib", &host_gib, 0, 1e6, false);
  c.host_memory_bytes = host_gib * 1024.0 * 1024.0 * 1024.0;
  r.get("nvlink_domain_gpus", &c.nvlink_domain, 0, 1 << 16, false);  // 0: the node
  if (Status s = r.finish(); !s) return s;
  return c;
}

json to_json(const ClusterSpec& c) {
  return {{"name", c.name},
          {"source", c.source},
          {"gpu", to_json(c.gpu)},
          {"gpus_per_node", c.gpus_per_node},
          {"nodes", c.nodes},
          {"intra_node_bandwidth_gbs", c.intra_node_bandwidth / 1e9},
          {"intra_node_latency_us", c.intra_node_latency * 1e6},
          {"inter_node_bandwidth_gbs", c.inter_node_bandwidth / 1e9},
          {"inter_node_latency_us", c.inter_node_latency * 1e6},
          {"host_bandwidth_gbs", c.host_bandwidth / 1e9},
          {"host_memory_gib", c.host_memory_bytes / (1024.0 * 1024.0 * 1024.0)},
          {"nvlink_domain_gpus", c.nvlink_domain}};
}

Result<TrainingJob> job_from_json(const json& j, const std::string& origin) {
  TrainingJob t;
  FieldReader r(j, origin, "job");
  JobMode mode = JobMode::pretrain;
  r.get_enum("mode", &mode, kJobModeNames);
  set_job_mode(mode, &t);
  if (const json* lora = r.raw("lora"); lora && !lora->is_null()) {
    FieldReader lr(*lora, origin, "job.lora");
    lr.get("rank", &t.lora.rank, 1, 1 << 16);
    lr.get("alpha", &t.lora.alpha, 0, 1e9, false);
    if (const json* targets = lr.raw("targets")) {
      t.lora.targets.clear();
      bool bad = !targets->is_array() || targets->empty();
      if (!bad) {
        for (const auto& x : *targets) {
          if (!x.is_string() || !is_lora_target_name(x.get<std::string>())) bad = true;
          else t.lora.targets.push_back(x.get<std::string>());
        }
      }
      if (bad) lr.fail("targets", std::string("expected a non-empty list of ") + kLoraTargetNames + "; got " + json_value_text(*targets));
    }
    if (Status s = lr.finish(); !s) return s;
  } else if (t.mode == TrainMode::lora) {
    // A LoRA job's adapters decide its memory and time: defaults would hide a missing block.
    r.fail("lora", "expected the adapters of a LoRA job ({\"rank\": r, \"alpha\": a, \"targets\": [...]}), got none");
  }
  r.get("frozen_layers", &t.frozen_layers, 0, kMaxLayers, false);
  r.get("frozen_fraction", &t.frozen_fraction, 0, 1, false);
  r.get("seq_len", &t.seq_len, 1, kMaxSeq);
  r.get("doc_len", &t.doc_len, 0, kMaxSeq, false);
  r.get("global_batch", &t.global_batch, 1, kMaxBatch);
  r.get_enum("precision", &t.precision, "fp32, fp16, bf16");
  t.amp = t.precision == Precision::fp32 ? AmpLevel::O0 : AmpLevel::O2;
  r.get_enum("amp", &t.amp, "O0, O1, O2, O3", false);
  r.get_enum("optimizer", &t.optimizer, "adamw, sgd", false);
  r.get_enum("moments", &t.moments, kMomentsDtypeNames, false);
  r.get_enum("grads", &t.grads, "deepspeed, megatron", false);
  r.get_enum("fp8", &t.fp8, kFp8RecipeNames, false);
  // Plan files written before the FP8 recipes had one flag for per-tensor FP8 linears.
  bool legacy_fp8 = false;
  r.get("fp8_linear", &legacy_fp8, false);
  if (legacy_fp8 && !r.has("fp8")) t.fp8 = Fp8Recipe::tensorwise;
  if (legacy_fp8 && r.has("fp8") && t.fp8 == Fp8Recipe::none)
    r.fail("fp8_linear", "expected no fp8_linear (the old spelling of 'fp8') beside 'fp8': \"none\"");
  if (Status s = r.finish(); !s) return s;
  if (Status s = check_doc_len(t, origin); !s) return s;
  if (t.precision == Precision::fp32) t.amp = AmpLevel::O0;
  else if (t.amp == AmpLevel::O0) return Status::bad_input(origin + ": field 'job.amp': expected O1, O2 or O3 with " +
                                                           to_string(t.precision) + " precision, got O0");
  return t;
}

Status check_doc_len(const TrainingJob& j, const std::string& origin) {
  if (j.doc_len >= 0 && j.doc_len <= j.seq_len) return Status::ok();
  return Status::bad_input(origin + ": field 'job.doc_len': expected 0 (no packed documents) up to seq_len " + std::to_string(j.seq_len) +
                           " tokens, got " + std::to_string(j.doc_len));
}

json to_json(const TrainingJob& t) {
  json j = {{"mode", to_string(job_mode(t))},
            {"frozen_layers", t.frozen_layers},
            {"frozen_fraction", t.frozen_fraction},
            {"seq_len", t.seq_len},
            {"doc_len", t.doc_len},
            {"global_batch", t.global_batch},
            {"precision", to_string(t.precision)},
            {"amp", to_string(t.amp)},
            {"optimizer", to_string(t.optimizer)},
            {"moments", to_string(t.moments)},
            {"grads", to_string(t.grads)},
            {"fp8", to_string(t.fp8)},
            {"lora", nullptr}};
  if (t.mode == TrainMode::lora) j["lora"] = {{"rank", t.lora.rank}, {"alpha", t.lora.alpha}, {"targets", t.lora.targets}};
  return j;
}

bool layer_counts_from_json(const json& v, std::vector<int>* out, std::string* bad_entry) {
  if (!v.is_array()) return false;
  for (const json& e : v)
    if (!e.is_number_integer() || e.get<int64_t>() < 1 || e.get<int64_t>() > kMaxLayers) {
      if (bad_entry) *bad_entry = json_value_text(e);
      return false;
    }
  out->clear();
  for (const json& e : v) out->push_back(e.get<int>());
  return true;
}

namespace {
// plan.stage_layers: present exactly under pipeline_split custom, one positive count per
// virtual stage (pp * vpp of them). That they sum to the model's layers is check_plan's.
void read_stage_layers(FieldReader* r, ParallelPlan* p) {
  const json* v = r->raw("stage_layers");
  if (p->pipeline_split != PipelineSplit::custom) {
    if (v) r->fail("stage_layers", "only with pipeline_split custom, got pipeline_split " + std::string(to_string(p->pipeline_split)));
    return;
  }
  const int64_t stages = static_cast<int64_t>(p->pp) * p->vpp;
  const std::string expected = "a list of pp*vpp = " + std::to_string(stages) + " layer counts, each in [1, " +
                               std::to_string(kMaxLayers) + "] (pipeline_split custom)";
  if (!v) {
    r->fail("stage_layers", expected + ", got nothing");
    return;
  }
  std::string bad;
  if (!v->is_array() || static_cast<int64_t>(v->size()) != stages)
    r->fail("stage_layers", expected + ", got " + json_value_text(*v));
  else if (!layer_counts_from_json(*v, &p->stage_layers, &bad))
    r->fail("stage_layers", expected + ", got the entry " + bad);
}
}  // namespace

Result<ParallelPlan> plan_from_json(const json& j, const std::string& origin) {
  ParallelPlan p;
  FieldReader r(j, origin, "plan");
  r.get("dp", &p.dp, 1, kMaxDegree);
  r.get("tp", &p.tp, 1, kMaxDegree);
  r.get("pp", &p.pp, 1, kMaxDegree);
  r.get("vpp", &p.vpp, 1, 1024, false);
  r.get("cp", &p.cp, 1, kMaxDegree, false);
  r.get("ep", &p.ep, 1, kMaxDegree, false);
  r.get("sp", &p.sp, false);
  r.get("micro_batch", &p.micro_batch, 1, kMaxBatch);
  r.get("grad_accum", &p.grad_accum, 1, kMaxBatch, false);
  r.get("zero", &p.zero, 0, 3, false);
  r.get_enum("recompute", &p.recompute, "none, selective, full, full_k", false);
  r.get("recompute_layers", &p.recompute_layers, 0, kMaxLayers, false);
  r.get("offload_optimizer", &p.offload_optimizer, false);
  r.get("offload_params", &p.offload_params, false);
  r.get("flash_attention", &p.flash_attention, false);
  p.schedule = p.vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  r.get_enum("schedule", &p.schedule, kScheduleNames, false);
  r.get_enum("cp_exchange", &p.cp_exchange, "ring, all_gather", false);
  r.get_enum("pipeline_split", &p.pipeline_split, kPipelineSplitNames, false);
  r.get("activation_offload_layers", &p.activation_offload_layers, 0, 100000, false);
  read_stage_layers(&r, &p);
  if (Status s = r.finish(); !s) return s;
  return p;
}

json to_json(const ParallelPlan& p) {
  json j = {{"dp", p.dp},
          {"tp", p.tp},
          {"pp", p.pp},
          {"vpp", p.vpp},
          {"cp", p.cp},
          {"ep", p.ep},
          {"sp", p.sp},
          {"micro_batch", p.micro_batch},
          {"grad_accum", p.grad_accum},
          {"zero", p.zero},
          {"recompute", to_string(p.recompute)},
          {"recompute_layers", p.recompute_layers},
          {"offload_optimizer", p.offload_optimizer},
          {"flash_attention", p.flash_attention},
          {"schedule", to_string(p.schedule)}};
  // Written only when it is not the default, so ring plans' files stay as they were.
  if (p.cp_exchange != CpExchange::ring) j["cp_exchange"] = to_string(p.cp_exchange);
  if (p.pipeline_split != PipelineSplit::even) j["pipeline_split"] = to_string(p.pipeline_split);
  if (p.pipeline_split == PipelineSplit::custom) j["stage_layers"] = p.stage_layers;
  if (p.activation_offload_layers > 0) j["activation_offload_layers"] = p.activation_offload_layers;
  if (p.offload_params) j["offload_params"] = true;
  return j;
}

}  // namespace llmplan
