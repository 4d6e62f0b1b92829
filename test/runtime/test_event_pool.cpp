// Events are reused (on CUDA, from a free list per stream): an event whose handles are all gone may
// be recorded again, one that is still held never is. (bench_streams' BM_RecordEvent shows the
// reuse's effect on the cost of a record.) A gate holds a stream (a host function on
// CUDA, work on the worker thread on the host build) so that recorded events provably stay pending
// while others are recorded, dropped and reused around them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/stream.hpp"

namespace {

// Blocks `stream` until open() is called (or the gate goes).
class Gate {
 public:
  explicit Gate(bmt::Stream& stream) : stream_(stream) {
#ifdef BMT_ENABLE_CUDA
    EXPECT_EQ(cudaLaunchHostFunc(stream.native(), &Gate::hold, &open_), cudaSuccess);
#else
    std::atomic<bool>* flag = &open_;
    stream.launch([flag] { hold(flag); });
#endif
  }
  ~Gate() {
    open();
    stream_.synchronize();  // the holding function reads open_ until it returns
  }
  void open() { open_.store(true); }

 private:
  static void hold(void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  bmt::Stream& stream_;
  std::atomic<bool> open_{false};
};

TEST(EventPool, HeldEventsStayPendingWhileOthersAreReused) {
  bmt::Stream& gather = bmt::context().gather_stream();
  Gate gate(gather);
  bmt::Event held = gather.record();
  // Record and drop many events behind the gate.
  for (int k = 0; k < 200; ++k) {
    bmt::Event e = gather.record();
    EXPECT_FALSE(e.query());
    EXPECT_FALSE(held.query()) << "a held event was recorded again (after " << k << " others)";
  }
  std::vector<bmt::Event> kept;
  for (int k = 0; k < 50; ++k) kept.push_back(gather.record());
  for (const auto& e : kept) EXPECT_FALSE(e.query());
  EXPECT_FALSE(held.query());
  gate.open();
  held.synchronize();
  for (const auto& e : kept) e.synchronize();
  gather.synchronize();
  EXPECT_TRUE(held.query());
  // A completed event handed out again after its handle is gone is recorded anew: pending behind a
  // second gate, complete after it.
  {
    Gate second(gather);
    bmt::Event again = gather.record();
    EXPECT_FALSE(again.query());
    second.open();
    again.synchronize();
    EXPECT_TRUE(again.query());
  }
}

}  // namespace
