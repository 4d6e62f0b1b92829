#pragma once
// Parameters. A DistributedParameter declares shape, dtype and initializer; it has no storage until
// bmt::init_parameters(model) gives it one: a shard of a flat buffer when it belongs to a
// CheckpointBlock or a DistributedModule (ZeRO-3), or a whole local tensor otherwise.
//
//   bmt::DistributedParameter weight{{768, 768}, bmt::DType::bf16, bmt::init::normal(0.02f)};
//
// Inside a CheckpointBlock the parameter is used as a plain Tensor: the block gathers it before
// its forward runs. Outside blocks, `param.gather()` returns the full value (differentiable: its
// gradient is reduce-scattered back into the shard's gradient).
#include <memory>
#include <string>

#include "bmtrain/nn/init.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

class ShardedStorage;

struct ParameterInfo {
  init::Fn init;
  bool trainable = true;
  // Where the parameter lives once sharded (null while local or uninitialized).
  ShardedStorage* sharded = nullptr;
  std::int64_t offset = 0;  // first element within the storage's flat buffer
};

class DistributedParameter : public Tensor {
 public:
  DistributedParameter() = default;
  DistributedParameter(const Shape& shape, DType dtype = DType::f32, init::Fn init = init::zeros(),
                       bool requires_grad = true);
  explicit DistributedParameter(const Shape& shape, init::Fn init)
      : DistributedParameter(shape, DType::f32, std::move(init)) {}

  // The full value. In a CheckpointBlock's forward the parameter is already gathered and this
  // returns it; elsewhere it all-gathers the shard into a new tensor whose gradient flows back to
  // the shard.
  Tensor gather() const;
};

using Parameter = DistributedParameter;

// True if `t` is a parameter (made by DistributedParameter).
inline bool is_parameter(const Tensor& t) { return t.defined() && t.impl()->param != nullptr; }

}  // namespace bmt
