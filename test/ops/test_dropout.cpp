// Dropout: the mask is a function of (key, index) (same on recompute, different for another key),
// the keep rate is within statistical bounds of 1 - p, kept values are scaled by 1 / (1 - p), the
// gradient uses the same mask, rows offset into a larger tensor take its mask, and the identity cases.
#include <gtest/gtest.h>

#include <cmath>

#include "bmtrain/kernels/dropout.hpp"
#include "bmtrain/ops/dropout.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/gradcheck.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

using testing::random_floats;

// Inputs in [1, 2]: never 0, so y == 0 marks exactly the dropped elements.
std::vector<float> nonzero_inputs(std::size_t n, std::uint32_t seed) { return random_floats(n, seed, 1.0f, 2.0f); }

TEST(Dropout, SameKeySameMaskOtherKeyOtherMask) {
  const std::int64_t n = 4096;
  const Tensor x = Tensor::from_floats(nonzero_inputs(n, 1), {64, 64});
  const auto a = dropout(x, 0.3f, 1234).to_host_floats();
  const auto b = dropout(x, 0.3f, 1234).to_host_floats();  // a recompute
  const auto c = dropout(x, 0.3f, 1235).to_host_floats();
  EXPECT_EQ(a, b);
  int differ = 0;
  for (std::int64_t i = 0; i < n; ++i) differ += (a[i] == 0) != (c[i] == 0);
  // Two independent masks disagree on 2 p (1 - p) = 42% of the elements.
  EXPECT_GT(differ, n / 4);
}

// Rows of a larger tensor, offset by their first element's index, take that tensor's mask for
// them: the rows of a [64, 64] input split four ways, forward and gradient alike.
TEST(Dropout, OffsetRowsTakeTheWholeTensorsMask) {
  const std::vector<float> xv = nonzero_inputs(4096, 3);
  const auto whole = dropout(Tensor::from_floats(xv, {64, 64}), 0.4f, 77).to_host_floats();
  for (std::int64_t part = 0; part < 4; ++part) {
    const std::vector<float> rows(xv.begin() + part * 1024, xv.begin() + (part + 1) * 1024);
    Tensor x = Tensor::from_floats(rows, {16, 64});
    x.set_requires_grad(true);
    const Tensor y = dropout(x, 0.4f, 77, true, static_cast<std::uint64_t>(part * 1024));
    const auto got = y.to_host_floats();
    for (std::int64_t i = 0; i < 1024; ++i) ASSERT_EQ(got[i], whole[part * 1024 + i]) << part << " " << i;
    autograd::backward({y}, {Tensor::from_floats(std::vector<float>(1024, 1.0f), {16, 64})});
    const auto g = x.grad().to_host_floats();
    for (std::int64_t i = 0; i < 1024; ++i)
      ASSERT_EQ(g[i] == 0.0f, whole[part * 1024 + i] == 0.0f) << "gradient " << part << " " << i;
  }
}

TEST(Dropout, MaskMatchesTheCounterBasedRandomStream) {
  const std::int64_t n = 1000;
  const float p = 0.25f;
  const auto xv = nonzero_inputs(n, 2);
  const auto y = dropout(Tensor::from_floats(xv, {n}), p, 77).to_host_floats();
  for (std::int64_t i = 0; i < n; ++i) {
    const bool keep = kernels::dropout_keeps(77, static_cast<std::uint64_t>(i), p);
    ASSERT_EQ(y[i], keep ? xv[i] * (1.0f / (1.0f - p)) : 0.0f) << "element " << i;
  }
}

TEST(Dropout, KeepRateWithinStatisticalBounds) {
  const std::int64_t n = 200000;
  const Tensor x = Tensor::from_floats(nonzero_inputs(n, 3), {n});
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const auto y = dropout(x, p, 99).to_host_floats();
    std::int64_t kept = 0;
    for (float v : y) kept += v != 0.0f;
    const double rate = static_cast<double>(kept) / n;
    const double sigma = std::sqrt(p * (1.0 - p) / n);
    EXPECT_NEAR(rate, 1.0 - p, 5 * sigma) << "p=" << p;
  }
}

TEST(Dropout, GradientUsesTheSameMask) {
  const std::int64_t n = 333;
  const float p = 0.4f;
  const auto xv = nonzero_inputs(n, 4);
  const auto dy = random_floats(n, 5);
  const auto r = testing::forward_backward(
      [p](const std::vector<Tensor>& in) { return dropout(in[0], p, 555); }, {Tensor::from_floats(xv, {n})}, {true}, dy);
  for (std::int64_t i = 0; i < n; ++i) {
    const float expected = r.output[i] != 0.0f ? dy[i] / (1.0f - p) : 0.0f;
    ASSERT_FLOAT_EQ(r.grads[0][i], expected) << "element " << i;
  }
  testing::gradcheck([](const std::vector<Tensor>& in) { return dropout(in[0], 0.5f, 8); },
                     {testing::random_tensor({3, 7}, 6)});
}

TEST(Dropout, SixteenBitStorageUsesTheSameMask) {
  const std::int64_t n = 2000;
  const auto xv = nonzero_inputs(n, 7);
  const auto ref = dropout(Tensor::from_floats(xv, {n}), 0.2f, 31).to_host_floats();
  for (DType dt : {DType::bf16, DType::f16}) {
    const auto y = dropout(Tensor::from_floats(xv, {n}, dt), 0.2f, 31).to_host_floats();
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y[i] == 0.0f, ref[i] == 0.0f) << dtype_name(dt) << " element " << i;
      ASSERT_NEAR(y[i], ref[i], std::fabs(ref[i]) * (dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024));
    }
  }
}

TEST(Dropout, IdentityWhenNotTrainingOrPZero) {
  const Tensor x = testing::random_tensor({5, 3}, 8);
  EXPECT_TRUE(dropout(x, 0.5f, 1, /*training=*/false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0f, 1).is_same(x));
}

TEST(Dropout, PEqualOneDropsEverything) {
  const auto y = dropout(testing::random_tensor({4, 4}, 9), 1.0f, 1).to_host_floats();
  EXPECT_EQ(y, std::vector<float>(16, 0.0f));
}

TEST(Dropout, RejectsProbabilitiesOutsideZeroOne) {
  const Tensor x = Tensor::zeros({3});
  EXPECT_THROW(dropout(x, -0.1f, 1), Error);
  EXPECT_THROW(dropout(x, 1.5f, 1), Error);
}

}  // namespace
}  // namespace bmt
