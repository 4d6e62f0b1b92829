#pragma once
// Gradient checks against central finite differences, for op tests.
//
// The op under test maps inputs to one output tensor y. The check reduces y to a scalar
// L = sum(y * w) with fixed random weights w, runs backward, and compares each input element's
// gradient with (L(x + h) - L(x - h)) / 2h computed in f32 on the host-visible data. With f32
// arithmetic the tolerance is stated per call: rtol on the gradient's scale plus atol.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::testing {

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline Tensor random_tensor(const Shape& shape, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f,
                            DType dtype = DType::f32) {
  return Tensor::from_floats(random_floats(static_cast<std::size_t>(numel_of(shape)), seed, lo, hi), shape, dtype);
}

struct GradcheckOptions {
  float step = 1e-2f;   // finite-difference step h
  float rtol = 2e-2f;   // relative to max(|analytic|, |numeric|)
  float atol = 2e-3f;
  std::vector<bool> check;  // which inputs to check (default: every floating input)
};

// Checks d sum(fn(inputs) * w) / d inputs against finite differences; reports every mismatch.
inline void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, std::vector<Tensor> inputs,
                      const GradcheckOptions& opt = {}) {
  auto wants = [&](std::size_t i) {
    return is_floating(inputs[i].dtype()) && (opt.check.empty() || opt.check[i]);
  };
  // Analytic gradients.
  std::vector<Tensor> leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor leaf = inputs[i].detach();
    if (wants(i)) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  Tensor y = fn(leaves);
  const auto weights = random_floats(static_cast<std::size_t>(y.numel()), 4242u);
  Tensor w = Tensor::from_floats(weights, y.shape(), y.dtype());
  autograd::backward({y}, {w});

  auto loss = [&](const std::vector<Tensor>& in) {
    NoGradGuard no_grad;
    const auto out = fn(in).to_host_floats();
    double s = 0;
    for (std::size_t k = 0; k < out.size(); ++k) s += static_cast<double>(out[k]) * weights[k];
    return s;
  };

  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!wants(i)) continue;
    ASSERT_TRUE(leaves[i].grad().defined()) << "input " << i << " received no gradient";
    const auto analytic = leaves[i].grad().to_host_floats();
    auto values = inputs[i].to_host_floats();
    int reported = 0;
    for (std::size_t k = 0; k < values.size(); ++k) {
      std::vector<Tensor> probe = inputs;
      const float x0 = values[k];
      values[k] = x0 + opt.step;
      probe[i] = Tensor::from_floats(values, inputs[i].shape(), inputs[i].dtype());
      const double up = loss(probe);
      values[k] = x0 - opt.step;
      probe[i] = Tensor::from_floats(values, inputs[i].shape(), inputs[i].dtype());
      const double down = loss(probe);
      values[k] = x0;
      const double numeric = (up - down) / (2.0 * opt.step);
      const double a = analytic[k];
      const double tol = opt.atol + opt.rtol * std::max(std::fabs(a), std::fabs(numeric));
      if (std::fabs(a - numeric) > tol && reported++ < 5)
        ADD_FAILURE() << "input " << i << " element " << k << ": analytic " << a << ", numeric " << numeric
                      << " (tolerance " << tol << ")";
    }
  }
}

}  // namespace bmt::testing
