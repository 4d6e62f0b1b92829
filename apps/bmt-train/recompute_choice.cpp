#include "recompute_choice.hpp"

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/models/recompute_plan.hpp>
#include <bmtrain/runtime/host_memory.hpp>
#include <bmtrain/tensor/memory.hpp>

#include <algorithm>

#include "units.hpp"

namespace bmt_train {

RecomputeChoice choose_recompute(const ModelConfig& config, const bmt::models::CausalLMOptions& options, int world,
                                 std::int64_t tokens, const MemoryEstimate& state) {
  // On the host build the device is the host, whose memory every rank of the node draws on.
  const auto& t = bmt::context().topology();
  double free = bmt::memory::is_host()
                    ? static_cast<double>(bmt::available_host_memory()) / std::max(t.local_size, 1)
                    : static_cast<double>(bmt::memory::available_device_memory());
  // The least over the ranks, as the largest of the negated figures.
  std::int64_t least = -static_cast<std::int64_t>(free);
  auto& ctx = bmt::context();
  ctx.host_comm().all_reduce(&least, &least, 1, bmt::DType::i64, bmt::ReduceOp::max, ctx.compute_stream());
  free = -static_cast<double>(least);
  const double usable = free * 7.0 / 8.0;
  // The activations live beside the forward's state; the backward's gradient shards come as they go.
  const double taken = state.forward_sharded_state + state.buffers;
  RecomputeChoice c;
  c.budget_bytes = std::max(0.0, usable - taken);
  // The gradient shards the backward makes beside the activations it has not yet freed.
  const double gradients = state.sharded_state - state.forward_sharded_state;
  const auto plan = bmt::models::plan_recompute(config, options, world, tokens, c.budget_bytes, gradients);
  BMT_REQUIRE(plan.fits, "--recompute auto: expected the activations of even a model that recomputes every block to "
                         "fit in the "
                             << bytes_text(c.budget_bytes) << " left of this rank's " << bytes_text(free)
                             << " free after " << bytes_text(taken)
                             << " of state and buffers, found an estimated " << bytes_text(plan.activation_bytes)
                             << ": lower --micro-batch or --seq, use more ranks, or --offload");
  c.options = plan.options;
  c.summary = plan.summary();
  c.activation_bytes = plan.activation_bytes;
  return c;
}

}  // namespace bmt_train
