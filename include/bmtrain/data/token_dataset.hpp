#pragma once
// Token files: llm.c shards and nanoGPT's headerless train.bin.
//
//   llm.c:   256 int32 header (magic, version, token count N, rest unused), then N tokens:
//              magic 20240520, version 1: uint16 tokens (GPT-2's tokenizer, llm.c's "gpt-2")
//              magic 20240801, version 7: uint32 tokens (Llama 3's 128256, llm.c's "llama-3")
//   raw:     uint16 tokens and nothing else (nanoGPT's train.bin / val.bin)
//
// A raw file has nothing to check its contents by, so it is read only when asked for (raw_u16), or
// by `detect` when it is named as nanoGPT names its files: train.bin or val.bin. Anything else
// without the llm.c magic is refused when opened, as is a file whose header looks like llm.c's but
// whose magic number is wrong.
//
// Files are read with pread, not mapped: a file truncated under a mapping kills the process with
// SIGBUS at the first read past its new end. A shard remembers its file's size and modification
// time and checks both at every read, so a file changed or truncated while a job reads it ends the
// job with a bmt::Error naming it.
//
// TokenDataset takes every file matching a glob pattern, sorted by path, and offers their
// sequences: window k of a shard is tokens [k*T, k*T + T + 1) (windows never cross shards), so each
// token is a target exactly once per epoch.
#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "bmtrain/data/sequence_source.hpp"

namespace bmt::data {

enum class TokenFileFormat {
  detect,  // llm.c if the first int32 is the llm.c magic; raw only for nanoGPT's names (train.bin, val.bin)
  llmc,
  raw_u16,
};

// "auto" (detect), "llmc" or "raw"; throws bmt::Error naming the accepted names otherwise.
TokenFileFormat parse_token_file_format(const std::string& name);

// One token file, open for reading; validated when opened.
class TokenShard {
 public:
  static constexpr std::int32_t kLlmcMagic = 20240520;  // uint16 tokens
  static constexpr std::int32_t kLlmcVersion = 1;
  static constexpr std::int32_t kLlmcLlama3Magic = 20240801;  // uint32 tokens
  static constexpr std::int32_t kLlmcLlama3Version = 7;
  static constexpr std::size_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);

  explicit TokenShard(const std::string& path, TokenFileFormat format = TokenFileFormat::detect);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  TokenFileFormat format() const { return format_; }  // llmc or raw_u16, never detect
  std::uint64_t size() const { return count_; }      // tokens
  std::size_t token_bytes() const { return token_bytes_; }  // 2 (uint16) or 4 (uint32) on disk
  // Tokens [first, first + count) into `out`, whatever their width on disk. Throws bmt::Error if
  // the range is beyond the shard, or the file has changed since it was opened (size or
  // modification time) or ends early.
  void read(std::uint64_t first, std::size_t count, std::uint32_t* out) const;
  std::uint32_t operator[](std::uint64_t i) const;

 private:
  std::string path_;
  TokenFileFormat format_ = TokenFileFormat::raw_u16;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;   // the file's size when opened
  timespec modified_{};       // its modification time then
  std::uint64_t offset_ = 0;  // bytes before the first token
  std::uint64_t count_ = 0;
  std::size_t token_bytes_ = 2;
};

class TokenDataset final : public SequenceSource {
 public:
  // `pattern`: a glob(3) pattern ("data/fineweb_train_*.bin") or one path. Throws bmt::Error if
  // nothing matches or a file is invalid.
  explicit TokenDataset(const std::string& pattern, TokenFileFormat format = TokenFileFormat::detect);

  std::size_t shard_count() const { return shards_.size(); }
  const TokenShard& shard(std::size_t i) const { return shards_.at(i); }
  std::uint64_t token_count() const;

  std::uint64_t sequence_count(std::size_t seq_len) const override;
  void sequence(std::uint64_t index, std::size_t seq_len, std::int32_t* out) const override;

 private:
  std::vector<TokenShard> shards_;
};

}  // namespace bmt::data
