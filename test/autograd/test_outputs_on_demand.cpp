// Outputs on demand: under OutputsOnDemandGuard a DeferrableFunction's write runs once, when one
// of its outputs' memory is first used (by another op, a view, a copy to the host), and never when
// none is; the gradients are the same either way.
#include <gtest/gtest.h>

#include <string>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt {
namespace {

// y = 2x, counting the writes.
struct Doubling : autograd::DeferrableFunction {
  explicit Doubling(int* write_calls) : writes(write_calls) {}
  std::vector<Tensor> prepare(const std::vector<Tensor>& in) override {
    return {Tensor::empty(in[0].shape(), in[0].dtype())};
  }
  void write(const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    ++*writes;
    out[0].copy_(kernels::affine(contiguous(in[0]), 2.0f, 0.0f));
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {kernels::affine(contiguous(g[0]), 2.0f, 0.0f)};
  }
  std::string name() const override { return "Doubling"; }
  int* writes;
};

Tensor doubled(const Tensor& x, int* writes) { return autograd::call<Doubling>({x}, writes)[0]; }

// doubled(x) with its write put off.
Tensor doubled_on_demand(const Tensor& x, int* writes) {
  autograd::OutputsOnDemandGuard on_demand;
  return doubled(x, writes);
}

void backward_with_ones(const Tensor& y) { autograd::backward({y}, {Tensor::from_floats({1, 1, 1, 1, 1, 1}, {2, 3})}); }

Tensor input() { return Tensor::from_floats({1, -2, 3, 0.5f, 4, -1}, {2, 3}).set_requires_grad(true); }

TEST(OutputsOnDemand, OffByDefaultWritesAtTheCall) {
  EXPECT_FALSE(autograd::outputs_on_demand());
  int writes = 0;
  const Tensor y = doubled(input(), &writes);
  EXPECT_EQ(writes, 1);
  EXPECT_EQ(y.to_host_floats(), (std::vector<float>{2, -4, 6, 1, 8, -2}));
}

TEST(OutputsOnDemand, GuardNestsAndRestores) {
  {
    autograd::OutputsOnDemandGuard outer;
    {
      autograd::OutputsOnDemandGuard inner;
      EXPECT_TRUE(autograd::outputs_on_demand());
    }
    EXPECT_TRUE(autograd::outputs_on_demand());
  }
  EXPECT_FALSE(autograd::outputs_on_demand());
}

TEST(OutputsOnDemand, OutputNeverUsedIsNeverWrittenAndBackwardStillWorks) {
  Tensor x = input();
  int writes = 0;
  const Tensor y = doubled_on_demand(x, &writes);
  EXPECT_EQ(writes, 0);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  backward_with_ones(y);
  EXPECT_EQ(writes, 0) << "backward needs the graph, not the output";
  EXPECT_EQ(x.grad().to_host_floats(), (std::vector<float>{2, 2, 2, 2, 2, 2}));
}

TEST(OutputsOnDemand, FirstUseByAnotherOpWritesOnce) {
  Tensor x = input();
  int writes = 0;
  autograd::OutputsOnDemandGuard on_demand;
  const Tensor y = doubled(x, &writes);
  const Tensor s = sum(y);  // a reduction reads y
  EXPECT_EQ(writes, 1);
  EXPECT_FLOAT_EQ(s.to_host_floats()[0], 11.0f);
  EXPECT_EQ(y.to_host_floats(), (std::vector<float>{2, -4, 6, 1, 8, -2}));
  EXPECT_EQ(writes, 1) << "written once";
  s.backward();
  EXPECT_EQ(x.grad().to_host_floats(), (std::vector<float>{2, 2, 2, 2, 2, 2}));
}

TEST(OutputsOnDemand, UseThroughAViewWrites) {
  int writes = 0;
  autograd::OutputsOnDemandGuard on_demand;
  const Tensor y = doubled(input(), &writes);
  const Tensor row = y.select(0, 1);
  EXPECT_EQ(writes, 0) << "a view reads nothing";
  EXPECT_EQ(row.to_host_floats(), (std::vector<float>{1, 8, -2}));
  EXPECT_EQ(writes, 1);
}

// Linear and add put off their work too: an add of a linear and a doubling is written, all of it,
// when the add's output is read, with the values computed at once.
TEST(OutputsOnDemand, LinearAndAddMatchTheImmediateResult) {
  const Tensor w = Tensor::from_floats({0.5f, -1, 2, 1, 0, -0.25f, 3, 1, 1}, {3, 3}).set_requires_grad(true);
  const Tensor b = Tensor::from_floats({0.25f, -0.5f, 1}, {3}).set_requires_grad(true);
  Tensor x = input();
  int writes = 0;
  const Tensor now = add(doubled(x, &writes), linear(x, w, b));
  EXPECT_EQ(writes, 1);
  Tensor later;
  {
    autograd::OutputsOnDemandGuard on_demand;
    later = add(doubled(x, &writes), linear(x, w, b));
  }
  EXPECT_EQ(writes, 1) << "nothing read yet";
  EXPECT_EQ(later.to_host_floats(), now.to_host_floats());
  EXPECT_EQ(writes, 2) << "reading the add wrote its operands";
}

// linear_gelu's backward needs the GELU's input, which its GEMM writes: recording a gradient, the
// GEMM runs at the call, so backward is right even when the output is never read.
TEST(OutputsOnDemand, LinearGeluRecordingWritesAtTheCall) {
  const Tensor w = Tensor::from_floats({0.5f, -1, 2, 1, 0, -0.25f, 3, 1, 1}, {3, 3}).set_requires_grad(true);
  const Tensor b = Tensor::from_floats({0.25f, -0.5f, 1}, {3});
  Tensor x = input();
  backward_with_ones(linear_gelu(x, w, b));
  const auto dx_now = x.grad().to_host_floats(), dw_now = w.grad().to_host_floats();
  Tensor x2 = input();
  Tensor w2 = w.detach();
  w2.set_requires_grad(true);
  Tensor later;
  {
    autograd::OutputsOnDemandGuard on_demand;
    later = linear_gelu(x2, w2, b);
  }
  backward_with_ones(later);
  EXPECT_EQ(x2.grad().to_host_floats(), dx_now);
  EXPECT_EQ(w2.grad().to_host_floats(), dw_now);
}

// residual_add too: nothing is written until its output is read, then the same values.
TEST(OutputsOnDemand, ResidualAddWaitsForAReader) {
  const Tensor w = Tensor::from_floats({0.5f, -1, 2, 1, 0, -0.25f, 3, 1, 1}, {3, 3});
  const Tensor b = Tensor::from_floats({0.25f, -0.5f, 1}, {3});
  Tensor x = input();
  int writes = 0;
  const Tensor now = residual_add(doubled(x, &writes), linear(x, w), b);
  Tensor later;
  {
    autograd::OutputsOnDemandGuard on_demand;
    later = residual_add(doubled(x, &writes), linear(x, w), b);
  }
  EXPECT_EQ(writes, 1) << "nothing read yet";
  EXPECT_TRUE(later.storage()->has_pending_write());
  EXPECT_EQ(later.to_host_floats(), now.to_host_floats());
  EXPECT_EQ(writes, 2);
}

// A Function that saves an input for backward reads it: the input is written then.
TEST(OutputsOnDemand, SavingAnInputWritesIt) {
  const Tensor w = Tensor::from_floats({0.5f, -1, 2, 1, 0, -0.25f}, {2, 3});
  int writes = 0;
  autograd::OutputsOnDemandGuard on_demand;
  const Tensor y = linear(doubled(input(), &writes), w, Tensor());
  EXPECT_EQ(writes, 1) << "linear keeps its input for the weight's gradient";
  EXPECT_EQ(y.to_host_floats(), (std::vector<float>{17, 0.5f, -11.5f, 1.5f}));
}

TEST(OutputsOnDemand, FirstUseAfterBackwardPassedIsAnError) {
  int writes = 0;
  const Tensor y = doubled_on_demand(input(), &writes);
  backward_with_ones(y);
  try {
    y.to_host_floats();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Doubling: an output computed on first use was first used after backward"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(writes, 0);
}

// prepare must hand out new memory: a view of an input would be written over when first used.
struct ReturnsItsInput : autograd::DeferrableFunction {
  std::vector<Tensor> prepare(const std::vector<Tensor>& in) override { return {in[0].view({-1})}; }
  void write(const std::vector<Tensor>&, const std::vector<Tensor>&) override {}
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override { return {g[0]}; }
  std::string name() const override { return "ReturnsItsInput"; }
};

TEST(OutputsOnDemand, PrepareThatReturnsSharedMemoryIsAnError) {
  const Tensor x = input();
  autograd::OutputsOnDemandGuard on_demand;
  try {
    autograd::call<ReturnsItsInput>({x});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ReturnsItsInput::prepare: expected fresh contiguous outputs, one Storage "
                                         "each, found one whose Storage is shared"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace bmt
