// Every collective of bmt::Communicator, for every dtype, on every communicator of the context,
// against float64 host references.
//
// Exactness: gathers, broadcasts, send/recv, max and integer reductions must match bit for bit.
// Floating sums are compared with the bound of recursive summation in the storage precision: each
// partial sum is rounded once to the dtype (bf16/f16 are reduced pairwise in float, then rounded
// back), so over n ranks, whatever the reduction tree,
//     |result - exact| <= (n - 1) * u * sum_r |x_r|,   u = 2^-24 (f32), 2^-8 (bf16), 2^-11 (f16),
// and avg adds the rounding of 1/n, of the product and of the stored result:
//     |result - exact/n| <= ((n - 1) + 3) * u * sum_r |x_r| / n.
// (A 0.1% margin covers the float rounding before the 16-bit one.) At n = 1 sums must be exact.
// Integer avg is the sum divided by n, rounded toward zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "bmtrain/runtime/stream.hpp"
#include "collective_check.hpp"

namespace bmt::test {
namespace {

// Odd counts, counts that are not multiples of the world size, zero, and, on the gather channel
// only (to keep the run short), one count large enough for MPI's rendezvous protocol.
std::vector<std::size_t> counts_for(const Channel& ch) {
  if (ch.name == "gather") return {0, 1, 3, 1001, 40037};
  return {0, 1, 3, 1001};
}

bool carried(const Channel& ch, DType t) { return !(t == DType::u16 && std::string(ch.comm->backend()) == "nccl"); }

struct Reference {
  double value;
  double tol;
};

Reference reduce_reference(DType t, ReduceOp op, int n, std::size_t index, std::uint64_t salt) {
  double sum = 0, abs_sum = 0, max = -std::numeric_limits<double>::infinity();
  for (int r = 0; r < n; ++r) {
    const double x = sample(t, r, index, salt);
    sum += x;  // exact: the inputs have at most 24 significant bits, or are integers below 2^52
    abs_sum += std::fabs(x);
    max = std::max(max, x);
  }
  const double u = unit_roundoff(t) * 1.001;
  switch (op) {
    case ReduceOp::max: return {max, 0};
    case ReduceOp::sum: return {sum, is_floating(t) ? (n - 1) * u * abs_sum : 0};
    case ReduceOp::avg:
      if (!is_floating(t)) return {std::trunc(sum / n), 0};
      return {sum / n, ((n - 1) + 3) * u * abs_sum / n};
  }
  return {0, 0};
}

class Collectives : public ::testing::TestWithParam<DType> {
 protected:
  DType t() const { return GetParam(); }
  int n() const { return world_size(); }
  int me() const { return rank(); }
  std::size_t es() const { return dtype_size(t()); }
  // One salt per call, the same sequence on every rank.
  std::uint64_t next_salt() { return ++salt_; }

  HostArray inputs(std::size_t count, int r, std::uint64_t salt) const {
    HostArray a(t(), count);
    for (std::size_t i = 0; i < count; ++i) a.set(i, sample(t(), r, i, salt));
    return a;
  }
  // What a buffer holds before a call writes it: distinct from every expected value's pattern.
  HostArray stale(std::size_t count, std::uint64_t salt) const { return inputs(count, me() + 1000, salt ^ 0x5eed); }

 private:
  std::uint64_t salt_ = 0;
};

TEST_P(Collectives, AllGather) {
  for (const Channel& ch : channels()) {
    if (!carried(ch, t())) continue;
    for (std::size_t count : counts_for(ch)) {
      SCOPED_TRACE(ch.name + " count " + std::to_string(count));
      const auto salt = next_salt();
      Buffer send(ch, count * es()), recv(ch, n() * count * es());
      send.upload(inputs(count, me(), salt));
      recv.upload(stale(n() * count, salt));
      ch.comm->all_gather(send.data(), recv.data(), count, t(), *ch.stream);
      ch.stream->synchronize();
      HostArray got(t(), n() * count);
      recv.download(got);
      std::vector<double> want;
      for (int r = 0; r < n(); ++r)
        for (std::size_t i = 0; i < count; ++i) want.push_back(sample(t(), r, i, salt));
      EXPECT_TRUE(matches(got, want));
    }
  }
}

TEST_P(Collectives, AllGatherInPlace) {
  for (const Channel& ch : channels()) {
    if (!carried(ch, t())) continue;
    for (std::size_t count : counts_for(ch)) {
      SCOPED_TRACE(ch.name + " count " + std::to_string(count));
      const auto salt = next_salt();
      HostArray init = stale(n() * count, salt);
      const HostArray mine = inputs(count, me(), salt);
      std::copy(mine.bytes.begin(), mine.bytes.end(), init.bytes.begin() + me() * count * es());
      Buffer buf(ch, n() * count * es());
      buf.upload(init);
      ch.comm->all_gather(buf.data() + me() * count * es(), buf.data(), count, t(), *ch.stream);
      ch.stream->synchronize();
      HostArray got(t(), n() * count);
      buf.download(got);
      std::vector<double> want;
      for (int r = 0; r < n(); ++r)
        for (std::size_t i = 0; i < count; ++i) want.push_back(sample(t(), r, i, salt));
      EXPECT_TRUE(matches(got, want));
    }
  }
}

TEST_P(Collectives, ReduceScatter) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    for (const Channel& ch : channels()) {
      if (!carried(ch, t())) continue;
      for (std::size_t count : counts_for(ch)) {
        SCOPED_TRACE(ch.name + " " + reduce_op_name(op) + " count " + std::to_string(count));
        const auto salt = next_salt();
        Buffer send(ch, n() * count * es()), recv(ch, count * es());
        send.upload(inputs(n() * count, me(), salt));
        recv.upload(stale(count, salt));
        ch.comm->reduce_scatter(send.data(), recv.data(), count, t(), op, *ch.stream);
        ch.stream->synchronize();
        HostArray got(t(), count);
        recv.download(got);
        std::vector<double> want, tol;
        for (std::size_t j = 0; j < count; ++j) {
          const Reference ref = reduce_reference(t(), op, n(), me() * count + j, salt);
          want.push_back(ref.value);
          tol.push_back(ref.tol);
        }
        EXPECT_TRUE(matches(got, want, tol));
      }
    }
  }
}

// NCCL's in-place reduce-scatter: the output is the rank's own slice of the input buffer.
TEST_P(Collectives, ReduceScatterInPlace) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    for (const Channel& ch : channels()) {
      if (!carried(ch, t())) continue;
      for (std::size_t count : counts_for(ch)) {
        SCOPED_TRACE(ch.name + " " + reduce_op_name(op) + " count " + std::to_string(count));
        const auto salt = next_salt();
        Buffer buf(ch, n() * count * es());
        buf.upload(inputs(n() * count, me(), salt));
        ch.comm->reduce_scatter(buf.data(), buf.data() + me() * count * es(), count, t(), op, *ch.stream);
        ch.stream->synchronize();
        HostArray all(t(), n() * count);
        buf.download(all);
        HostArray got(t(), count);
        std::copy(all.bytes.begin() + me() * count * es(), all.bytes.begin() + (me() + 1) * count * es(),
                  got.bytes.begin());
        std::vector<double> want, tol;
        for (std::size_t j = 0; j < count; ++j) {
          const Reference ref = reduce_reference(t(), op, n(), me() * count + j, salt);
          want.push_back(ref.value);
          tol.push_back(ref.tol);
        }
        EXPECT_TRUE(matches(got, want, tol));
      }
    }
  }
}

TEST_P(Collectives, AllReduce) {
  for (bool in_place : {false, true}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      for (const Channel& ch : channels()) {
        if (!carried(ch, t())) continue;
        for (std::size_t count : counts_for(ch)) {
          SCOPED_TRACE(ch.name + " " + reduce_op_name(op) + (in_place ? " in place" : "") + " count " +
                       std::to_string(count));
          const auto salt = next_salt();
          Buffer send(ch, count * es()), recv(ch, count * es());
          send.upload(inputs(count, me(), salt));
          recv.upload(stale(count, salt));
          Buffer& out = in_place ? send : recv;
          ch.comm->all_reduce(send.data(), out.data(), count, t(), op, *ch.stream);
          ch.stream->synchronize();
          HostArray got(t(), count);
          out.download(got);
          std::vector<double> want, tol;
          for (std::size_t i = 0; i < count; ++i) {
            const Reference ref = reduce_reference(t(), op, n(), i, salt);
            want.push_back(ref.value);
            tol.push_back(ref.tol);
          }
          EXPECT_TRUE(matches(got, want, tol));
        }
      }
    }
  }
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  for (const Channel& ch : channels()) {
    if (!carried(ch, t())) continue;
    for (std::size_t count : counts_for(ch)) {
      for (int root = 0; root < n(); ++root) {
        SCOPED_TRACE(ch.name + " root " + std::to_string(root) + " count " + std::to_string(count));
        const auto salt = next_salt();
        Buffer buf(ch, count * es());
        buf.upload(me() == root ? inputs(count, root, salt) : stale(count, salt));
        ch.comm->broadcast(buf.data(), count, t(), root, *ch.stream);
        ch.stream->synchronize();
        HostArray got(t(), count);
        buf.download(got);
        std::vector<double> want;
        for (std::size_t i = 0; i < count; ++i) want.push_back(sample(t(), root, i, salt));
        EXPECT_TRUE(matches(got, want));
      }
    }
  }
}

// A send blocks its stream until the peer receives (as NCCL's does outside a group), so the ring
// is ordered by rank parity: even ranks send first, odd ranks receive first.
TEST_P(Collectives, SendRecvRing) {
  if (n() == 1) GTEST_SKIP() << "a ring needs two ranks; a rank cannot send to itself on one stream";
  const int right = (me() + 1) % n(), left = (me() + n() - 1) % n();
  for (const Channel& ch : channels()) {
    if (!carried(ch, t())) continue;
    for (std::size_t count : counts_for(ch)) {
      SCOPED_TRACE(ch.name + " count " + std::to_string(count));
      const auto salt = next_salt();
      Buffer send(ch, count * es()), recv(ch, count * es());
      send.upload(inputs(count, me(), salt));
      recv.upload(stale(count, salt));
      if (me() % 2 == 0) {
        ch.comm->send(send.data(), count, t(), right, *ch.stream);
        ch.comm->recv(recv.data(), count, t(), left, *ch.stream);
      } else {
        ch.comm->recv(recv.data(), count, t(), left, *ch.stream);
        ch.comm->send(send.data(), count, t(), right, *ch.stream);
      }
      ch.stream->synchronize();
      HostArray got(t(), count);
      recv.download(got);
      std::vector<double> want;
      for (std::size_t i = 0; i < count; ++i) want.push_back(sample(t(), left, i, salt));
      EXPECT_TRUE(matches(got, want));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, Collectives,
                         ::testing::Values(DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64,
                                           DType::u16, DType::u8),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

// No rank leaves a barrier before the last one has entered it. Rank 0 enters last (it sleeps
// first) and notes the time; every rank notes when it left. The ranks share one machine, so
// steady_clock (CLOCK_MONOTONIC) readings are comparable between processes.
TEST(CollectivesBarrier, NoRankLeavesBeforeTheLastEnters) {
  using Clock = std::chrono::steady_clock;
  for (const Channel& ch : channels()) {
    SCOPED_TRACE(ch.name);
    std::int64_t entered = 0;
    if (rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      entered = Clock::now().time_since_epoch().count();
    }
    ch.comm->barrier(*ch.stream);
    ch.stream->synchronize();
    const std::int64_t left = Clock::now().time_since_epoch().count();
    std::int64_t times[2] = {entered, left}, all[2] = {0, 0};
    MPI_Allreduce(&times[0], &all[0], 1, MPI_INT64_T, MPI_MAX, context().mpi_comm());
    MPI_Allreduce(&times[1], &all[1], 1, MPI_INT64_T, MPI_MIN, context().mpi_comm());
    EXPECT_GE(all[1], all[0]) << "a rank left the barrier " << (all[0] - all[1]) << " ns before rank 0 entered";
  }
}

}  // namespace
}  // namespace bmt::test
