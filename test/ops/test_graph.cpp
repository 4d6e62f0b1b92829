// Ops composed into graphs: a small MLP end to end, gradient accumulation, no-grad mode, and the
// engine releasing what each op saved once backward has passed it.
#include <gtest/gtest.h>

#include <unordered_set>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "common/gradcheck.hpp"
#include "common/host_reference.hpp"

namespace bmt {
namespace {

using testing::expect_near_all;
using testing::gradcheck;
using testing::random_tensor;

Tensor mlp(const std::vector<Tensor>& p) {  // x, w1, b1, w2, b2
  return sum(linear(gelu(linear(p[0], p[1], p[2])), p[3], p[4]));
}

TEST(Graph, LinearGeluLinearSumEndToEnd) {
  const std::vector<Tensor> params = {random_tensor({2, 3, 5}, 1), random_tensor({7, 5}, 2), random_tensor({7}, 3),
                                      random_tensor({4, 7}, 4), random_tensor({4}, 5)};
  gradcheck(mlp, params);
  // The same network with a batched matmul and a transposed weight view instead of linear.
  gradcheck([](const std::vector<Tensor>& p) {
    Tensor h = gelu(add(matmul(p[0], transpose(p[1], 0, 1)), p[2]));
    return sum(add(matmul(h, transpose(p[3], 0, 1)), p[4]));
  }, params);
  // And against linear: same value, same gradients.
  std::vector<Tensor> a, b;
  for (const auto& p : params) {
    a.push_back(p.detach().set_requires_grad(true));
    b.push_back(p.detach().set_requires_grad(true));
  }
  const Tensor la = mlp(a);
  const Tensor lb = sum(add(matmul(gelu(add(matmul(b[0], transpose(b[1], 0, 1)), b[2])), transpose(b[3], 0, 1)), b[4]));
  EXPECT_NEAR(la.to_host_floats()[0], lb.to_host_floats()[0], 1e-5);
  la.backward();
  lb.backward();
  for (std::size_t i = 0; i < a.size(); ++i)
    expect_near_all(a[i].grad().to_host_floats(), testing::to_double(b[i].grad().to_host_floats()), 1e-5, 1e-5,
                    "parameter " + std::to_string(i));
}

TEST(Graph, TensorUsedTwiceAccumulates) {
  Tensor x = Tensor::from_floats({1, -2, 3}, {3}).set_requires_grad(true);
  sum(mul(x, x)).backward();  // d/dx x^2 = 2x
  expect_near_all(x.grad().to_host_floats(), {2, -4, 6}, 0, 0, "x * x");
  // Two separate backward passes add into the same .grad.
  sum(scale(x, 3.0f)).backward();
  expect_near_all(x.grad().to_host_floats(), {5, -1, 9}, 0, 0, "accumulated over two backward passes");
  // A weight shared by two layers: both uses contribute.
  const Tensor in = random_tensor({2, 3}, 7);
  gradcheck([&](const std::vector<Tensor>& p) { return linear(linear(in, p[0]), p[0]); }, {random_tensor({3, 3}, 6)});
}

TEST(Graph, NoGradGuardRecordsNothing) {
  Tensor w = random_tensor({4, 3}, 8).set_requires_grad(true);
  const Tensor x = random_tensor({2, 3}, 9);
  {
    NoGradGuard no_grad;
    const Tensor y = sum(gelu(linear(x, w)));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(y.grad_fn());
    EXPECT_THROW(y.backward(), Error);
  }
  const Tensor y = sum(gelu(linear(x, w)));
  EXPECT_TRUE(y.requires_grad());
  EXPECT_TRUE(y.grad_fn());
  // Inputs that need no gradient make outputs that need none.
  const Tensor z = gelu(linear(x, w.detach()));
  EXPECT_FALSE(z.requires_grad());
  EXPECT_FALSE(z.grad_fn());
}

// Every node reachable from `root`, held so that the test can see what they keep after backward.
std::vector<std::shared_ptr<autograd::Node>> graph_nodes(const Tensor& root) {
  std::vector<std::shared_ptr<autograd::Node>> nodes, stack = {root.grad_fn()};
  std::unordered_set<autograd::Node*> seen;
  while (!stack.empty()) {
    auto n = stack.back();
    stack.pop_back();
    if (!n || !seen.insert(n.get()).second) continue;
    nodes.push_back(n);
    for (const auto& e : n->next_edges) stack.push_back(e.node);
  }
  return nodes;
}

TEST(Graph, BackwardReleasesSavedTensors) {
  std::vector<Tensor> params = {random_tensor({8, 16}, 10), random_tensor({32, 16}, 11), random_tensor({32}, 12),
                                random_tensor({16, 32}, 13), random_tensor({16}, 14)};
  for (std::size_t i = 1; i < params.size(); ++i) params[i].set_requires_grad(true);
  const std::size_t baseline = memory_stats().allocated_bytes;
  std::vector<std::shared_ptr<autograd::Node>> nodes;
  {
    Tensor h1 = linear(params[0], params[1], params[2]);
    Tensor h2 = swiglu(h1, gelu(h1));
    Tensor h3 = linear(h2, params[3], params[4]);
    Tensor parts = concat(split(h3, {5, 11}, 1), 1);
    Tensor loss = mean(mul(to(parts, DType::bf16), to(parts, DType::bf16)));
    nodes = graph_nodes(loss);
    EXPECT_GE(nodes.size(), 10u);
    EXPECT_GT(memory_stats().allocated_bytes, baseline);
    loss.backward();
  }
  // Every node is still alive, yet nothing but the parameters' gradients remains allocated.
  std::size_t grads = 0;
  for (std::size_t i = 1; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined());
    grads += params[i].grad().nbytes();
  }
  for (auto& p : params)
    if (p.requires_grad()) p.set_grad(Tensor());
  EXPECT_EQ(memory_stats().allocated_bytes, baseline) << "with " << nodes.size() << " graph nodes alive, "
                                                      << grads << " bytes of gradients dropped";
}

}  // namespace
}  // namespace bmt
