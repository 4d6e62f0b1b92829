#pragma once
// Token files, memory-mapped: llm.c shards and nanoGPT's headerless train.bin.
//
//   llm.c:   256 int32 header (magic 20240520, version 1, token count N, rest unused), then N uint16
//   raw:     uint16 tokens and nothing else (nanoGPT's train.bin / val.bin)
//
// TokenDataset takes every file matching a glob pattern, sorted by path, and offers their
// sequences: window k of a shard is tokens [k*T, k*T + T + 1) (windows never cross shards), so each
// token is a target exactly once per epoch.
#include <cstdint>
#include <string>
#include <vector>

#include "bmtrain/io/sequence_source.hpp"

namespace bmt::io {

enum class TokenFileFormat {
  detect,  // llm.c if the first int32 is the llm.c magic, raw otherwise
  llmc,
  raw_u16,
};

// One token file, mapped read-only; validated when opened.
class TokenShard {
 public:
  static constexpr std::int32_t kLlmcMagic = 20240520;
  static constexpr std::int32_t kLlmcVersion = 1;
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
  const std::uint16_t* tokens() const { return tokens_; }
  std::uint16_t operator[](std::uint64_t i) const { return tokens_[i]; }

 private:
  std::string path_;
  TokenFileFormat format_ = TokenFileFormat::raw_u16;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const std::uint16_t* tokens_ = nullptr;
  std::uint64_t count_ = 0;
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

}  // namespace bmt::io
