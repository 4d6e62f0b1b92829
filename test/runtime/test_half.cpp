// bf16_t and f16_t conversions against references computed another way: decoding from the bit
// fields with ldexp in double, and encoding by rounding |x| / quantum to an integer in double
// (std::nearbyint, ties to even) instead of the bit arithmetic of half.hpp.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "bmtrain/runtime/half.hpp"

namespace bmt {
namespace {

struct Format {
  int man_bits;  // stored mantissa bits
  int emin;      // exponent of the smallest normal
  int emax;      // exponent of the largest finite
};
constexpr Format kF16{10, -14, 15};
constexpr Format kBF16{7, -126, 127};

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The value of a 16-bit pattern, from its fields.
double decode(const Format& fmt, std::uint16_t h) {
  const int exp_bits = 15 - fmt.man_bits;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const bool neg = h >> 15;
  const int e = (h >> fmt.man_bits) & ((1 << exp_bits) - 1);
  const int m = h & ((1 << fmt.man_bits) - 1);
  double v;
  if (e == (1 << exp_bits) - 1) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, fmt.emin - fmt.man_bits);
  else v = std::ldexp((1 << fmt.man_bits) + m, e - bias - fmt.man_bits);
  return neg ? -v : v;
}

// The value x rounds to in the format: round-to-nearest-even on the grid of x's binade.
double round_reference(const Format& fmt, double x) {
  if (std::isnan(x) || std::isinf(x)) return x;
  const double a = std::fabs(x);
  int e = fmt.emin;
  if (a != 0) {
    int exp2;
    std::frexp(a, &exp2);  // a = f * 2^exp2, f in [0.5, 1)
    e = std::max(exp2 - 1, fmt.emin);
  }
  const double quantum = std::ldexp(1.0, e - fmt.man_bits);
  double r = std::nearbyint(a / quantum) * quantum;  // a / quantum is exact: a has 24 bits
  if (r >= std::ldexp(1.0, fmt.emax + 1)) r = std::numeric_limits<double>::infinity();
  return std::signbit(x) ? -r : r;
}

template <class Half>
void expect_matches_reference(const Format& fmt, float x) {
  const std::uint16_t h = Half::from_float(x);
  const double got = decode(fmt, h), want = round_reference(fmt, x);
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << "from_float(" << x << ") = 0x" << std::hex << h;
    return;
  }
  EXPECT_EQ(got, want) << "from_float(" << x << ", bits 0x" << std::hex << float_to_bits(x) << ") = 0x" << h;
  EXPECT_EQ(std::signbit(got), std::signbit(want)) << "sign of from_float(" << x << ")";
}

TEST(Half, RoundingModeIsToNearest) { ASSERT_EQ(std::fegetround(), FE_TONEAREST); }

TEST(Half, F16EveryPatternDecodesAndRoundTrips) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_t::to_float(static_cast<std::uint16_t>(h));
    const double want = decode(kF16, static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      const std::uint16_t back = f16_t::from_float(f);
      ASSERT_TRUE(std::isnan(decode(kF16, back))) << std::hex << h << " -> " << back;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    ASSERT_EQ(std::signbit(f), std::signbit(want)) << std::hex << h;
    ASSERT_EQ(f16_t::from_float(f), h) << "round trip of 0x" << std::hex << h;
  }
}

TEST(Half, BF16EveryPatternDecodesAndRoundTrips) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_t::to_float(static_cast<std::uint16_t>(h));
    const double want = decode(kBF16, static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(std::isnan(decode(kBF16, bf16_t::from_float(f)))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    ASSERT_EQ(bf16_t::from_float(f), h) << "round trip of 0x" << std::hex << h;
  }
}

// Random floats: uniform bit patterns (every exponent, subnormals, inf, NaN), values in and around
// the f16 range, and exact ties halfway between two neighbours in each format.
TEST(Half, RandomFloatsRoundToNearestEven) {
  std::mt19937_64 rng(20261130);
  for (int i = 0; i < 400000; ++i) {
    const std::uint64_t r = rng();
    float x;
    switch (i % 4) {
      case 0: x = bits_to_float(static_cast<std::uint32_t>(r)); break;
      case 1: {  // exponents from f16's subnormals to past its overflow
        const int e = static_cast<int>((r >> 32) % 48) - 30;
        x = std::ldexp(1.0f + static_cast<float>(r & 0xffffff) * 0x1p-24f, e);
        if (r >> 63) x = -x;
        break;
      }
      case 2: {  // f16 ties: the 13 bits below f16's mantissa are exactly 1000...0
        const std::uint32_t biased = static_cast<std::uint32_t>((r >> 32) % 44) + 127 - 27;  // 2^-27 .. 2^16
        const std::uint32_t man = (static_cast<std::uint32_t>(r) & 0x7fe000u) | 0x1000u;
        x = bits_to_float(static_cast<std::uint32_t>(r >> 63) << 31 | biased << 23 | man);
        break;
      }
      default: {  // bf16 ties: the 16 bits below bf16's mantissa are exactly 1000...0
        x = bits_to_float((static_cast<std::uint32_t>(r) & ~0xffffu) | 0x8000u);
        break;
      }
    }
    expect_matches_reference<f16_t>(kF16, x);
    expect_matches_reference<bf16_t>(kBF16, x);
    if (HasFailure()) break;  // one report, not thousands
  }
}

TEST(Half, F16SpecialValues) {
  EXPECT_EQ(f16_t::from_float(0.0f), 0x0000);
  EXPECT_EQ(f16_t::from_float(-0.0f), 0x8000);
  EXPECT_EQ(f16_t::from_float(1.0f), 0x3c00);
  EXPECT_EQ(f16_t::from_float(-2.0f), 0xc000);
  EXPECT_EQ(f16_t::from_float(65504.0f), 0x7bff);          // largest finite
  EXPECT_EQ(f16_t::from_float(65519.99f), 0x7bff);         // below the midpoint to 2^16
  EXPECT_EQ(f16_t::from_float(65520.0f), 0x7c00);          // the midpoint rounds to even: inf
  EXPECT_EQ(f16_t::from_float(1e10f), 0x7c00);             // overflow
  EXPECT_EQ(f16_t::from_float(-1e10f), 0xfc00);
  EXPECT_EQ(f16_t::from_float(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f16_t::from_float(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(std::isnan(f16_t::to_float(f16_t::from_float(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(f16_t::to_float(f16_t::from_float(bits_to_float(0x7f800001u)))));  // signalling NaN
  EXPECT_EQ(f16_t::from_float(0x1p-14f), 0x0400);          // smallest normal
  EXPECT_EQ(f16_t::from_float(0x1p-24f), 0x0001);          // smallest subnormal
  EXPECT_EQ(f16_t::from_float(0x1p-25f), 0x0000);          // half of it: tie to even (0)
  EXPECT_EQ(f16_t::from_float(0x1.8p-25f), 0x0001);        // above the tie
  EXPECT_EQ(f16_t::from_float(0x1.8p-24f), 0x0002);        // 1.5 quanta: tie to even (2)
  EXPECT_EQ(f16_t::from_float(0x1.ffcp-15f), 0x0400);      // largest subnormal's upper tie rounds up to normal
  EXPECT_EQ(f16_t::from_float(0x3ffp-24f), 0x03ff);        // largest subnormal
  EXPECT_EQ(f16_t::from_float(-0x1p-26f), 0x8000);         // underflow keeps the sign
  EXPECT_EQ(f16_t::from_float(1.0f + 0x1p-11f), 0x3c00);   // tie to even (down)
  EXPECT_EQ(f16_t::from_float(1.0f + 0x3p-11f), 0x3c02);   // tie to even (up)
  EXPECT_EQ(f16_t::to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_t::to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_t::to_float(0x7c00)));
}

TEST(Half, BF16SpecialValues) {
  EXPECT_EQ(bf16_t::from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16_t::from_float(-0.0f), 0x8000);
  EXPECT_EQ(bf16_t::from_float(1.0f + 0x1p-8f), 0x3f80);   // tie to even (down)
  EXPECT_EQ(bf16_t::from_float(1.0f + 0x3p-8f), 0x3f82);   // tie to even (up)
  EXPECT_EQ(bf16_t::from_float(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the largest finite
  EXPECT_EQ(bf16_t::from_float(0x1.fep127f), 0x7f7f);      // largest finite bf16
  EXPECT_EQ(bf16_t::from_float(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bf16_t::from_float(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(bf16_t::from_float(0x1p-133f), 0x0001);        // smallest bf16 subnormal
  EXPECT_EQ(bf16_t::from_float(0x1p-149f), 0x0000);        // float's smallest subnormal underflows
  const std::uint16_t nan = bf16_t::from_float(bits_to_float(0x7f800001u));  // signalling NaN stays NaN
  EXPECT_TRUE(std::isnan(bf16_t::to_float(nan))) << std::hex << nan;
  EXPECT_TRUE(std::isnan(bf16_t::to_float(bf16_t::from_float(-std::numeric_limits<float>::quiet_NaN()))));
}

// The storage types convert through float and behave like it.
TEST(Half, StorageTypesConvertImplicitly) {
  const bf16_t b(3.140625f);
  const f16_t h(0.1f);
  EXPECT_EQ(static_cast<float>(b), 3.140625f);
  EXPECT_EQ(static_cast<float>(h), f16_t::to_float(f16_t::from_float(0.1f)));
  EXPECT_NEAR(static_cast<float>(h), 0.1f, 0.1f * 0x1p-11f);
}

}  // namespace
}  // namespace bmt
