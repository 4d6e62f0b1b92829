// CUDA side of the multi-tensor sum of squares (reduce.cpp's global_l2_norm, fast_path.hpp): one
// launch over a table of tensors, as AdamW's kernel does. Each block sums the squares of 8192
// consecutive elements of one tensor (16-byte loads, f32 accumulation, warp shuffles, then the
// warps in order) into its own partial; one more block adds the partials in a fixed order. No
// atomics: the result is the same on every run.
#include "cuda_common.hpp"
#include "fast_path.hpp"

namespace bmt::kernels::fast {

namespace {

using namespace cuda;

constexpr int kThreads = 256;
constexpr int kChunk = 8192;    // elements per block
constexpr int kMaxTensors = 32;  // reduce.cpp's table size
constexpr int kFinalThreads = 1024;

struct Table {
  const void* data[kMaxTensors];
  std::int64_t n[kMaxTensors];
  std::int32_t first_block[kMaxTensors + 1];
  int count;
};

template <class T>
__global__ void __launch_bounds__(kThreads) sum_squares_kernel(const __grid_constant__ Table t, float* partial) {
  const std::int32_t b = static_cast<std::int32_t>(blockIdx.x);
  int lo = 0, hi = t.count - 1;  // the last tensor whose first block is <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.first_block[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  const T* p = static_cast<const T*>(t.data[lo]);
  const std::int64_t begin = static_cast<std::int64_t>(b - t.first_block[lo]) * kChunk;
  const std::int64_t end = begin + kChunk < t.n[lo] ? begin + kChunk : t.n[lo];
  constexpr int kVec = static_cast<int>(16 / sizeof(T));  // elements per 16-byte load
  float acc = 0.0f;
  std::int64_t i = begin;
  if (aligned16(p)) {  // begin is a multiple of kChunk, so p + begin is aligned too
    const std::int64_t packed_end = begin + (end - begin) / kVec * kVec;
#pragma unroll 4
    for (std::int64_t j = begin + static_cast<std::int64_t>(threadIdx.x) * kVec; j < packed_end;
         j += static_cast<std::int64_t>(kThreads) * kVec) {
      float v[kVec];
      load<kVec>(p + j, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc += v[k] * v[k];
    }
    i = packed_end;
  }
  for (std::int64_t j = i + threadIdx.x; j < end; j += kThreads) {
    float v[1];
    load<1>(p + j, v);
    acc += v[0] * v[0];
  }
  __shared__ float warps[kThreads / 32];
  acc = warp_reduce<SumOp>(acc);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) s += warps[w];
    partial[b] = s;
  }
}

// *result = the sum of partial[0, n), in the same order every time.
__global__ void __launch_bounds__(kFinalThreads) sum_partials_kernel(const float* partial, std::int64_t n,
                                                                   float* result) {
  float acc = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n; j += kFinalThreads) acc += partial[j];
  __shared__ float warps[kFinalThreads / 32];
  acc = warp_reduce<SumOp>(acc);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < kFinalThreads / 32; ++w) s += warps[w];
    *result = s;
  }
}

template <class T>
void launch(const void* const* data, const std::int64_t* end, int count, float* result) {
  Table t{};
  std::int64_t blocks = 0, previous = 0;
  t.count = 0;
  for (int k = 0; k < count; ++k) {
    const std::int64_t n = end[k] - previous;
    previous = end[k];
    if (n <= 0) continue;
    t.data[t.count] = data[k];
    t.n[t.count] = n;
    t.first_block[t.count] = static_cast<std::int32_t>(blocks);
    blocks += (n + kChunk - 1) / kChunk;
    ++t.count;
  }
  if (t.count == 0) {
    BMT_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(float), stream()));
    return;
  }
  t.first_block[t.count] = static_cast<std::int32_t>(blocks);
  const Tensor partial = Tensor::empty({blocks}, DType::f32);
  sum_squares_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream()>>>(t, partial.data_as<float>());
  check_launch();
  sum_partials_kernel<<<1, kFinalThreads, 0, stream()>>>(partial.data_as<float>(), blocks, result);
  check_launch();
}

}  // namespace

bool sum_squares(DType dtype, const void* const* data, const std::int64_t* end, int count, float* result) {
  if (!available() || count > kMaxTensors || (count > 0 && end[count - 1] / kChunk >= 0x7fffffff)) return false;
  switch (dtype) {
    case DType::f32: launch<float>(data, end, count, result); return true;
    case DType::bf16: launch<bf16_t>(data, end, count, result); return true;
    case DType::f16: launch<f16_t>(data, end, count, result); return true;
    default: return false;
  }
}

}  // namespace bmt::kernels::fast
