#include "bmtrain/nn/part_map.hpp"

#include <algorithm>

#include "bmtrain/runtime/error.hpp"
#include "part_index.hpp"

namespace bmt {

PartMap PartMap::of(const TensorParallelSplit& split, const Shape& part_shape) {
  PartMap m;
  if (split.replicated() || split.tp_size == 1) return m;
  const int dim = split.dim;
  BMT_REQUIRE(dim < static_cast<int>(part_shape.size()) && split.whole_shape.size() == part_shape.size(),
              "PartMap: expected a split dimension within a part of the whole's rank "
                  << split.whole_shape.size() << ", found dim " << dim << " of a part " << to_string(part_shape));
  BMT_REQUIRE(!split.parts.empty() && static_cast<int>(split.parts.size()) <= kMaxParts,
              "PartMap: expected 1 to " << kMaxParts << " parts, found " << split.parts.size());
  m.identity = false;
  m.parts = static_cast<int>(split.parts.size());
  for (std::size_t d = dim + 1; d < part_shape.size(); ++d) m.inner *= part_shape[d];
  m.local_extent = part_shape[dim];
  m.whole_extent = split.whole_shape[dim];
  std::int64_t local = 0, whole = 0;
  for (int p = 0; p < m.parts; ++p) {
    const std::int64_t piece = split.parts[p] / split.tp_size;
    m.local_begin[p] = local;
    m.whole_begin[p] = whole + split.tp_rank * piece;
    local += piece;
    whole += split.parts[p];
  }
  m.local_begin[m.parts] = local;
  BMT_REQUIRE(local == m.local_extent && whole == m.whole_extent,
              "PartMap: expected parts summing to the whole's " << m.whole_extent << " and the part's "
                                                                << m.local_extent << " along dim " << dim
                                                                << ", found " << whole << " and " << local);
  return m;
}

PartMap PartMap::of(const Tensor& parameter) {
  if (!is_parameter(parameter)) return {};
  return of(parameter.impl()->param->tp, parameter.shape());
}

std::int64_t PartMap::whole_index(std::int64_t part_index) const { return detail::whole_index(*this, part_index); }

std::vector<PartMap::Run> PartMap::runs(std::int64_t first, std::int64_t count) const {
  std::vector<Run> out;
  const auto add = [&](std::int64_t part_first, std::int64_t whole_first, std::int64_t n) {
    if (!out.empty() && out.back().whole_first + out.back().count == whole_first)
      out.back().count += n;
    else
      out.push_back({part_first, whole_first, n});
  };
  if (count <= 0) return out;
  if (identity) {
    add(first, first, count);
    return out;
  }
  const std::int64_t end = first + count;
  const std::int64_t row = local_extent * inner;
  for (std::int64_t i = first; i < end;) {
    const std::int64_t o = i / row;
    const std::int64_t j = (i - o * row) / inner;
    int p = 0;
    while (p + 1 < parts && local_begin[p + 1] <= j) ++p;
    // Part p's piece of this outer row is contiguous in the whole tensor.
    const std::int64_t piece_end = o * row + local_begin[p + 1] * inner;
    const std::int64_t n = std::min(end, piece_end) - i;
    add(i, whole_index(i), n);
    i += n;
  }
  return out;
}

Shape whole_shape(const Tensor& parameter) {
  if (is_parameter(parameter) && !parameter.impl()->param->tp.replicated()) return parameter.impl()->param->tp.whole_shape;
  return parameter.shape();
}

}  // namespace bmt
