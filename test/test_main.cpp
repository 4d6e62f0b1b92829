// Main of every test program: the bmtrain runtime wraps GoogleTest, so tests run under mpirun at
// any world size and as a plain process. Only rank 0 prints the GoogleTest banner; failures print
// on whichever rank they happen, and the exit code is non-zero on every rank if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "bmtrain/runtime/context.hpp"

namespace {
// On ranks other than 0: print failed assertions only, tagged with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", bmt::rank(), r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }
};
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  bmt::InitOptions options;
  options.seed = 1234;
  // The mesh a test program runs under, set by its registration (the harness's own variables).
  if (const char* tp = std::getenv("BMT_TEST_TP_SIZE")) options.tp_size = std::atoi(tp);
  if (const char* group = std::getenv("BMT_TEST_SHARD_GROUP"))
    options.shard_group = bmt::parse_shard_group(group, "BMT_TEST_SHARD_GROUP");
  bmt::init_distributed(&argc, &argv, options);
  if (bmt::rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter);
  }
  int failed = RUN_ALL_TESTS();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, bmt::context().mpi_comm());
  bmt::finalize();
  return any_failed ? 1 : 0;
}
