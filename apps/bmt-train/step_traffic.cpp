#include "step_traffic.hpp"

#include <bmtrain/runtime/error.hpp>

namespace bmt_train {

namespace {

// A collective moving `bytes` (the whole data) over `n` ranks, `local` of them on this node: what
// one all-gather or reduce-scatter makes this rank send, added `times` times.
void add_collective(StepTraffic& t, double bytes, int n, int local, double times) {
  t.inside_node += times * bytes * (local - 1) / n;
  t.outside_node += times * bytes * (n - local) / n;
}

}  // namespace

StepTraffic step_traffic(const TrafficPlan& p) {
  BMT_REQUIRE(p.shard_size > 0 && p.replicas > 0 && p.tp_size > 0 && p.micro_batches > 0 && p.gathers_per_pass >= 0 &&
                  p.activation_collectives >= 0,
              "step_traffic: expected positive group sizes and micro-batches and non-negative gathers and activation "
              "collectives, found shard group "
                  << p.shard_size << ", replicas " << p.replicas << ", tp " << p.tp_size << ", micro-batches "
                  << p.micro_batches << ", gathers " << p.gathers_per_pass << ", activation collectives "
                  << p.activation_collectives);
  BMT_REQUIRE(p.shard_ranks_on_node >= 1 && p.shard_ranks_on_node <= p.shard_size,
              "step_traffic: expected 1 to " << p.shard_size << " shard-group ranks on the node, found "
                                             << p.shard_ranks_on_node);
  StepTraffic t;
  const auto passes = static_cast<double>(p.micro_batches);
  add_collective(t, p.parameter_bytes, p.shard_size, p.shard_ranks_on_node, passes * p.gathers_per_pass);
  add_collective(t, p.gradient_bytes, p.shard_size, p.shard_ranks_on_node, passes);
  // Each micro-batch's gradient shard is averaged over the replicas, one on each node: an
  // all-reduce, a reduce-scatter and an all-gather of the shard.
  add_collective(t, p.gradient_bytes / p.shard_size, p.replicas, 1, 2 * passes);
  // The tensor-parallel group is consecutive ranks of one node.
  add_collective(t, p.activation_bytes, p.tp_size, p.tp_size, passes * p.activation_collectives);
  return t;
}

}  // namespace bmt_train
