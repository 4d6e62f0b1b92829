#include "bmtrain/models/memory_plan.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/zero/sharded_storage.hpp"

namespace bmt::models {

namespace {

// A block's storage and the elements of its weights gathered as float8 codes: with fp8, those its
// set_fp8 marks (the linear layers CausalLM switches to FP8), this rank's parts at the mesh's tp.
template <class Block>
std::pair<std::int64_t, std::int64_t> block_storage(const ModelConfig& c, bool fp8, int world) {
  CheckpointBlock<Block> block(CheckpointOptions{}, c);
  const auto sizes = planned_storage_sizes(block, world);
  std::int64_t float8 = 0;
  if (fp8) {
    block.block().set_fp8(true);
    for (const auto& [name, p] : block.block().named_parameters())
      if (p.impl()->param->gather_float8) float8 += p.numel();
  }
  return {*std::max_element(sizes.begin(), sizes.end()), float8};
}

std::pair<std::int64_t, std::int64_t> block_storage(const ModelConfig& c, bool fp8, int world) {
  return c.arch == "gpt2" ? block_storage<GPT2Block>(c, fp8, world) : block_storage<LlamaBlock>(c, fp8, world);
}

// The largest storage init_parameters would make for the model: one block's (all blocks are
// alike, built at the mesh's tp), or a parameter outside the blocks (this rank's vocabulary rows of
// the embedding and the head, GPT-2's positions whole); and how many of its elements are gathered
// as float8 codes.
std::pair<std::int64_t, std::int64_t> largest_storage(const ModelConfig& c, bool fp8, int world) {
  auto largest = block_storage(c, fp8, world);
  for (std::int64_t rows : {c.vocab / tp_size(), c.arch == "gpt2" ? c.max_seq : std::int64_t{0}}) {
    const std::int64_t outside = rows > 0 ? ShardedStorage::planned_total({rows * c.dim}, c.dtype, world) : 0;
    if (outside > largest.first) largest = {outside, 0};
  }
  return largest;
}

}  // namespace

optim::MemoryPlan memory_plan(const ModelConfig& c, const CausalLMOptions& options, int world_size) {
  c.validate();
  optim::MemoryPlan plan;
  c.check_tensor_parallel(tp_size());
  plan.parameters = c.parameter_count(tp_size());
  std::tie(plan.largest_block, plan.largest_block_float8) = largest_storage(c, options.fp8, world_size);
  plan.world_size = world_size;
  plan.dtype = c.dtype;
  plan.prefetch = effective_prefetch_depth(options.prefetch_depth, static_cast<std::size_t>(c.layers));
  plan.kept_blocks = 0;
  for (std::int64_t i = 0; i < c.layers; ++i)
    if (keeps_gathered_parameters(block_options(options, c.layers, i))) ++plan.kept_blocks;
  return plan;
}

std::int64_t block_float8_elements(const ModelConfig& c, const CausalLMOptions& options) {
  c.validate();
  return options.fp8 ? block_storage(c, true, 1).second : 0;
}

}  // namespace bmt::models
