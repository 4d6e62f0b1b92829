#include "element_conversion.hpp"

#include <cstdint>
#include <cstring>

#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/half.hpp"

namespace bmt::io::detail {

namespace {

bool is_integer(DType t) { return !is_floating(t); }

// Value range of an integer dtype, as [min, max] in int64 (u64 does not occur in DType).
void integer_range(DType t, std::int64_t& lo, std::int64_t& hi) {
  switch (t) {
    case DType::u8: lo = 0; hi = 255; return;
    case DType::u16: lo = 0; hi = 65535; return;
    case DType::i32: lo = INT32_MIN; hi = INT32_MAX; return;
    default: lo = INT64_MIN; hi = INT64_MAX; return;
  }
}

double load(const void* p, DType t, std::size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_t::to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::f16: return f16_t::to_float(static_cast<const std::uint16_t*>(p)[i]);
    default: break;
  }
  BMT_REQUIRE(false, "element conversion: expected a floating dtype, found " << dtype_name(t));
}

std::int64_t load_int(const void* p, DType t, std::size_t i) {
  switch (t) {
    case DType::u8: return static_cast<const std::uint8_t*>(p)[i];
    case DType::u16: return static_cast<const std::uint16_t*>(p)[i];
    case DType::i32: return static_cast<const std::int32_t*>(p)[i];
    case DType::i64: return static_cast<const std::int64_t*>(p)[i];
    default: break;
  }
  BMT_REQUIRE(false, "element conversion: expected an integer dtype, found " << dtype_name(t));
}

void store_int(void* p, DType t, std::size_t i, std::int64_t v) {
  switch (t) {
    case DType::u8: static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v); return;
    case DType::u16: static_cast<std::uint16_t*>(p)[i] = static_cast<std::uint16_t>(v); return;
    case DType::i32: static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v); return;
    case DType::i64: static_cast<std::int64_t*>(p)[i] = v; return;
    default: break;
  }
  BMT_REQUIRE(false, "element conversion: expected an integer dtype, found " << dtype_name(t));
}

}  // namespace

bool is_lossless(DType from, DType to) {
  if (from == to) return true;
  if (is_floating(from) != is_floating(to)) return false;
  if (is_floating(from)) return to == DType::f32;  // bf16 and f16 both widen exactly to f32
  std::int64_t flo, fhi, tlo, thi;
  integer_range(from, flo, fhi);
  integer_range(to, tlo, thi);
  return tlo <= flo && fhi <= thi;
}

bool is_convertible(DType from, DType to) { return is_lossless(from, to) || (is_floating(from) && is_floating(to)); }

void convert(const void* src, DType from, void* dst, DType to, std::size_t n) {
  BMT_REQUIRE(is_convertible(from, to), "element conversion: expected convertible dtypes, found "
                                            << dtype_name(from) << " -> " << dtype_name(to));
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(from));
    return;
  }
  if (is_integer(from)) {
    for (std::size_t i = 0; i < n; ++i) store_int(dst, to, i, load_int(src, from, i));
    return;
  }
  // Floating: through float, which holds bf16 and f16 exactly (a single rounding to the target).
  switch (to) {
    case DType::f32:
      for (std::size_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = static_cast<float>(load(src, from, i));
      return;
    case DType::bf16:
      for (std::size_t i = 0; i < n; ++i)
        static_cast<std::uint16_t*>(dst)[i] = bf16_t::from_float(static_cast<float>(load(src, from, i)));
      return;
    case DType::f16:
      for (std::size_t i = 0; i < n; ++i)
        static_cast<std::uint16_t*>(dst)[i] = f16_t::from_float(static_cast<float>(load(src, from, i)));
      return;
    default: break;
  }
}

}  // namespace bmt::io::detail
