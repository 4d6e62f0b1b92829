// Fuzz target: token files (bmt::data::TokenShard and TokenDataset: llm.c shards of uint16 and uint32 tokens, raw uint16),
// whose header is read from disk and then trusted to index the tokens, in each format a run can
// ask for (detect, llmc, raw). The input is the file's content, written to a scratch file. Rejection must be a bmt::Error; an accepted file must
// give a token count that fits the file, and every sequence it offers must be readable.
#include <bmtrain/data/token_dataset.hpp>
#include <bmtrain/runtime/error.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = input_as_file(data, size);
  using bmt::data::TokenFileFormat;
  for (auto format : {TokenFileFormat::detect, TokenFileFormat::llmc, TokenFileFormat::raw_u16}) {
    try {
      bmt::data::TokenShard shard(path, format);
      const std::uint64_t header = shard.format() == TokenFileFormat::llmc ? bmt::data::TokenShard::kLlmcHeaderBytes : 0;
      BMT_FUZZ_CHECK(shard.size() > 0 && header + shard.token_bytes() * shard.size() == size);
      std::vector<std::uint32_t> tokens(shard.size());
      shard.read(0, tokens.size(), tokens.data());  // every token is readable
      bool refused = false;
      try {
        shard.read(shard.size(), 1, tokens.data());
      } catch (const bmt::Error&) {
        refused = true;
      }
      BMT_FUZZ_CHECK(refused);  // one past the last token is an error, not a read past the file
    } catch (const bmt::Error&) {
    }
  }
  for (auto format : {TokenFileFormat::detect, TokenFileFormat::raw_u16}) {
    try {
      bmt::data::TokenDataset dataset(path, format);
      for (std::size_t seq_len : {1, 7, 64}) {
        std::vector<std::int32_t> sequence(seq_len + 1);
        const std::uint64_t n = dataset.sequence_count(seq_len);
        BMT_FUZZ_CHECK(n * seq_len < dataset.token_count() || n == 0);
        for (std::uint64_t i = 0; i < n && i < 64; ++i) dataset.sequence(n - 1 - i, seq_len, sequence.data());
        bool refused = false;
        try {
          dataset.sequence(n, seq_len, sequence.data());
        } catch (const bmt::Error&) {
          refused = true;
        }
        BMT_FUZZ_CHECK(refused);  // one past the last sequence is an error, not a read past the file
      }
    } catch (const bmt::Error&) {
    }
  }
  return 0;
}
