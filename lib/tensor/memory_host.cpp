// Host build of the raw memory seam: aligned heap memory, memcpy and memset.
#include <cstdlib>
#include <cstring>

#include "bmtrain/runtime/host_memory.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/tensor/memory.hpp"
#include "bmtrain/runtime/stream.hpp"

namespace bmt::memory {

void* system_allocate(std::size_t bytes) {
  const std::size_t rounded = (bytes + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment;
  return std::aligned_alloc(kAllocationAlignment, rounded);
}
void system_free(void* ptr) { std::free(ptr); }
std::size_t available_device_memory() { return available_host_memory(); }
void copy_to_host(void* host_dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}
void copy_from_host(void* dst, const void* host_src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}
void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}
void set_zero(void* dst, std::size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}
void* pinned_allocate(std::size_t bytes) { return system_allocate(bytes); }
void pinned_free(void* ptr) { system_free(ptr); }
bool pin(void*, std::size_t) { return true; }  // nothing to lock: copies are memcpy on the host
void unpin(void*) {}
void copy_to_host_async(void* host_dst, const void* src, std::size_t bytes, Stream& stream) {
  stream.launch([=] { copy_to_host(host_dst, src, bytes); });
}
void copy_from_host_async(void* dst, const void* host_src, std::size_t bytes, Stream& stream) {
  stream.launch([=] { copy_from_host(dst, host_src, bytes); });
}

}  // namespace bmt::memory
