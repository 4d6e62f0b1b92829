// CUDA build of the raw memory seam: cudaMalloc'd blocks; copies and fills on the compute stream.
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/cuda_check.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/tensor/memory.hpp"

namespace bmt::memory {

namespace {
cudaStream_t compute() { return is_initialized() ? context().compute_stream().native() : nullptr; }
}  // namespace

void* system_allocate(std::size_t bytes) {
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky out-of-memory error; the caller retries or reports
    return nullptr;
  }
  return ptr;
}
std::size_t available_device_memory() {
  std::size_t free = 0, total = 0;
  BMT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  // Blocks the caching allocator keeps for reuse are this rank's to hand out as well.
  const auto stats = memory_stats();
  return free + (stats.reserved_bytes - stats.allocated_bytes);
}
void system_free(void* ptr) {
  // The block may still be in use by queued work: wait for the device first.
  BMT_CUDA_CHECK(cudaDeviceSynchronize());
  BMT_CUDA_CHECK(cudaFree(ptr));
}
void copy_to_host(void* host_dst, const void* src, std::size_t bytes) {
  if (!bytes) return;
  BMT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, compute()));
  BMT_CUDA_CHECK(cudaStreamSynchronize(compute()));
}
void copy_from_host(void* dst, const void* host_src, std::size_t bytes) {
  if (!bytes) return;
  BMT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, compute()));
  BMT_CUDA_CHECK(cudaStreamSynchronize(compute()));
}
void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes && dst != src) BMT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute()));
}
void set_zero(void* dst, std::size_t bytes) {
  if (bytes) BMT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute()));
}
void* pinned_allocate(std::size_t bytes) {
  void* ptr = nullptr;
  if (cudaMallocHost(&ptr, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return ptr;
}
void pinned_free(void* ptr) {
  if (ptr) BMT_CUDA_CHECK(cudaFreeHost(ptr));
}
bool pin(void* ptr, std::size_t bytes) {
  if (!bytes) return true;
  // A thread the runtime did not start has device 0 current, whose context it would create: the
  // rank's device first.
  BMT_CUDA_CHECK(cudaSetDevice(context().topology().device));
  if (cudaHostRegister(ptr, bytes, cudaHostRegisterPortable) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}
void unpin(void* ptr) {
  if (ptr) BMT_CUDA_CHECK(cudaHostUnregister(ptr));
}
void copy_to_host_async(void* host_dst, const void* src, std::size_t bytes, Stream& stream) {
  if (bytes) BMT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream.native()));
}
void copy_from_host_async(void* dst, const void* host_src, std::size_t bytes, Stream& stream) {
  if (bytes) BMT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream.native()));
}

}  // namespace bmt::memory
