// Checkpoints across layouts: bmtrain checkpoints (the model, the optimizer's state) and Hugging
// Face files hold whole tensors whatever the mesh. At 1 rank the test writes its files into
// BMT_TP_CHECKPOINT_DIR; at tp 2 (x dp 1 or 2) each rank's files must hold exactly the whole
// tensors its parts make up, read into the parts they came from, take 1 rank's files in exactly,
// and export Hugging Face files byte for byte equal to 1 rank's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/models/models.hpp>

#include "../common/tensor_parallel_reference.hpp"

namespace {

using bmt::models::CausalLM;
using bmt::models::ModelConfig;
using Whole = std::map<std::string, std::vector<float>>;

// GPT-2 (a tied head, fused qkv), and a Llama of fewer key/value heads than tp ranks (replicated k
// and v) with its own head.
ModelConfig config(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  c.vocab = 68;
  c.max_seq = 16;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = arch == "llama" ? 1 : 0;
  c.dim = 32;
  c.ffn = 64;
  c.tie_embeddings = arch == "gpt2";
  return c;
}

std::string dir() {
  const char* d = std::getenv("BMT_TP_CHECKPOINT_DIR");
  return d ? d : "";
}

// A few AdamW steps on the same tokens at every layout, so that the moments hold values.
void train(CausalLM& model, bmt::optim::AdamW& adamw) {
  const std::int64_t B = 4, T = 8;
  std::vector<std::int64_t> tokens(B * T), targets(B * T);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int64_t>((7 * i + 3) % 68);
    targets[i] = static_cast<std::int64_t>((7 * i + 10) % 68);
  }
  for (int step = 0; step < 2; ++step) {
    adamw.zero_grad();
    bmt::Tensor loss = model.loss(bmt::Tensor::from_ints(tokens, {B, T}), bmt::Tensor::from_ints(targets, {B, T}));
    bmt::autograd::backward({loss});
    adamw.step(1e-2f, 1.0f);
  }
}

// Every tensor of a safetensors file, read whole as f32 by every rank.
Whole read_file(const std::string& path) {
  bmt::io::SafetensorsReader reader(path);
  Whole out;
  for (const auto& t : reader.header().tensors()) {
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= static_cast<std::uint64_t>(d);
    std::vector<float> v(n);
    reader.read<float>(t.name, 0, n, v.data());
    out[t.name] = std::move(v);
  }
  return out;
}

Whole optimizer_state(CausalLM& model, const bmt::optim::AdamW& adamw) {
  Whole out;
  for (const std::string state : {"master", "exp_avg", "exp_avg_sq"}) {
    const auto by_name = bmt_test::whole_parameters(model, [&](const bmt::ShardedStorage& s) {
      for (const auto& [name, t] : adamw.state_of(s))
        if (name == state) return t;
      ADD_FAILURE() << "no state " << state;
      return bmt::Tensor();
    });
    for (const auto& [name, v] : by_name) out[name + "." + state] = v;
  }
  return out;
}

void expect_equal(const Whole& got, const Whole& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, v] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no " << name;
    ASSERT_EQ(it->second, v) << what << ": " << name;
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool at_one_rank() { return bmt::world_size() == 1; }

}  // namespace

TEST(TpCheckpoints, ModelAndOptimizerFilesHoldWholeTensorsAndLoadBack) {
  ASSERT_FALSE(dir().empty()) << "expected BMT_TP_CHECKPOINT_DIR (set by ctest)";
  for (const std::string arch : {"gpt2", "llama"}) {
    const ModelConfig c = config(arch);
    CausalLM model(c);
    bmt::init_parameters(model);
    bmt::optim::AdamW adamw(model);
    train(model, adamw);
    const std::string tag = arch + "-np" + std::to_string(bmt::world_size());
    const std::string model_path = dir() + "/" + tag + ".safetensors", state_path = dir() + "/" + tag + ".optimizer";
    bmt::save(model, model_path);
    bmt::io::save_optimizer(adamw, state_path);
    const Whole weights = bmt_test::whole_parameters(model), state = optimizer_state(model, adamw);
    expect_equal(read_file(model_path), weights, tag + " model file");
    expect_equal(read_file(state_path), state, tag + " optimizer file");

    // Into a model and optimizer of other values (a second run of steps), back to the saved ones.
    train(model, adamw);
    bmt::load(model, model_path);
    bmt::io::load_optimizer(adamw, state_path);
    expect_equal(bmt_test::whole_parameters(model), weights, tag + " model loaded back");
    expect_equal(optimizer_state(model, adamw), state, tag + " optimizer state loaded back");

    // 1 rank's files (its training rounds differently) load exactly into the parts at this layout.
    if (at_one_rank()) continue;
    const std::string one = dir() + "/" + arch + "-np1";
    bmt::load(model, one + ".safetensors");
    bmt::io::load_optimizer(adamw, one + ".optimizer");
    expect_equal(bmt_test::whole_parameters(model), read_file(one + ".safetensors"), tag + " 1 rank's model");
    expect_equal(optimizer_state(model, adamw), read_file(one + ".optimizer"), tag + " 1 rank's optimizer state");
  }
}

TEST(TpCheckpoints, HuggingFaceExportEqualsOneRanksByteForByteAndImportsExactly) {
  ASSERT_FALSE(dir().empty()) << "expected BMT_TP_CHECKPOINT_DIR (set by ctest)";
  for (const std::string arch : {"gpt2", "llama"}) {
    const ModelConfig c = config(arch);
    // Initialization does not depend on the layout, so the same weights at every world size.
    CausalLM model(c);
    bmt::init_parameters(model);
    const Whole initial = bmt_test::whole_parameters(model);
    const std::string out = dir() + "/" + arch + "-hf-np" + std::to_string(bmt::world_size());
    bmt::models::save_hf_checkpoint(model, out);
    if (at_one_rank()) continue;
    const std::string one = dir() + "/" + arch + "-hf-np1";
    const std::string want = file_bytes(one + "/model.safetensors");
    ASSERT_FALSE(want.empty()) << "no 1-rank export at " << one;
    EXPECT_TRUE(file_bytes(out + "/model.safetensors") == want) << arch << ": the export differs from 1 rank's";

    CausalLM imported(c);
    bmt::init_parameters(imported);
    for (auto* s : bmt::sharded_storages(imported)) bmt::fill_(s->shard(), 0.0f);
    bmt::models::load_hf_checkpoint(imported, one);
    expect_equal(bmt_test::whole_parameters(imported), initial, arch + ": 1 rank's export imported");
  }
}
