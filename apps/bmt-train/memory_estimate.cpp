#include "memory_estimate.hpp"

#include <algorithm>

namespace bmt_train {

MemoryEstimate estimate_memory(const TrainOptions& o, const ModelConfig& cfg, int world, std::size_t largest_block) {
  MemoryEstimate m;
  const double params = static_cast<double>(cfg.parameter_count());
  m.sharded_state = (cfg.dtype == bmt::DType::f32 ? 16.0 : 18.0) * params / world;
  // One rank gathers and reduces in place: no buffers. Otherwise the gather ring's prefetch + 1
  // slots and the gradient ring's two, and a gathered copy of its own for every block that keeps its
  // parameters from forward to backward (zero level 2, or a block that keeps its activations).
  const std::int64_t kept = o.zero_level == 2 || !o.checkpointing ? cfg.layers : std::min(o.keep_blocks, cfg.layers);
  m.buffers = world == 1 ? 0.0
                         : static_cast<double>(largest_block) *
                               (static_cast<double>(o.prefetch + 1 + kept) * bmt::dtype_size(cfg.dtype) +
                                2 * sizeof(float));
  return m;
}

}  // namespace bmt_train
