#include <functional>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/zero/checkpoint_block.hpp"
#include "bmtrain/zero/distributed_module.hpp"

namespace bmt {

namespace {

// Walks the tree; `owner` collects single-parameter storages for parameters outside blocks.
void place(Module& m, const std::string& prefix, std::vector<std::unique_ptr<ShardedStorage>>& owner,
           const Mesh& mesh, std::uint64_t seed) {
  if (m.sharding() == Module::Sharding::block) {
    auto& block = static_cast<CheckpointBlockBase&>(m);
    BMT_REQUIRE(!block.has_storage(), "init_parameters: expected one call per model, found block '" << prefix
                                                                                                    << "' initialized twice");
    auto storage = std::make_unique<ShardedStorage>(prefix.empty() ? "block" : prefix,
                                                    m.named_parameters(prefix.empty() ? "" : prefix + "."),
                                                    mesh.shard_rank, mesh.shard_size, seed, mesh.replica_count,
                                                    mesh.replica_rank);
    storage->set_belongs_to_block();
    block.set_storage(std::move(storage));
    return;
  }
  for (const auto& [name, p] : m.parameters_here()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    owner.push_back(std::make_unique<ShardedStorage>(full, std::vector<std::pair<std::string, Tensor>>{{full, p}},
                                                     mesh.shard_rank, mesh.shard_size, seed, mesh.replica_count,
                                                       mesh.replica_rank));
  }
  for (const auto& [name, child] : m.children()) place(*child, prefix.empty() ? name : prefix + "." + name, owner, mesh, seed);
}

void collect(Module& m, std::vector<ShardedStorage*>& out) {
  if (m.sharding() == Module::Sharding::block) {
    auto& block = static_cast<CheckpointBlockBase&>(m);
    if (block.has_storage()) out.push_back(&block.storage());
    return;
  }
  if (m.sharding() == Module::Sharding::module_parameters)
    for (auto& s : static_cast<DistributedModule&>(m).storages()) out.push_back(s.get());
  for (const auto& [name, child] : m.children()) collect(*child, out);
}

// place()'s walk, with sizes instead of storages.
void plan(Module& m, int world, std::vector<std::int64_t>& out) {
  const auto total = [&](const std::vector<std::pair<std::string, Tensor>>& parameters) {
    std::vector<std::int64_t> numels;
    for (const auto& [name, p] : parameters) numels.push_back(p.numel());
    return ShardedStorage::planned_total(numels, parameters.empty() ? DType::f32 : parameters.front().second.dtype(),
                                         world);
  };
  if (m.sharding() == Module::Sharding::block) {
    out.push_back(total(m.named_parameters("")));
    return;
  }
  for (const auto& [name, p] : m.parameters_here()) out.push_back(total({{name, p}}));
  for (const auto& [name, child] : m.children()) plan(*child, world, out);
}

}  // namespace

std::vector<std::int64_t> planned_storage_sizes(Module& model, int world_size) {
  std::vector<std::int64_t> out;
  plan(model, world_size, out);
  return out;
}

void init_parameters(Module& model) {
  Context& ctx = context();
  // Each storage is sharded over the mesh's shard group (the world, without tensor parallelism or
  // node sharding), and replicated over its replica group.
  std::vector<std::unique_ptr<ShardedStorage>> loose;
  place(model, "", loose, ctx.mesh(), ctx.seed());
  if (loose.empty()) return;
  BMT_REQUIRE(model.sharding() == Module::Sharding::module_parameters,
              "init_parameters: parameters outside CheckpointBlocks (first: '" << loose.front()->name()
                                                                               << "') need a bmt::DistributedModule "
                                                                                  "as the model's root to own them");
  auto& storages = static_cast<DistributedModule&>(model).storages();
  for (auto& s : loose) storages.push_back(std::move(s));
}

std::vector<ShardedStorage*> sharded_storages(Module& model) {
  std::vector<ShardedStorage*> out;
  collect(model, out);
  return out;
}

}  // namespace bmt
