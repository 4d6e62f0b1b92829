// Softmax: forward against a float64 reference (including large and masked logits), gradients
// against finite differences, bf16/f16 against f32.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bmtrain/ops/softmax.hpp"
#include "common/gradcheck.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

using testing::expect_close;
using testing::random_floats;

std::vector<double> softmax_reference(const std::vector<float>& x, std::int64_t C) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / C; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < C; ++j) m = std::max(m, static_cast<double>(x[r * C + j]));
    double s = 0;
    for (std::int64_t j = 0; j < C; ++j) s += std::exp(x[r * C + j] - m);
    for (std::int64_t j = 0; j < C; ++j) y[r * C + j] = std::exp(x[r * C + j] - m) / s;
  }
  return y;
}

TEST(Softmax, ForwardMatchesFloat64Reference) {
  std::uint32_t seed = 1;
  for (const Shape& shape : std::vector<Shape>{{1, 1}, {3, 7}, {2, 3, 33}, {4, 17}, {1, 1000}, {5}}) {
    const auto xv = random_floats(numel_of(shape), seed++, -4.0f, 4.0f);
    const Tensor y = softmax(Tensor::from_floats(xv, shape));
    EXPECT_EQ(y.shape(), shape);
    expect_close(y.to_host_floats(), softmax_reference(xv, shape.back()), 1e-6, 1e-5, "softmax " + to_string(shape));
  }
}

TEST(Softmax, StableForLargeAndMaskedLogits) {
  // exp(1000) overflows f32: a kernel that skips the max subtraction returns inf/nan here.
  auto xv = random_floats(4 * 9, 7, 990.0f, 1000.0f);
  xv[3] = -std::numeric_limits<float>::infinity();  // a masked position gets probability 0
  const auto y = softmax(Tensor::from_floats(xv, {4, 9})).to_host_floats();
  expect_close(y, softmax_reference(xv, 9), 1e-6, 1e-5, "large logits");
  EXPECT_EQ(y[3], 0.0f);
}

TEST(Softmax, GradientsMatchFiniteDifferences) {
  for (const Shape& shape : std::vector<Shape>{{3, 7}, {2, 2, 5}, {1, 1}, {1, 16}}) {
    testing::gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0]); },
                       {testing::random_tensor(shape, 11, -2.0f, 2.0f)});
  }
}

TEST(Softmax, StridedInput) {
  // A transposed (non-contiguous) input is made contiguous on the way in.
  const auto xv = random_floats(5 * 3, 12);
  const Tensor y = softmax(Tensor::from_floats(xv, {5, 3}).transpose(0, 1));
  std::vector<float> xt(15);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) xt[j * 5 + i] = xv[i * 3 + j];
  EXPECT_EQ(y.shape(), (Shape{3, 5}));
  expect_close(y.to_host_floats(), softmax_reference(xt, 5), 1e-6, 1e-5, "transposed input");
}

// Documented tolerances: outputs and gradients within 2^-7 (bf16) / 2^-10 (f16) of the f32 result
// on the same rounded inputs, absolute (probabilities are at most 1).
TEST(Softmax, HalfPrecisionMatchesFloat) {
  const std::int64_t rows = 5, C = 50;
  for (DType dt : {DType::bf16, DType::f16}) {
    const double tol = dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    const auto xv = testing::rounded_to(random_floats(rows * C, 21, -5.0f, 5.0f), dt);
    const auto dyv = testing::rounded_to(random_floats(rows * C, 22), dt);
    auto run = [&](DType d) {
      return testing::forward_backward([](const std::vector<Tensor>& in) { return softmax(in[0]); },
                                       {Tensor::from_floats(xv, {rows, C}, d)}, {true}, dyv);
    };
    const auto half = run(dt), full = run(DType::f32);
    expect_close(half.output, full.output, tol, 0, std::string("softmax ") + dtype_name(dt));
    expect_close(half.grads[0], full.grads[0], tol, 0, std::string("softmax grad ") + dtype_name(dt));
  }
}

}  // namespace
}  // namespace bmt
