// The process mesh: plan_mesh's groups for given worlds (independent expectations written out by
// hand), its refusals, and the live runtime's groups under whatever mesh the test runs with
// (BMT_TEST_TP_SIZE, BMT_TEST_SHARD_GROUP, BMT_TEST_NODE_SIZE): each group's collective reaches
// exactly the ranks the plan names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/mesh.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace {

using ::testing::HasSubstr;

std::string refusal(const std::vector<int>& nodes, int tp, bmt::ShardGroup g) {
  try {
    bmt::plan_mesh(0, nodes, tp, g);
  } catch (const bmt::Error& e) {
    return e.what();
  }
  return "";
}

// The ranks that share rank r's color of one kind.
std::vector<int> group_of(int r, const std::vector<int>& nodes, int tp, bmt::ShardGroup g, int bmt::Mesh::*color) {
  std::vector<int> out;
  const bmt::Mesh mine = bmt::plan_mesh(r, nodes, tp, g);
  for (int o = 0; o < static_cast<int>(nodes.size()); ++o)
    if (bmt::plan_mesh(o, nodes, tp, g).*color == mine.*color) out.push_back(o);
  return out;
}

TEST(MeshPlan, OneAxisIsTheWorld) {
  const std::vector<int> nodes{0, 0, 0, 0};
  for (int r = 0; r < 4; ++r) {
    const auto m = bmt::plan_mesh(r, nodes, 1, bmt::ShardGroup::world);
    EXPECT_EQ(m.tp_size, 1);
    EXPECT_EQ(m.tp_rank, 0);
    EXPECT_EQ(m.dp_rank, r);
    EXPECT_EQ(m.dp_size, 4);
    EXPECT_EQ(m.shard_rank, r);
    EXPECT_EQ(m.shard_size, 4);
    EXPECT_EQ(m.replica_count, 1);
  }
}

TEST(MeshPlan, TwoNodesOfFourWithTpTwoAndNodeSharding) {
  // The example drawn in mesh.hpp.
  const std::vector<int> nodes{0, 0, 0, 0, 1, 1, 1, 1};
  const auto g = bmt::ShardGroup::node;
  EXPECT_EQ(group_of(0, nodes, 2, g, &bmt::Mesh::tp_color), (std::vector<int>{0, 1}));
  EXPECT_EQ(group_of(6, nodes, 2, g, &bmt::Mesh::tp_color), (std::vector<int>{6, 7}));
  EXPECT_EQ(group_of(0, nodes, 2, g, &bmt::Mesh::shard_color), (std::vector<int>{0, 2}));
  EXPECT_EQ(group_of(5, nodes, 2, g, &bmt::Mesh::shard_color), (std::vector<int>{5, 7}));
  EXPECT_EQ(group_of(2, nodes, 2, g, &bmt::Mesh::replica_color), (std::vector<int>{2, 6}));
  EXPECT_EQ(group_of(1, nodes, 2, g, &bmt::Mesh::replica_color), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_of(3, nodes, 2, g, &bmt::Mesh::dp_color), (std::vector<int>{1, 3, 5, 7}));
  const auto m = bmt::plan_mesh(7, nodes, 2, g);
  EXPECT_EQ(m.tp_rank, 1);
  EXPECT_EQ(m.dp_rank, 3);
  EXPECT_EQ(m.dp_size, 4);
  EXPECT_EQ(m.shard_rank, 1);
  EXPECT_EQ(m.shard_size, 2);
  EXPECT_EQ(m.replica_rank, 1);
  EXPECT_EQ(m.replica_count, 2);
  // World sharding on the same ranks: the shard group is the data-parallel group.
  EXPECT_EQ(group_of(3, nodes, 2, bmt::ShardGroup::world, &bmt::Mesh::shard_color), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(bmt::plan_mesh(7, nodes, 2, bmt::ShardGroup::world).shard_rank, 3);
}

TEST(MeshPlan, RefusesSizesThatDoNotFit) {
  EXPECT_THAT(refusal({0, 0, 0}, 2, bmt::ShardGroup::world), HasSubstr("expected a divisor of the world size 3, found 2"));
  EXPECT_THAT(refusal({0, 0, 0, 0}, 0, bmt::ShardGroup::world), HasSubstr("found 0"));
  // Three ranks on node 0, three on node 1: a pair {2, 3} spans the nodes.
  EXPECT_THAT(refusal({0, 0, 0, 1, 1, 1}, 2, bmt::ShardGroup::world),
              HasSubstr("found ranks 2 and 3 on nodes 0 and 1"));
  EXPECT_THAT(refusal({0, 0, 0, 0, 1, 1}, 2, bmt::ShardGroup::node),
              HasSubstr("expected the same number of ranks on every node, found 4 on node 0 and 2 on node 1"));
  EXPECT_THAT([] { bmt::parse_shard_group("rack", "--shard-group"); },
              ::testing::ThrowsMessage<bmt::Error>(HasSubstr("--shard-group: expected world or node, found 'rack'")));
}

// Sums a one-hot vector of ranks over a communicator: entry o is 1 for exactly the ranks reached.
std::vector<int> reached(bmt::Communicator& comm) {
  const int world = bmt::world_size();
  std::vector<float> mine(static_cast<std::size_t>(world), 0.0f);
  mine[static_cast<std::size_t>(bmt::rank())] = 1.0f;
  bmt::Tensor t = bmt::Tensor::from_host(mine.data(), {world}, bmt::DType::f32);
  comm.all_reduce(t.data(), t.data(), static_cast<std::size_t>(world), bmt::DType::f32, bmt::ReduceOp::sum,
                  bmt::context().compute_stream());
  std::vector<int> out;
  const auto sums = t.to_host_floats();
  for (int o = 0; o < world; ++o)
    if (sums[static_cast<std::size_t>(o)] == 1.0f) out.push_back(o);
  return out;
}

TEST(MeshLive, EachGroupReachesThePlannedRanks) {
  auto& ctx = bmt::context();
  const bmt::Mesh& m = ctx.mesh();
  const int world = bmt::world_size();
  std::vector<int> nodes(static_cast<std::size_t>(world));
  MPI_Allgather(&ctx.topology().node, 1, MPI_INT, nodes.data(), 1, MPI_INT, ctx.mpi_comm());
  const int r = bmt::rank();
  EXPECT_EQ(reached(ctx.tp_comm()), group_of(r, nodes, m.tp_size, m.shard_group, &bmt::Mesh::tp_color));
  EXPECT_EQ(reached(ctx.shard_comm()), group_of(r, nodes, m.tp_size, m.shard_group, &bmt::Mesh::shard_color));
  EXPECT_EQ(ctx.tp_comm().size(), m.tp_size);
  EXPECT_EQ(ctx.tp_comm().rank(), m.tp_rank);
  EXPECT_EQ(ctx.shard_comm().rank(), m.shard_rank);
  EXPECT_EQ(ctx.gather_comm().size(), m.shard_size);
  EXPECT_EQ(ctx.scatter_comm().rank(), m.shard_rank);
  EXPECT_EQ(bmt::dp_rank() * bmt::tp_size() + bmt::tp_rank(), r);
  int dp_size = 0;
  MPI_Comm_size(ctx.mpi_dp_comm(), &dp_size);
  EXPECT_EQ(dp_size, m.dp_size);
  if (m.shard_group == bmt::ShardGroup::node) {
    EXPECT_EQ(ctx.replica_comm().size(), m.replica_count);
    EXPECT_EQ(ctx.replica_comm().rank(), m.replica_rank);
  } else {
    EXPECT_THAT([&] { ctx.replica_comm(); },
                ::testing::ThrowsMessage<bmt::Error>(HasSubstr("expected a runtime started with shard_group node")));
  }
}

}  // namespace
