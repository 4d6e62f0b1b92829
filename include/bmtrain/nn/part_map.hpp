#pragma once
// Which elements of the whole parameter a tensor-parallel part holds. A part (ParameterInfo::tp) is
// not a contiguous range of the whole tensor: a column-parallel weight [out/tp, in] is contiguous,
// but a row-parallel one [out, in/tp] is one run per row, and a fused [q; k; v] part three runs.
// Initializers and checkpoints address the *whole* tensor, so that a tensor-parallel run starts
// from and saves the same values as a run without it.
//
//   const PartMap map = PartMap::of(weight);
//   map.whole_index(i);          // the whole tensor's flat index of the part's flat element i
//   map.runs(first, count);      // elements [first, first + count) as runs of contiguous whole indices
#include <cstdint>
#include <vector>

#include "bmtrain/nn/parameter.hpp"

namespace bmt {

// Flat part index i = (o * local_extent + j) * inner + k, where o runs over the dimensions before
// the split one, j along it and k over those after. j lies in part p's local piece
// [local_begin[p], local_begin[p + 1]), which is whole rows [whole_begin[p], ...) of the split
// dimension (of extent whole_extent). Plain data, so that device kernels take it by value
// (lib/nn/part_index.hpp computes the map there).
struct PartMap {
  static constexpr int kMaxParts = 8;

  bool identity = true;  // a replicated parameter, or one at tp 1: the part is the whole
  int parts = 1;
  std::int64_t inner = 1, local_extent = 1, whole_extent = 1;
  std::int64_t local_begin[kMaxParts + 1] = {};
  std::int64_t whole_begin[kMaxParts] = {};

  struct Run {
    std::int64_t part_first, whole_first, count;
  };

  // The map of a part of `part_shape` described by `split`.
  static PartMap of(const TensorParallelSplit& split, const Shape& part_shape);
  // The map of a parameter (identity for a plain tensor or a replicated parameter).
  static PartMap of(const Tensor& parameter);

  std::int64_t whole_index(std::int64_t part_index) const;
  // Part elements [first, first + count) as maximal runs of consecutive whole indices, in part order.
  std::vector<Run> runs(std::int64_t first, std::int64_t count) const;
};

// The shape of the whole parameter (its own shape unless it is a tensor-parallel part).
Shape whole_shape(const Tensor& parameter);

}  // namespace bmt
