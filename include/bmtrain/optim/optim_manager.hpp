#pragma once
// OptimManager: what a training step does around the optimizers (BMTrain's OptimManager).
//   - loss scaling: backward() multiplies the loss by the loss scale (and divides it by the number
//     of micro-batches accumulated); step() divides the gradients by it again.
//   - dynamic loss scaling for f16: a step whose gradients hold inf/nan is skipped and the scale is
//     lowered; after `scale_window` clean steps it is raised.
//   - gradient clipping by global norm: one reduction over every rank's gradient shards.
//   - non-finite gradients with bf16/f32 (no loss scaling): the step is skipped with a warning, or
//     the job stops if `stop_on_nonfinite`.
//   - `defer_norm_read`: step() decides the skip and the clipping factor on the device and returns
//     without waiting for the gradient norm; the host learns the outcome (and lowers the loss
//     scale, takes a skipped step's count back from the optimizers and schedulers, warns or stops)
//     at settle(), which the next backward() and step() call first. Parameters and optimizer state
//     come out the same as without it.
//
//   bmt::optim::OptimManagerOptions options;
//   options.clip_grad_norm = 1.0f;
//   bmt::optim::OptimManager manager(options);
//   manager.add_optimizer(adamw, scheduler.get());
//   for (micro-batches) manager.backward(loss);
//   manager.step();
//   manager.zero_grad();
#include <memory>
#include <vector>

#include "bmtrain/optim/lr_scheduler.hpp"
#include "bmtrain/optim/optimizer.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "bmtrain/tensor/memory.hpp"
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
  bool defer_norm_read = false;      // no host wait in step(); the outcome is known at settle()
};

class OptimManager {
 public:
  explicit OptimManager(OptimManagerOptions options = {});
  // Without a scheduler the optimizer steps at the learning rate of its own options (AdamWOptions::lr).
  void add_optimizer(Optimizer& optimizer, LRScheduler* scheduler = nullptr);

  // Backward of loss * loss_scale / accumulation_steps.
  void backward(const Tensor& loss);
  // Unscales, checks, clips and applies every optimizer; returns false if the step was skipped.
  // With defer_norm_read it returns true once the step is queued, and settle() says whether it
  // was applied.
  bool step();
  // Reads the gradient norm of a step queued with defer_norm_read (a host wait) and settles its
  // outcome; returns whether the last step was applied. Nothing to do otherwise.
  bool settle();
  void zero_grad();

  // The loss scale, clean steps, last norm and skipped steps reflect every settled step; reading
  // them while a deferred step is unsettled is an error (call settle() first).
  float loss_scale() const;
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  int clean_steps() const;
  void set_clean_steps(int n) { clean_steps_ = n; }
  // Global gradient norm (unscaled, before clipping) and learning rate of the last step().
  float last_grad_norm() const;
  float last_lr() const { return last_lr_; }
  std::int64_t skipped_steps() const;
  const OptimManagerOptions& options() const { return options_; }

 private:
  OptimManagerOptions options_;
  // Books the outcome of a step whose scaled gradients have global norm `scaled_norm`; `queued`:
  // the step's update was queued already (with a device scale) and is taken back if skipped.
  bool conclude(float scaled_norm, bool queued);
  void raise_scale_after_clean_step();  // dynamic loss scaling: after scale_window clean steps
  void require_settled(const char* what) const;

  std::vector<std::pair<Optimizer*, LRScheduler*>> optimizers_;
  float loss_scale_;
  int clean_steps_ = 0;
  float last_norm_ = 0.0f;
  float last_lr_ = 0.0f;
  int micro_batches_ = 0;  // backward() calls since the last step() or zero_grad()
  std::int64_t skipped_ = 0;
  bool last_applied_ = true;
  // defer_norm_read: a step not yet settled. Its squared norm is copied to pinned host memory as
  // soon as the device has it, and settle() waits for that copy alone, not for the work queued
  // after it.
  bool pending_ = false;
  std::unique_ptr<memory::PinnedBuffer> norm_sq_host_;
  Event norm_sq_copied_;
  Tensor pending_scale_;  // the device scale the queued update reads (kept until it ran)
};

// The squared L2 norm of every gradient shard of every rank, summed over ranks on the device (one
// collective for all of them); nothing is read on the host.
Tensor global_grad_norm_squared(const std::vector<Optimizer*>& optimizers);
// Its square root, read on the host.
float global_grad_norm(const std::vector<Optimizer*>& optimizers);

}  // namespace bmt::optim
