#pragma once
// Counter-based random numbers: the value at index i of stream `key` is a pure function of
// (key, i), so any rank can produce any slice of a random tensor on its own (sharded parameter
// init that is the same for every world size) and a recompute sees the same dropout mask.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>

#include "bmtrain/kernels/math.hpp"

namespace bmt::random {

// SplitMix64 finalizer: a bijective 64-bit mix with good avalanche.
KOKKOS_INLINE_FUNCTION std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// 64 random bits for element `index` of stream `key`.
KOKKOS_INLINE_FUNCTION std::uint64_t bits(std::uint64_t key, std::uint64_t index) {
  return mix64(mix64(key) ^ mix64(index * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull));
}

// Uniform in [0, 1) from the top 24 bits.
KOKKOS_INLINE_FUNCTION float uniform(std::uint64_t key, std::uint64_t index) {
  return static_cast<float>(bits(key, index) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller on two independent 32-bit halves.
KOKKOS_INLINE_FUNCTION float normal(std::uint64_t key, std::uint64_t index) {
  const std::uint64_t b = bits(key, index);
  const float u1 = (static_cast<float>(b >> 40) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
  const float u2 = static_cast<float>((b >> 8) & 0xffffffu) * (1.0f / 16777216.0f);
  return kmath::sqrt(-2.0f * kmath::log(u1)) * kmath::cos(6.2831853071795864769f * u2);
}

// A stream key derived from a seed and a name (a parameter's dotted name, "dropout", ...):
// FNV-1a over the name, mixed with the seed.
inline std::uint64_t key(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix64(seed ^ mix64(h));
}

// The stream of keys ops such as dropout draw from: key(seed, "random") mixed with a counter that
// advances once per draw. CheckpointBlock saves the counter before a block's forward and replays
// it during the recompute, so the recompute draws the same keys (the same dropout masks).
std::uint64_t next_key();
std::uint64_t key_counter();
void set_key_counter(std::uint64_t counter);

}  // namespace bmt::random
