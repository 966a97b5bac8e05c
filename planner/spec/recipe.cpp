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

ProjShape projection_shape(const ModelSpec& m, Projection p) {
  const double h = static_cast<double>(m.hidden);
  const double f = static_cast<double>(m.moe.enabled() ? m.moe.expert_ffn_hidden : m.ffn_hidden);
  switch (p) {
    case Projection::q: return {h, static_cast<double>(m.q_width()), true};
    case Projection::k:
    case Projection::v: return {h, static_cast<double>(m.kv_width()), true};
    case Projection::o: return {static_cast<double>(m.q_width()), h, false};
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
  const double a_local = m.heads / t;
  const double scores = static_cast<double>(c.b) * a_local * static_cast<double>(c.s) * static_cast<double>(c.s_kv);

  // ---- attention half (Korthikanti: 11sbh + 5as^2b for GPT, plus the LayerNorm input)
  // A base projection's input kept for its weight gradient: quantized under an FP8 stack
  // that saves it so (LayerContext::fp8_input_bytes), else in the activation dtype.
  const double gemm_in = c.fp8_input_bytes > 0 && c.base_trainable ? c.fp8_input_bytes : act;
  out.add({"ln1.input", bs * h / seq_div, act, false});
  if (needs_input(c, Projection::q) || needs_input(c, Projection::k) || needs_input(c, Projection::v))
    out.add({"attn.qkv_input", bs * h / seq_div, gemm_in, false});
  out.add({"attn.q", bs * m.q_width() / t, act, false});
  out.add({"attn.k", bs * m.kv_width() / t, act, false});
  out.add({"attn.v", bs * m.kv_width() / t, act, false});
  if (m.qk_norm) {  // the projections' outputs, the per-head RMSNorms' inputs (attn.q/k are after norm and rotary)
    out.add({"attn.q_norm_input", bs * m.q_width() / t, act, false});
    out.add({"attn.k_norm_input", bs * m.kv_width() / t, act, false});
  }
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
  if (needs_input(c, Projection::o) || c.flash) out.add({"attn.proj_input", bs * m.q_width() / t, c.flash ? act : gemm_in, false});
  if (c.flash && gemm_in != act) out.add({"attn.proj_input_fp8", bs * m.q_width() / t, gemm_in, false});
  if (drop) out.add({"attn.resid_dropout_mask", bs * h / seq_div, 1, false});

  // ---- MLP half (GPT: 19sbh with f = 4h; Llama SwiGLU: gate, up and their product)
  out.add({"ln2.input", bs * h / seq_div, act, false});
  if (m.moe.enabled()) {
    // MoE (GShard, Lepikhin et al. 2020; capacity as in Switch, Fedus et al. 2021): the rank routes its tok tokens (its sequence
    // slice under SP); every routed expert computes a capacity-padded buffer, and the
    // rank's experts (E/ep of them) together see E * C rows whatever ep is (each of its
    // experts takes C rows from each of the ep ranks it serves), C = ceil(cf * tok * k / E).
    const double tok = bs / seq_div;
    const double rows = moe_expert_rows(m, tok);
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
    // dy . expert_output.
    out.add({"moe.expert_output", rows * h, act, false});
    if (m.moe.shared_experts > 0) {  // one dense MLP of width f * shared_experts, split by TP
      const double fs = static_cast<double>(m.ffn_hidden) * m.moe.shared_experts;
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
  // FP8 weights quantized at each forward and kept for the input-gradient GEMM.
  if (c.fp8_weight_bytes > 0)
    out.add({"fp8.weights", count_params(m, c.t, 1, c.ep, 0, 0).per_layer_rank, c.fp8_weight_bytes, false});

  // ---- LoRA: the low-rank intermediate x*A^T of each adapter (its input is kept above).
  // b*s*r on every rank under TP, with or without SP (Region::replicated): a column-parallel
  // target applies its whole A to the full (gathered) input; a row-parallel one sums its
  // partial x_local A_local^T over TP before its whole B (Hu et al. 2021's x A^T B^T, split as
  // Megatron splits the base GEMM).
  // MoE: an MLP target's adapters are per routed expert (shared experts have none), over
  // the capacity-padded rows the rank's experts compute (moe_expert_rows, as above).
  static const char* kLoraNames[] = {"lora.q.z", "lora.k.z", "lora.v.z", "lora.o.z", "lora.gate.z", "lora.up.z", "lora.down.z"};
  for (int p = 0; p < 7; ++p) {
    const bool expert = m.moe.enabled() && p >= static_cast<int>(Projection::gate);
    const double rows = expert ? moe_expert_rows(m, bs / seq_div) : bs;
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
  static constexpr std::string_view kKept[] = {"attn.q", "attn.v", "attn.lse", "attn.proj_input", "mlp.gate_out", "mlp.fc1_out"};
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
  }
  sums.op_sac = op_sac_bytes(m, c, list, sums.input);
  return sums;
}

double activation_bytes_per_layer(const SavedTensorSums& s, LayerRecompute policy) {
  if (!s.grad_flows) return 0;
  switch (policy) {
    case LayerRecompute::full: return s.input;
    case LayerRecompute::selective: return s.all - s.scores;
    case LayerRecompute::none: break;
  }
  return s.all;
}

double recompute_working_bytes(const SavedTensorSums& s, LayerRecompute policy) {
  if (!s.grad_flows || policy == LayerRecompute::none) return 0;
  return policy == LayerRecompute::full ? s.all : s.scores;
}

double activation_bytes_per_layer(const ModelSpec& m, const LayerContext& c, LayerRecompute policy) {
  return activation_bytes_per_layer(sum_saved_tensors(m, c), policy);
}

double recompute_working_bytes(const ModelSpec& m, const LayerContext& c, LayerRecompute policy) {
  return recompute_working_bytes(sum_saved_tensors(m, c), policy);
}

LinearWeights linear_weights_per_layer_rank(const ModelSpec& m, int t, int ep) {
  const double h = static_cast<double>(m.hidden);
  const double fw = static_cast<double>(m.moe.enabled() ? m.moe.expert_ffn_hidden : m.ffn_hidden);
  const double mats = m.family == Family::gpt ? 2 : 3;
  const double q = h * m.q_width() / t, kv = h * m.kv_width() / t, o = static_cast<double>(m.q_width()) * h / t;
  LinearWeights w;
  w.largest = std::max({q, kv, o});
  double mlp = mats * h * fw / t;
  if (m.moe.enabled()) {
    const double fs = static_cast<double>(m.ffn_hidden) * m.moe.shared_experts;
    mlp = m.moe.experts / static_cast<double>(ep) * mats * h * fw + h * m.moe.experts + mats * h * fs / t;
    w.largest = std::max({w.largest, h * fw, h * m.moe.experts, h * fs / t});
  } else {
    w.largest = std::max(w.largest, h * fw / t);
  }
  w.total = q + 2 * kv + o + mlp;
  return w;
}

ParamCounts count_params(const ModelSpec& m, int t, int pp, int ep, uint32_t lora_targets, int lora_rank) {
  ParamCounts pc;
  const double h = static_cast<double>(m.hidden);
  const double qw = static_cast<double>(m.q_width());
  const double kvw = static_cast<double>(m.kv_width());
  const bool gpt = m.family == Family::gpt;
  const double norm = gpt ? 2 * h : h;  // LayerNorm has weight and bias; RMSNorm a weight

  // Attention: qkv (column-parallel, bias split), o (row-parallel, bias replicated); QK-norm's
  // two RMSNorm weights of head_dim, replicated under TP (every rank normalises its heads).
  const double qkv_w = h * (qw + 2 * kvw), qkv_b = m.qkv_bias() ? qw + 2 * kvw : 0;
  const double o_w = qw * h, o_b = m.o_bias() ? h : 0;
  const double qk_norm = m.qk_norm ? 2.0 * static_cast<double>(m.head_width()) : 0;
  const double attn = qkv_w + qkv_b + o_w + o_b + qk_norm;
  const double attn_rank = (qkv_w + qkv_b + o_w) / t + o_b + qk_norm;

  // One dense MLP of width f: GPT fc1+fc2 with biases, Llama gate+up+down.
  auto mlp = [&](double f, double div) {
    if (gpt) return (2 * h * f + f) / div + h;  // fc2 bias is replicated under TP
    return 3 * h * f / div;
  };
  double mlp_full = 0, mlp_rank = 0, mlp_active = 0;
  if (m.moe.enabled()) {
    const double fe = static_cast<double>(m.moe.expert_ffn_hidden);
    const double one = mlp(fe, 1);
    const double router = h * m.moe.experts;
    const double shared = m.moe.shared_experts > 0 ? mlp(static_cast<double>(m.ffn_hidden) * m.moe.shared_experts, 1) : 0;
    mlp_full = m.moe.experts * one + router + shared;
    // Experts are split over EP; shared experts and the router follow TP like a dense MLP.
    mlp_rank = m.moe.experts / static_cast<double>(ep) * one + router +
               (m.moe.shared_experts > 0 ? mlp(static_cast<double>(m.ffn_hidden) * m.moe.shared_experts, t) : 0);
    mlp_active = m.moe.experts_per_token * one + router + shared;
    pc.expert_per_layer_rank = m.moe.experts / static_cast<double>(ep) * one;
  } else {
    mlp_full = mlp(static_cast<double>(m.ffn_hidden), 1);
    mlp_rank = mlp(static_cast<double>(m.ffn_hidden), t);
    mlp_active = mlp_full;
  }
  pc.per_layer = attn + mlp_full + 2 * norm;
  pc.per_layer_rank = attn_rank + mlp_rank + 2 * norm;

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

  for (int p = 0; p < 7; ++p) {
    if (!(lora_targets & (1u << p))) continue;
    const ProjShape ps = projection_shape(m, static_cast<Projection>(p));
    const double experts = (m.moe.enabled() && p >= 4) ? m.moe.experts : 1;
    const double experts_rank = (m.moe.enabled() && p >= 4) ? m.moe.experts / static_cast<double>(ep) : 1;
    pc.lora_per_layer += experts * lora_rank * (ps.in + ps.out);
    // Column-parallel: A (r x in) replicated, B (out x r) split; row-parallel: the reverse.
    const double split = (m.moe.enabled() && p >= 4) ? 1 : t;
    const double per = ps.column_parallel ? lora_rank * (ps.in + ps.out / split) : lora_rank * (ps.in / split + ps.out);
    pc.lora_per_layer_rank += experts_rank * per;
    if (m.moe.enabled() && p >= 4) pc.lora_expert_per_layer_rank += experts_rank * per;
  }
  pc.total = m.layers * pc.per_layer + pc.embedding + pc.head;
  pc.active_per_token = m.layers * (attn + mlp_active + 2 * norm) + pc.embedding + pc.head;
  return pc;
}

LayerFlops forward_flops_per_layer(const ModelSpec& m, const LayerContext& c, double moe_capacity_tokens_factor) {
  LayerFlops fl;
  const double t = c.t;
  const double tokens = static_cast<double>(c.b) * static_cast<double>(c.s);  // GEMMs see full s (after SP gather)
  const double h = static_cast<double>(m.hidden);
  const double qw = static_cast<double>(m.q_width()), kvw = static_cast<double>(m.kv_width());
  const bool gpt = m.family == Family::gpt;
  // 2*m*n*k per GEMM.
  fl.gemm_base += 2 * tokens * h * (qw + 2 * kvw) / t;  // q k v
  fl.gemm_base += 2 * tokens * qw * h / t;              // o
  if (m.moe.enabled()) {
    const double fe = static_cast<double>(m.moe.expert_ffn_hidden);
    const double routed = tokens * m.moe.experts_per_token * moe_capacity_tokens_factor;
    // With EP the routed tokens are spread over the EP group; with TP + SP each TP rank
    // routes its own tokens, so a rank's expert work is routed/t.
    fl.gemm_base += 2 * routed / t * h * fe * (gpt ? 2 : 3);
    fl.router = 2 * tokens / t * h * m.moe.experts;
    if (m.moe.shared_experts > 0)
      fl.gemm_base += 2 * tokens * h * static_cast<double>(m.ffn_hidden) * m.moe.shared_experts * (gpt ? 2 : 3) / t;
  } else {
    fl.gemm_base += 2 * tokens * h * static_cast<double>(m.ffn_hidden) * (gpt ? 2 : 3) / t;
  }
  // Attention core: QK^T and PV, each 2*b*s*s_kv*d per head.
  const double core = 2 * 2 * tokens * static_cast<double>(c.s_kv) * qw / t;
  fl.attention = core;
  // Causal: each query sees on average half of the keys (s_kv = s without CP).
  fl.attention_causal = core * 0.5;
  for (int p = 0; p < 7; ++p) {
    if (!(c.lora_targets & (1u << p))) continue;
    const ProjShape ps = projection_shape(m, static_cast<Projection>(p));
    // Column-parallel: A whole, B this rank's out/t rows. Row-parallel: A this rank's in/t
    // columns, B whole over every token (over this rank's tokens/t under SP). MoE experts'
    // adapters: whole, over the rank's routed rows.
    if (m.moe.enabled() && p >= static_cast<int>(Projection::gate)) {
      const double routed = tokens * m.moe.experts_per_token * moe_capacity_tokens_factor / t;
      fl.gemm_lora += 2 * routed * c.lora_rank * (ps.in + ps.out);
      continue;
    }
    fl.gemm_lora += ps.column_parallel ? 2 * tokens * c.lora_rank * (ps.in + ps.out / t)
                                       : 2 * tokens * c.lora_rank * (ps.in / t + ps.out / (c.sp ? t : 1));
  }
  // Bandwidth-bound work: each of ~12 (GPT) or ~10 (Llama) elementwise passes reads and
  // writes a (tokens x h) or (tokens x f) tensor.
  const double f_local = static_cast<double>(m.moe.enabled() ? m.moe.expert_ffn_hidden * m.moe.experts_per_token : m.ffn_hidden) / t;
  fl.elementwise_bytes = c.act_bytes * tokens * (8 * h + (gpt ? 3 : 4) * f_local);
  // QLoRA: every base weight is dequantized before its forward GEMM.
  if (c.dequant_bytes_per_param > 0) fl.dequant_bytes = c.dequant_bytes_per_param * linear_weights_per_layer_rank(m, c.t, c.ep).total;
  // QK-norm reads and writes this rank's queries and keys once more.
  if (m.qk_norm) fl.elementwise_bytes += c.act_bytes * tokens * 2 * (qw + kvw) / t;
  if (m.moe.enabled()) {
    // Token dispatch, outside the GEMMs: each of the rank's tokens is copied into the rows of
    // its k experts (capacity-padded: read and write k*h per token), and the experts'
    // outputs are gathered back and summed with the router's weights (read k*h, write h):
    // Megatron-Core's moe permute / unpermute (megatron/core/transformer/moe/moe_utils.py),
    // GShard's dispatch and combine (Lepikhin et al. 2020, sec. 2.2).
    const double routed = tokens / t * m.moe.experts_per_token * moe_capacity_tokens_factor;
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
  return 6 * (non_embedding + head) + 12.0 * m.layers * static_cast<double>(seq_len) * m.q_width();
}

}  // namespace llmplan
