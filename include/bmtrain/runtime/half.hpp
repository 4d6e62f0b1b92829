#pragma once
// 16-bit float storage types usable in host code and in Kokkos kernels on every backend.
// Kokkos 3.4's host build has no bhalf_t and its half_t is a plain float, so these are the
// project's own: the bits are stored, arithmetic happens in float, conversions round to nearest even.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt {

namespace detail {
KOKKOS_INLINE_FUNCTION std::uint32_t float_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
KOKKOS_INLINE_FUNCTION float bits_float(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

struct bf16_t {
  std::uint16_t bits;

  KOKKOS_INLINE_FUNCTION static std::uint16_t from_float(float f) {
    std::uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<std::uint16_t>(u >> 16);
  }
  KOKKOS_INLINE_FUNCTION static float to_float(std::uint16_t b) {
    return detail::bits_float(static_cast<std::uint32_t>(b) << 16);
  }
  KOKKOS_DEFAULTED_FUNCTION bf16_t() = default;
  KOKKOS_INLINE_FUNCTION explicit bf16_t(float f) : bits(from_float(f)) {}
  KOKKOS_INLINE_FUNCTION operator float() const { return to_float(bits); }
};

struct f16_t {
  std::uint16_t bits;

  KOKKOS_INLINE_FUNCTION static std::uint16_t from_float(float f) {
    const std::uint32_t u = detail::float_bits(f);
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    const std::uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
    if (absu >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (absu < 0x38800000u) {  // subnormal or zero in f16: scale into the integer grid, round
      const float a = detail::bits_float(absu) * 16777216.0f;  // 2^24 = 1 / smallest subnormal
      std::uint32_t q = static_cast<std::uint32_t>(a);
      const float rem = a - static_cast<float>(q);
      if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
      return static_cast<std::uint16_t>(sign | q);
    }
    std::uint32_t m = absu + 0xfffu + ((absu >> 13) & 1u);  // round mantissa to 10 bits, ties even
    return static_cast<std::uint16_t>(sign | (((m >> 13) - (112u << 10)) & 0x7fffu));
  }
  KOKKOS_INLINE_FUNCTION static float to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    const std::uint32_t man = h & 0x3ffu;
    if (exp == 0) {
      const float v = static_cast<float>(man) * 5.9604644775390625e-8f;  // man * 2^-24
      return (sign ? -v : v);
    }
    if (exp == 31) return detail::bits_float(sign | 0x7f800000u | (man << 13));
    return detail::bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  }
  KOKKOS_DEFAULTED_FUNCTION f16_t() = default;
  KOKKOS_INLINE_FUNCTION explicit f16_t(float f) : bits(from_float(f)) {}
  KOKKOS_INLINE_FUNCTION operator float() const { return to_float(bits); }
};

static_assert(sizeof(bf16_t) == 2 && sizeof(f16_t) == 2, "16-bit storage types must be 2 bytes");

// The DType of a C++ element type.
template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16_t>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16_t>() { return DType::f16; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }

}  // namespace bmt
