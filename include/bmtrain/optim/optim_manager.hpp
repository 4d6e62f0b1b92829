#pragma once
// OptimManager: what a training step does around the optimizers (BMTrain's OptimManager).
//   - loss scaling: backward() multiplies the loss by the loss scale (and divides it by the number
//     of micro-batches accumulated); step() divides the gradients by it again.
//   - dynamic loss scaling for f16: a step whose gradients hold inf/nan is skipped and the scale is
//     lowered; after `scale_window` clean steps it is raised.
//   - gradient clipping by global norm: one reduction over every rank's gradient shards.
//   - non-finite gradients with bf16/f32 (no loss scaling): the step is skipped with a warning, or
//     the job stops if `stop_on_nonfinite`.
//
//   bmt::optim::OptimManagerOptions options;
//   options.clip_grad_norm = 1.0f;
//   bmt::optim::OptimManager manager(options);
//   manager.add_optimizer(adamw, scheduler.get());
//   for (micro-batches) manager.backward(loss);
//   manager.step();
//   manager.zero_grad();
#include <vector>

#include "bmtrain/optim/lr_scheduler.hpp"
#include "bmtrain/optim/optimizer.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::optim {

struct OptimManagerOptions {
  float loss_scale = 1.0f;           // 1 turns dynamic scaling off
  bool dynamic_loss_scale = false;   // on for f16 training
  float scale_factor = 2.0f;
  int scale_window = 1000;           // clean steps before the scale is raised
  float min_loss_scale = 1.0f;
  float clip_grad_norm = 0.0f;       // 0: no clipping
  int accumulation_steps = 1;        // micro-batches per optimizer step
  bool stop_on_nonfinite = false;
};

class OptimManager {
 public:
  explicit OptimManager(OptimManagerOptions options = {});
  void add_optimizer(Optimizer& optimizer, LRScheduler* scheduler = nullptr);

  // Backward of loss * loss_scale / accumulation_steps.
  void backward(const Tensor& loss);
  // Unscales, checks, clips and applies every optimizer; returns false if the step was skipped.
  bool step();
  void zero_grad();

  float loss_scale() const { return loss_scale_; }
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  int clean_steps() const { return clean_steps_; }
  void set_clean_steps(int n) { clean_steps_ = n; }
  // Global gradient norm (unscaled, before clipping) and learning rate of the last step().
  float last_grad_norm() const { return last_norm_; }
  float last_lr() const { return last_lr_; }
  std::int64_t skipped_steps() const { return skipped_; }
  const OptimManagerOptions& options() const { return options_; }

 private:
  OptimManagerOptions options_;
  std::vector<std::pair<Optimizer*, LRScheduler*>> optimizers_;
  float loss_scale_;
  int clean_steps_ = 0;
  float last_norm_ = 0.0f;
  float last_lr_ = 0.0f;
  std::int64_t skipped_ = 0;
};

// The L2 norm of every gradient shard of every rank: one collective for all of them.
float global_grad_norm(const std::vector<Optimizer*>& optimizers);

}  // namespace bmt::optim
