// The models layer's own descriptions held to the models themselves: a configuration's parameter
// count against a built model's parameters; the memory plan (made from the configuration alone)
// against what init_parameters plans for the built model and the block scheduler's choices; the
// Hugging Face layout naming every parameter of a built model once; the checkpoint record of a
// configuration read back the same, and bad records refused with the field named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/models/models.hpp>

namespace {

using bmt::models::CausalLM;
using bmt::models::CausalLMOptions;
using bmt::models::ModelConfig;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::vector<ModelConfig> small_models() {
  std::vector<ModelConfig> out;
  ModelConfig gpt2 = bmt::models::preset("tiny");
  gpt2.layers = 3;
  out.push_back(gpt2);
  ModelConfig llama;
  llama.arch = "llama";
  llama.vocab = 97;
  llama.max_seq = 32;
  llama.layers = 3;
  llama.heads = 4;
  llama.kv_heads = 2;
  llama.dim = 32;
  llama.ffn = 80;
  llama.tie_embeddings = false;
  out.push_back(llama);
  llama.tie_embeddings = true;
  llama.dtype = bmt::DType::bf16;
  out.push_back(llama);
  return out;
}

TEST(ModelConfig, ParameterCountIsTheBuiltModels) {
  for (const auto& c : small_models()) {
    CausalLM model(c);
    std::int64_t n = 0;
    for (const auto& [name, p] : model.named_parameters("")) n += p.numel();
    EXPECT_EQ(c.parameter_count(), n) << c.arch;
    std::int64_t block = 0;
    for (const auto& [name, p] : model.named_parameters(""))
      if (name.rfind("blocks.0.", 0) == 0) block += p.numel();
    EXPECT_EQ(c.block_parameter_count(), block) << c.arch;
  }
}

// The element counts of block 0's parameters, in registration order.
std::vector<std::int64_t> block_numels(CausalLM& model) {
  std::vector<std::int64_t> numels;
  for (const auto& [name, p] : model.named_parameters(""))
    if (name.rfind("blocks.0.", 0) == 0) numels.push_back(p.numel());
  return numels;
}

TEST(MemoryPlan, IsWhatTheBuiltModelPlans) {
  int blocks_largest = 0;
  for (const auto& c : small_models())
    for (int world : {1, 3, 4}) {
      CausalLM model(c);
      const auto sizes = bmt::planned_storage_sizes(model, world);
      const auto plan = bmt::models::memory_plan(c, {}, world);
      EXPECT_EQ(plan.largest_block, *std::max_element(sizes.begin(), sizes.end())) << c.arch << " at " << world;
      EXPECT_EQ(plan.parameters, c.parameter_count());
      EXPECT_EQ(plan.world_size, world);
      EXPECT_EQ(plan.dtype, c.dtype);
      EXPECT_EQ(plan.largest_block_float8, 0) << c.arch;
      // With fp8, the weights the built model gathers as float8 codes, where a block is the largest
      // storage (the embedding, gathered in the model's dtype, may be larger).
      CausalLMOptions fp8;
      fp8.fp8 = true;
      CausalLM fp8_model(c, fp8);
      std::int64_t marked = 0;
      for (const auto& [name, p] : fp8_model.named_parameters(""))
        if (name.rfind("blocks.0.", 0) == 0 && p.impl()->param->gather_float8) marked += p.numel();
      EXPECT_GT(marked, 0) << c.arch;
      EXPECT_EQ(bmt::models::block_float8_elements(c, fp8), marked) << c.arch;
      EXPECT_EQ(bmt::models::block_float8_elements(c, {}), 0) << c.arch;
      std::int64_t block_storage = 0;  // one block's, as init_parameters makes it
      for (const auto& size : bmt::planned_storage_sizes(fp8_model, world))
        if (size == bmt::ShardedStorage::planned_total(block_numels(fp8_model), c.dtype, world)) block_storage = size;
      const auto fp8_plan = bmt::models::memory_plan(c, fp8, world);
      EXPECT_EQ(fp8_plan.largest_block, plan.largest_block) << c.arch;
      EXPECT_EQ(fp8_plan.largest_block_float8, block_storage == plan.largest_block ? marked : 0)
          << c.arch << " at " << world;
      blocks_largest += block_storage == plan.largest_block ? 1 : 0;
    }
  EXPECT_GT(blocks_largest, 0) << "no configuration whose block is its largest storage: the float8 count unchecked";
}

// Under tensor parallelism (the mesh's tp; BMT_TEST_TP_SIZE in the tp variant of this test) the
// counts and the plan are one rank's: its parts of the split parameters and the replicated ones
// whole, as the model built at that tp holds them. Llama both with key/value heads split and with
// fewer of them than ranks (replicated).
TEST(MemoryPlanTp, CountsWhatEachRankOfTheGroupHolds) {
  const int tp = bmt::tp_size();
  std::vector<ModelConfig> configs{bmt::models::preset("tiny")};
  for (std::int64_t kv : {std::int64_t{4}, std::int64_t{1}}) {
    ModelConfig llama;
    llama.arch = "llama";
    llama.vocab = 96;
    llama.max_seq = 32;
    llama.layers = 2;
    llama.heads = 4;
    llama.kv_heads = kv;
    llama.dim = 32;
    llama.ffn = 80;
    llama.tie_embeddings = false;
    configs.push_back(llama);
  }
  for (const auto& c : configs) {
    const std::string what = c.arch + " kv " + std::to_string(c.kv_head_count()) + " at tp " + std::to_string(tp);
    CausalLM model(c);
    std::int64_t n = 0, block = 0;
    for (const auto& [name, p] : model.named_parameters("")) {
      n += p.numel();
      if (name.rfind("blocks.0.", 0) == 0) block += p.numel();
    }
    EXPECT_EQ(c.parameter_count(tp), n) << what;
    EXPECT_EQ(c.block_parameter_count(tp), block) << what;
    if (tp > 1) EXPECT_LT(n, c.parameter_count()) << what;
    for (int world : {1, 2}) {
      const auto sizes = bmt::planned_storage_sizes(model, world);
      const auto plan = bmt::models::memory_plan(c, {}, world);
      EXPECT_EQ(plan.parameters, n) << what;
      EXPECT_EQ(plan.largest_block, *std::max_element(sizes.begin(), sizes.end())) << what << " over " << world;
    }
  }
}

TEST(MemoryPlan, FollowsTheSchedulersRules) {
  const ModelConfig c = small_models()[0];  // 3 blocks
  CausalLMOptions o;
  o.prefetch_depth = 7;  // past the last block: a sequence of 3 prefetches 2
  EXPECT_EQ(bmt::models::memory_plan(c, o, 2).prefetch, 2);
  EXPECT_EQ(bmt::models::memory_plan(c, o, 2).kept_blocks, 0);
  o.keep_blocks = 2;
  EXPECT_EQ(bmt::models::memory_plan(c, o, 2).kept_blocks, 2);
  o.keep_blocks = 10;
  EXPECT_EQ(bmt::models::memory_plan(c, o, 2).kept_blocks, 3);
  o.keep_blocks = 0;
  o.checkpoint.zero_level = 2;
  EXPECT_EQ(bmt::models::memory_plan(c, o, 2).kept_blocks, 3);
  o.checkpoint.zero_level = 3;
  o.checkpoint.use_checkpoint = false;
  EXPECT_EQ(bmt::models::memory_plan(c, o, 2).kept_blocks, 3);
  // The model's blocks get the options the plan assumed.
  o.checkpoint.use_checkpoint = true;
  o.keep_blocks = 1;
  for (std::int64_t i = 0; i < 3; ++i)
    EXPECT_EQ(bmt::models::block_options(o, 3, i).use_checkpoint, i < 2) << "block " << i;
}

TEST(HfLayout, NamesEveryParameterOnce) {
  for (const auto& c : small_models()) {
    CausalLM model(c);
    std::set<std::string> parameters, hub;
    for (const auto& [name, p] : model.named_parameters("")) parameters.insert(name);
    const auto layout = bmt::models::hf_layout(c);
    std::set<std::string> named;
    for (const auto& t : layout.tensors) {
      EXPECT_TRUE(parameters.count(t.parameter)) << t.parameter << " is no parameter of the " << c.arch;
      EXPECT_TRUE(named.insert(t.parameter).second) << t.parameter << " named twice";
      EXPECT_TRUE(hub.insert(t.hub).second) << t.hub << " used twice";
      EXPECT_FALSE(layout.ignored(t.hub)) << t.hub;
    }
    EXPECT_EQ(named, parameters) << c.arch;
    EXPECT_EQ(layout.ignored("lm_head.weight"), c.tie_embeddings);
  }
}

TEST(ModelRecord, ReadsBackTheSame) {
  for (auto c : small_models()) {
    c.rope = {500000.0f, 32.0f, 1.0f, 4.0f, 8192.0f};
    c.norm_eps = 1e-6f;
    c.dropout = 0.125f;
    c.default_lr = 2e-3f;
    const ModelConfig back = bmt::models::model_config_from_json(bmt::models::to_json(c), "record");
    EXPECT_EQ(bmt::models::to_json(back), bmt::models::to_json(c));
    EXPECT_EQ(back.rope.original_max_positions, 8192.0f);
    EXPECT_EQ(back.kv_head_count(), c.kv_head_count());
  }
}

TEST(ModelRecord, OlderRecordsTakeThePresetDefaults) {
  // A record from before norm_eps, rope, init_std, dropout and default_lr were kept.
  const nlohmann::json old = {{"arch", "gpt2"}, {"layers", 2},  {"heads", 4},   {"dim", 64},
                              {"ffn", 256},     {"vocab", 256}, {"max_seq", 128}, {"tie_embeddings", true},
                              {"dtype", "bf16"}};
  const ModelConfig c = bmt::models::model_config_from_json(old, "record");
  EXPECT_EQ(c.kv_head_count(), 4);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.dtype, bmt::DType::bf16);
  EXPECT_EQ(c.parameter_count(), bmt::models::preset("tiny").parameter_count());
}

TEST(ModelRecord, RefusesBadFields) {
  const nlohmann::json good = bmt::models::to_json(small_models()[1]);
  auto refused = [&](const char* key, const nlohmann::json& value, const std::string& message) {
    nlohmann::json j = good;
    if (value.is_null())
      j.erase(key);
    else
      j[key] = value;
    EXPECT_THAT([&] { bmt::models::model_config_from_json(j, "record 'x'"); },
                ThrowsMessage<bmt::Error>(HasSubstr(message)))
        << key;
  };
  refused("layers", nullptr, "record 'x' 'layers': expected a positive whole number, found none");
  refused("layers", 0, "'layers': expected a positive whole number, found 0");
  refused("dim", "32", "'dim': expected a positive whole number, found \"32\"");
  refused("arch", "bert", "expected gpt2 or llama, found 'bert'");
  refused("dtype", "i32", "'dtype': expected f32, bf16 or f16, found 'i32'");
  refused("rope", nlohmann::json::array({1, 2}), "'rope': expected five numbers");
  refused("kv_heads", 3, "expected key/value heads dividing the 4 heads, found 3");
  refused("tie_embeddings", 1, "'tie_embeddings': expected true or false, found 1");
}

}  // namespace
