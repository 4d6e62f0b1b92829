#pragma once
// --recompute auto: which blocks keep their activations, chosen for the memory this rank has, by
// the library's planner (bmt::models::plan_recompute) from the estimate of everything else.
#include <bmtrain/models/causal_lm.hpp>

#include <cstdint>
#include <string>

#include "memory_estimate.hpp"
#include "options.hpp"

namespace bmt_train {

struct RecomputeChoice {
  bmt::models::CausalLMOptions options;  // the model's, with the plan's keep options
  std::string summary;                   // for the startup table
  double activation_bytes = 0;           // the plan's activations at their peak
  double budget_bytes = 0;               // what the rank had for them
};

// The plan for micro-batches of `tokens` tokens, with the state sharded over `world` ranks (the
// shard group), given the memory `state` (this configuration's
// estimate with nothing kept) leaves of the rank's free memory (the least of every rank's, so that
// all choose alike), less a margin for the estimate's error, the allocator's
// fragmentation and the kernels' workspaces (1/8 of it). A plan that does not fit even recomputing every
// block is a bmt::Error naming the figures.
RecomputeChoice choose_recompute(const ModelConfig& config, const bmt::models::CausalLMOptions& options, int world,
                                 std::int64_t tokens, const MemoryEstimate& state);

}  // namespace bmt_train
