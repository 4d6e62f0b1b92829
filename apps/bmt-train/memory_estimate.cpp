#include "memory_estimate.hpp"

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/models/memory_plan.hpp>
#include <bmtrain/optim/memory_estimate.hpp>
#include <bmtrain/runtime/host_memory.hpp>
#include <bmtrain/tensor/memory.hpp>

#include <string>

#include "units.hpp"

namespace bmt_train {

MemoryEstimate estimate_memory(const TrainOptions& o, const ModelConfig& cfg,
                               const bmt::models::CausalLMOptions& model_options, int world,
                               std::int64_t accumulation) {
  bmt::optim::MemoryPlan plan = bmt::models::memory_plan(cfg, model_options, world);
  plan.replicas = bmt::context().mesh().replica_count;
  plan.offload = o.offload;
  plan.accumulates = accumulation > 1;
  plan.moments = bmt::parse_dtype(o.moments);
  const auto e = bmt::optim::estimate_memory(plan);
  MemoryEstimate m;
  if (o.eval_only) {  // the parameters' shards alone, and the buffers
    const double values = static_cast<double>(bmt::dtype_size(cfg.dtype));
    m.sharded_state = m.forward_sharded_state = static_cast<double>(plan.parameters) * values / world;
    m.buffers = e.device_buffers;
    m.device_bytes_per_parameter = m.forward_device_bytes_per_parameter = values;
    return m;
  }
  m.sharded_state = e.device_state;
  m.forward_sharded_state = e.forward_device_state;
  m.buffers = e.device_buffers;
  m.host_state = e.host_state;
  m.device_bytes_per_parameter = e.device_bytes_per_parameter;
  m.forward_device_bytes_per_parameter = e.forward_device_bytes_per_parameter;
  m.host_bytes_per_parameter = e.host_bytes_per_parameter;
  return m;
}

void require_memory(const MemoryEstimate& e) {
  auto& t = bmt::context().topology();
  const std::string ranks = std::to_string(t.local_size) + " rank" + (t.local_size > 1 ? "s" : "");
  const std::string parts = bytes_text(e.sharded_state) + " sharded state + " + bytes_text(e.buffers) +
                            " gather/gradient buffers" +
                            (e.host_state > 0 ? " + " + bytes_text(e.host_state) + " offloaded optimizer state" : "");
  if (bmt::memory::is_host()) {
    // The device is the host: every rank of the node draws on its memory.
    const double need = (e.sharded_state + e.buffers + e.host_state) * t.local_size;
    const double have = static_cast<double>(bmt::available_host_memory());
    BMT_REQUIRE(need <= have, "memory: expected this configuration to fit in the " << bytes_text(have)
                                  << " of host memory available on " << t.hostname << " (MemAvailable), found an "
                                  << "estimated " << bytes_text(need) << " needed before activations by its " << ranks
                                  << " (" << parts << " each)");
    return;
  }
  const double device = e.sharded_state + e.buffers;
  const double free = static_cast<double>(bmt::memory::available_device_memory());
  BMT_REQUIRE(device <= free, "memory: expected this configuration to fit in the " << bytes_text(free)
                                  << " free on this rank's device, found an estimated " << bytes_text(device)
                                  << " needed before activations (" << parts
                                  << "): spread it over more ranks, or offload the optimizer (--offload)");
  const double host = e.host_state * t.local_size;
  const double have = static_cast<double>(bmt::available_host_memory());
  BMT_REQUIRE(host <= have, "memory: expected the offloaded optimizer's state to fit in the " << bytes_text(have)
                                << " of host memory available on " << t.hostname << " (MemAvailable), found an "
                                << "estimated " << bytes_text(host) << " needed by its " << ranks << " ("
                                << bytes_text(e.host_state) << " each)");
}

}  // namespace bmt_train
