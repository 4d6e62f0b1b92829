// Rotary embedding: forward against a float64 reference in both layouts, with offsets and explicit
// positions; strided input; backward against finite differences and as the inverse rotation;
// bf16/f16 against f32.
#include <gtest/gtest.h>

#include <cmath>

#include "bmtrain/ops/rotary.hpp"
#include "bmtrain/runtime/error.hpp"
#include "gradcheck.hpp"
#include "reference_check.hpp"

namespace bmt {
namespace {

using testing::expect_close;
using testing::random_floats;

// x in [B, T, H, D] (bthd) or [B, H, T, D]; pos(b, t) gives the position.
template <class Pos>
std::vector<double> rope_reference(const std::vector<float>& x, std::int64_t B, std::int64_t T, std::int64_t H,
                                   std::int64_t D, bool bthd, double theta, Pos pos) {
  std::vector<double> y(x.size());
  const std::int64_t half = D / 2;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t base = bthd ? ((b * T + t) * H + h) * D : ((b * H + h) * T + t) * D;
        for (std::int64_t i = 0; i < half; ++i) {
          const double angle = pos(b, t) * std::pow(theta, -2.0 * i / D);
          const double x1 = x[base + i], x2 = x[base + i + half];
          y[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          y[base + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
  return y;
}

TEST(Rotary, ForwardMatchesFloat64ReferenceInBothLayouts) {
  std::uint32_t seed = 1;
  const std::int64_t B = 2, H = 3;
  for (std::int64_t T : {1, 7, 33}) {
    for (std::int64_t D : {8, 16}) {
      for (bool bthd : {true, false}) {
        for (std::int64_t offset : {0, 5}) {
          const Shape shape = bthd ? Shape{B, T, H, D} : Shape{B, H, T, D};
          const auto xv = random_floats(numel_of(shape), seed++);
          const Tensor y = rotary_embedding(Tensor::from_floats(xv, shape), offset, 10000.0f,
                                            bthd ? RotaryLayout::BTHD : RotaryLayout::BHTD);
          EXPECT_EQ(y.shape(), shape);
          const auto ref = rope_reference(xv, B, T, H, D, bthd, 10000.0,
                                          [&](std::int64_t, std::int64_t t) { return double(offset + t); });
          expect_close(y.to_host_floats(), ref, 1e-5, 1e-5,
                       "T=" + std::to_string(T) + " D=" + std::to_string(D) + (bthd ? " bthd" : " bhtd"));
        }
      }
    }
  }
}

TEST(Rotary, ExplicitPositions) {
  const std::int64_t B = 2, T = 5, H = 2, D = 8;
  const auto xv = random_floats(B * T * H * D, 2);
  const Tensor x = Tensor::from_floats(xv, {B, T, H, D});
  const std::vector<std::int64_t> shared = {3, 1, 4, 1, 5};
  const std::vector<std::int64_t> per_batch = {0, 1, 2, 3, 4, 10, 11, 12, 13, 2000};
  for (DType it : {DType::i32, DType::i64}) {
    expect_close(rotary_embedding(x, Tensor::from_ints(shared, {T}, it), 500.0f).to_host_floats(),
                 rope_reference(xv, B, T, H, D, true, 500.0, [&](std::int64_t, std::int64_t t) { return double(shared[t]); }),
                 1e-5, 1e-5, "positions [T]");
    // Position 2000: the f32 angle (as in Llama's code) is off by up to ~2000 * 2^-24 rad.
    expect_close(rotary_embedding(x, Tensor::from_ints(per_batch, {B, T}, it)).to_host_floats(),
                 rope_reference(xv, B, T, H, D, true, 10000.0,
                                [&](std::int64_t b, std::int64_t t) { return double(per_batch[b * T + t]); }),
                 5e-4, 1e-5, "positions [B, T]");
  }
  EXPECT_THROW(rotary_embedding(x, Tensor::from_ints({0, 1, 2}, {3})), Error);
  EXPECT_THROW(rotary_embedding(Tensor::zeros({1, 2, 3, 5})), Error);  // odd head dimension
  EXPECT_THROW(rotary_embedding(Tensor::zeros({2, 3, 4})), Error);     // not 4-dimensional
}

TEST(Rotary, StridedInputFromFusedProjection) {
  // q as a slice of a fused [B, T, 3, H, D] projection: read through its strides, no copy.
  const std::int64_t B = 2, T = 6, H = 2, D = 16;
  const auto qkv = random_floats(B * T * 3 * H * D, 3);
  const Tensor q = Tensor::from_floats(qkv, {B, T, 3, H, D}).select(2, 0);
  ASSERT_FALSE(q.is_contiguous());
  const Tensor expected = rotary_embedding(Tensor::from_floats(q.to_host_floats(), {B, T, H, D}), 2);
  const Tensor y = rotary_embedding(q, 2);
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_EQ(y.to_host_floats(), expected.to_host_floats());
}

TEST(Rotary, BackwardIsTheInverseRotation) {
  for (bool bthd : {true, false}) {
    const RotaryLayout layout = bthd ? RotaryLayout::BTHD : RotaryLayout::BHTD;
    testing::gradcheck([layout](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 3, 10000.0f, layout); },
                       {testing::random_tensor({2, 3, 2, 8}, 4)});
  }
  // The gradient of sum(y * w) is R^-1 w: rotating it forward again gives w back.
  const std::int64_t B = 1, T = 9, H = 2, D = 8;
  const auto w = random_floats(B * T * H * D, 5);
  const auto r = testing::forward_backward([](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 4); },
                                           {testing::random_tensor({B, T, H, D}, 6)}, {true}, w);
  expect_close(rotary_embedding(Tensor::from_floats(r.grads[0], {B, T, H, D}), 4).to_host_floats(), w, 1e-5, 1e-5,
               "R R^-1 w");
}

// Documented tolerance: within 2^-7 (bf16) / 2^-10 (f16) of max(1, |value|) of the f32 result on
// the same rounded inputs.
TEST(Rotary, HalfPrecisionMatchesFloat) {
  const std::int64_t B = 2, T = 7, H = 3, D = 16;
  for (DType dt : {DType::bf16, DType::f16}) {
    const double tol = dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    const auto xv = testing::rounded_to(random_floats(B * T * H * D, 7, -2.0f, 2.0f), dt);
    const auto w = testing::rounded_to(random_floats(B * T * H * D, 8), dt);
    auto run = [&](DType d) {
      return testing::forward_backward([](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 11); },
                                       {Tensor::from_floats(xv, {B, T, H, D}, d)}, {true}, w);
    };
    const auto half = run(dt), full = run(DType::f32);
    expect_close(half.output, full.output, tol, tol, std::string("rope ") + dtype_name(dt));
    expect_close(half.grads[0], full.grads[0], tol, tol, std::string("rope grad ") + dtype_name(dt));
  }
}

}  // namespace
}  // namespace bmt
