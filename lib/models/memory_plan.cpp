#include "bmtrain/models/memory_plan.hpp"

#include <algorithm>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/zero/sharded_storage.hpp"

namespace bmt::models {

namespace {

// The largest storage init_parameters would make for the model: one block's (all blocks are
// alike, built at the mesh's tp), or a parameter outside the blocks (this rank's vocabulary rows of
// the embedding and the head, GPT-2's positions whole).
std::int64_t largest_storage(const ModelConfig& c, int world) {
  std::vector<std::int64_t> sizes;
  if (c.arch == "gpt2") {
    CheckpointBlock<GPT2Block> block(CheckpointOptions{}, c);
    sizes = planned_storage_sizes(block, world);
  } else {
    CheckpointBlock<LlamaBlock> block(CheckpointOptions{}, c);
    sizes = planned_storage_sizes(block, world);
  }
  for (std::int64_t rows : {c.vocab / tp_size(), c.arch == "gpt2" ? c.max_seq : std::int64_t{0}})
    if (rows > 0) sizes.push_back(ShardedStorage::planned_total({rows * c.dim}, c.dtype, world));
  return *std::max_element(sizes.begin(), sizes.end());
}

}  // namespace

optim::MemoryPlan memory_plan(const ModelConfig& c, const CausalLMOptions& options, int world_size) {
  c.validate();
  optim::MemoryPlan plan;
  c.check_tensor_parallel(tp_size());
  plan.parameters = c.parameter_count(tp_size());
  plan.largest_block = largest_storage(c, world_size);
  plan.world_size = world_size;
  plan.dtype = c.dtype;
  plan.prefetch = effective_prefetch_depth(options.prefetch_depth, static_cast<std::size_t>(c.layers));
  plan.kept_blocks = 0;
  for (std::int64_t i = 0; i < c.layers; ++i)
    if (keeps_gathered_parameters(block_options(options, c.layers, i))) ++plan.kept_blocks;
  return plan;
}

}  // namespace bmt::models
