#pragma once
// DistributedModule: the root of a ZeRO-3 model. Its parameters outside CheckpointBlocks
// (embeddings, final norm, LM head) are sharded one parameter at a time; a forward gathers them
// with param.gather() around their use, and their gradients are reduce-scattered back.
//
//   struct MyModel : bmt::DistributedModule {
//     bmt::DistributedParameter param{{1024}};
//     bmt::TransformerBlockList<SomeTransformerBlock> blocks;
//     MyModel() { register_parameter("param", param); register_module("blocks", blocks); ... }
//     bmt::Tensor forward() { return blocks(param.gather(), 1, 2, 3); }
//   };
//   MyModel model;
//   bmt::init_parameters(model);
#include <memory>
#include <string>
#include <vector>

#include "bmtrain/nn/module.hpp"
#include "bmtrain/zero/sharded_storage.hpp"

namespace bmt {

class DistributedModule : public Module {
 public:
  Sharding sharding() const override { return Sharding::module_parameters; }
  // Storages of the parameters outside blocks (after bmt::init_parameters).
  std::vector<std::unique_ptr<ShardedStorage>>& storages() { return storages_; }

 private:
  std::vector<std::unique_ptr<ShardedStorage>> storages_;
};

// Gives every parameter below `model` its sharded storage and initial value: one flat storage per
// CheckpointBlock, one per parameter elsewhere. Initialization is keyed by the runtime seed and
// each parameter's dotted name, so the model is the same for every world size. Call once, after
// the model is built and before its first forward.
void init_parameters(Module& model);

// Every ShardedStorage below `model`, in module order: what the optimizer and checkpoints walk.
std::vector<ShardedStorage*> sharded_storages(Module& model);

// The total() of every storage init_parameters would give `model` on `world_size` ranks, in module
// order, with nothing allocated: for memory planning before a model too large is initialized.
std::vector<std::int64_t> planned_storage_sizes(Module& model, int world_size);

}  // namespace bmt
