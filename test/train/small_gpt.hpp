#pragma once
// The small GPT the end-to-end tests train, and its data: a global batch per step that every
// world size splits the same way.
#include <cstdint>
#include <string>
#include <vector>

#include <bmtrain/bmtrain.hpp>

namespace small_gpt {

constexpr std::int64_t kGlobalBatch = 12, kSeq = 16;

inline bmt::models::ModelConfig config(const std::string& arch, std::int64_t layers = 4) {
  bmt::models::ModelConfig c;
  c.arch = arch;
  c.vocab = 67;
  c.max_seq = kSeq;
  c.layers = layers;
  c.heads = 2;
  c.dim = 32;
  c.ffn = arch == "gpt2" ? 128 : 96;
  c.tie_embeddings = arch == "gpt2";  // Llama 2's head: its own
  return c;
}

// The global batch of step s: tokens [B, T+1], each sequence following x' = (5x + 3) mod V from
// a pseudo-random start, so there is something to learn; the same at every world size.
inline std::vector<std::int64_t> global_batch(int step, std::int64_t vocab) {
  std::vector<std::int64_t> t(static_cast<std::size_t>(kGlobalBatch * (kSeq + 1)));
  std::uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(step + 1);
  for (std::int64_t b = 0; b < kGlobalBatch; ++b) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::int64_t v = static_cast<std::int64_t>(x % static_cast<std::uint64_t>(vocab));
    for (std::int64_t i = 0; i <= kSeq; ++i) {
      t[static_cast<std::size_t>(b * (kSeq + 1) + i)] = v;
      v = (5 * v + 3) % vocab;
    }
  }
  return t;
}

// Sequences [first, first + count) of a global batch as model input and next-token targets.
struct Split {
  std::vector<std::int64_t> tokens, targets;  // [count, kSeq], row-major
};
inline Split sequences(const std::vector<std::int64_t>& batch, std::int64_t first, std::int64_t count) {
  Split s;
  for (std::int64_t b = first; b < first + count; ++b)
    for (std::int64_t t = 0; t < kSeq; ++t) {
      s.tokens.push_back(batch[static_cast<std::size_t>(b * (kSeq + 1) + t)]);
      s.targets.push_back(batch[static_cast<std::size_t>(b * (kSeq + 1) + t + 1)]);
    }
  return s;
}

}  // namespace small_gpt
