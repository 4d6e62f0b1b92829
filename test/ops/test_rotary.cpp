// Rotary embedding: forward against a float64 reference in both layouts, with offsets and explicit
// positions; strided input; backward against finite differences and as the inverse rotation;
// bf16/f16 against f32.
#include <gtest/gtest.h>

#include <cmath>

#include "bmtrain/ops/rotary.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/gradcheck.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

using testing::expect_close;
using testing::random_floats;

// x in [B, T, H, D] (bthd) or [B, H, T, D]; pos(b, t) gives the position, frequency(i) the
// rotation frequency of pair i.
template <class Pos, class Frequency>
std::vector<double> rope_reference_at(const std::vector<float>& x, std::int64_t B, std::int64_t T, std::int64_t H,
                                      std::int64_t D, bool bthd, Frequency frequency, Pos pos) {
  std::vector<double> y(x.size());
  const std::int64_t half = D / 2;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t base = bthd ? ((b * T + t) * H + h) * D : ((b * H + h) * T + t) * D;
        for (std::int64_t i = 0; i < half; ++i) {
          const double angle = pos(b, t) * frequency(i);
          const double x1 = x[base + i], x2 = x[base + i + half];
          y[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          y[base + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
  return y;
}

template <class Pos>
std::vector<double> rope_reference(const std::vector<float>& x, std::int64_t B, std::int64_t T, std::int64_t H,
                                   std::int64_t D, bool bthd, double theta, Pos pos) {
  return rope_reference_at(
      x, B, T, H, D, bthd, [&](std::int64_t i) { return std::pow(theta, -2.0 * i / D); }, pos);
}

// Llama 3's frequencies as transformers' _compute_llama3_parameters writes them.
double llama3_frequency(std::int64_t i, std::int64_t D, double theta, double factor, double low, double high,
                        double original) {
  const double f = 1.0 / std::pow(theta, 2.0 * i / D);
  const double wavelength = 2.0 * M_PI / f;
  const double scaled = wavelength > original / low ? f / factor : f;
  const double smooth = (original / wavelength - low) / (high - low);
  const bool medium = !(wavelength < original / high) && !(wavelength > original / low);
  return medium ? (1.0 - smooth) * scaled / factor + smooth * scaled : scaled;
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

// Llama 3.2's rope_scaling (factor 32, low_freq_factor 1, high_freq_factor 4, 8192 original
// positions) at its theta and head size: the 32 frequencies fall in all three bands (kept, blended,
// divided by the factor).
TEST(Rotary, Llama3FrequencyScaling) {
  const std::int64_t B = 1, T = 37, H = 2, D = 64;
  const RotaryFrequencies llama3{500000.0f, 32.0f, 1.0f, 4.0f, 8192.0f};
  int kept = 0, blended = 0, divided = 0;
  for (std::int64_t i = 0; i < D / 2; ++i) {
    const double f = 1.0 / std::pow(500000.0, 2.0 * i / D), w = 2 * M_PI / f;
    (w < 2048 ? kept : w > 8192 ? divided : blended)++;
    EXPECT_NEAR(llama3.frequency(i, D), llama3_frequency(i, D, 500000.0, 32.0, 1.0, 4.0, 8192.0),
                2e-6 * llama3_frequency(i, D, 500000.0, 32.0, 1.0, 4.0, 8192.0))
        << "frequency " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(blended, 0);
  EXPECT_GT(divided, 0);
  const auto xv = random_floats(B * T * H * D, 9);
  const std::int64_t offset = 900;  // positions 900..936: f32 angles within ~1e-4 rad
  const Tensor y = rotary_embedding(Tensor::from_floats(xv, {B, T, H, D}), offset, llama3);
  const auto ref = rope_reference_at(
      xv, B, T, H, D, true,
      [&](std::int64_t i) { return llama3_frequency(i, D, 500000.0, 32.0, 1.0, 4.0, 8192.0); },
      [&](std::int64_t, std::int64_t t) { return double(offset + t); });
  expect_close(y.to_host_floats(), ref, 2e-4, 1e-5, "llama3 scaling");
  // Unscaled frequencies give other values: the scaling is applied.
  const Tensor plain = rotary_embedding(Tensor::from_floats(xv, {B, T, H, D}), offset, 500000.0f);
  EXPECT_NE(plain.to_host_floats(), y.to_host_floats());
  testing::gradcheck([&](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 5, llama3); },
                     {testing::random_tensor({1, 3, 2, 64}, 10)});
  EXPECT_THROW(rotary_embedding(Tensor::zeros({1, 2, 1, 8}), 0, RotaryFrequencies{10000.0f, 8.0f, 4.0f, 1.0f, 8192.0f}),
               Error);  // high_freq_factor below low_freq_factor
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
