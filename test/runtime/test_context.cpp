#include <gtest/gtest.h>
#include <mpi.h>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

TEST(Context, TopologyMatchesMpi) {
  int r = -1, n = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  EXPECT_EQ(bmt::rank(), r);
  EXPECT_EQ(bmt::world_size(), n);
  const auto& t = bmt::context().topology();
  EXPECT_GE(t.local_rank, 0);
  EXPECT_LT(t.local_rank, t.local_size);
  EXPECT_GE(t.node_count, 1);
  EXPECT_LT(t.node, t.node_count);
  // All test ranks run on one machine here.
  EXPECT_EQ(t.local_size * t.node_count, n);
  EXPECT_EQ(bmt::seed(), 1234u);
}

TEST(Context, SecondInitIsAnError) {
  EXPECT_THROW(bmt::init_distributed(), bmt::Error);
}
