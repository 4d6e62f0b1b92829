// FP8 models (a small GPT-2 and a small Llama) against their 1-rank run: the blocks' weights are
// sharded f32 masters, quantized piece by piece under the scale the shard group agrees on and
// gathered as e4m3 codes, which are the codes one rank makes of the whole master, so a few AdamW
// steps give the same losses bit for bit at every world size. Every rank feeds the same batch:
// activations and gradients are scaled by the data each rank multiplies (per-tensor current
// scaling is local), so only the same data on every rank makes the runs comparable exactly. The
// 1-rank run writes its losses to BMT_GOLDEN_FILE; the others read them.
//
// Checkpoints hold the f32 master weights, not the codes: a run saved and loaded into a new model
// and optimizer continues with the same loss as the run that went on.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/models/models.hpp>

#include "small_bf16_models.hpp"

namespace {

using bmt::models::CausalLM;
using bmt::models::CausalLMOptions;
using bmt::models::ModelConfig;

using bmt_test::small_gpt2;
using bmt_test::small_llama;

// A model in FP8 with its AdamW, on one batch that every rank feeds.
struct Fp8Training {
  CausalLM model;
  bmt::optim::AdamW adamw;
  bmt::optim::OptimManager manager;
  bmt::Tensor ids, targets;

  explicit Fp8Training(const ModelConfig& c, CausalLMOptions options = {})
      : model(c, fp8(options)), adamw((bmt::init_parameters(model), model), adam()) {
    manager.add_optimizer(adamw);
    const std::int64_t rows = 2, seq = 16;
    std::mt19937 gen(11);
    std::uniform_int_distribution<int> token(0, static_cast<int>(c.vocab) - 1);
    std::vector<std::int64_t> in, target;
    for (std::int64_t r = 0; r < rows; ++r) {
      std::vector<std::int64_t> row(static_cast<std::size_t>(seq + 1));
      for (auto& t : row) t = token(gen);
      in.insert(in.end(), row.begin(), row.end() - 1);
      target.insert(target.end(), row.begin() + 1, row.end());
    }
    ids = bmt::Tensor::from_ints(in, {rows, seq}, bmt::DType::i32);
    targets = bmt::Tensor::from_ints(target, {rows, seq}, bmt::DType::i32);
  }
  static CausalLMOptions fp8(CausalLMOptions o) {
    o.fp8 = true;
    return o;
  }
  static bmt::optim::AdamWOptions adam() {
    bmt::optim::AdamWOptions o;
    o.lr = 3e-3f;
    o.beta2 = 0.95f;
    return o;
  }
  // One step; the loss it read before updating.
  float step() {
    manager.zero_grad();
    const bmt::Tensor loss = model.loss(ids, targets);
    manager.backward(loss);
    manager.step();
    return bmt::sum_loss(loss);
  }
};

std::vector<float> losses_of(const ModelConfig& c, int steps, const CausalLMOptions& options = {}) {
  Fp8Training run(c, options);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(run.step());
  return losses;
}

}  // namespace

TEST(Fp8WorldSizes, SameLossesAsOneRank) {
  const char* path = std::getenv("BMT_GOLDEN_FILE");
  ASSERT_NE(path, nullptr) << "expected BMT_GOLDEN_FILE (set by ctest)";
  std::vector<float> losses;
  for (const ModelConfig& c : {small_gpt2(), small_llama()}) {
    const auto l = losses_of(c, 4);
    EXPECT_LT(l.back(), l.front()) << c.arch << ": the loss should fall on its one batch";
    losses.insert(losses.end(), l.begin(), l.end());
  }
  if (bmt::world_size() == 1) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(losses.data()), static_cast<std::streamsize>(losses.size() * sizeof(float)));
    ASSERT_TRUE(f.good()) << "could not write " << path;
    return;
  }
  std::vector<float> golden(losses.size());
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(golden.data()), static_cast<std::streamsize>(golden.size() * sizeof(float)));
  ASSERT_TRUE(f.good()) << "could not read " << path << " (written by the 1-rank run)";
  for (std::size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i], golden[i]) << "loss " << i;
}

TEST(Fp8WorldSizes, CheckpointsHoldTheMasterWeights) {
  const char* golden = std::getenv("BMT_GOLDEN_FILE");
  ASSERT_NE(golden, nullptr) << "expected BMT_GOLDEN_FILE (set by ctest)";
  // One folder for each test of this program (world size and shard group), which ctest may run at once.
  const char* group = std::getenv("BMT_TEST_SHARD_GROUP");
  const std::string dir = std::string(golden) + ".ckpt_" + (group ? group : "world") + "_np" +
                          std::to_string(bmt::world_size());
  if (bmt::rank() == 0) std::filesystem::create_directories(dir);
  bmt::synchronize();
  for (const ModelConfig& c : {small_gpt2(), small_llama()}) {
    Fp8Training run(c);
    run.step();
    run.step();
    bmt::save(run.model, dir + "/model.safetensors");
    bmt::io::save_optimizer(run.adamw, dir + "/optimizer.safetensors");
    Fp8Training resumed(c);
    bmt::load(resumed.model, dir + "/model.safetensors");
    bmt::io::load_optimizer(resumed.adamw, dir + "/optimizer.safetensors");
    const auto a = bmt::sharded_storages(run.model), b = bmt::sharded_storages(resumed.model);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i]->shard_dtype(), bmt::DType::f32) << a[i]->name();
      EXPECT_EQ(b[i]->shard().to_host_floats(), a[i]->shard().to_host_floats()) << c.arch << " " << a[i]->name();
    }
    // The first step's loss is the weights'; the second's follows an update that read the moments.
    EXPECT_EQ(resumed.step(), run.step()) << c.arch;
    EXPECT_EQ(resumed.step(), run.step()) << c.arch << ", after a step from the loaded moments";
  }
  bmt::synchronize();
  if (bmt::rank() == 0) std::filesystem::remove_all(dir);
}

// The block schedule's options read the same gathered codes: a block kept gathered from forward to
// backward (ZeRO level 2), one that keeps its activations (its forward records the graph and
// transposes the codes there, not in a recompute), no prefetch, and kept attention outputs give
// the default schedule's losses bit for bit.
TEST(Fp8WorldSizes, ScheduleOptionsGiveTheSameLosses) {
  for (const ModelConfig& c : {small_gpt2(), small_llama()}) {
    const auto base = losses_of(c, 3);
    CausalLMOptions level2;
    level2.checkpoint.zero_level = 2;
    CausalLMOptions kept;
    kept.keep_blocks = 1;
    CausalLMOptions no_prefetch;
    no_prefetch.prefetch_depth = 0;
    CausalLMOptions keep_attention;
    keep_attention.checkpoint.keep_attention = true;
    EXPECT_EQ(losses_of(c, 3, level2), base) << c.arch << " zero level 2";
    EXPECT_EQ(losses_of(c, 3, kept), base) << c.arch << " a block keeping its activations";
    EXPECT_EQ(losses_of(c, 3, no_prefetch), base) << c.arch << " prefetch 0";
    EXPECT_EQ(losses_of(c, 3, keep_attention), base) << c.arch << " kept attention outputs";
  }
}
