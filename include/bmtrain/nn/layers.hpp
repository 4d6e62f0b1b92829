#pragma once
// Reusable layers, as BMTrain's bmt.nn ships them: Linear, Embedding, LayerNorm, RMSNorm and
// ModuleList. Each is a plain Module whose parameters are DistributedParameters, so the layers
// work alone, inside a CheckpointBlock, in a TransformerBlockList and in a DistributedModule: in
// a block, `weight.gather()` is the block's gathered value; outside one it all-gathers the shard.
//
//   struct Mlp : bmt::Module {
//     bmt::nn::Linear up{768, 3072}, down{3072, 768};
//     Mlp() { register_module("up", up); register_module("down", down); }
//     bmt::Tensor forward(const bmt::Tensor& x) const { return down.forward(up.forward_gelu(x)); }
//   };
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bmtrain/nn/init.hpp"
#include "bmtrain/nn/module.hpp"
#include "bmtrain/nn/parameter.hpp"

namespace bmt::nn {

// y = x W^T + b, W [out, in]. The default initializer N(0, 1/in) keeps unit-variance inputs at
// unit variance; models pass their own (GPT-2's N(0, 0.02), ...).
class Linear : public Module {
 public:
  DistributedParameter weight, bias;  // bias: undefined when built without one

  Linear(std::int64_t in, std::int64_t out, bool with_bias = true, DType dtype = DType::f32, init::Fn weight_init = {});

  Tensor forward(const Tensor& x) const;
  // gelu(forward(x)), the GELU applied by the GEMM's epilogue.
  Tensor forward_gelu(const Tensor& x) const;
  // forward(gelu(x)): the GELU's backward is done by the GEMM that makes x's gradient.
  Tensor gelu_forward(const Tensor& x) const;
  // residual + forward(x) (or + forward(gelu(x))), the bias added with the residual in one pass
  // rather than in the GEMM.
  Tensor forward_onto(const Tensor& residual, const Tensor& x, bool gelu_first = false) const;

  std::int64_t in_features() const { return weight.size(1); }
  std::int64_t out_features() const { return weight.size(0); }

  // FP8: every forward above runs its matrix products through float8_linear (e4m3 activations
  // and weights, e5m2 gradients, per-tensor scales; ops/float8_linear.hpp); the GELU and the bias
  // then take passes of their own. In a CheckpointBlock the weight is then gathered as e4m3 codes
  // (ParameterInfo::gather_float8), which the products read as they are. Off by default.
  void set_fp8(bool on) {
    fp8_ = on;
    weight.impl()->param->gather_float8 = on;
  }
  bool fp8() const { return fp8_; }

 private:
  Tensor gathered_bias() const;

  bool fp8_ = false;
};

// A lookup table of `count` rows of `dim` features: forward(ids [...]) -> [..., dim].
class Embedding : public Module {
 public:
  DistributedParameter weight;  // [count, dim]

  Embedding(std::int64_t count, std::int64_t dim, DType dtype = DType::f32, init::Fn weight_init = init::normal(0.02f));
  Tensor forward(const Tensor& ids) const;
};

// Layer normalization over the last dimension, with a weight (ones) and a bias (zeros).
class LayerNorm : public Module {
 public:
  DistributedParameter weight, bias;
  float eps;

  explicit LayerNorm(std::int64_t dim, DType dtype = DType::f32, float eps = 1e-5f);
  Tensor forward(const Tensor& x) const;
};

// Root-mean-square normalization over the last dimension, with a weight (ones).
class RMSNorm : public Module {
 public:
  DistributedParameter weight;
  float eps;

  explicit RMSNorm(std::int64_t dim, DType dtype = DType::f32, float eps = 1e-6f);
  Tensor forward(const Tensor& x) const;
};

// Sub-modules registered under their index ("0", "1", ...), as torch.nn.ModuleList does, so that
// parameter names read "blocks.1.qkv.weight". A TransformerBlockList registers its blocks the same
// way, so a model can move from a ModuleList of CheckpointBlocks to a TransformerBlockList and keep
// its parameter names (and, for the same seed, its initial values).
template <class M>
class ModuleList : public Module {
 public:
  // Builds an M from `args` at the end of the list (modules are neither copied nor moved once built).
  template <class... A>
  M& append(A&&... args) {
    items_.push_back(std::make_unique<M>(std::forward<A>(args)...));
    register_module(std::to_string(items_.size() - 1), *items_.back());
    return *items_.back();
  }
  std::size_t size() const { return items_.size(); }
  M& operator[](std::size_t i) { return *items_.at(i); }
  const M& operator[](std::size_t i) const { return *items_.at(i); }

  // Range-for over the modules: for (auto& block : list) x = block(x, ...).
  template <class It, class Ref>
  struct Iterator {
    It it;
    Ref operator*() const { return **it; }
    Iterator& operator++() {
      ++it;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return it != other.it; }
  };
  using iterator = Iterator<typename std::vector<std::unique_ptr<M>>::iterator, M&>;
  using const_iterator = Iterator<typename std::vector<std::unique_ptr<M>>::const_iterator, const M&>;
  iterator begin() { return {items_.begin()}; }
  iterator end() { return {items_.end()}; }
  const_iterator begin() const { return {items_.begin()}; }
  const_iterator end() const { return {items_.end()}; }

 private:
  std::vector<std::unique_ptr<M>> items_;
};

}  // namespace bmt::nn
