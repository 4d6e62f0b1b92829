// The host thread pool, host functions queued on a stream, and the host memory check.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/host_memory.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "bmtrain/runtime/thread_pool.hpp"

namespace {

TEST(ThreadPool, RunsEveryPartOnceEachOnItsOwnThread) {
  for (int threads : {1, 3, 5}) {
    bmt::ThreadPool pool(threads);
    ASSERT_EQ(pool.size(), threads);
    for (int round = 0; round < 20; ++round) {
      std::mutex m;
      std::vector<int> calls(static_cast<std::size_t>(threads), 0);
      std::set<std::thread::id> ids;
      pool.run([&](int p) {
        std::lock_guard<std::mutex> lock(m);
        ++calls[static_cast<std::size_t>(p)];
        ids.insert(std::this_thread::get_id());
      });
      for (int p = 0; p < threads; ++p) EXPECT_EQ(calls[static_cast<std::size_t>(p)], 1) << p;
      EXPECT_EQ(ids.size(), static_cast<std::size_t>(threads));
      EXPECT_TRUE(ids.count(std::this_thread::get_id())) << "the caller runs part 0";
    }
  }
}

TEST(ThreadPool, RethrowsAnExceptionFromAnyPartAndStaysUsable) {
  bmt::ThreadPool pool(4);
  for (int failing : {0, 3}) {
    EXPECT_THROW(pool.run([&](int p) {
      if (p == failing) throw std::runtime_error("part failed");
    }),
                 std::runtime_error);
    std::atomic<int> n{0};
    pool.run([&](int) { ++n; });
    EXPECT_EQ(n.load(), 4);
  }
  EXPECT_THROW(bmt::ThreadPool(0), bmt::Error);
}

TEST(ThreadPool, PartsCoverTheRangeAtAlignedBounds) {
  for (std::int64_t n : {0, 1, 63, 64, 65, 1000, 4097})
    for (int parts : {1, 2, 3, 7})
      for (std::int64_t align : {1, 16, 64}) {
        std::int64_t next = 0;
        for (int p = 0; p < parts; ++p) {
          const auto [b, e] = bmt::ThreadPool::part(n, parts, p, align);
          EXPECT_EQ(b, next) << n << " " << parts << " " << align;
          EXPECT_LE(b, e);
          if (b < n) EXPECT_EQ(b % align, 0);
          // Parts differ by at most one unit of `align`.
          EXPECT_LE(e - b, ((n + align - 1) / align + parts - 1) / parts * align);
          next = e;
        }
        EXPECT_EQ(next, n);
      }
  EXPECT_GE(bmt::host_threads(), 1);
}

// A stream's host functions run in its order: after the work before them, before the work after.
TEST(Stream, HostFunctionsRunInTheStreamsOrder) {
  bmt::Stream stream(bmt::Stream::Kind::communication, "test host functions");
  std::vector<int> order;
  std::mutex m;
  auto note = [&](int v) {
    std::lock_guard<std::mutex> lock(m);
    order.push_back(v);
  };
  for (int i = 0; i < 50; ++i) stream.launch_host([&, i] { note(i); });
  const bmt::Event done = stream.record();
  done.synchronize();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(HostMemory, AvailableIsKnownAndTooMuchIsRefusedNamingBoth) {
  const std::size_t available = bmt::available_host_memory();
  EXPECT_GT(available, 0u);
  EXPECT_NO_THROW(bmt::require_host_memory(1024, "a small state"));
  try {
    bmt::require_host_memory(available + (std::size_t{1} << 40), "a large state");
    FAIL() << "expected an error";
  } catch (const bmt::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a large state: expected "), std::string::npos) << what;
    EXPECT_NE(what.find("GiB of host memory"), std::string::npos) << what;
    EXPECT_NE(what.find("available (MemAvailable)"), std::string::npos) << what;
  }
}

}  // namespace
