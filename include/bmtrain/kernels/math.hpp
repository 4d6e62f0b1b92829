#pragma once
// Math functions usable inside kernels on every backend. Kokkos 3.4 keeps them in
// Kokkos::Experimental, Kokkos 4 in Kokkos; kernels call bmt::kmath:: and work with both.
#include <Kokkos_Core.hpp>

namespace bmt::kmath {
#if KOKKOS_VERSION >= 30700
using Kokkos::abs;
using Kokkos::cos;
using Kokkos::exp;
using Kokkos::fmax;
using Kokkos::fmin;
using Kokkos::isfinite;
using Kokkos::log;
using Kokkos::pow;
using Kokkos::sin;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::cos;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::fmax;
using Kokkos::Experimental::fmin;
using Kokkos::Experimental::isfinite;
using Kokkos::Experimental::log;
using Kokkos::Experimental::pow;
using Kokkos::Experimental::sin;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
KOKKOS_INLINE_FUNCTION float abs(float x) { return Kokkos::Experimental::fabs(x); }
#endif
KOKKOS_INLINE_FUNCTION float rsqrt(float x) { return 1.0f / sqrt(x); }
}  // namespace bmt::kmath
