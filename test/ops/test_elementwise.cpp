// Elementwise ops: values against float64 host references (with broadcasting), gradients against
// finite differences, and bf16/f16 against the f32 path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/ops/ops.hpp"
#include "common/gradcheck.hpp"
#include "common/host_reference.hpp"

namespace bmt {
namespace {

using testing::broadcast_reference;
using testing::expect_near_all;
using testing::gradcheck;
using testing::random_floats;
using testing::random_tensor;

struct BroadcastCase {
  Shape a, b, out;
};

// Same shape, bias over rows, table over batch, column factor (run), general, scalars.
const std::vector<BroadcastCase> kBroadcastCases = {
    {{1}, {1}, {1}},
    {{17}, {17}, {17}},
    {{3, 33}, {3, 33}, {3, 33}},
    {{5, 33}, {33}, {5, 33}},
    {{2, 3, 17}, {3, 17}, {2, 3, 17}},
    {{4, 1}, {4, 7}, {4, 7}},
    {{2, 1, 5}, {3, 1}, {2, 3, 5}},
    {{3, 1, 4}, {1, 5, 1}, {3, 5, 4}},
    {{}, {3, 4}, {3, 4}},
    {{6}, {1}, {6}},
};

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

TEST(Elementwise, BinaryOpsMatchFloat64WithBroadcasting) {
  std::uint32_t seed = 1;
  for (const auto& c : kBroadcastCases) {
    const auto av = random_floats(static_cast<std::size_t>(numel_of(c.a)), seed++);
    const auto bv = random_floats(static_cast<std::size_t>(numel_of(c.b)), seed++);
    const Tensor a = Tensor::from_floats(av, c.a), b = Tensor::from_floats(bv, c.b);
    const std::string what = to_string(c.a) + " with " + to_string(c.b);
    const Tensor s = add(a, b), d = sub(a, b), p = mul(a, b);
    EXPECT_EQ(s.shape(), c.out) << what;
    expect_near_all(s.to_host_floats(), broadcast_reference(av, c.a, bv, c.b, c.out, std::plus<double>()), 1e-6,
                    1e-6, "add " + what);
    expect_near_all(d.to_host_floats(), broadcast_reference(av, c.a, bv, c.b, c.out, std::minus<double>()), 1e-6,
                    1e-6, "sub " + what);
    expect_near_all(p.to_host_floats(), broadcast_reference(av, c.a, bv, c.b, c.out, std::multiplies<double>()),
                    1e-6, 1e-6, "mul " + what);
    // Operand order does not matter to the result's shape.
    EXPECT_EQ(add(b, a).shape(), c.out) << what;
  }
}

TEST(Elementwise, BinaryGradientsSumOverBroadcastDimensions) {
  std::uint32_t seed = 100;
  for (const auto& c : kBroadcastCases) {
    SCOPED_TRACE(to_string(c.a) + " with " + to_string(c.b));
    const Tensor a = random_tensor(c.a, seed++), b = random_tensor(c.b, seed++);
    gradcheck([](const std::vector<Tensor>& in) { return add(in[0], in[1]); }, {a, b});
    gradcheck([](const std::vector<Tensor>& in) { return sub(in[0], in[1]); }, {a, b});
    gradcheck([](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }, {a, b});
  }
}

TEST(Elementwise, UnaryOpsMatchFloat64) {
  for (const Shape& shape : std::vector<Shape>{{1}, {3}, {17, 33}, {2, 3, 5}}) {
    const auto xv = random_floats(static_cast<std::size_t>(numel_of(shape)), 7, -4.0f, 4.0f);
    const Tensor x = Tensor::from_floats(xv, shape);
    std::vector<double> g(xv.size()), s(xv.size()), r(xv.size()), sc(xv.size()), as(xv.size());
    for (std::size_t i = 0; i < xv.size(); ++i) {
      g[i] = gelu_ref(xv[i]);
      s[i] = silu_ref(xv[i]);
      r[i] = xv[i] > 0 ? xv[i] : 0.0;
      sc[i] = -2.5 * xv[i];
      as[i] = xv[i] + 0.75;
    }
    const std::string what = to_string(shape);
    expect_near_all(gelu(x).to_host_floats(), g, 1e-6, 1e-5, "gelu " + what);
    expect_near_all(silu(x).to_host_floats(), s, 1e-6, 1e-5, "silu " + what);
    expect_near_all(relu(x).to_host_floats(), r, 0, 0, "relu " + what);
    expect_near_all(scale(x, -2.5f).to_host_floats(), sc, 1e-6, 1e-6, "scale " + what);
    expect_near_all(add_scalar(x, 0.75f).to_host_floats(), as, 1e-6, 1e-6, "add_scalar " + what);
  }
}

double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
double silu_grad_ref(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

// Derivatives from backward against float64 closed forms over a wide range (gradcheck covers
// only small inputs).
TEST(Elementwise, ActivationDerivativesMatchFloat64) {
  std::vector<float> xv;
  for (int i = -400; i <= 400; ++i) xv.push_back(static_cast<float>(i) / 40.0f);  // [-10, 10]
  std::vector<double> dg(xv.size()), ds(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    dg[i] = gelu_grad_ref(xv[i]);
    ds[i] = silu_grad_ref(xv[i]);
  }
  const Shape shape{static_cast<std::int64_t>(xv.size())};
  Tensor x = Tensor::from_floats(xv, shape).set_requires_grad(true);
  sum(gelu(x)).backward();
  expect_near_all(x.grad().to_host_floats(), dg, 1e-6, 1e-5, "gelu'");
  Tensor y = Tensor::from_floats(xv, shape).set_requires_grad(true);
  sum(silu(y)).backward();
  expect_near_all(y.grad().to_host_floats(), ds, 1e-6, 1e-5, "silu'");
}

TEST(Elementwise, ActivationsAtExtremes) {
  const Tensor x = Tensor::from_floats({-100.0f, -20.0f, 0.0f, 20.0f, 100.0f}, {5});
  expect_near_all(silu(x).to_host_floats(), {silu_ref(-100), silu_ref(-20), 0, 20, 100}, 1e-6, 1e-6, "silu");
  expect_near_all(gelu(x).to_host_floats(), {0, 0, 0, 20, 100}, 1e-6, 1e-6, "gelu");
  EXPECT_FALSE(has_inf_nan({silu(x), gelu(x), swiglu(x, x)}));
}

// Inputs kept away from relu's kink, where a finite difference straddles it.
Tensor away_from_zero(const Shape& shape, std::uint32_t seed) {
  auto v = random_floats(static_cast<std::size_t>(numel_of(shape)), seed, -2.0f, 2.0f);
  for (auto& x : v)
    if (std::fabs(x) < 0.05f) x += x < 0 ? -0.1f : 0.1f;
  return Tensor::from_floats(v, shape);
}

TEST(Elementwise, UnaryGradients) {
  for (const Shape& shape : std::vector<Shape>{{1}, {17}, {3, 5}}) {
    SCOPED_TRACE(to_string(shape));
    const Tensor x = away_from_zero(shape, 11);
    gradcheck([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {x});
    gradcheck([](const std::vector<Tensor>& in) { return silu(in[0]); }, {x});
    gradcheck([](const std::vector<Tensor>& in) { return relu(in[0]); }, {x});
    gradcheck([](const std::vector<Tensor>& in) { return scale(in[0], -3.0f); }, {x});
    gradcheck([](const std::vector<Tensor>& in) { return add_scalar(in[0], 2.0f); }, {x});
  }
}

TEST(Elementwise, SwigluIsSiluTimesUp) {
  const Shape shape{3, 17};
  const auto gv = random_floats(51, 21, -3.0f, 3.0f), uv = random_floats(51, 22, -3.0f, 3.0f);
  std::vector<double> ref(gv.size());
  for (std::size_t i = 0; i < gv.size(); ++i) ref[i] = silu_ref(gv[i]) * uv[i];
  expect_near_all(swiglu(Tensor::from_floats(gv, shape), Tensor::from_floats(uv, shape)).to_host_floats(), ref, 1e-6,
                  1e-5, "swiglu");
  gradcheck([](const std::vector<Tensor>& in) { return swiglu(in[0], in[1]); },
            {Tensor::from_floats(gv, shape), Tensor::from_floats(uv, shape)});
  // Only the gate needs a gradient: the other is skipped, not wrong.
  Tensor gate = Tensor::from_floats(gv, shape).set_requires_grad(true);
  Tensor up = Tensor::from_floats(uv, shape);
  sum(swiglu(gate, up)).backward();
  EXPECT_TRUE(gate.grad().defined());
  EXPECT_FALSE(up.grad().defined());
}

TEST(Elementwise, NonContiguousInputs) {
  const auto v = random_floats(3 * 5, 31);
  const Tensor base = Tensor::from_floats(v, {3, 5});
  const Tensor t = base.transpose(0, 1);  // [5, 3], strided
  ASSERT_FALSE(t.is_contiguous());
  std::vector<double> g(15), sum2(15);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      g[i * 3 + j] = gelu_ref(v[j * 5 + i]);
      sum2[i * 3 + j] = 2.0 * v[j * 5 + i];
    }
  expect_near_all(gelu(t).to_host_floats(), g, 1e-6, 1e-5, "gelu of a transposed view");
  expect_near_all(add(t, t).to_host_floats(), sum2, 1e-6, 1e-6, "add of a transposed view");
  gradcheck([](const std::vector<Tensor>& in) { return mul(transpose(in[0], 0, 1), in[1]); },
            {base, random_tensor({5, 3}, 32)});
}

// bf16/f16 results against the f32 op on the same (rounded) inputs: within one rounding of the
// output, plus the f32 kernel's own error.
TEST(Elementwise, HalfPrecisionMatchesF32Path) {
  const Shape shape{7, 33};
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor a16 = random_tensor(shape, 41, -2.0f, 2.0f, dt), b16 = random_tensor({33}, 42, -2.0f, 2.0f, dt);
    const Tensor a32 = cast(a16, DType::f32), b32 = cast(b16, DType::f32);
    const double tol = testing::roundoff(dt);
    auto check = [&](const Tensor& half, const Tensor& full, const char* what) {
      EXPECT_EQ(half.dtype(), dt) << what;
      expect_near_all(half.to_host_floats(), testing::to_double(full.to_host_floats()), 1e-6, tol, what);
    };
    check(add(a16, b16), add(a32, b32), "add");
    check(sub(a16, b16), sub(a32, b32), "sub");
    check(mul(a16, b16), mul(a32, b32), "mul");
    check(gelu(a16), gelu(a32), "gelu");
    check(silu(a16), silu(a32), "silu");
    check(relu(a16), relu(a32), "relu");
    check(scale(a16, 0.3f), scale(a32, 0.3f), "scale");
    check(swiglu(a16, a16), swiglu(a32, a32), "swiglu");

    // Gradients come back in the input's dtype, close to the f32 gradients.
    Tensor x16 = a16.detach().set_requires_grad(true), x32 = a32.detach().set_requires_grad(true);
    sum(gelu(mul(x16, b16))).backward();
    sum(gelu(mul(x32, b32))).backward();
    ASSERT_EQ(x16.grad().dtype(), dt);
    expect_near_all(x16.grad().to_host_floats(), testing::to_double(x32.grad().to_host_floats()), 1e-3, 4 * tol,
                    "gradient of gelu(x * b)");
  }
}

// residual + x + bias in one pass: against float64 (f32) and against two adds (bf16, which round
// twice where residual_add rounds once), gradients against finite differences, and the bias
// gradient added into an existing f32 buffer. Widths of 64 take the CUDA build's 16-byte path, 33
// its element-wise one; no bias is a plain sum.
TEST(Elementwise, ResidualAddIsResidualPlusInputPlusBias) {
  for (const std::int64_t c : {64, 33}) {
    const Shape shape{2, 5, c};
    const Tensor r = random_tensor(shape, 30), x = random_tensor(shape, 31), b = random_tensor({c}, 32);
    const auto rv = r.to_host_floats(), xv = x.to_host_floats(), bv = b.to_host_floats();
    std::vector<double> ref(rv.size()), ref_no_bias(rv.size());
    for (std::size_t i = 0; i < rv.size(); ++i) {
      ref_no_bias[i] = static_cast<double>(rv[i]) + xv[i];
      ref[i] = ref_no_bias[i] + bv[i % static_cast<std::size_t>(c)];
    }
    const std::string width = " C=" + std::to_string(c);
    expect_near_all(residual_add(r, x, b).to_host_floats(), ref, 1e-6, 1e-6, "f32" + width);
    expect_near_all(residual_add(r, x).to_host_floats(), ref_no_bias, 1e-6, 1e-6, "no bias" + width);
    const Tensor r16 = to(r, DType::bf16), x16 = to(x, DType::bf16), b16 = to(b, DType::bf16);
    const auto twice = add(add(r16, x16), b16).to_host_floats();
    expect_near_all(residual_add(r16, x16, b16).to_host_floats(), testing::to_double(twice), 1e-2, 1e-2,
                    "bf16" + width);
  }
  gradcheck([](const std::vector<Tensor>& in) { return residual_add(in[0], in[1], in[2]); },
            {random_tensor({3, 8}, 33), random_tensor({3, 8}, 34), random_tensor({8}, 35)});
  // A bf16 bias whose gradient buffer is f32 (as in a ZeRO block) gets the column sums added there
  // in f32: 1 + 2^-10 is not a bf16 value, so a bf16 gradient handed to the graph would lose it.
  Tensor bias = Tensor::zeros({4}, DType::bf16).set_requires_grad(true);
  bias.set_grad(Tensor::from_floats({1, 2, 3, 4}, {4}));
  const float tiny = 1.0f / 1024;
  const Tensor g = Tensor::from_floats({1, 0, -1, 2, tiny, tiny, 1, 1}, {2, 4}, DType::bf16);
  residual_add(Tensor::zeros({2, 4}, DType::bf16), Tensor::zeros({2, 4}, DType::bf16), bias).backward(g);
  EXPECT_EQ(bias.grad().dtype(), DType::f32);
  EXPECT_EQ(bias.grad().to_host_floats(), (std::vector<float>{2 + tiny, 2 + tiny, 3, 7}));
  // Empty rows: an empty output, and a zero bias gradient.
  Tensor b0 = Tensor::from_floats({1, 2}, {2}).set_requires_grad(true);
  const Tensor empty = residual_add(Tensor::zeros({0, 2}), Tensor::zeros({0, 2}), b0);
  EXPECT_EQ(empty.shape(), (Shape{0, 2}));
  empty.backward(Tensor::zeros({0, 2}));
  EXPECT_EQ(b0.grad().to_host_floats(), (std::vector<float>{0, 0}));
  EXPECT_THAT([] { residual_add(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("[2, 3] and f32 [3, 2]")));
  EXPECT_THAT([] { residual_add(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}), Tensor::zeros({2})); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected bias [3] in f32, found f32 [2]")));
}

TEST(Elementwise, Misuse) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4}), h = Tensor::zeros({2, 3}, DType::bf16);
  EXPECT_THAT([&] { add(a, b); }, ::testing::ThrowsMessage<Error>(::testing::AllOf(
                                       ::testing::HasSubstr("[2, 3]"), ::testing::HasSubstr("[4]"))));
  EXPECT_THAT([&] { mul(a, h); }, ::testing::ThrowsMessage<Error>(::testing::AllOf(
                                       ::testing::HasSubstr("f32"), ::testing::HasSubstr("bf16"))));
  EXPECT_THROW(swiglu(a, Tensor::zeros({3, 2})), Error);
  EXPECT_THROW(gelu(Tensor::zeros({2}, DType::i32)), Error);
  EXPECT_THROW(add(a, Tensor()), Error);
}

}  // namespace
}  // namespace bmt
