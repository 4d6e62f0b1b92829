#pragma once
// What steps 2 and 3 do with their model: one training step (forward, backward, AdamW through
// OptimManager) on a small regression problem, and a forward after it to see the step's effect.
// Shared so that both programs train exactly alike and their printed numbers can be compared.
#include <bmtrain/bmtrain.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace example {

// The examples' model: a [1024] parameter read as one sequence of 32 positions of 32 features,
// through three blocks of width 32 (MLP 128), called as block(x, 1, 2, 3): batch 1, 2 heads, depth 3.
constexpr std::int64_t kParamSize = 1024;
constexpr std::int64_t kDim = 32;
constexpr std::int64_t kFfn = 128;
constexpr int kBlocks = 3;

// This rank's regression target: a sine whose phase depends on the rank, so that each rank brings
// its own data (as data-parallel ranks do) and the loss is a mean over ranks.
inline bmt::Tensor target_for_rank(std::int64_t n) {
  std::vector<float> t(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = std::sin(0.05f * static_cast<float>(i) + static_cast<float>(bmt::rank()));
  return bmt::Tensor::from_floats(t, {n});
}

// mean((y - target)^2): an f32 scalar, differentiable in y.
inline bmt::Tensor mse(const bmt::Tensor& y, const bmt::Tensor& target) {
  bmt::Tensor d = bmt::sub(bmt::reshape(y, {-1}), target);
  return bmt::mean(bmt::mul(d, d));
}

// The mean of `value` over every rank, on every rank (the host communicator works on host memory).
inline float mean_over_ranks(float value) {
  bmt::Context& ctx = bmt::context();
  ctx.host_comm().all_reduce(&value, &value, 1, bmt::DType::f32, bmt::ReduceOp::avg, ctx.compute_stream());
  ctx.compute_stream().synchronize();
  return value;
}

// A float with enough digits to see that two runs agree.
inline std::string digits(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

struct StepResult {
  float loss = 0;        // before the step, averaged over ranks
  float grad_norm = 0;   // global L2 norm of the gradient (every rank's shards)
  float loss_after = 0;  // after the step, averaged over ranks
};

// `forward` runs the model's forward pass; `model` is what the optimizer updates (its sharded
// parameters, after bmt::init_parameters).
inline StepResult train_one_step(bmt::Module& model, const std::function<bmt::Tensor()>& forward) {
  bmt::optim::AdamW adamw(model);         // fp32 moments, sharded like the parameters
  bmt::optim::ConstantLR lr(1e-2f, /*warmup_steps=*/0);
  bmt::optim::OptimManager manager;       // loss scaling, clipping, inf/nan checks (defaults: off)
  manager.add_optimizer(adamw, &lr);

  const bmt::Tensor target = target_for_rank(kParamSize);
  StepResult r;
  bmt::Tensor loss = mse(forward(), target);
  r.loss = mean_over_ranks(loss.to_host_floats()[0]);
  manager.backward(loss);  // gradients are reduce-scattered into each rank's shard (averaged over ranks)
  manager.step();
  manager.zero_grad();
  r.grad_norm = manager.last_grad_norm();

  bmt::NoGradGuard no_grad;  // evaluation only: no graph, nothing kept for backward
  r.loss_after = mean_over_ranks(mse(forward(), target).to_host_floats()[0]);
  return r;
}

}  // namespace example
