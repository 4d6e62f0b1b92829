#pragma once
// A small block for ZeRO tests whose math is easy to reproduce on the host:
//   y = tanh(alpha * x * w + b)  row-wise over x [rows, D], parameters w [D] and b [D].
// The op is a custom Function computed on the host, so these tests exercise the ZeRO machinery
// (gathers, recompute, reduce-scatter, ordering) independently of the library's kernels.
#include <cmath>
#include <vector>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/nn/module.hpp"

namespace toy {

class TanhAffine final : public bmt::autograd::Function {
 public:
  explicit TanhAffine(float alpha) : alpha_(alpha) {}
  std::string name() const override { return "TanhAffine"; }
  std::vector<bmt::Tensor> forward(const std::vector<bmt::Tensor>& in) override {
    x_ = in[0].detach();
    w_ = in[1].detach();
    b_ = in[2].detach();
    const auto x = x_.to_host_floats(), w = w_.to_host_floats(), b = b_.to_host_floats();
    const std::size_t d = w.size();
    std::vector<float> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = std::tanh(alpha_ * x[i] * w[i % d] + b[i % d]);
    return {bmt::Tensor::from_floats(y, x_.shape())};
  }
  std::vector<bmt::Tensor> backward(const std::vector<bmt::Tensor>& g) override {
    const auto x = x_.to_host_floats(), w = w_.to_host_floats(), b = b_.to_host_floats(), gy = g[0].to_host_floats();
    const std::size_t d = w.size();
    std::vector<float> gx(x.size()), gw(d, 0.0f), gb(d, 0.0f);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float t = std::tanh(alpha_ * x[i] * w[i % d] + b[i % d]);
      const float dz = gy[i] * (1 - t * t);
      gx[i] = dz * alpha_ * w[i % d];
      gw[i % d] += dz * alpha_ * x[i];
      gb[i % d] += dz;
    }
    return {bmt::Tensor::from_floats(gx, x_.shape()), bmt::Tensor::from_floats(gw, w_.shape()),
            bmt::Tensor::from_floats(gb, b_.shape())};
  }

 private:
  float alpha_;
  bmt::Tensor x_, w_, b_;
};

// sum of all elements, on the host.
class SumAll final : public bmt::autograd::Function {
 public:
  std::string name() const override { return "SumAll"; }
  std::vector<bmt::Tensor> forward(const std::vector<bmt::Tensor>& in) override {
    shape_ = in[0].shape();
    double s = 0;
    for (float v : in[0].to_host_floats()) s += v;
    return {bmt::Tensor::from_floats({static_cast<float>(s)}, {1})};
  }
  std::vector<bmt::Tensor> backward(const std::vector<bmt::Tensor>& g) override {
    const float gv = g[0].to_host_floats()[0];
    return {bmt::Tensor::from_floats(std::vector<float>(static_cast<std::size_t>(bmt::numel_of(shape_)), gv), shape_)};
  }

 private:
  bmt::Shape shape_;
};

struct Block : bmt::Module {
  bmt::DistributedParameter w, b;
  explicit Block(std::int64_t d, bmt::DType dtype = bmt::DType::f32)
      : w({d}, dtype, bmt::init::normal(1.0f, 0.3f)), b({d}, dtype, bmt::init::normal(0.1f)) {
    register_parameter("w", w);
    register_parameter("b", b);
  }
  bmt::Tensor forward(const bmt::Tensor& x, float alpha) {
    return bmt::autograd::call<TanhAffine>({x, w, b}, alpha)[0];
  }
};

// Host reference of a stack of blocks: forward values and parameter gradients of sum(y * gy).
struct Reference {
  std::vector<std::vector<float>> w, b;  // per block
  float alpha;

  std::vector<float> forward(std::vector<float> x, std::vector<std::vector<float>>* saved = nullptr) const {
    for (std::size_t k = 0; k < w.size(); ++k) {
      if (saved) saved->push_back(x);
      const std::size_t d = w[k].size();
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::tanh(alpha * x[i] * w[k][i % d] + b[k][i % d]);
    }
    return x;
  }
  // Adds d/dw and d/db of sum(forward(x) * gy) to gw, gb; returns d/dx.
  std::vector<float> backward(const std::vector<float>& x0, std::vector<float> g, std::vector<std::vector<float>>& gw,
                              std::vector<std::vector<float>>& gb) const {
    std::vector<std::vector<float>> saved;
    forward(x0, &saved);
    for (std::size_t k = w.size(); k-- > 0;) {
      const auto& x = saved[k];
      const std::size_t d = w[k].size();
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float t = std::tanh(alpha * x[i] * w[k][i % d] + b[k][i % d]);
        const float dz = g[i] * (1 - t * t);
        gw[k][i % d] += dz * alpha * x[i];
        gb[k][i % d] += dz;
        g[i] = dz * alpha * w[k][i % d];
      }
    }
    return g;
  }
};

}  // namespace toy
