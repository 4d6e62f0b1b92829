#pragma once
// Where a rank's shard of a parameter lies in the whole tensor that checkpoints hold. Under tensor
// parallelism a parameter is a part of the whole (ParameterInfo::tp), and its ZeRO shard a range of
// that part: in the whole tensor, one or more runs of consecutive elements (one per row of a
// row-parallel weight, per part of a fused projection). Files name every tensor whole, so a
// checkpoint written at any mesh reads into any other.
#include <cstdint>
#include <vector>

#include "bmtrain/zero/sharded_storage.hpp"

namespace bmt::io {

struct WholeRun {
  std::int64_t shard_offset;  // the run's first element in the rank's shard
  std::uint64_t whole_first;  // its first element in the flattened whole tensor
  std::uint64_t count;
};

// The runs this rank reads: its whole local slice (every replica and every tp rank reads its part).
std::vector<WholeRun> runs_to_read(const ShardedStorage& s, const ShardedStorage::Entry& e);
// The runs this rank writes: its checkpoint slice (the first replica's), and of a parameter that
// the tp group replicates only tp rank 0's, so that each element is written once.
std::vector<WholeRun> runs_to_write(const ShardedStorage& s, const ShardedStorage::Entry& e);

}  // namespace bmt::io
