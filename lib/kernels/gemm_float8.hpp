#pragma once
// What both sides of the GEMM seam share for FP8 products: the argument checks, and the product
// through f32 that the host build always runs and the CUDA build runs where cuBLASLt has no FP8
// kernel for the problem.
#include "bmtrain/kernels/gemm.hpp"

namespace bmt::kernels {

void check_gemm_float8(const Float8GemmParams& p);

// The codes widened exactly to f32, multiplied by gemm() in f32, and C = a_scale * b_scale * sum
// (+ C), rounded once to C's dtype.
void gemm_float8_widened(const Float8GemmParams& p);

}  // namespace bmt::kernels
