#pragma once
// Test helpers: a sharded tensor gathered from every rank, and a model's parameters and gradients
// gathered by name, for comparing against references computed whole.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <bmtrain/bmtrain.hpp>

namespace bmt_test {

// Every shard-group rank's `shard` (the same size at each), concatenated in rank order, on the
// host: the whole of a sharded tensor (the shard group is the world unless the mesh says otherwise).
inline std::vector<float> all_gather(const bmt::Tensor& shard) {
  bmt::Tensor full = bmt::Tensor::empty({shard.numel() * bmt::context().mesh().shard_size}, shard.dtype());
  bmt::context().shard_comm().all_gather(shard.data(), full.data(), static_cast<std::size_t>(shard.numel()),
                                         shard.dtype(), bmt::context().compute_stream());
  bmt::context().compute_stream().synchronize();
  return full.to_host_floats();
}

// name -> (value, gradient) of every parameter of `model`, gathered (gradients settled first).
using Gathered = std::map<std::string, std::pair<std::vector<float>, std::vector<float>>>;
inline Gathered gathered(bmt::Module& model) {
  Gathered out;
  for (auto* s : bmt::sharded_storages(model)) {
    s->settle();
    const auto v = all_gather(s->shard());
    const auto g = all_gather(s->grad_shard());
    for (const auto& e : s->entries())
      out[e.name] = {std::vector<float>(v.begin() + e.offset, v.begin() + e.offset + e.numel),
                     std::vector<float>(g.begin() + e.offset, g.begin() + e.offset + e.numel)};
  }
  return out;
}

}  // namespace bmt_test
