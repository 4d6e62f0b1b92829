// A program built against an installed bmtrain: a tiny ZeRO-3 model (one parameter outside blocks,
// one CheckpointBlock MLP), one forward and backward, checked against a float64 host reference.
// It prints a checksum line that must not depend on the world size (every rank feeds the same
// input, and gradients are averaged over ranks). Exit code 0 only if every value matched.
#include <bmtrain/bmtrain.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t kRows = 4, kD = 8, kH = 16;

struct Mlp : bmt::Module {
  bmt::DistributedParameter w1{{kH, kD}, bmt::init::normal(0.0f, 0.3f)};
  bmt::DistributedParameter b1{{kH}, bmt::init::normal(0.1f)};
  bmt::DistributedParameter w2{{kD, kH}, bmt::init::normal(0.0f, 0.3f)};
  bmt::DistributedParameter b2{{kD}, bmt::init::normal(0.1f)};
  Mlp() {
    register_parameter("w1", w1);
    register_parameter("b1", b1);
    register_parameter("w2", w2);
    register_parameter("b2", b2);
  }
  // x + W2 silu(W1 x + b1) + b2
  bmt::Tensor forward(const bmt::Tensor& x) {
    return bmt::add(x, bmt::linear(bmt::silu(bmt::linear(x, w1, b1)), w2, b2));
  }
};

struct Model : bmt::DistributedModule {
  bmt::DistributedParameter scale{{kD}, bmt::init::normal(1.0f, 0.2f)};
  bmt::CheckpointBlock<Mlp> block;
  Model() {
    register_parameter("scale", scale);
    register_module("block", block);
  }
  bmt::Tensor forward(const bmt::Tensor& x) { return block(bmt::mul(x, scale.gather())); }
};

std::vector<float> gather_all(const bmt::Tensor& shard) {
  auto& ctx = bmt::context();
  bmt::Tensor full = bmt::Tensor::empty({shard.numel() * bmt::world_size()}, shard.dtype());
  ctx.world_comm().all_gather(shard.data(), full.data(), static_cast<std::size_t>(shard.numel()), shard.dtype(),
                              ctx.compute_stream());
  ctx.compute_stream().synchronize();
  return full.to_host_floats();
}

struct Gathered {
  std::map<std::string, std::vector<float>> value, grad;
};

Gathered gather_parameters(Model& model) {
  Gathered g;
  for (auto* s : bmt::sharded_storages(model)) {
    s->settle();
    const auto v = gather_all(s->shard());
    const auto d = gather_all(s->grad_shard());
    for (const auto& e : s->entries()) {
      g.value[e.name].assign(v.begin() + e.offset, v.begin() + e.offset + e.numel);
      g.grad[e.name].assign(d.begin() + e.offset, d.begin() + e.offset + e.numel);
    }
  }
  return g;
}

// Loss sum(y^2) and its parameter gradients, in float64.
struct Reference {
  double loss = 0;
  std::map<std::string, std::vector<double>> grad;
};

Reference reference(const std::vector<float>& x, std::map<std::string, std::vector<float>>& p) {
  const auto &scale = p["scale"], &w1 = p["block.w1"], &b1 = p["block.b1"], &w2 = p["block.w2"], &b2 = p["block.b2"];
  auto sigmoid = [](double z) { return 1.0 / (1.0 + std::exp(-z)); };
  std::vector<double> xs(kRows * kD), z(kRows * kH), s(kRows * kH), y(kRows * kD);
  for (int i = 0; i < kRows; ++i) {
    for (int d = 0; d < kD; ++d) xs[i * kD + d] = double(x[i * kD + d]) * scale[d];
    for (int h = 0; h < kH; ++h) {
      double acc = b1[h];
      for (int d = 0; d < kD; ++d) acc += double(w1[h * kD + d]) * xs[i * kD + d];
      z[i * kH + h] = acc;
      s[i * kH + h] = acc * sigmoid(acc);
    }
    for (int d = 0; d < kD; ++d) {
      double acc = b2[d] + xs[i * kD + d];
      for (int h = 0; h < kH; ++h) acc += double(w2[d * kH + h]) * s[i * kH + h];
      y[i * kD + d] = acc;
    }
  }
  Reference r;
  auto& gscale = r.grad["scale"] = std::vector<double>(kD, 0.0);
  auto& gw1 = r.grad["block.w1"] = std::vector<double>(kH * kD, 0.0);
  auto& gb1 = r.grad["block.b1"] = std::vector<double>(kH, 0.0);
  auto& gw2 = r.grad["block.w2"] = std::vector<double>(kD * kH, 0.0);
  auto& gb2 = r.grad["block.b2"] = std::vector<double>(kD, 0.0);
  for (int i = 0; i < kRows; ++i) {
    std::vector<double> dy(kD), dz(kH), dxs(kD);
    for (int d = 0; d < kD; ++d) {
      r.loss += y[i * kD + d] * y[i * kD + d];
      dy[d] = 2 * y[i * kD + d];
      gb2[d] += dy[d];
      for (int h = 0; h < kH; ++h) gw2[d * kH + h] += dy[d] * s[i * kH + h];
    }
    for (int h = 0; h < kH; ++h) {
      double ds = 0;
      for (int d = 0; d < kD; ++d) ds += dy[d] * w2[d * kH + h];
      const double sg = sigmoid(z[i * kH + h]);
      dz[h] = ds * sg * (1 + z[i * kH + h] * (1 - sg));
      gb1[h] += dz[h];
      for (int d = 0; d < kD; ++d) gw1[h * kD + d] += dz[h] * xs[i * kD + d];
    }
    for (int d = 0; d < kD; ++d) {
      dxs[d] = dy[d];
      for (int h = 0; h < kH; ++h) dxs[d] += dz[h] * w1[h * kD + d];
      gscale[d] += dxs[d] * x[i * kD + d];
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bmt::InitOptions options;
  options.seed = 2024;
  bmt::init_distributed(&argc, &argv, options);
  int failures = 0;
  {
    Model model;
    bmt::init_parameters(model);
    for (auto* s : bmt::sharded_storages(model)) s->zero_grad();

    std::vector<float> x(kRows * kD);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i) + 0.5f);
    const bmt::Tensor y = model.forward(bmt::Tensor::from_floats(x, {kRows, kD}));
    const bmt::Tensor loss = bmt::sum(bmt::mul(y, y));
    loss.backward();
    const float loss_value = loss.to_host_floats()[0];

    Gathered got = gather_parameters(model);
    const Reference ref = reference(x, got.value);
    auto check = [&](const std::string& what, double value, double expected) {
      if (std::abs(value - expected) <= 1e-4 * std::max(1.0, std::abs(expected))) return;
      if (++failures <= 10)
        bmt::warn(what, ": expected ", expected, " (float64 reference), found ", value);
    };
    check("loss", loss_value, ref.loss);
    double grad_l1 = 0;
    for (const auto& [name, expected] : ref.grad) {
      const auto& g = got.grad[name];
      if (g.size() != expected.size()) {
        ++failures;
        bmt::warn(name, ": expected ", expected.size(), " gradient elements, found ", g.size());
        continue;
      }
      for (std::size_t i = 0; i < g.size(); ++i) {
        check(name + ".grad[" + std::to_string(i) + "]", g[i], expected[i]);
        grad_l1 += std::abs(g[i]);
      }
    }
    char line[160];
    std::snprintf(line, sizeof line, "checksum loss=%.5e grad_l1=%.5e", loss_value, grad_l1);
    bmt::print_rank("downstream: world size ", bmt::world_size(), ", ", failures, " mismatches");
    bmt::print_rank(line);
  }
  bmt::finalize();
  return failures == 0 ? 0 : 1;
}
