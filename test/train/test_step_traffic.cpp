// The banner's bytes a rank sends a step, inside its node and to other nodes, against the sums
// worked by hand from the collectives' sizes.
#include <gtest/gtest.h>

#include <bmtrain/runtime/error.hpp>

#include "step_traffic.hpp"

namespace {

bmt_train::TrafficPlan plan(int shard, int on_node, int replicas, std::int64_t micro_batches) {
  bmt_train::TrafficPlan p;
  p.parameter_bytes = 1000;
  p.gradient_bytes = 2000;
  p.shard_size = shard;
  p.shard_ranks_on_node = on_node;
  p.replicas = replicas;
  p.micro_batches = micro_batches;
  return p;
}

}  // namespace

TEST(StepTraffic, OneNodeSendsNothingOutside) {
  // 4 ranks on one node: two gathers of 1000 and a reduce-scatter of 2000, 3/4 of each sent.
  const auto t = bmt_train::step_traffic(plan(4, 4, 1, 1));
  EXPECT_DOUBLE_EQ(t.inside_node, 2 * 750.0 + 1500.0);
  EXPECT_DOUBLE_EQ(t.outside_node, 0.0);
}

TEST(StepTraffic, WorldShardingOverTwoNodesSendsHalfOfItOutside) {
  // 2 nodes of 2, one shard group of 4: of a rank's 3 peers 1 is on its node, 2 are not.
  const auto t = bmt_train::step_traffic(plan(4, 2, 1, 1));
  EXPECT_DOUBLE_EQ(t.inside_node, 2 * 250.0 + 500.0);
  EXPECT_DOUBLE_EQ(t.outside_node, 2 * 500.0 + 1000.0);
}

TEST(StepTraffic, NodeShardingSendsOnlyTheReplicaReductionOutside) {
  // 2 nodes of 2, shard groups of 2 inside each node, 2 micro-batches: gathers and reduce-scatters
  // send half inside the node; the replicas all-reduce the 1000-byte gradient shard, each time
  // sending half of it twice (reduce-scatter, all-gather) to the other node.
  const auto t = bmt_train::step_traffic(plan(2, 2, 2, 2));
  EXPECT_DOUBLE_EQ(t.inside_node, 2 * (2 * 500.0 + 1000.0));
  EXPECT_DOUBLE_EQ(t.outside_node, 2 * (2 * 500.0));
  // Against world sharding of the same job, a step sends less across nodes.
  auto world = plan(4, 2, 1, 2);
  EXPECT_LT(t.outside_node, bmt_train::step_traffic(world).outside_node);
}

TEST(StepTraffic, ZeroLevelTwoGathersOnce) {
  auto p = plan(2, 2, 1, 1);
  p.gathers_per_pass = 1;
  const auto t = bmt_train::step_traffic(p);
  EXPECT_DOUBLE_EQ(t.inside_node, 500.0 + 1000.0);
}

TEST(StepTraffic, TensorParallelActivationsStayInsideTheNode) {
  // tp 2 x shard group 2 over 2 nodes (a tp group on each node, the shard group across them):
  // 10 all-gathers or reduce-scatters of a 400-byte activation matrix a micro-batch, half of each
  // sent to the other rank of the tp group, on the node; the parameters' traffic crosses nodes.
  auto p = plan(2, 1, 1, 3);
  p.tp_size = 2;
  p.activation_bytes = 400;
  p.activation_collectives = 10;
  const auto t = bmt_train::step_traffic(p);
  EXPECT_DOUBLE_EQ(t.inside_node, 3 * 10 * 200.0);
  EXPECT_DOUBLE_EQ(t.outside_node, 3 * (2 * 500.0 + 1000.0));
}

TEST(StepTraffic, MoreRanksOnTheNodeThanInTheGroupIsRefused) {
  try {
    bmt_train::step_traffic(plan(4, 5, 1, 1));
    FAIL() << "expected an error";
  } catch (const bmt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 1 to 4 shard-group ranks on the node, found 5"), std::string::npos)
        << e.what();
  }
}
