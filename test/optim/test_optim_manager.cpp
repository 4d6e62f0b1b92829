// OptimManager: loss scaling and overflow skipping, clipping by the global norm, non-finite
// handling, gradient accumulation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/optim/adamw.hpp"
#include "bmtrain/optim/optim_manager.hpp"
#include "bmtrain/optim/sgd.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"
#include "common/toy_block.hpp"

namespace {

constexpr std::int64_t kD = 23;

struct Model : bmt::DistributedModule {
  bmt::TransformerBlockList<toy::Block> blocks;
  Model() {
    for (int i = 0; i < 3; ++i) blocks.append(kD);
    register_module("blocks", blocks);
  }
  bmt::Tensor loss(const bmt::Tensor& x) { return bmt::autograd::call<toy::SumAll>({blocks(x, 0.5f)})[0]; }
};

bmt::Tensor input(int seed) {
  std::vector<float> x(2 * kD);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.3f * static_cast<float>(i) + static_cast<float>(seed));
  return bmt::Tensor::from_floats(x, {2, kD});
}

std::vector<float> all_values(bmt::Module& m) {
  std::vector<float> out;
  for (auto* s : bmt::sharded_storages(m)) {
    bmt::Tensor full = bmt::Tensor::empty({s->total()}, s->dtype());
    s->all_gather_into(full, bmt::context().shard_comm(), bmt::context().compute_stream());
    for (float v : full.to_host_floats()) out.push_back(v);
  }
  return out;
}

std::vector<float> all_grads(bmt::Module& m) {
  std::vector<float> out;
  for (auto* s : bmt::sharded_storages(m)) {
    s->settle();
    bmt::Tensor full = bmt::Tensor::empty({s->total()}, bmt::DType::f32);
    bmt::context().shard_comm().all_gather(s->grad_shard().data(), full.data(),
                                           static_cast<std::size_t>(s->shard_size()), bmt::DType::f32,
                                           bmt::context().compute_stream());
    for (float v : full.to_host_floats()) out.push_back(v);
  }
  return out;
}

}  // namespace

TEST(OptimManager, AccumulationOfTwoHalvesEqualsTheWhole) {
  Model a, b;
  bmt::init_parameters(a);
  bmt::init_parameters(b);
  bmt::optim::SGD sa(a), sb(b);
  bmt::optim::ConstantLR lr(0.1f, 0);
  bmt::optim::OptimManagerOptions two;
  two.accumulation_steps = 2;
  bmt::optim::OptimManager whole, halves(two);
  whole.add_optimizer(sa, &lr);
  halves.add_optimizer(sb, &lr);
  // whole: loss(x1) + loss(x2) in one backward; halves: each with factor 1/2, times 2 = same.
  whole.zero_grad();
  whole.backward(a.loss(input(1)));
  whole.backward(a.loss(input(2)));
  halves.zero_grad();
  halves.backward(b.loss(input(1)));
  halves.backward(b.loss(input(2)));
  const auto ga = all_grads(a), gb = all_grads(b);
  ASSERT_EQ(ga.size(), gb.size());
  for (std::size_t i = 0; i < ga.size(); ++i) ASSERT_NEAR(gb[i] * 2, ga[i], 1e-5 * (1 + std::fabs(ga[i]))) << i;
}

TEST(OptimManager, ClipsToTheGlobalNorm) {
  Model m;
  bmt::init_parameters(m);
  bmt::optim::SGD sgd(m, {0.0f});
  bmt::optim::ConstantLR lr(1.0f, 0);
  bmt::optim::OptimManagerOptions clip;
  clip.clip_grad_norm = 0.01f;
  bmt::optim::OptimManager manager(clip);
  manager.add_optimizer(sgd, &lr);
  manager.zero_grad();
  manager.backward(m.loss(input(bmt::rank())));
  const auto g = all_grads(m);
  double sq = 0;
  for (float v : g) sq += static_cast<double>(v) * v;
  const auto w0 = all_values(m);
  ASSERT_TRUE(manager.step());
  // The norm over every rank's shards is the float64 one to f32 rounding, at every world size.
  EXPECT_NEAR(manager.last_grad_norm(), std::sqrt(sq), 1e-6 * std::sqrt(sq));
  // With lr 1 and no momentum the update is the clipped gradient: its norm is the clip value.
  const auto w1 = all_values(m);
  double moved = 0;
  for (std::size_t i = 0; i < w0.size(); ++i) moved += (w1[i] - w0[i]) * (w1[i] - w0[i]);
  EXPECT_NEAR(std::sqrt(moved), 0.01, 1e-4);
}

TEST(OptimManager, OverflowSkipsTheStepAndLowersTheScale) {
  Model m;
  bmt::init_parameters(m);
  bmt::optim::SGD sgd(m);
  bmt::optim::ConstantLR lr(1.0f, 0);
  bmt::optim::OptimManagerOptions dynamic;
  dynamic.loss_scale = 1024.0f;
  dynamic.dynamic_loss_scale = true;
  dynamic.scale_window = 2;
  bmt::optim::OptimManager manager(dynamic);
  manager.add_optimizer(sgd, &lr);
  const auto w0 = all_values(m);
  manager.zero_grad();
  // An infinite input on one rank poisons the averaged gradient on every rank.
  bmt::Tensor x = input(0);
  if (bmt::rank() == bmt::world_size() - 1) x = bmt::full({2, kD}, std::numeric_limits<float>::infinity());
  manager.backward(m.loss(x));
  EXPECT_FALSE(manager.step());
  EXPECT_EQ(manager.loss_scale(), 512.0f);
  EXPECT_EQ(all_values(m), w0);
  // Two clean steps raise it again.
  for (int i = 0; i < 2; ++i) {
    manager.zero_grad();
    manager.backward(m.loss(input(i)));
    EXPECT_TRUE(manager.step());
  }
  EXPECT_EQ(manager.loss_scale(), 1024.0f);
  EXPECT_NE(all_values(m), w0);
}

// With defer_norm_read the stop comes at settle(), and the queued update has changed nothing.
TEST(OptimManager, NonFiniteWithoutScalingStopsWhenAsked) {
  for (bool defer : {false, true}) {
    Model m;
    bmt::init_parameters(m);
    bmt::optim::SGD sgd(m);
    bmt::optim::ConstantLR lr(1.0f, 0);
    bmt::optim::OptimManagerOptions stop;
    stop.stop_on_nonfinite = true;
    stop.defer_norm_read = defer;
    bmt::optim::OptimManager manager(stop);
    manager.add_optimizer(sgd, &lr);
    const auto w0 = all_values(m);
    manager.zero_grad();
    manager.backward(m.loss(bmt::full({2, kD}, std::numeric_limits<float>::quiet_NaN())));
    if (defer) {
      EXPECT_TRUE(manager.step());
      EXPECT_THROW(manager.settle(), bmt::Error);
    } else {
      EXPECT_THROW(manager.step(), bmt::Error);
    }
    EXPECT_EQ(all_values(m), w0) << (defer ? "deferred" : "immediate");
  }
}

namespace {

// Runs `steps` training steps on `m` under `options` (dynamic loss scaling, clipping), step
// `poisoned` with an infinite input on the last rank; the optimizer is AdamW or SGD with momentum.
struct TrainingOutcome {
  std::vector<float> values;
  std::int64_t optimizer_steps = 0, scheduler_step = 0, skipped = 0;
  float loss_scale = 0, last_norm = 0;
};

TrainingOutcome train(bool adamw, bool defer, int steps, int poisoned) {
  Model m;
  bmt::init_parameters(m);
  std::unique_ptr<bmt::optim::Optimizer> opt;
  if (adamw)
    opt = std::make_unique<bmt::optim::AdamW>(m);
  else
    opt = std::make_unique<bmt::optim::SGD>(m);
  bmt::optim::LinearLR lr(0.05f, 2, steps);  // a step taken back must take its learning rate back too
  bmt::optim::OptimManagerOptions o;
  o.loss_scale = 1024.0f;
  o.dynamic_loss_scale = true;
  o.scale_window = 2;
  o.clip_grad_norm = 0.05f;
  o.defer_norm_read = defer;
  bmt::optim::OptimManager manager(o);
  manager.add_optimizer(*opt, &lr);
  for (int i = 0; i < steps; ++i) {
    manager.zero_grad();
    bmt::Tensor x = input(i);
    if (i == poisoned && bmt::rank() == bmt::world_size() - 1)
      x = bmt::full({2, kD}, std::numeric_limits<float>::infinity());
    manager.backward(m.loss(x));  // settles the previous deferred step first
    const float scale = manager.loss_scale();
    const bool applied = manager.step();
    if (!defer) EXPECT_EQ(applied, i != poisoned) << i;
    if (defer && i == poisoned) {
      EXPECT_TRUE(applied);  // queued; the outcome is not known yet
      EXPECT_THROW(manager.loss_scale(), bmt::Error);
      EXPECT_FALSE(manager.settle());
      EXPECT_EQ(manager.loss_scale(), scale / 2);
    }
  }
  manager.settle();
  return {all_values(m), opt->step_count(), lr.current_step(), manager.skipped_steps(), manager.loss_scale(),
          manager.last_grad_norm()};
}

}  // namespace

// defer_norm_read: the device decides the skip and the clipping factor and the host settles the
// outcome a step later; parameters, optimizer step counts (AdamW's bias correction), the schedule,
// the loss scale and the norm come out bit for bit as with the host's decision.
TEST(OptimManager, DeferredNormReadTakesTheSameSteps) {
  for (bool adamw : {true, false}) {
    const TrainingOutcome now = train(adamw, false, 6, 2), later = train(adamw, true, 6, 2);
    const char* what = adamw ? "AdamW" : "SGD";
    EXPECT_EQ(later.values, now.values) << what;
    EXPECT_EQ(now.skipped, 1) << what;
    EXPECT_EQ(later.skipped, now.skipped) << what;
    EXPECT_EQ(now.optimizer_steps, 5) << what;
    EXPECT_EQ(later.optimizer_steps, now.optimizer_steps) << what;
    EXPECT_EQ(later.scheduler_step, now.scheduler_step) << what;
    EXPECT_EQ(later.loss_scale, now.loss_scale) << what;
    EXPECT_EQ(later.last_norm, now.last_norm) << what;
  }
}

namespace {

// An optimizer added without a scheduler steps at its options' learning rate: the same steps as
// with a constant schedule at that rate, and a different trajectory at another rate.
std::vector<float> after_two_steps(float options_lr, bmt::optim::LRScheduler* schedule) {
  Model m;
  bmt::init_parameters(m);
  bmt::optim::AdamWOptions options;
  options.lr = options_lr;
  bmt::optim::AdamW adamw(m, options);
  bmt::optim::OptimManager manager;
  manager.add_optimizer(adamw, schedule);
  for (int step = 0; step < 2; ++step) {
    manager.backward(m.loss(input(step)));
    manager.step();
    manager.zero_grad();
    EXPECT_EQ(manager.last_lr(), schedule ? schedule->current_lr() : options_lr);
  }
  return all_values(m);
}

}  // namespace

TEST(OptimManager, WithoutASchedulerTheOptimizersLearningRateApplies) {
  bmt::optim::ConstantLR constant(0.05f, /*warmup_steps=*/0);
  const auto scheduled = after_two_steps(0.001f, &constant);
  const auto own = after_two_steps(0.05f, nullptr);
  const auto other = after_two_steps(0.001f, nullptr);
  ASSERT_EQ(own.size(), scheduled.size());
  for (std::size_t i = 0; i < own.size(); ++i) ASSERT_EQ(own[i], scheduled[i]) << i;
  EXPECT_NE(own, other);
}
