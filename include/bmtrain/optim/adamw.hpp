#pragma once
// AdamW (decoupled weight decay) as one fused kernel per range of each shard: reads the f32
// gradient, updates f32 moments and master weights, writes the compute-dtype parameter shard.
// With `offload`, master weights and moments live in host memory and the update runs on the host
// (the device then holds only the compute-dtype shard and the gradient shard).
#include "bmtrain/optim/optimizer.hpp"

namespace bmt::optim {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  bool offload = false;
  bool (*decay)(const std::string&, const Shape&) = decay_matrices;
};

class AdamW final : public Optimizer {
 public:
  AdamW(Module& model, AdamWOptions options = {});
  void step(float lr, float grad_scale) override;
  std::string name() const override { return options_.offload ? "AdamW (offloaded)" : "AdamW"; }
  std::vector<std::pair<std::string, Tensor>> state_of(const ShardedStorage& s) const override;
  void load_state(const ShardedStorage& s, const std::string& name, const std::vector<float>& values) override;
  const AdamWOptions& options() const { return options_; }

 private:
  struct State {
    Tensor master;  // f32; undefined when the parameters are f32 (the shard is the master)
    Tensor exp_avg, exp_avg_sq;
    // Offloaded: host copies, and the staging buffers for gradients and parameters.
    std::vector<float> host_master, host_m, host_v, host_grad;
  };
  void step_device(std::size_t k, float lr, float grad_scale, float bias1, float bias2);
  void step_host(std::size_t k, float lr, float grad_scale, float bias1, float bias2);
  AdamWOptions options_;
  std::vector<State> state_;
};

}  // namespace bmt::optim
