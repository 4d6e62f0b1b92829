#pragma once
// What training costs a rank in memory before activations: the sharded state (each parameter's
// values, gradient and AdamW state, by dtype and option), the buffers a block list gathers into and
// reduces from, and, with AdamWOptions::offload, the state kept in host memory. One function, so
// that a startup banner and a check that refuses what cannot fit say the same.
//
// Bytes a parameter costs, before dividing by the N ranks that share it, with f32 moments (bf16
// moments, AdamWOptions::moments: 4 fewer wherever the moments are):
//   on the device                         f32 and bf16/f16 parameters alike
//     AdamW, from backward to step        16: 4 values (f32: they are the master weights) + 4 f32
//                                         gradient + 4 + 4 moments (bf16 moments: 12)
//     AdamW, during forward               12: the step gives the gradient shards back and the next
//                                         backward makes them again (bf16 moments: 8)
//     AdamW offloaded                     2 (bf16/f16) or 4 (f32): the values in the parameters' dtype;
//                                         a gradient lives on the device only from its reduction to its
//                                         copy to the host (a few blocks' at a time: buffers)
//     + accumulated micro-batches         the f32 gradient where it is not there already (offloaded: 4)
//                                         and, N > 1, 4: a later micro-batch's reduction beside the sum;
//                                         these live from the first micro-batch to the step, forward
//                                         included
//   on the host, AdamW offloaded          16: 4 master + 4 + 4 moments + 4 pinned exchange buffer (the
//                                         gradient comes in, the updated values go out); bf16 moments: 12
#include <cstdint>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt::optim {

struct MemoryPlan {
  std::int64_t parameters = 0;     // every parameter of the model
  std::int64_t largest_block = 0;  // elements of the largest CheckpointBlock (ShardedStorage::total())
  // Of those, the elements of weights gathered as float8 codes (FP8 linear layers' weights,
  // ParameterInfo::gather_float8): 1 byte each in a gather buffer, and, across ranks, a staging
  // buffer the size of one gather buffer beside the ring (ShardedStorage::gather_into).
  std::int64_t largest_block_float8 = 0;
  int world_size = 1;              // the ranks sharing each parameter: the shard group's
  int replicas = 1;                // copies of the shards (node sharding's nodes): with more than
                                   // one, gradients are reduced even where world_size is 1
  DType dtype = DType::f32;        // the parameters' dtype
  DType moments = DType::f32;      // AdamWOptions::moments: f32 or bf16
  bool offload = false;            // AdamWOptions::offload
  bool accumulates = false;        // several micro-batches summed before each step
  int prefetch = 1;                // TransformerBlockList prefetch depth: prefetch + 1 gather slots
  int kept_blocks = 0;             // blocks keeping their gathered parameters from forward to backward
};

struct MemoryEstimate {
  // The state's bytes a parameter, before dividing by N: at its peak (the gradients made, from the
  // backward to the step) and while a forward runs (what a forward's activations come on top of).
  double device_bytes_per_parameter = 0;
  double forward_device_bytes_per_parameter = 0;
  double host_bytes_per_parameter = 0;
  double device_state = 0;          // bytes per rank: parameters * device_bytes_per_parameter / N
  double forward_device_state = 0;  // bytes per rank: parameters * forward_device_bytes_per_parameter / N
  double device_buffers = 0;        // bytes per rank: gather slots, kept gathered blocks, gradient slots
  double host_state = 0;            // bytes per rank
};

MemoryEstimate estimate_memory(const MemoryPlan& plan);

}  // namespace bmt::optim
