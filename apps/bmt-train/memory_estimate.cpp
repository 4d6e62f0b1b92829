#include "memory_estimate.hpp"

#include <algorithm>

#include <bmtrain/optim/memory_estimate.hpp>

namespace bmt_train {

MemoryEstimate estimate_memory(const TrainOptions& o, const ModelConfig& cfg, int world, std::int64_t accumulation,
                               std::size_t largest_block) {
  bmt::optim::MemoryPlan plan;
  plan.parameters = cfg.parameter_count();
  plan.largest_block = static_cast<std::int64_t>(largest_block);
  plan.world_size = world;
  plan.dtype = cfg.dtype;
  plan.offload = o.offload;
  plan.accumulates = accumulation > 1;
  plan.prefetch = o.prefetch;
  // A block keeps its gathered parameters from forward to backward at zero level 2, or when it
  // keeps its activations.
  plan.kept_blocks = static_cast<int>(o.zero_level == 2 || !o.checkpointing ? cfg.layers
                                                                            : std::min(o.keep_blocks, cfg.layers));
  const auto e = bmt::optim::estimate_memory(plan);
  return {e.device_state, e.device_buffers, e.host_state, e.device_bytes_per_parameter, e.host_bytes_per_parameter};
}

}  // namespace bmt_train
