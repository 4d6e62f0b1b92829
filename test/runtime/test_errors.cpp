// Misuse throws bmt::Error whose message names what was expected and what was found. Every check
// here fails before any communication starts, on every rank alike, so no rank is left in a collective.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/dtype.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt {
namespace {

// Runs `call`, expects a bmt::Error, and returns its message ("" when none was thrown).
template <class F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected bmt::Error, nothing was thrown";
  return "";
}

using ::testing::HasSubstr;

struct Named {
  const char* name;
  Communicator* comm;
  Stream* stream;
};

std::vector<Named> communicators() {
  Context& c = context();
  return {{"world", &c.world_comm(), &c.compute_stream()},
          {"gather", &c.gather_comm(), &c.gather_stream()},
          {"scatter", &c.scatter_comm(), &c.scatter_stream()},
          {"host", &c.host_comm(), &c.compute_stream()}};
}

TEST(Misuse, BadPeerAndRootNameTheValidRange) {
  const int n = world_size();
  const std::string range = "expected a rank in [0, " + std::to_string(n) + ")";
  float x = 0;
  for (const Named& c : communicators()) {
    SCOPED_TRACE(c.name);
    for (int bad : {-1, n, n + 5}) {
      const std::string found = "found " + std::to_string(bad);
      std::string m = error_of([&] { c.comm->broadcast(&x, 1, DType::f32, bad, *c.stream); });
      EXPECT_THAT(m, HasSubstr("broadcast root"));
      EXPECT_THAT(m, HasSubstr(range));
      EXPECT_THAT(m, HasSubstr(found));
      m = error_of([&] { c.comm->send(&x, 1, DType::f32, bad, *c.stream); });
      EXPECT_THAT(m, HasSubstr("send peer"));
      EXPECT_THAT(m, HasSubstr(range));
      EXPECT_THAT(m, HasSubstr(found));
      m = error_of([&] { c.comm->recv(&x, 1, DType::f32, bad, *c.stream); });
      EXPECT_THAT(m, HasSubstr("recv peer"));
      EXPECT_THAT(m, HasSubstr(range));
      EXPECT_THAT(m, HasSubstr(found));
    }
    c.stream->synchronize();
  }
}

// MPI counts are ints; the MPI backend refuses a count it cannot pass rather than truncating it.
// No buffer is touched: the check comes before the call is queued.
TEST(Misuse, MpiCountBeyondIntRangeIsRefused) {
  Communicator& host = context().host_comm();
  Stream& s = context().compute_stream();
  const std::size_t huge = (std::size_t(1) << 31) + 7;
  const std::string found = "found " + std::to_string(huge);
  EXPECT_THAT(error_of([&] { host.all_gather(nullptr, nullptr, huge, DType::u8, s); }), HasSubstr(found));
  EXPECT_THAT(error_of([&] { host.reduce_scatter(nullptr, nullptr, huge, DType::u8, ReduceOp::sum, s); }),
              HasSubstr(found));
  EXPECT_THAT(error_of([&] { host.all_reduce(nullptr, nullptr, huge, DType::u8, ReduceOp::sum, s); }),
              HasSubstr(found));
  EXPECT_THAT(error_of([&] { host.broadcast(nullptr, huge, DType::u8, 0, s); }), HasSubstr(found));
  EXPECT_THAT(error_of([&] { host.all_reduce(nullptr, nullptr, huge, DType::u8, ReduceOp::sum, s); }),
              HasSubstr("expected at most"));
}

TEST(Misuse, ParseDTypeAcceptsEverySpelling) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u16, DType::u8})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("FP32"), DType::f32);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("Float16"), DType::f16);
  EXPECT_EQ(parse_dtype("int64"), DType::i64);
  EXPECT_EQ(parse_dtype("uint8"), DType::u8);
}

TEST(Misuse, ParseDTypeNamesTheInputAndTheAcceptedNames) {
  for (const char* bad : {"float8", "", "f 32", "int128"}) {
    const std::string m = error_of([&] { parse_dtype(bad); });
    EXPECT_THAT(m, HasSubstr("'" + std::string(bad) + "'"));
    EXPECT_THAT(m, HasSubstr("expected one of f32, bf16, f16, i32, i64, u16, u8"));
  }
}

TEST(Misuse, SecondInitNamesTheRemedy) {
  EXPECT_THAT(error_of([] { init_distributed(); }), HasSubstr("bmt::finalize()"));
}

}  // namespace
}  // namespace bmt
