#include "bmtrain/data/window_shuffle.hpp"

#include "bmtrain/kernels/random.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::data {

WindowShuffle::WindowShuffle(std::uint64_t n, std::uint64_t key) : n_(n), key_(key) {
  BMT_REQUIRE(n > 0, "WindowShuffle: expected at least one element, found 0");
  while (half_bits_ < 32 && (std::uint64_t(1) << (2 * half_bits_)) < n) ++half_bits_;
  mask_ = (std::uint64_t(1) << half_bits_) - 1;
}

std::uint64_t WindowShuffle::round_function(int round, std::uint64_t half) const {
  return random::bits(key_ + static_cast<std::uint64_t>(round), half) & mask_;
}

std::uint64_t WindowShuffle::operator()(std::uint64_t i) const {
  BMT_REQUIRE(i < n_, "WindowShuffle: expected a position below " << n_ << ", found " << i);
  std::uint64_t x = i;
  do {
    std::uint64_t left = x >> half_bits_, right = x & mask_;
    for (int r = 0; r < 4; ++r) {
      const std::uint64_t next = left ^ round_function(r, right);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= n_);  // the domain holds at most 4n values, so this ends after a few rounds on average
  return x;
}

}  // namespace bmt::data
