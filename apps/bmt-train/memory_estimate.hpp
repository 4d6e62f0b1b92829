#pragma once
// What a configuration needs per rank, before any of it is allocated: bmt::optim::estimate_memory of
// the library's plan for the model (bmt::models::memory_plan) under bmt-train's optimizer options.
#include <cstddef>
#include <cstdint>

#include "options.hpp"

namespace bmt_train {

struct MemoryEstimate {
  double sharded_state = 0;  // device bytes: parameter, gradient and (on the device) optimizer shards
  double forward_sharded_state = 0;  // the same while a forward runs (the step gave the gradients back)
  double buffers = 0;        // device bytes: gather and gradient rings, kept gathered copies
  double host_state = 0;     // host bytes: the offloaded optimizer's state
  double device_bytes_per_parameter = 0;  // before dividing by the shard group's size: at the peak
  double forward_device_bytes_per_parameter = 0;  // and while a forward runs
  double host_bytes_per_parameter = 0;
  // Activations are not estimated.
};

// For `options` (the model run as `model_options`) sharded over `world` ranks (the shard group:
// the world, or a node under node sharding) with `accumulation` micro-batches
// a step: the model's plan from the library (bmt::models::memory_plan), the optimizer's options on it.
// With --eval-only, the parameters' shards alone and the buffers (no gradient or optimizer state).
MemoryEstimate estimate_memory(const TrainOptions& options, const ModelConfig& config,
                               const bmt::models::CausalLMOptions& model_options, int world,
                               std::int64_t accumulation);

// Refuses an estimate that cannot fit, before any of it is allocated: a bmt::Error naming the
// bytes needed and the bytes there are, for the device (on the host build, the host memory the
// ranks of a node share) and for the host (an offloaded optimizer's state, shared likewise).
// Activations come on top, so passing promises nothing; failing means the run could not start.
void require_memory(const MemoryEstimate& estimate);

}  // namespace bmt_train
