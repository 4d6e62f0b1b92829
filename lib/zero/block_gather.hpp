#pragma once
// Where a CheckpointBlock's gather puts each parameter (ShardedStorage::gather_into): the gathered
// buffer's layout, and, with float8 weights, the pieces each rank's chunk carries on the wire.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bmtrain/zero/sharded_storage.hpp"

namespace bmt {

struct ShardedStorage::GatherLayout {
  // Each inverse scale starts 16 bytes after the last, as aligned as a vector load of it needs: the
  // FP8 products hand it to cuBLASLt as a scale pointer, which a separate allocation would align
  // to 256 bytes.
  static constexpr std::size_t kScaleStride = 16;
  std::vector<bool> float8;     // an entry a weight gathered as e4m3 codes
  std::vector<std::size_t> at;  // an entry's first byte in the gathered buffer
  std::vector<int> scale;       // a float8 entry's index among them (its amax and scale), else -1
  int float8_count = 0;
  std::size_t scales_at = 0;  // the float8 entries' f32 inverse scales, in entry order, one a kScaleStride
  std::size_t bytes = 0;      // the gathered buffer
  // A rank's part of one entry: elements [param_offset, + count) of the parameter, at shard_offset
  // in that rank's shard and at chunk_at bytes into its chunk of the wire.
  struct Piece {
    std::size_t entry;
    std::int64_t param_offset, shard_offset, count;
    std::size_t chunk_at;
  };
  std::vector<std::vector<Piece>> pieces;  // by rank of the shard group
  std::size_t chunk_bytes = 0;             // every rank's chunk, padded to the largest
};

}  // namespace bmt
