// The numbers bmt-train's banner and step log print: sizes, counts and durations, each against the
// text written out by hand.
#include <gtest/gtest.h>

#include "units.hpp"

namespace {

using bmt_train::bytes_text;
using bmt_train::count_text;
using bmt_train::seconds_text;

TEST(Units, BytesInBinaryUnits) {
  EXPECT_EQ(bytes_text(512), "512 B");
  EXPECT_EQ(bytes_text(1.25 * 1024 * 1024 * 1024), "1.25 GiB");
  EXPECT_EQ(bytes_text(312.0 * 1024 * 1024), "312 MiB");
}

TEST(Units, CountsInDecimalUnits) {
  EXPECT_EQ(count_text(124e6), "124M");
  EXPECT_EQ(count_text(1.56e9), "1.56B");
  EXPECT_EQ(count_text(999), "999");
}

TEST(Units, SecondsNeverInExponentForm) {
  EXPECT_EQ(seconds_text(0.994804), "0.99 s");
  EXPECT_EQ(seconds_text(7.25496), "7.25 s");
  EXPECT_EQ(seconds_text(2407.31), "2407.3 s");
  EXPECT_EQ(seconds_text(123456.7), "123456.7 s");
}

}  // namespace
