#pragma once
// 8-bit float storage types, the two formats of FP8 matrix products (OCP 8-bit floating point,
// as Hopper's tensor cores read them), usable in host code and in Kokkos kernels on every backend:
//
//   f8e4m3_t  "E4M3FN": 4 exponent bits (bias 7), 3 mantissa bits, largest 448; no infinities,
//             S.1111.111 is NaN (the other S.1111.xxx codes are numbers).
//   f8e5m2_t  5 exponent bits (bias 15), 2 mantissa bits, largest 57344; infinities and NaNs as in
//             IEEE 754 (S.11111.00 infinite, S.11111.xx NaN).
//
// Conversion from float rounds to nearest even and saturates: a value beyond the largest finite
// one, infinities included, becomes the largest finite value of its sign (what FP8 training does
// with a scaled tensor, and CUDA's __NV_SATFINITE conversion); NaN stays NaN. Conversion to float
// is exact.
#include <Kokkos_Core.hpp>
#include <cstdint>

#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/half.hpp"

namespace bmt {

// IeeeSpecials: the top exponent holds infinities and NaNs (e5m2); otherwise only the all-ones
// code is NaN and the top exponent's other codes are finite (e4m3).
template <int ExpBits, int ManBits, bool IeeeSpecials>
struct float8_t {
  static constexpr int kBias = (1 << (ExpBits - 1)) - 1;
  static constexpr std::uint32_t kTopExp = (1u << ExpBits) - 1;
  static constexpr std::uint32_t kManMask = (1u << ManBits) - 1;
  // The largest finite code (positive) and its value's float bits.
  static constexpr std::uint8_t kMaxCode = static_cast<std::uint8_t>(
      IeeeSpecials ? ((kTopExp - 1) << ManBits) | kManMask : (kTopExp << ManBits) | (kManMask - 1));
  static constexpr std::uint32_t kMaxBits =
      ((127u + (kMaxCode >> ManBits) - kBias) << 23) | ((kMaxCode & kManMask) << (23 - ManBits));
  static constexpr std::uint8_t kNaNCode = static_cast<std::uint8_t>(
      IeeeSpecials ? (kTopExp << ManBits) | (1u << (ManBits - 1)) : (kTopExp << ManBits) | kManMask);
  // Float bits of the smallest normal value, 2^(1 - bias).
  static constexpr std::uint32_t kMinNormalBits = (127u + 1 - kBias) << 23;

  std::uint8_t bits;

  KOKKOS_INLINE_FUNCTION static float max() { return detail::bits_float(kMaxBits); }

  KOKKOS_INLINE_FUNCTION static std::uint8_t from_float(float f) {
    const std::uint32_t u = detail::float_bits(f);
    const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
    const std::uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return static_cast<std::uint8_t>(sign | kNaNCode);
    if (absu > kMaxBits) return static_cast<std::uint8_t>(sign | kMaxCode);  // saturate, infinities too
    if (absu < kMinNormalBits) {
      // Subnormal or zero: |f| / (the subnormal quantum 2^(1 - bias - ManBits)), exact in float,
      // rounded to an integer, ties to even. A result of 2^ManBits is the smallest normal's code.
      const float a = detail::bits_float(absu) * detail::bits_float((127u + kBias - 1 + ManBits) << 23);
      std::uint32_t q = static_cast<std::uint32_t>(a);
      const float rem = a - static_cast<float>(q);
      if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
      return static_cast<std::uint8_t>(sign | q);
    }
    // Normal: round float's 23 mantissa bits to ManBits, ties to even (a carry moves into the
    // exponent), then re-bias the exponent. The saturation above keeps the result finite.
    constexpr int kShift = 23 - ManBits;
    const std::uint32_t r = absu + ((1u << (kShift - 1)) - 1) + ((absu >> kShift) & 1u);
    return static_cast<std::uint8_t>(sign | ((r >> kShift) - ((127u - kBias) << ManBits)));
  }

  KOKKOS_INLINE_FUNCTION static float to_float(std::uint8_t b) {
    const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
    const std::uint32_t exp = (b >> ManBits) & kTopExp;
    const std::uint32_t man = b & kManMask;
    if (exp == kTopExp && (IeeeSpecials || man == kManMask))
      return detail::bits_float(sign | 0x7f800000u | (man ? 0x400000u : 0u));  // NaN, or (e5m2) infinite
    if (exp == 0) {
      const float v = static_cast<float>(man) * detail::bits_float((127u + 1 - kBias - ManBits) << 23);
      return sign ? -v : v;
    }
    return detail::bits_float(sign | ((exp + 127u - kBias) << 23) | (man << (23 - ManBits)));
  }

  KOKKOS_DEFAULTED_FUNCTION float8_t() = default;
  KOKKOS_INLINE_FUNCTION explicit float8_t(float f) : bits(from_float(f)) {}
  KOKKOS_INLINE_FUNCTION operator float() const { return to_float(bits); }
};

using f8e4m3_t = float8_t<4, 3, false>;
using f8e5m2_t = float8_t<5, 2, true>;

static_assert(sizeof(f8e4m3_t) == 1 && sizeof(f8e5m2_t) == 1, "8-bit storage types must be 1 byte");
static_assert(f8e4m3_t::kMaxCode == 0x7e && f8e4m3_t::kMaxBits == 0x43e00000u, "e4m3's largest is 448");
static_assert(f8e5m2_t::kMaxCode == 0x7b && f8e5m2_t::kMaxBits == 0x47600000u, "e5m2's largest is 57344");

template <> constexpr DType dtype_of<f8e4m3_t>() { return DType::f8e4m3; }
template <> constexpr DType dtype_of<f8e5m2_t>() { return DType::f8e5m2; }

// The largest finite value of a float8 dtype.
inline float float8_max(DType format) {
  BMT_REQUIRE(is_float8(format), "float8_max: expected f8e4m3 or f8e5m2, found " << dtype_name(format));
  return format == DType::f8e4m3 ? f8e4m3_t::max() : f8e5m2_t::max();
}

}  // namespace bmt
