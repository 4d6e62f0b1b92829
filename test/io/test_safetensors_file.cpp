// Parallel safetensors files: written by some ranks in one split of the elements, read by another
// number of ranks in another split; files from other writers; failures agreed on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/io/safetensors_file.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/io_test_util.hpp"

using bmt::DType;
using bmt::io::Rounding;
using bmt::io::SafetensorsReader;
using bmt::io::SafetensorsWriter;
using bmt::io::TensorSpec;
using bmt::test::SharedTempDir;
using ::testing::HasSubstr;

namespace {

const std::vector<TensorSpec> kTensors = {
    {"blocks.0.attn.weight", DType::f32, {5, 7}},
    {"blocks.0.ln.bias", DType::bf16, {13}},
    {"emb", DType::f16, {3, 3}},
    {"positions", DType::i64, {4}},
    {"empty", DType::i32, {0, 3}},
    {"mask", DType::u8, {9}},
    {"tokens", DType::u16, {11}},
    {"big", DType::bf16, {3, 500000}},  // more than one staging round of conversion
};

std::uint64_t numel(const TensorSpec& t) {
  std::uint64_t n = 1;
  for (auto d : t.shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

// The reference value of element i of tensor t, in double.
double ref(std::size_t t, std::uint64_t i) {
  if (bmt::is_floating(kTensors[t].dtype)) return std::sin(0.37 * static_cast<double>(i) + static_cast<double>(t)) * 3.0;
  return static_cast<double>((i * 37 + t * 11) % 101);
}

// Element i of tensor t as stored in dtype `as`, as bytes.
void encode(std::size_t t, std::uint64_t i, DType as, unsigned char* out) {
  const double v = ref(t, i);
  switch (as) {
    case DType::f32: { float f = static_cast<float>(v); std::memcpy(out, &f, 4); return; }
    case DType::bf16: { auto b = bmt::bf16_t::from_float(static_cast<float>(v)); std::memcpy(out, &b, 2); return; }
    case DType::f16: { auto b = bmt::f16_t::from_float(static_cast<float>(v)); std::memcpy(out, &b, 2); return; }
    case DType::i32: { auto x = static_cast<std::int32_t>(v); std::memcpy(out, &x, 4); return; }
    case DType::i64: { auto x = static_cast<std::int64_t>(v); std::memcpy(out, &x, 8); return; }
    case DType::u16: { auto x = static_cast<std::uint16_t>(v); std::memcpy(out, &x, 2); return; }
    case DType::u8: { auto x = static_cast<std::uint8_t>(v); std::memcpy(out, &x, 1); return; }
  }
}

std::vector<unsigned char> encoded(std::size_t t, std::uint64_t first, std::uint64_t count, DType as) {
  std::vector<unsigned char> bytes(count * bmt::dtype_size(as));
  for (std::uint64_t k = 0; k < count; ++k) encode(t, first + k, as, bytes.data() + k * bmt::dtype_size(as));
  return bytes;
}

int rank_of(MPI_Comm c) { int r; MPI_Comm_rank(c, &r); return r; }
int size_of(MPI_Comm c) { int s; MPI_Comm_size(c, &s); return s; }

// Writers split every tensor evenly; each rank writes its part in two calls. The bf16 tensors are
// written from f32 data (the rounding happens in the writer).
void write_with(MPI_Comm comm, const std::string& path) {
  const auto r = static_cast<std::uint64_t>(rank_of(comm)), w = static_cast<std::uint64_t>(size_of(comm));
  SafetensorsWriter out(path, kTensors, {{"producer", "bmtrain test"}}, comm);
  for (std::size_t t = 0; t < kTensors.size(); ++t) {
    const std::uint64_t n = numel(kTensors[t]), b = r * n / w, e = (r + 1) * n / w, mid = (b + e) / 2;
    const DType src = kTensors[t].dtype == DType::bf16 ? DType::f32 : kTensors[t].dtype;
    for (auto [first, last] : {std::pair{b, mid}, std::pair{mid, e}}) {
      auto bytes = encoded(t, first, last - first, src);
      out.write(kTensors[t].name, first, last - first, src, bytes.data(), Rounding::allow);
    }
  }
  out.close();
}

// Readers split every tensor unevenly (quadratic boundaries), unlike the writers, read floats as
// f32 (lossless from bf16/f16) and u16 as i64, and compare with the reference. Returns the number
// of elements this rank checked in `checked`.
void check_read(MPI_Comm comm, const std::string& path, std::uint64_t& checked) {
  const auto r = static_cast<std::uint64_t>(rank_of(comm)), n_ranks = static_cast<std::uint64_t>(size_of(comm));
  SafetensorsReader in(path, comm);
  EXPECT_EQ(in.header().metadata().at("producer"), "bmtrain test");
  checked = 0;
  for (std::size_t t = 0; t < kTensors.size(); ++t) {
    const std::uint64_t n = numel(kTensors[t]);
    const std::uint64_t b = n * r * r / (n_ranks * n_ranks), e = n * (r + 1) * (r + 1) / (n_ranks * n_ranks);
    const DType file = kTensors[t].dtype;
    if (bmt::is_floating(file)) {
      std::vector<float> got(e - b);
      in.read(kTensors[t].name, b, e - b, got.data());
      for (std::uint64_t k = 0; k < e - b; ++k) {
        float want;  // the stored value, widened exactly
        auto bytes = encoded(t, b + k, 1, file);
        if (file == DType::f32) std::memcpy(&want, bytes.data(), 4);
        else {
          std::uint16_t bits;
          std::memcpy(&bits, bytes.data(), 2);
          want = file == DType::bf16 ? bmt::bf16_t::to_float(bits) : bmt::f16_t::to_float(bits);
        }
        ASSERT_EQ(got[k], want) << kTensors[t].name << "[" << b + k << "]";
        ASSERT_NEAR(got[k], ref(t, b + k), file == DType::f32 ? 1e-6 : 2e-2);
      }
    } else if (file == DType::u16) {
      std::vector<std::int64_t> got(e - b);
      in.read(kTensors[t].name, b, e - b, got.data());
      for (std::uint64_t k = 0; k < e - b; ++k) ASSERT_EQ(static_cast<double>(got[k]), ref(t, b + k));
    } else {
      std::vector<unsigned char> got((e - b) * bmt::dtype_size(file));
      in.read(kTensors[t].name, b, e - b, file, got.data());
      EXPECT_EQ(got, encoded(t, b, e - b, file)) << kTensors[t].name;
    }
    checked += e - b;
  }
}

// Reads the whole file as an unrelated tool would: the raw length, the JSON, the bytes.
void check_with_independent_parser(const std::string& path) {
  const std::string file = bmt::test::read_file(path);
  ASSERT_GE(file.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
  const auto json = nlohmann::json::parse(file.substr(8, n));
  EXPECT_EQ(json.at("__metadata__").at("producer"), "bmtrain test");
  const char* codes[] = {"F32", "BF16", "F16", "I64", "I32", "U8", "U16", "BF16"};
  std::uint64_t end_of_data = 0;
  for (std::size_t t = 0; t < kTensors.size(); ++t) {
    const auto& entry = json.at(kTensors[t].name);
    EXPECT_EQ(entry.at("dtype"), codes[t]);
    EXPECT_EQ(entry.at("shape").get<std::vector<std::int64_t>>(), kTensors[t].shape);
    const auto begin = entry.at("data_offsets")[0].get<std::uint64_t>();
    const auto end = entry.at("data_offsets")[1].get<std::uint64_t>();
    end_of_data = std::max(end_of_data, end);
    const auto want = encoded(t, 0, numel(kTensors[t]), kTensors[t].dtype);
    ASSERT_EQ(end - begin, want.size());
    // (memcmp of zero bytes still needs valid pointers; an empty tensor's vector has none)
    if (!want.empty())
      EXPECT_EQ(0, std::memcmp(file.data() + 8 + n + begin, want.data(), want.size())) << kTensors[t].name;
  }
  EXPECT_EQ(file.size(), 8 + n + end_of_data);
}

std::string error_of(const std::function<void()>& f) { return bmt::error_of(f); }

}  // namespace

TEST(SafetensorsFile, WrittenByThreeRanksReadByAnyNumber) {
  SharedTempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir / "model.safetensors";
  const int world = bmt::world_size();
  MPI_Comm writers = bmt::test::first_ranks(std::min(3, world));
  if (writers != MPI_COMM_NULL) {
    write_with(writers, path);
    MPI_Comm_free(&writers);
  }
  bmt::test::barrier();

  std::uint64_t total = 0;
  for (const auto& t : kTensors) total += numel(t);
  for (int readers : {world, 2, 4}) {
    if (readers > world) continue;
    MPI_Comm comm = bmt::test::first_ranks(readers);
    if (comm == MPI_COMM_NULL) continue;
    std::uint64_t mine = 0;
    check_read(comm, path, mine);
    std::uint64_t all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, comm);
    EXPECT_EQ(all, total) << "the readers' ranges must cover every element (" << readers << " readers)";
    MPI_Comm_free(&comm);
  }
  if (bmt::rank() == 0) check_with_independent_parser(path);
}

TEST(SafetensorsFile, ReadsAFileFromAnotherWriter) {
  SharedTempDir dir;
  const std::string path = dir / "other.safetensors";
  // Built by hand: JSON order b, c, a, __metadata__; data order c, a, b; header padded by 3 spaces
  // (data not 8-aligned); an F64 tensor bmtrain has no dtype for.
  const float a[3] = {1.5f, -2.25f, 1e-3f};
  const std::uint16_t b[2] = {bmt::bf16_t::from_float(3.0f), bmt::bf16_t::from_float(-0.5f)};
  const double c[1] = {2.0};
  std::string json = R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[20,24]},)"
                     R"("c":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                     R"("a":{"dtype":"F32","shape":[1,3],"data_offsets":[8,20]},"__metadata__":{"format":"pt"}}   )";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  file += json;
  file.append(reinterpret_cast<const char*>(c), 8);
  file.append(reinterpret_cast<const char*>(a), 12);
  file.append(reinterpret_cast<const char*>(b), 4);
  if (bmt::rank() == 0) bmt::test::write_file(path, file);
  bmt::test::barrier();

  SafetensorsReader in(path);
  EXPECT_EQ(in.header().metadata().at("format"), "pt");
  EXPECT_EQ(in.header().data_start(), 8 + json.size());
  EXPECT_NE(in.header().data_start() % 8, 0u);
  // Each rank reads one element of a (modulo its size), and all of b converted.
  const std::uint64_t i = static_cast<std::uint64_t>(bmt::rank()) % 3;
  float got = 0;
  in.read("a", i, 1, &got);
  EXPECT_EQ(got, a[i]);
  float bf[2];
  in.read("b", 0, 2, bf);
  EXPECT_EQ(bf[0], 3.0f);
  EXPECT_EQ(bf[1], -0.5f);
  // f32 -> bf16 rounds: only when asked for.
  bmt::bf16_t rounded[3];
  EXPECT_THAT(error_of([&] { in.read("a", 0, 3, rounded); }),
              HasSubstr("tensor 'a' is F32: reading it as bf16 rounds; expected Rounding::allow"));
  in.read("a", 0, 3, rounded, Rounding::allow);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(rounded[k].bits, bmt::bf16_t::from_float(a[k]));
  std::int32_t ints[2];
  EXPECT_THAT(error_of([&] { in.read("b", 0, 2, ints); }),
              HasSubstr("tensor 'b' is BF16: expected to read it as a dtype it converts to, found i32"));
  EXPECT_THAT(error_of([&] { in.read("c", 0, 1, &got); }), HasSubstr("tensor 'c' is stored as F64"));
  EXPECT_THAT(error_of([&] { in.read("a", 2, 2, bf); }), HasSubstr("expected elements within [0, 3), found [2, 4)"));
  EXPECT_THAT(error_of([&] { in.read("zzz", 0, 1, bf); }), HasSubstr("expected a tensor named 'zzz'"));
}

TEST(SafetensorsFile, UnwrittenElementsFailCloseOnEveryRank) {
  SharedTempDir dir;
  const std::string path = dir / "holes.safetensors";
  const std::vector<TensorSpec> specs = {{"a", DType::f32, {10}}, {"b", DType::f32, {6}}};
  const auto r = static_cast<std::uint64_t>(bmt::rank()), w = static_cast<std::uint64_t>(bmt::world_size());
  std::string message;
  {
    SafetensorsWriter out(path, specs);
    std::vector<float> ones(10, 1.0f);
    out.write("a", r * 10 / w, (r + 1) * 10 / w - r * 10 / w, ones.data());
    // Element 4 of b is skipped by whichever rank owns it.
    for (std::uint64_t k = r * 6 / w; k < (r + 1) * 6 / w; ++k)
      if (k != 4) out.write("b", k, 1, ones.data());
    message = error_of([&] { out.close(); });
  }
  EXPECT_THAT(message, HasSubstr("found elements [4, 5) of tensor 'b' written by no rank (4 bytes missing in all)"));
  EXPECT_THAT(message, HasSubstr("(on rank 0 of " + std::to_string(w) + ")"));
  // No header was written: the file is visibly not a safetensors file.
  EXPECT_THAT(error_of([&] { SafetensorsReader in(path); }), HasSubstr("invalid JSON"));
}

TEST(SafetensorsFile, RanksDeclaringDifferentTensorsFailTogether) {
  SharedTempDir dir;
  std::vector<TensorSpec> specs = {{"a", DType::f32, {10}}};
  if (bmt::rank() == bmt::world_size() - 1 && bmt::world_size() > 1) specs[0].shape = {11};
  const std::string message = error_of([&] { SafetensorsWriter out(dir / "x.safetensors", specs); });
  if (bmt::world_size() > 1)
    EXPECT_THAT(message, HasSubstr("expected every rank to declare the same tensors and metadata"));
  else
    EXPECT_EQ(message, "");
}

TEST(SafetensorsFile, WriteMisuseThrowsAtOnceAndTheFileStillCompletes) {
  SharedTempDir dir;
  const std::string path = dir / "misuse.safetensors";
  SafetensorsWriter out(path, {{"a", DType::bf16, {4}}});
  const float f[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::int32_t ints[4] = {1, 2, 3, 4};
  bmt::bf16_t b[4];
  for (int k = 0; k < 4; ++k) b[k] = bmt::bf16_t(f[k]);
  EXPECT_THAT(error_of([&] { out.write("nope", 0, 1, b); }), HasSubstr("expected a tensor named 'nope'"));
  EXPECT_THAT(error_of([&] { out.write("a", 3, 2, b); }), HasSubstr("expected elements within [0, 4), found [3, 5)"));
  EXPECT_THAT(error_of([&] { out.write("a", 0, 4, f); }),
              HasSubstr("tensor 'a' is BF16: writing f32 data rounds it; expected Rounding::allow"));
  EXPECT_THAT(error_of([&] { out.write("a", 0, 4, ints); }),
              HasSubstr("expected data of a convertible dtype, found i32"));
  // Every rank writes the whole tensor: overlapping writes of identical bytes are fine.
  out.write("a", 0, 4, b);
  out.close();
  EXPECT_THAT(error_of([&] { out.write("a", 0, 4, b); }), HasSubstr("after close()"));
  SafetensorsReader in(path);
  float back[4];
  in.read("a", 0, 4, back);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(back[k], f[k]);
}

TEST(SafetensorsFile, OneRanksWriteFailureIsReportedOnEveryRank) {
  SharedTempDir dir;
  const std::string path = dir / "full.safetensors";
  const int failing = bmt::world_size() - 1;
  const auto r = static_cast<std::uint64_t>(bmt::rank()), w = static_cast<std::uint64_t>(bmt::world_size());
  std::vector<float> data(1024, 2.0f);
  std::string message;
  {
    SafetensorsWriter out(path, {{"a", DType::f32, {1024}}});
    // A full disk on one rank only: a file-size limit below the data section makes its writes fail.
    rlimit saved{};
    auto* previous = signal(SIGXFSZ, SIG_IGN);
    if (bmt::rank() == failing) {
      getrlimit(RLIMIT_FSIZE, &saved);
      rlimit limit = saved;
      limit.rlim_cur = out.header().data_start();
      setrlimit(RLIMIT_FSIZE, &limit);
    }
    out.write("a", r * 1024 / w, (r + 1) * 1024 / w - r * 1024 / w, data.data());
    if (bmt::rank() == failing) setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, previous);
    message = error_of([&] { out.close(); });
  }
  EXPECT_THAT(message, HasSubstr("safetensors writer '" + path + "': writing"));
  EXPECT_THAT(message, HasSubstr("failed"));
  EXPECT_THAT(message, HasSubstr("(on rank " + std::to_string(failing) + " of " + std::to_string(w) + ")"));
}

TEST(SafetensorsFile, UnwritablePathFailsOnEveryRank) {
  SharedTempDir dir;
  const std::string message =
      error_of([&] { SafetensorsWriter out(dir / "no-such-dir/model.safetensors", {{"a", DType::f32, {1}}}); });
  EXPECT_THAT(message, HasSubstr("no-such-dir/model.safetensors': cannot open for writing"));
}

TEST(SafetensorsFile, ReaderErrorsAreTheSameOnEveryRank) {
  SharedTempDir dir;
  EXPECT_THAT(error_of([&] { SafetensorsReader in(dir / "missing.safetensors"); }),
              HasSubstr("missing.safetensors': cannot open: No such file or directory"));
  // A complete file, then cut short by one byte.
  const std::string path = dir / "cut.safetensors";
  {
    SafetensorsWriter out(path, {{"a", DType::f32, {4}}});
    const float v[4] = {1, 2, 3, 4};
    if (bmt::rank() == 0) out.write("a", 0, 4, v);
    out.close();
  }
  if (bmt::rank() == 0) {
    std::string bytes = bmt::test::read_file(path);
    bytes.pop_back();
    bmt::test::write_file(path, bytes);
  }
  bmt::test::barrier();
  EXPECT_THAT(error_of([&] { SafetensorsReader in(path); }),
              HasSubstr("tensor 'a': data_offsets [0, 16] reach beyond the end of the file: expected end <= 15"));
}

TEST(SafetensorsFile, OverwritingALargerFileLeavesNoTrailingBytes) {
  SharedTempDir dir;
  const std::string path = dir / "again.safetensors";
  for (std::int64_t n : {100, 3}) {
    SafetensorsWriter out(path, {{"a", DType::f32, {n}}});
    std::vector<float> v(static_cast<std::size_t>(n), 7.0f);
    if (bmt::rank() == 0) out.write("a", 0, static_cast<std::uint64_t>(n), v.data());
    out.close();
  }
  SafetensorsReader in(path);
  EXPECT_EQ(in.header().tensor("a").numel(), 3u);
}
