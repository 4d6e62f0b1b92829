#include "bmtrain/optim/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/math.hpp"
#include "bmtrain/runtime/context.hpp"
#include "../kernels/adamw_seam.hpp"
#include "offloaded_adamw.hpp"

namespace bmt::optim {

namespace {

using namespace kernels;

using Ranges = std::vector<kernels::seam::AdamWRange>;

// One fused pass over a range of a shard that holds its values in f32 (the master weights), with
// moments of type M (float, or bf16_t: widened for the update, rounded to nearest even when
// stored; the update reads the unrounded new moments, as the CUDA kernel does).
template <class M>
void adamw_kernel(const kernels::seam::AdamWRange& r, const kernels::seam::AdamWScalars& h,
                  const Kokkos::DefaultExecutionSpace& on) {
  float* w = r.master;
  const float* g = r.grad;
  M* mv = static_cast<M*>(r.exp_avg);
  M* vv = static_cast<M*>(r.exp_avg_sq);
  const float decay = r.weight_decay;
  Kokkos::parallel_for(
      "bmt::adamw", Kokkos::RangePolicy<ExecSpace>(on, 0, r.n), KOKKOS_LAMBDA(std::int64_t i) {
        const float scale = h.device_scale ? *h.device_scale : h.grad_scale;
        if (scale < 0.0f) return;  // non-finite gradients: the step is skipped
        const float gi = g[i] * scale;
        const float mi = h.beta1 * to_f32(mv[i]) + (1.0f - h.beta1) * gi;
        const float vi = h.beta2 * to_f32(vv[i]) + (1.0f - h.beta2) * gi * gi;
        mv[i] = from_f32<M>(mi);
        vv[i] = from_f32<M>(vi);
        const float update = (mi / h.bias1) / (kmath::sqrt(vi / h.bias2) + h.eps);
        w[i] = w[i] * (1.0f - h.lr * decay) - h.lr * update;
      });
}

// Queues the update of `ranges` on `stream`: the backend's multi-tensor kernel (a few launches for
// hundreds of ranges on CUDA), or the portable kernel per range where the backend declines.
void update_ranges(DType moments, const Ranges& ranges, const kernels::seam::AdamWScalars& h, Stream& stream) {
  if (kernels::seam::adamw_step(moments, ranges, h, stream)) return;
  for (const auto& r : ranges) {
    if (moments == DType::bf16)
      adamw_kernel<bf16_t>(r, h, stream.space());
    else
      adamw_kernel<float>(r, h, stream.space());
  }
}

// The update's ranges of a shard: pointers into its master weights, gradient and moments.
Ranges shard_ranges(ShardedStorage& s, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const std::vector<Optimizer::Range>& ranges, DType moments) {
  float* master = s.shard().data_as<float>();
  const float* grad = s.grad_shard().data_as<float>();
  char* m = static_cast<char*>(exp_avg.data());
  char* v = static_cast<char*>(exp_avg_sq.data());
  const std::size_t ms = dtype_size(moments);
  Ranges out;
  for (const auto& r : ranges) {
    const auto at = static_cast<std::size_t>(r.begin) * ms;
    out.push_back({master + r.begin, grad + r.begin, m + at, v + at, r.end - r.begin, r.weight_decay});
  }
  return out;
}

}  // namespace

AdamW::AdamW(Module& model, AdamWOptions options) : Optimizer(model), options_(options) {
  BMT_REQUIRE(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
              "AdamW: expected betas in [0, 1), found (" << options.beta1 << ", " << options.beta2 << ")");
  BMT_REQUIRE(options.eps > 0, "AdamW: expected eps > 0, found " << options.eps);
  BMT_REQUIRE(options.offload || !options.delayed_update,
              "AdamW: expected delayed_update only with offload, found it without");
  BMT_REQUIRE(!options.offload || !options.update_in_forward,
              "AdamW: expected update_in_forward only on the device, found it with offload (whose update runs "
              "on the host as the gradients arrive)");
  BMT_REQUIRE(options.moments == DType::f32 || options.moments == DType::bf16,
              "AdamW: expected moments in f32 or bf16, found " << dtype_name(options.moments));
  // A smaller decay a step than 1 - kMaxBf16MomentBeta would be lost to rounding (adamw.hpp).
  BMT_REQUIRE(options.moments != DType::bf16 || std::max(options.beta1, options.beta2) <= kMaxBf16MomentBeta,
              "AdamW: expected betas <= " << kMaxBf16MomentBeta << " with bf16 moments (a smaller decay a step is "
                                          << "lost to their rounding), found (" << options.beta1 << ", "
                                          << options.beta2 << ")");
  plan_ranges(options.weight_decay, options.decay);
  if (options_.offload) {
    offloaded_ = std::make_unique<detail::OffloadedAdamW>(storages_, ranges_, options_);
    return;
  }
  state_.resize(storages_.size());
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    ShardedStorage& s = *storages_[k];
    s.hold_values_in_f32();  // the shard is the master weights; gathers round them
    state_[k].exp_avg = Tensor::zeros({s.shard_size()}, options_.moments);
    state_[k].exp_avg_sq = Tensor::zeros({s.shard_size()}, options_.moments);
  }
}

AdamW::~AdamW() = default;

std::string AdamW::name() const {
  std::string name = "AdamW";
  if (options_.offload) name += options_.delayed_update ? " (offloaded, delayed update)" : " (offloaded)";
  if (options_.update_in_forward) name += " (updates in the next forward)";
  if (options_.moments != DType::f32) name += std::string(" (") + dtype_name(options_.moments) + " moments)";
  return name;
}

void AdamW::backward_begins(bool last_micro_batch) {
  if (offloaded_) offloaded_->backward_begins(last_micro_batch);
}

void AdamW::backward_ends(bool last_micro_batch) {
  if (offloaded_) offloaded_->backward_ends(last_micro_batch);
}

Tensor AdamW::gradient_sum_squares(std::vector<Tensor>& tensors) {
  if (offloaded_) return offloaded_->gradient_sum_squares(tensors);
  return Optimizer::gradient_sum_squares(tensors);
}

std::size_t AdamW::host_bytes() const { return offloaded_ ? offloaded_->host_bytes() : 0; }

int AdamW::host_threads() const { return offloaded_ ? offloaded_->threads() : 0; }

void AdamW::step(float lr, const GradScale& scale) {
  ++steps_;
  const float bias1 = 1.0f - std::pow(options_.beta1, static_cast<float>(steps_));
  const float bias2 = 1.0f - std::pow(options_.beta2, static_cast<float>(steps_));
  if (offloaded_) return offloaded_->step(lr, scale, bias1, bias2);
  for (ShardedStorage* s : storages_) s->settle();
  // Every shard holds its values in f32: they are the master weights.
  const float* device_scale = scale.device.defined() ? scale.device.data_as<float>() : nullptr;
  const kernels::seam::AdamWScalars scalars{lr,    scale.value, options_.beta1, options_.beta2, options_.eps, bias1, bias2,
                                            device_scale};
  Ranges now;
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    ShardedStorage& s = *storages_[k];
    Ranges update = shard_ranges(s, state_[k].exp_avg, state_[k].exp_avg_sq, ranges(k), options_.moments);
    if (!options_.update_in_forward || !s.belongs_to_block()) {
      now.insert(now.end(), update.begin(), update.end());
      continue;
    }
    // Left to the block's next gather. The update holds what it reads: the gradient shard (given
    // back below, so its memory lives on only here), the moments and the step's scale.
    struct Held {
      Tensor grad, exp_avg, exp_avg_sq, scale;
    };
    auto held = std::make_shared<Held>(Held{s.grad_shard(), state_[k].exp_avg, state_[k].exp_avg_sq, scale.device});
    s.defer_update([update = std::move(update), held, scalars, moments = options_.moments](Stream& stream) {
      Stream* on = &stream;
      stream.launch([update, held, scalars, moments, on] { update_ranges(moments, update, scalars, *on); });
    });
  }
  // The rest in one go (a few launches on CUDA, where one launch per range would be hundreds).
  if (!now.empty()) update_ranges(options_.moments, now, scalars, context().compute_stream());
  release_gradients();
}

void AdamW::flush() {
  if (offloaded_) return offloaded_->flush();
  for (ShardedStorage* s : storages_) s->run_deferred_update(context().compute_stream());
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_of(const ShardedStorage& s) const {
  const std::size_t k = index_of(s);
  if (offloaded_) return offloaded_->state_of(k);  // copies of the host state
  s.run_deferred_update(context().compute_stream());  // the moments as the last step left them
  return {{"master", s.shard()}, {"exp_avg", state_[k].exp_avg}, {"exp_avg_sq", state_[k].exp_avg_sq}};
}

void AdamW::load_state(const ShardedStorage& s, const std::string& name, const std::vector<float>& values) {
  if (!offloaded_) {
    // A deferred update would write over what is loaded: it runs first.
    s.run_deferred_update(context().compute_stream());
    return Optimizer::load_state(s, name, values);
  }
  offloaded_->load_state(index_of(s), name, values);
}

}  // namespace bmt::optim
