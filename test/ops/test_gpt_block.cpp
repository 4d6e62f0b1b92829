// A GPT-2 block written with the ops, end to end: layer_norm -> fused QKV linear -> causal
// attention -> projection -> residual -> layer_norm -> MLP (GELU) -> residual. Forward against a
// float64 host implementation of the same block; every gradient (input and all twelve parameters)
// against finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "bmtrain/ops/ops.hpp"
#include "common/gradcheck.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

constexpr std::int64_t B = 2, T = 3, C = 8, H = 2, D = C / H, F = 4 * C;

// inputs: x, ln1.w, ln1.b, attn.w [3C, C], attn.b, proj.w [C, C], proj.b, ln2.w, ln2.b,
// fc.w [F, C], fc.b, mlp_proj.w [C, F], mlp_proj.b
Tensor gpt_block(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  auto qkv = split(linear(layer_norm(x, in[1], in[2]), in[3], in[4]), {C, C, C}, -1);
  const Tensor y = attention_bthd(reshape(qkv[0], {B, T, H, D}), reshape(qkv[1], {B, T, H, D}),
                                  reshape(qkv[2], {B, T, H, D}), true);
  const Tensor h = add(x, linear(reshape(y, {B, T, C}), in[5], in[6]));
  return add(h, linear(gelu(linear(layer_norm(h, in[7], in[8]), in[9], in[10])), in[11], in[12]));
}

using Mat = std::vector<double>;

// y [n, out] = x [n, in] W^T + b
Mat linear_ref(const Mat& x, std::int64_t n, std::int64_t in, const std::vector<float>& w, const std::vector<float>& b,
               std::int64_t out) {
  Mat y(n * out);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (std::int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

Mat layer_norm_ref(const Mat& x, std::int64_t n, const std::vector<float>& w, const std::vector<float>& b) {
  Mat y(x.size());
  for (std::int64_t r = 0; r < n; ++r) {
    double mu = 0, var = 0;
    for (std::int64_t j = 0; j < C; ++j) mu += x[r * C + j] / C;
    for (std::int64_t j = 0; j < C; ++j) var += (x[r * C + j] - mu) * (x[r * C + j] - mu) / C;
    for (std::int64_t j = 0; j < C; ++j) y[r * C + j] = (x[r * C + j] - mu) / std::sqrt(var + 1e-5) * w[j] + b[j];
  }
  return y;
}

Mat gpt_block_ref(const std::vector<std::vector<float>>& p) {
  const std::int64_t n = B * T;
  const Mat x(p[0].begin(), p[0].end());
  const Mat qkv = linear_ref(layer_norm_ref(x, n, p[1], p[2]), n, C, p[3], p[4], 3 * C);
  Mat y(n * C, 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < T; ++i) {
        auto at = [&](std::int64_t t, int part, std::int64_t d) { return qkv[(b * T + t) * 3 * C + part * C + h * D + d]; };
        std::vector<double> s(i + 1);
        double m = -1e300, sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += at(i, 0, d) * at(j, 1, d);
          s[j] = dot / std::sqrt(double(D));
          m = std::max(m, s[j]);
        }
        for (auto& v : s) sum += (v = std::exp(v - m));
        for (std::int64_t j = 0; j <= i; ++j)
          for (std::int64_t d = 0; d < D; ++d) y[(b * T + i) * C + h * D + d] += s[j] / sum * at(j, 2, d);
      }
  Mat hres = linear_ref(y, n, C, p[5], p[6], C);
  for (std::int64_t k = 0; k < n * C; ++k) hres[k] += x[k];
  Mat f = linear_ref(layer_norm_ref(hres, n, p[7], p[8]), n, C, p[9], p[10], F);
  for (auto& v : f) v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  Mat out = linear_ref(f, n, F, p[11], p[12], C);
  for (std::int64_t k = 0; k < n * C; ++k) out[k] += hres[k];
  return out;
}

std::vector<Shape> input_shapes() {
  return {{B, T, C}, {C}, {C}, {3 * C, C}, {3 * C}, {C, C}, {C}, {C}, {C}, {F, C}, {F}, {C, F}, {C}};
}

std::vector<std::vector<float>> random_inputs() {
  std::vector<std::vector<float>> p;
  std::uint32_t seed = 1;
  for (const Shape& s : input_shapes()) {
    const bool norm_weight = p.size() == 1 || p.size() == 7;
    const float scale = s.size() == 2 ? 1.0f / std::sqrt(float(s[1])) : 1.0f;  // weights ~ 1/sqrt(fan_in)
    p.push_back(norm_weight ? testing::random_floats(numel_of(s), seed++, 0.5f, 1.5f)
                            : testing::random_floats(numel_of(s), seed++, -scale, scale));
  }
  return p;
}

std::vector<Tensor> to_tensors(const std::vector<std::vector<float>>& p) {
  std::vector<Tensor> t;
  const auto shapes = input_shapes();
  for (std::size_t i = 0; i < p.size(); ++i) t.push_back(Tensor::from_floats(p[i], shapes[i]));
  return t;
}

TEST(GptBlock, ForwardMatchesFloat64Reference) {
  const auto p = random_inputs();
  const Tensor y = gpt_block(to_tensors(p));
  EXPECT_EQ(y.shape(), (Shape{B, T, C}));
  testing::expect_close(y.to_host_floats(), gpt_block_ref(p), 1e-4, 1e-4, "gpt block");
}

TEST(GptBlock, EveryGradientMatchesFiniteDifferences) {
  testing::gradcheck(gpt_block, to_tensors(random_inputs()), {.step = 1e-2f, .rtol = 3e-2f, .atol = 3e-3f});
}

}  // namespace
}  // namespace bmt
