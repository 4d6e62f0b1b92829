// CUDA side of the float8 seam (float8_seam.hpp).
//
// The absolute maximum: a grid-stride pass of 16-byte loads, a maximum over each block (warp
// butterflies, then the warps through shared memory), and one atomicMax a block on the result's
// bits. Magnitudes are non-negative (a NaN is taken as +inf, as the portable kernel does), and
// non-negative floats order as their bits do as unsigned integers, so the integer maximum is the
// float maximum; a maximum does not depend on the order the blocks arrive in, so the result is
// the same on every run (it is exact, as the portable reduction's is).
//
// The transpose of codes already made (a gathered weight's, for the backward product): the cast's
// tiles without the cast.
//
// The cast: x scaled and rounded to float8 into the row-major layout, the transposed one, or both,
// in one pass over x. A block takes a 32 x 32 tile: its threads read x and write the row-major
// codes a row at a time, keep the codes in shared memory, and write the transposed codes a row of
// the transpose at a time, so that both layouts are written in whole rows rather than one byte per
// row. The codes are float8.hpp's conversion of the same float product as the portable kernel's,
// so the two agree bit for bit.
#include <algorithm>

#include "bmtrain/kernels/float8.hpp"
#include "cuda_common.hpp"
#include "float8_seam.hpp"

namespace bmt::kernels::seam {

namespace {

constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;  // a block is 32 x 8 threads: each covers 4 rows of its tile

template <class F, class T>
__global__ void quantize_tiles(const T* x, std::int64_t rows, std::int64_t cols, const float* amax,
                               std::uint8_t* out, std::uint8_t* out_t, float* scale_inv) {
  __shared__ std::uint8_t tile[kTile][kTile + 4];  // padded: the transposed reads hit distinct banks
  const float scale = float8_scale(amax[0], F::max());
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) scale_inv[0] = 1.0f / scale;
  for (int i = ty; i < kTile; i += kTileRowsPerPass) {
    const std::int64_t r = r0 + i, c = c0 + tx;
    if (r < rows && c < cols) {
      const std::uint8_t q = F::from_float(to_f32(x[r * cols + c]) * scale);
      if (out) out[r * cols + c] = q;
      tile[i][tx] = q;
    }
  }
  if (!out_t) return;  // the same for every thread of the block
  __syncthreads();
  for (int i = ty; i < kTile; i += kTileRowsPerPass) {
    const std::int64_t c = c0 + i, r = r0 + tx;
    if (c < cols && r < rows) out_t[c * rows + r] = tile[tx][i];
  }
}

// The same tiles as quantize_tiles, for codes already made: a weight's gathered codes transposed
// for the product that reads them with the other dimension contiguous.
__global__ void transpose_tiles(const std::uint8_t* __restrict__ in, std::int64_t rows, std::int64_t cols,
                                std::uint8_t* __restrict__ out) {
  __shared__ std::uint8_t tile[kTile][kTile + 4];
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int i = ty; i < kTile; i += kTileRowsPerPass) {
    const std::int64_t r = r0 + i, c = c0 + tx;
    if (r < rows && c < cols) tile[i][tx] = in[r * cols + c];
  }
  __syncthreads();
  for (int i = ty; i < kTile; i += kTileRowsPerPass) {
    const std::int64_t c = c0 + i, r = r0 + tx;
    if (c < cols && r < rows) out[c * rows + r] = tile[tx][i];
  }
}

constexpr int kAmaxThreads = 256;

// |v|, with NaN as +inf: never NaN, so fmaxf and the bits' order agree with it.
__device__ __forceinline__ float magnitude(float v) {
  const float a = fabsf(v);
  return a == a ? a : __int_as_float(0x7f800000);
}

template <class T>
__global__ void __launch_bounds__(kAmaxThreads)
    abs_max_blocks(const T* __restrict__ x, std::int64_t n, unsigned int* __restrict__ amax_bits) {
  constexpr int kVec = cuda::vec_of<T>();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kAmaxThreads;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kAmaxThreads + threadIdx.x;
  float m = 0.0f;
  std::int64_t tail = 0;
  if (cuda::aligned16(x)) {
    const std::int64_t packs = n / kVec;
    for (std::int64_t p = first; p < packs; p += stride) {
      float v[kVec];
      cuda::load<kVec>(x + p * kVec, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) m = fmaxf(m, magnitude(v[k]));
    }
    tail = packs * kVec;
  }
  for (std::int64_t i = tail + first; i < n; i += stride) {
    float v[1];
    cuda::load<1>(x + i, v);
    m = fmaxf(m, magnitude(v[0]));
  }
  m = cuda::warp_reduce<cuda::MaxOp>(m);
  __shared__ float warp_max[kAmaxThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = 0.0f;
#pragma unroll
    for (int w = 0; w < kAmaxThreads / 32; ++w) b = fmaxf(b, warp_max[w]);
    atomicMax(amax_bits, __float_as_uint(b));
  }
}

}  // namespace

bool abs_max(const void* x, DType dtype, std::int64_t n, float* amax, const Kokkos::DefaultExecutionSpace& space) {
  if (!cuda::available() || n <= 0 || !is_floating(dtype)) return false;
  const cudaStream_t stream = space.cuda_stream();
  // Four 16-byte loads a thread before a block is worth it; a few blocks a multiprocessor at most
  // (more would only add atomics).
  const std::int64_t per_block =
      static_cast<std::int64_t>(kAmaxThreads) * 4 * 16 / static_cast<std::int64_t>(dtype_size(dtype));
  const std::int64_t blocks =
      std::min<std::int64_t>((n + per_block - 1) / per_block, 4 * static_cast<std::int64_t>(cuda::sm_count()));
  BMT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));  // the bits of +0.0f
  BMT_DISPATCH_FLOAT(dtype, "abs_max", T, {
    abs_max_blocks<T><<<static_cast<unsigned>(blocks), kAmaxThreads, 0, stream>>>(
        static_cast<const T*>(x), n, reinterpret_cast<unsigned int*>(amax));
  });
  cuda::check_launch();
  return true;
}

bool quantize_float8(const Tensor& x, std::int64_t rows, std::int64_t cols, const float* amax, DType format,
                     std::uint8_t* out, std::uint8_t* out_t, float* scale_inv) {
  const std::int64_t tile_rows = (rows + kTile - 1) / kTile, tile_cols = (cols + kTile - 1) / kTile;
  if (!cuda::available() || !x.is_contiguous() || tile_rows > 65535 || tile_cols > 2147483647) return false;
  const dim3 grid(static_cast<unsigned>(tile_cols), static_cast<unsigned>(tile_rows));
  const dim3 block(kTile, kTileRowsPerPass);
  BMT_DISPATCH_FLOAT8(format, "quantize_float8", F, {
    BMT_DISPATCH_FLOAT(x.dtype(), "quantize_float8", T, {
      quantize_tiles<F, T><<<grid, block, 0, cuda::stream()>>>(static_cast<const T*>(x.data()), rows, cols, amax,
                                                               out, out_t, scale_inv);
    });
  });
  cuda::check_launch();
  return true;
}

bool transpose_float8(const std::uint8_t* in, std::int64_t rows, std::int64_t cols, std::uint8_t* out) {
  const std::int64_t tile_rows = (rows + kTile - 1) / kTile, tile_cols = (cols + kTile - 1) / kTile;
  if (!cuda::available() || tile_rows > 65535 || tile_cols > 2147483647) return false;
  const dim3 grid(static_cast<unsigned>(tile_cols), static_cast<unsigned>(tile_rows));
  const dim3 block(kTile, kTileRowsPerPass);
  transpose_tiles<<<grid, block, 0, cuda::stream()>>>(in, rows, cols, out);
  cuda::check_launch();
  return true;
}

}  // namespace bmt::kernels::seam
