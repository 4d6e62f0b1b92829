#pragma once
// Comparing op results with float64 host references, and running an op's backward for tests
// that compare gradients across dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::testing {

// Every element within atol + rtol * |expected|; reports the first few that are not.
inline void expect_close(const std::vector<float>& actual, const std::vector<double>& expected, double atol,
                         double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what << ": element count";
  int reported = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double tol = atol + rtol * std::fabs(expected[i]);
    const double err = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    if (!(err <= tol) && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected " << expected[i]
                    << " (tolerance " << tol << ")";
  }
}

inline void expect_close(const std::vector<float>& actual, const std::vector<float>& expected, double atol,
                         double rtol, const std::string& what) {
  expect_close(actual, std::vector<double>(expected.begin(), expected.end()), atol, rtol, what);
}

// The values as a tensor of `dtype` stores them.
inline std::vector<float> rounded_to(const std::vector<float>& v, DType dtype) {
  return Tensor::from_floats(v, {static_cast<std::int64_t>(v.size())}, dtype).to_host_floats();
}

// Runs fn on leaves made from `inputs` (those marked in `wants` require grad), backpropagates the
// weights w (the output's shape, as floats) and returns the output and each input's gradient as
// floats (empty where not wanted).
struct ForwardBackward {
  std::vector<float> output;
  std::vector<std::vector<float>> grads;
};

inline ForwardBackward forward_backward(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                        const std::vector<Tensor>& inputs, const std::vector<bool>& wants,
                                        const std::vector<float>& w) {
  std::vector<Tensor> leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor leaf = inputs[i].defined() ? inputs[i].detach() : Tensor();
    if (leaf.defined() && wants[i]) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  Tensor y = fn(leaves);
  ForwardBackward r;
  r.output = y.to_host_floats();
  autograd::backward({y}, {Tensor::from_floats(w, y.shape(), y.dtype())});
  for (std::size_t i = 0; i < inputs.size(); ++i)
    r.grads.push_back(leaves[i].defined() && wants[i] && leaves[i].grad().defined() ? leaves[i].grad().to_host_floats()
                                                                                     : std::vector<float>());
  return r;
}

}  // namespace bmt::testing
