// CUDA side of the float8 seam (float8_seam.hpp).
//
// The absolute maximum: a grid-stride pass of 16-byte loads, a maximum over each block (warp
// butterflies, then the warps through shared memory), and one atomicMax a block on the result's
// bits. Magnitudes are non-negative (a NaN is taken as +inf, as the portable kernel does), and
// non-negative floats order as their bits do as unsigned integers, so the integer maximum is the
// float maximum; a maximum does not depend on the order the blocks arrive in, so the result is
// the same on every run (it is exact, as the portable reduction's is).
//
// The cast: x scaled and rounded to float8 into the row-major layout, the transposed one, or both,
// in one pass over x. The cast is bound by memory, so a thread moves packs of 8 elements: a block
// takes a 64 x 64 tile, each thread reads 8 consecutive elements of a row (16 bytes of bf16) and
// writes their 8 codes with one store, keeps the codes in shared memory, and writes 8 consecutive
// codes of a transposed row with one store; a warp's stores are whole 64-byte rows. Where the
// dimensions are not multiples of 8 or the pointers not aligned to a pack, 32 x 32 tiles of single
// elements do the same. On sm_89 and later the rounding is the hardware's (cvt.rn.satfinite, two
// elements an instruction), otherwise float8.hpp's software conversion; the two agree bit for bit
// (nearest even, saturating to the largest finite value), except that the hardware writes one NaN
// code whatever the sign, so a NaN takes float8.hpp's code instead.
//
// A ZeRO gather's cast of a piece of a shard (flat, under the group's amax): packs of 8 elements a
// thread where the pointers allow, with the same rounding.
//
// The transpose of codes already made (a gathered weight's, for the backward product): the cast's
// tiles without the cast.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

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

constexpr int kPack = 8;                         // elements a thread moves at once
constexpr int kPackTile = 64;                    // a block's tile: 64 x 64 elements
constexpr int kPacksPerRow = kPackTile / kPack;  // 8 threads across a tile's row
constexpr int kPackRowsPerPass = 32;             // a block is 8 x 32 threads: each covers 2 rows
// Shared rows of 17 words: a warp's transposed reads (one byte from each of 8 rows 8 apart) then
// fall on distinct banks but for pairs.
constexpr int kPackTileStride = kPackTile + 4;
using PackTile = std::uint8_t[kPackTile][kPackTileStride];

// Codes of a pack into the tile's row i at column 8 tx: two 4-byte stores (rows are 4-aligned).
__device__ __forceinline__ void put_pack(PackTile& tile, int i, int tx, uint2 q) {
  auto* w = reinterpret_cast<std::uint32_t*>(&tile[i][kPack * tx]);
  w[0] = q.x;
  w[1] = q.y;
}

// Both dimensions in whole packs and every pointer aligned to its pack, so that each thread's
// loads and stores are single aligned accesses.
bool packs_fit(const void* x, std::size_t element_bytes, std::int64_t rows, std::int64_t cols,
               const std::uint8_t* out, const std::uint8_t* out_t) {
  const auto aligned = [](const void* p, std::size_t to) { return reinterpret_cast<std::uintptr_t>(p) % to == 0; };
  return rows % kPack == 0 && cols % kPack == 0 && aligned(x, std::min<std::size_t>(16, kPack * element_bytes)) &&
         aligned(out, kPack) && aligned(out_t, kPack);
}

// The codes of lo (low byte) and hi in F, rounded as float8.hpp's F::from_float rounds them.
template <class F>
__device__ __forceinline__ std::uint32_t float8_code_pair(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  constexpr __nv_fp8_interpretation_t kind = std::is_same_v<F, f8e4m3_t> ? __NV_E4M3 : __NV_E5M2;
  std::uint32_t pair = __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, kind);  // lo in the low byte
  if (lo != lo) pair = (pair & 0xff00u) | F::from_float(lo);
  if (hi != hi) pair = (pair & 0x00ffu) | (static_cast<std::uint32_t>(F::from_float(hi)) << 8);
  return pair;
#else
  return F::from_float(lo) | (static_cast<std::uint32_t>(F::from_float(hi)) << 8);
#endif
}

// The codes of kPack scaled values, first in the lowest byte (memory order).
template <class F>
__device__ __forceinline__ uint2 float8_pack(const float (&v)[kPack], float scale) {
  std::uint32_t w[2] = {0, 0};
#pragma unroll
  for (int k = 0; k < kPack; k += 2) w[k / 4] |= float8_code_pair<F>(v[k] * scale, v[k + 1] * scale) << (8 * (k % 4));
  return make_uint2(w[0], w[1]);
}

// The transposed tile's writes, shared by the cast and the transpose of codes: thread (tx, ty)
// writes codes tile[8 tx .. 8 tx + 8)[i] as one 8-byte store into row c0 + i of out_t.
__device__ __forceinline__ void store_transposed_packs(const PackTile& tile,
                                                       std::int64_t r0, std::int64_t c0, std::int64_t rows,
                                                       std::int64_t cols, std::uint8_t* __restrict__ out_t) {
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const std::int64_t r = r0 + kPack * tx;
  if (r >= rows) return;
  for (int i = ty; i < kPackTile; i += kPackRowsPerPass) {
    const std::int64_t c = c0 + i;
    if (c >= cols) break;
    std::uint32_t w[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < kPack; ++k) w[k / 4] |= static_cast<std::uint32_t>(tile[kPack * tx + k][i]) << (8 * (k % 4));
    *reinterpret_cast<uint2*>(out_t + c * rows + r) = make_uint2(w[0], w[1]);
  }
}

template <class F, class T>
__global__ void __launch_bounds__(kPacksPerRow * kPackRowsPerPass)
    quantize_packed_tiles(const T* __restrict__ x, std::int64_t rows, std::int64_t cols, const float* amax,
                          std::uint8_t* __restrict__ out, std::uint8_t* __restrict__ out_t, float* scale_inv) {
  __shared__ alignas(16) PackTile tile;
  const float scale = float8_scale(amax[0], F::max());
  // Bands of rows from the last: the absolute maximum just read x from first to last, so its
  // last rows are the likeliest still to be in L2.
  const std::int64_t r0 = static_cast<std::int64_t>(gridDim.y - 1 - blockIdx.y) * kPackTile;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kPackTile;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) scale_inv[0] = 1.0f / scale;
  const std::int64_t c = c0 + kPack * tx;
  for (int i = ty; i < kPackTile; i += kPackRowsPerPass) {
    const std::int64_t r = r0 + i;
    if (r < rows && c < cols) {
      float v[kPack];
      cuda::load<kPack>(x + r * cols + c, v);
      const uint2 q = float8_pack<F>(v, scale);
      if (out) *reinterpret_cast<uint2*>(out + r * cols + c) = q;
      put_pack(tile, i, tx, q);
    }
  }
  if (!out_t) return;  // the same for every thread of the block
  __syncthreads();
  store_transposed_packs(tile, r0, c0, rows, cols, out_t);
}

__global__ void __launch_bounds__(kPacksPerRow * kPackRowsPerPass)
    transpose_packed_tiles(const std::uint8_t* __restrict__ in, std::int64_t rows, std::int64_t cols,
                           std::uint8_t* __restrict__ out) {
  __shared__ alignas(16) PackTile tile;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * kPackTile;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kPackTile;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const std::int64_t c = c0 + kPack * tx;
  for (int i = ty; i < kPackTile; i += kPackRowsPerPass) {
    const std::int64_t r = r0 + i;
    if (r < rows && c < cols) put_pack(tile, i, tx, *reinterpret_cast<const uint2*>(in + r * cols + c));
  }
  __syncthreads();
  store_transposed_packs(tile, r0, c0, rows, cols, out);
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

// A gather's piece cast to e4m3 codes, grid-stride: elements [head, head + 8 packs) in packs of 8
// a thread, the others one at a time (a piece is a flat run of a shard, of any length and offset;
// head < 0: no packs).
template <class T>
__global__ void __launch_bounds__(kAmaxThreads)
    quantize_e4m3_flat(const T* __restrict__ x, std::int64_t n, const float* amax, std::uint8_t* __restrict__ codes,
                       std::int64_t head) {
  const float scale = float8_scale(amax[0], f8e4m3_t::max());
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kAmaxThreads;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kAmaxThreads + threadIdx.x;
  const std::int64_t packs = head < 0 ? 0 : (n - head) / kPack;
  for (std::int64_t p = first; p < packs; p += stride) {
    float v[kPack];
    cuda::load<kPack>(x + head + p * kPack, v);
    *reinterpret_cast<uint2*>(codes + head + p * kPack) = float8_pack<f8e4m3_t>(v, scale);
  }
  const std::int64_t before = packs > 0 ? head : 0, after = before + packs * kPack;
  for (std::int64_t i = first; i < before + (n - after); i += stride) {
    const std::int64_t at = i < before ? i : after + (i - before);
    float v[1];
    cuda::load<1>(x + at, v);
    codes[at] = f8e4m3_t::from_float(v[0] * scale);
  }
}

// The grid of tiles of `tile` x `tile` over [rows, cols], or false where it is too large.
bool tile_grid(std::int64_t rows, std::int64_t cols, int tile, dim3* grid) {
  const std::int64_t tile_rows = (rows + tile - 1) / tile, tile_cols = (cols + tile - 1) / tile;
  if (tile_rows > 65535 || tile_cols > 2147483647) return false;
  *grid = dim3(static_cast<unsigned>(tile_cols), static_cast<unsigned>(tile_rows));
  return true;
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
  if (!cuda::available() || !x.is_contiguous()) return false;
  const bool packed = packs_fit(x.data(), dtype_size(x.dtype()), rows, cols, out, out_t);
  dim3 grid;
  if (!tile_grid(rows, cols, packed ? kPackTile : kTile, &grid)) return false;
  BMT_DISPATCH_FLOAT8(format, "quantize_float8", F, {
    BMT_DISPATCH_FLOAT(x.dtype(), "quantize_float8", T, {
      const T* xs = static_cast<const T*>(x.data());
      if (packed)
        quantize_packed_tiles<F, T><<<grid, dim3(kPacksPerRow, kPackRowsPerPass), 0, cuda::stream()>>>(
            xs, rows, cols, amax, out, out_t, scale_inv);
      else
        quantize_tiles<F, T><<<grid, dim3(kTile, kTileRowsPerPass), 0, cuda::stream()>>>(xs, rows, cols, amax, out,
                                                                                         out_t, scale_inv);
    });
  });
  cuda::check_launch();
  return true;
}

bool quantize_e4m3(const void* x, DType dtype, std::int64_t n, const float* amax, std::uint8_t* codes,
                   const Kokkos::DefaultExecutionSpace& space) {
  if (!cuda::available() || n <= 0 || !is_floating(dtype)) return false;
  // The first element from which both the input's packs (16 bytes, or 8 elements) and the codes'
  // (8 bytes) are aligned, if any within a pack.
  const std::size_t bytes = dtype_size(dtype), x_align = std::min<std::size_t>(16, kPack * bytes);
  std::int64_t head = -1;
  for (std::int64_t h = 0; h < kPack && h < n && head < 0; ++h)
    if ((reinterpret_cast<std::uintptr_t>(x) + h * bytes) % x_align == 0 &&
        (reinterpret_cast<std::uintptr_t>(codes) + h) % kPack == 0)
      head = h;
  // A few packs a thread before a block is worth it; a few blocks a multiprocessor at most.
  const std::int64_t per_block = static_cast<std::int64_t>(kAmaxThreads) * kPack * 4;
  const std::int64_t blocks =
      std::min<std::int64_t>((n + per_block - 1) / per_block, 4 * static_cast<std::int64_t>(cuda::sm_count()));
  BMT_DISPATCH_FLOAT(dtype, "quantize_e4m3", T, {
    quantize_e4m3_flat<T><<<static_cast<unsigned>(blocks), kAmaxThreads, 0, space.cuda_stream()>>>(
        static_cast<const T*>(x), n, amax, codes, head);
  });
  cuda::check_launch();
  return true;
}

bool transpose_float8(const std::uint8_t* in, std::int64_t rows, std::int64_t cols, std::uint8_t* out) {
  if (!cuda::available()) return false;
  const bool packed = packs_fit(in, 1, rows, cols, out, out);
  dim3 grid;
  if (!tile_grid(rows, cols, packed ? kPackTile : kTile, &grid)) return false;
  if (packed)
    transpose_packed_tiles<<<grid, dim3(kPacksPerRow, kPackRowsPerPass), 0, cuda::stream()>>>(in, rows, cols, out);
  else
    transpose_tiles<<<grid, dim3(kTile, kTileRowsPerPass), 0, cuda::stream()>>>(in, rows, cols, out);
  cuda::check_launch();
  return true;
}

}  // namespace bmt::kernels::seam
