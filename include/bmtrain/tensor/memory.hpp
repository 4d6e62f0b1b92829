#pragma once
// Raw memory operations on the Kokkos default memory space, the one seam between the tensor layer
// and the backend (host or CUDA). Device-side copies are ordered on the compute stream.
#include <cstddef>

namespace bmt {
class Stream;
}

namespace bmt::memory {

void* system_allocate(std::size_t bytes);  // nullptr when the system has no more
void system_free(void* ptr);
// Bytes this rank's memory space can still hand out: the CUDA device's free memory plus what the
// caching allocator holds unused, or on the host build the host's available memory
// (bmt::available_host_memory). For checks that refuse what cannot fit before it is allocated.
std::size_t available_device_memory();
// Blocking copies between the memory space and host memory.
void copy_to_host(void* host_dst, const void* src, std::size_t bytes);
void copy_from_host(void* dst, const void* host_src, std::size_t bytes);
// Copy within the memory space, queued on the compute stream.
void copy(void* dst, const void* src, std::size_t bytes);
void set_zero(void* dst, std::size_t bytes);
// Host memory that asynchronous copies can use (page-locked on the CUDA build).
void* pinned_allocate(std::size_t bytes);
void pinned_free(void* ptr);
// Page-locks host memory the caller allocated (page-aligned), in place, for every device's copies
// alike, so that asynchronous copies can use it as pinned_allocate's: memory touched by several
// threads first and locked afterwards is ready sooner than pinned_allocate's, which one thread
// touches. May be called from any thread. False when the system refuses. unpin before freeing.
bool pin(void* ptr, std::size_t bytes);
void unpin(void* ptr);
// Copies queued on `stream` (host memory must come from pinned_allocate); record an event on the
// stream to know when they are done.
void copy_to_host_async(void* host_dst, const void* src, std::size_t bytes, Stream& stream);
void copy_from_host_async(void* dst, const void* host_src, std::size_t bytes, Stream& stream);
// A pinned host buffer, freed with its owner.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer() { pinned_free(data_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_;
  std::size_t bytes_;
};

// True when the memory space is the host's (the host build).
constexpr bool is_host() {
#ifdef BMT_ENABLE_CUDA
  return false;
#else
  return true;
#endif
}

}  // namespace bmt::memory
