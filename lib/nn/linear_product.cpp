#include "linear_product.hpp"

#include "bmtrain/ops/elementwise.hpp"
#include "bmtrain/ops/float8_linear.hpp"
#include "bmtrain/ops/matmul.hpp"

namespace bmt::nn {

Tensor linear_product(const Tensor& x, const Tensor& weight, const Tensor& bias, LinearForm form, bool fp8) {
  switch (form) {
    case LinearForm::plain: return fp8 ? float8_linear(x, weight, bias) : linear(x, weight, bias);
    case LinearForm::gelu_after: return fp8 ? gelu(float8_linear(x, weight, bias)) : linear_gelu(x, weight, bias);
    case LinearForm::gelu_before: return fp8 ? float8_linear(gelu(x), weight, bias) : gelu_linear(x, weight, bias);
  }
  return Tensor();
}

}  // namespace bmt::nn
