// bmt::agree_on_configuration: ranks that run the same description pass; a rank that differs
// (another model size, another library build) makes every rank throw the same bmt::Error, naming
// the lowest differing rank and the first differing item, with no rank left in a collective.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/configuration_check.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

namespace {

using ::testing::HasSubstr;

std::string error_of(const std::string& description) {
  try {
    bmt::agree_on_configuration(description);
  } catch (const bmt::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigurationCheck, EqualDescriptionsPass) {
  EXPECT_EQ(error_of("layers=2; dim=64; " + bmt::build_description()), "");
  EXPECT_EQ(error_of(""), "");
}

TEST(ConfigurationCheck, BuildDescriptionNamesVersionBackendAndLibraries) {
  const std::string d = bmt::build_description();
  for (const char* key : {"bmtrain=", "backend=", "kokkos=", "mpi=", "compiler=", "build_type=", "sanitize="})
    EXPECT_THAT(d, HasSubstr(key));
}

TEST(ConfigurationCheck, DifferingModelSizeNamesTheRankAndTheItem) {
  const int n = bmt::world_size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  // Ranks from the last one down differ; the lowest differing rank is named.
  const int first = n - 1;
  const std::string mine = "model=tiny; layers=" + std::string(bmt::rank() >= first ? "3" : "2") + "; dim=64";
  const std::string message = error_of(mine);
  EXPECT_THAT(message, HasSubstr("configuration mismatch"));
  EXPECT_THAT(message, HasSubstr("(on rank " + std::to_string(first) + " of " + std::to_string(n) + ")"));
  EXPECT_THAT(message, HasSubstr("'layers': rank 0 has 'layers=2', rank " + std::to_string(first) + " has 'layers=3'"));
  // Every rank got the same message, so every rank can report it alike.
  std::string from_root = message;
  bmt::broadcast_text(MPI_COMM_NULL, from_root, 0);
  EXPECT_EQ(message, from_root);
}

TEST(ConfigurationCheck, DifferingLibraryBuildIsReported) {
  const int n = bmt::world_size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  // What a rank linked against another build would describe.
  std::string build = bmt::build_description();
  if (bmt::rank() == 1) build.replace(0, build.find(';'), "bmtrain=9.9.9");
  const std::string message = error_of("layers=2; " + build);
  EXPECT_THAT(message, HasSubstr("(on rank 1 of"));
  EXPECT_THAT(message, HasSubstr("'bmtrain': rank 0 has 'bmtrain="));
  EXPECT_THAT(message, HasSubstr("rank 1 has 'bmtrain=9.9.9'"));
}

TEST(ConfigurationCheck, AnExtraItemOnOneRankIsReported) {
  const int n = bmt::world_size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  const std::string message = error_of(bmt::rank() == 1 ? "a=1\nb=2\nc=3" : "a=1\nb=2");
  EXPECT_THAT(message, HasSubstr("rank 0 has nothing there, rank 1 has 'c=3'"));
}

TEST(ConfigurationCheck, AgreementAfterAMismatchStillWorks) {
  // A failed check leaves no collective behind: the next one matches on every rank.
  if (bmt::world_size() >= 2) EXPECT_NE(error_of(std::to_string(bmt::rank())), "");
  EXPECT_EQ(error_of("same"), "");
}

}  // namespace
