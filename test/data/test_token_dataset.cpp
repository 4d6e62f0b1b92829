// Token files: llm.c shards and raw uint16 files, validation of their headers, glob patterns,
// the sequence windows; and the window shuffle.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <set>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/data/token_dataset.hpp"
#include "bmtrain/data/window_shuffle.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/io_test_util.hpp"

using bmt::data::TokenDataset;
using bmt::data::TokenFileFormat;
using bmt::data::TokenShard;
using bmt::test::SharedTempDir;
using ::testing::HasSubstr;

namespace {

std::string llmc_file(const std::vector<std::uint16_t>& tokens, std::int32_t magic = 20240520,
                      std::int32_t version = 1, std::int64_t count = INT64_MIN) {  // INT64_MIN: the real count
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(count == INT64_MIN ? static_cast<std::int64_t>(tokens.size()) : count);
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return bytes;
}

// llm.c's "llama-3" shard: magic 20240801, version 7, uint32 tokens.
std::string llama3_file(const std::vector<std::uint32_t>& tokens, std::int32_t version = 7) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240801;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  return bytes;
}

std::string raw_file(const std::vector<std::uint16_t>& tokens) {
  return std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
}

std::vector<std::uint16_t> iota_tokens(std::size_t n, std::uint16_t first) {
  std::vector<std::uint16_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>(first + i);
  return t;
}

std::string error_of(const std::function<void()>& f) { return bmt::error_of(f); }

}  // namespace

TEST(TokenShard, ReadsLlmcAndRawFiles) {
  SharedTempDir dir;
  bmt::test::write_file(dir / "a.bin", llmc_file({5, 6, 65535, 0}));
  bmt::test::write_file(dir / "train.bin", raw_file({9, 8, 7}));
  TokenShard a(dir / "a.bin");
  EXPECT_EQ(a.format(), TokenFileFormat::llmc);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0], 5);
  EXPECT_EQ(a[2], 65535);
  TokenShard raw(dir / "train.bin");
  EXPECT_EQ(raw.format(), TokenFileFormat::raw_u16);
  ASSERT_EQ(raw.size(), 3u);
  EXPECT_EQ(raw[2], 7);
  // Asking for raw tokens from a file with an llm.c header is a mistake, not 512 tokens of header.
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "a.bin", TokenFileFormat::raw_u16); }),
              HasSubstr("(raw uint16): expected headerless tokens, found an llm.c header (the magic number 20240520)"));
  // Moves keep the file open.
  TokenShard moved = std::move(a);
  EXPECT_EQ(moved[1], 6);
  std::vector<std::uint32_t> all(4);
  moved.read(0, 4, all.data());
  EXPECT_EQ(all, (std::vector<std::uint32_t>{5, 6, 65535, 0}));
  EXPECT_THAT(error_of([&] { moved.read(3, 2, all.data()); }), HasSubstr("expected tokens below 4, asked for [3, 5)"));
}

// Llama 3's vocabulary (128256) needs uint32 tokens: llm.c writes them with their own magic number.
TEST(TokenShard, ReadsLlama3ShardsOfUint32Tokens) {
  SharedTempDir dir;
  std::vector<std::uint32_t> tokens;
  for (std::uint32_t i = 0; i < 300; ++i) tokens.push_back(i * 427u % 128256u);  // most above 65535
  bmt::test::write_file(dir / "llama.bin", llama3_file(tokens));
  TokenShard shard(dir / "llama.bin");
  EXPECT_EQ(shard.format(), TokenFileFormat::llmc);
  EXPECT_EQ(shard.token_bytes(), 4u);
  ASSERT_EQ(shard.size(), 300u);
  EXPECT_EQ(shard[299], 299u * 427u % 128256u);
  std::vector<std::uint32_t> all(300);
  shard.read(0, 300, all.data());
  EXPECT_EQ(all, tokens);
  TokenDataset data(dir / "llama.bin");
  std::vector<std::int32_t> seq(33);
  data.sequence(2, 32, seq.data());
  for (std::size_t t = 0; t < seq.size(); ++t) EXPECT_EQ(seq[t], static_cast<std::int32_t>(tokens[64 + t])) << t;
  // The GPT-2 shard beside it still reads 2 bytes a token.
  bmt::test::write_file(dir / "gpt2.bin", llmc_file({7, 65535}));
  EXPECT_EQ(TokenShard(dir / "gpt2.bin").token_bytes(), 2u);
  // The magic number decides the width: a Llama 3 header with GPT-2's version, or a count that
  // fits 2-byte tokens but not 4-byte ones, is refused.
  bmt::test::write_file(dir / "v.bin", llama3_file({1, 2}, 1));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "v.bin"); }),
              HasSubstr("expected version 7 after the magic number 20240801 (32-bit tokens), found 1"));
  std::string half = llama3_file(std::vector<std::uint32_t>(8, 1));
  half.resize(1024 + 16);
  bmt::test::write_file(dir / "half.bin", half);
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "half.bin"); }),
              HasSubstr("the header says 8 tokens (32 bytes after the header), but the file has 16 bytes after it "
                        "(count beyond the file)"));
  // A token id beyond int32 cannot be a vocabulary entry.
  bmt::test::write_file(dir / "big.bin", llama3_file({1, 2, 0x80000000u, 4}));
  TokenDataset big(dir / "big.bin");
  EXPECT_THAT(error_of([&] { big.sequence(0, 3, seq.data()); }),
              HasSubstr("expected token ids below 2^31, found 2147483648 at token 2"));
}

// Without the llm.c magic a file is raw tokens only when asked for, or named as nanoGPT names them:
// anything else could be a damaged shard, or no token file at all.
TEST(TokenShard, HeaderlessFilesOnlyWhenAskedForOrNamedSo) {
  SharedTempDir dir;
  bmt::test::write_file(dir / "tokens.u16", raw_file({9, 8, 7}));
  bmt::test::write_file(dir / "val.bin", raw_file({9, 8, 7}));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "tokens.u16"); }),
              HasSubstr("tokens.u16': expected an llm.c shard (the magic number 20240520 (uint16 tokens) or 20240801 "
                        "(uint32 tokens) in its first int32), found "
                        "524297; headerless uint16 tokens are read as raw only when asked for (bmt-train --data-format "
                        "raw) or when named train.bin or val.bin"));
  EXPECT_EQ(TokenShard(dir / "tokens.u16", TokenFileFormat::raw_u16).size(), 3u);
  EXPECT_EQ(TokenShard(dir / "val.bin").format(), TokenFileFormat::raw_u16);
  bmt::test::write_file(dir / "one.bin", "x");
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "one.bin"); }), HasSubstr("found a file of 1 bytes"));
  EXPECT_EQ(bmt::data::parse_token_file_format("auto"), TokenFileFormat::detect);
  EXPECT_EQ(bmt::data::parse_token_file_format("raw"), TokenFileFormat::raw_u16);
  EXPECT_THAT(error_of([&] { bmt::data::parse_token_file_format("u16"); }),
              HasSubstr("expected auto, llmc or raw, found 'u16'"));
}

// A file changed while it is read: truncated (which through a mapping was SIGBUS), grown, or
// written again, each is an error naming the file at the next read.
TEST(TokenShard, AFileChangedUnderTheReaderIsAnError) {
  SharedTempDir dir;
  const std::string path = dir / "a.bin";
  const std::string bytes = llmc_file(iota_tokens(4096, 0));
  bmt::test::write_file(path, bytes);
  TokenDataset data(path);
  std::vector<std::int32_t> seq(65);
  data.sequence(60, 64, seq.data());
  EXPECT_EQ(seq[0], 60 * 64);
  ASSERT_EQ(::truncate(path.c_str(), 2048), 0);
  EXPECT_THAT(error_of([&] { data.sequence(60, 64, seq.data()); }),
              HasSubstr("a.bin' changed while the job reads it: expected its 9216 bytes as when it was opened, found "
                        "2048 (truncated)"));
  EXPECT_THAT(error_of([&] { data.sequence(0, 64, seq.data()); }), HasSubstr("(truncated)"));
  bmt::test::write_file(path, bytes + "more");
  EXPECT_THAT(error_of([&] { data.sequence(0, 64, seq.data()); }), HasSubstr("found 9220 (grown)"));

  bmt::test::write_file(dir / "b.bin", bytes);
  TokenDataset same_size(dir / "b.bin");
  const timespec times[2] = {{0, UTIME_OMIT}, {1000000000, 0}};  // written again, as far as its clock says
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir / "b.bin").c_str(), times, 0), 0);
  EXPECT_THAT(error_of([&] { same_size.sequence(0, 64, seq.data()); }),
              HasSubstr("b.bin' changed while the job reads it: expected it unmodified since it was opened, found it "
                        "written again"));
}

// An llm.c shard whose magic number is damaged is not read as raw tokens, whatever its name.
TEST(TokenShard, AnLlmcHeaderWithAWrongMagicIsRefused) {
  SharedTempDir dir;
  bmt::test::write_file(dir / "train.bin", llmc_file(iota_tokens(8, 0), 20240521));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "train.bin"); }),
              HasSubstr("expected an llm.c magic number, 20240520 (uint16 tokens) or 20240801 (uint32 tokens), in the "
                        "first int32 of what is otherwise an llm.c "
                        "header (version 1, 8 tokens), found 20240521 (a damaged shard?)"));
}

TEST(TokenShard, TruncatedHeader) {
  SharedTempDir dir;
  std::string bytes = llmc_file({1, 2, 3});
  bmt::test::write_file(dir / "cut.bin", bytes.substr(0, 600));
  // Detected by its magic, so reported as a truncated llm.c file, not read as raw tokens.
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "cut.bin"); }),
              HasSubstr("(llm.c format): expected a header of 1024 bytes, found a file of 600 bytes (truncated)"));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "cut.bin", TokenFileFormat::llmc); }), HasSubstr("truncated"));
}

TEST(TokenShard, BadMagic) {
  SharedTempDir dir;
  bmt::test::write_file(dir / "m.bin", llmc_file({1, 2}, 20240521));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "m.bin", TokenFileFormat::llmc); }),
              HasSubstr("expected the magic number 20240520 (uint16 tokens) or 20240801 (uint32 tokens) in the first int32, "
                        "found 20240521"));
}

TEST(TokenShard, BadVersion) {
  SharedTempDir dir;
  bmt::test::write_file(dir / "v.bin", llmc_file({1, 2}, 20240520, 2));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "v.bin"); }), HasSubstr("expected version 1 after the magic number 20240520 (16-bit tokens), found 2"));
}

TEST(TokenShard, CountBeyondTheFile) {
  SharedTempDir dir;
  bmt::test::write_file(dir / "c.bin", llmc_file(iota_tokens(50, 0), 20240520, 1, 100));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "c.bin"); }),
              HasSubstr("the header says 100 tokens (200 bytes after the header), but the file has 100 bytes after it "
                        "(count beyond the file)"));
  bmt::test::write_file(dir / "d.bin", llmc_file(iota_tokens(50, 0), 20240520, 1, 40));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "d.bin"); }), HasSubstr("(bytes after the last token)"));
  bmt::test::write_file(dir / "e.bin", llmc_file({}, 20240520, 1, -3));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "e.bin"); }), HasSubstr("expected a positive token count, found -3"));
}

TEST(TokenShard, RawFileProblems) {
  SharedTempDir dir;
  bmt::test::write_file(dir / "odd.bin", "abc");
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "odd.bin", TokenFileFormat::raw_u16); }),
              HasSubstr("(raw uint16): expected an even number of bytes (uint16 tokens), found 3"));
  bmt::test::write_file(dir / "empty.bin", "");
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "empty.bin", TokenFileFormat::raw_u16); }), HasSubstr("found an empty file"));
  EXPECT_THAT(error_of([&] { TokenShard s(dir / "missing.bin"); }), HasSubstr("cannot open: No such file"));
}

TEST(TokenDataset, GlobSortsShardsAndWindowsStayInsideShards) {
  SharedTempDir dir;
  // Written out of order; c has too few tokens for one window of T=4 (needs 5).
  bmt::test::write_file(dir / "shard_b.bin", llmc_file(iota_tokens(13, 100)));
  bmt::test::write_file(dir / "shard_a.bin", llmc_file(iota_tokens(9, 0)));
  bmt::test::write_file(dir / "shard_c.bin", llmc_file(iota_tokens(4, 200)));
  bmt::test::write_file(dir / "other.bin", llmc_file(iota_tokens(50, 1000)));
  TokenDataset data(dir / "shard_*.bin");
  ASSERT_EQ(data.shard_count(), 3u);
  EXPECT_EQ(data.shard(0).path(), dir / "shard_a.bin");
  EXPECT_EQ(data.shard(2).path(), dir / "shard_c.bin");
  EXPECT_EQ(data.token_count(), 26u);
  // T = 4: a has (9-1)/4 = 2 windows, b (13-1)/4 = 3, c none.
  ASSERT_EQ(data.sequence_count(4), 5u);
  std::vector<std::int32_t> seq(5);
  const std::vector<std::vector<std::int32_t>> want = {
      {0, 1, 2, 3, 4}, {4, 5, 6, 7, 8}, {100, 101, 102, 103, 104}, {104, 105, 106, 107, 108}, {108, 109, 110, 111, 112}};
  for (std::uint64_t i = 0; i < 5; ++i) {
    data.sequence(i, 4, seq.data());
    EXPECT_EQ(seq, want[i]) << "window " << i;
  }
  EXPECT_THAT(error_of([&] { data.sequence(5, 4, seq.data()); }), HasSubstr("expected a sequence index below 5"));
  // One path without wildcards is a pattern too.
  EXPECT_EQ(TokenDataset(dir / "other.bin").shard_count(), 1u);
  EXPECT_THAT(error_of([&] { TokenDataset d(dir / "nothing_*.bin"); }), HasSubstr("expected files matching"));
}

TEST(WindowShuffle, IsABijectionThatDependsOnTheKey) {
  for (std::uint64_t n : {1ull, 2ull, 3ull, 7ull, 64ull, 100ull, 1000ull, 4097ull}) {
    bmt::data::WindowShuffle a(n, 1), b(n, 2);
    std::set<std::uint64_t> seen;
    bool differs = false;
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto v = a(i);
      ASSERT_LT(v, n);
      seen.insert(v);
      differs = differs || v != b(i);
      ASSERT_EQ(v, bmt::data::WindowShuffle(n, 1)(i)) << "deterministic";
    }
    EXPECT_EQ(seen.size(), n) << "n = " << n;
    if (n >= 7) EXPECT_TRUE(differs) << "n = " << n;
  }
  // Not the identity, and not a rotation.
  bmt::data::WindowShuffle s(1000, 7);
  int fixed = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) fixed += s(i) == i;
  EXPECT_LT(fixed, 10);
}
