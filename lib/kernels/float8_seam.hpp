#pragma once
// The kernel seam of the float8 kernels (docs/ARCHITECTURE.md, "Backend seams"): float8.cpp offers
// each absolute maximum, scaled cast and transpose of codes here first. On the CUDA build
// float8_cuda.cpp takes contiguous f32/bf16/f16 inputs: the absolute maximum as a block reduction,
// the cast (packs of 8 elements through shared-memory tiles, so that both layouts are written in
// whole rows), a ZeRO gather's cast of a piece in packs of 8, and the transpose of codes through
// the same tiles; the host build's
// float8_host.cpp declines. Both give the values float8.hpp defines, so the two paths agree bit
// for bit.
#include <cstdint>

#include <Kokkos_Core.hpp>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels::seam {

// *amax = max |x[i]| over i < n (x: n > 0 elements of f32/bf16/f16), NaN counted as infinite, as
// abs_max() defines it; x and amax are device memory. True when queued on `space`'s stream (the
// compute stream's for abs_max(), the gather stream's for a ZeRO gather's pieces).
bool abs_max(const void* x, DType dtype, std::int64_t n, float* amax, const Kokkos::DefaultExecutionSpace& space);

// x [rows, cols] (contiguous, f32/bf16/f16) times float8_scale(*amax) rounded to format into out
// ([rows, cols]) and out_t ([cols, rows]), each when not null; *scale_inv = 1 / that scale. All
// pointers are device memory. True when queued on the compute stream.
bool quantize_float8(const Tensor& x, std::int64_t rows, std::int64_t cols, const float* amax, DType format,
                     std::uint8_t* out, std::uint8_t* out_t, float* scale_inv);

// codes[i] = x[i] (n elements of f32/bf16/f16) times float8_scale(*amax) rounded to e4m3, as
// gather_packing.hpp's quantize_e4m3_on defines it; device memory. True when queued on `space`'s
// stream (a ZeRO gather's).
bool quantize_e4m3(const void* x, DType dtype, std::int64_t n, const float* amax, std::uint8_t* codes,
                   const Kokkos::DefaultExecutionSpace& space);

// out ([cols, rows]) = in ([rows, cols]) transposed, codes of one byte; device memory. True when
// queued on the compute stream.
bool transpose_float8(const std::uint8_t* in, std::int64_t rows, std::int64_t cols, std::uint8_t* out);

}  // namespace bmt::kernels::seam
