// CUDA side of the float8 cast's seam (float8_seam.hpp): x scaled and rounded to float8 into the
// row-major layout, the transposed one, or both, in one pass over x. A block takes a 32 x 32 tile:
// its threads read x and write the row-major codes a row at a time, keep the codes in shared
// memory, and write the transposed codes a row of the transpose at a time, so that both layouts
// are written in whole rows rather than one byte per row. The codes are float8.hpp's conversion of
// the same float product as the portable kernel's, so the two agree bit for bit.
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

}  // namespace

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

}  // namespace bmt::kernels::seam
