#include "planner/spec/recipe.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

namespace llmplan {

uint32_t lora_target_mask(const LoraSpec& lora, Family family) {
  uint32_t mask = 0;
  for (const std::string& name : lora.targets) {
    if (name == "q") mask |= projection_bit(Projection::q);
    else if (name == "k") mask |= projection_bit(Projection::k);
    else if (name == "v") mask |= projection_bit(Projection::v);
    else if (name == "o") mask |= projection_bit(Projection::o);
    else if (name == "gate" && family == Family::llama) mask |= projection_bit(Projection::gate);
    else if (name == "up" || name == "fc1") mask |= projection_bit(Projection::up);
    else if (name == "down" || name == "fc2") mask |= projection_bit(Projection::down);
  }
  return mask;
}

bool is_lora_target_name(const std::string& name) {
  static constexpr const char* kNames[] = {"q", "k", "v", "o", "gate", "up", "down", "fc1", "fc2"};
  for (const char* k : kNames)
    if (name == k) return true;
  return false;
}

double moe_expert_capacity(const ModelSpec& m, double tokens) {
  if (!m.moe.enabled()) return 0;
  return std::ceil(m.moe.capacity_factor * tokens * m.moe.experts_per_token / m.moe.experts);
}

double moe_expert_rows(const ModelSpec& m, double tokens) { return m.moe.experts * moe_expert_capacity(m, tokens); }

double moe_rank_load_factor(const ModelSpec& m, int ep) {
  const double rho = m.moe.load_imbalance, e = m.moe.experts;
  if (!m.moe.enabled() || rho == 1.0 || e <= 1) return 1.0;
  const double local = e / (ep > 0 ? ep : 1);  // experts on one EP rank
  return (rho + (local - 1) * (e - rho) / (e - 1)) / local;
}

double moe_expert_rows(const ModelSpec& m, double tokens, int ep) {
  const double f = moe_rank_load_factor(m, ep);
  return f == 1.0 ? moe_expert_rows(m, tokens) : moe_expert_rows(m, tokens) * f;
}

int layer_kind(const ModelSpec& m, int layer) {
  return (m.moe.enabled() && !m.moe_layer(layer) ? 1 : 0) | (m.attention_window(layer) > 0 ? 2 : 0);
}

uint32_t layer_kinds_present(const ModelSpec& m) {
  if (uniform_layers(m)) return 1;
  uint32_t mask = 0;
  for (int i = 0; i < m.layers; ++i) mask |= 1u << layer_kind(m, i);
  return mask;
}

void set_layer_kind(const ModelSpec& m, int kind, LayerContext* c) {
  c->dense_mlp = kind_dense_mlp(kind);
  c->window = (kind & 2) ? m.sliding_window : 0;
}

double causal_keys_per_query(double s_kv, int64_t window) {
  const double w = static_cast<double>(window);
  if (window <= 0 || w >= s_kv) return s_kv * 0.5;
  return w - w * w / (2 * s_kv);
}

double SavedTensorList::bytes() const {
  double sum = 0;
  for (int i = 0; i < count; ++i) sum += items[i].bytes();
  return sum;
}

namespace {

// Input width of each projection, and output width (whole model, before TP).
struct ProjShape {
  double in, out;
  bool column_parallel;  // output split by t (q k v gate up); else input split (o down)
};

// `moe`: the layer's MLP is the MoE one (its experts' shapes), else the dense MLP.
ProjShape projection_shape(const ModelSpec& m, Projection p, bool moe) {
  const double h = static_cast<double>(m.hidden);
  const double f = static_cast<double>(moe ? m.moe.expert_ffn_hidden : m.ffn_hidden);
  switch (p) {
    case Projection::q: return {h, static_cast<double>(m.q_width()), true};
    case Projection::k:
    case Projection::v: return {h, static_cast<double>(m.kv_width()), true};
    case Projection::o: return {static_cast<double>(m.v_width()), h, false};
    case Projection::gate:
    case Projection::up: return {h, f, true};
    case Projection::down: return {f, h, false};
  }
  return {0, 0, true};
}

bool is_lora(const LayerContext& c, Projection p) { return (c.lora_targets & projection_bit(p)) != 0; }
// A projection's input must be kept when its weight or its adapter needs a gradient.
bool needs_input(const LayerContext& c, Projection p) { return c.base_trainable || is_lora(c, p); }

}  // namespace

SavedTensorList saved_tensors_per_layer(const ModelSpec& m, const LayerContext& c) {
  SavedTensorList out;
  if (!c.grad_flows) return out;
  const double t = c.t;
  const double bs = static_cast<double>(c.b) * static_cast<double>(c.s);
  const double h = static_cast<double>(m.hidden);
  const double seq_div = c.sp ? t : 1.0;  // Region::sequence
  const double act = c.act_bytes;
  const bool gpt = m.family == Family::gpt;
  const bool drop = m.dropout;
  const bool moe = m.moe.enabled() && !c.dense_mlp;  // this layer's MLP (layer_kind)
  const double a_local = m.heads / t;
  const double scores = static_cast<double>(c.b) * a_local * static_cast<double>(c.s) * static_cast<double>(c.s_kv);

  // ---- attention half (Korthikanti: 11sbh + 5as^2b for GPT, plus the LayerNorm input)
  // A base projection's input kept for its weight gradient: quantized under an FP8 stack
  // that saves it so (LayerContext::fp8_input_bytes), else in the activation dtype.
  const double gemm_in = c.fp8_input_bytes > 0 && c.base_trainable ? c.fp8_input_bytes : act;
  out.add({"ln1.input", bs * h / seq_div, act, false});
  if (needs_input(c, Projection::q) || needs_input(c, Projection::k) || needs_input(c, Projection::v))
    out.add({"attn.qkv_input", bs * h / seq_div, gemm_in, false});
  if (m.mla.enabled()) {
    // Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, sec. 2.1; transformers
    // DeepseekV3Attention.forward): the down projections' outputs are the latent RMSNorms'
    // inputs, the norms' outputs the up projections' inputs; then the up-projected queries,
    // keys (the shared rotary key broadcast to every head) and values that fused attention
    // reads. The latents are the rank's sequence shard under SP (the up projections gather
    // them as a column-parallel GEMM gathers its input); q, k and v are split by t with the
    // heads and can be re-made from the latents (SavedTensor::latent_derived).
    const MlaSpec& a = m.mla;
    const double lat = bs / seq_div;
    if (a.q_lora_rank > 0) {
      out.add({"mla.q_latent", lat * a.q_lora_rank, act, false});
      if (needs_input(c, Projection::q)) out.add({"mla.q_latent_norm", lat * a.q_lora_rank, gemm_in, false});
    }
    out.add({"mla.kv_latent", lat * a.kv_lora_rank, act, false});
    if (needs_input(c, Projection::k) || needs_input(c, Projection::v)) out.add({"mla.kv_latent_norm", lat * a.kv_lora_rank, gemm_in, false});
    SavedTensor q{"attn.q", bs * m.q_width() / t, act, false}, k{"attn.k", bs * m.q_width() / t, act, false},
        v{"attn.v", bs * m.v_width() / t, act, false};
    q.latent_derived = k.latent_derived = v.latent_derived = true;
    out.add(q);
    out.add(k);
    out.add(v);
  } else {
    out.add({"attn.q", bs * m.q_width() / t, act, false});
    out.add({"attn.k", bs * m.kv_width() / t, act, false});
    out.add({"attn.v", bs * m.kv_width() / t, act, false});
  }
  if (m.qk_norm) {  // the projections' outputs, the per-head RMSNorms' inputs (attn.q/k are after norm and rotary)
    out.add({"attn.q_norm_input", bs * m.q_width() / t, act, false});
    out.add({"attn.k_norm_input", bs * m.kv_width() / t, act, false});
  }
  // A window (LayerContext::window) changes nothing kept: fused attention keeps its
  // logsumexp whatever the keys, and materialised attention (HF eager_attention_forward)
  // masks the window out of the whole s x s_kv score matrix. Attention sinks add one logit
  // per row to the softmax, which the logsumexp includes.
  if (c.flash) {
    out.add({"attn.lse", static_cast<double>(c.b) * a_local * static_cast<double>(c.s), 4, false});
  } else {
    out.add({"attn.probs", scores, act, true});
    if (drop) {
      out.add({"attn.probs_dropout_mask", scores, 1, true});
      out.add({"attn.probs_dropped", scores, act, true});
    }
  }
  // Flash backward needs its output, which is the output projection's input.
  // (Under an FP8 stack the projection keeps its own quantized copy beside it.)
  if (needs_input(c, Projection::o) || c.flash) out.add({"attn.proj_input", bs * m.v_width() / t, c.flash ? act : gemm_in, false});
  if (c.flash && gemm_in != act) out.add({"attn.proj_input_fp8", bs * m.v_width() / t, gemm_in, false});
  if (drop) out.add({"attn.resid_dropout_mask", bs * h / seq_div, 1, false});
  // Post-norms (Gemma 2/3): the attention branch's output, its RMSNorm's input.
  if (m.post_norms) out.add({"attn.post_norm_input", bs * h / seq_div, act, false});

  // ---- MLP half (GPT: 19sbh with f = 4h; Llama SwiGLU: gate, up and their product)
  out.add({"ln2.input", bs * h / seq_div, act, false});
  if (moe) {
    // MoE (GShard, Lepikhin et al. 2020; capacity as in Switch, Fedus et al. 2021): the rank routes its tok tokens (its sequence
    // slice under SP); every routed expert computes a capacity-padded buffer, and the
    // rank's experts (E/ep of them) together see E * C rows whatever ep is (each of its
    // experts takes C rows from each of the ep ranks it serves), C = ceil(cf * tok * k / E);
    // the most loaded rank's rows under an imbalanced load (moe_expert_rows with ep).
    const double tok = bs / seq_div;
    const double rows = moe_expert_rows(m, tok, c.ep);
    const double fe = static_cast<double>(m.moe.expert_ffn_hidden);
    // The ln2 output: the router's and the shared experts' input.
    if (needs_input(c, Projection::up) || needs_input(c, Projection::gate)) out.add({"mlp.input", tok * h, act, false});
    out.add({"moe.router_probs", tok * m.moe.experts, 4, false});  // fp32 softmax: its backward and the top-k
    if (needs_input(c, Projection::up) || needs_input(c, Projection::gate)) out.add({"moe.expert_input", rows * h, gemm_in, false});
    if (gpt) {
      out.add({"mlp.fc1_out", rows * fe, act, false});
    } else {
      out.add({"mlp.gate_out", rows * fe, act, false});
      out.add({"mlp.up_out", rows * fe, act, false});
    }
    if (needs_input(c, Projection::down)) out.add({"mlp.act_out", rows * fe, gemm_in, false});
    // The experts' outputs as they come back to the routing rank: the gate's gradient is
    // dy . expert_output (unless the probabilities scaled the activation inside the expert,
    // whose saved fc1 output already gives their gradient).
    if (!c.moe_probs_in_activation) out.add({"moe.expert_output", rows * h, act, false});
    if (m.moe.shared_experts > 0) {  // one dense MLP of the shared experts' width, split by TP
      const double fs = static_cast<double>(m.shared_ffn_width());
      if (gpt) {
        out.add({"moe.shared_fc1_out", bs * fs / t, act, false});
      } else {
        out.add({"moe.shared_gate_out", bs * fs / t, act, false});
        out.add({"moe.shared_up_out", bs * fs / t, act, false});
      }
      out.add({"moe.shared_act_out", bs * fs / t, gemm_in, false});
    }
  } else {
    if (needs_input(c, Projection::up) || needs_input(c, Projection::gate)) out.add({"mlp.input", bs * h / seq_div, gemm_in, false});
    if (gpt) {
      out.add({"mlp.fc1_out", bs * m.ffn_hidden / t, act, false});
    } else {
      out.add({"mlp.gate_out", bs * m.ffn_hidden / t, act, false});
      out.add({"mlp.up_out", bs * m.ffn_hidden / t, act, false});
    }
    if (needs_input(c, Projection::down)) out.add({"mlp.act_out", bs * m.ffn_hidden / t, gemm_in, false});
  }
  if (drop) out.add({"mlp.resid_dropout_mask", bs * h / seq_div, 1, false});
  if (m.post_norms) out.add({"mlp.post_norm_input", bs * h / seq_div, act, false});
  // FP8 weights quantized at each forward and kept for the input-gradient GEMM.
  if (c.fp8_weight_bytes > 0)
    out.add({"fp8.weights", count_params(m, c.t, 1, c.ep, 0, 0).layer(c.dense_mlp).per_layer_rank, c.fp8_weight_bytes, false});

  // ---- LoRA: the low-rank intermediate x*A^T of each adapter (its input is kept above).
  // b*s*r on every rank under TP, with or without SP (Region::replicated): a column-parallel
  // target applies its whole A to the full (gathered) input; a row-parallel one sums its
  // partial x_local A_local^T over TP before its whole B (Hu et al. 2021's x A^T B^T, split as
  // Megatron splits the base GEMM).
  // MoE: an MLP target's adapters are per routed expert (shared experts have none), over
  // the capacity-padded rows the rank's experts compute (moe_expert_rows, as above).
  static const char* kLoraNames[] = {"lora.q.z", "lora.k.z", "lora.v.z", "lora.o.z", "lora.gate.z", "lora.up.z", "lora.down.z"};
  for (int p = 0; p < 7; ++p) {
    const bool expert = moe && p >= static_cast<int>(Projection::gate);
    const double rows = expert ? moe_expert_rows(m, bs / seq_div, c.ep) : bs;
    if (is_lora(c, static_cast<Projection>(p))) out.add({kLoraNames[p], rows * c.lora_rank, act, false});
  }
  return out;
}

namespace {

// SavedTensorSums::op_sac from the recipe's tensors of the same names. The matmul outputs
// are counted at their recipe size; the down projection's output (h wide, not in the
// recipe: the residual add needs nothing) is added for SwiGLU, where it is the 7th matmul.
double op_sac_bytes(const ModelSpec& m, const LayerContext& c, const SavedTensorList& list, double input) {
  if (!c.grad_flows) return 0;
  // (Latent attention: its down projections' outputs too, the latents.)
  static constexpr std::string_view kKept[] = {"attn.q",       "attn.v",       "attn.lse",      "attn.proj_input",
                                               "mlp.gate_out", "mlp.fc1_out",  "mla.q_latent",  "mla.kv_latent"};
  double bytes = input;
  for (int i = 0; i < list.count; ++i)
    for (std::string_view name : kKept)
      if (name == list.items[i].name) bytes += list.items[i].bytes();
  if (m.family != Family::gpt) bytes += input;  // the down projection's output, b*s*h like the input
  return bytes;
}

}  // namespace

SavedTensorSums sum_saved_tensors(const ModelSpec& m, const LayerContext& c) {
  SavedTensorSums sums;
  sums.grad_flows = c.grad_flows;
  const double seq_div = c.sp ? c.t : 1.0;
  sums.input = static_cast<double>(c.b) * c.s * m.hidden / seq_div * c.act_bytes;
  const SavedTensorList list = saved_tensors_per_layer(m, c);
  for (int i = 0; i < list.count; ++i) {
    sums.all += list.items[i].bytes();
    if (list.items[i].attention_scores) sums.scores += list.items[i].bytes();
    if (list.items[i].latent_derived) sums.latent += list.items[i].bytes();
  }
  sums.op_sac = op_sac_bytes(m, c, list, sums.input);
  return sums;
}

double activation_bytes_per_layer(const SavedTensorSums& s, LayerRecompute policy) {
  if (!s.grad_flows) return 0;
  switch (policy) {
    case LayerRecompute::full: return s.input;
    case LayerRecompute::selective: return s.latent > 0 ? s.all - s.scores - s.latent : s.all - s.scores;
    case LayerRecompute::none: break;
  }
  return s.all;
}

double recompute_working_bytes(const SavedTensorSums& s, LayerRecompute policy) {
  if (!s.grad_flows || policy == LayerRecompute::none) return 0;
  return policy == LayerRecompute::full ? s.all : s.latent > 0 ? s.scores + s.latent : s.scores;
}

double activation_bytes_per_layer(const ModelSpec& m, const LayerContext& c, LayerRecompute policy) {
  return activation_bytes_per_layer(sum_saved_tensors(m, c), policy);
}

double recompute_working_bytes(const ModelSpec& m, const LayerContext& c, LayerRecompute policy) {
  return recompute_working_bytes(sum_saved_tensors(m, c), policy);
}

double weight_grad_buffer_bytes(const ModelSpec& m, const LayerContext& c) {
  if (!c.grad_flows) return 0;
  const double tokens = static_cast<double>(c.b) * static_cast<double>(c.s), t = c.t;
  const double h = static_cast<double>(m.hidden);
  double widths = 0;  // output columns per token whose gradient waits for W
  if (c.base_trainable) {
    const bool gpt = m.family == Family::gpt;
    if (m.mla.enabled()) {
      const MlaSpec& a = m.mla;
      const double own = 1.0 / (c.sp ? t : 1);  // the down projections run on the rank's tokens
      if (a.q_lora_rank > 0) widths += own * a.q_lora_rank + static_cast<double>(m.q_width()) / t;
      else widths += static_cast<double>(m.q_width()) / t;
      widths += own * (a.kv_lora_rank + a.qk_rope_head_dim) + m.heads * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim) / t;
    } else {
      widths += static_cast<double>(m.q_width() + 2 * m.kv_width()) / t;
    }
    widths += h;  // o (row-parallel: the whole output)
    if (m.moe.enabled() && !c.dense_mlp) {
      const double fe = static_cast<double>(m.moe.expert_ffn_hidden);
      const double rows = moe_expert_rows(m, tokens / t, c.ep);  // the rank's capacity-padded rows
      widths += rows / tokens * ((gpt ? 1 : 2) * fe + h) + static_cast<double>(m.moe.experts) / t;
      if (m.moe.shared_experts > 0) widths += (gpt ? 1 : 2) * static_cast<double>(m.shared_ffn_width()) / t + h;
    } else {
      widths += (gpt ? 1 : 2) * static_cast<double>(m.ffn_hidden) / t + h;
    }
  } else if (c.lora_targets) {
    // Each adapter: A's r-wide output and B's, the target's output width on the rank
    // (column-parallel q|k|v, gate|up split by t; row-parallel o, down whole); a MoE layer's
    // MLP adapters are on its routed experts, over their capacity-padded rows. Latent
    // attention's targets: about h / t wide.
    const double r = c.lora_rank;
    const bool moe_mlp = m.moe.enabled() && !c.dense_mlp;
    const double expert_rows = moe_mlp ? moe_expert_rows(m, tokens / t, c.ep) / tokens : 1;
    for (int k = 0; k < 7; ++k) {
      const auto pj = static_cast<Projection>(k);
      if ((c.lora_targets & projection_bit(pj)) == 0) continue;
      double out = h / t;
      switch (pj) {
        case Projection::q: out = m.mla.enabled() ? h / t : static_cast<double>(m.q_width()) / t; break;
        case Projection::k:
        case Projection::v: out = m.mla.enabled() ? h / t : static_cast<double>(m.kv_width()) / t; break;
        case Projection::o: out = h; break;
        case Projection::gate:
        case Projection::up: out = moe_mlp ? static_cast<double>(m.moe.expert_ffn_hidden) : static_cast<double>(m.ffn_hidden) / t; break;
        case Projection::down: out = h; break;
      }
      const bool mlp = pj == Projection::gate || pj == Projection::up || pj == Projection::down;
      widths += (mlp ? expert_rows : 1) * (r + out);
    }
  }
  return tokens * widths * c.act_bytes;
}

namespace {

// The attention block of one layer: parameters whole and on one rank, and its nn.Linear
// weights on the rank (their sum and the largest), which QLoRA quantizes.
struct AttentionParams {
  double full = 0, rank = 0;
  double linear_rank = 0, largest = 0;
};

AttentionParams attention_params(const ModelSpec& m, int t) {
  AttentionParams ap;
  const double h = static_cast<double>(m.hidden);
  const double qw = static_cast<double>(m.q_width());
  if (m.mla.enabled()) {
    // DeepSeek-V2 sec. 2.1 (transformers DeepseekV3Attention): q_a_proj h x d_c' with its
    // RMSNorm, q_b_proj d_c' x heads (d_h + d_h^R) (q_proj h x that without query
    // compression); kv_a_proj_with_mqa h x (d_c + d_h^R) with its RMSNorm of d_c, kv_b_proj
    // d_c x heads (d_h + v); o_proj heads v x h. No biases. The down projections and the
    // latent norms are replicated under TP, the rest split.
    const MlaSpec& a = m.mla;
    const double heads = m.heads, vw = static_cast<double>(m.v_width());
    const double q_down = a.q_lora_rank > 0 ? h * a.q_lora_rank : 0, q_norm = a.q_lora_rank > 0 ? static_cast<double>(a.q_lora_rank) : 0;
    const double q_up = a.q_lora_rank > 0 ? a.q_lora_rank * qw : h * qw;
    const double kv_down = h * static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim), kv_norm = static_cast<double>(a.kv_lora_rank);
    const double kv_up = a.kv_lora_rank * heads * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim);
    const double o = vw * h;
    ap.full = q_down + q_norm + q_up + kv_down + kv_norm + kv_up + o;
    ap.rank = q_down + q_norm + kv_down + kv_norm + (q_up + kv_up + o) / t;
    ap.linear_rank = q_down + kv_down + (q_up + kv_up + o) / t;
    ap.largest = std::max({q_down, kv_down, q_up / t, kv_up / t, o / t});
  } else {
    // qkv (column-parallel, bias split), o (row-parallel, bias replicated); QK-norm's two
    // RMSNorm weights of head_dim, replicated under TP (every rank normalises its heads).
    const double kvw = static_cast<double>(m.kv_width());
    const double qkv_w = h * (qw + 2 * kvw), qkv_b = m.qkv_bias() ? qw + 2 * kvw : 0;
    const double o_w = qw * h, o_b = m.o_bias() ? h : 0;
    const double qk_norm = m.qk_norm ? 2.0 * static_cast<double>(m.head_width()) : 0;
    ap.full = qkv_w + qkv_b + o_w + o_b + qk_norm;
    ap.rank = (qkv_w + qkv_b + o_w) / t + o_b + qk_norm;
    const double q = h * qw / t, kv = h * kvw / t, o = qw * h / t;
    ap.linear_rank = q + 2 * kv + o;
    ap.largest = std::max({q, kv, o});
  }
  if (m.attention_sinks) {  // one logit per head (gpt-oss), with the heads under TP
    ap.full += m.heads;
    ap.rank += static_cast<double>(m.heads) / t;
  }
  return ap;
}

}  // namespace

LinearWeights linear_weights_per_layer_rank(const ModelSpec& m, int t, int ep, bool dense_mlp) {
  const double h = static_cast<double>(m.hidden);
  const bool moe = m.moe.enabled() && !dense_mlp;
  const double fw = static_cast<double>(moe ? m.moe.expert_ffn_hidden : m.ffn_hidden);
  const double mats = m.family == Family::gpt ? 2 : 3;
  const AttentionParams ap = attention_params(m, t);
  LinearWeights w;
  w.largest = ap.largest;
  double mlp = mats * h * fw / t;
  if (moe) {
    const double fs = static_cast<double>(m.shared_ffn_width());
    mlp = m.moe.experts / static_cast<double>(ep) * mats * h * fw + h * m.moe.experts + mats * h * fs / t;
    w.largest = std::max({w.largest, h * fw, h * m.moe.experts, h * fs / t});
  } else {
    w.largest = std::max(w.largest, h * fw / t);
  }
  w.total = ap.linear_rank + mlp;
  return w;
}

ParamCounts count_params(const ModelSpec& m, int t, int pp, int ep, uint32_t lora_targets, int lora_rank) {
  ParamCounts pc;
  const double h = static_cast<double>(m.hidden);
  const bool gpt = m.family == Family::gpt;
  const double norm = gpt ? 2 * h : h;  // LayerNorm has weight and bias; RMSNorm a weight
  const double norms = m.post_norms ? 4 * norm : 2 * norm;  // pre-norms (+ Gemma's post-norms)

  const AttentionParams ap = attention_params(m, t);
  const double attn = ap.full, attn_rank = ap.rank;

  // One dense MLP of width f: GPT fc1+fc2 with biases, Llama gate+up+down.
  auto mlp = [&](double f, double div) {
    if (gpt) return (2 * h * f + f) / div + h;  // fc2 bias is replicated under TP
    return 3 * h * f / div;
  };
  // The MLP of each kind: whole, on the rank, touching a token, and the rank's routed experts.
  struct Mlp {
    double full = 0, rank = 0, active = 0, expert_rank = 0;
  };
  Mlp moe_mlp, dense_mlp;
  dense_mlp.full = dense_mlp.active = mlp(static_cast<double>(m.ffn_hidden), 1);
  dense_mlp.rank = mlp(static_cast<double>(m.ffn_hidden), t);
  if (m.moe.enabled()) {
    const double fe = static_cast<double>(m.moe.expert_ffn_hidden);
    double one = mlp(fe, 1);
    double router = h * m.moe.experts;
    // gpt-oss: every expert's fused gate/up bias (2 fe) and down bias (h), and the router's.
    if (m.moe.expert_bias) one += 2 * fe + h, router += m.moe.experts;
    const double fs = static_cast<double>(m.shared_ffn_width());
    const double shared = m.moe.shared_experts > 0 ? mlp(fs, 1) : 0;
    moe_mlp.full = m.moe.experts * one + router + shared;
    // Experts are split over EP; shared experts and the router follow TP like a dense MLP.
    moe_mlp.rank = m.moe.experts / static_cast<double>(ep) * one + router + (m.moe.shared_experts > 0 ? mlp(fs, t) : 0);
    moe_mlp.active = m.moe.experts_per_token * one + router + shared;
    moe_mlp.expert_rank = m.moe.experts / static_cast<double>(ep) * one;
  }
  // LoRA adapters of a layer whose MLP is the MoE one (`moe`) or dense.
  auto lora = [&](bool moe, LayerParams* lp) {
    for (int p = 0; p < 7; ++p) {
      if (!(lora_targets & (1u << p))) continue;
      const ProjShape ps = projection_shape(m, static_cast<Projection>(p), moe);
      const bool expert = moe && p >= 4;
      const double experts = expert ? m.moe.experts : 1;
      const double experts_rank = expert ? m.moe.experts / static_cast<double>(ep) : 1;
      lp->lora_per_layer += experts * lora_rank * (ps.in + ps.out);
      // Column-parallel: A (r x in) replicated, B (out x r) split; row-parallel: the reverse.
      const double split = expert ? 1 : t;
      const double per = ps.column_parallel ? lora_rank * (ps.in + ps.out / split) : lora_rank * (ps.in / split + ps.out);
      lp->lora_per_layer_rank += experts_rank * per;
      if (expert) lp->lora_expert_per_layer_rank += experts_rank * per;
    }
  };
  const bool moe = m.moe.enabled();
  const Mlp& main = moe ? moe_mlp : dense_mlp;
  pc.per_layer = attn + main.full + norms;
  pc.per_layer_rank = attn_rank + main.rank + norms;
  pc.expert_per_layer_rank = main.expert_rank;
  LayerParams main_lora;
  lora(moe, &main_lora);
  pc.lora_per_layer = main_lora.lora_per_layer;
  pc.lora_per_layer_rank = main_lora.lora_per_layer_rank;
  pc.lora_expert_per_layer_rank = main_lora.lora_expert_per_layer_rank;
  if (moe) {
    pc.dense.per_layer = attn + dense_mlp.full + norms;
    pc.dense.per_layer_rank = attn_rank + dense_mlp.rank + norms;
    lora(false, &pc.dense);
  } else {
    pc.dense = pc.layer(false);
  }

  // Embedding: vocabulary split by t; GPT's learned positions are replicated.
  const double tok = static_cast<double>(m.vocab) * h;
  const double pos = gpt ? static_cast<double>(m.max_positions) * h : 0;
  pc.embedding = tok + pos;
  const double tok_rank = vocab_rows_per_rank(m, t) * h;
  pc.embedding_rank = tok_rank + pos;
  // Head: final norm plus an LM-head matrix when untied; a tied head on pp > 1 keeps a
  // copy of the embedding on the last stage (Megatron), which is memory, not a new param.
  pc.head = norm + (m.tied_embeddings ? 0 : tok);
  pc.head_rank = norm + ((m.tied_embeddings && pp == 1) ? 0 : tok_rank);

  // A MoE model's dense layers (first_dense_layers, layer_freq) count with their own MLP.
  int dense_layers = 0;
  if (moe && (m.moe.first_dense_layers > 0 || m.moe.layer_freq > 1))
    for (int i = 0; i < m.layers; ++i) dense_layers += m.moe_layer(i) ? 0 : 1;
  if (dense_layers == 0) {
    pc.total = m.layers * pc.per_layer + pc.embedding + pc.head;
    pc.active_per_token = m.layers * (attn + main.active + norms) + pc.embedding + pc.head;
  } else {
    const double moe_layers = m.layers - dense_layers;
    pc.total = moe_layers * pc.per_layer + dense_layers * pc.dense.per_layer + pc.embedding + pc.head;
    pc.active_per_token = moe_layers * (attn + main.active + norms) + dense_layers * (attn + dense_mlp.active + norms) + pc.embedding + pc.head;
  }
  // Multi-token prediction (DeepSeek-V3 sec. 2.2): per module a block of the last layer's
  // kind, eh_proj (2h -> h, column-parallel as Megatron-Core's MTP builds it) and three
  // RMSNorms (the hidden state's, the embedding's, its final norm).
  if (m.mtp_layers > 0) {
    const LayerParams block = pc.layer(moe && !m.moe_layer(m.layers - 1));
    const double d = m.mtp_layers;
    pc.mtp = d * (block.per_layer + 2 * h * h + 3 * norm);
    pc.mtp_rank = d * (block.per_layer_rank + 2 * h * h / t + 3 * norm) + (pp > 1 ? pc.embedding_rank : 0);
    pc.mtp_expert_rank = d * block.expert_per_layer_rank;
  }
  return pc;
}

LayerFlops forward_flops_per_layer(const ModelSpec& m, const LayerContext& c, double moe_capacity_tokens_factor) {
  LayerFlops fl;
  const double t = c.t;
  const double tokens = static_cast<double>(c.b) * static_cast<double>(c.s);  // GEMMs see full s (after SP gather)
  const double h = static_cast<double>(m.hidden);
  const double qw = static_cast<double>(m.q_width()), kvw = static_cast<double>(m.kv_width());
  const bool gpt = m.family == Family::gpt;
  const bool moe = m.moe.enabled() && !c.dense_mlp;  // this layer's MLP (layer_kind)
  // 2*m*n*k per GEMM.
  if (m.mla.enabled()) {
    // Latent attention: the replicated down projections on the rank's tokens (its sequence
    // shard under SP), the up projections and o split by t.
    const MlaSpec& a = m.mla;
    const double own = tokens / (c.sp ? t : 1);
    fl.gemm_base += a.q_lora_rank > 0 ? 2 * own * h * a.q_lora_rank + 2 * tokens * a.q_lora_rank * qw / t : 2 * tokens * h * qw / t;
    fl.gemm_base += 2 * own * h * static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim);
    fl.gemm_base += 2 * tokens * a.kv_lora_rank * m.heads * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim) / t;
    fl.gemm_base += 2 * tokens * static_cast<double>(m.v_width()) * h / t;  // o
  } else {
    fl.gemm_base += 2 * tokens * h * (qw + 2 * kvw) / t;  // q k v
    fl.gemm_base += 2 * tokens * qw * h / t;              // o
  }
  // The most loaded EP rank's routed rows (MoeSpec::load_imbalance).
  const double load = moe ? moe_rank_load_factor(m, c.ep) : 1.0;
  if (moe) {
    const double fe = static_cast<double>(m.moe.expert_ffn_hidden);
    double routed = tokens * m.moe.experts_per_token * moe_capacity_tokens_factor;
    if (load != 1.0) routed *= load;
    // With EP the routed tokens are spread over the EP group; with TP + SP each TP rank
    // routes its own tokens, so a rank's expert work is routed/t.
    fl.gemm_base += 2 * routed / t * h * fe * (gpt ? 2 : 3);
    fl.router = 2 * tokens / t * h * m.moe.experts;
    if (m.moe.shared_experts > 0) fl.gemm_base += 2 * tokens * h * static_cast<double>(m.shared_ffn_width()) * (gpt ? 2 : 3) / t;
  } else {
    fl.gemm_base += 2 * tokens * h * static_cast<double>(m.ffn_hidden) * (gpt ? 2 : 3) / t;
  }
  // Attention core: QK^T and PV, each 2*b*s*s_kv*d per head (latent attention: d_h + d_h^R
  // for QK^T, v_head_dim for PV). A window of w keys bounds both (the literature's
  // non-causal count over min(s_kv, w) keys) and the causal share runs over
  // causal_keys_per_query of them.
  // Packed documents bound the keys to each query's own document (LayerContext::span_kv):
  // the counts run over documents of fused_keys() tokens, not the whole sequence.
  if (!m.mla.enabled() && c.window <= 0) {
    const double core = 2 * 2 * tokens * c.fused_keys() * qw / t;
    fl.attention = core;
    // Causal: each query sees on average half of the keys (s_kv = s without CP).
    fl.attention_causal = core * 0.5;
  } else {
    const double skv = c.fused_keys();
    const double keys = c.window > 0 ? std::min(skv, static_cast<double>(c.window)) : skv;
    const double per_key = 2 * tokens * (qw + static_cast<double>(m.v_width())) / t;
    fl.attention = per_key * keys;
    fl.attention_causal = per_key * causal_keys_per_query(skv, c.window);
  }
  for (int p = 0; p < 7; ++p) {
    if (!(c.lora_targets & (1u << p))) continue;
    const ProjShape ps = projection_shape(m, static_cast<Projection>(p), moe);
    // Column-parallel: A whole, B this rank's out/t rows. Row-parallel: A this rank's in/t
    // columns, B whole over every token (over this rank's tokens/t under SP). MoE experts'
    // adapters: whole, over the rank's routed rows.
    if (moe && p >= static_cast<int>(Projection::gate)) {
      double routed = tokens * m.moe.experts_per_token * moe_capacity_tokens_factor / t;
      if (load != 1.0) routed *= load;
      fl.gemm_lora += 2 * routed * c.lora_rank * (ps.in + ps.out);
      continue;
    }
    fl.gemm_lora += ps.column_parallel ? 2 * tokens * c.lora_rank * (ps.in + ps.out / t)
                                       : 2 * tokens * c.lora_rank * (ps.in / t + ps.out / (c.sp ? t : 1));
  }
  // Bandwidth-bound work: each of ~12 (GPT) or ~10 (Llama) elementwise passes reads and
  // writes a (tokens x h) or (tokens x f) tensor. The h-wide ones (norms, residual adds,
  // dropout) run on every token on each TP rank, or on the rank's 1/t of the sequence under
  // sequence parallelism, which exists to split exactly them (Korthikanti et al. 2022,
  // sec. 4.2.2); the f-wide ones are split by t with the MLP's columns.
  const double f_local = static_cast<double>(moe ? m.moe.expert_ffn_hidden * m.moe.experts_per_token : m.ffn_hidden) / t;
  const double h_tokens = tokens / (c.sp ? t : 1);
  fl.elementwise_bytes = c.act_bytes * (h_tokens * 8 * h + tokens * (gpt ? 3 : 4) * f_local);
  // QLoRA: every base weight is dequantized before its forward GEMM.
  if (c.dequant_bytes_per_param > 0) fl.dequant_bytes = c.dequant_bytes_per_param * linear_weights_per_layer_rank(m, c.t, c.ep, c.dense_mlp).total;
  // QK-norm reads and writes this rank's queries and keys once more.
  if (m.qk_norm) fl.elementwise_bytes += c.act_bytes * tokens * 2 * (qw + kvw) / t;
  // Latent attention's two RMSNorms read and write the latents.
  if (m.mla.enabled()) fl.elementwise_bytes += c.act_bytes * tokens / (c.sp ? t : 1) * 2 * static_cast<double>(m.mla.q_lora_rank + m.mla.kv_lora_rank);
  // Post-norms (Gemma): two more RMSNorms over the branches' outputs.
  if (m.post_norms) fl.elementwise_bytes += c.act_bytes * h_tokens * 4 * h;
  if (moe) {
    // Token dispatch, outside the GEMMs: each of the rank's tokens is copied into the rows of
    // its k experts (capacity-padded: read and write k*h per token), and the experts'
    // outputs are gathered back and summed with the router's weights (read k*h, write h):
    // Megatron-Core's moe permute / unpermute (megatron/core/transformer/moe/moe_utils.py),
    // GShard's dispatch and combine (Lepikhin et al. 2020, sec. 2.2).
    double routed = tokens / t * m.moe.experts_per_token * moe_capacity_tokens_factor;
    if (load != 1.0) routed *= load;
    fl.elementwise_bytes += c.act_bytes * (3 * routed * h + tokens / t * h);
  }
  return fl;
}

double head_forward_flops(const ModelSpec& m, const LayerContext& c) {
  return 2.0 * c.b * c.s * static_cast<double>(m.vocab) / c.t * m.hidden;
}

double model_flops_per_token(const ModelSpec& m, int64_t seq_len) {
  // 6 * (active non-embedding params + LM head) + attention 12 * L * s * q_width,
  // the Chowdhery/PaLM convention (attention counted over the full s, not halved).
  const ParamCounts pc = count_params(m, 1, 1, 1, 0, 0);
  const double head = static_cast<double>(m.vocab) * m.hidden;
  // Non-embedding parameters: layers and the final norm, not the token/position tables
  // nor an untied LM-head matrix (counted once below as the head GEMM).
  const double non_embedding = pc.active_per_token - pc.embedding - (m.tied_embeddings ? 0 : head);
  if (!m.mla.enabled() && m.sliding_window <= 0 && m.mtp_layers == 0)
    return 6 * (non_embedding + head) + 12.0 * m.layers * static_cast<double>(seq_len) * m.q_width();
  // Attention per layer: 6 s (q_width + v_width) over min(s, window) keys (= 12 s q_width
  // for full attention without latent attention).
  const double s = static_cast<double>(seq_len), per_key = 6.0 * static_cast<double>(m.q_width() + m.v_width());
  double attention = 0;
  for (int i = 0; i < m.layers; ++i) {
    const int64_t w = m.attention_window(i);
    attention += per_key * (w > 0 ? std::min(s, static_cast<double>(w)) : s);
  }
  double flops = 6 * (non_embedding + head) + attention;
  if (m.mtp_layers > 0) {
    // Each multi-token prediction module: its block's active parameters (the last layer's
    // kind), eh_proj 2h x h, its norms and a second pass through the shared head, plus its
    // attention over the full sequence.
    const int last = m.layers - 1;
    const bool dense = m.moe.enabled() && !m.moe_layer(last);
    const double h = static_cast<double>(m.hidden);
    // A MoE block's active parameters: all but its routed experts, and k of those.
    const double layer_active = (m.moe.enabled() && !dense) ? pc.per_layer - pc.expert_per_layer_rank +
                                                                  pc.expert_per_layer_rank * m.moe.experts_per_token / m.moe.experts
                                                            : pc.layer(dense).per_layer;
    const int64_t w = m.attention_window(last);
    flops += m.mtp_layers * (6 * (layer_active + 2 * h * h + 3 * h + head) + per_key * (w > 0 ? std::min(s, static_cast<double>(w)) : s));
  }
  return flops;
}

}  // namespace llmplan
