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

// A request of at least this size may take part of a larger cached block (split), where a
// smaller one takes a block of its own: small blocks are not carved out of the large ones that
// whole tensors come back to.
constexpr std::size_t kSplitFrom = std::size_t(1) << 20;

// A run of memory in one system allocation (its segment): handed out, or cached (free).
struct Block {
  std::size_t size = 0;
  char* segment = nullptr;
  bool free = false;
};

struct AllocatorState {
  std::mutex mutex;
  std::map<char*, Block> blocks;                     // every block, by address
  std::multimap<std::size_t, char*> cached;          // the free blocks, by size
  std::unordered_map<char*, std::size_t> segments;   // system allocations: base -> size
  MemoryStats stats;
  bool teardown_registered = false;

  void uncache(char* ptr, std::size_t size) {
    for (auto [it, end] = cached.equal_range(size); it != end; ++it)
      if (it->second == ptr) {
        cached.erase(it);
        return;
      }
  }

  // Segments that are one free block go back to the system; parts of segments in use stay.
  void release_cached_locked() {
    for (auto it = cached.begin(); it != cached.end();) {
      char* ptr = it->second;
      const auto segment = segments.find(ptr);
      if (segment == segments.end() || segment->second != it->first) {
        ++it;
        continue;
      }
      memory::system_free(ptr);
      stats.reserved_bytes -= segment->second;
      segments.erase(segment);
      blocks.erase(ptr);
      it = cached.erase(it);
    }
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
  char* ptr = nullptr;
  // Best fit among cached blocks: whole when at most 1/8 is wasted, else, for a large request, its
  // first `size` bytes, the rest staying cached. A block given back joins its free neighbours in
  // its segment, so that memory freed as tensors of one size serves tensors of another (the
  // activations of a forward and the gradient shards of the backward after it, say).
  auto it = s.cached.lower_bound(size);
  if (it != s.cached.end() && (it->first <= size + size / 8 || size >= kSplitFrom)) {
    ptr = it->second;
    std::size_t got = it->first;
    s.cached.erase(it);
    Block& block = s.blocks[ptr];
    if (got > size + size / 8) {
      s.blocks[ptr + size] = Block{got - size, block.segment, true};
      s.cached.emplace(got - size, ptr + size);
      got = size;
    }
    block.size = got;
    block.free = false;
    s.stats.allocated_bytes += got;
  } else {
    ptr = static_cast<char*>(memory::system_allocate(size));
    if (!ptr) {  // give the cache back to the system and try once more
      s.release_cached_locked();
      ptr = static_cast<char*>(memory::system_allocate(size));
    }
    BMT_REQUIRE(ptr, "out of memory: expected to allocate " << size << " bytes, with "
                         << s.stats.allocated_bytes << " bytes in use and " << s.stats.reserved_bytes
                         << " reserved");
    s.blocks[ptr] = Block{size, ptr, false};
    s.segments[ptr] = size;
    s.stats.allocated_bytes += size;
    s.stats.reserved_bytes += size;
    ++s.stats.system_allocations;
  }
  ++s.stats.allocations;
  if (s.stats.allocated_bytes > s.stats.peak_allocated_bytes) s.stats.peak_allocated_bytes = s.stats.allocated_bytes;
  if (s.stats.reserved_bytes > s.stats.peak_reserved_bytes) s.stats.peak_reserved_bytes = s.stats.reserved_bytes;
  return ptr;
}

void CachingAllocator::deallocate(void* p) {
  if (!p) return;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.blocks.find(static_cast<char*>(p));
  if (it == s.blocks.end() || it->second.free) BMT_FATAL("CachingAllocator::deallocate: " << p << " was not allocated here");
  s.stats.allocated_bytes -= it->second.size;
  it->second.free = true;
  auto joins = [&](const auto& a, const auto& b) {  // a and b free, b right after a in a's segment
    return a->second.free && b->second.free && a->second.segment == b->second.segment &&
           a->first + a->second.size == b->first;
  };
  if (auto next = std::next(it); next != s.blocks.end() && joins(it, next)) {
    s.uncache(next->first, next->second.size);
    it->second.size += next->second.size;
    s.blocks.erase(next);
  }
  if (it != s.blocks.begin()) {
    if (auto prev = std::prev(it); joins(prev, it)) {
      s.uncache(prev->first, prev->second.size);
      prev->second.size += it->second.size;
      s.blocks.erase(it);
      it = prev;
    }
  }
  s.cached.emplace(it->second.size, it->first);
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
