#pragma once
// SGD with momentum (and optional Nesterov, decoupled weight decay), sharded like AdamW: the
// storages hold their values in f32 (ShardedStorage::hold_values_in_f32), which are the master
// weights, and an f32 momentum.
#include "bmtrain/optim/optimizer.hpp"

namespace bmt::optim {

struct SGDOptions {
  float momentum = 0.9f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  bool (*decay)(const std::string&, const Shape&) = decay_matrices;
  float lr = 0.01f;  // the learning rate when no LRScheduler is given to OptimManager::add_optimizer
};

class SGD final : public Optimizer {
 public:
  SGD(Module& model, SGDOptions options = {});
  using Optimizer::step;
  void step(float lr, const GradScale& scale) override;
  float learning_rate() const override { return options_.lr; }
  std::string name() const override { return "SGD"; }
  std::vector<std::pair<std::string, Tensor>> state_of(const ShardedStorage& s) const override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_;
};

}  // namespace bmt::optim
