// SafetensorsHeader: parsing files from other writers (any tensor order, padded headers) and
// rejecting every malformed header with a message that names what was expected and found; the
// optimizer step count kept in its metadata.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/io/model_checkpoint.hpp"
#include "bmtrain/io/safetensors_header.hpp"
#include "bmtrain/runtime/error.hpp"

using bmt::io::SafetensorsHeader;
using ::testing::HasSubstr;

namespace {

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A whole file: length, JSON (padded with `pad` spaces), then `data_bytes` zero bytes.
std::string file_of(const std::string& json, std::size_t data_bytes, std::size_t pad = 0) {
  std::string text = json + std::string(pad, ' ');
  return le64(text.size()) + text + std::string(data_bytes, '\0');
}

SafetensorsHeader parse(const std::string& file) { return SafetensorsHeader::parse(file, file.size()); }

// The bmt::Error message of parsing `file`, or "" if it parsed.
std::string error_of(const std::string& file) {
  try {
    parse(file);
  } catch (const bmt::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SafetensorsHeader, ParsesAnyOrderAndPadding) {
  // Tensors listed out of data order, metadata last, 5 spaces of padding (not a multiple of 8).
  const std::string json =
      R"({"b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},)"
      R"("a":{"shape":[2],"data_offsets":[0,8],"dtype":"F32"},"__metadata__":{"format":"pt"}})";
  const auto h = parse(file_of(json, 14, 5));
  ASSERT_EQ(h.tensors().size(), 2u);
  EXPECT_EQ(h.tensors()[0].name, "a");  // data order
  EXPECT_EQ(h.tensors()[1].name, "b");
  EXPECT_EQ(h.tensor("b").dtype, "BF16");
  EXPECT_EQ(h.tensor("b").numel(), 3u);
  EXPECT_EQ(h.tensor("b").shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(h.data_start(), 8 + json.size() + 5);
  EXPECT_EQ(h.data_size(), 14u);
  EXPECT_EQ(h.metadata().at("format"), "pt");
}

TEST(SafetensorsHeader, AcceptsEmptyAndScalarTensorsAndUnknownFields) {
  const std::string json =
      R"({"s":{"dtype":"I64","shape":[],"data_offsets":[0,8],"extra":1},)"
      R"("e":{"dtype":"F16","shape":[0,4],"data_offsets":[8,8]},"d":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})";
  const auto h = parse(file_of(json, 16));
  EXPECT_EQ(h.tensor("s").numel(), 1u);
  EXPECT_EQ(h.tensor("e").numel(), 0u);
  EXPECT_EQ(h.tensor("d").element_size, 8u);
}

TEST(SafetensorsHeader, BuildIsPaddedDeterministicAndRoundTrips) {
  std::vector<bmt::io::TensorSpec> specs = {
      {"z.weight", bmt::DType::bf16, {3, 5}}, {"a.bias", bmt::DType::f32, {7}}, {"n", bmt::DType::i64, {}}};
  const auto h1 = SafetensorsHeader::build(specs, {{"step", "10"}});
  const auto h2 = SafetensorsHeader::build(specs, {{"step", "10"}});
  EXPECT_EQ(h1.bytes(), h2.bytes());
  EXPECT_EQ(h1.data_start() % 8, 0u);
  EXPECT_EQ(SafetensorsHeader::json_length(h1.bytes()) + 8, h1.data_start());
  // Laid out in the given order, contiguously.
  EXPECT_EQ(h1.tensor("z.weight").begin, 0u);
  EXPECT_EQ(h1.tensor("z.weight").end, 30u);
  EXPECT_EQ(h1.tensor("a.bias").begin, 30u);
  EXPECT_EQ(h1.tensor("a.bias").end, 58u);
  EXPECT_EQ(h1.tensor("n").begin, 58u);
  EXPECT_EQ(h1.data_size(), 66u);
  // Padding is spaces, and the header parses back as another tool would read it.
  const auto close = h1.bytes().find_last_of('}');
  EXPECT_EQ(h1.bytes().find_first_not_of(' ', close + 1), std::string::npos);
  const auto back = parse(h1.bytes() + std::string(h1.data_size(), '\0'));
  EXPECT_EQ(back.metadata().at("step"), "10");
  EXPECT_EQ(back.tensor("a.bias").dtype, "F32");
  EXPECT_EQ(back.tensor("z.weight").shape, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(SafetensorsHeader::build(specs).metadata().size(), 0u);
}

TEST(SafetensorsHeader, BuildRejectsDuplicateAndReservedNames) {
  try {
    SafetensorsHeader::build({{"a", bmt::DType::f32, {1}}, {"a", bmt::DType::f32, {2}}});
    FAIL() << "duplicate accepted";
  } catch (const bmt::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'a' more than once"));
  }
  EXPECT_THROW(SafetensorsHeader::build({{"__metadata__", bmt::DType::f32, {1}}}), bmt::Error);
  EXPECT_THROW(SafetensorsHeader::build({{"neg", bmt::DType::f32, {2, -1}}}), bmt::Error);
}

TEST(SafetensorsHeader, FileShorterThanEightBytes) {
  EXPECT_THAT(error_of(std::string("\x02\0\0", 3)), HasSubstr("expected at least 8 bytes (the header length), found a file of 3 bytes"));
  EXPECT_THAT(error_of(""), HasSubstr("found a file of 0 bytes"));
}

TEST(SafetensorsHeader, HeaderLengthBeyondTheFile) {
  const std::string file = le64(1000) + "{}";
  EXPECT_THAT(error_of(file), HasSubstr("expected at most 2 bytes (the file has 10), found 1000, beyond the end"));
  EXPECT_THAT(error_of(le64(~0ull)), HasSubstr("beyond the end of the file"));
}

TEST(SafetensorsHeader, InvalidJson) {
  EXPECT_THAT(error_of(file_of(R"({"a": {"dtype": "F32",)", 0)), HasSubstr("found invalid JSON"));
  EXPECT_THAT(error_of(file_of("{\"a\x01\": 1}", 0)), HasSubstr("found invalid JSON"));
  // Invalid UTF-8 in a name.
  EXPECT_THAT(error_of(file_of("{\"\xff\xfe\":{}}", 0)), HasSubstr("invalid JSON"));
}

TEST(SafetensorsHeader, NotAnObject) {
  EXPECT_THAT(error_of(file_of("[1, 2]", 0)), HasSubstr("expected a JSON object at the top level, found a JSON array"));
  EXPECT_THAT(error_of(file_of(R"({"a": [0, 4]})", 4)), HasSubstr("tensor 'a': expected an object"));
  EXPECT_THAT(error_of(file_of(R"({"__metadata__": {"k": 3}})", 0)),
              HasSubstr("__metadata__['k']: expected a string, found 3"));
}

TEST(SafetensorsHeader, MissingField) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4)),
              HasSubstr("tensor 'a': expected a 'shape' field, found none"));
}

TEST(SafetensorsHeader, UnknownDtype) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("tensor 'a': unknown dtype 'F33': expected one of BOOL, U8"));
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("dtype: expected a string, found 4"));
}

TEST(SafetensorsHeader, ShapeAndOffsetSizeMismatch) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20)),
              HasSubstr("tensor 'a': shape [2, 3] of F32 needs 24 bytes (6 x 4), but data_offsets [0, 20] cover 20 bytes"));
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4)),
              HasSubstr("more bytes than 2^64"));
}

TEST(SafetensorsHeader, NegativeValues) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("tensor 'a': shape[0]: expected a non-negative integer, found the negative integer -1"));
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4)),
              HasSubstr("data_offsets[0]: expected a non-negative integer, found the negative integer -4"));
}

TEST(SafetensorsHeader, NonIntegerValues) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4)),
              HasSubstr("shape[0]: expected a non-negative integer, found the non-integer number 1.5"));
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", 4)),
              HasSubstr("data_offsets[1]: expected a non-negative integer, found the string \"4\""));
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4)),
              HasSubstr("data_offsets: expected an array [begin, end], found a JSON array of 3 elements"));
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4)),
              HasSubstr("expected begin <= end, found [4, 0]"));
}

TEST(SafetensorsHeader, OverlappingOffsets) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
              HasSubstr("tensor 'b' at data_offsets [4, 12] overlaps tensor 'a' which ends at 8"));
}

TEST(SafetensorsHeader, GapBetweenTensors) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12)),
              HasSubstr("expected contiguous tensor data, found a gap of 4 bytes [4, 8) before tensor 'b'"));
  // A gap at the very start.
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)),
              HasSubstr("gap of 4 bytes [0, 4) before tensor 'a'"));
}

TEST(SafetensorsHeader, OffsetsBeyondTheFile) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12)),
              HasSubstr("tensor 'a': data_offsets [0, 16] reach beyond the end of the file: expected end <= 12"));
}

TEST(SafetensorsHeader, BytesAfterTheLastTensor) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6)),
              HasSubstr("expected the data section to end with the last tensor at 4 bytes, found 6 bytes (2 bytes after"));
}

TEST(SafetensorsHeader, DuplicateNames) {
  EXPECT_THAT(error_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)),
              HasSubstr("expected unique tensor names, found 'a' more than once"));
  // The same key nested deeper is not a duplicate tensor.
  EXPECT_EQ(error_of(file_of(R"({"__metadata__":{"a":"x"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4)),
            "");
}

TEST(SafetensorsHeader, UnknownTensorNameOnLookup) {
  const auto h = parse(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
  EXPECT_EQ(h.find("b"), nullptr);
  try {
    h.tensor("b");
    FAIL();
  } catch (const bmt::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("expected a tensor named 'b', found none among the file's 1 tensors ('a')"));
  }
}

TEST(SafetensorsHeader, DtypeNames) {
  EXPECT_EQ(bmt::io::safetensors_dtype_size("BF16"), 2u);
  EXPECT_EQ(bmt::io::safetensors_dtype_size("F64"), 8u);
  EXPECT_EQ(bmt::io::safetensors_dtype_size("bf16"), 0u);
  EXPECT_EQ(bmt::io::dtype_from_safetensors("U16"), bmt::DType::u16);
  EXPECT_THROW(bmt::io::dtype_from_safetensors("F64"), bmt::Error);
}

// The optimizer's step count in optimizer.safetensors' metadata: a whole number or nothing (once
// "abc" escaped as std::invalid_argument and "-5" resumed a run whose every loss was NaN).
TEST(OptimizerStep, WholeNumbersOnly) {
  using bmt::io::optimizer_step;
  const auto step = [](const std::string& text) { return optimizer_step({{"step", text}}, "o.safetensors"); };
  EXPECT_EQ(optimizer_step({}, "o.safetensors"), std::nullopt);
  EXPECT_EQ(step("0"), 0);
  EXPECT_EQ(step("12"), 12);
  EXPECT_EQ(step("9007199254740992"), std::int64_t{1} << 53);
  for (const char* bad : {"abc", "-5", "", "+3", "1.5", " 7", "7 ", "0x10", "9007199254740993", "99999999999999999999"})
    EXPECT_THAT(bmt::error_of([&] { step(bad); }),
                ::testing::HasSubstr(std::string("optimizer state 'o.safetensors': metadata 'step': expected a whole "
                                                 "number of steps in [0, 9007199254740992], found '") + bad + "'"))
        << bad;
}
