// Streams and events: collectives queued on the communication streams run while the host and the
// other streams work; events complete only after the work recorded before them; a stream that
// waits on an event starts nothing launched after the wait before the event completes.
//
// The host build's communication streams are worker threads, so a "gate" (work that blocks the
// stream until the test opens it) makes the orderings deterministic: while a stream is held, work
// behind it provably has not run. Those tests are host-build only (on the CUDA build `launch` runs
// its work on the calling thread). The ungated tests run on both builds.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "bmtrain/runtime/stream.hpp"
#include "collective_check.hpp"

namespace bmt::test {
namespace {

Channel gather_channel() { return channels()[0]; }
Channel scatter_channel() { return channels()[1]; }

// The f32 sum over ranks of sample(f32, r, index, salt), with its tolerance (see test_collectives.cpp).
double sum_over_ranks(std::size_t index, std::uint64_t salt, double* tol) {
  double s = 0, a = 0;
  for (int r = 0; r < world_size(); ++r) {
    const double x = sample(DType::f32, r, index, salt);
    s += x;
    a += std::fabs(x);
  }
  *tol = (world_size() - 1) * 0x1p-24 * 1.001 * a;
  return s;
}

HostArray f32_inputs(std::size_t count, std::uint64_t salt) {
  HostArray a(DType::f32, count);
  for (std::size_t i = 0; i < count; ++i) a.set(i, sample(DType::f32, rank(), i, salt));
  return a;
}

TEST(Event, DefaultEventIsComplete) {
  Event e;
  EXPECT_TRUE(e.query());
  e.synchronize();
}

TEST(Stream, RecordAfterSynchronizeIsComplete) {
  for (const Channel& ch : channels()) {
    Event e = ch.stream->record();
    ch.stream->synchronize();
    EXPECT_TRUE(e.query()) << ch.name;
  }
}

// Portable form of the ZeRO pattern: reduce-scatter on the scatter stream, the gather stream waits
// for it, then all-gathers the reduced shards; the host waits on the last event only.
TEST(Stream, WaitOrdersCollectivesAcrossStreams) {
  const Channel sc = scatter_channel(), ga = gather_channel();
  const int n = world_size();
  const std::size_t count = 4099;
  const std::uint64_t salt = 77;
  Buffer grads(sc, n * count * 4), shard(sc, count * 4), full(ga, n * count * 4);
  grads.upload(f32_inputs(n * count, salt));
  sc.comm->reduce_scatter(grads.data(), shard.data(), count, DType::f32, ReduceOp::sum, *sc.stream);
  Event reduced = sc.stream->record();
  ga.stream->wait(reduced);
  ga.comm->all_gather(shard.data(), full.data(), count, DType::f32, *ga.stream);
  Event gathered = ga.stream->record();
  gathered.synchronize();
  EXPECT_TRUE(reduced.query()) << "the gather stream finished before the event it waited on";
  HostArray got(DType::f32, n * count);
  full.download(got);
  std::vector<double> want(n * count), tol(n * count);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = sum_over_ranks(i, salt, &tol[i]);
  EXPECT_TRUE(matches(got, want, tol));
}

TEST(Stream, ContextSynchronizeDrainsEveryStream) {
  const Channel ga = gather_channel(), sc = scatter_channel();
  const std::size_t count = 1001;
  Buffer a(ga, count * 4), b(sc, count * 4);
  a.upload(f32_inputs(count, 5));
  b.upload(f32_inputs(count, 6));
  ga.comm->all_reduce(a.data(), a.data(), count, DType::f32, ReduceOp::sum, *ga.stream);
  sc.comm->all_reduce(b.data(), b.data(), count, DType::f32, ReduceOp::sum, *sc.stream);
  Event ea = ga.stream->record(), eb = sc.stream->record();
  bmt::synchronize();
  EXPECT_TRUE(ea.query());
  EXPECT_TRUE(eb.query());
  HostArray got(DType::f32, count);
  a.download(got);
  std::vector<double> want(count), tol(count);
  for (std::size_t i = 0; i < count; ++i) want[i] = sum_over_ranks(i, 5, &tol[i]);
  EXPECT_TRUE(matches(got, want, tol));
}

#ifndef BMT_ENABLE_CUDA

// Holds a stream at the point where it is closed until the host opens it.
class Gate {
 public:
  Gate() : future_(promise_.get_future().share()) {}
  ~Gate() { open(); }  // never leave a worker blocked, even when an assertion ended the test early
  void hold(Stream& s) {
    auto f = future_;
    s.launch([f] { f.wait(); });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!opened_) promise_.set_value();
    opened_ = true;
  }

 private:
  std::mutex mutex_;
  bool opened_ = false;
  std::promise<void> promise_;
  std::shared_future<void> future_;
};

// Polls an event for up to `seconds`: used where a wrong implementation would hang, so that it
// fails instead.
bool completes_within(const Event& e, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!e.query()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

TEST(HostStream, LaunchReturnsBeforeTheWorkRuns) {
  Stream& s = context().gather_stream();
  Gate gate;
  gate.hold(s);
  std::atomic<bool> ran{false};
  s.launch([&] { ran = true; });
  Event e = s.record();
  EXPECT_FALSE(ran.load());
  EXPECT_FALSE(e.query());
  gate.open();
  e.synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(e.query());
}

TEST(HostStream, WorkRunsInLaunchOrder) {
  Stream& s = context().scatter_stream();
  std::vector<int> order;
  for (int i = 0; i < 50; ++i)
    s.launch([&order, i] {
      if (i % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      order.push_back(i);
    });
  s.synchronize();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

// A collective on the gather stream is in flight (rank 0 holds its stream, so on no rank can it
// complete) while the host computes and even runs its own MPI collective on the host communicator.
// The event recorded after it completes only once it has, and then its result is there.
TEST(HostStream, CollectiveOverlapsHostWork) {
  const Channel ga = gather_channel();
  const std::size_t count = 2053;
  const std::uint64_t salt = 11;
  Buffer send(ga, count * 4), recv(ga, count * 4);
  send.upload(f32_inputs(count, salt));
  HostArray sentinel(DType::f32, count);
  for (std::size_t i = 0; i < count; ++i) sentinel.set(i, -12345.0);
  recv.upload(sentinel);

  Gate gate;
  if (rank() == 0) gate.hold(*ga.stream);
  ga.comm->all_reduce(send.data(), recv.data(), count, DType::f32, ReduceOp::sum, *ga.stream);
  Event done = ga.stream->record();
  EXPECT_FALSE(done.query()) << "the all-reduce completed although rank 0 holds its stream";

  // Host work meanwhile: local arithmetic and a collective of its own on another communicator.
  double local = 0;
  for (int i = 1; i <= 100000; ++i) local += 1.0 / i;
  std::int64_t mine = rank() + 1, total = 0;
  context().host_comm().all_reduce(&mine, &total, 1, DType::i64, ReduceOp::sum, context().compute_stream());
  EXPECT_EQ(total, std::int64_t(world_size()) * (world_size() + 1) / 2);
  EXPECT_GT(local, 12.0);
  EXPECT_FALSE(done.query());
  if (rank() == 0) {
    HostArray untouched(DType::f32, count);
    recv.download(untouched);
    EXPECT_TRUE(matches(untouched, std::vector<double>(count, -12345.0))) << "the held all-reduce wrote its output";
  }

  // Every rank has queried before rank 0 lets its all-reduce start.
  context().host_comm().barrier(context().compute_stream());
  gate.open();
  done.synchronize();  // the event alone must be enough to read the result
  HostArray got(DType::f32, count);
  recv.download(got);
  std::vector<double> want(count), tol(count);
  for (std::size_t i = 0; i < count; ++i) want[i] = sum_over_ranks(i, salt, &tol[i]);
  EXPECT_TRUE(matches(got, want, tol));
}

// With the gather stream held, a reduce-scatter on the scatter stream still completes: the two
// streams do not queue behind each other.
TEST(HostStream, GatherAndScatterStreamsAreIndependent) {
  const Channel ga = gather_channel(), sc = scatter_channel();
  const int n = world_size();
  const std::size_t count = 515;
  Buffer gsend(ga, count * 4), grecv(ga, n * count * 4), ssend(sc, n * count * 4), srecv(sc, count * 4);
  gsend.upload(f32_inputs(count, 21));
  ssend.upload(f32_inputs(n * count, 22));

  Gate gate;
  gate.hold(*ga.stream);
  ga.comm->all_gather(gsend.data(), grecv.data(), count, DType::f32, *ga.stream);
  Event gathered = ga.stream->record();
  sc.comm->reduce_scatter(ssend.data(), srecv.data(), count, DType::f32, ReduceOp::sum, *sc.stream);
  Event scattered = sc.stream->record();

  EXPECT_TRUE(completes_within(scattered, 20.0)) << "the scatter stream waited for the held gather stream";
  EXPECT_FALSE(gathered.query());
  gate.open();
  gathered.synchronize();

  HostArray g(DType::f32, n * count), s(DType::f32, count);
  grecv.download(g);
  srecv.download(s);
  std::vector<double> gw, sw(count), stol(count);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) gw.push_back(sample(DType::f32, r, i, 21));
  for (std::size_t j = 0; j < count; ++j) sw[j] = sum_over_ranks(rank() * count + j, 22, &stol[j]);
  EXPECT_TRUE(matches(g, gw));
  EXPECT_TRUE(matches(s, sw, stol));
}

// The gather stream waits on an event of the (held) scatter stream: nothing launched on the gather
// stream after the wait runs before the scatter stream passes the event, so the all-gather reads
// the reduced shard, never the stale one.
TEST(HostStream, WaitHoldsLaterWorkUntilTheEvent) {
  const Channel sc = scatter_channel(), ga = gather_channel();
  const int n = world_size();
  const std::size_t count = 777;
  const std::uint64_t salt = 31;
  Buffer grads(sc, n * count * 4), shard(sc, count * 4), full(ga, n * count * 4);
  grads.upload(f32_inputs(n * count, salt));
  HostArray stale(DType::f32, count);
  for (std::size_t i = 0; i < count; ++i) stale.set(i, 999.0);
  shard.upload(stale);

  Gate gate;
  gate.hold(*sc.stream);
  sc.comm->reduce_scatter(grads.data(), shard.data(), count, DType::f32, ReduceOp::sum, *sc.stream);
  Event reduced = sc.stream->record();
  ga.stream->wait(reduced);
  std::atomic<bool> started{false};
  ga.stream->launch([&] { started = true; });
  ga.comm->all_gather(shard.data(), full.data(), count, DType::f32, *ga.stream);
  Event gathered = ga.stream->record();

  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // give a wrong implementation time to run ahead
  EXPECT_FALSE(started.load()) << "work after wait() ran before the event completed";
  EXPECT_FALSE(gathered.query());
  gate.open();
  gathered.synchronize();
  EXPECT_TRUE(reduced.query());
  EXPECT_TRUE(started.load());

  HostArray got(DType::f32, n * count);
  full.download(got);
  std::vector<double> want(n * count), tol(n * count);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = sum_over_ranks(i, salt, &tol[i]);
  EXPECT_TRUE(matches(got, want, tol));
}

// The compute stream runs on the host's thread, so waiting on it blocks the host until the event.
TEST(HostStream, ComputeStreamWaitBlocksTheHost) {
  Stream& ga = context().gather_stream();
  Gate gate;
  gate.hold(ga);
  std::atomic<bool> opened{false};
  ga.launch([] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
  Event e = ga.record();
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    opened = true;
    gate.open();
  });
  context().compute_stream().wait(e);
  EXPECT_TRUE(opened.load());
  EXPECT_TRUE(e.query());
  opener.join();
}

TEST(HostStream, SynchronizeWaitsForQueuedWork) {
  Stream& s = context().scatter_stream();
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i)
    s.launch([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ++done;
    });
  s.synchronize();
  EXPECT_EQ(done.load(), 3);
}

#endif  // BMT_ENABLE_CUDA

}  // namespace
}  // namespace bmt::test
