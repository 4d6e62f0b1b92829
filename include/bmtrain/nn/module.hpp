#pragma once
// Module: the unit users build models from. A module registers its parameters and sub-modules by
// name; parameters are then found with dotted names ("blocks.3.attn.qkv.weight") for
// initialization, sharding, checkpoints and inspection.
//
//   struct Mlp : bmt::Module {
//     bmt::DistributedParameter w1{{3072, 768}}, w2{{768, 3072}};
//     Mlp() { register_parameter("w1", w1); register_parameter("w2", w2); }
//     bmt::Tensor forward(const bmt::Tensor& x) { ... }
//   };
//
// Modules hold pointers to their registered sub-modules, so a module is neither copied nor moved
// once built; keep collections of modules as std::vector<std::unique_ptr<M>>.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bmtrain/nn/parameter.hpp"

namespace bmt {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = delete;
  Module& operator=(Module&&) = delete;

  void register_parameter(const std::string& name, const Tensor& parameter);
  void register_module(const std::string& name, Module& module);

  // Direct parameters and sub-modules, in registration order.
  const std::vector<std::pair<std::string, Tensor>>& parameters_here() const { return parameters_; }
  const std::vector<std::pair<std::string, Module*>>& children() const { return children_; }
  // The module this one is registered in (null for a model's root, or a module never registered).
  const Module* parent() const { return parent_; }

  // Every parameter below this module, depth first in registration order, with dotted names.
  std::vector<std::pair<std::string, Tensor>> named_parameters(const std::string& prefix = "") const;
  // Every module below (and including) this one, with dotted names ("" for this one).
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Drops every parameter's gradient.
  void zero_grad();

  // What a module is to the ZeRO layer; CheckpointBlock and DistributedModule override this.
  enum class Sharding { none, module_parameters, block };
  virtual Sharding sharding() const { return Sharding::none; }

 private:
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Module*>> children_;
  const Module* parent_ = nullptr;
  bool training_ = true;
};

}  // namespace bmt
