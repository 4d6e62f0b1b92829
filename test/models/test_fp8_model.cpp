// CausalLMOptions::fp8: a model built with it runs exactly its blocks' linear layers in FP8 (the
// embedding, the final norm and the head stay in the model's dtype), and trains: each of a few
// AdamW steps gives a finite loss within FP8's rounding of the same model's in bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
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

// The registered names (relative to a block) of the linear layers fp8 must switch: GPT-2's fused
// QKV, attention projection and MLP; Llama's q, k, v, o and SwiGLU projections.
std::set<std::string> block_linear_layers(const std::string& arch) {
  if (arch == "gpt2") return {"attn", "attn_proj", "mlp_fc", "mlp_proj"};
  return {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};
}

// A linear layer's fp8 switch (1 on, 0 off) of any kind the blocks are built from; -1 for other modules.
int fp8_of(const bmt::Module* module) {
  if (const auto* l = dynamic_cast<const bmt::nn::Linear*>(module)) return l->fp8() ? 1 : 0;
  if (const auto* l = dynamic_cast<const bmt::nn::ColumnParallelLinear*>(module)) return l->fp8() ? 1 : 0;
  if (const auto* l = dynamic_cast<const bmt::nn::RowParallelLinear*>(module)) return l->fp8() ? 1 : 0;
  return -1;
}

TEST(CausalLMFp8, SwitchesExactlyTheBlocksLinearLayers) {
  for (const ModelConfig& c : {small_gpt2(), small_llama()}) {
    for (bool fp8 : {false, true}) {
      CausalLMOptions o;
      o.fp8 = fp8;
      CausalLM model(c, o);
      const auto wanted = block_linear_layers(c.arch);
      std::int64_t linear = 0, in_fp8 = 0;
      for (const auto& [name, module] : model.named_modules("")) {
        const int layer_fp8 = fp8_of(module);
        if (layer_fp8 < 0) continue;
        ++linear;
        const std::string last = name.substr(name.rfind('.') + 1);
        const bool in_block = name.rfind("blocks.", 0) == 0 && wanted.count(last) == 1;
        EXPECT_TRUE(in_block) << name << ": a linear layer outside the blocks' list";
        EXPECT_EQ(layer_fp8 == 1, fp8 && in_block) << c.arch << " " << name;
        in_fp8 += layer_fp8;
      }
      const auto per_block = static_cast<std::int64_t>(wanted.size());
      EXPECT_EQ(linear, c.layers * per_block) << c.arch;
      EXPECT_EQ(in_fp8, fp8 ? c.layers * per_block : 0) << c.arch;
      EXPECT_EQ(model.options().fp8, fp8);
    }
  }
}

// The losses of `steps` AdamW steps on one batch, the loss read before each step.
std::vector<float> train_losses(const ModelConfig& c, bool fp8, int steps) {
  CausalLMOptions o;
  o.fp8 = fp8;
  CausalLM model(c, o);
  bmt::init_parameters(model);  // keyed by the parameters' names: the same weights for both models
  bmt::optim::AdamWOptions ao;
  ao.lr = 1e-3f;
  ao.beta2 = 0.95f;
  bmt::optim::AdamW adamw(model, ao);
  bmt::optim::OptimManager manager;
  manager.add_optimizer(adamw);
  const std::int64_t batch = 2 * bmt::world_size(), seq = 16;
  const std::int64_t rows = batch / bmt::world_size(), first = bmt::rank() * rows;
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> token(0, static_cast<int>(c.vocab) - 1);
  std::vector<std::int64_t> all(static_cast<std::size_t>(batch * (seq + 1)));
  for (auto& t : all) t = token(gen);
  std::vector<std::int64_t> in, target;  // this rank's rows: next-token targets
  for (std::int64_t r = first; r < first + rows; ++r)
    for (std::int64_t t = 0; t < seq; ++t) {
      in.push_back(all[static_cast<std::size_t>(r * (seq + 1) + t)]);
      target.push_back(all[static_cast<std::size_t>(r * (seq + 1) + t + 1)]);
    }
  const bmt::Tensor ids = bmt::Tensor::from_ints(in, {rows, seq}, bmt::DType::i32);
  const bmt::Tensor targets = bmt::Tensor::from_ints(target, {rows, seq}, bmt::DType::i32);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    manager.zero_grad();
    const bmt::Tensor loss = model.loss(ids, targets);
    manager.backward(loss);
    manager.step();
    losses.push_back(bmt::sum_loss(loss));
  }
  return losses;
}

TEST(CausalLMFp8, TrainsWithinFp8RoundingOfBf16) {
  // e4m3 keeps 3 mantissa bits: each operand of a product is within 2^-4 of its value, relative.
  // At these sizes the loss, an average over every token of every row, moves far less than that;
  // a loss outside it means the products are not the model's.
  constexpr float kFp8Rounding = 0.0625f;
  for (const ModelConfig& c : {small_gpt2(), small_llama()}) {
    const auto bf16 = train_losses(c, false, 3);
    const auto fp8 = train_losses(c, true, 3);
    bool differs = false;
    for (std::size_t s = 0; s < bf16.size(); ++s) {
      ASSERT_TRUE(std::isfinite(fp8[s])) << c.arch << " step " << s;
      EXPECT_NEAR(fp8[s], bf16[s], kFp8Rounding * std::abs(bf16[s])) << c.arch << " step " << s;
      differs = differs || fp8[s] != bf16[s];
    }
    // Rounded to FP8, the products are not the bf16 ones: equal losses would mean FP8 never ran.
    EXPECT_TRUE(differs) << c.arch;
    EXPECT_LT(fp8.back(), fp8.front()) << c.arch << ": the FP8 model's loss should fall on its one batch";
  }
}

}  // namespace
