// CheckpointBlock, TransformerBlockList and DistributedModule against a host reference: forward
// values and parameter gradients for every world size, prefetch depth, zero level and checkpoint
// mode. Each rank feeds different data, so the gradients also check the average over ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "bmtrain/autograd/kept_outputs.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"
#include "common/gathered_parameters.hpp"
#include "common/toy_block.hpp"

namespace {

constexpr std::int64_t kD = 37;    // odd: storages need padding
constexpr std::int64_t kRows = 3;
constexpr float kAlpha = 0.7f;

struct Model : bmt::DistributedModule {
  bmt::DistributedParameter scale{{kD}, bmt::DType::f32, bmt::init::normal(1.0f, 0.2f)};
  bmt::TransformerBlockList<toy::Block> blocks;
  std::vector<std::unique_ptr<bmt::CheckpointBlock<toy::Block>>> loose;  // same blocks, called one by one
  bool use_list = true;

  Model(int n, int depth, bmt::CheckpointOptions opt, bool list) : blocks(depth), use_list(list) {
    register_parameter("scale", scale);
    if (list) {
      for (int i = 0; i < n; ++i) blocks.append(opt, kD);
      register_module("blocks", blocks);
    } else {
      for (int i = 0; i < n; ++i) {
        loose.push_back(std::make_unique<bmt::CheckpointBlock<toy::Block>>(opt, kD));
        register_module("block" + std::to_string(i), *loose.back());
      }
    }
  }
  bmt::Tensor forward(const bmt::Tensor& x) {
    bmt::Tensor h = bmt::autograd::call<toy::TanhAffine>({x, scale.gather(), bmt::Tensor::zeros({kD})}, 1.0f)[0];
    if (use_list) return blocks(h, kAlpha);
    for (auto& b : loose) h = (*b)(h, kAlpha);
    return h;
  }
};

using bmt_test::all_gather;
using bmt_test::gathered;

// Each rank's input: different on every rank.
std::vector<float> input_of(int rank) {
  std::vector<float> x(kRows * kD);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(rank));
  return x;
}

using Config = std::tuple<int /*depth*/, int /*zero level*/, bool /*checkpoint*/, bool /*list*/>;

class BlockSchedules : public ::testing::TestWithParam<Config> {};

TEST_P(BlockSchedules, MatchHostReference) {
  const auto [depth, level, checkpoint, list] = GetParam();
  constexpr int kBlocks = 4;
  Model model(kBlocks, depth, {checkpoint, level}, list);
  bmt::init_parameters(model);
  for (auto* s : bmt::sharded_storages(model)) s->zero_grad();

  bmt::Tensor x = bmt::Tensor::from_floats(input_of(bmt::rank()), {kRows, kD});
  bmt::Tensor y = model.forward(x);
  const auto y_host = y.to_host_floats();
  std::vector<float> gy(y_host.size());
  for (std::size_t i = 0; i < gy.size(); ++i) gy[i] = std::cos(0.11f * static_cast<float>(i));
  y.backward(bmt::Tensor::from_floats(gy, y.shape()));

  auto params = gathered(model);
  const std::string prefix = list ? "blocks." : "block";
  toy::Reference ref;
  ref.alpha = kAlpha;
  for (int k = 0; k < kBlocks; ++k) {
    const std::string p = list ? prefix + std::to_string(k) + "." : prefix + std::to_string(k) + ".";
    ASSERT_TRUE(params.count(p + "w")) << "missing " << p + "w";
    ref.w.push_back(params[p + "w"].first);
    ref.b.push_back(params[p + "b"].first);
  }
  const auto& scale = params["scale"].first;
  // Reference on every rank's data; gradients are averaged over ranks.
  std::vector<std::vector<float>> gw(kBlocks, std::vector<float>(kD, 0.0f)), gb = gw;
  std::vector<float> gscale(kD, 0.0f);
  const int n = bmt::world_size();
  for (int r = 0; r < n; ++r) {
    const auto x0 = input_of(r);
    std::vector<float> h(x0.size());
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = std::tanh(x0[i] * scale[i % kD]);
    if (r == bmt::rank()) {
      const auto expect = ref.forward(h);
      for (std::size_t i = 0; i < expect.size(); ++i) ASSERT_NEAR(y_host[i], expect[i], 1e-5) << i;
    }
    const auto gh = ref.backward(h, gy, gw, gb);
    for (std::size_t i = 0; i < h.size(); ++i) gscale[i % kD] += gh[i] * (1 - h[i] * h[i]) * x0[i];
  }
  auto near = [&](const std::vector<float>& got, const std::vector<float>& sum, const std::string& what) {
    ASSERT_EQ(got.size(), sum.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], sum[i] / n, 1e-4 * (1 + std::fabs(sum[i] / n))) << what << "[" << i << "]";
  };
  for (int k = 0; k < kBlocks; ++k) {
    const std::string p = prefix + std::to_string(k) + ".";
    near(params[p + "w"].second, gw[k], p + "w.grad");
    near(params[p + "b"].second, gb[k], p + "b.grad");
  }
  near(params["scale"].second, gscale, "scale.grad");
}

INSTANTIATE_TEST_SUITE_P(
    Zero, BlockSchedules,
    ::testing::Values(Config{0, 3, true, true}, Config{1, 3, true, true}, Config{2, 3, true, true},
                      Config{1, 2, true, true}, Config{1, 3, false, true}, Config{0, 3, true, false},
                      Config{0, 2, false, false}));

TEST(CheckpointBlock, GradientsAccumulateOverCalls) {
  Model model(2, 1, {}, true);
  bmt::init_parameters(model);
  bmt::Tensor x = bmt::Tensor::from_floats(input_of(bmt::rank()), {kRows, kD});
  auto run = [&] {
    bmt::Tensor y = model.forward(x);
    y.backward(bmt::ones(y.shape()));
  };
  for (auto* s : bmt::sharded_storages(model)) s->zero_grad();
  run();
  const auto once = gathered(model);
  for (auto* s : bmt::sharded_storages(model)) s->zero_grad();
  run();
  run();
  const auto twice = gathered(model);
  for (const auto& [name, vg] : once)
    for (std::size_t i = 0; i < vg.second.size(); ++i)
      ASSERT_NEAR(twice.at(name).second[i], 2 * vg.second[i], 1e-5 * (1 + std::fabs(vg.second[i]))) << name;
}

// One rank has nothing to gather: a parameter outside blocks is its shard, and its gradient lands
// in the gradient shard; more ranks gather into a buffer of their own.
TEST(DistributedParameterGather, OneRankUsesTheShardItself) {
  Model model(1, 0, {}, true);
  bmt::init_parameters(model);
  bmt::ShardedStorage* storage = nullptr;
  for (auto* s : bmt::sharded_storages(model))
    if (s->entries().front().name == "scale") storage = s;
  ASSERT_NE(storage, nullptr);
  storage->zero_grad();
  const bmt::Tensor value = model.scale.gather();
  EXPECT_EQ(value.data() == storage->shard().data(), bmt::context().mesh().shard_size == 1);
  bmt::sum(bmt::mul(value, bmt::Tensor::from_floats(std::vector<float>(kD, 2.0f), {kD}))).backward();
  storage->settle();
  const auto g = all_gather(storage->grad_shard());
  for (int i = 0; i < kD; ++i) ASSERT_EQ(g[i], 2.0f) << "d(sum(2 scale))/d scale[" << i << "]";
}

TEST(CheckpointBlock, NoGradForwardKeepsNothing) {
  Model model(3, 1, {}, true);
  bmt::init_parameters(model);
  bmt::Tensor x = bmt::Tensor::from_floats(input_of(bmt::rank()), {kRows, kD});
  { bmt::NoGradGuard g; model.forward(x); }  // warm-up: rings and caches
  const auto before = bmt::memory_stats().allocated_bytes;
  bmt::Tensor y;
  {
    bmt::NoGradGuard g;
    y = model.forward(x);
  }
  EXPECT_FALSE(y.requires_grad());
  y = bmt::Tensor();
  EXPECT_EQ(bmt::memory_stats().allocated_bytes, before);
}

TEST(CheckpointBlock, StepAllocatesNothingFromTheSystemAfterWarmUp) {
  Model model(4, 2, {}, true);
  bmt::init_parameters(model);
  bmt::Tensor x = bmt::Tensor::from_floats(input_of(bmt::rank()), {kRows, kD});
  auto step = [&] {
    bmt::Tensor y = model.forward(x);
    y.backward(bmt::ones(y.shape()));
    for (auto* s : bmt::sharded_storages(model)) s->settle();
  };
  // Warm-up: the first step fills the rings and caches, the second adds the buffer that
  // accumulated gradients arrive in, the third settles into the steady state.
  for (int i = 0; i < 3; ++i) step();
  const auto before = bmt::memory_stats();
  step();
  step();
  const auto after = bmt::memory_stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes) << "memory held from one step to the next";
  EXPECT_EQ(after.system_allocations, before.system_allocations);
}

TEST(CheckpointBlock, CallBeforeInitParametersIsAnError) {
  struct Registered : bmt::DistributedModule {
    bmt::CheckpointBlock<toy::Block> block{kD};
    Registered() { register_module("block", block); }
  } model;
  bmt::Tensor x = bmt::Tensor::from_floats(input_of(0), {kRows, kD});
  try {
    model.block(x, 1.0f);
    FAIL() << "expected an error";
  } catch (const bmt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected bmt::init_parameters(model) before the first call"),
              std::string::npos)
        << e.what();
  }
}

// A block list the model never registered is not initialized by init_parameters(model); the error
// names the missing register_module, not the init_parameters call the program made.
TEST(CheckpointBlock, UnregisteredBlockListIsAnErrorNamingRegisterModule) {
  struct Forgetful : bmt::DistributedModule {
    bmt::DistributedParameter scale{{kD}, bmt::init::ones()};
    bmt::TransformerBlockList<toy::Block> blocks;
    Forgetful() {
      register_parameter("scale", scale);
      blocks.append(kD);  // but no register_module("blocks", blocks)
    }
  } model;
  bmt::init_parameters(model);
  bmt::Tensor x = bmt::Tensor::from_floats(input_of(0), {kRows, kD});
  try {
    model.blocks(x, 1.0f);
    FAIL() << "expected an error";
  } catch (const bmt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("registered in its model with register_module(name, ...)"), std::string::npos)
        << e.what();
  }
}

// y = x / 2 with a count of its writes per call site: whether a recompute computed the value.
class CountedHalf final : public bmt::autograd::DeferrableFunction {
 public:
  explicit CountedHalf(int* writes) : writes_(writes) {}
  std::string name() const override { return "CountedHalf"; }
  std::vector<bmt::Tensor> prepare(const std::vector<bmt::Tensor>& in) override {
    return {bmt::Tensor::empty(in[0].shape(), in[0].dtype())};
  }
  void write(const std::vector<bmt::Tensor>& in, const std::vector<bmt::Tensor>& out) override {
    ++*writes_;
    out[0].copy_(bmt::kernels::affine(bmt::contiguous(in[0]), 0.5f, 0.0f));
  }
  std::vector<bmt::Tensor> backward(const std::vector<bmt::Tensor>& g) override {
    return {bmt::kernels::affine(bmt::contiguous(g[0]), 0.5f, 0.0f)};
  }

 private:
  int* writes_;
};

int g_inner_writes = 0, g_tail_writes = 0;

// x + half(linear(gelu(half(linear(x))))): a residual MLP whose last GEMM and add only produce the
// block's output.
struct MlpBlock : bmt::Module {
  static constexpr std::int64_t kHidden = 24;
  bmt::DistributedParameter w1{{kHidden, kD}, bmt::init::normal(0.0f, 0.3f)}, b1{{kHidden}, bmt::init::normal(0.1f)};
  bmt::DistributedParameter w2{{kD, kHidden}, bmt::init::normal(0.0f, 0.3f)}, b2{{kD}, bmt::init::normal(0.1f)};
  MlpBlock() {
    register_parameter("w1", w1);
    register_parameter("b1", b1);
    register_parameter("w2", w2);
    register_parameter("b2", b2);
  }
  bmt::Tensor forward(const bmt::Tensor& x) {
    const bmt::Tensor h = bmt::autograd::call<CountedHalf>({bmt::linear(x, w1, b1)}, &g_inner_writes)[0];
    const bmt::Tensor y = bmt::linear(bmt::gelu(h), w2, b2);
    return bmt::add(x, bmt::autograd::call<CountedHalf>({y}, &g_tail_writes)[0]);
  }
};

struct MlpModel : bmt::DistributedModule {
  bmt::TransformerBlockList<MlpBlock> blocks{1};
  explicit MlpModel(bmt::CheckpointOptions opt) {
    for (int i = 0; i < 3; ++i) blocks.append(opt);
    register_module("blocks", blocks);
  }
};

// A recompute computes what backward reads and leaves the rest (here the tail's GEMM, half and
// add) unwritten; the gradients are those of keeping the activations, bit for bit.
TEST(CheckpointBlock, RecomputeLeavesTheBlockOutputUnwritten) {
  std::map<bool, std::map<std::string, std::pair<std::vector<float>, std::vector<float>>>> grads;
  std::map<bool, std::vector<float>> input_grads;
  for (const bool recompute : {false, true}) {
    bmt::CheckpointOptions opt;
    opt.use_checkpoint = recompute;
    MlpModel model(opt);
    bmt::init_parameters(model);
    bmt::Tensor x = bmt::Tensor::from_floats(input_of(bmt::rank()), {kRows, kD}).set_requires_grad(true);
    g_inner_writes = g_tail_writes = 0;
    bmt::Tensor y = model.blocks(x);
    EXPECT_EQ(g_inner_writes, 3);
    EXPECT_EQ(g_tail_writes, 3);
    y.backward(bmt::Tensor::from_floats(input_of(bmt::rank() + 7), {kRows, kD}));
    EXPECT_EQ(g_inner_writes, recompute ? 6 : 3) << "the recompute wrote what gelu reads";
    EXPECT_EQ(g_tail_writes, 3) << "and not the blocks' outputs";
    grads[recompute] = gathered(model);
    input_grads[recompute] = x.grad().to_host_floats();
  }
  EXPECT_EQ(input_grads[true], input_grads[false]);
  ASSERT_EQ(grads[true].size(), 12u);
  for (const auto& [name, vg] : grads[false]) {
    EXPECT_EQ(grads[true].at(name).first, vg.first) << name << ": same initial values";
    EXPECT_EQ(grads[true].at(name).second, vg.second) << name;
  }
}

// AttentionBlock forwards that ran with kept attention outputs, and with kept residual sums, to replay
int g_replayed_attention = 0, g_replayed_residual = 0;

// x + linear(attention(split(linear(x)))) + bo: a causal self-attention block.
struct AttentionBlock : bmt::Module {
  static constexpr std::int64_t kHeads = 2, kHeadDim = 4, kDim = kHeads * kHeadDim, kSeq = 6;
  bmt::DistributedParameter wqkv{{3 * kDim, kDim}, bmt::init::normal(0.0f, 0.4f)};
  bmt::DistributedParameter wo{{kDim, kDim}, bmt::init::normal(0.0f, 0.4f)};
  bmt::DistributedParameter bo{{kDim}, bmt::init::normal(0.0f, 0.2f)};
  AttentionBlock() {
    register_parameter("wqkv", wqkv);
    register_parameter("wo", wo);
    register_parameter("bo", bo);
  }
  bmt::Tensor forward(const bmt::Tensor& x) {
    using bmt::autograd::KeptOutputs;
    if (const auto* kept = KeptOutputs::active("attention"); kept && kept->replaying()) ++g_replayed_attention;
    if (const auto* kept = KeptOutputs::active("residual_add"); kept && kept->replaying()) ++g_replayed_residual;
    const std::int64_t batch = x.size(0);
    const bmt::Shape heads{batch, kSeq, kHeads, kHeadDim};
    auto qkv = bmt::split(bmt::linear(x, wqkv), {kDim, kDim, kDim}, -1);
    const bmt::Tensor y = bmt::attention_bthd(bmt::reshape(qkv[0], heads), bmt::reshape(qkv[1], heads),
                                              bmt::reshape(qkv[2], heads), true);
    return bmt::residual_add(x, bmt::linear(bmt::reshape(y, {batch, kSeq, kDim}), wo), bo);
  }
};

using Grads = std::map<std::string, std::pair<std::vector<float>, std::vector<float>>>;

// What one forward and backward of three AttentionBlocks (block i with options[i]) gives.
struct AttentionRun {
  Grads grads;
  std::vector<float> input_grad;
  int replayed = 0;           // recomputes that took attention's outputs back
  int replayed_residual = 0;  // recomputes that took the residual sums back
};

AttentionRun run_attention_blocks(const std::vector<bmt::CheckpointOptions>& options) {
  struct Model : bmt::DistributedModule {
    bmt::TransformerBlockList<AttentionBlock> blocks{1};
    explicit Model(const std::vector<bmt::CheckpointOptions>& o) {
      for (const auto& block_options : o) blocks.append(block_options);
      register_module("blocks", blocks);
    }
  } model(options);
  bmt::init_parameters(model);
  const bmt::Shape shape{2, AttentionBlock::kSeq, AttentionBlock::kDim};
  auto data = [&](int seed) {
    std::vector<float> v(static_cast<std::size_t>(bmt::numel_of(shape)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.3f * static_cast<float>(i) + static_cast<float>(seed));
    return bmt::Tensor::from_floats(v, shape);
  };
  bmt::Tensor x = data(bmt::rank()).set_requires_grad(true);
  g_replayed_attention = g_replayed_residual = 0;
  model.blocks(x).backward(data(bmt::rank() + 11));
  return {gathered(model), x.grad().to_host_floats(), g_replayed_attention, g_replayed_residual};
}

void expect_same_gradients(const AttentionRun& run, const AttentionRun& reference, const std::string& what) {
  EXPECT_EQ(run.input_grad, reference.input_grad) << what;
  ASSERT_EQ(reference.grads.size(), 9u);
  for (const auto& [name, vg] : reference.grads) {
    EXPECT_EQ(run.grads.at(name).first, vg.first) << name << ": same initial values, " << what;
    EXPECT_EQ(run.grads.at(name).second, vg.second) << name << ", " << what;
  }
}

bmt::CheckpointOptions checkpoint_options(bool recompute, bool keep_attention, bool keep_residual = false) {
  bmt::CheckpointOptions o;
  o.use_checkpoint = recompute;
  o.keep_attention = keep_attention;
  o.keep_residual = keep_residual;
  return o;
}

// Every one of the three blocks with the same options.
std::vector<bmt::CheckpointOptions> uniform(bool recompute, bool keep_attention, bool keep_residual = false) {
  return std::vector<bmt::CheckpointOptions>(3, checkpoint_options(recompute, keep_attention, keep_residual));
}

// Recomputing all but attention (its output kept from forward) gives the gradients of recomputing
// everything and of keeping every activation, bit for bit.
TEST(CheckpointBlock, KeptAttentionGivesTheSameGradients) {
  const AttentionRun kept = run_attention_blocks(uniform(false, false));
  EXPECT_EQ(kept.replayed, 0);
  const AttentionRun recomputed = run_attention_blocks(uniform(true, false));
  EXPECT_EQ(recomputed.replayed, 0);
  expect_same_gradients(recomputed, kept, "recomputing every block");
  const AttentionRun kept_attention = run_attention_blocks(uniform(true, true));
  EXPECT_EQ(kept_attention.replayed, 3);
  EXPECT_EQ(kept_attention.replayed_residual, 0);
  expect_same_gradients(kept_attention, kept, "recomputing all but attention");
}

// Recomputing all but the residual sums (and so the projection they add), with or without
// attention kept as well, gives the gradients of keeping every activation, bit for bit.
TEST(CheckpointBlock, KeptResidualSumsGiveTheSameGradients) {
  const AttentionRun kept = run_attention_blocks(uniform(false, false));
  const AttentionRun kept_residual = run_attention_blocks(uniform(true, false, true));
  EXPECT_EQ(kept_residual.replayed, 0);
  EXPECT_EQ(kept_residual.replayed_residual, 3);
  expect_same_gradients(kept_residual, kept, "recomputing all but the residual sums");
  const AttentionRun kept_both = run_attention_blocks(uniform(true, true, true));
  EXPECT_EQ(kept_both.replayed, 3);
  EXPECT_EQ(kept_both.replayed_residual, 3);
  expect_same_gradients(kept_both, kept, "recomputing all but attention and the residual sums");
}

// Blocks of one list with different options (what bmt-train --keep-blocks makes: the last block
// keeps its activations, and with them its gathered parameters in a buffer of its own, while the
// others recompute through the gather ring) give the gradients of keeping every activation.
TEST(CheckpointBlock, MixedOptionsInOneListGiveTheSameGradients) {
  const AttentionRun kept = run_attention_blocks(uniform(false, false));
  const AttentionRun mixed = run_attention_blocks(
      {checkpoint_options(true, false, true), checkpoint_options(true, true), checkpoint_options(false, false)});
  EXPECT_EQ(mixed.replayed, 1) << "only the middle block keeps attention's outputs for its recompute";
  EXPECT_EQ(mixed.replayed_residual, 1) << "only the first block keeps its residual sums";
  expect_same_gradients(mixed, kept, "recompute keeping residual sums, recompute keeping attention, keep");
  const AttentionRun last_recomputes = run_attention_blocks(
      {checkpoint_options(false, false), checkpoint_options(false, false), checkpoint_options(true, false)});
  expect_same_gradients(last_recomputes, kept, "keep, keep, recompute");
}

// A toy block with a parameter registered ahead of w and b: its size moves w and b within the
// block's flat buffer, and it gets a gradient only where the block uses it (y + sum(spare)).
struct SpareBlock : bmt::Module {
  bmt::DistributedParameter spare, w, b;
  bool use_spare;
  SpareBlock(std::int64_t d, std::int64_t spare_size, bool use)
      : spare({spare_size}, bmt::DType::f32, bmt::init::normal(1.0f)),
        w({d}, bmt::DType::f32, bmt::init::normal(1.0f, 0.3f)),
        b({d}, bmt::DType::f32, bmt::init::normal(0.1f)),
        use_spare(use) {
    register_parameter("spare", spare);
    register_parameter("w", w);
    register_parameter("b", b);
  }
  bmt::Tensor forward(const bmt::Tensor& x) {
    bmt::Tensor y = bmt::autograd::call<toy::TanhAffine>({x, w, b}, kAlpha)[0];
    return use_spare ? bmt::add(y, bmt::reshape(bmt::sum(spare), {1})) : y;
  }
};

struct SpareModel : bmt::DistributedModule {
  bmt::TransformerBlockList<SpareBlock> blocks{1};
  SpareModel(const std::vector<std::int64_t>& spare_sizes, const std::vector<bool>& used) {
    for (std::size_t i = 0; i < spare_sizes.size(); ++i)
      blocks.append(bmt::CheckpointOptions{}, kD, spare_sizes[i], used[i]);
    register_module("blocks", blocks);
  }
};

// Per parameter, its gathered gradient after two steps of the same data; and whether every
// gradient-shard element outside the parameters (padding) is exactly zero.
struct SpareRun {
  std::map<std::string, std::vector<float>> grads;
  bool padding_zero = true;
};

SpareRun run_spare_model(const std::vector<std::int64_t>& spare_sizes, const std::vector<bool>& used) {
  SpareModel model(spare_sizes, used);
  bmt::init_parameters(model);
  SpareRun run;
  for (int step = 0; step < 2; ++step) {
    for (auto* s : bmt::sharded_storages(model)) s->zero_grad();
    bmt::Tensor x = bmt::Tensor::from_floats(input_of(bmt::rank()), {kRows, kD});
    x.set_requires_grad(true);
    bmt::Tensor y = model.blocks(x);
    y.backward(bmt::Tensor::from_floats(std::vector<float>(kRows * kD, 0.5f), y.shape()));
  }
  for (auto* s : bmt::sharded_storages(model)) {
    s->settle();
    const auto g = all_gather(s->grad_shard());
    std::vector<bool> in_entry(g.size(), false);
    for (const auto& e : s->entries()) {
      for (std::int64_t k = 0; k < e.numel; ++k) in_entry[e.offset + k] = true;
      run.grads[e.name] = std::vector<float>(g.begin() + e.offset, g.begin() + e.offset + e.numel);
    }
    for (std::size_t i = 0; i < g.size(); ++i) run.padding_zero = run.padding_zero && (in_entry[i] || g[i] == 0.0f);
  }
  return run;
}

// Backward hands blocks 3 and 1 one gradient buffer of the ring, blocks 2 and 0 the other. Laid out
// differently, they get the w and b gradients of a list whose blocks are laid out alike, with
// padding and unused parameters exactly zero (a buffer is zeroed whole when a block laid out
// otherwise takes it). Laid out alike, where blocks 3 and 2 use their spare parameter and 1 and 0
// do not, the latter's spare gradients are exactly zero: a part no gradient reached is zeroed
// before the reduce-scatter, not left holding the previous block's.
TEST(CheckpointBlock, BlocksLaidOutDifferentlyShareTheGradientBuffers) {
  const std::vector<bool> unused(4, false);
  const SpareRun alike = run_spare_model({1, 1, 1, 1}, unused);
  const SpareRun mixed = run_spare_model({1, 70, 200, 3}, unused);
  EXPECT_TRUE(alike.padding_zero);
  EXPECT_TRUE(mixed.padding_zero);
  for (const auto& [name, grad] : alike.grads) {
    ASSERT_TRUE(mixed.grads.count(name)) << name;
    if (name.find("spare") == std::string::npos) EXPECT_EQ(mixed.grads.at(name), grad) << name;
    else EXPECT_EQ(mixed.grads.at(name), std::vector<float>(mixed.grads.at(name).size(), 0.0f)) << name;
  }

  const SpareRun some_used = run_spare_model({5, 5, 5, 5}, {false, false, true, true});
  EXPECT_TRUE(some_used.padding_zero);
  for (int k = 0; k < 4; ++k) {
    const auto& g = some_used.grads.at("blocks." + std::to_string(k) + ".spare");
    if (k < 2) EXPECT_EQ(g, std::vector<float>(g.size(), 0.0f)) << "block " << k;
    else EXPECT_NE(g[0], 0.0f) << "block " << k;
  }
}

}  // namespace

// Memory planning: the storage sizes known before init_parameters are the ones it then allocates,
// at this world size and at others.
TEST(PlannedStorageSizes, AreWhatInitParametersAllocates) {
  for (bool list : {true, false}) {
    Model planned(3, 1, {}, list);
    const auto sizes = bmt::planned_storage_sizes(planned, bmt::context().mesh().shard_size);
    EXPECT_TRUE(bmt::sharded_storages(planned).empty()) << "planning allocated storages";
    Model model(3, 1, {}, list);
    bmt::init_parameters(model);
    std::vector<std::int64_t> totals;
    for (auto* s : bmt::sharded_storages(model)) totals.push_back(s->total());
    std::sort(totals.begin(), totals.end());
    auto sorted = sizes;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, totals) << (list ? "block list" : "loose blocks");
    for (int n : {1, 2, 3, 7}) {
      const auto at_n = bmt::planned_storage_sizes(planned, n);
      ASSERT_EQ(at_n.size(), sizes.size());
      for (std::size_t i = 0; i < at_n.size(); ++i) EXPECT_EQ(at_n[i] % n, 0) << "padded for " << n << " ranks";
    }
  }
}
