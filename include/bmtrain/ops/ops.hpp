#pragma once
// The differentiable ops a forward pass is written with. Each op is an autograd::Function over
// Kokkos kernels: f32, bf16 and f16 inputs, f32 arithmetic inside, outputs and gradients in the
// input's dtype. Inputs may have any strides; ops copy to contiguous memory where a kernel needs it.
#include "bmtrain/ops/elementwise.hpp"
#include "bmtrain/ops/float8_linear.hpp"
#include "bmtrain/ops/matmul.hpp"
#include "bmtrain/ops/reduce.hpp"
#include "bmtrain/ops/shape.hpp"
#include "bmtrain/ops/attention.hpp"
#include "bmtrain/ops/cross_entropy.hpp"
#include "bmtrain/ops/linear_cross_entropy.hpp"
#include "bmtrain/ops/dropout.hpp"
#include "bmtrain/ops/embedding.hpp"
#include "bmtrain/ops/norm.hpp"
#include "bmtrain/ops/rotary.hpp"
#include "bmtrain/ops/softmax.hpp"
#include "bmtrain/ops/tensor_parallel.hpp"
#include "bmtrain/ops/vocab_parallel_cross_entropy.hpp"
