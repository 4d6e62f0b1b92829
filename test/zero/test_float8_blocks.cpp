// FP8 linear layers inside ZeRO-3 blocks (a TransformerBlockList of residual FP8 linears) against
// a host reference that quantizes as the format's definition says (common/float8_reference.hpp):
// forward values and every parameter's gradient, with each rank feeding its own data, at every
// world size. The activations and gradients of each rank are scaled by that rank's own absolute
// maximum (per-tensor current scaling is local to the data a rank multiplies), the gathered
// weights by theirs; the reference does the same for every rank's data and averages the
// gradients, so it is one computation whatever the world size, and every world size matches it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bmtrain/nn/layers.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"
#include "common/float8_reference.hpp"
#include "common/gathered_parameters.hpp"

namespace {

using bmt::testing::abt_reference;
using bmt::testing::float8_quantize;
using bmt::testing::kE4M3;
using bmt::testing::kE5M2;
using bmt::testing::transpose_of;

// Not a multiple of 16, nor is kRows: on CUDA every product takes the FP8 GEMM's widened f32 path,
// whose sums match the reference's to f32 rounding, as on the host. (cuBLASLt's FP8 kernels keep
// partial sums to about 14 bits, and a block's output differing by that much could round to a
// neighbouring float8 code in the next block's input; ops_float8_linear holds those kernels.)
constexpr std::int64_t kD = 24;
constexpr std::int64_t kRows = 6;
constexpr int kBlocks = 3;

// y = x + x W^T + b, the product in FP8.
struct Fp8Block : bmt::Module {
  bmt::nn::Linear proj{kD, kD, /*with_bias=*/true, bmt::DType::f32, bmt::init::normal(0.3f)};
  Fp8Block() {
    proj.set_fp8(true);
    register_module("proj", proj);
  }
  bmt::Tensor forward(const bmt::Tensor& x) const { return proj.forward_onto(x, x); }
};

struct Model : bmt::DistributedModule {
  bmt::TransformerBlockList<Fp8Block> blocks{1};
  Model() {
    for (int i = 0; i < kBlocks; ++i) blocks.append();
    register_module("blocks", blocks);
  }
  bmt::Tensor forward(const bmt::Tensor& x) { return blocks(x); }
};

// Each rank's input and output gradient, over several binades.
std::vector<float> data_of(int rank, float phase, float top) {
  std::vector<float> v(kRows * kD);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float t = static_cast<float>(i);
    v[i] = top * std::sin(0.37f * t + phase * static_cast<float>(rank + 1)) * std::exp2(-static_cast<float>(i % 7));
  }
  return v;
}

TEST(Float8Blocks, MatchTheHostReferenceAtEveryWorldSize) {
  Model model;
  bmt::init_parameters(model);
  for (auto* s : bmt::sharded_storages(model)) s->zero_grad();
  const bmt::Tensor x = bmt::Tensor::from_floats(data_of(bmt::rank(), 1.3f, 2.0f), {kRows, kD});
  bmt::Tensor y = model.forward(x);
  const auto y_host = y.to_host_floats();
  y.backward(bmt::Tensor::from_floats(data_of(bmt::rank(), 0.7f, 0.01f), {kRows, kD}));

  auto params = bmt_test::gathered(model);
  std::vector<std::vector<float>> w(kBlocks), b(kBlocks);
  for (int k = 0; k < kBlocks; ++k) {
    const std::string p = "blocks." + std::to_string(k) + ".proj.";
    ASSERT_TRUE(params.count(p + "weight")) << "missing " << p << "weight";
    w[k] = params[p + "weight"].first;
    b[k] = params[p + "bias"].first;
  }
  std::vector<std::vector<double>> gw(kBlocks, std::vector<double>(kD * kD, 0.0)), gb(kBlocks, std::vector<double>(kD, 0.0));
  std::vector<double> c, abs_sum;
  const int n = bmt::world_size();
  for (int r = 0; r < n; ++r) {
    // Forward, each block's input rounded to f32 as the model holds it.
    std::vector<float> h = data_of(r, 1.3f, 2.0f);
    std::vector<bmt::testing::Float8Reference> qx;
    for (int k = 0; k < kBlocks; ++k) {
      qx.push_back(float8_quantize(kE4M3, h));
      abt_reference(qx.back().values, float8_quantize(kE4M3, w[k]).values, kRows, kD, kD, &c, &abs_sum);
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(h[i] + c[i] + b[k][i % kD]);
    }
    if (r == bmt::rank())
      for (std::size_t i = 0; i < h.size(); ++i) ASSERT_NEAR(y_host[i], h[i], 1e-5 * (1 + std::fabs(h[i]))) << "y " << i;
    // Backward: the residual passes g on; the FP8 product adds dy W to it (dy in e5m2).
    std::vector<float> g = data_of(r, 0.7f, 0.01f);
    for (int k = kBlocks - 1; k >= 0; --k) {
      const auto qg = float8_quantize(kE5M2, g);
      for (std::size_t i = 0; i < g.size(); ++i) gb[k][i % kD] += g[i];
      abt_reference(transpose_of(qg.values, kRows, kD), transpose_of(qx[k].values, kRows, kD), kD, kRows, kD, &c,
                    &abs_sum);
      for (std::size_t i = 0; i < c.size(); ++i) gw[k][i] += c[i];
      abt_reference(qg.values, transpose_of(float8_quantize(kE4M3, w[k]).values, kD, kD), kRows, kD, kD, &c,
                    &abs_sum);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(g[i] + c[i]);
    }
  }
  const auto near = [&](const std::vector<float>& got, const std::vector<double>& sum, const std::string& what) {
    ASSERT_EQ(got.size(), sum.size());
    double scale = 0;
    for (double v : sum) scale = std::max(scale, std::fabs(v / n));
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], sum[i] / n, 1e-5 * scale) << what << "[" << i << "]";
  };
  for (int k = 0; k < kBlocks; ++k) {
    const std::string p = "blocks." + std::to_string(k) + ".proj.";
    near(params[p + "weight"].second, gw[k], p + "weight.grad");
    near(params[p + "bias"].second, gb[k], p + "bias.grad");
  }
}

}  // namespace
