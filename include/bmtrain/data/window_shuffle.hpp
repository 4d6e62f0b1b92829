#pragma once
// A pseudo-random permutation of [0, n), evaluated one index at a time: a 4-round Feistel network on
// the smallest power-of-4 domain that holds n, walking cycles until the value falls below n. It
// needs no memory (a permutation of billions of windows is not stored) and any rank can compute any
// position of it, so every world size agrees on the order.
#include <cstdint>

namespace bmt::data {

class WindowShuffle {
 public:
  WindowShuffle(std::uint64_t n, std::uint64_t key);
  std::uint64_t size() const { return n_; }
  // The value at position i (i < n); a bijection of [0, n).
  std::uint64_t operator()(std::uint64_t i) const;

 private:
  std::uint64_t round_function(int round, std::uint64_t half) const;
  std::uint64_t n_ = 0;
  std::uint64_t key_ = 0;
  unsigned half_bits_ = 1;
  std::uint64_t mask_ = 1;
};

}  // namespace bmt::data
