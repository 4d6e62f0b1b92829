#include "bmtrain/tensor/allocator.hpp"

#include <map>
#include <mutex>
#include <unordered_map>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/tensor/memory.hpp"

namespace bmt {

namespace {

// Small requests round up to 512 bytes, large ones to 2 MiB, so that the same shapes map to the
// same blocks step after step and a cached block is rarely much larger than asked for.
std::size_t round_size(std::size_t bytes) {
  constexpr std::size_t kSmall = 512, kLarge = std::size_t(2) << 20;
  if (bytes == 0) bytes = 1;
  const std::size_t unit = bytes < (std::size_t(1) << 20) ? kSmall : kLarge;
  return (bytes + unit - 1) / unit * unit;
}

struct AllocatorState {
  std::mutex mutex;
  std::multimap<std::size_t, void*> cached;        // size -> free block
  std::unordered_map<void*, std::size_t> in_use;   // block -> size
  MemoryStats stats;
  bool teardown_registered = false;

  void release_cached_locked() {
    for (auto& [size, ptr] : cached) {
      memory::system_free(ptr);
      stats.reserved_bytes -= size;
    }
    cached.clear();
  }
};

AllocatorState& state() {
  static AllocatorState s;
  return s;
}

}  // namespace

void* CachingAllocator::allocate(std::size_t bytes) {
  auto& s = state();
  const std::size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.teardown_registered && is_initialized()) {
    // Cached blocks must go back before Kokkos and the device do.
    at_finalize([this] { release_cached(); });
    s.teardown_registered = true;
  }
  void* ptr = nullptr;
  // Best fit among cached blocks, accepting at most 1/8 waste.
  auto it = s.cached.lower_bound(size);
  if (it != s.cached.end() && it->first <= size + size / 8) {
    ptr = it->second;
    const std::size_t got = it->first;
    s.cached.erase(it);
    s.in_use[ptr] = got;
    s.stats.allocated_bytes += got;
  } else {
    ptr = memory::system_allocate(size);
    if (!ptr) {  // give the cache back to the system and try once more
      s.release_cached_locked();
      ptr = memory::system_allocate(size);
    }
    BMT_REQUIRE(ptr, "out of memory: expected to allocate " << size << " bytes, with "
                         << s.stats.allocated_bytes << " bytes in use and " << s.stats.reserved_bytes
                         << " reserved");
    s.in_use[ptr] = size;
    s.stats.allocated_bytes += size;
    s.stats.reserved_bytes += size;
    ++s.stats.system_allocations;
  }
  ++s.stats.allocations;
  if (s.stats.allocated_bytes > s.stats.peak_allocated_bytes) s.stats.peak_allocated_bytes = s.stats.allocated_bytes;
  if (s.stats.reserved_bytes > s.stats.peak_reserved_bytes) s.stats.peak_reserved_bytes = s.stats.reserved_bytes;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.in_use.find(ptr);
  if (it == s.in_use.end()) BMT_FATAL("CachingAllocator::deallocate: " << ptr << " was not allocated here");
  s.stats.allocated_bytes -= it->second;
  s.cached.emplace(it->second, ptr);
  s.in_use.erase(it);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().stats;
}

void CachingAllocator::reset_peak() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stats.peak_allocated_bytes = s.stats.allocated_bytes;
  s.stats.peak_reserved_bytes = s.stats.reserved_bytes;
}

void CachingAllocator::release_cached() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.release_cached_locked();
  s.teardown_registered = false;
}

memory::PinnedBuffer::PinnedBuffer(std::size_t bytes) : data_(memory::pinned_allocate(bytes)), bytes_(bytes) {
  BMT_REQUIRE(data_ || bytes == 0, "out of pinned host memory: expected to allocate " << bytes << " bytes");
}

CachingAllocator& CachingAllocator::instance() {
  static CachingAllocator allocator;
  return allocator;
}

}  // namespace bmt
