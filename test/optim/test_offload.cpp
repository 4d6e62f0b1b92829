// The offloaded AdamW (AdamWOptions::offload) against AdamW on the device: a block list and a
// parameter outside it trained through OptimManager, with gradient accumulation, clipping, static
// and dynamic loss scaling (one step skipped for a non-finite gradient), the norm read on the host
// or left to the device, must end with the same master weights and values within 1e-6 after every
// step; a run resumed from the other mode's checkpoint continues as the run that wrote it; the
// delayed update computes each gradient at the values one update behind; and the device and host
// bytes a parameter take are what estimate_memory says.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>

#include "bmtrain/io/model_checkpoint.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/ops/elementwise.hpp"
#include "bmtrain/optim/adamw.hpp"
#include "bmtrain/optim/lr_scheduler.hpp"
#include "bmtrain/optim/memory_estimate.hpp"
#include "bmtrain/optim/optim_manager.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"
#include "adamw_trainer.hpp"

namespace {

using namespace adamw_trainer;

TEST(OffloadedAdamW, MatchesAdamWOnTheDevice) {
  const std::vector<Config> configs = {
      {1, false, 0.05f, 1024.0f, true, 3},  // clipping, dynamic loss scale, a skipped step
      {2, true, 0.05f, 1024.0f, true, 3},   // the same with accumulation and the norm left to the device
      {2, false, 0.0f, 64.0f, false, -1},   // a static loss scale, no clipping
      {1, true, 10.0f, 1.0f, false, -1},    // clipping that never applies
      {2, true, 0.05f, 1024.0f, true, 3, bmt::DType::bf16},  // bf16 moments, rounded alike on both sides
  };
  for (const Config& c : configs) {
    Trainer device(false, c), offloaded(true, c);
    expect_near(device.values(), offloaded.values(), "initial values, " + describe(c));
    for (int step = 1; step <= kSteps; ++step) {
      device.train(step);
      offloaded.train(step);
      const std::string what = "step " + std::to_string(step) + ", " + describe(c);
      expect_near(device.masters(), offloaded.masters(), "master weights after " + what);
      expect_near(device.values(), offloaded.values(), "values after " + what);
      device.manager.settle();
      offloaded.manager.settle();
      ASSERT_EQ(device.manager.loss_scale(), offloaded.manager.loss_scale()) << what;
      ASSERT_EQ(device.manager.skipped_steps(), offloaded.manager.skipped_steps()) << what;
      ASSERT_EQ(device.adamw.step_count(), offloaded.adamw.step_count()) << what;
    }
    if (c.nonfinite_step > 0) EXPECT_EQ(offloaded.manager.skipped_steps(), 1) << describe(c);
  }
}

// The host state is prepared after the constructor returns, from the values staged in the moments'
// memory (for f32 values and bf16 moments across both moments' arrays): whenever it is read, the
// master weights are the model's values and the moments zero; an optimizer dropped while it
// prepares stops.
TEST(OffloadedAdamW, HostStatePreparedInTheBackgroundHoldsTheValues) {
  for (bmt::DType dtype : {bmt::DType::f32, bmt::DType::bf16})
    for (bmt::DType moments : {bmt::DType::f32, bmt::DType::bf16}) {
      const std::string what = std::string(bmt::dtype_name(dtype)) + " values, " + bmt::dtype_name(moments) + " moments";
      Model model(dtype, 1001, 4);
      bmt::init_parameters(model);
      bmt::optim::AdamWOptions options;
      options.offload = true;
      options.moments = moments;
      options.beta2 = 0.95f;  // bf16 moments take betas up to 0.99
      options.host_threads = 3;
      { bmt::optim::AdamW dropped(model, options); }
      bmt::optim::AdamW adamw(model, options);
      for (auto* s : adamw.storages()) {  // the last storage is prepared first, the first last
        const auto state = adamw.state_of(*s);
        const auto values = s->values().to_host_floats();
        const auto master = state[0].second.to_host_floats();
        ASSERT_EQ(master.size(), values.size()) << what;
        for (std::size_t j = 0; j < values.size(); ++j) ASSERT_EQ(master[j], values[j]) << what << " " << s->name() << " " << j;
        for (int k : {1, 2}) {
          ASSERT_EQ(state[k].second.dtype(), moments) << what;
          for (float x : state[k].second.to_host_floats()) ASSERT_EQ(x, 0.0f) << what << " " << s->name();
        }
      }
    }
}

TEST(OffloadedAdamW, ResumesFromACheckpointOfTheOtherMode) {
  const Config c{2, true, 0.05f, 1024.0f, true, 2};
  const std::string dir = shared_directory("offload_resume");
  for (bool saved_offloaded : {false, true}) {
    Trainer writer(saved_offloaded, c);
    for (int step = 1; step <= 3; ++step) writer.train(step);
    writer.manager.settle();
    if (bmt::rank() == 0) std::filesystem::create_directories(dir);
    MPI_Barrier(bmt::context().mpi_comm());
    bmt::save(writer.model, dir + "/model.safetensors");
    bmt::io::save_optimizer(writer.adamw, dir + "/optimizer.safetensors");

    Trainer resumed(!saved_offloaded, c);
    bmt::load(resumed.model, dir + "/model.safetensors");
    bmt::io::load_optimizer(resumed.adamw, dir + "/optimizer.safetensors");
    resumed.lr.set_step(writer.lr.current_step());
    resumed.manager.set_loss_scale(writer.manager.loss_scale());
    resumed.manager.set_clean_steps(writer.manager.clean_steps());
    ASSERT_EQ(resumed.adamw.step_count(), writer.adamw.step_count());
    for (int step = 4; step <= 6; ++step) {
      writer.train(step);
      resumed.train(step);
      const std::string what = std::string(saved_offloaded ? "offloaded" : "on-device") + " checkpoint, step " +
                               std::to_string(step);
      expect_near(writer.masters(), resumed.masters(), "master weights, " + what);
      expect_near(writer.values(), resumed.values(), "values, " + what);
    }
    MPI_Barrier(bmt::context().mpi_comm());
  }
  if (bmt::rank() == 0) std::filesystem::remove_all(dir);
}

// The delayed update's definition, built from AdamW on the device: the gradient of step t is taken
// at the values after update t - 2 (the initial values for steps 1 and 2) and applied to the master
// weights after update t - 1.
TEST(OffloadedAdamW, DelayedUpdateTakesEachGradientOneUpdateBehind) {
  const Config c{2, true, 0.05f, 1.0f, false, -1};
  Trainer delayed(true, c, /*delayed=*/true);
  Trainer reference(false, c);
  Trainer stale(false, c);  // where the reference's gradients are taken
  std::vector<std::vector<float>> history{reference.masters()};  // master weights after update t
  auto set_values = [](Trainer& run, const std::vector<float>& values) {
    std::size_t at = 0;
    for (auto* s : run.adamw.storages()) {
      const auto begin = values.begin() + static_cast<std::ptrdiff_t>(at + s->shard_begin());
      bmt::copy_into(s->shard(), bmt::Tensor::from_floats(std::vector<float>(begin, begin + s->shard_size()),
                                                          {s->shard_size()}));
      at += static_cast<std::size_t>(s->total());
    }
  };
  for (int step = 1; step <= kSteps; ++step) {
    delayed.train(step);
    set_values(stale, history[static_cast<std::size_t>(std::max(0, step - 2))]);
    stale.manager.zero_grad();
    for (int m = 0; m < c.accumulation; ++m) stale.manager.backward(stale.loss(step, m));
    stale.adamw.settle();
    reference.manager.zero_grad();
    const auto& from = stale.adamw.storages();
    const auto& to = reference.adamw.storages();
    for (std::size_t k = 0; k < from.size(); ++k) bmt::copy_into(to[k]->grad_shard(), from[k]->grad_shard());
    reference.manager.step();
    history.push_back(reference.masters());
  }
  expect_near(delayed.masters(), history.back(), "master weights after the delayed updates");
  expect_near(delayed.values(), reference.values(), "values after flush()");
}

// The device keeps the values in the parameters' dtype, the host 16 bytes a parameter (12 with bf16
// moments); under
// OptimManager each gradient lives on the device from its reduction to its copy out, so after a step
// none is left and during one a few are.
TEST(OffloadedAdamW, DeviceBytesAreTheValuesAndAFewGradientsInFlight) {
  for (bmt::DType dtype : {bmt::DType::f32, bmt::DType::bf16})
    for (bmt::DType moments : {bmt::DType::f32, bmt::DType::bf16}) {
      const std::string what = std::string(bmt::dtype_name(dtype)) + " values, " + bmt::dtype_name(moments) + " moments";
      // Cached blocks of earlier tests could serve a request with a larger block (best fit).
      bmt::CachingAllocator::instance().release_cached();
      const auto before = bmt::memory_stats().allocated_bytes;
      Model model(dtype, 80000);  // every buffer between 2 KiB and 1 MiB, where the allocator rounds little
      bmt::init_parameters(model);
      bmt::optim::AdamWOptions options;
      options.offload = true;
      options.moments = moments;
      options.beta2 = 0.95f;  // bf16 moments take betas up to 0.99
      bmt::optim::AdamW adamw(model, options);
      bmt::optim::MemoryPlan plan;
      for (auto* s : adamw.storages()) plan.parameters += s->total();  // padding included: it is kept too
      plan.world_size = bmt::context().mesh().shard_size;
      plan.replicas = bmt::context().mesh().replica_count;
      plan.dtype = dtype;
      plan.moments = moments;
      plan.offload = true;
      const auto expected = bmt::optim::estimate_memory(plan);
      const double device = static_cast<double>(bmt::memory_stats().allocated_bytes - before);
      EXPECT_EQ(expected.device_bytes_per_parameter, dtype == bmt::DType::f32 ? 4.0 : 2.0) << what;
      EXPECT_EQ(expected.forward_device_bytes_per_parameter, expected.device_bytes_per_parameter) << what;
      EXPECT_EQ(expected.host_bytes_per_parameter, moments == bmt::DType::f32 ? 16.0 : 12.0) << what;
      EXPECT_NEAR(device, expected.device_state, 0.02 * expected.device_state) << what;
      EXPECT_EQ(static_cast<double>(adamw.host_bytes()), expected.host_state) << what;
    }

  // 32 blocks of one row (activations smaller than gradients): a backward through OptimManager
  // gives every gradient back, and at one rank its peak is below that of the same backward run
  // without it (every gradient shard kept until step()) by most of the shards. (Across ranks a
  // shard is 1/N of a block's gradient while the activations stay whole: they decide the peak.)
  const Config c{1, true, 0.05f, 1.0f, false, -1};
  const std::int64_t dim = 20000;
  const int depth = 32;
  double peaks[2] = {0, 0}, gradient_bytes = 0;
  for (bool manager : {true, false}) {
    bmt::CachingAllocator::instance().release_cached();
    Trainer t(true, c, false, dim, depth, /*rows=*/1);
    t.train(1);  // the gather and gradient rings, and what else a step keeps, are there from now on
    t.adamw.flush();
    const auto resident = bmt::memory_stats().allocated_bytes;
    const bmt::Tensor loss = t.loss(1, 0);
    bmt::CachingAllocator::instance().reset_peak();
    if (manager) {
      t.manager.backward(loss);
      t.manager.step();
      t.adamw.flush();
      // Left: a scalar or two of the step's (each storage's sum of squares, the gradient scale).
      EXPECT_LE(bmt::memory_stats().allocated_bytes, resident + 64 * 1024) << "gradients left on the device";
    } else {
      bmt::autograd::backward({loss});
      t.adamw.step(0.01f, 1.0f);
      t.adamw.flush();
    }
    peaks[manager ? 0 : 1] = static_cast<double>(bmt::memory_stats().peak_allocated_bytes - resident);
    gradient_bytes = 0;
    for (auto* s : t.adamw.storages()) gradient_bytes += 4.0 * static_cast<double>(s->shard_size());
  }
  bmt::print_rank("peak above the values during a step: ", peaks[0], " bytes giving gradients back, ", peaks[1],
                  " keeping them (", gradient_bytes, " bytes of gradient shards)");
  if (bmt::world_size() == 1) EXPECT_GE(peaks[1] - peaks[0], 0.3 * gradient_bytes);
}

}  // namespace
