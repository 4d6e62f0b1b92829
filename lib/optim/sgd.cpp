#include "bmtrain/optim/sgd.hpp"

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/common.hpp"

namespace bmt::optim {

namespace {

using namespace kernels;

struct SGDStep {
  float lr, grad_scale, momentum, weight_decay;
  bool nesterov;
  const float* device_scale;  // when set, the scale is read there (GradScale); negative: no update
};

// The f32 values (the storage holds them in f32: they are the master weights) updated in place.
void sgd_kernel(const Tensor& master, const Tensor& grad, const Tensor& buf, std::int64_t begin, std::int64_t end,
                SGDStep h) {
  auto w = view1<float>(master, "SGD");
  auto g = view1<float>(grad, "SGD");
  auto b = view1<float>(buf, "SGD");
  Kokkos::parallel_for(
      "bmt::sgd", Kokkos::RangePolicy<ExecSpace>(space(), begin, end), KOKKOS_LAMBDA(std::int64_t i) {
        const float scale = h.device_scale ? *h.device_scale : h.grad_scale;
        if (scale < 0.0f) return;  // non-finite gradients: the step is skipped
        const float gi = g(i) * scale;
        const float bi = h.momentum * b(i) + gi;
        b(i) = bi;
        const float d = h.nesterov ? gi + h.momentum * bi : bi;
        w(i) = w(i) * (1.0f - h.lr * h.weight_decay) - h.lr * d;
      });
}

}  // namespace

SGD::SGD(Module& model, SGDOptions options) : Optimizer(model), options_(options) {
  BMT_REQUIRE(options.momentum >= 0, "SGD: expected momentum >= 0, found " << options.momentum);
  plan_ranges(options.weight_decay, options.decay);
  for (auto* s : storages_) {
    s->hold_values_in_f32();  // the shard is the master weights; gathers round them
    momentum_.push_back(Tensor::zeros({s->shard_size()}, DType::f32));
  }
}

void SGD::step(float lr, const GradScale& scale) {
  ++steps_;
  const float* device_scale = scale.device.defined() ? scale.device.data_as<float>() : nullptr;
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    ShardedStorage& s = *storages_[k];
    s.settle();
    for (const auto& r : ranges(k)) {
      const SGDStep h{lr, scale.value, options_.momentum, r.weight_decay, options_.nesterov, device_scale};
      sgd_kernel(s.shard(), s.grad_shard(), momentum_[k], r.begin, r.end, h);
    }
  }
  release_gradients();
}

std::vector<std::pair<std::string, Tensor>> SGD::state_of(const ShardedStorage& s) const {
  const std::size_t k = index_of(s);
  return {{"master", s.shard()}, {"momentum", momentum_[k]}};
}

}  // namespace bmt::optim
