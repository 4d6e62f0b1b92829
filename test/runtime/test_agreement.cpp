// bmt::agree_on_errors and the calls built on it: when some ranks fail, every rank throws the same
// bmt::Error, carrying the lowest failing rank's message and "(on rank N of M)", and no rank is
// left in a collective. Run at 1-4 ranks with each rank in turn failing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

namespace {

using ::testing::HasSubstr;

std::string on_rank(int rank) {
  return " (on rank " + std::to_string(rank) + " of " + std::to_string(bmt::world_size()) + ")";
}

// What agree_on_errors threw on this rank, "" if nothing; anything but bmt::Error fails the test.
std::string agreement_error(const std::string& error) {
  try {
    bmt::agree_on_errors(MPI_COMM_NULL, error);
  } catch (const bmt::Error& e) {
    return e.what();
  }
  return "";
}

// The text rank 0 holds, so that a test can check every rank holds the same.
std::string rank0s(std::string text) {
  bmt::broadcast_text(MPI_COMM_NULL, text, 0);
  return text;
}

TEST(Agreement, EveryRankPassingReturnsOnEveryRank) {
  EXPECT_EQ(agreement_error(""), "");
  EXPECT_EQ(bmt::agreed_error(MPI_COMM_NULL, ""), "");
}

TEST(Agreement, OneFailingRanksMessageReachesEveryRank) {
  for (int failing = 0; failing < bmt::world_size(); ++failing) {
    const std::string mine = bmt::rank() == failing ? "disk full on node " + std::to_string(failing) : "";
    const std::string message = agreement_error(mine);
    EXPECT_EQ(message, "disk full on node " + std::to_string(failing) + on_rank(failing)) << "failing rank " << failing;
    EXPECT_EQ(message, rank0s(message));
  }
}

TEST(Agreement, TheLowestFailingRankIsTheOneReported) {
  const int n = bmt::world_size();
  // Ranks from `lowest` up fail, each with its own words.
  for (int lowest = 0; lowest < n; ++lowest) {
    const std::string mine = bmt::rank() >= lowest ? "rank " + std::to_string(bmt::rank()) + " gives up" : "";
    EXPECT_EQ(agreement_error(mine), "rank " + std::to_string(lowest) + " gives up" + on_rank(lowest));
  }
}

TEST(Agreement, AgreedErrorReturnsWhatAgreeOnErrorsThrows) {
  const int failing = bmt::world_size() - 1;
  const std::string mine = bmt::rank() == failing ? "bad value" : "";
  EXPECT_EQ(bmt::agreed_error(MPI_COMM_NULL, mine), "bad value" + on_rank(failing));
}

TEST(Agreement, AMessageThatNamesItsRankIsPassedOnAsItIs) {
  // An agreement nested in another: the outer one does not name a second rank.
  const int failing = bmt::world_size() - 1;
  const std::string inner = bmt::agreed_error(MPI_COMM_NULL, bmt::rank() == failing ? "inner" : "");
  EXPECT_EQ(agreement_error(inner), "inner" + on_rank(failing));
}

TEST(Agreement, RunOnEveryRankAgreesOnAStepThatThrowsOnOneRank) {
  const int failing = bmt::world_size() - 1;
  const std::string message = bmt::error_of([&] {
    bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
      if (bmt::rank() == failing) throw std::invalid_argument("--dim: expected a multiple of --heads, found 63");
    });
  });
  EXPECT_EQ(message, "--dim: expected a multiple of --heads, found 63" + on_rank(failing));
  EXPECT_EQ(bmt::error_of([] { bmt::run_on_every_rank(MPI_COMM_NULL, [] {}); }), "");
}

TEST(Agreement, RunOnRootRunsTheStepOnTheRootOnly) {
  const int root = bmt::world_size() - 1;
  int runs = 0;
  bmt::run_on_root(MPI_COMM_NULL, [&] { ++runs; }, root);
  EXPECT_EQ(runs, bmt::rank() == root ? 1 : 0);
  const std::string message =
      bmt::error_of([&] { bmt::run_on_root(MPI_COMM_NULL, [] { throw bmt::Error("cannot rename"); }, root); });
  EXPECT_EQ(message, "cannot rename" + on_rank(root));
}

TEST(Agreement, ErrorOfNamesWhatAStepThrew) {
  EXPECT_EQ(bmt::error_of([] {}), "");
  EXPECT_EQ(bmt::error_of([] { throw std::runtime_error("x"); }), "x");
  EXPECT_EQ(bmt::error_of([] { throw std::runtime_error(""); }), "unknown error");
  EXPECT_THAT(bmt::error_of([] { throw 3; }), HasSubstr("exception of unknown type"));
  // std::bad_alloc's own what() is "std::bad_alloc": said as running out of host memory.
  EXPECT_EQ(bmt::error_of([] { throw std::bad_alloc(); }), bmt::kOutOfHostMemory);
}

TEST(Agreement, LowestRankWhere) {
  const int n = bmt::world_size();
  EXPECT_EQ(bmt::lowest_rank_where(MPI_COMM_NULL, false), n);
  EXPECT_EQ(bmt::lowest_rank_where(MPI_COMM_NULL, true), 0);
  EXPECT_EQ(bmt::lowest_rank_where(MPI_COMM_NULL, bmt::rank() == n - 1), n - 1);
}

TEST(Agreement, BroadcastTextFromAnyRoot) {
  for (int root = 0; root < bmt::world_size(); ++root) {
    std::string text = bmt::rank() == root ? std::string(1000 + root, 'a' + root) : "something else";
    bmt::broadcast_text(MPI_COMM_NULL, text, root);
    EXPECT_EQ(text, std::string(1000 + root, 'a' + root));
    std::string empty = bmt::rank() == root ? "" : "not empty";
    bmt::broadcast_text(MPI_COMM_NULL, empty, root);
    EXPECT_EQ(empty, "");
  }
}

}  // namespace
