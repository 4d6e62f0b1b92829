// The autograd engine: user-defined Functions, diamond graphs, several roots, walking a graph
// twice, requires_grad propagation and no-grad mode. Values are checked exactly where the
// arithmetic is exact in f32.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/ops/ops.hpp"

namespace bmt {
namespace {

std::vector<float> values(const Tensor& t) { return t.to_host_floats(); }

// y = x^3 with a hand-written backward 3x^2, counting its calls.
struct Cube : autograd::Function {
  explicit Cube(int* backward_calls) : calls(backward_calls) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    x = in[0].detach();
    return {mul(mul(x, x), x)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    ++*calls;
    return {mul(scale(mul(x, x), 3.0f), g[0])};
  }
  void release_saved() override { x = Tensor(); }
  std::string name() const override { return "Cube"; }
  Tensor x;
  int* calls;
};

// Two outputs from two inputs: (a + b, a * b).
struct SumAndProduct : autograd::Function {
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    a = in[0].detach();
    b = in[1].detach();
    return {add(a, b), mul(a, b)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor da = zeros_like(a), db = zeros_like(b);
    if (g[0].defined()) {
      add_(da, g[0]);
      add_(db, g[0]);
    }
    if (g[1].defined()) {
      add_(da, mul(g[1], b));
      add_(db, mul(g[1], a));
    }
    return {da, db};
  }
  std::string name() const override { return "SumAndProduct"; }
  Tensor a, b;
};

// Returns the wrong number of gradients.
struct Broken : autograd::Function {
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {clone(in[0])}; }
  std::vector<Tensor> backward(const std::vector<Tensor>&) override { return {}; }
  std::string name() const override { return "Broken"; }
};

TEST(Autograd, UserDefinedFunction) {
  int calls = 0;
  Tensor x = Tensor::from_floats({1, 2, -3}, {3}).set_requires_grad(true);
  const Tensor y = autograd::call<Cube>({x}, &calls)[0];
  EXPECT_EQ(values(y), (std::vector<float>{1, 8, -27}));
  EXPECT_TRUE(y.requires_grad());
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "Cube");
  // The ops inside forward ran without recording: only Cube is in the graph.
  ASSERT_EQ(y.grad_fn()->next_edges.size(), 1u);
  EXPECT_EQ(y.grad_fn()->next_edges[0].node->name(), "AccumulateGrad");
  y.backward(Tensor::from_floats({1, 1, 2}, {3}));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(values(x.grad()), (std::vector<float>{3, 12, 54}));
}

TEST(Autograd, FunctionWithTwoOutputs) {
  Tensor a = Tensor::from_floats({2, 3}, {2}).set_requires_grad(true);
  Tensor b = Tensor::from_floats({5, 7}, {2}).set_requires_grad(true);
  auto out = autograd::call<SumAndProduct>({a, b});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].impl()->output_nr, 0);
  EXPECT_EQ(out[1].impl()->output_nr, 1);
  // Only the product reaches the loss: the sum's gradient arrives undefined.
  sum(out[1]).backward();
  EXPECT_EQ(values(a.grad()), (std::vector<float>{5, 7}));
  EXPECT_EQ(values(b.grad()), (std::vector<float>{2, 3}));
  // Both outputs used: contributions add.
  a.set_grad(Tensor());
  b.set_grad(Tensor());
  out = autograd::call<SumAndProduct>({a, b});
  sum(add(out[0], out[1])).backward();
  EXPECT_EQ(values(a.grad()), (std::vector<float>{6, 8}));
  EXPECT_EQ(values(b.grad()), (std::vector<float>{3, 4}));
}

// Passes the gradient through, after noting where its memory is.
struct NoteGradient : autograd::Function {
  explicit NoteGradient(const void** where) : seen(where) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {clone(in[0])}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor fresh = clone(g[0]);
    *seen = fresh.data();
    return {fresh};
  }
  std::string name() const override { return "NoteGradient"; }
  const void** seen;
};

// A leaf takes a gradient buffer that nothing else refers to as its .grad, without a copy; one
// that something else still holds it copies.
TEST(Autograd, LeafTakesAFreshGradientWithoutACopy) {
  const void* seen = nullptr;
  Tensor x = Tensor::from_floats({1, 2, 3}, {3}).set_requires_grad(true);
  autograd::call<NoteGradient>({x}, &seen)[0].backward(Tensor::from_floats({1, 1, 1}, {3}));
  EXPECT_EQ(x.grad().data(), seen) << "the fresh gradient became x.grad";

  Tensor z = Tensor::from_floats({1, 2, 3}, {3}).set_requires_grad(true);
  const Tensor g = Tensor::from_floats({4, 5, 6}, {3});
  add_scalar(z, 1.0f).backward(g);  // whose backward passes g itself on
  EXPECT_NE(z.grad().data(), g.data()) << "g is the caller's: z.grad is a copy";
  EXPECT_EQ(values(z.grad()), (std::vector<float>{4, 5, 6}));
}

TEST(Autograd, DiamondGraphCallsEachNodeOnce) {
  // x -> c = cube(x) -> (c * 2, c * 3) -> sum: dL/dx = 5 * 3x^2, cube's backward runs once.
  int calls = 0;
  Tensor x = Tensor::from_floats({1, -2}, {2}).set_requires_grad(true);
  const Tensor c = autograd::call<Cube>({x}, &calls)[0];
  const Tensor loss = sum(add(scale(c, 2.0f), scale(c, 3.0f)));
  loss.backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(values(x.grad()), (std::vector<float>{15, 60}));
}

TEST(Autograd, SeveralRoots) {
  Tensor x = Tensor::from_floats({1, 2}, {2}).set_requires_grad(true);
  Tensor w = Tensor::from_floats({3, 4}, {2}).set_requires_grad(true);
  const Tensor shared = mul(x, w);
  const Tensor r1 = sum(shared);
  const Tensor r2 = scale(shared, 10.0f);  // not a scalar: needs its gradient given
  autograd::backward({r1, r2}, {Tensor(), Tensor::from_floats({1, -1}, {2})});
  // d/dx = w * (1 + 10 * [1, -1])
  EXPECT_EQ(values(x.grad()), (std::vector<float>{33, -36}));
  EXPECT_EQ(values(w.grad()), (std::vector<float>{11, -18}));
  // A leaf can be a root too.
  Tensor leaf = Tensor::from_floats({5}, {1}).set_requires_grad(true);
  autograd::backward({leaf});
  EXPECT_EQ(values(leaf.grad()), (std::vector<float>{1}));
}

TEST(Autograd, BackwardTwiceThroughOneGraphThrows) {
  int calls = 0;
  Tensor x = Tensor::from_floats({2}, {1}).set_requires_grad(true);
  const Tensor y = sum(autograd::call<Cube>({x}, &calls)[0]);
  y.backward();
  EXPECT_THAT([&] { y.backward(); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("second time")));
  EXPECT_EQ(values(x.grad()), (std::vector<float>{12}));  // unchanged by the failed second pass
}

TEST(Autograd, RequiresGradPropagation) {
  Tensor a = Tensor::from_floats({1, 2}, {2});
  Tensor b = Tensor::from_floats({3, 4}, {2}).set_requires_grad(true);
  EXPECT_FALSE(add(a, a).requires_grad());
  EXPECT_TRUE(add(a, b).requires_grad());
  EXPECT_TRUE(add(b, a).requires_grad());
  const Tensor d = add(a, b).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_FALSE(d.grad_fn());
  // Gradients reach only the inputs that asked for them.
  sum(mul(a, b)).backward();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_EQ(values(b.grad()), (std::vector<float>{1, 2}));
  // An op output cannot stop requiring grad; a leaf can.
  Tensor out = add(a, b);
  EXPECT_THROW(out.set_requires_grad(false), Error);
  b.set_requires_grad(false);
  EXPECT_FALSE(add(a, b).requires_grad());
  // A root that requires no grad is misuse.
  EXPECT_THAT([&] { sum(a).backward(); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("requires grad")));
}

TEST(Autograd, NoGradGuardNestsAndRestores) {
  Tensor x = Tensor::from_floats({1}, {1}).set_requires_grad(true);
  EXPECT_TRUE(autograd::grad_enabled());
  {
    NoGradGuard outer;
    EXPECT_FALSE(gelu(x).requires_grad());
    {
      autograd::EnableGradGuard inner;
      EXPECT_TRUE(gelu(x).requires_grad());
    }
    EXPECT_FALSE(autograd::grad_enabled());
  }
  EXPECT_TRUE(autograd::grad_enabled());
}

TEST(Autograd, MisuseMessages) {
  Tensor x = Tensor::from_floats({1, 2}, {2}).set_requires_grad(true);
  const Tensor y = autograd::call<Broken>({x})[0];
  EXPECT_THAT([&] { sum(y).backward(); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected 1 input gradients, found 0")));
  // A non-scalar root needs its gradient.
  EXPECT_THAT([&] { scale(x, 2.0f).backward(); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("[2]")));
  EXPECT_THROW(autograd::backward({sum(x)}, {Tensor(), Tensor()}), Error);
}

}  // namespace
}  // namespace bmt
