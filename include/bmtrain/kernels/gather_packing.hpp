#pragma once
// The kernels a ZeRO-3 gather runs on its own stream (the gather stream, not the compute stream
// every other kernel is queued on): rounding the f32 master values to the parameters' dtype,
// quantizing a float8-gathered weight's piece under the scale agreed over the shard group, and
// moving the gathered pieces to their places. Pointers are device memory; `space` is the stream's
// execution space (Stream::space()), and nothing waits for the work.
#include <cstddef>
#include <cstdint>

#include <Kokkos_Core.hpp>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt::kernels {

// dst[i] = src[i] converted from src_dtype to dst_dtype (f32/bf16/f16 each; rounding to nearest
// even), for i < n.
void convert_on(const Kokkos::DefaultExecutionSpace& space, const void* src, DType src_dtype, void* dst,
                DType dst_dtype, std::int64_t n);

// out[i] = 0 for i < count.
void zero_on(const Kokkos::DefaultExecutionSpace& space, float* out, std::int64_t count);

// *out = max |x[i]| over i < n (x f32/bf16/f16; n > 0), NaN counted as infinite: abs_max()'s
// kernel, which runs it on the compute stream.
void abs_max_on(const Kokkos::DefaultExecutionSpace& space, const void* x, DType dtype, std::int64_t n, float* out);

// codes[i] = x[i] scaled by float8_scale(*amax, e4m3's max) and rounded to e4m3, for i < n: the
// codes quantize_float8 makes of a tensor of absolute maximum *amax, whatever part of it x is.
void quantize_e4m3_on(const Kokkos::DefaultExecutionSpace& space, const void* x, DType dtype, std::int64_t n,
                      const float* amax, std::uint8_t* codes);

// scale_inv[k * stride] = 1 / float8_scale(amax[k], e4m3's max) for k < count, as quantize_float8
// writes it.
void e4m3_scale_inv_on(const Kokkos::DefaultExecutionSpace& space, const float* amax, float* scale_inv,
                       std::int64_t count, std::int64_t stride);

// `bytes` bytes from src to dst (not overlapping).
void copy_bytes_on(const Kokkos::DefaultExecutionSpace& space, const void* src, void* dst, std::size_t bytes);

}  // namespace bmt::kernels
