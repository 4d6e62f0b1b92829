// Gradients summed where they are made: a norm or a linear whose input already got a gradient from
// another consumer (a residual branch) adds its own into that buffer, when nothing but the backward
// pass holds it. The results must equal the separate sum exactly (f32, where adding in the kernel
// and adding afterwards are the same float operation), a handed-over gradient must end up as the
// leaf's .grad with no copy, and a gradient that the op itself still reads must not be written.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "sample_tensor.hpp"

namespace bmt {
namespace {

struct Leaves {
  Tensor x, w, b, W;
};

Leaves make_leaves() {
  return {sample({6, 8}, 1).set_requires_grad(true), sample({8}, 2).set_requires_grad(true),
          sample({8}, 3).set_requires_grad(true), sample({8, 8}, 4).set_requires_grad(true)};
}

// Each leaf's gradient (empty for a leaf the block does not use).
std::vector<std::vector<float>> grads_of(const Leaves& l) {
  std::vector<std::vector<float>> out;
  for (const Tensor* t : {&l.x, &l.w, &l.b, &l.W})
    out.push_back(t->grad().defined() ? t->grad().to_host_floats() : std::vector<float>{});
  return out;
}

using Block = std::function<Tensor(const Leaves&)>;

// Backward through block(leaves) with the output gradient held by the caller (summed the usual
// way) and handed over (summed in place); returns both sets of gradients, whether the handed-over
// buffer became x.grad, and how many buffers each backward allocated.
struct Runs {
  std::vector<std::vector<float>> held, handed_over;
  bool became_x_grad = false;
  std::uint64_t held_allocations = 0, handed_over_allocations = 0;
};

Runs run_both(const Block& block) {
  Runs r;
  {
    const Leaves l = make_leaves();
    const Tensor g = sample({6, 8}, 5);
    const Tensor y = block(l);
    const auto before = memory_stats().allocations;
    autograd::backward({y}, {g});
    r.held_allocations = memory_stats().allocations - before;
    r.held = grads_of(l);
    EXPECT_EQ(g.to_host_floats(), sample({6, 8}, 5).to_host_floats()) << "the caller's gradient is left as it was";
  }
  const Leaves l = make_leaves();
  Tensor g = sample({6, 8}, 5);
  const void* buffer = g.data();
  std::vector<Tensor> grads;
  grads.push_back(std::move(g));
  const Tensor y = block(l);
  const auto before = memory_stats().allocations;
  autograd::backward({y}, std::move(grads));
  r.handed_over_allocations = memory_stats().allocations - before;
  r.handed_over = grads_of(l);
  r.became_x_grad = l.x.grad().data() == buffer;
  return r;
}

// x + linear(layer_norm(x)) for a leaf x: the residual's gradient waits in x's one sink, the
// norm's backward adds its input gradient into it, and x.grad takes the sum without a copy.
TEST(PartialGradients, NormAddsIntoALeafsGradient) {
  const Runs r = run_both([](const Leaves& l) { return add(l.x, linear(layer_norm(l.x, l.w, l.b), l.W)); });
  EXPECT_EQ(r.handed_over, r.held);
  EXPECT_TRUE(r.became_x_grad) << "the handed-over gradient, summed in place, is x.grad";

  const Runs rms = run_both([](const Leaves& l) { return add(l.x, linear(rms_norm(l.x, l.w), l.W)); });
  EXPECT_EQ(rms.handed_over, rms.held);
  EXPECT_TRUE(rms.became_x_grad);
}

// h + linear(layer_norm(h)) for h = x * 2 inside the graph (a transformer block's middle residual):
// the residual's gradient waits in the pass for h's producer, and the norm adds into it there, so
// the backward allocates two buffers less (the norm's input gradient and the sum) than when the
// caller's reference forces a separate sum.
TEST(PartialGradients, NormAddsIntoAGradientWaitingInThePass) {
  const auto block = [](const Leaves& l) {
    const Tensor h = scale(l.x, 2.0f);
    return add(h, linear(layer_norm(h, l.w, l.b), l.W));
  };
  const Runs r = run_both(block);
  EXPECT_EQ(r.handed_over, r.held);
  EXPECT_EQ(r.handed_over_allocations + 2, r.held_allocations);
}

// x + layer_norm(x): the residual's gradient is also LayerNorm's upstream gradient, which its
// backward reads; it must not be written while read, so the sum is made apart.
TEST(PartialGradients, AGradientTheOpReadsIsNotWritten) {
  const Runs r = run_both([](const Leaves& l) { return add(l.x, layer_norm(l.x, l.w, l.b)); });
  EXPECT_EQ(r.handed_over, r.held);
  EXPECT_FALSE(r.became_x_grad);
}

// linear(x, W1) + linear(x, W2): the second linear's GEMM adds x's gradient into the first's
// (beta = 1). Against dx = g (W1 + W2), summed in double.
TEST(PartialGradients, LinearAddsIntoTheOtherConsumersGradient) {
  const Tensor x = sample({6, 8}, 1).set_requires_grad(true);
  const Tensor w1 = sample({5, 8}, 2).set_requires_grad(true), w2 = sample({5, 8}, 3).set_requires_grad(true);
  const Tensor g = sample({6, 5}, 4);
  autograd::backward({add(linear(x, w1), linear(x, w2))}, {g});
  const auto gv = g.to_host_floats(), a = w1.to_host_floats(), b = w2.to_host_floats(), dx = x.grad().to_host_floats();
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 8; ++j) {
      double want = 0;
      for (int k = 0; k < 5; ++k) want += static_cast<double>(gv[i * 5 + k]) * (a[k * 8 + j] + b[k * 8 + j]);
      EXPECT_NEAR(dx[i * 8 + j], want, 1e-5) << i << "," << j;
    }
}

}  // namespace
}  // namespace bmt
