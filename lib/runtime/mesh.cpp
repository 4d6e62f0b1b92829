#include "bmtrain/runtime/mesh.hpp"

#include <algorithm>

#include "bmtrain/runtime/error.hpp"

namespace bmt {

const char* shard_group_name(ShardGroup group) { return group == ShardGroup::node ? "node" : "world"; }

ShardGroup parse_shard_group(const std::string& text, const std::string& what) {
  if (text == "world") return ShardGroup::world;
  if (text == "node") return ShardGroup::node;
  BMT_REQUIRE(false, what << ": expected world or node, found '" << text << "'");
  return ShardGroup::world;
}

Mesh plan_mesh(int rank, const std::vector<int>& node_of_rank, int tp_size, ShardGroup shard_group) {
  const int world = static_cast<int>(node_of_rank.size());
  BMT_REQUIRE(rank >= 0 && rank < world, "plan_mesh: expected a rank in [0, " << world << "), found " << rank);
  BMT_REQUIRE(tp_size >= 1 && world % tp_size == 0, "tensor-parallel size: expected a divisor of the world size "
                                                        << world << ", found " << tp_size);
  for (int first = 0; first < world; first += tp_size)
    for (int r = first + 1; r < first + tp_size; ++r)
      BMT_REQUIRE(node_of_rank[static_cast<std::size_t>(r)] == node_of_rank[static_cast<std::size_t>(first)],
                  "tensor-parallel size " << tp_size << ": expected each group of " << tp_size
                                          << " consecutive ranks on one node, found ranks " << first << " and " << r
                                          << " on nodes " << node_of_rank[static_cast<std::size_t>(first)] << " and "
                                          << node_of_rank[static_cast<std::size_t>(r)]
                                          << " (start the ranks node by node, a multiple of " << tp_size
                                          << " on each node)");
  Mesh m;
  m.shard_group = shard_group;
  m.tp_size = tp_size;
  m.tp_rank = rank % tp_size;
  m.tp_color = rank / tp_size;
  m.dp_size = world / tp_size;
  m.dp_rank = rank / tp_size;
  m.dp_color = m.tp_rank;
  if (shard_group == ShardGroup::world) {
    m.shard_size = m.dp_size;
    m.shard_rank = m.dp_rank;
    m.shard_color = m.tp_rank;
    m.replica_color = rank;
    return m;
  }
  // Node sharding: the shard group is this tp_rank's ranks on this node, in rank order; the
  // replica group is the ranks at the same place of the same tp_rank on every node.
  const int node_count = *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
  std::vector<int> ranks_on(static_cast<std::size_t>(node_count), 0);
  for (int node : node_of_rank) ++ranks_on[static_cast<std::size_t>(node)];
  for (int n = 1; n < node_count; ++n)
    BMT_REQUIRE(ranks_on[static_cast<std::size_t>(n)] == ranks_on[0],
                "shard group node: expected the same number of ranks on every node, found "
                    << ranks_on[0] << " on node 0 and " << ranks_on[static_cast<std::size_t>(n)] << " on node " << n);
  const int node = node_of_rank[static_cast<std::size_t>(rank)];
  m.shard_size = ranks_on[0] / tp_size;
  m.shard_rank = 0;
  for (int r = m.tp_rank; r < rank; r += tp_size)
    if (node_of_rank[static_cast<std::size_t>(r)] == node) ++m.shard_rank;
  m.shard_color = node * tp_size + m.tp_rank;
  m.replica_count = node_count;
  m.replica_rank = node;
  m.replica_color = m.shard_rank * tp_size + m.tp_rank;
  return m;
}

}  // namespace bmt
