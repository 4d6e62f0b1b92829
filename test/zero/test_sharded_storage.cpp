#include <gtest/gtest.h>

#include <cmath>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/nn/module.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/inspect.hpp"
#include "bmtrain/zero/sharded_storage.hpp"

namespace {

// A storage placed on this rank as init_parameters places it: sharded over the mesh's shard group,
// replicated over its replica group.
bmt::ShardedStorage placed(const std::vector<std::pair<std::string, bmt::Tensor>>& parameters, std::uint64_t seed) {
  const bmt::Mesh& m = bmt::context().mesh();
  return bmt::ShardedStorage("s", parameters, m.shard_rank, m.shard_size, seed, m.replica_count, m.replica_rank);
}

// Gathered values of a storage (every rank gets the whole flat buffer).
std::vector<float> gathered(bmt::ShardedStorage& s) {
  bmt::Tensor full = bmt::Tensor::empty({s.total()}, s.dtype());
  s.all_gather_into(full, bmt::context().shard_comm(), bmt::context().compute_stream());
  bmt::context().compute_stream().synchronize();
  return full.to_host_floats();
}

}  // namespace

TEST(ShardedStorage, LayoutIsAlignedPaddedAndEven) {
  bmt::DistributedParameter a({3, 5}), b({7}), c({1});
  bmt::ShardedStorage s = placed({{"a", a}, {"b", b}, {"c", c}}, 1);
  const int n = bmt::context().mesh().shard_size;
  EXPECT_EQ(s.total() % n, 0);
  EXPECT_EQ(s.shard_size() * n, s.total());
  EXPECT_EQ(s.parameter_count(), 15 + 7 + 1);
  for (const auto& e : s.entries()) EXPECT_EQ(e.offset * 4 % 256, 0) << e.name;
  EXPECT_EQ(s.shard().numel(), s.shard_size());
}

TEST(ShardedStorage, InitializationDoesNotDependOnWorldSize) {
  // Values are a pure function of (seed, name, index): compare the gathered buffer with a
  // single-rank storage built on every rank.
  bmt::DistributedParameter a({33, 17}, bmt::DType::f32, bmt::init::normal(0.5f)),
      b({101}, bmt::DType::f32, bmt::init::uniform(-2.0f, 3.0f)), c({5}, bmt::DType::f32, bmt::init::ones());
  bmt::ShardedStorage s = placed({{"x.a", a}, {"x.b", b}, {"x.c", c}}, 7);
  bmt::DistributedParameter a1({33, 17}, bmt::DType::f32, bmt::init::normal(0.5f)),
      b1({101}, bmt::DType::f32, bmt::init::uniform(-2.0f, 3.0f)), c1({5}, bmt::DType::f32, bmt::init::ones());
  bmt::ShardedStorage one("one", {{"x.a", a1}, {"x.b", b1}, {"x.c", c1}}, 0, 1, 7);
  const auto all = gathered(s);
  const auto ref = one.shard().to_host_floats();
  for (const auto& e : s.entries())
    for (std::int64_t i = 0; i < e.numel; ++i) ASSERT_EQ(all[e.offset + i], ref[e.offset + i]) << e.name << "[" << i << "]";
  // The distributions are what was asked for (loose statistical bounds).
  double mean = 0, sq = 0;
  for (std::int64_t i = 0; i < 33 * 17; ++i) {
    mean += ref[i];
    sq += ref[i] * ref[i];
  }
  mean /= 33 * 17;
  const double std = std::sqrt(sq / (33 * 17) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.08);
  EXPECT_NEAR(std, 0.5, 0.05);
  for (std::int64_t i = 0; i < 101; ++i) {
    EXPECT_GE(ref[s.entries()[1].offset + i], -2.0f);
    EXPECT_LT(ref[s.entries()[1].offset + i], 3.0f);
  }
  EXPECT_EQ(ref[s.entries()[2].offset + 4], 1.0f);
}

TEST(ShardedStorage, ReduceGradientAveragesAndAccumulates) {
  bmt::DistributedParameter a({10}), b({6});
  bmt::ShardedStorage s = placed({{"a", a}, {"b", b}}, 1);
  auto& ctx = bmt::context();
  const int n = bmt::world_size();
  // Rank r contributes (r + 1) * (i + 1) at flat index i: the average over every rank is
  // (n + 1) / 2 * (i + 1), under node sharding too (the shard group's average, then the replicas').
  std::vector<float> g(static_cast<std::size_t>(s.total()));
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((bmt::rank() + 1) * (i + 1));
  bmt::Tensor full = bmt::Tensor::from_floats(g, {s.total()});
  s.zero_grad();
  s.reduce_gradient(full, ctx.scatter_comm(), ctx.scatter_stream(), bmt::Event());
  s.reduce_gradient(full, ctx.scatter_comm(), ctx.scatter_stream(), bmt::Event());  // accumulates
  s.settle();
  const auto shard = s.grad_shard().to_host_floats();
  for (std::int64_t k = 0; k < s.shard_size(); ++k) {
    const double i = static_cast<double>(s.shard_begin() + k);
    EXPECT_NEAR(shard[k], 2.0 * (n + 1) / 2.0 * (i + 1), 1e-3 * (i + 1)) << k;
  }
  s.zero_grad();
  for (float v : s.grad_shard().to_host_floats()) EXPECT_EQ(v, 0.0f);
}

// Gradient buffers bound as holding no values (bind_grads: a ring slot, here full of NaN where
// the parameters lie, as a previous block leaves it): a gradient is written over its part, and
// unbind_grads zeroes the parts no gradient reached, so the buffer can be reduced as it is.
TEST(ShardedStorage, UnreachedPartsOfALentBufferAreZeroedAtUnbind) {
  bmt::DistributedParameter a({10}), b({6});
  bmt::ShardedStorage s = placed({{"a", a}, {"b", b}}, 1);
  std::vector<float> init(static_cast<std::size_t>(s.total()), 0.0f);
  for (const auto& e : s.entries())
    for (std::int64_t k = 0; k < e.numel; ++k) init[e.offset + k] = std::nanf("");
  bmt::Tensor buffer = bmt::Tensor::from_floats(init, {s.total()});
  bmt::Tensor values = bmt::Tensor::empty({s.total()});
  s.all_gather_into(values, bmt::context().shard_comm(), bmt::context().compute_stream());
  s.bind(values);
  s.bind_grads(buffer);
  bmt::mul(a, bmt::full({10}, 3.0f)).backward(bmt::full({10}, 2.0f));  // b gets no gradient
  s.unbind_grads();
  s.unbind();
  const auto got = buffer.to_host_floats();
  for (std::int64_t i = 0; i < s.total(); ++i) {
    const auto& ea = s.entries()[0];
    const bool in_a = i >= ea.offset && i < ea.offset + ea.numel;
    EXPECT_EQ(got[i], in_a ? 6.0f : 0.0f) << i;
  }
}

// One rank: zero_grad writes no zeros; the next backward writes its gradients over the shard's
// parts, and the parts no gradient reached read as zeros.
TEST(ShardedStorage, OneRankGradientShardIsWrittenOverAfterZeroGrad) {
  if (bmt::world_size() != 1) GTEST_SKIP() << "one rank";
  bmt::DistributedParameter a({10}), b({6});
  bmt::ShardedStorage s("s", {{"a", a}, {"b", b}}, 0, 1, 1);
  s.bind(s.shard());
  auto step = [&](float da, bool with_b) {
    s.zero_grad();
    s.bind_own_grads();
    bmt::Tensor y = bmt::mul(a, bmt::full({10}, da));
    if (with_b) y = bmt::add(y, bmt::reshape(bmt::sum(b), {1}));
    y.backward(bmt::full({10}, 1.0f));
    s.unbind_grads();
    return s.grad_shard().to_host_floats();
  };
  const auto first = step(5.0f, true);
  EXPECT_EQ(first[s.entries()[1].offset], 10.0f) << "b's gradient in the first step";
  const auto got = step(3.0f, false);  // not 5 + 3 for a, not 10 for b
  const auto& ea = s.entries()[0];
  const auto& eb = s.entries()[1];
  for (std::int64_t k = 0; k < ea.numel; ++k) EXPECT_EQ(got[ea.offset + k], 3.0f) << k;
  for (std::int64_t k = 0; k < eb.numel; ++k) EXPECT_EQ(got[eb.offset + k], 0.0f) << k;
}

TEST(ShardedStorage, MixedDtypesAreRejected) {
  bmt::DistributedParameter a({4}, bmt::DType::f32), b({4}, bmt::DType::bf16);
  try {
    bmt::ShardedStorage s("blk", {{"a", a}, {"b", b}}, bmt::rank(), bmt::world_size(), 1);
    FAIL() << "expected an error";
  } catch (const bmt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected every parameter in dtype f32, found 'b' in bf16"), std::string::npos)
        << e.what();
  }
}

TEST(Inspect, StatisticsMatchTheGatheredValues) {
  struct Two : bmt::DistributedModule {
    bmt::DistributedParameter a{{7, 3}, bmt::DType::f32, bmt::init::from_function([](std::int64_t i) { return 0.5f * i; })};
    bmt::DistributedParameter b{{5}, bmt::DType::f32, bmt::init::constant(2.0f)};
    Two() {
      register_parameter("a", a);
      register_parameter("b", b);
    }
  } model;
  bmt::init_parameters(model);
  const std::string table = bmt::inspect(model);
  // a = 0, 0.5, ..., 10: min 0, max 10, mean 5, std sqrt((0.5^2) (21^2 - 1) / 12) = 3.0277.
  EXPECT_NE(table.find("a                                        [7, 3]                    0         10          5      3.028"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("b                                        [5]                       2          2          2          0"),
            std::string::npos)
      << table;
  const float mean = bmt::sum_loss(bmt::Tensor::from_floats({static_cast<float>(bmt::rank())}, {1}));
  EXPECT_FLOAT_EQ(mean, (bmt::world_size() - 1) / 2.0f);
}
