// Host side of the float8 seam (float8_seam.hpp): the portable Kokkos kernels are the host's
// kernels, so every call is declined.
#include "float8_seam.hpp"

namespace bmt::kernels::seam {

bool abs_max(const void*, DType, std::int64_t, float*, const Kokkos::DefaultExecutionSpace&) { return false; }

bool quantize_float8(const Tensor&, std::int64_t, std::int64_t, const float*, DType, std::uint8_t*, std::uint8_t*,
                     float*) {
  return false;
}

bool quantize_e4m3(const void*, DType, std::int64_t, const float*, std::uint8_t*, const Kokkos::DefaultExecutionSpace&) {
  return false;
}

bool transpose_float8(const std::uint8_t*, std::int64_t, std::int64_t, std::uint8_t*) { return false; }

}  // namespace bmt::kernels::seam
