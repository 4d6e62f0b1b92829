#include "bmtrain/nn/parameter.hpp"

#include "bmtrain/kernels/float8.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt {

DistributedParameter::DistributedParameter(const Shape& shape, DType dtype, init::Fn init, bool requires_grad) {
  for (auto d : shape)
    BMT_REQUIRE(d >= 0, "DistributedParameter: expected non-negative sizes, found " << bmt::to_string(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides.assign(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) impl->strides[i - 1] = impl->strides[i] * shape[i];
  impl->dtype = dtype;
  impl->requires_grad = requires_grad;
  impl->param = std::make_shared<ParameterInfo>();
  impl->param->init = std::move(init);
  impl->param->trainable = requires_grad;
  static_cast<Tensor&>(*this) = Tensor(std::move(impl));
}

kernels::Float8Matrix gathered_float8(const Tensor& weight) {
  kernels::Float8Matrix m;
  if (!is_parameter(weight) || !weight.impl()->param->float8_codes.defined()) return m;
  m.codes = weight.impl()->param->float8_codes;
  m.scale_inv = weight.impl()->param->float8_scale_inv;
  return m;
}

}  // namespace bmt
