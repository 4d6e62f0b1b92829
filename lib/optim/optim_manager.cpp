#include "bmtrain/optim/optim_manager.hpp"

#include <cmath>
#include <cstring>

#include "bmtrain/kernels/reduce.hpp"
#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/kernels/math.hpp"
#include "bmtrain/runtime/timeline.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/logging.hpp"

namespace bmt::optim {

Tensor global_grad_norm_squared(const std::vector<Optimizer*>& optimizers) {
  std::vector<Tensor> grads, taken;
  for (auto* o : optimizers) {
    o->settle();
    const Tensor sum = o->gradient_sum_squares(grads);
    if (sum.defined()) taken.push_back(sum);
  }
  // This rank's sum of squares, summed over the shard group and then the tensor-parallel group on
  // the compute stream's communicators: together they hold each gradient element once (node
  // sharding's replicas hold copies of the shards, and norm_parts leaves a replicated parameter to
  // one tensor-parallel rank). Each rank's sum is accurate to its last bit (f64 accumulation), so
  // the ranks' sums add up to the 1-rank value within one rounding per rank.
  auto& ctx = context();
  Tensor sq = global_sum_squares(grads);
  for (const Tensor& t : taken) sq = kernels::binary(kernels::BinaryOp::add, sq, t);
  const Mesh& mesh = ctx.mesh();
  if (mesh.shard_size > 1)
    ctx.shard_comm().all_reduce(sq.data(), sq.data(), 1, DType::f32, ReduceOp::sum, ctx.compute_stream());
  if (mesh.tp_size > 1)
    ctx.tp_comm().all_reduce(sq.data(), sq.data(), 1, DType::f32, ReduceOp::sum, ctx.compute_stream());
  return sq;
}

float global_grad_norm(const std::vector<Optimizer*>& optimizers) {
  return std::sqrt(global_grad_norm_squared(optimizers).to_host_floats()[0]);
}

namespace {

// The gradient scale of a step, on the device, from the squared global norm of the loss-scaled
// gradients: 1 / loss_scale, times clip / (norm + 1e-6) when the unscaled norm exceeds `clip` (0:
// no clipping); -1 when the norm is not finite. The same float operations as the host's in step().
Tensor device_grad_scale(const Tensor& norm_sq, float loss_scale, float clip) {
  Tensor out = Tensor::empty({1}, DType::f32);
  auto sq = kernels::view1<float>(norm_sq, "OptimManager");
  auto scale = kernels::view1<float>(out, "OptimManager");
  Kokkos::parallel_for(
      "bmt::grad_scale", Kokkos::RangePolicy<kernels::ExecSpace>(kernels::space(), 0, 1), KOKKOS_LAMBDA(int) {
        const float scaled_norm = kmath::sqrt(sq(0));
        if (!kmath::isfinite(scaled_norm)) {
          scale(0) = -1.0f;
          return;
        }
        const float norm = scaled_norm / loss_scale;
        float g = 1.0f / loss_scale;
        if (clip > 0 && norm > clip) g *= clip / (norm + 1e-6f);
        scale(0) = g;
      });
  return out;
}

}  // namespace

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
  settle();  // a deferred step's outcome may lower the loss scale this backward uses
  const bool last = ++micro_batches_ >= options_.accumulation_steps;
  for (auto& [o, s] : optimizers_) o->backward_begins(last);
  // Seeding backward with the factor scales every gradient without another op in the graph.
  const float factor = loss_scale_ / static_cast<float>(options_.accumulation_steps);
  autograd::backward({loss}, {full(loss.shape(), factor, loss.dtype())});
  for (auto& [o, s] : optimizers_) o->backward_ends(last);
}

bool OptimManager::step() {
  BMT_REQUIRE(!optimizers_.empty(), "OptimManager::step: expected at least one optimizer (add_optimizer)");
  settle();
  micro_batches_ = 0;
  timeline::Span span(context().compute_stream(), "optimizer step");
  std::vector<Optimizer*> opts;
  for (auto& [o, s] : optimizers_) opts.push_back(o);
  const Tensor norm_sq = global_grad_norm_squared(opts);
  GradScale scale;
  if (options_.defer_norm_read) {
    // The device decides the skip and the clipping factor; the host books the outcome at settle().
    scale.device = device_grad_scale(norm_sq, loss_scale_, options_.clip_grad_norm);
    Stream& compute = context().compute_stream();
    if (!norm_sq_host_) norm_sq_host_ = std::make_unique<memory::PinnedBuffer>(sizeof(float));
    memory::copy_to_host_async(norm_sq_host_->data(), norm_sq.data(), sizeof(float), compute);
    norm_sq_copied_ = compute.record();
    pending_scale_ = scale.device;
    pending_ = true;
  } else {
    // The one host wait of a step without defer_norm_read.
    const float scaled_norm = std::sqrt(norm_sq.to_host_floats()[0]);
    if (!conclude(scaled_norm, false)) return false;
    scale.value = 1.0f / loss_scale_;
    if (options_.clip_grad_norm > 0 && last_norm_ > options_.clip_grad_norm)
      scale.value *= options_.clip_grad_norm / (last_norm_ + 1e-6f);
  }
  for (auto& [o, s] : optimizers_) {
    last_lr_ = s ? s->current_lr() : o->learning_rate();
    o->step(last_lr_, scale);
    if (s) s->step();
  }
  if (!options_.defer_norm_read) raise_scale_after_clean_step();
  return true;
}

bool OptimManager::settle() {
  if (!pending_) return last_applied_;
  norm_sq_copied_.synchronize();
  float norm_sq = 0.0f;
  std::memcpy(&norm_sq, norm_sq_host_->data(), sizeof norm_sq);
  const float scaled_norm = std::sqrt(norm_sq);
  pending_ = false;
  pending_scale_ = Tensor();
  if (conclude(scaled_norm, true)) raise_scale_after_clean_step();
  return last_applied_;
}

bool OptimManager::conclude(float scaled_norm, bool queued) {
  last_norm_ = scaled_norm / loss_scale_;
  last_applied_ = std::isfinite(scaled_norm);
  if (last_applied_) return true;
  ++skipped_;
  clean_steps_ = 0;
  if (queued) {
    // The update was queued and did nothing (its device scale was negative): take its count back.
    for (auto& [o, s] : optimizers_) {
      o->set_step_count(o->step_count() - 1);
      s->set_step(s->current_step() - 1);
    }
  }
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

void OptimManager::raise_scale_after_clean_step() {
  if (options_.dynamic_loss_scale && ++clean_steps_ >= options_.scale_window) {
    loss_scale_ *= options_.scale_factor;
    clean_steps_ = 0;
  }
}

void OptimManager::require_settled(const char* what) const {
  BMT_REQUIRE(!pending_, "OptimManager::" << what << ": expected a settled step, found one queued with "
                                                       "defer_norm_read (call settle() first)");
}

float OptimManager::loss_scale() const {
  require_settled("loss_scale");
  return loss_scale_;
}

int OptimManager::clean_steps() const {
  require_settled("clean_steps");
  return clean_steps_;
}

float OptimManager::last_grad_norm() const {
  require_settled("last_grad_norm");
  return last_norm_;
}

std::int64_t OptimManager::skipped_steps() const {
  require_settled("skipped_steps");
  return skipped_;
}

void OptimManager::zero_grad() {
  micro_batches_ = 0;
  for (auto& [o, s] : optimizers_) o->zero_grad();
}

}  // namespace bmt::optim
