// bmt::nn layers against host references computed in double from their gathered parameters, in a
// DistributedModule (sharded over the ranks) and in a CheckpointBlock, at any world size.
#include <gtest/gtest.h>

#include <bmtrain/bmtrain.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

std::vector<double> linear_reference(const std::vector<float>& x, const std::vector<float>& w,
                                     const std::vector<float>& b, std::int64_t rows, std::int64_t in, std::int64_t out) {
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < in; ++i)
        s += static_cast<double>(x[static_cast<std::size_t>(r * in + i)]) * w[static_cast<std::size_t>(o * in + i)];
      y[static_cast<std::size_t>(r * out + o)] = s;
    }
  return y;
}

double gelu(double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " element " << i;
}

struct Layers : bmt::DistributedModule {
  bmt::nn::Linear proj{5, 7};
  bmt::nn::Linear no_bias{5, 3, /*with_bias=*/false, bmt::DType::f32, bmt::init::normal(0.5f)};
  bmt::nn::Embedding table{11, 5};
  bmt::nn::LayerNorm ln{5};
  bmt::nn::RMSNorm rms{5, bmt::DType::f32, 1e-5f};
  Layers() {
    register_module("proj", proj);
    register_module("no_bias", no_bias);
    register_module("table", table);
    register_module("ln", ln);
    register_module("rms", rms);
  }
};

TEST(Layers, LinearMatchesItsMathInEveryForm) {
  Layers m;
  bmt::init_parameters(m);
  const std::int64_t rows = 6;
  std::vector<float> xs(rows * 5), res(rows * 7);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.7f * static_cast<float>(i)) * 1.5f;
  for (std::size_t i = 0; i < res.size(); ++i) res[i] = std::cos(0.3f * static_cast<float>(i));
  const auto x = bmt::Tensor::from_floats(xs, {rows, 5});
  const auto w = m.proj.weight.gather().to_host_floats(), b = m.proj.bias.gather().to_host_floats();
  EXPECT_EQ(m.proj.in_features(), 5);
  EXPECT_EQ(m.proj.out_features(), 7);

  const auto plain = linear_reference(xs, w, b, rows, 5, 7);
  expect_near_all(m.proj.forward(x).to_host_floats(), plain, 1e-5, "forward");

  std::vector<double> gelu_after(plain.size()), onto(plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    gelu_after[i] = gelu(plain[i]);
    onto[i] = res[i] + plain[i];
  }
  expect_near_all(m.proj.forward_gelu(x).to_host_floats(), gelu_after, 1e-5, "forward_gelu");
  expect_near_all(m.proj.forward_onto(bmt::Tensor::from_floats(res, {rows, 7}), x).to_host_floats(), onto, 1e-5,
                  "forward_onto");

  std::vector<float> gx(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) gx[i] = static_cast<float>(gelu(xs[i]));
  expect_near_all(m.proj.gelu_forward(x).to_host_floats(), linear_reference(gx, w, b, rows, 5, 7), 1e-5,
                  "gelu_forward");

  EXPECT_FALSE(m.no_bias.bias.defined());
  const auto w2 = m.no_bias.weight.gather().to_host_floats();
  expect_near_all(m.no_bias.forward(x).to_host_floats(), linear_reference(xs, w2, {}, rows, 5, 3), 1e-5, "no bias");
}

// With set_fp8, every form computes its product with float8_linear (whose numerics ops_float8_linear
// checks): the same values as float8_linear and gelu written out, and not those of linear.
TEST(Layers, Fp8LinearRoutesEveryFormThroughFloat8Linear) {
  Layers m;
  bmt::init_parameters(m);
  EXPECT_FALSE(m.proj.fp8());
  m.proj.set_fp8(true);
  EXPECT_TRUE(m.proj.fp8());
  std::vector<float> xs(6 * 5), res(6 * 7);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.7f * static_cast<float>(i)) * 1.5f;
  for (std::size_t i = 0; i < res.size(); ++i) res[i] = std::cos(0.3f * static_cast<float>(i));
  const auto x = bmt::Tensor::from_floats(xs, {6, 5}), r = bmt::Tensor::from_floats(res, {6, 7});
  const bmt::Tensor w = m.proj.weight.gather(), b = m.proj.bias.gather();
  const auto same = [](const bmt::Tensor& got, const bmt::Tensor& want, const char* what) {
    EXPECT_EQ(got.to_host_floats(), want.to_host_floats()) << what;
  };
  same(m.proj.forward(x), bmt::float8_linear(x, w, b), "forward");
  same(m.proj.forward_gelu(x), bmt::gelu(bmt::float8_linear(x, w, b)), "forward_gelu");
  same(m.proj.gelu_forward(x), bmt::float8_linear(bmt::gelu(x), w, b), "gelu_forward");
  same(m.proj.forward_onto(r, x), bmt::residual_add(r, bmt::float8_linear(x, w), b), "forward_onto");
  EXPECT_NE(m.proj.forward(x).to_host_floats(), bmt::linear(x, w, b).to_host_floats());
}

TEST(Layers, DefaultLinearInitHasTheStatedSpread) {
  // N(0, 1/in): over a 256 x 1024 weight the sample variance is within a few percent of 1/1024.
  struct Wide : bmt::DistributedModule {
    bmt::nn::Linear l{1024, 256};
    Wide() { register_module("l", l); }
  } m;
  bmt::init_parameters(m);
  const auto w = m.l.weight.gather().to_host_floats();
  double s2 = 0;
  for (float v : w) s2 += static_cast<double>(v) * v;
  EXPECT_NEAR(s2 / static_cast<double>(w.size()) * 1024.0, 1.0, 0.05);
  for (float v : m.l.bias.gather().to_host_floats()) EXPECT_EQ(v, 0.0f);
}

TEST(Layers, EmbeddingAndNormsMatchTheirMath) {
  Layers m;
  bmt::init_parameters(m);
  const auto table = m.table.weight.gather().to_host_floats();
  const std::vector<std::int32_t> ids = {3, 0, 10, 3};
  const auto got = m.table.forward(bmt::Tensor::from_host(ids.data(), {2, 2}, bmt::DType::i32));
  ASSERT_EQ(got.shape(), (bmt::Shape{2, 2, 5}));
  std::vector<double> want;
  for (auto id : ids)
    for (int c = 0; c < 5; ++c) want.push_back(table[static_cast<std::size_t>(id * 5 + c)]);
  expect_near_all(got.to_host_floats(), want, 0.0, "embedding");

  std::vector<float> xs = {1, 2, 3, 4, 6, -1, 0.5f, 0.25f, 2, -3};
  const auto x = bmt::Tensor::from_floats(xs, {2, 5});
  std::vector<double> ln, rms;
  for (int r = 0; r < 2; ++r) {
    double mean = 0, sq = 0;
    for (int c = 0; c < 5; ++c) mean += xs[static_cast<std::size_t>(r * 5 + c)] / 5.0;
    for (int c = 0; c < 5; ++c) {
      const double d = xs[static_cast<std::size_t>(r * 5 + c)] - mean;
      sq += d * d / 5.0;
    }
    double ms = 0;
    for (int c = 0; c < 5; ++c) ms += std::pow(xs[static_cast<std::size_t>(r * 5 + c)], 2) / 5.0;
    for (int c = 0; c < 5; ++c) {
      const double v = xs[static_cast<std::size_t>(r * 5 + c)];
      ln.push_back((v - mean) / std::sqrt(sq + 1e-5));
      rms.push_back(v / std::sqrt(ms + 1e-5));
    }
  }
  expect_near_all(m.ln.forward(x).to_host_floats(), ln, 1e-5, "layer norm");
  expect_near_all(m.rms.forward(x).to_host_floats(), rms, 1e-5, "rms norm");
}

// Blocks built from the layers, in a ModuleList of CheckpointBlocks: names by index, values as
// the layers compute them outside a block.
struct Mlp : bmt::Module {
  bmt::nn::LayerNorm norm{8};
  bmt::nn::Linear up{8, 16}, down{16, 8};
  Mlp() {
    register_module("norm", norm);
    register_module("up", up);
    register_module("down", down);
  }
  bmt::Tensor forward(const bmt::Tensor& x) const { return down.forward_onto(x, up.forward_gelu(norm.forward(x))); }
};

template <class Item>
struct Stack : bmt::DistributedModule {
  bmt::nn::ModuleList<Item> blocks;
  Stack() {
    for (int i = 0; i < 3; ++i) blocks.append();
    register_module("blocks", blocks);
  }
};

// The stack of Mlps evaluated on the host from the plain stack's gathered parameters.
std::vector<double> stack_reference(Stack<Mlp>& plain, std::vector<float> x) {
  for (auto& inner : plain.blocks) {
    const auto g = inner.norm.weight.gather().to_host_floats(), be = inner.norm.bias.gather().to_host_floats();
    const auto wu = inner.up.weight.gather().to_host_floats(), bu = inner.up.bias.gather().to_host_floats();
    const auto wd = inner.down.weight.gather().to_host_floats(), bd = inner.down.bias.gather().to_host_floats();
    std::vector<float> n(x.size());
    for (int r = 0; r < 4; ++r) {
      double mean = 0, var = 0;
      for (int c = 0; c < 8; ++c) mean += x[static_cast<std::size_t>(r * 8 + c)] / 8.0;
      for (int c = 0; c < 8; ++c) var += std::pow(x[static_cast<std::size_t>(r * 8 + c)] - mean, 2) / 8.0;
      for (int c = 0; c < 8; ++c)
        n[static_cast<std::size_t>(r * 8 + c)] = static_cast<float>(
            (x[static_cast<std::size_t>(r * 8 + c)] - mean) / std::sqrt(var + 1e-5) * g[c] + be[c]);
    }
    const auto h = linear_reference(n, wu, bu, 4, 8, 16);
    std::vector<float> gh(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) gh[i] = static_cast<float>(gelu(h[i]));
    const auto d = linear_reference(gh, wd, bd, 4, 16, 8);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(x[i] + d[i]);
  }
  return std::vector<double>(x.begin(), x.end());
}

// A ModuleList names its modules by index; a list of CheckpointBlocks (gathered, run and freed by
// ZeRO-3) and a list of the same plain modules have the same names, so the same initial values,
// and compute the same as the host.
TEST(Layers, ModuleListOfCheckpointBlocksNamesAndRunsItsModules) {
  Stack<bmt::CheckpointBlock<Mlp>> blocks;
  Stack<Mlp> plain;
  bmt::init_parameters(blocks);
  bmt::init_parameters(plain);
  EXPECT_EQ(blocks.blocks.size(), 3u);
  std::vector<std::string> names, plain_names;
  for (const auto& [name, p] : blocks.named_parameters()) names.push_back(name);
  for (const auto& [name, p] : plain.named_parameters()) plain_names.push_back(name);
  EXPECT_EQ(names, plain_names);
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.2.up.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.0.norm.bias"), names.end());

  std::vector<float> xs(4 * 8);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i));
  const auto want = stack_reference(plain, xs);
  bmt::Tensor x = bmt::Tensor::from_floats(xs, {4, 8}), y = x;
  for (auto& block : blocks.blocks) x = block(x);
  for (const auto& module : plain.blocks) y = module.forward(y);
  expect_near_all(x.to_host_floats(), want, 1e-4, "blocks");
  expect_near_all(y.to_host_floats(), want, 1e-4, "plain modules");
}

TEST(Layers, SizesThatAreNotPositiveAreErrors) {
  try {
    bmt::nn::Linear bad(0, 4);
    FAIL() << "expected an error";
  } catch (const bmt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nn::Linear: expected a positive input size, found 0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(bmt::nn::Embedding(5, -1), bmt::Error);
  EXPECT_THROW(bmt::nn::LayerNorm(0), bmt::Error);
  EXPECT_THROW(bmt::nn::RMSNorm(0), bmt::Error);
}

}  // namespace
