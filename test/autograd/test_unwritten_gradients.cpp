// Gradient buffers lent as holding no values yet (TensorImpl::grad_unwritten: a ZeRO block's
// buffer at the start of its backward, never zeroed). Here they are full of NaN: every way a
// gradient reaches a leaf must write over such a buffer (a GEMM with beta 0, column sums stored,
// a returned gradient copied) or zero it before adding, so the results equal the gradients the
// same graph gives leaves without buffers (to f32 rounding: on CUDA a bias without a buffer is
// summed by another kernel), in place, and the buffers count as written afterwards: a second
// backward adds, doubling them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/ops/ops.hpp"
#include "sample_tensor.hpp"

namespace bmt {
namespace {

using Graph = std::function<Tensor(const std::vector<Tensor>&)>;

// got = factor * want to f32 rounding (NaN fails).
void expect_scaled(const Tensor& got, const Tensor& want, float factor, const std::string& what) {
  const std::vector<float> g = got.to_host_floats(), w = want.to_host_floats();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (std::size_t k = 0; k < g.size(); ++k)
    ASSERT_NEAR(g[k], factor * w[k], 1e-6 * (1.0 + std::fabs(factor * w[k]))) << what << " [" << k << "]";
}

std::vector<Tensor> make_leaves(const std::vector<Shape>& shapes) {
  std::vector<Tensor> leaves;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    leaves.push_back(sample(shapes[i], static_cast<std::uint32_t>(10 + i)).set_requires_grad(true));
  return leaves;
}

// The graph's output gradient: a fixed sample of its shape.
void run_backward(const Graph& f, const std::vector<Tensor>& leaves) {
  const Tensor y = f(leaves);
  y.backward(sample(y.shape(), 99));
}

void check_writes_over_unwritten_buffers(const std::string& what, const std::vector<Shape>& shapes, const Graph& f) {
  SCOPED_TRACE(what);
  const std::vector<Tensor> fresh = make_leaves(shapes);
  run_backward(f, fresh);

  std::vector<Tensor> lent = make_leaves(shapes);
  std::vector<const void*> buffers;
  for (Tensor& l : lent) {
    l.set_grad(full(l.shape(), std::nanf("")));
    l.impl()->grad_unwritten = true;
    buffers.push_back(l.grad().data());
  }
  run_backward(f, lent);
  for (std::size_t i = 0; i < lent.size(); ++i) {
    EXPECT_EQ(lent[i].grad().data(), buffers[i]) << "leaf " << i << ": in its buffer";
    EXPECT_FALSE(lent[i].impl()->grad_unwritten) << "leaf " << i;
    expect_scaled(lent[i].grad(), fresh[i].grad(), 1.0f, "leaf " + std::to_string(i));
  }

  run_backward(f, lent);  // the buffers hold values now: added to
  for (std::size_t i = 0; i < lent.size(); ++i)
    expect_scaled(lent[i].grad(), fresh[i].grad(), 2.0f, "leaf " + std::to_string(i) + ", second backward");
}

// A custom op that adds its gradient into leaf_gradient(i) as it is handed out (not claiming):
// y = 2 x, dx added into x's buffer, nothing returned.
struct AddsIntoTheLeafsBuffer : autograd::Function {
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {scale(in[0].detach(), 2.0f)}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const Tensor buffer = leaf_gradient(0);
    if (!buffer.defined()) return {scale(g[0], 2.0f)};
    add_(buffer, g[0], 2.0f);
    return {Tensor()};
  }
  std::string name() const override { return "AddsIntoTheLeafsBuffer"; }
};

// leaf_gradient(i) zeroes a buffer that holds no values before handing it out.
TEST(UnwrittenGradients, PlainLeafGradientIsZeroedForAnOpThatAdds) {
  check_writes_over_unwritten_buffers("custom op", {{5, 4}}, [](const std::vector<Tensor>& l) {
    return autograd::call<AddsIntoTheLeafsBuffer>({l[0]})[0];
  });
}

// The weight's GEMM (beta 0), the bias's column sums and the input's gradient (zeroed, then the
// dx GEMM adds into it with beta 1).
TEST(UnwrittenGradients, Linear) {
  check_writes_over_unwritten_buffers("linear", {{300, 8}, {6, 8}, {6}},
                                      [](const std::vector<Tensor>& l) { return linear(l[0], l[1], l[2]); });
}

// The norms' column sums, stored for both parameters, and the input's gradient.
TEST(UnwrittenGradients, Norms) {
  check_writes_over_unwritten_buffers("layer_norm", {{300, 8}, {8}, {8}},
                                      [](const std::vector<Tensor>& l) { return layer_norm(l[0], l[1], l[2]); });
  check_writes_over_unwritten_buffers("rms_norm", {{300, 8}, {8}},
                                      [](const std::vector<Tensor>& l) { return rms_norm(l[0], l[1]); });
}

// A residual add's bias (column sums), and gradients returned to the graph (copied over).
TEST(UnwrittenGradients, ResidualAddAndReturnedGradients) {
  check_writes_over_unwritten_buffers("residual_add", {{300, 8}, {300, 8}, {8}},
                                      [](const std::vector<Tensor>& l) { return residual_add(l[0], l[1], l[2]); });
  check_writes_over_unwritten_buffers("mul", {{5, 4}, {5, 4}},
                                      [](const std::vector<Tensor>& l) { return mul(l[0], l[1]); });
}

// The chunked head: its weight's f32 buffer, summed over chunks, written by the first.
TEST(UnwrittenGradients, LinearCrossEntropy) {
  const Tensor targets = Tensor::from_ints({1, 3, 0, 2, 4, 1, 2}, {7});
  check_writes_over_unwritten_buffers("linear_cross_entropy", {{7, 8}, {5, 8}}, [&](const std::vector<Tensor>& l) {
    return linear_cross_entropy(l[0], l[1], targets, 3);
  });
}

}  // namespace
}  // namespace bmt
