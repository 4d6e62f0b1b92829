#include "bmtrain/optim/optim_manager.hpp"

#include <cmath>

#include "bmtrain/kernels/reduce.hpp"
#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/runtime/timeline.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/logging.hpp"

namespace bmt::optim {

float global_grad_norm(const std::vector<Optimizer*>& optimizers) {
  std::vector<Tensor> grads;
  for (auto* o : optimizers) {
    o->settle();
    for (auto& g : o->gradient_shards()) grads.push_back(g);
  }
  // This rank's norm, squared and summed over ranks on the compute stream's communicator, then one
  // device-to-host read: the only host wait of a step (step() must decide on the host whether the
  // update happens). The square of the rank's norm (not its sum of squares) is what is reduced, so
  // the result is the same float as when the norm was read first and squared on the host.
  auto& ctx = context();
  const Tensor local = global_l2_norm(grads);
  const Tensor sq = kernels::binary(kernels::BinaryOp::mul, local, local);
  ctx.world_comm().all_reduce(sq.data(), sq.data(), 1, DType::f32, ReduceOp::sum, ctx.compute_stream());
  return std::sqrt(sq.to_host_floats()[0]);
}

OptimManager::OptimManager(OptimManagerOptions options) : options_(options), loss_scale_(options.loss_scale) {
  BMT_REQUIRE(options.loss_scale > 0, "OptimManager: expected loss_scale > 0, found " << options.loss_scale);
  BMT_REQUIRE(options.accumulation_steps >= 1,
              "OptimManager: expected accumulation_steps >= 1, found " << options.accumulation_steps);
  BMT_REQUIRE(options.scale_factor > 1, "OptimManager: expected scale_factor > 1, found " << options.scale_factor);
  BMT_REQUIRE(options.clip_grad_norm >= 0, "OptimManager: expected clip_grad_norm >= 0, found "
                                               << options.clip_grad_norm);
}

void OptimManager::add_optimizer(Optimizer& optimizer, LRScheduler* scheduler) {
  optimizers_.emplace_back(&optimizer, scheduler);
}

void OptimManager::backward(const Tensor& loss) {
  BMT_REQUIRE(loss.defined() && loss.numel() == 1, "OptimManager::backward: expected a scalar loss, found shape "
                                                       << (loss.defined() ? to_string(loss.shape()) : "undefined"));
  // Seeding backward with the factor scales every gradient without another op in the graph.
  const float factor = loss_scale_ / static_cast<float>(options_.accumulation_steps);
  autograd::backward({loss}, {full(loss.shape(), factor, loss.dtype())});
}

bool OptimManager::step() {
  BMT_REQUIRE(!optimizers_.empty(), "OptimManager::step: expected at least one optimizer (add_optimizer)");
  timeline::Span span(context().compute_stream(), "optimizer step");
  std::vector<Optimizer*> opts;
  for (auto& [o, s] : optimizers_) opts.push_back(o);
  const float scaled_norm = global_grad_norm(opts);
  last_norm_ = scaled_norm / loss_scale_;

  if (!std::isfinite(scaled_norm)) {
    ++skipped_;
    clean_steps_ = 0;
    if (options_.dynamic_loss_scale) {
      const float lowered = std::max(options_.min_loss_scale, loss_scale_ / options_.scale_factor);
      print_rank("gradient overflow at loss scale ", loss_scale_, ": step skipped, scale now ", lowered);
      loss_scale_ = lowered;
    } else {
      BMT_REQUIRE(!options_.stop_on_nonfinite, "non-finite gradients (norm " << scaled_norm
                                                   << "): expected finite values; stopping as configured");
      if (rank() == 0) warn("non-finite gradients (norm ", scaled_norm, "): step skipped");
    }
    zero_grad();
    return false;
  }

  float grad_scale = 1.0f / loss_scale_;
  if (options_.clip_grad_norm > 0 && last_norm_ > options_.clip_grad_norm)
    grad_scale *= options_.clip_grad_norm / (last_norm_ + 1e-6f);
  for (auto& [o, s] : optimizers_) {
    const float lr = s ? s->current_lr() : 0.0f;
    BMT_REQUIRE(s, "OptimManager::step: expected an LR scheduler for " << o->name()
                                                                       << " (add_optimizer(optimizer, scheduler))");
    last_lr_ = lr;
    o->step(lr, grad_scale);
    s->step();
  }
  if (options_.dynamic_loss_scale && ++clean_steps_ >= options_.scale_window) {
    loss_scale_ *= options_.scale_factor;
    clean_steps_ = 0;
  }
  return true;
}

void OptimManager::zero_grad() {
  for (auto& [o, s] : optimizers_) o->zero_grad();
}

}  // namespace bmt::optim
