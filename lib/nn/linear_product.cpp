#include "linear_product.hpp"

#include "bmtrain/kernels/float8.hpp"
#include "bmtrain/nn/parameter.hpp"
#include "bmtrain/ops/elementwise.hpp"
#include "bmtrain/ops/float8_linear.hpp"
#include "bmtrain/ops/matmul.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::nn {

namespace {

// With the weight's gathered codes where its block gathered it so, else quantizing it.
Tensor fp8_product(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!gathered_float8(weight).codes.defined()) return float8_linear(x, weight, bias);
  // Asked for again in backward, where the block has gathered the weight again.
  return float8_linear(x, weight, [weight] { return gathered_float8(weight); }, bias);
}

}  // namespace

Tensor linear_product(const Tensor& x, const Tensor& weight, const Tensor& bias, LinearForm form, bool fp8) {
  BMT_REQUIRE(fp8 || !gathered_float8(weight).codes.defined(),
              "linear: expected weight '" << weight.name() << "' in its dtype, found it gathered as float8 codes "
                                          "(its layer's set_fp8 marks it so; the product must run in FP8 too)");
  switch (form) {
    case LinearForm::plain: return fp8 ? fp8_product(x, weight, bias) : linear(x, weight, bias);
    case LinearForm::gelu_after: return fp8 ? gelu(fp8_product(x, weight, bias)) : linear_gelu(x, weight, bias);
    case LinearForm::gelu_before: return fp8 ? fp8_product(gelu(x), weight, bias) : gelu_linear(x, weight, bias);
  }
  return Tensor();
}

}  // namespace bmt::nn
