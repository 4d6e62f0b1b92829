#pragma once
// Argument checks both sides of the GEMM seam apply, so that both reject the same misuse.
#include <algorithm>

#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::kernels {

inline void check_gemm(const GemmParams& p) {
  BMT_REQUIRE(p.dtype == DType::f32 || p.dtype == DType::bf16 || p.dtype == DType::f16,
              "gemm: expected f32, bf16 or f16, found " << dtype_name(p.dtype));
  BMT_REQUIRE(p.m > 0 && p.n > 0 && p.k > 0 && p.batch > 0,
              "gemm: expected positive sizes, found m=" << p.m << " n=" << p.n << " k=" << p.k << " batch=" << p.batch);
  BMT_REQUIRE(p.a.data && p.b.data && p.c, "gemm: expected non-null A, B and C");
  const std::int64_t a_cols = p.a.trans ? p.m : p.k, b_cols = p.b.trans ? p.k : p.n;
  BMT_REQUIRE(p.a.ld >= a_cols, "gemm: expected lda >= " << a_cols << ", found " << p.a.ld);
  BMT_REQUIRE(p.b.ld >= b_cols, "gemm: expected ldb >= " << b_cols << ", found " << p.b.ld);
  BMT_REQUIRE(p.ldc >= p.n, "gemm: expected ldc >= " << p.n << ", found " << p.ldc);
  BMT_REQUIRE(!p.bias || p.batch == 1, "gemm: expected no bias with batch " << p.batch << " (bias needs batch 1)");
  BMT_REQUIRE(!p.f32_output || !p.bias, "gemm: expected no bias with an f32 output of " << dtype_name(p.dtype)
                                                                                          << " operands, found one");
  BMT_REQUIRE(!p.gelu_input || (p.batch == 1 && p.beta == 0.0f && !p.bias && !p.f32_output),
              "gemm: expected the GELU backward with batch 1, beta 0, no bias and C in the operands' dtype, found "
              "batch " << p.batch << ", beta " << p.beta << (p.bias ? ", a bias" : "")
                       << (p.f32_output ? ", an f32 C" : ""));
  BMT_REQUIRE(p.gelu_output || !p.gelu_pre,
              "gemm: expected gelu_pre only with gelu_output, found gelu_pre set and gelu_output false");
  BMT_REQUIRE(!p.gelu_output || (p.batch == 1 && p.beta == 0.0f && !p.f32_output && !p.gelu_input),
              "gemm: expected the GELU with batch 1, beta 0, C in the operands' dtype and no GELU backward, found "
              "batch " << p.batch << ", beta " << p.beta << (p.f32_output ? ", an f32 C" : "")
                       << (p.gelu_input ? ", a GELU input" : ""));
  constexpr std::int64_t kIntMax = 2147483647;
  BMT_REQUIRE(std::max({p.m, p.n, p.k, p.a.ld, p.b.ld, p.ldc}) <= kIntMax,
              "gemm: expected sizes and leading dimensions below 2^31, found m=" << p.m << " n=" << p.n << " k=" << p.k);
}

}  // namespace bmt::kernels
