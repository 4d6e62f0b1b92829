#pragma once
// A toy model (a block list and a parameter outside it) trained by AdamW through OptimManager, for
// the tests that hold one way of running AdamW to another (on the device, offloaded, updating in
// the next forward): the run's options, its loss, its master weights and gathered values.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bmtrain/ops/elementwise.hpp"
#include "bmtrain/optim/adamw.hpp"
#include "bmtrain/optim/lr_scheduler.hpp"
#include "bmtrain/optim/optim_manager.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"
#include "common/gathered_parameters.hpp"
#include "common/toy_block.hpp"

namespace adamw_trainer {


constexpr std::int64_t kRows = 3, kDim = 257;
constexpr int kBlocks = 3, kSteps = 6;

struct Model : bmt::DistributedModule {
  bmt::DistributedParameter bias;  // outside the blocks
  bmt::TransformerBlockList<toy::Block> blocks;
  explicit Model(bmt::DType dtype = bmt::DType::f32, std::int64_t dim = kDim, int depth = kBlocks,
                 std::int64_t rows = kRows)
      : bias({rows, dim}, dtype, bmt::init::normal(0.1f)) {
    register_parameter("bias", bias);
    for (int i = 0; i < depth; ++i) blocks.append(dim, dtype);
    register_module("blocks", blocks);
  }
};

inline Model& initialized(Model& m) {
  bmt::init_parameters(m);
  return m;
}

struct Config {
  int accumulation = 1;
  bool defer_norm_read = false;
  float clip = 0.0f;
  float loss_scale = 1.0f;
  bool dynamic = false;
  int nonfinite_step = -1;  // rank 0's first micro-batch gets a NaN input at this step
  bmt::DType moments = bmt::DType::f32;
  bool update_in_forward = false;  // AdamWOptions::update_in_forward
};

inline std::string describe(const Config& c) {
  return "accumulation " + std::to_string(c.accumulation) + ", defer " + std::to_string(c.defer_norm_read) +
         ", clip " + std::to_string(c.clip) + ", loss scale " + std::to_string(c.loss_scale) +
         (c.dynamic ? " dynamic" : "") + ", non-finite at " + std::to_string(c.nonfinite_step) + ", " +
         bmt::dtype_name(c.moments) + " moments" + (c.update_in_forward ? ", updates in the forward" : "");
}

// A model with its optimizer, schedule and manager.
struct Trainer {
  Model model;
  bmt::optim::AdamW adamw;
  bmt::optim::ConstantLR lr{0.02f, 0};
  bmt::optim::OptimManager manager;
  Config config;
  std::int64_t dim_, rows_;

  Trainer(bool offload, const Config& c, bool delayed = false, std::int64_t dim = kDim, int depth = kBlocks,
          std::int64_t rows = kRows)
      : model(bmt::DType::f32, dim, depth, rows), adamw(initialized(model), options(offload, delayed, c)),
        manager(manager_options(c)), config(c), dim_(dim), rows_(rows) {
    manager.add_optimizer(adamw, &lr);
  }
  static bmt::optim::AdamWOptions options(bool offload, bool delayed, const Config& c) {
    bmt::optim::AdamWOptions o;
    o.moments = c.moments;
    o.update_in_forward = c.update_in_forward;
    if (c.moments == bmt::DType::bf16) o.beta2 = 0.95f;  // bf16 moments take betas up to 0.99
    o.weight_decay = 0.1f;
    o.offload = offload;
    o.delayed_update = delayed;
    o.host_threads = 3;  // several parts a storage, whatever the machine
    return o;
  }
  static bmt::optim::OptimManagerOptions manager_options(const Config& c) {
    bmt::optim::OptimManagerOptions o;
    o.accumulation_steps = c.accumulation;
    o.defer_norm_read = c.defer_norm_read;
    o.clip_grad_norm = c.clip;
    o.loss_scale = c.loss_scale;
    o.dynamic_loss_scale = c.dynamic;
    return o;
  }

  bmt::Tensor loss(int step, int micro) {
    const int r = bmt::rank();
    std::vector<float> x(rows_ * dim_), c(rows_ * dim_);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float fi = static_cast<float>(i);
      x[i] = 0.5f * std::sin(0.013f * fi + 0.7f * step + 1.3f * micro + 0.5f * r);
      c[i] = std::cos(0.007f * fi + step + 0.1f * r + 0.3f * micro);
    }
    if (step == config.nonfinite_step && r == 0 && micro == 0) x[5] = std::numeric_limits<float>::quiet_NaN();
    const bmt::Tensor h = bmt::add(bmt::Tensor::from_floats(x, {rows_, dim_}), model.bias.gather());
    const bmt::Tensor y = model.blocks(h, 0.8f);
    return bmt::autograd::call<toy::SumAll>({bmt::mul(y, bmt::Tensor::from_floats(c, {rows_, dim_}))})[0];
  }

  void train(int step) {
    manager.zero_grad();
    for (int m = 0; m < config.accumulation; ++m) manager.backward(loss(step, m));
    manager.step();
  }

  // Every storage's master weights and gathered values, in storage order.
  std::vector<float> masters() {
    std::vector<float> out;
    for (auto* s : adamw.storages()) {
      const auto v = bmt_test::all_gather(adamw.state_of(*s)[0].second);
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  std::vector<float> values() {
    std::vector<float> out;
    for (auto* s : adamw.storages()) {
      bmt::Tensor full = bmt::Tensor::empty({s->total()}, s->dtype());
      s->all_gather_into(full, bmt::context().shard_comm(), bmt::context().compute_stream());
      const auto v = full.to_host_floats();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

inline void expect_near(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= 1e-6f) && bad++ < 5) ADD_FAILURE() << what << " element " << i << ": " << a[i] << " vs " << b[i];
  ASSERT_EQ(bad, 0u) << what;
}

// A directory every rank names the same.
inline std::string shared_directory(const std::string& name) {
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, bmt::context().mpi_comm());
  return ::testing::TempDir() + "bmt_" + name + "_" + std::to_string(pid);
}

}  // namespace adamw_trainer
