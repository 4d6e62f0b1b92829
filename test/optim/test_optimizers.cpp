// AdamW and SGD over sharded storages against a host implementation of the same update, for
// every world size: the gathered parameters after several steps must match.
#include <gtest/gtest.h>

#include <cmath>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/nn/layers.hpp"
#include "bmtrain/optim/adamw.hpp"
#include "bmtrain/optim/sgd.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/half.hpp"
#include "bmtrain/runtime/logging.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/zero/buffer_ring.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"
#include "common/gathered_parameters.hpp"
#include "common/toy_block.hpp"

namespace {

struct Model : bmt::DistributedModule {
  bmt::DistributedParameter matrix;
  bmt::TransformerBlockList<toy::Block> blocks;
  Model(std::int64_t d, int n, bmt::DType dtype = bmt::DType::f32)
      : matrix({3, d}, dtype, bmt::init::normal(0.5f)) {
    register_parameter("matrix", matrix);
    for (int i = 0; i < n; ++i) blocks.append(d, dtype);
    register_module("blocks", blocks);
  }
};

// Gradient of element i (flat index in a storage) for the synthetic gradients used here: a
// function of the index and the step, the same on every rank, so the average is the same too.
float synthetic_grad(std::int64_t i, int step) { return std::sin(0.1f * static_cast<float>(i) + static_cast<float>(step)); }

void set_synthetic_grads(bmt::Module& model, int step) {
  for (auto* s : bmt::sharded_storages(model)) {
    std::vector<float> g(static_cast<std::size_t>(s->total()), 0.0f);
    for (const auto& e : s->entries())
      for (std::int64_t k = 0; k < e.numel; ++k) g[e.offset + k] = synthetic_grad(e.offset + k, step);
    s->zero_grad();
    s->reduce_gradient(bmt::Tensor::from_floats(g, {s->total()}), bmt::context().scatter_comm(),
                       bmt::context().scatter_stream(), bmt::Event());
  }
}

}  // namespace

TEST(AdamW, MatchesHostAdamWOnEveryWorldSize) {
  for (bool offload : {false, true}) {
    Model model(41, 2);
    bmt::init_parameters(model);
    bmt::optim::AdamWOptions opt;
    opt.weight_decay = 0.1f;
    opt.offload = offload;
    bmt::optim::AdamW adamw(model, opt);
    // Host reference state per storage, over the gathered flat buffer.
    struct Ref { std::vector<float> w, m, v; };
    std::vector<Ref> ref;
    for (auto* s : adamw.storages()) {
      const auto w = bmt_test::all_gather(s->shard());
      ref.push_back({w, std::vector<float>(w.size()), std::vector<float>(w.size())});
    }
    const float lr = 0.05f, scale = 0.5f;
    for (int step = 1; step <= 3; ++step) {
      set_synthetic_grads(model, step);
      adamw.step(lr, scale);
      for (std::size_t k = 0; k < ref.size(); ++k) {
        auto* s = adamw.storages()[k];
        for (const auto& e : s->entries()) {
          const float wd = e.parameter.dim() >= 2 ? 0.1f : 0.0f;
          for (std::int64_t j = e.offset; j < e.offset + e.numel; ++j) {
            const float g = synthetic_grad(j, step) * scale;
            auto& r = ref[k];
            r.m[j] = 0.9f * r.m[j] + 0.1f * g;
            r.v[j] = 0.999f * r.v[j] + 0.001f * g * g;
            const float mh = r.m[j] / (1 - std::pow(0.9f, step)), vh = r.v[j] / (1 - std::pow(0.999f, step));
            r.w[j] = r.w[j] * (1 - lr * wd) - lr * mh / (std::sqrt(vh) + 1e-8f);
          }
        }
        const auto got = bmt_test::all_gather(s->shard());
        for (const auto& e : s->entries())
          for (std::int64_t j = e.offset; j < e.offset + e.numel; ++j)
            ASSERT_NEAR(got[j], ref[k].w[j], 1e-5) << e.name << " step " << step << " offload " << offload;
      }
    }
  }
}

// Decay for the blocks' "w" and for "matrix", none for "b": two ranges per block storage.
bool decay_w(const std::string& name, const bmt::Shape&) {
  return name == "matrix" || (name.size() >= 2 && name.compare(name.size() - 2, 2, ".w") == 0);
}

// More ranges than one multi-tensor launch of the CUDA build takes (2 per block x 140 blocks),
// and ranges several 4096-element tiles long whose lengths are not multiples of 4: the f32 master
// of every element must match the host update, and bf16 shards must be the rounded master.
TEST(AdamW, ManyAndLongRangesMatchHostAdamW) {
  for (bmt::DType dtype : {bmt::DType::f32, bmt::DType::bf16}) {
    const std::int64_t d = 4999;
    Model model(d, 140, dtype);
    bmt::init_parameters(model);
    bmt::optim::AdamWOptions opt;
    opt.weight_decay = 0.1f;
    opt.decay = decay_w;
    bmt::optim::AdamW adamw(model, opt);
    std::vector<std::vector<float>> w, m, v;
    for (auto* s : adamw.storages()) {
      w.push_back(bmt_test::all_gather(s->shard()));
      m.emplace_back(w.back().size(), 0.0f);
      v.emplace_back(w.back().size(), 0.0f);
    }
    const float lr = 0.05f, scale = 0.5f;
    for (int step = 1; step <= 2; ++step) {
      set_synthetic_grads(model, step);
      adamw.step(lr, scale);
      for (std::size_t k = 0; k < w.size(); ++k) {
        auto* s = adamw.storages()[k];
        for (const auto& e : s->entries()) {
          const float wd = decay_w(e.name, e.parameter.shape()) ? 0.1f : 0.0f;
          for (std::int64_t j = e.offset; j < e.offset + e.numel; ++j) {
            const float g = synthetic_grad(j, step) * scale;
            m[k][j] = 0.9f * m[k][j] + 0.1f * g;
            v[k][j] = 0.999f * v[k][j] + 0.001f * g * g;
            const float mh = m[k][j] / (1 - std::pow(0.9f, step)), vh = v[k][j] / (1 - std::pow(0.999f, step));
            w[k][j] = w[k][j] * (1 - lr * wd) - lr * mh / (std::sqrt(vh) + 1e-8f);
          }
        }
      }
    }
    for (std::size_t k = 0; k < w.size(); ++k) {
      auto* s = adamw.storages()[k];
      const auto master = bmt_test::all_gather(adamw.state_of(*s)[0].second);
      const auto shard = bmt_test::all_gather(s->values());
      for (const auto& e : s->entries())
        for (std::int64_t j = e.offset; j < e.offset + e.numel; ++j) {
          ASSERT_NEAR(master[j], w[k][j], 1e-5) << e.name << " " << bmt::dtype_name(dtype);
          const float expected =
              dtype == bmt::DType::f32 ? master[j] : bmt::bf16_t::to_float(bmt::bf16_t::from_float(master[j]));
          ASSERT_EQ(shard[j], expected) << e.name;
        }
    }
  }
}

TEST(SGD, MomentumMatchesHostReference) {
  Model model(19, 1);
  bmt::init_parameters(model);
  bmt::optim::SGD sgd(model, {0.8f, true, 0.0f});
  auto* s = sgd.storages().front();
  std::vector<float> w = bmt_test::all_gather(s->shard()), buf(w.size(), 0.0f);
  for (int step = 1; step <= 3; ++step) {
    set_synthetic_grads(model, step);
    sgd.step(0.1f, 1.0f);
    for (const auto& e : s->entries())
      for (std::int64_t j = e.offset; j < e.offset + e.numel; ++j) {
        const float g = synthetic_grad(j, step);
        buf[j] = 0.8f * buf[j] + g;
        w[j] -= 0.1f * (g + 0.8f * buf[j]);
      }
  }
  const auto got = bmt_test::all_gather(s->shard());
  for (const auto& e : s->entries())
    for (std::int64_t j = e.offset; j < e.offset + e.numel; ++j) ASSERT_NEAR(got[j], w[j], 1e-5) << e.name;
}

TEST(AdamW, Bf16ShardIsRoundedFromF32Master) {
  for (bool offload : {false, true}) {
  Model model(33, 1, bmt::DType::bf16);
  bmt::init_parameters(model);
  bmt::optim::AdamWOptions options;
  options.offload = offload;
  bmt::optim::AdamW adamw(model, options);
  set_synthetic_grads(model, 1);
  adamw.step(0.01f, 1.0f);
  for (auto* s : adamw.storages()) {
    if (s->dtype() != bmt::DType::bf16) continue;
    const auto state = adamw.state_of(*s);
    const auto master = state[0].second.to_host_floats();
    const auto shard = s->values().to_host_floats();
    for (std::size_t i = 0; i < shard.size(); ++i)
      ASSERT_EQ(shard[i], bmt::bf16_t::to_float(bmt::bf16_t::from_float(master[i]))) << i << " offload " << offload;
  }
  }
}

// The bytes allocated since it was made, with the rings emptied and the allocator's cache given
// back first (cached blocks of earlier tests could serve a request with a larger block, best fit).
class AllocationBaseline {
 public:
  AllocationBaseline() {
    bmt::gather_ring().clear();
    bmt::gather_staging_ring().clear();
    bmt::gradient_ring().clear();
    bmt::CachingAllocator::instance().release_cached();
    before_ = bmt::memory_stats().allocated_bytes;
  }
  double bytes_now() const {
    bmt::context().compute_stream().synchronize();
    return static_cast<double>(bmt::memory_stats().allocated_bytes - before_);
  }

 private:
  std::size_t before_ = 0;
};

// The state's bytes, measured by the allocator, against bmt::optim::estimate_memory for f32 and
// bf16 parameters and moments: before a backward 12 bytes a parameter / N (8 with bf16 moments: the
// values are held in f32 and are the master weights, and no gradient shard is there yet), after a
// backward the f32 gradient shards and the gather and gradient buffers on top, and after the step
// the gradient shards given back.
TEST(AdamW, ResidentMemoryIsTheEstimate) {
  for (bmt::DType dtype : {bmt::DType::f32, bmt::DType::bf16})
    for (bmt::DType moments : {bmt::DType::f32, bmt::DType::bf16}) {
      const std::string what = std::string(bmt::dtype_name(dtype)) + " values, " + bmt::dtype_name(moments) + " moments";
      const AllocationBaseline baseline;
      const auto bytes_now = [&] { return baseline.bytes_now(); };
      Model model(60000, 4, dtype);
      bmt::init_parameters(model);
      bmt::optim::AdamWOptions options;
      options.moments = moments;
      options.beta2 = 0.95f;  // bf16 moments take betas up to 0.99
      bmt::optim::AdamW adamw(model, options);
      bmt::optim::MemoryPlan plan;
      for (auto& [n, p] : model.named_parameters()) plan.parameters += p.numel();
      plan.largest_block = model.blocks[0].storage().total();
      plan.world_size = bmt::context().mesh().shard_size;
      plan.replicas = bmt::context().mesh().replica_count;
      plan.dtype = dtype;
      plan.moments = moments;
      plan.prefetch = 1;
      const auto expected = bmt::optim::estimate_memory(plan);
      const double moment_bytes = moments == bmt::DType::f32 ? 8.0 : 4.0;
      EXPECT_EQ(expected.forward_device_bytes_per_parameter, 4.0 + moment_bytes) << what;
      EXPECT_EQ(expected.device_bytes_per_parameter, 8.0 + moment_bytes) << what;
      const double state = bytes_now();
      bmt::print_rank(what, ": state ", state / plan.parameters * plan.world_size, " bytes a parameter x N (estimate ",
                      expected.forward_device_bytes_per_parameter, ")");
      EXPECT_NEAR(state, expected.forward_device_state, 0.01 * expected.forward_device_state) << what;

      {
        const bmt::Tensor x = bmt::Tensor::from_floats(std::vector<float>(2 * 60000, 0.5f), {2, 60000});
        bmt::autograd::backward({model.blocks(x, 0.7f)},
                                {bmt::Tensor::from_floats(std::vector<float>(2 * 60000, 1.0f), {2, 60000})});
      }
      adamw.settle();
      for (auto* s : adamw.storages()) s->grad_shard();  // "matrix" is not in this forward: its zeros
      const double total = expected.device_state + expected.device_buffers;
      const double after_backward = bytes_now();
      bmt::print_rank(what, ": after a backward ", after_backward, " bytes (estimate ", total, ")");
      EXPECT_NEAR(after_backward, total, 0.01 * total) << what;

      adamw.step(0.01f, 1.0f);
      const double forward = expected.forward_device_state + expected.device_buffers;
      const double after_step = bytes_now();
      bmt::print_rank(what, ": after the step ", after_step, " bytes (estimate ", forward, ")");
      EXPECT_NEAR(after_step, forward, 0.01 * forward) << what;
      // One rank gathers an f32 block as it is; a bf16 one it rounds into a buffer.
      EXPECT_EQ(expected.device_buffers > 0, bmt::world_size() > 1 || dtype == bmt::DType::bf16) << what;
    }
}

// Blocks of one FP8 linear layer each: their gathers hold the weights' codes, 1 byte an element,
// in the ring's slots and, across ranks, in the staging buffer they are gathered through. The
// allocator's count against the estimate, as above, with the float8 elements in the plan.
struct Fp8LinearBlock : bmt::Module {
  bmt::nn::Linear proj;
  Fp8LinearBlock(std::int64_t d) : proj(d, d, /*with_bias=*/true, bmt::DType::bf16) {
    register_module("proj", proj);
    proj.set_fp8(true);
  }
  bmt::Tensor forward(const bmt::Tensor& x) const { return proj.forward(x); }
};

constexpr std::int64_t kFp8Features = 384;

TEST(AdamW, ResidentMemoryWithFloat8GathersIsTheEstimate) {
  constexpr std::int64_t kD = kFp8Features;
  const AllocationBaseline baseline;
  const auto bytes_now = [&] { return baseline.bytes_now(); };
  struct Fp8Model : bmt::DistributedModule {
    bmt::TransformerBlockList<Fp8LinearBlock> blocks;
    Fp8Model() {
      for (int i = 0; i < 3; ++i) blocks.append(kFp8Features);
      register_module("blocks", blocks);
    }
  } model;
  bmt::init_parameters(model);
  bmt::optim::AdamW adamw(model, {});
  bmt::optim::MemoryPlan plan;
  for (auto& [n, p] : model.named_parameters()) plan.parameters += p.numel();
  plan.largest_block = model.blocks[0].storage().total();
  plan.largest_block_float8 = kD * kD;
  plan.world_size = bmt::context().mesh().shard_size;
  plan.replicas = bmt::context().mesh().replica_count;
  plan.dtype = bmt::DType::bf16;
  plan.prefetch = 1;
  const auto expected = bmt::optim::estimate_memory(plan);
  {
    const bmt::Tensor x = bmt::Tensor::from_floats(std::vector<float>(4 * kD, 0.5f), {4, kD}, bmt::DType::bf16);
    bmt::autograd::backward({model.blocks(x)},
                            {bmt::Tensor::from_floats(std::vector<float>(4 * kD, 1.0f), {4, kD}, bmt::DType::bf16)});
  }
  adamw.settle();
  const double total = expected.device_state + expected.device_buffers;
  const double after_backward = bytes_now();
  bmt::print_rank("FP8 blocks: after a backward ", after_backward, " bytes (estimate ", total, ")");
  EXPECT_NEAR(after_backward, total, 0.01 * total);
  // Without the float8 weights' single bytes the estimate is the larger bf16 one, which the
  // measurement is not.
  plan.largest_block_float8 = 0;
  const auto bf16 = bmt::optim::estimate_memory(plan);
  EXPECT_GT(bf16.device_buffers, expected.device_buffers);
}

// The bytes a parameter of the estimate, written out for every combination (before / N).
TEST(MemoryEstimate, BytesAParameterForEveryCombination) {
  struct Row {
    bmt::DType dtype, moments;
    bool offload, accumulates;
    int world;
    double forward, peak, host;
  };
  using bmt::DType;
  const Row rows[] = {
      {DType::bf16, DType::f32, false, false, 1, 12, 16, 0},  {DType::bf16, DType::bf16, false, false, 1, 8, 12, 0},
      {DType::f32, DType::f32, false, false, 2, 12, 16, 0},   {DType::f32, DType::bf16, false, false, 2, 8, 12, 0},
      {DType::bf16, DType::f32, false, true, 1, 16, 16, 0},   {DType::bf16, DType::bf16, false, true, 1, 12, 12, 0},
      {DType::bf16, DType::f32, false, true, 4, 20, 20, 0},   {DType::bf16, DType::bf16, false, true, 4, 16, 16, 0},
      {DType::bf16, DType::f32, true, false, 4, 2, 2, 16},    {DType::bf16, DType::bf16, true, false, 4, 2, 2, 12},
      {DType::f32, DType::bf16, true, false, 1, 4, 4, 12},    {DType::bf16, DType::bf16, true, true, 1, 6, 6, 12},
      {DType::bf16, DType::f32, true, true, 4, 10, 10, 16},   {DType::f16, DType::bf16, true, true, 4, 10, 10, 12},
  };
  for (const Row& r : rows) {
    bmt::optim::MemoryPlan plan;
    plan.parameters = 1000;
    plan.world_size = r.world;
    plan.dtype = r.dtype;
    plan.moments = r.moments;
    plan.offload = r.offload;
    plan.accumulates = r.accumulates;
    const auto e = bmt::optim::estimate_memory(plan);
    const std::string what = std::string(bmt::dtype_name(r.dtype)) + " values, " + bmt::dtype_name(r.moments) +
                             " moments, offload " + std::to_string(r.offload) + ", accumulates " +
                             std::to_string(r.accumulates) + ", " + std::to_string(r.world) + " ranks";
    EXPECT_EQ(e.forward_device_bytes_per_parameter, r.forward) << what;
    EXPECT_EQ(e.device_bytes_per_parameter, r.peak) << what;
    EXPECT_EQ(e.host_bytes_per_parameter, r.host) << what;
    EXPECT_EQ(e.forward_device_state, r.forward * 1000 / r.world) << what;
    EXPECT_EQ(e.device_state, r.peak * 1000 / r.world) << what;
  }
  bmt::optim::MemoryPlan f16_moments;
  f16_moments.moments = DType::f16;
  EXPECT_THROW(bmt::optim::estimate_memory(f16_moments), bmt::Error);
}
