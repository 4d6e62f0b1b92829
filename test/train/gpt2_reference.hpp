#pragma once
// GPT-2's loss in float64, written from the model's definition with plain loops and nothing of
// bmtrain: token and position embeddings, pre-norm blocks (LayerNorm, fused QKV projection, causal
// softmax attention over heads, output projection, LayerNorm, GELU MLP with the tanh form), a
// final LayerNorm, the head tied to the token embedding, and the mean cross-entropy of the
// next-token targets. Tests hold bmt-train's GPT to it: the loss, and the gradients against
// central differences of this loss.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpt2_reference {

using Params = std::map<std::string, std::vector<double>>;  // by the model's parameter names

struct Shape {
  std::int64_t vocab, dim, heads, ffn, layers;
  double norm_eps;
};

namespace detail {

using Rows = std::vector<std::vector<double>>;  // [tokens][features]

inline std::vector<double> layer_norm(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& b, double eps) {
  const double n = static_cast<double>(x.size());
  double mean = 0.0, var = 0.0;
  for (double v : x) mean += v;
  mean /= n;
  for (double v : x) var += (v - mean) * (v - mean);
  var /= n;  // biased, as LayerNorm defines it
  const double inv = 1.0 / std::sqrt(var + eps);
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) * inv * w[i] + b[i];
  return y;
}

// y = W x + b, W stored [out, in] row-major.
inline std::vector<double> affine(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b, std::size_t out) {
  const std::size_t in = x.size();
  std::vector<double> y(out);
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

}  // namespace detail

// Mean cross-entropy over every token of `tokens` [batch][seq] predicting `targets` [batch][seq].
inline double loss(const Params& p, const Shape& s, const std::vector<std::vector<std::int64_t>>& tokens,
                   const std::vector<std::vector<std::int64_t>>& targets) {
  using detail::affine;
  using detail::layer_norm;
  const std::size_t C = static_cast<std::size_t>(s.dim), H = static_cast<std::size_t>(s.heads), D = C / H;
  const std::size_t F = static_cast<std::size_t>(s.ffn), V = static_cast<std::size_t>(s.vocab);
  const std::vector<double>& wte = p.at("wte");
  const std::vector<double>& wpe = p.at("wpe");
  double total = 0.0;
  std::size_t count = 0;
  for (std::size_t b = 0; b < tokens.size(); ++b) {
    const std::size_t T = tokens[b].size();
    detail::Rows x(T, std::vector<double>(C));
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t c = 0; c < C; ++c)
        x[t][c] = wte[static_cast<std::size_t>(tokens[b][t]) * C + c] + wpe[t * C + c];
    for (std::int64_t l = 0; l < s.layers; ++l) {
      const std::string pre = "blocks." + std::to_string(l) + ".";
      const auto& at = [&](const char* name) -> const std::vector<double>& { return p.at(pre + name); };
      detail::Rows qkv(T), attn(T, std::vector<double>(C, 0.0));
      for (std::size_t t = 0; t < T; ++t)
        qkv[t] = affine(layer_norm(x[t], at("ln_1.weight"), at("ln_1.bias"), s.norm_eps), at("attn.weight"),
                        at("attn.bias"), 3 * C);
      // Query t of head h attends to keys 0..t; q, k and v are the QKV output's three thirds, head
      // h the columns h D .. h D + D - 1 of each.
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < H; ++h) {
          std::vector<double> score(t + 1);
          for (std::size_t j = 0; j <= t; ++j) {
            double dot = 0.0;
            for (std::size_t d = 0; d < D; ++d) dot += qkv[t][h * D + d] * qkv[j][C + h * D + d];
            score[j] = dot / std::sqrt(static_cast<double>(D));
          }
          const double top = *std::max_element(score.begin(), score.end());
          double sum = 0.0;
          for (double& v : score) sum += (v = std::exp(v - top));
          for (std::size_t j = 0; j <= t; ++j)
            for (std::size_t d = 0; d < D; ++d) attn[t][h * D + d] += score[j] / sum * qkv[j][2 * C + h * D + d];
        }
      for (std::size_t t = 0; t < T; ++t) {
        const std::vector<double> proj = affine(attn[t], at("attn_proj.weight"), at("attn_proj.bias"), C);
        for (std::size_t c = 0; c < C; ++c) x[t][c] += proj[c];
        std::vector<double> hidden =
            affine(layer_norm(x[t], at("ln_2.weight"), at("ln_2.bias"), s.norm_eps), at("mlp_fc.weight"),
                   at("mlp_fc.bias"), F);
        for (double& v : hidden) v = detail::gelu(v);
        const std::vector<double> out = affine(hidden, at("mlp_proj.weight"), at("mlp_proj.bias"), C);
        for (std::size_t c = 0; c < C; ++c) x[t][c] += out[c];
      }
    }
    for (std::size_t t = 0; t < T; ++t) {
      const std::vector<double> h = layer_norm(x[t], p.at("ln_f.weight"), p.at("ln_f.bias"), s.norm_eps);
      const std::vector<double> logits = affine(h, wte, {}, V);  // the head is the token embedding
      const double top = *std::max_element(logits.begin(), logits.end());
      double sum = 0.0;
      for (double v : logits) sum += std::exp(v - top);
      total += top + std::log(sum) - logits[static_cast<std::size_t>(targets[b][t])];
      ++count;
    }
  }
  return total / static_cast<double>(count);
}

}  // namespace gpt2_reference
