#pragma once
// bmt-train's two models' loss in float64, written from their definitions with plain loops and
// nothing of bmtrain. GPT-2: token and position embeddings, pre-norm blocks (LayerNorm, fused QKV
// projection, causal softmax attention over heads, output projection, LayerNorm, GELU MLP with the
// tanh form), a final LayerNorm, the head tied to the token embedding. Llama: token embeddings,
// pre-norm blocks (RMSNorm, Q/K/V projections, rotary embedding of q and k in the rotate-half
// form with Llama 3's frequency scaling when asked for, causal attention with each key/value head
// serving its group of query heads, output projection, RMSNorm, SwiGLU MLP), a final RMSNorm, its
// own head or the token embedding.
// Both: the mean cross-entropy of the next-token targets. Tests hold the models to it: the loss,
// and the gradients against central differences of this loss.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpt_reference {

using Params = std::map<std::string, std::vector<double>>;  // by the model's parameter names

struct Shape {
  std::string arch;  // gpt2 | llama
  std::int64_t vocab, dim, heads, ffn, layers;
  double norm_eps, rope_theta;
  std::int64_t kv_heads = 0;  // Llama's key/value heads; 0: as many as heads
  bool llama_tied = false;    // a Llama whose head is its token embedding (GPT-2's always is)
  // Llama 3's rope_scaling; rope_factor 0: none.
  double rope_factor = 0, rope_low_freq_factor = 1, rope_high_freq_factor = 4, rope_original_positions = 8192;
};

namespace detail {

using Row = std::vector<double>;
using Rows = std::vector<Row>;  // [tokens][features]

inline Row layer_norm(const Row& x, const Row& w, const Row& b, double eps) {
  const double n = static_cast<double>(x.size());
  double mean = 0.0, var = 0.0;
  for (double v : x) mean += v;
  mean /= n;
  for (double v : x) var += (v - mean) * (v - mean);
  var /= n;  // biased, as LayerNorm defines it
  const double inv = 1.0 / std::sqrt(var + eps);
  Row y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) * inv * w[i] + b[i];
  return y;
}

inline Row rms_norm(const Row& x, const Row& w, double eps) {
  double square = 0.0;
  for (double v : x) square += v * v;
  const double inv = 1.0 / std::sqrt(square / static_cast<double>(x.size()) + eps);
  Row y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// W x (+ b), W stored [out, in] row-major.
inline Row affine(const Row& x, const Row& w, const Row& b = {}) {
  const std::size_t in = x.size(), out = w.size() / in;
  Row y(out);
  for (std::size_t o = 0; o < out; ++o) {
    double s = b.empty() ? 0.0 : b[o];
    for (std::size_t i = 0; i < in; ++i) s += w[o * in + i] * x[i];
    y[o] = s;
  }
  return y;
}

inline double gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  return 0.5 * x * (1.0 + std::tanh(k * (x + c * x * x * x)));
}

inline double silu(double x) { return x / (1.0 + std::exp(-x)); }

// The rotation frequency of pair i of a D-wide head: 1 / theta^(2i/D), and with Llama 3's scaling
// (wavelengths 2 pi / f beyond original / low divided by the factor, below original / high kept,
// those between blended) as transformers' _compute_llama3_parameters computes it.
inline double rope_frequency(std::size_t i, std::size_t D, const Shape& s) {
  const double f = 1.0 / std::pow(s.rope_theta, 2.0 * static_cast<double>(i) / static_cast<double>(D));
  if (s.rope_factor <= 0) return f;
  const double wavelength = 2 * M_PI / f;
  if (wavelength < s.rope_original_positions / s.rope_high_freq_factor) return f;
  if (wavelength > s.rope_original_positions / s.rope_low_freq_factor) return f / s.rope_factor;
  const double smooth = (s.rope_original_positions / wavelength - s.rope_low_freq_factor) /
                        (s.rope_high_freq_factor - s.rope_low_freq_factor);
  return (1 - smooth) * f / s.rope_factor + smooth * f;
}

// Head vectors of width D rotated at position t: pairs (i, i + D/2) by t f_i.
inline void rotate(Row& x, std::size_t heads, std::size_t t, const Shape& s) {
  const std::size_t D = x.size() / heads, half = D / 2;
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * rope_frequency(i, D, s);
      const double x1 = x[h * D + i], x2 = x[h * D + i + half];
      x[h * D + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
      x[h * D + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
    }
}

// Causal attention: query t of head h (columns h D .. h D + D - 1) over keys 0..t of key/value
// head h / (heads / kv_heads).
inline Rows attention(const Rows& q, const Rows& k, const Rows& v, std::size_t heads, std::size_t kv_heads) {
  const std::size_t T = q.size(), C = q[0].size(), D = C / heads, group = heads / kv_heads;
  Rows y(T, Row(C, 0.0));
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t g = h / group;
      Row score(t + 1);
      for (std::size_t j = 0; j <= t; ++j) {
        double dot = 0.0;
        for (std::size_t d = 0; d < D; ++d) dot += q[t][h * D + d] * k[j][g * D + d];
        score[j] = dot / std::sqrt(static_cast<double>(D));
      }
      const double top = *std::max_element(score.begin(), score.end());
      double sum = 0.0;
      for (double& s : score) sum += (s = std::exp(s - top));
      for (std::size_t j = 0; j <= t; ++j)
        for (std::size_t d = 0; d < D; ++d) y[t][h * D + d] += score[j] / sum * v[j][g * D + d];
    }
  return y;
}

inline void add_to(Row& x, const Row& y) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

// x + attn(ln_1(x)), then x + mlp(ln_2(x)); `at` looks up the block's parameters.
template <class At>
void gpt2_block(Rows& x, const Shape& s, const At& at) {
  const std::size_t T = x.size(), C = static_cast<std::size_t>(s.dim);
  Rows q(T), k(T), v(T);
  for (std::size_t t = 0; t < T; ++t) {
    const Row qkv = affine(layer_norm(x[t], at("ln_1.weight"), at("ln_1.bias"), s.norm_eps), at("attn.weight"),
                           at("attn.bias"));
    q[t].assign(qkv.begin(), qkv.begin() + C);
    k[t].assign(qkv.begin() + C, qkv.begin() + 2 * C);
    v[t].assign(qkv.begin() + 2 * C, qkv.end());
  }
  const Rows y = attention(q, k, v, static_cast<std::size_t>(s.heads), static_cast<std::size_t>(s.heads));
  for (std::size_t t = 0; t < T; ++t) {
    add_to(x[t], affine(y[t], at("attn_proj.weight"), at("attn_proj.bias")));
    Row hidden = affine(layer_norm(x[t], at("ln_2.weight"), at("ln_2.bias"), s.norm_eps), at("mlp_fc.weight"),
                        at("mlp_fc.bias"));
    for (double& h : hidden) h = gelu(h);
    add_to(x[t], affine(hidden, at("mlp_proj.weight"), at("mlp_proj.bias")));
  }
}

// x + wo attn(rope(wq h), rope(wk h), wv h) with h = rms(x), then x + w2 (silu(w1 f) * w3 f).
template <class At>
void llama_block(Rows& x, const Shape& s, const At& at) {
  const std::size_t T = x.size(), H = static_cast<std::size_t>(s.heads);
  const std::size_t Hk = s.kv_heads > 0 ? static_cast<std::size_t>(s.kv_heads) : H;
  Rows q(T), k(T), v(T);
  for (std::size_t t = 0; t < T; ++t) {
    const Row h = rms_norm(x[t], at("attention_norm.weight"), s.norm_eps);
    q[t] = affine(h, at("wq.weight"));
    k[t] = affine(h, at("wk.weight"));
    v[t] = affine(h, at("wv.weight"));
    rotate(q[t], H, t, s);
    rotate(k[t], Hk, t, s);
  }
  const Rows y = attention(q, k, v, H, Hk);
  for (std::size_t t = 0; t < T; ++t) {
    add_to(x[t], affine(y[t], at("wo.weight")));
    const Row f = rms_norm(x[t], at("ffn_norm.weight"), s.norm_eps);
    Row gate = affine(f, at("w1.weight"));
    const Row up = affine(f, at("w3.weight"));
    for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = silu(gate[i]) * up[i];
    add_to(x[t], affine(gate, at("w2.weight")));
  }
}

}  // namespace detail

// Mean cross-entropy over every token of `tokens` [batch][seq] predicting `targets` [batch][seq].
inline double loss(const Params& p, const Shape& s, const std::vector<std::vector<std::int64_t>>& tokens,
                   const std::vector<std::vector<std::int64_t>>& targets) {
  using namespace detail;
  const bool gpt2 = s.arch == "gpt2";
  const std::size_t C = static_cast<std::size_t>(s.dim);
  const Row& wte = p.at("wte");
  const Row& head = p.at(gpt2 || s.llama_tied ? "wte" : "lm_head");  // GPT-2 ties its head to the token embedding
  double total = 0.0;
  std::size_t count = 0;
  for (std::size_t b = 0; b < tokens.size(); ++b) {
    const std::size_t T = tokens[b].size();
    Rows x(T, Row(C));
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t c = 0; c < C; ++c)
        x[t][c] = wte[static_cast<std::size_t>(tokens[b][t]) * C + c] + (gpt2 ? p.at("wpe")[t * C + c] : 0.0);
    for (std::int64_t l = 0; l < s.layers; ++l) {
      const std::string pre = "blocks." + std::to_string(l) + ".";
      const auto at = [&](const char* name) -> const Row& { return p.at(pre + name); };
      if (gpt2)
        gpt2_block(x, s, at);
      else
        llama_block(x, s, at);
    }
    for (std::size_t t = 0; t < T; ++t) {
      const Row h = gpt2 ? layer_norm(x[t], p.at("ln_f.weight"), p.at("ln_f.bias"), s.norm_eps)
                         : rms_norm(x[t], p.at("norm.weight"), s.norm_eps);
      const Row logits = affine(h, head);
      const double top = *std::max_element(logits.begin(), logits.end());
      double sum = 0.0;
      for (double v : logits) sum += std::exp(v - top);
      total += top + std::log(sum) - logits[static_cast<std::size_t>(targets[b][t])];
      ++count;
    }
  }
  return total / static_cast<double>(count);
}

}  // namespace gpt_reference
