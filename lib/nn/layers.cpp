#include "bmtrain/nn/layers.hpp"

#include <cmath>

#include "bmtrain/ops/elementwise.hpp"
#include "bmtrain/ops/embedding.hpp"
#include "bmtrain/ops/norm.hpp"
#include "bmtrain/runtime/error.hpp"
#include "linear_product.hpp"

namespace bmt::nn {

namespace {

void require_positive(const char* layer, const char* what, std::int64_t value) {
  BMT_REQUIRE(value > 0, layer << ": expected a positive " << what << ", found " << value);
}

}  // namespace

Linear::Linear(std::int64_t in, std::int64_t out, bool with_bias, DType dtype, init::Fn weight_init) {
  require_positive("nn::Linear", "input size", in);
  require_positive("nn::Linear", "output size", out);
  if (!weight_init) weight_init = init::normal(1.0f / std::sqrt(static_cast<float>(in)));
  weight = DistributedParameter({out, in}, dtype, std::move(weight_init));
  register_parameter("weight", weight);
  if (with_bias) {
    bias = DistributedParameter({out}, dtype, init::zeros());
    register_parameter("bias", bias);
  }
}

Tensor Linear::gathered_bias() const { return bias.defined() ? bias.gather() : Tensor(); }

Tensor Linear::forward(const Tensor& x) const {
  return linear_product(x, weight.gather(), gathered_bias(), LinearForm::plain, fp8_);
}

Tensor Linear::forward_gelu(const Tensor& x) const {
  return linear_product(x, weight.gather(), gathered_bias(), LinearForm::gelu_after, fp8_);
}

Tensor Linear::gelu_forward(const Tensor& x) const {
  return linear_product(x, weight.gather(), gathered_bias(), LinearForm::gelu_before, fp8_);
}

Tensor Linear::forward_onto(const Tensor& residual, const Tensor& x, bool gelu_first) const {
  const Tensor product_of_x =
      linear_product(x, weight.gather(), Tensor(), gelu_first ? LinearForm::gelu_before : LinearForm::plain, fp8_);
  return residual_add(residual, product_of_x, gathered_bias());
}

Embedding::Embedding(std::int64_t count, std::int64_t dim, DType dtype, init::Fn weight_init) {
  require_positive("nn::Embedding", "row count", count);
  require_positive("nn::Embedding", "feature size", dim);
  weight = DistributedParameter({count, dim}, dtype, std::move(weight_init));
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(ids, weight.gather()); }

LayerNorm::LayerNorm(std::int64_t dim, DType dtype, float eps_) : eps(eps_) {
  require_positive("nn::LayerNorm", "feature size", dim);
  weight = DistributedParameter({dim}, dtype, init::ones());
  bias = DistributedParameter({dim}, dtype, init::zeros());
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight.gather(), bias.gather(), eps); }

RMSNorm::RMSNorm(std::int64_t dim, DType dtype, float eps_) : eps(eps_) {
  require_positive("nn::RMSNorm", "feature size", dim);
  weight = DistributedParameter({dim}, dtype, init::ones());
  register_parameter("weight", weight);
}

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, weight.gather(), eps); }

}  // namespace bmt::nn
