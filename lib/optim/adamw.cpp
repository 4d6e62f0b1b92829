#include "bmtrain/optim/adamw.hpp"

#include <cmath>
#include <cstring>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/math.hpp"
#include "bmtrain/runtime/half.hpp"
#include "bmtrain/tensor/memory.hpp"
#include "adamw_fused.hpp"

namespace bmt::optim {

namespace {

using namespace kernels;

struct AdamWStep {
  float lr, grad_scale, beta1, beta2, eps, weight_decay, bias1, bias2;
  const float* device_scale;  // when set, the scale is read there (GradScale); negative: no update
};

// One fused pass over [begin, end) of a shard that holds its values in f32 (the master weights).
void adamw_kernel(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v, std::int64_t begin,
                  std::int64_t end, AdamWStep h) {
  auto w = view1<float>(master, "AdamW");
  auto g = view1<float>(grad, "AdamW");
  auto mv = view1<float>(m, "AdamW");
  auto vv = view1<float>(v, "AdamW");
  Kokkos::parallel_for(
      "bmt::adamw", Kokkos::RangePolicy<ExecSpace>(space(), begin, end), KOKKOS_LAMBDA(std::int64_t i) {
        const float scale = h.device_scale ? *h.device_scale : h.grad_scale;
        if (scale < 0.0f) return;  // non-finite gradients: the step is skipped
        const float gi = g(i) * scale;
        const float mi = h.beta1 * mv(i) + (1.0f - h.beta1) * gi;
        const float vi = h.beta2 * vv(i) + (1.0f - h.beta2) * gi * gi;
        mv(i) = mi;
        vv(i) = vi;
        const float update = (mi / h.bias1) / (kmath::sqrt(vi / h.bias2) + h.eps);
        w(i) = w(i) * (1.0f - h.lr * h.weight_decay) - h.lr * update;
      });
}

}  // namespace

AdamW::AdamW(Module& model, AdamWOptions options) : Optimizer(model), options_(options) {
  BMT_REQUIRE(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
              "AdamW: expected betas in [0, 1), found (" << options.beta1 << ", " << options.beta2 << ")");
  BMT_REQUIRE(options.eps > 0, "AdamW: expected eps > 0, found " << options.eps);
  plan_ranges(options.weight_decay, options.decay);
  state_.resize(storages_.size());
  if (options_.offload) copy_stream_ = std::make_unique<Stream>(Stream::Kind::communication, "optimizer copies");
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    ShardedStorage& s = *storages_[k];
    State& st = state_[k];
    const std::int64_t n = s.shard_size();
    if (options_.offload) {
      st.host_master = s.shard().to_host_floats();
      st.host_m.assign(static_cast<std::size_t>(n), 0.0f);
      st.host_v.assign(static_cast<std::size_t>(n), 0.0f);
      st.grad_stage = std::make_unique<memory::PinnedBuffer>(static_cast<std::size_t>(n) * sizeof(float));
      st.param_stage = std::make_unique<memory::PinnedBuffer>(s.shard().nbytes());
      continue;
    }
    s.hold_values_in_f32();  // the shard is the master weights; gathers round them
    st.exp_avg = Tensor::zeros({n}, DType::f32);
    st.exp_avg_sq = Tensor::zeros({n}, DType::f32);
  }
}

void AdamW::step(float lr, const GradScale& scale) {
  ++steps_;
  const float bias1 = 1.0f - std::pow(options_.beta1, static_cast<float>(steps_));
  const float bias2 = 1.0f - std::pow(options_.beta2, static_cast<float>(steps_));
  if (options_.offload) {
    // The host update needs the scale on the host: a device scale is read here (a wait).
    const float value = scale.device.defined() ? scale.device.to_host_floats()[0] : scale.value;
    if (value < 0.0f) return;
    return step_offloaded(lr, value, bias1, bias2);
  }
  for (ShardedStorage* s : storages_) s->settle();
  // Every range of every shard goes to the backend's multi-tensor update (a few launches per step
  // on CUDA, where one launch per range would be hundreds); a backend that declines gets the
  // portable per-range kernel. Every shard holds its values in f32: they are the master weights.
  const float* device_scale = scale.device.defined() ? scale.device.data_as<float>() : nullptr;
  const fused::AdamWScalars scalars{lr,    scale.value, options_.beta1, options_.beta2, options_.eps, bias1, bias2,
                                    device_scale};
  std::vector<fused::AdamWRange> group;
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    ShardedStorage& s = *storages_[k];
    State& st = state_[k];
    float* master = s.shard().data_as<float>();
    for (const auto& r : ranges(k))
      group.push_back({master + r.begin, master + r.begin, s.grad_shard().data_as<float>() + r.begin,
                       st.exp_avg.data_as<float>() + r.begin, st.exp_avg_sq.data_as<float>() + r.begin,
                       r.end - r.begin, r.weight_decay});
  }
  if (fused::adamw_step(DType::f32, group, scalars)) return;
  for (std::size_t k = 0; k < storages_.size(); ++k) step_device(k, lr, scale, bias1, bias2);
}

void AdamW::step_offloaded(float lr, float grad_scale, float bias1, float bias2) {
  Stream& compute = context().compute_stream();
  Stream& copies = *copy_stream_;
  std::vector<Event> fetched(storages_.size());
  auto fetch = [&](std::size_t k) {
    storages_[k]->settle();
    copies.wait(compute.record());  // the gradient shard is complete on the compute stream
    memory::copy_to_host_async(state_[k].grad_stage->data(), storages_[k]->grad_shard().data(),
                               state_[k].grad_stage->bytes(), copies);
    fetched[k] = copies.record();
  };
  if (!storages_.empty()) fetch(0);
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    if (k + 1 < storages_.size()) fetch(k + 1);
    fetched[k].synchronize();
    update_on_host(k, lr, grad_scale, bias1, bias2);
    memory::copy_from_host_async(storages_[k]->shard().data(), state_[k].param_stage->data(),
                                 state_[k].param_stage->bytes(), copies);
  }
  // Gathers of the next step read the shards: order them after the copies.
  compute.wait(copies.record());
}

void AdamW::step_device(std::size_t k, float lr, const GradScale& scale, float bias1, float bias2) {
  ShardedStorage& s = *storages_[k];
  State& st = state_[k];
  const float* device_scale = scale.device.defined() ? scale.device.data_as<float>() : nullptr;
  for (const auto& r : ranges(k)) {
    const AdamWStep h{lr,    scale.value, options_.beta1, options_.beta2, options_.eps, r.weight_decay, bias1,
                      bias2, device_scale};
    adamw_kernel(s.shard(), s.grad_shard(), st.exp_avg, st.exp_avg_sq, r.begin, r.end, h);
  }
}

void AdamW::update_on_host(std::size_t k, float lr, float grad_scale, float bias1, float bias2) {
  ShardedStorage& s = *storages_[k];
  State& st = state_[k];
  const auto* grad = static_cast<const float*>(st.grad_stage->data());
  for (const auto& r : ranges(k)) {
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      const float gi = grad[i] * grad_scale;
      const float mi = options_.beta1 * st.host_m[i] + (1.0f - options_.beta1) * gi;
      const float vi = options_.beta2 * st.host_v[i] + (1.0f - options_.beta2) * gi * gi;
      st.host_m[i] = mi;
      st.host_v[i] = vi;
      const float update = (mi / bias1) / (std::sqrt(vi / bias2) + options_.eps);
      st.host_master[i] = st.host_master[i] * (1.0f - lr * r.weight_decay) - lr * update;
    }
  }
  // The compute-dtype shard, rounded on the host, goes back in the staging buffer.
  void* out = st.param_stage->data();
  const std::size_t n = st.host_master.size();
  switch (s.dtype()) {
    case DType::f32: std::memcpy(out, st.host_master.data(), n * sizeof(float)); break;
    case DType::bf16:
      for (std::size_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(out)[i] = bf16_t::from_float(st.host_master[i]);
      break;
    case DType::f16:
      for (std::size_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(out)[i] = f16_t::from_float(st.host_master[i]);
      break;
    default: BMT_REQUIRE(false, "AdamW: expected floating parameters, found " << dtype_name(s.dtype()));
  }
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_of(const ShardedStorage& s) const {
  const State& st = state_[index_of(s)];
  if (options_.offload) {  // copies of the host state
    const Shape shape{s.shard_size()};
    return {{"master", Tensor::from_floats(st.host_master, shape)},
            {"exp_avg", Tensor::from_floats(st.host_m, shape)},
            {"exp_avg_sq", Tensor::from_floats(st.host_v, shape)}};
  }
  return {{"master", s.shard()}, {"exp_avg", st.exp_avg}, {"exp_avg_sq", st.exp_avg_sq}};
}

void AdamW::load_state(const ShardedStorage& s, const std::string& name, const std::vector<float>& values) {
  if (!options_.offload) return Optimizer::load_state(s, name, values);
  State& st = state_[index_of(s)];
  BMT_REQUIRE(values.size() == static_cast<std::size_t>(s.shard_size()),
              "AdamW::load_state: expected " << s.shard_size() << " values, found " << values.size());
  std::vector<float>* target = name == "master" ? &st.host_master : name == "exp_avg" ? &st.host_m
                             : name == "exp_avg_sq" ? &st.host_v : nullptr;
  BMT_REQUIRE(target, "AdamW::load_state: unknown state '" << name << "': expected master, exp_avg or exp_avg_sq");
  *target = values;
  if (name == "master") copy_into(s.shard(), Tensor::from_floats(values, s.shard().shape(), DType::f32));
}

}  // namespace bmt::optim
