#pragma once
// Recompute only what does not fit: which blocks of a CausalLM keep their activations from forward
// to backward, and whether the recomputed ones keep their attention outputs and residual sums, for
// the memory a rank has left for activations. The activation sizes come from what the blocks' ops
// save for backward (a model of bytes a token; the test holds it to the allocator's counters).
//
//   auto e = bmt::optim::estimate_memory(bmt::models::memory_plan(config, options, world));
//   double left = free_device_bytes - e.device_state - e.device_buffers;
//   auto plan = bmt::models::plan_recompute(config, options, world, micro_batch * seq, left);
//   // plan.options: the CausalLMOptions to build the model with; plan.fits says whether even
//   // recomputing every block fits.
#include <cstdint>
#include <string>
#include <vector>

#include "bmtrain/models/causal_lm.hpp"
#include "bmtrain/models/model_config.hpp"

namespace bmt::models {

// Bytes of activations one micro-batch of `tokens` tokens (rows x seq, on one rank; under tensor
// parallelism the tp group's shared micro-batch, of which each rank holds its part as the mesh's tp
// divides it) holds.
struct ActivationSizes {
  double kept_block = 0;      // a block that keeps its activations, from forward to backward
  double recomputed_block = 0;  // a block that recomputes: its input
  double kept_attention = 0;  // more, a recomputed block keeping its attention outputs
  double kept_residual = 0;   // more, a recomputed block keeping its residual sums
  double fixed = 0;  // the rest of a step at its peak: embeddings, the head and loss, the last
                     // block's recompute and its gradients in backward
  double logits = 0;  // of fixed, the head's logits (or a chunk of them; at tp > 1 this rank's
                      // vocabulary columns), which a forward keeps only at tp 1 without chunks
  double backward_transient = 0;  // of fixed, beside the recompute: what an FP8 product's backward
                                  // makes for itself (0 without fp8)
  double head_gradients = 0;  // of fixed, what the loss in chunks (linear_cross_entropy, and at
                              // tp > 1 vocab_parallel_cross_entropy) makes in its forward and holds
                              // for backward: the f32 gradients of its h [N, C] and of this rank's
                              // head [V/tp, C] (0 for the whole logits' loss, and in f16)
};
ActivationSizes activation_sizes(const ModelConfig& config, const CausalLMOptions& options, std::int64_t tokens);

// What a step holds beyond its forward state at its peak, for a model run as `options` on
// `world_size` ranks: the activations, the gathered parameters of the blocks that keep theirs, and
// the gradient shards (`gradient_bytes` for the whole model on this rank: 0 when they outlive the
// step, as with accumulated micro-batches) that the backward makes as it frees activations block
// by block from the last.
double activation_peak(const ModelConfig& config, const CausalLMOptions& options, int world_size, std::int64_t tokens,
                       double gradient_bytes = 0);

struct RecomputePlan {
  CausalLMOptions options;  // the input's, with keep_blocks, keep_attention and keep_residual chosen
  double activation_bytes = 0;  // activation_peak of the plan
  bool fits = false;            // activation_bytes <= the budget
  std::int64_t layers = 0;
  std::string summary() const;  // "12 of 32 blocks kept, the others keep attention and residual sums"
};

// The plan that keeps the most within `budget_bytes` (of activation_peak) for micro-batches of `tokens`
// tokens on `world_size` ranks (a block that keeps its activations also keeps its gathered
// parameters, which the budget pays for too, at one rank only where f32 values are rounded): first each recomputed block's attention outputs, then its residual sums (per byte they
// save the recompute the most), then whole blocks from the last (whose activations backward frees
// first). With nothing kept it may still not fit: fits is false, and activation_bytes says by how
// much. zero_level 2 or no checkpointing in `options` are kept as they are (nothing to choose).
RecomputePlan plan_recompute(const ModelConfig& config, const CausalLMOptions& options, int world_size,
                             std::int64_t tokens, double budget_bytes, double gradient_bytes = 0);

}  // namespace bmt::models
