#pragma once
// The bytes a rank sends in a training step, inside its node and to other nodes, as the mesh and
// the model's size give them: the parameters' all-gathers and the gradients' reduce-scatters over
// the shard group, node sharding's all-reduce of the gradient shard over the replicas, and tensor
// parallelism's all-gathers and reduce-scatters of the activations inside its group (on the node).
// The banner states them, so the choice of --shard-group and --tp shows in numbers. Left out: the
// all-reduces of replicated parameters' gradients under tensor parallelism (norms, biases: a few
// vectors of the model's width a block) and the loss's per-row sums.
//
// The model of a collective: over a group of n ranks, each rank's 1/n part goes to every other
// rank (ring and direct algorithms send the same total, (n - 1)/n of the data, a rank); the part
// sent to the group's ranks on this node stays inside it. An all-reduce is a reduce-scatter and
// an all-gather.
#include <cstdint>

namespace bmt_train {

struct TrafficPlan {
  double parameter_bytes = 0;   // the gathered parameters, whole (elements x their dtype's size; FP8 weights 1)
  double gradient_bytes = 0;    // the reduced gradients, whole (f32: 4 bytes a trainable element)
  int shard_size = 1;           // ranks of the shard group
  int shard_ranks_on_node = 1;  // of them, on this rank's node (itself included)
  int replicas = 1;             // copies of the shards, one a node (node sharding), 1 otherwise
  int gathers_per_pass = 2;     // all-gathers of the parameters a micro-batch: forward and backward (zero level 3), or 1
  std::int64_t micro_batches = 1;
  int tp_size = 1;                    // ranks of the tensor-parallel group, all on this node
  double activation_bytes = 0;        // a micro-batch's [tokens, width] activations, whole, in the compute dtype
  double activation_collectives = 0;  // all-gathers and reduce-scatters of them a micro-batch
};

struct StepTraffic {
  double inside_node = 0;   // bytes this rank sends to ranks of its node in one step
  double outside_node = 0;  // and to ranks on other nodes
};

// Throws bmt::Error naming the value when a size is not positive or the ranks on the node exceed
// the shard group.
StepTraffic step_traffic(const TrafficPlan& plan);

}  // namespace bmt_train
