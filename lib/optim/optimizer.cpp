#include "bmtrain/optim/optimizer.hpp"

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/zero/distributed_module.hpp"

namespace bmt::optim {

bool decay_matrices(const std::string&, const Shape& shape) { return shape.size() >= 2; }

Optimizer::Optimizer(Module& model) : storages_(sharded_storages(model)) {
  BMT_REQUIRE(!storages_.empty(), "optimizer: expected a model with initialized parameters, found none "
                                  "(call bmt::init_parameters(model) before building the optimizer)");
}

void Optimizer::plan_ranges(float weight_decay, bool (*decay)(const std::string&, const Shape&)) {
  ranges_.assign(storages_.size(), {});
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    const ShardedStorage& s = *storages_[k];
    auto& out = ranges_[k];
    for (const auto& e : s.entries()) {
      if (!e.trainable) continue;
      const auto slice = s.local_slice(e);
      if (slice.count == 0) continue;
      const float wd = decay(e.name, e.parameter.shape()) ? weight_decay : 0.0f;
      const std::int64_t begin = slice.shard_offset, end = slice.shard_offset + slice.count;
      // Merge with the previous range across alignment padding when the decay agrees: padding
      // holds zeros with zero gradients, which every update leaves at zero.
      if (!out.empty() && out.back().weight_decay == wd) {
        out.back().end = end;
      } else {
        out.push_back({begin, end, wd});
      }
    }
  }
}

std::size_t Optimizer::index_of(const ShardedStorage& s) const {
  for (std::size_t k = 0; k < storages_.size(); ++k)
    if (storages_[k] == &s) return k;
  BMT_REQUIRE(false, name() << ": storage '" << s.name() << "' is not updated by this optimizer");
  return 0;
}

void Optimizer::load_state(const ShardedStorage& s, const std::string& state, const std::vector<float>& values) {
  index_of(s);
  BMT_REQUIRE(values.size() == static_cast<std::size_t>(s.shard_size()),
              name() << "::load_state: expected " << s.shard_size() << " values for '" << s.name() << "', found "
                     << values.size());
  std::string known;
  for (auto& [n, t] : state_of(s)) {
    known += (known.empty() ? "" : ", ") + n;
    if (n != state) continue;
    copy_into(t, Tensor::from_floats(values, t.shape(), DType::f32));
    if (state == "master" && !t.is_same(s.shard())) copy_into(s.shard(), t);
    return;
  }
  BMT_REQUIRE(false, name() << "::load_state: unknown state '" << state << "': expected one of " << known);
}

void Optimizer::release_gradients() {
  for (auto* s : storages_) s->release_gradient(Event());
}

void Optimizer::zero_grad() {
  for (auto* s : storages_) s->zero_grad();
}

void Optimizer::settle() {
  for (auto* s : storages_) s->settle();
}

Tensor Optimizer::gradient_sum_squares(std::vector<Tensor>& tensors) {
  for (auto* s : storages_)
    for (auto& part : s->norm_parts(s->grad_shard())) tensors.push_back(part);
  return Tensor();
}

}  // namespace bmt::optim
