// The gather stream's kernels (kernels/gather_packing.hpp): portable Kokkos on the stream's space;
// on CUDA the absolute maximum and the float8 cast are float8_cuda.cpp's (float8_seam.hpp) on that
// stream.
// The float8 cast is float8.hpp's scale and rounding, the same floats quantize_float8 computes, so
// a weight quantized piece by piece under its whole amax has the codes it has quantized whole.
#include "bmtrain/kernels/gather_packing.hpp"

#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/float8.hpp"
#include "bmtrain/kernels/math.hpp"
#include "float8_seam.hpp"

namespace bmt::kernels {

namespace {

using Range = Kokkos::RangePolicy<ExecSpace>;
using ScalarF32 = Kokkos::View<float, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using ConstBytes = Kokkos::View<const char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

}  // namespace

void convert_on(const ExecSpace& space, const void* src, DType src_dtype, void* dst, DType dst_dtype,
                std::int64_t n) {
  if (n <= 0) return;
  BMT_DISPATCH_FLOAT(dst_dtype, "gather", D, {
    BMT_DISPATCH_FLOAT(src_dtype, "gather", S, {
      const S* s = static_cast<const S*>(src);
      D* d = static_cast<D*>(dst);
      Kokkos::parallel_for("bmt::gather_convert", Range(space, 0, n),
                           KOKKOS_LAMBDA(std::int64_t i) { d[i] = from_f32<D>(to_f32(s[i])); });
    });
  });
}

void zero_on(const ExecSpace& space, float* out, std::int64_t count) {
  if (count <= 0) return;
  Kokkos::parallel_for("bmt::gather_zero", Range(space, 0, count), KOKKOS_LAMBDA(std::int64_t i) { out[i] = 0.0f; });
}

void abs_max_on(const ExecSpace& space, const void* x, DType dtype, std::int64_t n, float* out) {
  BMT_REQUIRE(n > 0, "abs_max_on: expected elements, found " << n);
  if (seam::abs_max(x, dtype, n, out, space)) return;  // CUDA's block reduction, on the same stream
  BMT_DISPATCH_FLOAT(dtype, "abs_max_on", T, {
    const T* p = static_cast<const T*>(x);
    Kokkos::parallel_reduce(
        "bmt::gather_abs_max", Range(space, 0, n),
        KOKKOS_LAMBDA(std::int64_t i, float& m) {
          const float a = kmath::abs(to_f32(p[i]));
          if (!(a <= m)) m = a == a ? a : bmt::detail::bits_float(0x7f800000u);  // NaN as inf
        },
        Kokkos::Max<float, MemSpace>(ScalarF32(out)));
  });
}

void quantize_e4m3_on(const ExecSpace& space, const void* x, DType dtype, std::int64_t n, const float* amax,
                      std::uint8_t* codes) {
  if (n <= 0) return;
  if (seam::quantize_e4m3(x, dtype, n, amax, codes, space)) return;  // CUDA's packs, on the same stream
  BMT_DISPATCH_FLOAT(dtype, "quantize_e4m3_on", T, {
    const T* p = static_cast<const T*>(x);
    Kokkos::parallel_for("bmt::gather_quantize", Range(space, 0, n), KOKKOS_LAMBDA(std::int64_t i) {
      codes[i] = f8e4m3_t::from_float(to_f32(p[i]) * float8_scale(amax[0], f8e4m3_t::max()));
    });
  });
}

void e4m3_scale_inv_on(const ExecSpace& space, const float* amax, float* scale_inv, std::int64_t count,
                       std::int64_t stride) {
  if (count <= 0) return;
  Kokkos::parallel_for("bmt::gather_scale_inv", Range(space, 0, count), KOKKOS_LAMBDA(std::int64_t k) {
    scale_inv[k * stride] = 1.0f / float8_scale(amax[k], f8e4m3_t::max());
  });
}

void copy_bytes_on(const ExecSpace& space, const void* src, void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  Kokkos::deep_copy(space, Bytes(static_cast<char*>(dst), bytes), ConstBytes(static_cast<const char*>(src), bytes));
}

}  // namespace bmt::kernels
