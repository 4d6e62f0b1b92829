// AdamW updating each block in the next forward (AdamWOptions::update_in_forward) against the update
// at the step: the same arithmetic on the same values, so every loss, master weight and value must
// be the same bit for bit, with gradient accumulation, clipping, static and dynamic loss scaling
// (one step skipped for a non-finite gradient), the norm read on the host or left to the device,
// and bf16 moments; the blocks' updates are left pending by the step and the parameter outside
// them is not; a checkpoint written with updates pending holds the updated state; each block's
// gradient shard is given back by its update, so a forward ends holding what it holds without the
// option; and the option is refused with offload.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "bmtrain/io/model_checkpoint.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "adamw_trainer.hpp"

namespace {

using namespace adamw_trainer;

// One step of `t`, as Trainer::train, returning the sum of its micro-batches' losses: each forward
// runs at the values the previous step's updates left (for the blocks, updates the forward's gathers
// run when they are deferred). `updated`: whether the step queued an update (a step found
// non-finite on the host queues none).
float train_reading_loss(Trainer& t, int step, bool* updated = nullptr) {
  t.manager.zero_grad();
  float sum = 0.0f;
  for (int m = 0; m < t.config.accumulation; ++m) {
    const bmt::Tensor loss = t.loss(step, m);
    sum += loss.to_host_floats()[0];
    t.manager.backward(loss);
  }
  const bool queued = t.manager.step();
  if (updated) *updated = queued;
  return sum;
}

void expect_equal(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": " << a[i] << " vs " << b[i];
  ASSERT_EQ(bad, 0u) << what;
}

Config in_forward(Config c) {
  c.update_in_forward = true;
  return c;
}

TEST(UpdateInForward, MatchesTheUpdateAtTheStepBitForBit) {
  const std::vector<Config> configs = {
      {1, false, 0.05f, 1024.0f, true, 3},  // clipping, dynamic loss scale, a skipped step
      {2, true, 0.05f, 1024.0f, true, 3},   // the same with accumulation and the norm left to the device
      {2, false, 0.0f, 64.0f, false, -1},   // a static loss scale, no clipping
      {2, true, 0.05f, 1024.0f, true, 3, bmt::DType::bf16},  // bf16 moments
  };
  for (const Config& c : configs) {
    Trainer at_step(false, c), deferred(false, in_forward(c));
    EXPECT_EQ(deferred.adamw.name(), "AdamW (updates in the next forward)" +
                                         std::string(c.moments == bmt::DType::bf16 ? " (bf16 moments)" : ""));
    for (int step = 1; step <= kSteps; ++step) {
      const std::string what = "step " + std::to_string(step) + ", " + describe(c);
      const float expected = train_reading_loss(at_step, step);
      bool updated = false;
      const float loss = train_reading_loss(deferred, step, &updated);
      if (!std::isnan(expected)) ASSERT_EQ(loss, expected) << what;
      // The blocks' updates wait for the next forward; the parameter outside them is updated now.
      for (auto* s : deferred.adamw.storages())
        ASSERT_EQ(s->has_deferred_update(), updated && s->belongs_to_block()) << s->name() << ", " << what;
      deferred.manager.settle();
      at_step.manager.settle();
      ASSERT_EQ(deferred.manager.loss_scale(), at_step.manager.loss_scale()) << what;
      ASSERT_EQ(deferred.manager.skipped_steps(), at_step.manager.skipped_steps()) << what;
      ASSERT_EQ(deferred.adamw.step_count(), at_step.adamw.step_count()) << what;
    }
    // Reading the state or the values runs what is pending.
    expect_equal(deferred.masters(), at_step.masters(), "master weights, " + describe(c));
    expect_equal(deferred.values(), at_step.values(), "values, " + describe(c));
    for (auto* s : deferred.adamw.storages()) EXPECT_FALSE(s->has_deferred_update()) << s->name();
    if (c.nonfinite_step > 0) EXPECT_EQ(deferred.manager.skipped_steps(), 1) << describe(c);
  }
}

TEST(UpdateInForward, ACheckpointWithUpdatesPendingHoldsTheUpdatedState) {
  const Config c{2, true, 0.05f, 1024.0f, true, -1};
  const std::string dir = shared_directory("update_in_forward");
  Trainer at_step(false, c), deferred(false, in_forward(c));
  for (int step = 1; step <= 3; ++step) {
    at_step.train(step);
    deferred.train(step);
  }
  if (bmt::rank() == 0) std::filesystem::create_directories(dir);
  MPI_Barrier(bmt::context().mpi_comm());
  for (auto* s : deferred.adamw.storages()) ASSERT_EQ(s->has_deferred_update(), s->belongs_to_block()) << s->name();
  at_step.manager.settle();
  bmt::save(deferred.model, dir + "/model.safetensors");
  bmt::io::save_optimizer(deferred.adamw, dir + "/optimizer.safetensors");
  Trainer resumed(false, c);
  bmt::load(resumed.model, dir + "/model.safetensors");
  bmt::io::load_optimizer(resumed.adamw, dir + "/optimizer.safetensors");
  resumed.lr.set_step(at_step.lr.current_step());
  resumed.manager.set_loss_scale(at_step.manager.loss_scale());
  resumed.manager.set_clean_steps(at_step.manager.clean_steps());
  for (int step = 4; step <= 5; ++step) {
    const float expected = train_reading_loss(at_step, step);
    ASSERT_EQ(train_reading_loss(resumed, step), expected) << "step " << step;
  }
  expect_equal(resumed.masters(), at_step.masters(), "master weights after resuming");
  MPI_Barrier(bmt::context().mpi_comm());
  if (bmt::rank() == 0) std::filesystem::remove_all(dir);
}

// After a step each block's gradient shard lives on in its pending update; the next forward's
// gathers run them, so with its graph alive the forward holds what the same forward holds after
// an update at the step: no gradient shard.
TEST(UpdateInForward, EachUpdateGivesItsGradientBack) {
  const Config c{1, false, 0.05f, 1.0f, false, -1};
  double after_step[2] = {0, 0}, after_forward[2] = {0, 0}, block_gradients = 0;
  for (bool deferred : {false, true}) {
    bmt::CachingAllocator::instance().release_cached();
    Trainer t(false, deferred ? in_forward(c) : c, false, /*dim=*/20000, /*depth=*/8, /*rows=*/1);
    t.train(1);
    t.train(2);
    after_step[deferred] = static_cast<double>(bmt::memory_stats().allocated_bytes);
    // Pending after a step: every block's gradient shard (f32).
    for (auto* s : t.adamw.storages())
      if (deferred && s->has_deferred_update()) block_gradients += 4.0 * static_cast<double>(s->shard_size());
    const bmt::Tensor loss = t.loss(3, 0);
    after_forward[deferred] = static_cast<double>(bmt::memory_stats().allocated_bytes);
    for (auto* s : t.adamw.storages()) EXPECT_FALSE(s->has_deferred_update()) << s->name();
  }
  EXPECT_GT(block_gradients, 0.0);
  EXPECT_GE(after_step[1] - after_step[0], 0.99 * block_gradients);
  EXPECT_EQ(after_forward[1], after_forward[0]);
}

TEST(UpdateInForward, IsRefusedWithOffload) {
  Model model;
  bmt::init_parameters(model);
  bmt::optim::AdamWOptions o;
  o.offload = true;
  o.update_in_forward = true;
  EXPECT_THROW(
      {
        try {
          bmt::optim::AdamW adamw(model, o);
        } catch (const bmt::Error& e) {
          EXPECT_NE(std::string(e.what()).find("expected update_in_forward only on the device"), std::string::npos)
              << e.what();
          throw;
        }
      },
      bmt::Error);
}

}  // namespace
