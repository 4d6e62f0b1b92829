#pragma once
// AdamW (decoupled weight decay) as one fused kernel per range of each shard: reads the f32
// gradient, updates f32 moments and master weights. The storages hold their values in f32
// (ShardedStorage::hold_values_in_f32): the master weights are the shard, and gathers round them to
// the parameters' dtype, so a parameter costs 16 bytes (4 master, 4 gradient, 8 moments) / N.
// With `offload`, master weights and moments live in host memory and the update runs on the host
// (the device then holds only the compute-dtype shard and the gradient shard).
#include <memory>

#include "bmtrain/optim/optimizer.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "bmtrain/tensor/memory.hpp"

namespace bmt::optim {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  bool offload = false;
  bool (*decay)(const std::string&, const Shape&) = decay_matrices;
  float lr = 1e-3f;  // the learning rate when no LRScheduler is given to OptimManager::add_optimizer
};

class AdamW final : public Optimizer {
 public:
  AdamW(Module& model, AdamWOptions options = {});
  using Optimizer::step;
  void step(float lr, const GradScale& scale) override;
  std::string name() const override { return options_.offload ? "AdamW (offloaded)" : "AdamW"; }
  float learning_rate() const override { return options_.lr; }
  std::vector<std::pair<std::string, Tensor>> state_of(const ShardedStorage& s) const override;
  void load_state(const ShardedStorage& s, const std::string& name, const std::vector<float>& values) override;
  const AdamWOptions& options() const { return options_; }

 private:
  struct State {
    Tensor exp_avg, exp_avg_sq;
    // Offloaded: the state in host memory, and pinned staging buffers for the gradient shard
    // coming in and the compute-dtype parameter shard going out.
    std::vector<float> host_master, host_m, host_v;
    std::unique_ptr<memory::PinnedBuffer> grad_stage, param_stage;
  };
  void step_device(std::size_t k, float lr, const GradScale& scale, float bias1, float bias2);
  // Offloaded step: the gradient of storage k+1 is copied to the host while storage k updates.
  void step_offloaded(float lr, float grad_scale, float bias1, float bias2);
  void update_on_host(std::size_t k, float lr, float grad_scale, float bias1, float bias2);
  AdamWOptions options_;
  std::vector<State> state_;
  std::unique_ptr<Stream> copy_stream_;  // host <-> device copies of the offloaded step
};

}  // namespace bmt::optim
