#pragma once
// The process mesh: how the world's ranks split into tensor-parallel groups and the groups that
// shard and replicate the parameters.
//
// Ranks are laid out tensor-parallel index fastest: rank = dp_rank * tp_size + tp_rank, so that a
// tensor-parallel group is tp_size consecutive ranks, which must lie on one node (their collectives
// run every layer, and need NVLink). The ranks with one tp_rank form its data-parallel group (each
// holds a different slice of the batch). ZeRO-3 shards each tensor-parallel shard of the parameters
// over a shard group: the whole data-parallel group (ShardGroup::world), or its ranks on one node
// (ShardGroup::node, hybrid sharding: the nodes hold replicas of the shards, and only the
// gradient's reduction crosses between them).
//
//   node 0: ranks 0 1 2 3   tp_size 2, node sharding:
//   node 1: ranks 4 5 6 7   tp groups {0,1} {2,3} {4,5} {6,7}; shard groups {0,2} {1,3} {4,6} {5,7};
//                           replica groups {0,4} {2,6} {1,5} {3,7}; data-parallel groups {0,2,4,6} {1,3,5,7}
#include <string>
#include <vector>

namespace bmt {

enum class ShardGroup { world, node };
const char* shard_group_name(ShardGroup group);
// "world" or "node"; anything else throws "expected world or node, found '...'" with `what` first.
ShardGroup parse_shard_group(const std::string& text, const std::string& what);

struct Mesh {
  int tp_rank = 0, tp_size = 1;            // tensor-parallel group
  int dp_rank = 0, dp_size = 1;            // data-parallel group: the ranks with this tp_rank
  int shard_rank = 0, shard_size = 1;      // the ZeRO-3 shard group
  int replica_rank = 0, replica_count = 1; // which copy of the shards (node sharding: the node)
  ShardGroup shard_group = ShardGroup::world;
  // MPI_Comm_split colors: the ranks that share a color form one group of that kind.
  int tp_color = 0, dp_color = 0, shard_color = 0, replica_color = 0;
};

// The mesh of `rank`, given every rank's node index (node_of_rank[r], node indices 0..n-1).
// Throws bmt::Error, naming the sizes, when tp_size does not divide the world, a tensor-parallel
// group would span nodes, or node sharding meets nodes with different numbers of ranks.
Mesh plan_mesh(int rank, const std::vector<int>& node_of_rank, int tp_size, ShardGroup shard_group);

}  // namespace bmt
