#include "bmtrain/optim/memory_estimate.hpp"

#include <algorithm>

#include "bmtrain/runtime/error.hpp"
#include "offloaded_adamw.hpp"

namespace bmt::optim {

MemoryEstimate estimate_memory(const MemoryPlan& p) {
  BMT_REQUIRE(p.world_size >= 1 && p.parameters >= 0 && p.largest_block >= 0 && p.prefetch >= 0 && p.kept_blocks >= 0,
              "estimate_memory: expected a world size >= 1 and counts >= 0, found world size "
                  << p.world_size << ", " << p.parameters << " parameters, largest block " << p.largest_block
                  << ", prefetch " << p.prefetch << ", " << p.kept_blocks << " kept blocks");
  BMT_REQUIRE(p.largest_block_float8 >= 0 && p.largest_block_float8 <= p.largest_block,
              "estimate_memory: expected between 0 and the largest block's " << p.largest_block
                  << " elements gathered as float8, found " << p.largest_block_float8);
  BMT_REQUIRE(p.moments == DType::f32 || p.moments == DType::bf16,
              "estimate_memory: expected moments in f32 or bf16, found " << dtype_name(p.moments));
  const double compute_bytes = static_cast<double>(dtype_size(p.dtype));
  const double moments = 2.0 * static_cast<double>(dtype_size(p.moments));
  BMT_REQUIRE(p.replicas >= 1, "estimate_memory: expected replicas >= 1, found " << p.replicas);
  const bool sharded = p.world_size > 1;
  // Gradients go through the gradient ring and a reduction unless one rank holds the only copy.
  const bool reduced = sharded || p.replicas > 1;
  MemoryEstimate e;
  // Where the optimizer is on the device the values are held in f32, as its master weights, and
  // the f32 gradient shard lives from the backward that makes it to the step that consumes it;
  // offloaded, the device keeps the values in the parameters' dtype and the master is on the host.
  const double values = p.offload ? compute_bytes : 4.0 + moments;
  // Accumulated micro-batches keep the gradient shard from the first to the step, and where
  // gradients are reduced a later micro-batch's reduction lands beside it.
  const double kept_gradients = p.accumulates ? 4.0 + (reduced ? 4.0 : 0.0) : 0.0;
  e.forward_device_bytes_per_parameter = values + kept_gradients;
  e.device_bytes_per_parameter = values + (p.offload ? kept_gradients : std::max(kept_gradients, 4.0));
  e.host_bytes_per_parameter =
      p.offload ? static_cast<double>(detail::OffloadedAdamW::host_bytes_per_element(p.moments)) : 0.0;
  const double n = static_cast<double>(p.parameters) / p.world_size;
  e.device_state = e.device_bytes_per_parameter * n;
  e.forward_device_state = e.forward_device_bytes_per_parameter * n;
  e.host_state = e.host_bytes_per_parameter * n;
  // A block is gathered into a buffer unless one rank holds it in the parameters' dtype already and
  // none of its weights is gathered as float8 codes. A buffer holds those codes at 1 byte an element
  // and the rest in the parameters' dtype; across ranks their gather lands in a staging buffer of
  // about that size first (the scales and the pieces' alignment are a few hundred bytes).
  const double float8 = static_cast<double>(p.largest_block_float8);
  const bool gathers = sharded || float8 > 0 || (!p.offload && p.dtype != DType::f32);
  const double block = static_cast<double>(p.largest_block);
  const double gathered = (block - float8) * compute_bytes + float8;
  if (gathers) e.device_buffers += gathered * (p.prefetch + 1 + p.kept_blocks + (sharded && float8 > 0 ? 1 : 0));
  if (reduced) e.device_buffers += block * 4.0 * 2;  // the gradient ring's two f32 slots
  // Offloaded, one step at a time: the gradient shards copied out and not yet given back, the one
  // the backward writes and the one being reduced.
  if (p.offload && !p.accumulates)
    e.device_buffers += block / p.world_size * 4.0 * static_cast<double>(detail::OffloadedAdamW::kGradientsInFlight + 2);
  return e;
}

}  // namespace bmt::optim
