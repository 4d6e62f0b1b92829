// The FP8 product through f32 (gemm_float8.hpp): exact widening of the codes, an f32 GEMM, and the
// scales applied to the f32 sums as cuBLASLt applies them, so the host build's results differ from
// the GPU's only by the order of the f32 additions.
#include "gemm_float8.hpp"

#include <algorithm>

#include "bmtrain/kernels/common.hpp"
#include "bmtrain/runtime/error.hpp"
#include "index_math.hpp"

namespace bmt::kernels {

namespace {

template <class F>
void widen_kernel(float* dst, const F* src, std::int64_t n) {
  Kokkos::parallel_for("bmt::gemm_float8_widen", flat_range(n),
                       KOKKOS_LAMBDA(std::int64_t i) { dst[i] = to_f32(src[i]); });
}

Tensor widen(const void* codes, DType format, std::int64_t rows, std::int64_t cols) {
  Tensor out = Tensor::empty({rows, cols}, DType::f32);
  BMT_DISPATCH_FLOAT8(format, "gemm_float8", F,
                      { widen_kernel<F>(out.data_as<float>(), static_cast<const F*>(codes), rows * cols); });
  return out;
}

// C = a_scale * b_scale * sum (+ C) (+ bias), rounded to C's dtype.
template <class C>
void scale_kernel(const Float8GemmParams& p, const float* sum) {
  C* c = static_cast<C*>(p.c);
  const C* bias = static_cast<const C*>(p.bias);
  const float *sa = p.a_scale, *sb = p.b_scale;
  const std::int64_t n = p.n, ldc = p.ldc;
  const bool accumulate = p.accumulate;
  Kokkos::parallel_for("bmt::gemm_float8_scale", flat_range(p.m * n), KOKKOS_LAMBDA(std::int64_t i) {
    const std::int64_t at = (i / n) * ldc + i % n;
    float v = sa[0] * sb[0] * sum[i];
    if (accumulate) v += to_f32(c[at]);
    if (bias) v += to_f32(bias[i % n]);
    c[at] = from_f32<C>(v);
  });
}

}  // namespace

void check_gemm_float8(const Float8GemmParams& p) {
  BMT_REQUIRE(is_float8(p.a_dtype) && is_float8(p.b_dtype),
              "gemm_float8: expected float8 operands, found " << dtype_name(p.a_dtype) << " and "
                                                              << dtype_name(p.b_dtype));
  BMT_REQUIRE(p.a_dtype == DType::f8e4m3 || p.b_dtype == DType::f8e4m3,
              "gemm_float8: expected at most one f8e5m2 operand (FP8 tensor cores take e4m3 x e4m3, e4m3 x e5m2 "
              "and e5m2 x e4m3), found two");
  BMT_REQUIRE(is_floating(p.c_dtype), "gemm_float8: expected C in f32, bf16 or f16, found " << dtype_name(p.c_dtype));
  BMT_REQUIRE(p.m > 0 && p.n > 0 && p.k > 0,
              "gemm_float8: expected positive sizes, found m=" << p.m << " n=" << p.n << " k=" << p.k);
  BMT_REQUIRE(p.a && p.b && p.c && p.a_scale && p.b_scale, "gemm_float8: expected non-null A, B, C and scales");
  BMT_REQUIRE(p.ldc >= p.n, "gemm_float8: expected ldc >= " << p.n << ", found " << p.ldc);
  BMT_REQUIRE(!p.bias || p.c_dtype != DType::f32,
              "gemm_float8: expected a bias with a bf16 or f16 C (in C's dtype), found one with an f32 C");
  constexpr std::int64_t kIntMax = 2147483647;
  BMT_REQUIRE(std::max({p.m, p.n, p.k, p.ldc}) <= kIntMax,
              "gemm_float8: expected sizes below 2^31, found m=" << p.m << " n=" << p.n << " k=" << p.k);
}

void gemm_float8_widened(const Float8GemmParams& p) {
  const Tensor a = widen(p.a, p.a_dtype, p.m, p.k);
  const Tensor b = widen(p.b, p.b_dtype, p.n, p.k);
  Tensor sum = Tensor::empty({p.m, p.n}, DType::f32);
  GemmParams g;
  g.dtype = DType::f32;
  g.m = p.m, g.n = p.n, g.k = p.k;
  g.a = {a.data(), p.k, false, 0};
  g.b = {b.data(), p.k, true, 0};  // B^T: B's rows of k read as columns
  g.c = sum.data();
  g.ldc = p.n;
  gemm(g);
  BMT_DISPATCH_FLOAT(p.c_dtype, "gemm_float8", C, { scale_kernel<C>(p, sum.data_as<float>()); });
}

}  // namespace bmt::kernels
