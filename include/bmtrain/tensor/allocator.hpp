#pragma once
// A caching allocator for tensor storage in the Kokkos memory space (device memory on the CUDA
// build, host memory otherwise). Freed blocks are kept and handed out again for requests of a
// similar size, so that a training step allocates nothing new from the system after warm-up. A
// request of 1 MiB or more may take the first part of a larger cached block, and a freed block
// joins the free blocks beside it in its system allocation, so that memory held by tensors of one
// size in one phase of a step (a forward's activations) serves tensors of another in the next (the
// gradient shards a backward makes).
//
// Reuse is ordered by the compute stream: a block freed by the host while kernels on the compute
// stream still use it is only handed out to later work on that same stream. Memory used by another
// stream must be kept alive by its user until an event on that stream says the work is done.
#include <cstddef>
#include <cstdint>

namespace bmt {

struct MemoryStats {
  std::size_t allocated_bytes = 0;       // in use by tensors now
  std::size_t peak_allocated_bytes = 0;  // highest allocated_bytes since the last reset
  std::size_t reserved_bytes = 0;        // taken from the system: in use plus cached
  std::size_t peak_reserved_bytes = 0;
  std::uint64_t system_allocations = 0;  // blocks taken from the system so far
  std::uint64_t allocations = 0;         // requests served so far
};

class CachingAllocator {
 public:
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr);
  MemoryStats stats() const;
  void reset_peak();
  // Returns to the system every system allocation that is wholly cached (unused).
  void release_cached();

  // The allocator for the Kokkos default memory space.
  static CachingAllocator& instance();
};

inline MemoryStats memory_stats() { return CachingAllocator::instance().stats(); }

// Every allocation is aligned to this many bytes (enough for vector loads of any element type).
constexpr std::size_t kAllocationAlignment = 256;

}  // namespace bmt
