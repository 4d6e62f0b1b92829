#pragma once
// Tensor-parallel layers (Megatron-style, with sequence parallelism) over the tensor-parallel group
// of the mesh (context().tp_comm(), runtime/mesh.hpp). Between them an activation is held
// sequence-parallel: [N/tp, d], rank r holding rows [r*N/tp, (r+1)*N/tp) of the [N = B*T, d] token
// matrix (ops/tensor_parallel.hpp). Each layer's parameters are this rank's part of the whole
// parameter, recorded in ParameterInfo::tp, and are ZeRO-sharded over the shard group like any
// other; a replicated one (a norm's weight, a row-parallel bias) is used through copy_tp, so its
// gradient is already the sum over the group.
//
//   struct Mlp : bmt::Module {
//     bmt::nn::ColumnParallelLinear up{768, 3072};
//     bmt::nn::RowParallelLinear down{3072, 768};
//     Mlp() { register_module("up", up); register_module("down", down); }
//     // rows [N/tp, 768] -> gather -> [N, 3072/tp] -> [N/tp, 768], the ranks' partial sums added
//     bmt::Tensor forward(const bmt::Tensor& rows) const { return down.forward(up.forward_gelu(rows)); }
//   };
//
// Inputs may have any leading shape (read as rows of their last dimension); outputs are 2-D
// [rows, features]. At tp 1 every layer computes what its plain counterpart does, with no
// collective. Layers read the mesh when built: build them after init_distributed.
#include <cstdint>
#include <vector>

#include "bmtrain/nn/init.hpp"
#include "bmtrain/nn/layers.hpp"
#include "bmtrain/nn/module.hpp"
#include "bmtrain/nn/parameter.hpp"

namespace bmt::nn {

// Records that `p` is this rank's part of a whole parameter of shape `whole`, split along `dim` in
// `parts` (ParameterInfo::tp); for parameters a model declares itself rather than through a layer.
void split_over_tp(DistributedParameter& p, int dim, std::vector<std::int64_t> parts, Shape whole);

// y = x W^T + b with W's rows (the outputs) split over the group: weight [out/tp, in] and bias
// [out/tp] are this rank's rows of every part of the whole [out, in] and [out], in part order.
// `parts` (default {out}) lists the whole output's parts, each split on its own: GPT-2's fused
// [q; k; v] projection is parts {C, C, C}, so each rank holds its heads of q, of k and of v and its
// output is [q_r; k_r; v_r]. Every part must divide by tp.
class ColumnParallelLinear : public Module {
 public:
  DistributedParameter weight, bias;  // bias: undefined when built without one

  ColumnParallelLinear(std::int64_t in, std::int64_t out, bool with_bias = true, DType dtype = DType::f32,
                       init::Fn weight_init = {}, std::vector<std::int64_t> parts = {});

  // Sequence-parallel rows [N/tp, in] -> gather_tokens -> [N, out/tp].
  Tensor forward(const Tensor& rows) const;
  Tensor forward_gelu(const Tensor& rows) const;  // gelu(forward(rows)), in the GEMM's epilogue
  // The same on rows already gathered, [N, in]: projections that share one input (Llama's gate and
  // up) gather it once, gather_tokens(rows), and their gradients meet before its reduce-scatter.
  Tensor forward_gathered(const Tensor& x) const;
  Tensor forward_gelu_gathered(const Tensor& x) const;

  std::int64_t in_features() const { return weight.size(1); }
  std::int64_t local_out_features() const { return weight.size(0); }
  // float8_linear for the products, the weight gathered as e4m3 codes, as nn::Linear::set_fp8.
  void set_fp8(bool on) {
    fp8_ = on;
    weight.impl()->param->gather_float8 = on;
  }
  bool fp8() const { return fp8_; }

 private:
  bool fp8_ = false;
};

// y = x W^T + b with W's columns (the inputs) split over the group: weight [out, in/tp] is this
// rank's columns of the whole [out, in]; the bias [out] is replicated. The input is a column-
// parallel layer's output [N, in/tp]; each rank's product is a partial sum of the whole, which
// scatter_tokens adds up into this rank's rows [N/tp, out], and the bias is added there.
class RowParallelLinear : public Module {
 public:
  DistributedParameter weight, bias;  // bias: undefined when built without one

  RowParallelLinear(std::int64_t in, std::int64_t out, bool with_bias = true, DType dtype = DType::f32,
                    init::Fn weight_init = {});

  Tensor forward(const Tensor& x) const;       // [N, in/tp] -> [N/tp, out]
  Tensor gelu_forward(const Tensor& x) const;  // forward(gelu(x)), the GELU's backward in the GEMM
  // residual [N/tp, out] + forward(x) (or + forward(gelu(x))), the bias added with the residual.
  Tensor forward_onto(const Tensor& residual, const Tensor& x, bool gelu_first = false) const;

  std::int64_t local_in_features() const { return weight.size(1); }
  std::int64_t out_features() const { return weight.size(0); }
  void set_fp8(bool on) {
    fp8_ = on;
    weight.impl()->param->gather_float8 = on;
  }
  bool fp8() const { return fp8_; }

 private:
  Tensor product(const Tensor& x, bool gelu_first) const;

  bool fp8_ = false;
};

// A lookup table of `count` rows split by rows over the group: weight [count/tp, dim] is rows
// [r*count/tp, (r+1)*count/tp). forward takes every rank's whole ids (N of them, N divisible by tp)
// and returns this rank's sequence-parallel rows [N/tp, dim]: each rank looks up the ids it holds
// (zero rows for the others) and scatter_tokens adds the ranks' lookups.
class VocabParallelEmbedding : public Module {
 public:
  DistributedParameter weight;

  VocabParallelEmbedding(std::int64_t count, std::int64_t dim, DType dtype = DType::f32,
                         init::Fn weight_init = init::normal(0.02f));
  Tensor forward(const Tensor& ids) const;

  // The first row of the whole table this rank holds.
  std::int64_t first_row() const { return first_row_; }

 private:
  std::int64_t first_row_ = 0;
};

// A linear layer with its whole weight on every rank of the group (replicated), applied to rows
// that are the same on every rank (gathered by gather_tokens), computing only outputs
// [first, first + count): grouped-query attention with fewer key/value heads than ranks computes on
// each rank just the head its query heads read. The weight goes through copy_tp, so its gradient
// sums every rank's share. Its parameters are nn::Linear's (same names, shapes and initializers),
// but it has no forward of its own: a plain product would leave the weight's gradient one rank's.
class ReplicatedLinear : public Module {
 public:
  DistributedParameter weight, bias;  // [out, in] and [out]; bias: undefined when built without one

  ReplicatedLinear(std::int64_t in, std::int64_t out, bool with_bias = true, DType dtype = DType::f32,
                   init::Fn weight_init = {});

  Tensor forward_gathered(const Tensor& x, std::int64_t first, std::int64_t count) const;

  std::int64_t in_features() const { return weight.size(1); }
  std::int64_t out_features() const { return weight.size(0); }
  // Products in FP8 as nn::Linear::set_fp8, but the weight stays gathered in its dtype: the product
  // reads a slice of it (through copy_tp), which whole-weight float8 codes would not give.
  void set_fp8(bool on) { fp8_ = on; }
  bool fp8() const { return fp8_; }

 private:
  Linear parameters_;  // makes weight and bias as nn::Linear does; not a child module
  bool fp8_ = false;
};

// nn::LayerNorm and nn::RMSNorm on sequence-parallel rows: the same parameters (replicated), used
// through copy_tp so that their gradient sums every rank's rows.
class SequenceParallelLayerNorm : public LayerNorm {
 public:
  using LayerNorm::LayerNorm;
  Tensor forward(const Tensor& rows) const;
};

class SequenceParallelRMSNorm : public RMSNorm {
 public:
  using RMSNorm::RMSNorm;
  Tensor forward(const Tensor& rows) const;
};

}  // namespace bmt::nn
