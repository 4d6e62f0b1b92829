// FP8 linear layers inside ZeRO-3 blocks (a TransformerBlockList of residual FP8 linears) against
// a host reference that quantizes as the format's definition says (common/float8_reference.hpp):
// forward values and every parameter's gradient, with each rank feeding its own data, at every
// world size. The activations and gradients of each rank are scaled by that rank's own absolute
// maximum (per-tensor current scaling is local to the data a rank multiplies), the gathered
// weights by theirs; the reference does the same for every rank's data and averages the
// gradients, so it is one computation whatever the world size, and every world size matches it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bmtrain/kernels/float8.hpp"
#include "bmtrain/nn/layers.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"
#include "common/float8_reference.hpp"
#include "common/gathered_parameters.hpp"
#include "common/host_reference.hpp"

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
constexpr int kBlocks = 4;  // even: a kept block's backward finds another block in its forward's ring slot

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
  explicit Model(bool recompute) {
    bmt::CheckpointOptions options;
    options.use_checkpoint = recompute;
    for (int i = 0; i < kBlocks; ++i) blocks.append(options);
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

// Recomputing each block in backward, or keeping its activations from forward: a kept block's
// backward takes its weight's codes from its backward gather (the forward's gather buffer holds
// another block's by then, each with its own scale).
class Float8Blocks : public ::testing::TestWithParam<bool> {};

TEST_P(Float8Blocks, MatchTheHostReferenceAtEveryWorldSize) {
  Model model(GetParam());
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

INSTANTIATE_TEST_SUITE_P(RecomputeOrKeep, Float8Blocks, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Recompute" : "Keep"; });

}  // namespace

namespace {

using bmt::testing::rounded;

// A block whose FP8 layers' weights are gathered as e4m3 codes beside parameters gathered in bf16
// (a norm, a bias), with sizes that spread each weight over several ranks' shards. Its forward
// records what the block was given, to hold against the f32 master weights.
constexpr std::int64_t kIn = 40, kOut = 72;
struct MixedBlock : bmt::Module {
  bmt::nn::LayerNorm norm{kIn, bmt::DType::bf16};
  bmt::nn::Linear proj{kIn, kOut, /*with_bias=*/true, bmt::DType::bf16, bmt::init::normal(0.3f)};
  bmt::nn::Linear back{kOut, kIn, /*with_bias=*/false, bmt::DType::bf16, bmt::init::normal(0.2f)};
  struct Seen {
    std::vector<std::uint8_t> proj_codes, back_codes;
    float proj_scale_inv = 0, back_scale_inv = 0;
    std::vector<float> bias, norm_weight;
  };
  mutable Seen seen;
  MixedBlock() {
    register_module("norm", norm);
    register_module("proj", proj);
    register_module("back", back);
    proj.set_fp8(true);
    back.set_fp8(true);
  }
  static std::vector<std::uint8_t> codes(const bmt::nn::Linear& l) {
    const bmt::Tensor c = bmt::gathered_float8(l.weight).codes;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(c.numel()));
    c.copy_to_host(out.data(), out.size());
    return out;
  }
  static float scale_inv(const bmt::nn::Linear& l) {
    return bmt::gathered_float8(l.weight).scale_inv.to_host_floats()[0];
  }
  bmt::Tensor forward(const bmt::Tensor& x) const {
    seen = {codes(proj), codes(back), scale_inv(proj), scale_inv(back), proj.bias.gather().to_host_floats(),
            norm.weight.gather().to_host_floats()};
    return back.forward_onto(x, proj.forward(norm.forward(x)));
  }
};

struct MixedModel : bmt::DistributedModule {
  bmt::TransformerBlockList<MixedBlock> blocks{1};
  MixedModel() {
    for (int i = 0; i < 2; ++i) blocks.append();
    register_module("blocks", blocks);
  }
};

// Every rank's gathered codes and scale are the whole f32 master weight's, quantized at once as the
// format's definition says: the scale agreed over the shard group is the whole tensor's, so the
// codes are the same at every world size (and a world of one quantizes its master the same way).
// The bias and the norm arrive as the master rounded to bf16.
TEST(Float8Gather, CodesAreTheWholeMasterWeightsAtEveryWorldSize) {
  MixedModel model;
  bmt::init_parameters(model);
  for (auto* s : bmt::sharded_storages(model)) s->hold_values_in_f32();  // as AdamW's master weights
  {
    bmt::NoGradGuard no_grad;
    for (int k = 0; k < 2; ++k) {  // a block list runs every block: run one block at a time
      const bmt::Tensor x = bmt::Tensor::from_floats(std::vector<float>(3 * kIn, 0.5f), {3, kIn}, bmt::DType::bf16);
      model.blocks[static_cast<std::size_t>(k)](x);
      const auto& seen = model.blocks[static_cast<std::size_t>(k)].block().seen;
      // Outside its block the weight has no codes.
      EXPECT_FALSE(bmt::gathered_float8(model.blocks[static_cast<std::size_t>(k)].block().proj.weight).codes.defined());
      bmt::ShardedStorage& s = model.blocks[static_cast<std::size_t>(k)].storage();
      ASSERT_TRUE(s.gathers_float8());
      const auto master = bmt_test::all_gather(s.shard());
      const std::string b = "blocks." + std::to_string(k) + ".";
      const auto entry = [&](const std::string& name) {
        for (const auto& e : s.entries())
          if (e.name == b + name)
            return std::vector<float>(master.begin() + e.offset, master.begin() + e.offset + e.numel);
        ADD_FAILURE() << "no entry " << b + name;
        return std::vector<float>();
      };
      const auto qp = float8_quantize(kE4M3, entry("proj.weight")), qb = float8_quantize(kE4M3, entry("back.weight"));
      EXPECT_EQ(seen.proj_codes, qp.codes) << "block " << k;
      EXPECT_EQ(seen.back_codes, qb.codes) << "block " << k;
      EXPECT_EQ(seen.proj_scale_inv, qp.scale_inv) << "block " << k;
      EXPECT_EQ(seen.back_scale_inv, qb.scale_inv) << "block " << k;
      EXPECT_EQ(seen.bias, rounded(entry("proj.bias"), bmt::DType::bf16)) << "block " << k;
      EXPECT_EQ(seen.norm_weight, rounded(entry("norm.weight"), bmt::DType::bf16)) << "block " << k;
    }
  }
}

// Two 64 x 64 FP8 weights and nothing else: a gather sends 1 byte an element in place of bf16's 2.
struct Fp8OnlyBlock : bmt::Module {
  bmt::nn::Linear a{64, 64, /*with_bias=*/false, bmt::DType::bf16}, b{64, 64, /*with_bias=*/false, bmt::DType::bf16};
  Fp8OnlyBlock() {
    register_module("a", a);
    register_module("b", b);
  }
  void set_fp8(bool on) {
    a.set_fp8(on);
    b.set_fp8(on);
  }
  bmt::Tensor forward(const bmt::Tensor& x) const { return b.forward(a.forward(x)); }
};

TEST(Float8Gather, MovesHalfTheBytesOfBf16) {
  struct M : bmt::DistributedModule {
    bmt::TransformerBlockList<Fp8OnlyBlock> blocks{1};
    M() {
      blocks.append();
      register_module("blocks", blocks);
    }
  } model;
  bmt::init_parameters(model);
  bmt::ShardedStorage& s = model.blocks[0].storage();
  const int n = static_cast<int>(s.total() / s.shard_size());
  const std::size_t bf16_wire = s.gather_wire_bytes(), bf16_buffer = s.gather_bytes();
  EXPECT_EQ(bf16_wire, static_cast<std::size_t>(s.shard_size()) * 2);
  EXPECT_EQ(s.gather_staging_bytes(), 0u);
  model.blocks[0].block().set_fp8(true);
  const std::size_t fp8_wire = s.gather_wire_bytes(), fp8_buffer = s.gather_bytes();
  // 8192 elements split evenly into aligned shards (1, 2 or 4 ranks): exactly half. Otherwise the
  // padding of the largest rank's chunk to the allocation alignment is all that is added.
  if (8192 % (128 * n) == 0) EXPECT_EQ(2 * fp8_wire, bf16_wire) << n << " ranks";
  EXPECT_LE(2 * fp8_wire, bf16_wire + 2 * bmt::kAllocationAlignment) << n << " ranks";
  EXPECT_GE(fp8_wire * static_cast<std::size_t>(n), 8192u);
  // The gathered buffer: the codes and one aligned unit for the two scales.
  EXPECT_EQ(fp8_buffer, 8192u + bmt::kAllocationAlignment);
  EXPECT_EQ(bf16_buffer, static_cast<std::size_t>(s.total()) * 2);  // the padded flat buffer
  EXPECT_EQ(s.gather_staging_bytes(), n > 1 ? fp8_wire * static_cast<std::size_t>(n) : 0u);
}

}  // namespace
