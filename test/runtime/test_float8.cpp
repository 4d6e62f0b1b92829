// f8e4m3_t and f8e5m2_t against references computed another way (common/float8_reference.hpp):
// every code decoded from its bit fields with ldexp in double, and encoding as the nearest entry of
// that decoded table instead of float8.hpp's bit arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "bmtrain/runtime/float8.hpp"
#include "common/float8_reference.hpp"

namespace bmt {
namespace {

using testing::Float8Format;
using testing::kE4M3;
using testing::kE5M2;
double decode(const Float8Format& f, std::uint8_t b) { return testing::float8_decode(f, b); }

template <class F>
void expect_encodes_like_reference(const Float8Format& f, float x) {
  const std::uint8_t got = F::from_float(x);
  if (std::isnan(x)) {
    EXPECT_TRUE(std::isnan(decode(f, got))) << f.name << ": from_float(NaN) = 0x" << std::hex << int(got);
    return;
  }
  const std::uint8_t want = testing::float8_encode(f, x);
  EXPECT_EQ(int(got), int(want)) << f.name << ": from_float(" << x << ") = " << decode(f, got) << ", expected "
                                 << decode(f, want);
}

template <class F>
void check_every_code(const Float8Format& f) {
  int nans = 0, infinities = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const double want = decode(f, code);
    const float got = F::to_float(code);
    if (std::isnan(want)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << f.name << " code 0x" << std::hex << c;
      EXPECT_TRUE(std::isnan(F::to_float(F::from_float(got))));
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << f.name << " code 0x" << std::hex << c;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << f.name << " code 0x" << std::hex << c;
    if (std::isinf(want)) {  // saturating: an infinity encodes as the largest finite value
      ++infinities;
      EXPECT_EQ(int(F::from_float(got)), int((code & 0x80) | F::kMaxCode)) << f.name;
      continue;
    }
    EXPECT_EQ(int(F::from_float(got)), c) << f.name << ": code 0x" << std::hex << c << " does not round-trip";
  }
  EXPECT_EQ(nans, f.ieee_specials ? 6 : 2) << f.name;
  EXPECT_EQ(infinities, f.ieee_specials ? 2 : 0) << f.name;
}

TEST(Float8, EveryE4M3CodeDecodesFromItsFieldsAndRoundTrips) { check_every_code<f8e4m3_t>(kE4M3); }
TEST(Float8, EveryE5M2CodeDecodesFromItsFieldsAndRoundTrips) { check_every_code<f8e5m2_t>(kE5M2); }

TEST(Float8, LargestValuesAndSpecialCodes) {
  EXPECT_EQ(f8e4m3_t::max(), 448.0f);
  EXPECT_EQ(f8e5m2_t::max(), 57344.0f);
  EXPECT_EQ(float8_max(DType::f8e4m3), 448.0f);
  EXPECT_EQ(float8_max(DType::f8e5m2), 57344.0f);
  EXPECT_EQ(int(f8e4m3_t::from_float(std::numeric_limits<float>::quiet_NaN())), 0x7f);
  EXPECT_TRUE(std::isinf(f8e5m2_t::to_float(0x7c)));
  EXPECT_TRUE(std::isinf(f8e5m2_t::to_float(0xfc)) && f8e5m2_t::to_float(0xfc) < 0);
  EXPECT_EQ(f8e4m3_t::to_float(0x7e), 448.0f);  // S.1111.110: a number in e4m3
  EXPECT_THROW(float8_max(DType::bf16), Error);
}

// Halfway between two neighbours goes to the one whose code is even, in normals and subnormals.
TEST(Float8, TiesRoundToEven) {
  // e4m3 around 1: neighbours 1, 1.125, 1.25 (codes 0x38, 0x39, 0x3a).
  EXPECT_EQ(int(f8e4m3_t::from_float(1.0625f)), 0x38);
  EXPECT_EQ(int(f8e4m3_t::from_float(1.1875f)), 0x3a);
  EXPECT_EQ(int(f8e4m3_t::from_float(-1.1875f)), 0xba);
  // e4m3 subnormals, quantum 2^-9: 0.5 and 1.5 quanta go to 0 and 2 quanta.
  EXPECT_EQ(int(f8e4m3_t::from_float(std::ldexp(0.5f, -9))), 0x00);
  EXPECT_EQ(int(f8e4m3_t::from_float(std::ldexp(1.5f, -9))), 0x02);
  // 7.5 quanta: between the largest subnormal (7) and the smallest normal (8 quanta, code 0x08).
  EXPECT_EQ(int(f8e4m3_t::from_float(std::ldexp(7.5f, -9))), 0x08);
  // e5m2 around 1: neighbours 1, 1.25, 1.5 (codes 0x3c, 0x3d, 0x3e).
  EXPECT_EQ(int(f8e5m2_t::from_float(1.125f)), 0x3c);
  EXPECT_EQ(int(f8e5m2_t::from_float(1.375f)), 0x3e);
  EXPECT_EQ(int(f8e5m2_t::from_float(std::ldexp(2.5f, -16))), 0x02);
  // Just off a tie rounds to the nearer neighbour.
  EXPECT_EQ(int(f8e4m3_t::from_float(std::nextafter(1.0625f, 2.0f))), 0x39);
  EXPECT_EQ(int(f8e4m3_t::from_float(std::nextafter(1.0625f, 0.0f))), 0x38);
}

TEST(Float8, BeyondTheLargestSaturatesAndNaNStaysNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, 3e38f, inf}) {
    EXPECT_EQ(int(f8e4m3_t::from_float(x)), 0x7e) << x;
    EXPECT_EQ(int(f8e4m3_t::from_float(-x)), 0xfe) << -x;
  }
  for (float x : {57344.0f, 61440.0f, 65536.0f, 1e9f, inf}) {
    EXPECT_EQ(int(f8e5m2_t::from_float(x)), 0x7b) << x;
    EXPECT_EQ(int(f8e5m2_t::from_float(-x)), 0xfb) << -x;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(f8e4m3_t::to_float(f8e4m3_t::from_float(nan))));
  EXPECT_TRUE(std::isnan(f8e5m2_t::to_float(f8e5m2_t::from_float(nan))));
  EXPECT_TRUE(std::isnan(f8e5m2_t::to_float(f8e5m2_t::from_float(-nan))));
  EXPECT_EQ(int(f8e4m3_t::from_float(-0.0f)), 0x80);
  EXPECT_EQ(int(f8e5m2_t::from_float(0.0f)), 0x00);
}

// Every midpoint of neighbouring values and the floats on either side of it, and random floats
// over the whole range (log-uniform magnitudes, both signs), against the table reference.
template <class F>
void check_encoding(const Float8Format& f) {
  const auto codes = testing::float8_finite_positive_codes(f);
  for (std::size_t i = 0; i + 1 < codes.size(); ++i) {
    const float mid = static_cast<float>((decode(f, codes[i]) + decode(f, codes[i + 1])) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      expect_encodes_like_reference<F>(f, x);
      expect_encodes_like_reference<F>(f, -x);
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-30.0f, 20.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(exponent(rng)) * (i % 2 ? -1.0f : 1.0f);
    expect_encodes_like_reference<F>(f, x);
  }
  for (float x : {0.0f, 1e-30f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()})
    expect_encodes_like_reference<F>(f, x);
}

TEST(Float8, E4M3EncodingMatchesTheNearestValue) { check_encoding<f8e4m3_t>(kE4M3); }
TEST(Float8, E5M2EncodingMatchesTheNearestValue) { check_encoding<f8e5m2_t>(kE5M2); }

TEST(Float8, DTypes) {
  EXPECT_EQ(dtype_size(DType::f8e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::f8e5m2), 1u);
  EXPECT_STREQ(dtype_name(DType::f8e4m3), "f8e4m3");
  EXPECT_STREQ(dtype_name(DType::f8e5m2), "f8e5m2");
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::f8e4m3);
  EXPECT_EQ(parse_dtype("F8E5M2"), DType::f8e5m2);
  EXPECT_TRUE(is_float8(DType::f8e4m3) && is_float8(DType::f8e5m2) && !is_float8(DType::u8));
  EXPECT_FALSE(is_floating(DType::f8e4m3));  // no kernel computes in float8, no gradient flows through it
  EXPECT_EQ(dtype_of<f8e4m3_t>(), DType::f8e4m3);
  EXPECT_EQ(dtype_of<f8e5m2_t>(), DType::f8e5m2);
}

}  // namespace
}  // namespace bmt
