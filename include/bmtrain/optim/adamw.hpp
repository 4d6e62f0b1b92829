#pragma once
// AdamW (decoupled weight decay) as one fused kernel per range of each shard: reads the f32
// gradient, updates the moments and the f32 master weights. The storages hold their values in f32
// (ShardedStorage::hold_values_in_f32): the master weights are the shard, and gathers round them to
// the parameters' dtype. The moments are f32, or bf16 with `moments = DType::bf16`: read into f32,
// updated in f32 and rounded to nearest even when stored; the master weights and all of the
// update's arithmetic stay f32. A parameter costs, / N, 4 master + 8 moments (4 in bf16) and, from
// the backward that makes its gradient to the step that consumes it, 4 for the f32 gradient shard
// (step() gives the shards back: optimizer.hpp).
//
// With `offload`, master weights and moments live in host memory and a pool of host threads updates
// them, storage by storage as the gradients arrive (lib/optim/offloaded_adamw.hpp says how the
// copies and updates overlap the step): the device holds the values in the parameters' dtype, 2
// bytes a parameter for bf16 (/ N), and each gradient shard only from its reduction to its copy
// out; the host 16 (12 with bf16 moments).
//
// Checkpoints (io::save_optimizer) hold the moments in their own dtype; loading converts: bf16
// moments widen exactly into f32 ones, and f32 moments load into bf16 ones rounded to nearest even.
#include <memory>

#include "bmtrain/optim/optimizer.hpp"

namespace bmt::optim {

namespace detail {
class OffloadedAdamW;
}

// The largest beta bf16 moments take: their rounding to nearest loses a decay of less than
// (1 - beta) = 1% a step (a bf16 step is 2^-9 to 2^-8 of the value), so that a second moment
// with beta2 = 0.999 could only rise.
constexpr float kMaxBf16MomentBeta = 0.99f;

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  // Master weights and moments in host memory, updated there.
  bool offload = false;
  // With offload: copy each update to the device during the next step's last backward, once that
  // has read the old values, instead of before the next forward, so that the host update runs beside
  // the whole next step. Each step's gradients are then computed at the values of one update before
  // (ZeRO-Offload's delayed parameter update); flush() (and so a checkpoint) copies the last update.
  bool delayed_update = false;
  // With offload: host threads for the update; 0: bmt::host_threads() (this rank's share of cores).
  int host_threads = 0;
  // On the device: update each CheckpointBlock's shard when the next forward gathers the block,
  // on the gather stream beside the compute of the blocks before it, instead of all at once after
  // the backward (parameters outside blocks are still updated at the step). The same arithmetic on
  // the same values: only when it runs changes. Each block's gradient shard then lives until its
  // update (ShardedStorage::defer_update), and anything that reads the values or the optimizer's
  // state first runs the update it finds pending; flush() runs them all.
  bool update_in_forward = false;
  // The moments' dtype: f32, or bf16 (2 bytes each a parameter instead of 4), which needs betas
  // of at most kMaxBf16MomentBeta (bmt-train's 0.9 and 0.95 are; the default beta2 0.999 is not).
  DType moments = DType::f32;
  bool (*decay)(const std::string&, const Shape&) = decay_matrices;
  float lr = 1e-3f;  // the learning rate when no LRScheduler is given to OptimManager::add_optimizer
};

class AdamW final : public Optimizer {
 public:
  AdamW(Module& model, AdamWOptions options = {});
  ~AdamW() override;
  using Optimizer::step;
  void step(float lr, const GradScale& scale) override;
  void backward_begins(bool last_micro_batch) override;
  void backward_ends(bool last_micro_batch) override;
  void flush() override;
  Tensor gradient_sum_squares(std::vector<Tensor>& tensors) override;
  std::string name() const override;
  float learning_rate() const override { return options_.lr; }
  std::vector<std::pair<std::string, Tensor>> state_of(const ShardedStorage& s) const override;
  void load_state(const ShardedStorage& s, const std::string& name, const std::vector<float>& values) override;
  const AdamWOptions& options() const { return options_; }
  // Offloaded: host memory the state takes (bytes) and the threads that update it; 0 otherwise.
  std::size_t host_bytes() const;
  int host_threads() const;

 private:
  struct State {
    Tensor exp_avg, exp_avg_sq;  // in options_.moments
  };
  AdamWOptions options_;
  std::vector<State> state_;
  std::unique_ptr<detail::OffloadedAdamW> offloaded_;
};

}  // namespace bmt::optim
