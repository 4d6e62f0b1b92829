// CUDA side of reduce.cpp's reductions (memory_bound_seam.hpp). No atomics anywhere: partials are added in a
// fixed order, so every result is the same on every run.
//
// Multi-tensor sum of squares (global_sum_squares): one launch over a table of tensors, as AdamW's
// kernel does. Each block sums the squares of 8192 consecutive elements of one tensor (16-byte
// loads, f64 accumulation, then a block sum) into its own f64 partial; one more block adds the
// partials. f64, as on the host: the sum must not depend on how the elements are split into
// shards, or a gradient norm would depend on the number of ranks.
//
// Column sums (a bias gradient: dy [tokens, features] summed over tokens): a block takes 32
// 16-byte column packs of a chunk of rows, 8 rows at a time, into f32; a second kernel adds each
// column's chunk partials, eight lanes a column, into the output.
#include <algorithm>

#include "cuda_common.hpp"
#include "memory_bound_seam.hpp"

namespace bmt::kernels::seam {

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

// The sum of one double a thread over the block, in a fixed order (a butterfly over each warp's
// lanes, then the warps in order); valid in thread 0. At most kMaxWarps warps.
constexpr int kMaxWarps = kFinalThreads / 32;
__device__ __forceinline__ double block_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __shared__ double warp_sums[kMaxWarps];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += warp_sums[w];
  return total;
}

// The square of an f32 value is exact in f64, so only the additions round.
template <class T>
__global__ void __launch_bounds__(kThreads) sum_squares_kernel(const __grid_constant__ Table t, double* partial) {
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
  double acc = 0.0;
  std::int64_t i = begin;
  if (aligned16(p)) {  // begin is a multiple of kChunk, so p + begin is aligned too
    const std::int64_t packed_end = begin + (end - begin) / kVec * kVec;
#pragma unroll 4
    for (std::int64_t j = begin + static_cast<std::int64_t>(threadIdx.x) * kVec; j < packed_end;
         j += static_cast<std::int64_t>(kThreads) * kVec) {
      float v[kVec];
      load<kVec>(p + j, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc += static_cast<double>(v[k]) * v[k];
    }
    i = packed_end;
  }
  for (std::int64_t j = i + threadIdx.x; j < end; j += kThreads) {
    float v[1];
    load<1>(p + j, v);
    acc += static_cast<double>(v[0]) * v[0];
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[b] = acc;
}

// *result = the sum of partial[0, n), in the same order every time.
__global__ void __launch_bounds__(kFinalThreads) sum_partials_kernel(const double* partial, std::int64_t n,
                                                                   double* result) {
  double acc = 0.0;
  for (std::int64_t j = threadIdx.x; j < n; j += kFinalThreads) acc += partial[j];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *result = acc;
}

template <class T>
void launch(const void* const* data, const std::int64_t* end, int count, double* result) {
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
    BMT_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(double), stream()));
    return;
  }
  t.first_block[t.count] = static_cast<std::int32_t>(blocks);
  // f64 partials in i64 storage of the same size (there is no f64 dtype).
  const Tensor partial = Tensor::empty({blocks}, DType::i64);
  double* p = static_cast<double*>(partial.data());
  sum_squares_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream()>>>(t, p);
  check_launch();
  sum_partials_kernel<<<1, kFinalThreads, 0, stream()>>>(p, blocks, result);
  check_launch();
}

constexpr int kColumnPacks = 32;  // 16-byte column packs a block covers (threadIdx.x)
constexpr int kRowLanes = 8;      // rows a block reads at once (threadIdx.y)
constexpr int kMinChunkRows = 64;

// partial[chunk][c] = the sum of x[r][c] over the chunk's rows, for the block's columns.
template <class T>
__global__ void __launch_bounds__(kColumnPacks* kRowLanes)
    column_partials_kernel(const T* __restrict__ x, std::int64_t rows, std::int64_t cols, std::int64_t chunk_rows,
                           float* __restrict__ partial) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  constexpr int kBlockCols = kColumnPacks * kVec;
  const std::int64_t first_col = static_cast<std::int64_t>(blockIdx.x) * kBlockCols;
  const std::int64_t col = first_col + static_cast<std::int64_t>(threadIdx.x) * kVec;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk_rows;
  const std::int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  float acc[kVec] = {};
  if (col < cols) {
#pragma unroll 4
    for (std::int64_t r = begin + threadIdx.y; r < end; r += kRowLanes) {
      float v[kVec];
      load<kVec>(x + r * cols + col, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[k] += v[k];
    }
  }
  __shared__ float lanes[kRowLanes][kBlockCols];
#pragma unroll
  for (int k = 0; k < kVec; ++k) lanes[threadIdx.y][threadIdx.x * kVec + k] = acc[k];
  __syncthreads();
  for (int c = threadIdx.y * kColumnPacks + threadIdx.x; c < kBlockCols; c += kColumnPacks * kRowLanes) {
    if (first_col + c >= cols) break;
    float sum = 0.0f;
#pragma unroll
    for (int lane = 0; lane < kRowLanes; ++lane) sum += lanes[lane][c];
    partial[static_cast<std::int64_t>(blockIdx.y) * cols + first_col + c] = sum;
  }
}

constexpr int kPartialColumns = 32;  // columns a block of the partials pass adds (threadIdx.x)

// out[c] = (accumulate: out[c] +) the sum of partial[chunk][c] over the chunks. Each of a block's 8 lanes (threadIdx.y)
// adds every 8th chunk, then the lanes' sums are added in lane order (a fixed order, as everywhere
// here). One thread walking all of a column's chunks would wait on one load at a time, and at
// 1600 columns of 16384 rows such a pass takes longer than reading the rows (bench_kernels'
// BiasGradient).
template <class O>
__global__ void __launch_bounds__(kPartialColumns* kRowLanes)
    add_column_partials_kernel(const float* __restrict__ partial, std::int64_t chunks, std::int64_t cols,
                               O* __restrict__ out, bool accumulate) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kPartialColumns + threadIdx.x;
  float sum = 0.0f;
  if (c < cols)
    for (std::int64_t k = threadIdx.y; k < chunks; k += kRowLanes) sum += partial[k * cols + c];
  __shared__ float lanes[kRowLanes][kPartialColumns];
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float total = 0.0f;
#pragma unroll
  for (int lane = 0; lane < kRowLanes; ++lane) total += lanes[lane][threadIdx.x];
  out[c] = from_float<O>(accumulate ? to_float(out[c]) + total : total);
}

template <class T, class O>
void launch_column_sums(const T* x, std::int64_t rows, std::int64_t cols, O* out, bool accumulate) {
  constexpr int kBlockCols = kColumnPacks * static_cast<int>(16 / sizeof(T));
  const std::int64_t col_blocks = (cols + kBlockCols - 1) / kBlockCols;
  // Enough blocks to fill the device about eight times over, each on at least 64 rows.
  const std::int64_t wanted = std::max<std::int64_t>(1, 8 * sm_count() / col_blocks);
  const std::int64_t chunks = std::max<std::int64_t>(1, std::min(wanted, rows / kMinChunkRows));
  const std::int64_t chunk_rows = (rows + chunks - 1) / chunks;
  const Tensor partial = Tensor::empty({chunks, cols}, DType::f32);
  column_partials_kernel<T><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks)),
                              dim3(kColumnPacks, kRowLanes), 0, stream()>>>(x, rows, cols, chunk_rows,
                                                                            partial.data_as<float>());
  check_launch();
  add_column_partials_kernel<O><<<static_cast<unsigned>((cols + kPartialColumns - 1) / kPartialColumns),
                                  dim3(kPartialColumns, kRowLanes), 0, stream()>>>(partial.data_as<float>(), chunks,
                                                                                   cols, out, accumulate);
  check_launch();
}

template <class T>
void column_sums_into(const Tensor& x, const Tensor& out, bool accumulate) {
  const T* px = static_cast<const T*>(x.data());
  if (out.dtype() == DType::f32)
    launch_column_sums<T, float>(px, x.size(0), x.size(1), out.data_as<float>(), accumulate);
  else
    launch_column_sums<T, T>(px, x.size(0), x.size(1), static_cast<T*>(out.data()), accumulate);
}

}  // namespace

bool column_sums(const Tensor& x, const Tensor& out, bool accumulate) {
  if (!available() || !x.is_contiguous() || x.dim() != 2 || x.numel() == 0 || x.size(0) >= 0x7fffffff) return false;
  const std::int64_t vec = 16 / static_cast<std::int64_t>(dtype_size(x.dtype()));
  if (x.size(1) % vec != 0 || !aligned16(x.data())) return false;
  switch (x.dtype()) {
    case DType::f32: column_sums_into<float>(x, out, accumulate); return true;
    case DType::bf16: column_sums_into<bf16_t>(x, out, accumulate); return true;
    case DType::f16: column_sums_into<f16_t>(x, out, accumulate); return true;
    default: return false;
  }
}

bool sum_squares(DType dtype, const void* const* data, const std::int64_t* end, int count, double* result) {
  if (!available() || count > kMaxTensors || (count > 0 && end[count - 1] / kChunk >= 0x7fffffff)) return false;
  switch (dtype) {
    case DType::f32: launch<float>(data, end, count, result); return true;
    case DType::bf16: launch<bf16_t>(data, end, count, result); return true;
    case DType::f16: launch<f16_t>(data, end, count, result); return true;
    default: return false;
  }
}

}  // namespace bmt::kernels::seam
