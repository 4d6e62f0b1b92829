#include "index_math.hpp"

namespace bmt::kernels {

namespace {
std::int64_t product(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}
}  // namespace

OffsetMap strided_map(const Tensor& t) {
  OffsetMap m;
  if (t.is_contiguous()) return m;
  BMT_REQUIRE(t.dim() <= kMaxIndexDims, "strided kernels: expected at most " << kMaxIndexDims
                                            << " dimensions, found " << t.dim() << " in " << to_string(t.shape()));
  m.mode = OffsetMap::strided;
  m.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < m.ndim; ++d) {
    m.shape[d] = t.shape()[d];
    m.strides[d] = t.strides()[d];
  }
  return m;
}

OffsetMap broadcast_map(const Shape& operand, const Shape& out) {
  OffsetMap m;
  if (operand == out) return m;
  const std::size_t nd = out.size();
  BMT_REQUIRE(operand.size() <= nd, "broadcast: expected an operand of at most " << nd << " dimensions, found "
                                        << to_string(operand));
  // The operand right-aligned against `out`, with size 1 where it is missing or stretched.
  Shape aligned(nd, 1);
  for (std::size_t i = 0; i < operand.size(); ++i) aligned[nd - operand.size() + i] = operand[i];
  std::size_t first_kept = nd, last_kept = 0;  // range of dimensions the operand does not stretch
  bool any_kept = false;
  for (std::size_t d = 0; d < nd; ++d) {
    BMT_REQUIRE(aligned[d] == out[d] || aligned[d] == 1,
                "broadcast: cannot stretch " << to_string(operand) << " to " << to_string(out));
    if (aligned[d] == out[d] && out[d] != 1) {
      if (!any_kept) first_kept = d;
      last_kept = d;
      any_kept = true;
    }
  }
  if (!any_kept) {  // a single value repeated
    m.mode = OffsetMap::period;
    m.divisor = 1;
    return m;
  }
  bool kept_contiguous_block = true;
  for (std::size_t d = first_kept; d <= last_kept; ++d)
    kept_contiguous_block = kept_contiguous_block && (aligned[d] == out[d]);
  if (kept_contiguous_block && last_kept + 1 == nd) {
    m.mode = OffsetMap::period;
    m.divisor = product(out, first_kept, nd);
    return m;
  }
  if (kept_contiguous_block && first_kept == 0) {
    m.mode = OffsetMap::run;
    m.divisor = product(out, last_kept + 1, nd);
    return m;
  }
  BMT_REQUIRE(nd <= static_cast<std::size_t>(kMaxIndexDims),
              "broadcast: expected at most " << kMaxIndexDims << " dimensions, found " << to_string(out));
  m.mode = OffsetMap::strided;
  m.ndim = static_cast<int>(nd);
  std::int64_t stride = 1;
  for (std::size_t d = nd; d-- > 0;) {
    m.shape[d] = out[d];
    m.strides[d] = aligned[d] == 1 ? 0 : stride;
    stride *= aligned[d];
  }
  return m;
}

}  // namespace bmt::kernels
