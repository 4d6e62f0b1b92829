#pragma once
// Shared by the collective tests: deterministic per-rank inputs for every dtype, buffers in the
// memory space the communicator works on, and comparison against float64 host references.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/dtype.hpp"
#include "bmtrain/runtime/half.hpp"

namespace bmt::test {

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rounds v to the nearest value of dtype t (integers are produced exactly by sample()).
inline double representable(DType t, double v) {
  switch (t) {
    case DType::f32: return static_cast<float>(v);
    case DType::bf16: return bf16_t::to_float(bf16_t::from_float(static_cast<float>(v)));
    case DType::f16: return f16_t::to_float(f16_t::from_float(static_cast<float>(v)));
    default: return v;
  }
}

// The input element i of `rank` for one collective call (`salt` tells calls apart). Integer ranges
// are small enough that the sum over 4 ranks neither overflows u8/u16 nor leaves double's exact range.
inline double sample(DType t, int rank, std::size_t i, std::uint64_t salt) {
  const std::uint64_t h = mix(mix(salt * 1000003u + static_cast<std::uint64_t>(rank)) ^ i);
  switch (t) {
    case DType::f32: case DType::bf16: case DType::f16:
      return representable(t, 4.0 * static_cast<double>(h >> 11) * 0x1p-53 - 2.0);
    case DType::i32: return static_cast<double>(static_cast<std::int64_t>(h % 2000001) - 1000000);
    case DType::i64:  // beyond 32 bits, so a 32-bit path would show
      return static_cast<double>(static_cast<std::int64_t>(h % (std::uint64_t(1) << 50)) - (std::int64_t(1) << 49));
    case DType::u16: return static_cast<double>(h % 16001);
    case DType::u8: return static_cast<double>(h % 61);
  }
  return 0;
}

inline void store(DType t, double v, unsigned char* dst) {
  switch (t) {
    case DType::f32: { float x = static_cast<float>(v); std::memcpy(dst, &x, 4); break; }
    case DType::bf16: { std::uint16_t x = bf16_t::from_float(static_cast<float>(v)); std::memcpy(dst, &x, 2); break; }
    case DType::f16: { std::uint16_t x = f16_t::from_float(static_cast<float>(v)); std::memcpy(dst, &x, 2); break; }
    case DType::i32: { std::int32_t x = static_cast<std::int32_t>(v); std::memcpy(dst, &x, 4); break; }
    case DType::i64: { std::int64_t x = static_cast<std::int64_t>(v); std::memcpy(dst, &x, 8); break; }
    case DType::u16: { std::uint16_t x = static_cast<std::uint16_t>(v); std::memcpy(dst, &x, 2); break; }
    case DType::u8: *dst = static_cast<std::uint8_t>(v); break;
  }
}

inline double load(DType t, const unsigned char* src) {
  switch (t) {
    case DType::f32: { float x; std::memcpy(&x, src, 4); return x; }
    case DType::bf16: { std::uint16_t x; std::memcpy(&x, src, 2); return bf16_t::to_float(x); }
    case DType::f16: { std::uint16_t x; std::memcpy(&x, src, 2); return f16_t::to_float(x); }
    case DType::i32: { std::int32_t x; std::memcpy(&x, src, 4); return x; }
    case DType::i64: { std::int64_t x; std::memcpy(&x, src, 8); return static_cast<double>(x); }
    case DType::u16: { std::uint16_t x; std::memcpy(&x, src, 2); return x; }
    case DType::u8: return *src;
  }
  return 0;
}

// Host bytes holding `count` elements of dtype t.
struct HostArray {
  DType t;
  std::vector<unsigned char> bytes;
  HostArray(DType t_, std::size_t count) : t(t_), bytes(count * dtype_size(t_)) {}
  std::size_t size() const { return bytes.size() / dtype_size(t); }
  double get(std::size_t i) const { return load(t, bytes.data() + i * dtype_size(t)); }
  void set(std::size_t i, double v) { store(t, v, bytes.data() + i * dtype_size(t)); }
};

// Where a collective's buffers live and which stream it is queued on. Device communicators work on
// the Kokkos default memory space (device memory on the CUDA build); the host communicator on host memory.
struct Channel {
  std::string name;
  Communicator* comm;
  Stream* stream;
  bool host_memory;
};

inline std::vector<Channel> channels() {
  Context& c = context();
  return {{"gather", &c.gather_comm(), &c.gather_stream(), false},
          {"scatter", &c.scatter_comm(), &c.scatter_stream(), false},
          {"world", &c.world_comm(), &c.compute_stream(), false},
          {"host", &c.host_comm(), &c.compute_stream(), true}};
}

// A buffer in the channel's memory space.
class Buffer {
 public:
  using DeviceView = Kokkos::View<unsigned char*, Kokkos::DefaultExecutionSpace::memory_space>;
  using HostView = Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  Buffer(const Channel& ch, std::size_t bytes) : host_memory_(ch.host_memory) {
    if (host_memory_) host_.resize(bytes);
    else device_ = DeviceView(Kokkos::view_alloc(Kokkos::WithoutInitializing, "collective test"), bytes);
  }
  unsigned char* data() { return host_memory_ ? host_.data() : device_.data(); }
  void upload(const HostArray& a) {
    if (host_memory_) host_ = a.bytes;
    else Kokkos::deep_copy(device_, HostView(const_cast<unsigned char*>(a.bytes.data()), a.bytes.size()));
  }
  void download(HostArray& a) {
    if (host_memory_) a.bytes = host_;
    else Kokkos::deep_copy(HostView(a.bytes.data(), a.bytes.size()), device_);
  }

 private:
  bool host_memory_;
  std::vector<unsigned char> host_;
  DeviceView device_;
};

inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::f32: return 0x1p-24;
    case DType::bf16: return 0x1p-8;
    case DType::f16: return 0x1p-11;
    default: return 0;
  }
}

// Compares got[i] with want[i]. Integer dtypes, max, gathers and copies must match exactly;
// floating sums may differ by tol[i]. Reports the number of mismatches and the first few.
inline ::testing::AssertionResult matches(const HostArray& got, const std::vector<double>& want,
                                          const std::vector<double>& tol = {}) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "expected " << want.size() << " elements, found " << got.size();
  std::size_t bad = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.get(i), w = want[i], e = tol.empty() ? 0.0 : tol[i];
    const bool ok = std::isnan(w) ? std::isnan(g) : std::fabs(g - w) <= e;
    if (!ok && bad++ < 5) first << "\n  [" << i << "] expected " << w << " (tolerance " << e << "), found " << g;
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << want.size() << " elements differ:" << first.str();
  return ::testing::AssertionSuccess();
}

}  // namespace bmt::test
