#pragma once
// Index arithmetic shared by the strided and broadcasting kernels: flat 64-bit ranges on the compute
// stream, and the map from an element's logical (row-major) position to its storage offset in an
// operand that is strided or broadcast. Everything here is copied by value into kernels.
#include "bmtrain/kernels/common.hpp"

namespace bmt::kernels {

constexpr int kMaxIndexDims = 8;

using FlatRange = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;
inline FlatRange flat_range(std::int64_t n) { return FlatRange(space(), 0, n); }

// Storage offset of the i-th element (logical order over `shape`) of an operand with `strides`,
// where a stride of 0 repeats the operand along that dimension. The common layouts skip the
// per-dimension division: identity (same shape, contiguous), period (an operand equal to the
// trailing dimensions, repeated), and run (an operand constant along the trailing dimensions).
struct OffsetMap {
  enum Mode : int { identity, period, run, strided };
  int mode = identity;
  std::int64_t divisor = 1;  // period length or run length
  int ndim = 0;
  std::int64_t shape[kMaxIndexDims] = {};
  std::int64_t strides[kMaxIndexDims] = {};

  KOKKOS_INLINE_FUNCTION std::int64_t operator()(std::int64_t i) const {
    if (mode == identity) return i;
    if (mode == period) return i % divisor;
    if (mode == run) return i / divisor;
    std::int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      off += (i % shape[d]) * strides[d];
      i /= shape[d];
    }
    return off;
  }
};

// The map for a tensor of any strides, read in its own logical order.
OffsetMap strided_map(const Tensor& t);
// The map for a contiguous operand of shape `operand` broadcast (NumPy rules) to `out`.
OffsetMap broadcast_map(const Shape& operand, const Shape& out);

}  // namespace bmt::kernels
