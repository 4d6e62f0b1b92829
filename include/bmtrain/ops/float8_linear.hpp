#pragma once
// A linear layer whose three matrix products run in FP8 (Hopper's tensor cores take float8 at
// twice bf16's rate), with per-tensor current scaling (kernels/float8.hpp):
//
//   forward   y  = x W^T        x e4m3, W e4m3
//   backward  dx = dy W         dy e5m2, W e4m3
//             dW = dy^T x       dy e5m2, x e4m3
//
// Activations and weights are e4m3: their values are spread over a few binades, and its 3-bit
// mantissa (relative rounding error 2^-4) is worth more than range there. Gradients are e5m2:
// they spread over far more binades (a few large entries, many tiny ones), which a per-tensor
// scale keeps only with e5m2's range (up to 57344, down to 2^-16), at 2 mantissa bits (2^-3).
// Each tensor is scaled by 448 or 57344 over its own absolute maximum, computed from the current
// values (not a history), so nothing is carried between steps. The products sum in f32; y and dx
// are in x's dtype, and dW goes, in f32, straight into the weight's gradient buffer when it has
// one (a ZeRO block's, as linear does). The bias, if any, is added by the forward GEMM (for bf16
// and f16; on CUDA cuBLASLt's bias epilogue, which may round the product before adding it) and
// its gradient is the column sums of dy in full precision.
//
// The host build computes the same codes and scales and multiplies them exactly widened to f32,
// so its results are the GPU's up to the order of f32 additions.
#include <functional>
#include <vector>

#include "bmtrain/kernels/float8.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

// y = x W^T + b like linear(): x [..., in], weight [out, in], bias [out] or undefined; x, weight
// and bias of one floating dtype.
Tensor float8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Where a weight's codes come from when they are made before the product (a ZeRO block that
// gathers the weight as e4m3 codes): asked for in forward, and again in a backward that wants dx,
// where the block has gathered the weight again, so that nothing of the weight lives from forward
// to backward.
using Float8WeightCodes = std::function<kernels::Float8Matrix()>;

// The same with the weight already quantized: weight_codes().codes ([out, in], f8e4m3) and
// .scale_inv stand for the weight, which is read for nothing but its shape, dtype and gradient (a
// ZeRO block that gathered the weight as codes has no values for it). No amax or cast of the weight
// is made: forward reads the codes, and backward transposes the codes it is given then. Given the
// codes quantize_float8(weight, in, abs_max(weight), f8e4m3) makes, the results are
// float8_linear(x, weight, bias)'s bit for bit.
Tensor float8_linear(const Tensor& x, const Tensor& weight, Float8WeightCodes weight_codes,
                     const Tensor& bias = Tensor());

// While one lives, the FP8 products this thread runs quantize an input they share once: a
// product whose input has the data, shape and dtype of one quantized before in the scope reads
// those codes (and keeps them for backward) instead of making its own. Llama's q, k and v
// projections read the same normed rows, as do its gate and up: in FP8 one copy of their codes
// lives to backward instead of three or two, and two passes over them are saved. The caller
// promises the inputs are not written in place while the scope lives. Scopes nest; the innermost
// serves.
class Float8SharedInputs {
 public:
  Float8SharedInputs();
  ~Float8SharedInputs();
  Float8SharedInputs(const Float8SharedInputs&) = delete;
  Float8SharedInputs& operator=(const Float8SharedInputs&) = delete;

  // The innermost live scope of this thread, or null.
  static Float8SharedInputs* current();
  // x's e4m3 codes (row-major, and transposed when `transposed`), read as [numel / cols, cols]:
  // those made before in this scope for the same x, else made now and remembered.
  kernels::Float8Matrix quantize(const Tensor& x, std::int64_t cols, bool transposed);

 private:
  struct Entry {
    Tensor x;  // held, so that its memory cannot become another input's while the scope lives
    kernels::Float8Matrix codes;
  };
  std::vector<Entry> entries_;
  Float8SharedInputs* outer_;
};

}  // namespace bmt
