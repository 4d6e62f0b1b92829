#pragma once
// PartMap's index computation, callable from host code and from device kernels alike (the
// initializers compute each element's whole index inside their fill kernel).
#include <Kokkos_Core.hpp>

#include "bmtrain/nn/part_map.hpp"

namespace bmt::detail {

KOKKOS_INLINE_FUNCTION std::int64_t whole_index(const PartMap& m, std::int64_t i) {
  if (m.identity) return i;
  const std::int64_t row = m.local_extent * m.inner;
  const std::int64_t o = i / row;
  const std::int64_t rem = i - o * row;
  const std::int64_t j = rem / m.inner;
  const std::int64_t k = rem - j * m.inner;
  int p = 0;
  while (p + 1 < m.parts && m.local_begin[p + 1] <= j) ++p;
  return (o * m.whole_extent + m.whole_begin[p] + (j - m.local_begin[p])) * m.inner + k;
}

}  // namespace bmt::detail
