#include "whole_tensor_runs.hpp"

#include "bmtrain/nn/part_map.hpp"
#include "bmtrain/runtime/context.hpp"

namespace bmt::io {

namespace {

std::vector<WholeRun> runs_of(const ShardedStorage::Slice& slice, const Tensor& parameter) {
  std::vector<WholeRun> out;
  if (slice.count == 0) return out;
  for (const auto& run : PartMap::of(parameter).runs(slice.param_offset, slice.count))
    out.push_back({slice.shard_offset + (run.part_first - slice.param_offset),
                   static_cast<std::uint64_t>(run.whole_first), static_cast<std::uint64_t>(run.count)});
  return out;
}

}  // namespace

std::vector<WholeRun> runs_to_read(const ShardedStorage& s, const ShardedStorage::Entry& e) {
  return runs_of(s.local_slice(e), e.parameter);
}

std::vector<WholeRun> runs_to_write(const ShardedStorage& s, const ShardedStorage::Entry& e) {
  if (e.parameter.impl()->param->tp.replicated() && tp_rank() != 0) return {};
  return runs_of(s.checkpoint_slice(e), e.parameter);
}

}  // namespace bmt::io
