#pragma once
// What a CausalLM of a configuration will hold, from the configuration alone (no model is built,
// nothing is allocated): its parameter count, its largest storage as ShardedStorage plans it, and
// the gathered copies its block list keeps, by the block scheduler's own rules
// (bmt::effective_prefetch_depth, bmt::keeps_gathered_parameters). The caller adds the optimizer's
// side (offload, accumulation) and asks bmt::optim::estimate_memory for the bytes. Under tensor
// parallelism the plan is one rank's of the mesh's tp group: its parts of the split parameters and
// the replicated ones whole (ModelConfig::parameter_count(tp)).
#include "bmtrain/models/causal_lm.hpp"
#include "bmtrain/models/model_config.hpp"
#include "bmtrain/optim/memory_estimate.hpp"

namespace bmt::models {

optim::MemoryPlan memory_plan(const ModelConfig& config, const CausalLMOptions& options, int world_size);

// Elements of one block's weights a gather moves as float8 codes under `options`: with fp8, its
// linear layers' weights (the ones CausalLM switches to FP8), else 0.
std::int64_t block_float8_elements(const ModelConfig& config, const CausalLMOptions& options);

}  // namespace bmt::models
