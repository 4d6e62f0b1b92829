// The runtime under an MPI initialized below MPI_THREAD_MULTIPLE: this main initializes MPI itself
// with MPI_THREAD_SERIALIZED, so the runtime's streams take turns inside MPI (non-blocking calls,
// polled). Linked with the collective and stream tests, which then run on that path too.
//
// StreamsInOppositeOrders is the case the turn-taking exists for: rank 0 starts its gather
// collective first, rank 1 its scatter collective first. A stream that held the MPI turn while
// blocked in a collective would deadlock here; the test then ends the job after a deadline
// instead of hanging.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <thread>
#include <vector>

#include "bmtrain/runtime/context.hpp"

namespace {

bool completes_within(const bmt::Event& e, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!e.query()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// An all-reduce on the gather stream and one on the scatter stream; the stream this rank lets
// start second is held until the first has had time to block in MPI.
void opposite_order_round(int index, bool gather_first) {
  bmt::Context& c = bmt::context();
  const int n = bmt::world_size();
  const std::size_t count = 1000 + index;
  std::vector<float> a(count, float(bmt::rank() + 1)), b(count, float(2 * bmt::rank() + 1));
  std::vector<float> ra(count, -1.0f), rb(count, -1.0f);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  bmt::Stream& held = gather_first ? c.scatter_stream() : c.gather_stream();
  held.launch([released] { released.wait(); });
  c.gather_comm().all_reduce(a.data(), ra.data(), count, bmt::DType::f32, bmt::ReduceOp::sum, c.gather_stream());
  c.scatter_comm().all_reduce(b.data(), rb.data(), count, bmt::DType::f32, bmt::ReduceOp::sum, c.scatter_stream());
  bmt::Event ea = c.gather_stream().record(), eb = c.scatter_stream().record();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release.set_value();
  if (!completes_within(ea, 20.0) || !completes_within(eb, 20.0)) {
    std::fprintf(stderr, "[rank %d] FAILED: gather and scatter collectives issued in opposite orders on "
                         "two ranks did not complete within 20 s\n", bmt::rank());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);  // the streams are stuck inside MPI: nothing else can end the job
  }
  const float want_a = float(n * (n + 1) / 2), want_b = float(n * n);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += ra[i] != want_a || rb[i] != want_b;
  EXPECT_EQ(wrong, 0u) << "round " << index;
}

TEST(SerializedMpi, RuntimeSeesTheProgramsThreadLevel) {
  int provided = 0;
  MPI_Query_thread(&provided);
  EXPECT_EQ(provided, MPI_THREAD_SERIALIZED);
}

TEST(SerializedMpi, StreamsInOppositeOrders) {
  for (int i = 0; i < 20; ++i) opposite_order_round(i, (bmt::rank() + i) % 2 == 0);
}

class FailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", bmt::rank(), r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int failed = 0;
  {
    bmt::DistributedGuard guard(&argc, &argv, {.seed = 1234});
    if (bmt::rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new FailurePrinter);
    }
    failed = RUN_ALL_TESTS();
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return failed ? 1 : 0;
}
