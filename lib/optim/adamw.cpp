#include "bmtrain/optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/math.hpp"
#include "../kernels/adamw_seam.hpp"
#include "offloaded_adamw.hpp"

namespace bmt::optim {

namespace {

using namespace kernels;

struct AdamWStep {
  float lr, grad_scale, beta1, beta2, eps, weight_decay, bias1, bias2;
  const float* device_scale;  // when set, the scale is read there (GradScale); negative: no update
};

// One fused pass over [begin, end) of a shard that holds its values in f32 (the master weights),
// with moments of type M (float, or bf16_t: widened for the update, rounded to nearest even when
// stored; the update reads the unrounded new moments, as the CUDA kernel does).
template <class M>
void adamw_kernel(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v, std::int64_t begin,
                  std::int64_t end, AdamWStep h) {
  auto w = view1<float>(master, "AdamW");
  auto g = view1<float>(grad, "AdamW");
  auto mv = view1<M>(m, "AdamW");
  auto vv = view1<M>(v, "AdamW");
  Kokkos::parallel_for(
      "bmt::adamw", Kokkos::RangePolicy<ExecSpace>(space(), begin, end), KOKKOS_LAMBDA(std::int64_t i) {
        const float scale = h.device_scale ? *h.device_scale : h.grad_scale;
        if (scale < 0.0f) return;  // non-finite gradients: the step is skipped
        const float gi = g(i) * scale;
        const float mi = h.beta1 * to_f32(mv(i)) + (1.0f - h.beta1) * gi;
        const float vi = h.beta2 * to_f32(vv(i)) + (1.0f - h.beta2) * gi * gi;
        mv(i) = from_f32<M>(mi);
        vv(i) = from_f32<M>(vi);
        const float update = (mi / h.bias1) / (kmath::sqrt(vi / h.bias2) + h.eps);
        w(i) = w(i) * (1.0f - h.lr * h.weight_decay) - h.lr * update;
      });
}

}  // namespace

AdamW::AdamW(Module& model, AdamWOptions options) : Optimizer(model), options_(options) {
  BMT_REQUIRE(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
              "AdamW: expected betas in [0, 1), found (" << options.beta1 << ", " << options.beta2 << ")");
  BMT_REQUIRE(options.eps > 0, "AdamW: expected eps > 0, found " << options.eps);
  BMT_REQUIRE(options.offload || !options.delayed_update,
              "AdamW: expected delayed_update only with offload, found it without");
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

void AdamW::flush() {
  if (offloaded_) offloaded_->flush();
}

std::size_t AdamW::host_bytes() const { return offloaded_ ? offloaded_->host_bytes() : 0; }

int AdamW::host_threads() const { return offloaded_ ? offloaded_->threads() : 0; }

void AdamW::step(float lr, const GradScale& scale) {
  ++steps_;
  const float bias1 = 1.0f - std::pow(options_.beta1, static_cast<float>(steps_));
  const float bias2 = 1.0f - std::pow(options_.beta2, static_cast<float>(steps_));
  if (offloaded_) return offloaded_->step(lr, scale, bias1, bias2);
  for (ShardedStorage* s : storages_) s->settle();
  // Every range of every shard goes to the backend's multi-tensor update (a few launches per step
  // on CUDA, where one launch per range would be hundreds); a backend that declines gets the
  // portable per-range kernel. Every shard holds its values in f32: they are the master weights.
  const float* device_scale = scale.device.defined() ? scale.device.data_as<float>() : nullptr;
  const kernels::seam::AdamWScalars scalars{lr,    scale.value, options_.beta1, options_.beta2, options_.eps, bias1, bias2,
                                    device_scale};
  std::vector<kernels::seam::AdamWRange> group;
  const std::size_t ms = dtype_size(options_.moments);
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    ShardedStorage& s = *storages_[k];
    State& st = state_[k];
    float* master = s.shard().data_as<float>();
    const float* grad = s.grad_shard().data_as<float>();
    char* m = static_cast<char*>(st.exp_avg.data());
    char* v = static_cast<char*>(st.exp_avg_sq.data());
    for (const auto& r : ranges(k)) {
      const auto at = static_cast<std::size_t>(r.begin) * ms;
      group.push_back({master + r.begin, grad + r.begin, m + at, v + at, r.end - r.begin, r.weight_decay});
    }
  }
  if (!kernels::seam::adamw_step(options_.moments, group, scalars))
    for (std::size_t k = 0; k < storages_.size(); ++k) step_device(k, lr, scale, bias1, bias2);
  release_gradients();
}

void AdamW::step_device(std::size_t k, float lr, const GradScale& scale, float bias1, float bias2) {
  ShardedStorage& s = *storages_[k];
  State& st = state_[k];
  const float* device_scale = scale.device.defined() ? scale.device.data_as<float>() : nullptr;
  for (const auto& r : ranges(k)) {
    const AdamWStep h{lr,    scale.value, options_.beta1, options_.beta2, options_.eps, r.weight_decay, bias1,
                      bias2, device_scale};
    if (options_.moments == DType::bf16)
      adamw_kernel<bf16_t>(s.shard(), s.grad_shard(), st.exp_avg, st.exp_avg_sq, r.begin, r.end, h);
    else
      adamw_kernel<float>(s.shard(), s.grad_shard(), st.exp_avg, st.exp_avg_sq, r.begin, r.end, h);
  }
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_of(const ShardedStorage& s) const {
  const std::size_t k = index_of(s);
  if (offloaded_) return offloaded_->state_of(k);  // copies of the host state
  return {{"master", s.shard()}, {"exp_avg", state_[k].exp_avg}, {"exp_avg_sq", state_[k].exp_avg_sq}};
}

void AdamW::load_state(const ShardedStorage& s, const std::string& name, const std::vector<float>& values) {
  if (!offloaded_) return Optimizer::load_state(s, name, values);
  offloaded_->load_state(index_of(s), name, values);
}

}  // namespace bmt::optim
