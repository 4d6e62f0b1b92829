#pragma once
// What a configuration needs per rank, before any of it is allocated.
#include <cstddef>
#include <cstdint>

#include "options.hpp"

namespace bmt_train {

struct MemoryEstimate {
  double sharded_state = 0;  // bytes: parameter, gradient and optimizer shards
  double buffers = 0;        // bytes: gather and gradient rings, kept gathered copies
  // Activations are not estimated.
};

// For `options` on `world` ranks whose largest block holds `largest_block` elements.
MemoryEstimate estimate_memory(const TrainOptions& options, const ModelConfig& config, int world,
                               std::size_t largest_block);

}  // namespace bmt_train
