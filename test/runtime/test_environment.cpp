// The environment variables the library reads: one rule for a switch ("1" or "0", anything else an
// error naming the variable, the value and the values allowed), read_environment's parse of each.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "bmtrain/runtime/environment.hpp"
#include "bmtrain/runtime/error.hpp"

namespace {

using ::testing::HasSubstr;

const char* const kVariables[] = {"BMT_TIMELINE", "BMT_TIMELINE_OPS", "BMT_VALIDATE_INDICES", "BMT_GEMM_AUTOTUNE",
                                  "BMT_ATTENTION_NO_WGMMA", "BMT_TEST_NODE_SIZE"};

// Sets the variables for one test, restoring the process environment afterwards.
class EnvironmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      const char* v = std::getenv(name);
      saved_.push_back(v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (std::size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i]) ::setenv(kVariables[i], saved_[i]->c_str(), 1);
      else ::unsetenv(kVariables[i]);
    }
  }
  std::vector<std::optional<std::string>> saved_;
};

std::string error_reading() {
  try {
    bmt::read_environment();
  } catch (const bmt::Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(EnvironmentTest, UnsetIsTheDefault) {
  const auto o = bmt::read_environment();
  EXPECT_EQ(o.timeline, "");
  EXPECT_FALSE(o.timeline_ops);
  EXPECT_FALSE(o.validate_indices.has_value());
  EXPECT_FALSE(o.gemm_autotune);
  EXPECT_FALSE(o.attention_no_wgmma);
}

TEST_F(EnvironmentTest, OneAndZeroTurnEverySwitchOnAndOff) {
  for (const char* value : {"1", "0"}) {
    for (const char* name : {"BMT_TIMELINE_OPS", "BMT_VALIDATE_INDICES", "BMT_GEMM_AUTOTUNE", "BMT_ATTENTION_NO_WGMMA"})
      ::setenv(name, value, 1);
    const bool on = std::string(value) == "1";
    const auto o = bmt::read_environment();
    EXPECT_EQ(o.timeline_ops, on);
    EXPECT_EQ(o.validate_indices, std::optional<bool>(on));
    EXPECT_EQ(o.gemm_autotune, on);
    EXPECT_EQ(o.attention_no_wgmma, on);
  }
  ::setenv("BMT_TIMELINE", "trace.json", 1);
  EXPECT_EQ(bmt::read_environment().timeline, "trace.json");
}

TEST_F(EnvironmentTest, TestNodeSizeIsAPositiveCount) {
  EXPECT_EQ(bmt::read_environment().test_node_size, 0);
  ::setenv("BMT_TEST_NODE_SIZE", "2", 1);
  EXPECT_EQ(bmt::read_environment().test_node_size, 2);
  for (const char* value : {"", "0", "-1", "2x", "two"}) {
    ::setenv("BMT_TEST_NODE_SIZE", value, 1);
    EXPECT_EQ(error_reading(), std::string("BMT_TEST_NODE_SIZE: expected a number of ranks per node >= 1 (or unset), "
                                           "found '") + value + "'");
  }
}

TEST_F(EnvironmentTest, AnyOtherValueIsAnErrorNamingTheVariable) {
  for (const char* name : {"BMT_TIMELINE_OPS", "BMT_VALIDATE_INDICES", "BMT_GEMM_AUTOTUNE", "BMT_ATTENTION_NO_WGMMA"}) {
    for (const char* value : {"", "yes", "true", "2", " 1"}) {
      ::setenv(name, value, 1);
      EXPECT_EQ(error_reading(), std::string(name) + ": expected 1 or 0 (or unset), found '" + value + "'");
    }
    ::unsetenv(name);
  }
  ::setenv("BMT_TIMELINE", "", 1);
  EXPECT_THAT(error_reading(), HasSubstr("BMT_TIMELINE: expected a file path (or unset), found ''"));
}

}  // namespace
