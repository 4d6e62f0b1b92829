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
#include <vector>

#include "bmtrain/nn/init.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

class ShardedStorage;
namespace kernels {
struct Float8Matrix;
}

// How a parameter is divided over the tensor-parallel group (runtime/mesh.hpp). The parameter's own
// shape is this rank's part; the whole parameter has `whole_shape`. Along `dim` the whole is a
// concatenation of `parts` (one part for a plain weight; three for a fused [q; k; v] projection),
// and each part is divided evenly: tensor-parallel rank r holds the r-th of tp_size pieces of every
// part, concatenated in part order. dim -1: replicated, every rank holds the whole parameter (its
// gradient is then summed over the group where the layer uses it, and counted once in norms).
struct TensorParallelSplit {
  int dim = -1;
  std::vector<std::int64_t> parts;  // sizes along dim of the whole parameter's parts
  Shape whole_shape;
  int tp_rank = 0, tp_size = 1;
  bool replicated() const { return dim < 0; }
};

struct ParameterInfo {
  init::Fn init;
  bool trainable = true;
  TensorParallelSplit tp;  // replicated unless a tensor-parallel layer says otherwise
  // Where the parameter lives once sharded (null while local or uninitialized).
  ShardedStorage* sharded = nullptr;
  std::int64_t offset = 0;  // first element within the storage's flat buffer
  // A CheckpointBlock gathers this weight as e4m3 codes under one scale for the whole tensor (set
  // by the FP8 linear layers' set_fp8): while gathered, the parameter has no values of its own, and
  // float8_codes ([out, in], f8e4m3) and float8_scale_inv (f32 []) are views of the gather buffer
  // that the layer's float8_linear reads in place of quantizing the weight.
  bool gather_float8 = false;
  Tensor float8_codes, float8_scale_inv;
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

// A weight its CheckpointBlock gathered as e4m3 codes (ParameterInfo::gather_float8), as the
// Float8Matrix (codes and scale_inv; no transposed codes) float8_linear takes in place of the
// weight's values; all undefined for any other tensor, and outside the block. (Float8Matrix is
// bmtrain/kernels/float8.hpp's.)
kernels::Float8Matrix gathered_float8(const Tensor& weight);

}  // namespace bmt
