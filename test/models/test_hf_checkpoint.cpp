// Hugging Face checkpoints in and out (bmtrain/io/hf_checkpoint.hpp) at 1 to 4 ranks: small GPT-2
// and Llama (grouped-query, tied and untied) checkpoints in the hub's names and layouts, written
// here with a safetensors writer of the test's own, single-file and sharded, f32, bf16 and f16 on
// disk, loaded into models of f32 and bf16 parameters and compared element by element with what
// was written; an export read back gives the same bytes; broken and mismatched checkpoints end
// with one error naming the tensor, what was expected and what was found, on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <bmtrain/bmtrain.hpp>

#include "bmtrain/io/hf_checkpoint.hpp"
#include "bmtrain/models/models.hpp"
#include "bmtrain/runtime/error.hpp"
#include "hub_checkpoint.hpp"
#include "common/io_test_util.hpp"

namespace {

using bmt::DType;
using bmt::models::ModelConfig;
using bmt::test::SharedTempDir;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using Json = nlohmann::json;
using namespace hub_checkpoint;

// ---- A model with the parameter names of bmt-train's models -----------------------------------

struct Leaf {
  std::string name;  // relative to the module
  std::vector<std::int64_t> shape;
};

// Modules nested as the dotted names say; "blocks.N" subtrees are CheckpointBlocks (one flat
// storage each, several parameters in it), other parameters are sharded one by one.
struct Tree : bmt::Module {
  std::vector<std::unique_ptr<bmt::Module>> modules;
  std::vector<bmt::DistributedParameter> weights;

  Tree(const std::vector<Leaf>& leaves, DType dtype, const std::string& path = "") {
    std::map<std::string, std::vector<Leaf>> below;
    std::vector<std::string> order;
    for (const auto& l : leaves) {
      const auto dot = l.name.find('.');
      if (dot == std::string::npos) {
        weights.emplace_back(l.shape, dtype, bmt::init::normal(0.5f));
        register_parameter(l.name, weights.back());
        continue;
      }
      const std::string head = l.name.substr(0, dot);
      if (!below.count(head)) order.push_back(head);
      below[head].push_back({l.name.substr(dot + 1), l.shape});
    }
    for (const auto& head : order) {
      const std::string sub = path.empty() ? head : path + "." + head;
      if (path == "blocks")
        modules.push_back(std::make_unique<bmt::CheckpointBlock<Tree>>(below[head], dtype, sub));
      else
        modules.push_back(std::make_unique<Tree>(below[head], dtype, sub));
      register_module(head, *modules.back());
    }
  }
  bmt::Tensor forward(const bmt::Tensor& x) const { return x; }
};

struct Model : bmt::DistributedModule {
  std::unique_ptr<Tree> tree;
  Model(const ModelConfig& c, DType dtype) {
    std::vector<Leaf> leaves;
    for (const auto& t : stored_tensors(c)) {
      auto shape = t.shape;
      if (t.transposed) std::swap(shape[0], shape[1]);
      leaves.push_back({t.parameter, shape});
    }
    tree = std::make_unique<Tree>(leaves, dtype);
    register_module("m", *tree);
  }
};

// The names are "m.<parameter>" in Model; strip the prefix when comparing.
std::map<std::string, std::vector<float>> gathered(bmt::Module& model) {
  std::map<std::string, std::vector<float>> out;
  for (auto* s : bmt::sharded_storages(model)) {
    bmt::Tensor full = bmt::Tensor::empty({s->total()}, s->dtype());
    s->all_gather_into(full, bmt::context().shard_comm(), bmt::context().compute_stream());
    const auto v = full.to_host_floats();
    for (const auto& e : s->entries())
      out[e.name.substr(2)] = std::vector<float>(v.begin() + e.offset, v.begin() + e.offset + e.numel);
  }
  return out;
}

// The hub mapping with the test model's "m." prefix on the parameters.
bmt::io::HfLayout mapping(const ModelConfig& c) {
  auto layout = bmt::models::hf_layout(c);
  for (auto& x : layout.tensors) x.parameter = "m." + x.parameter;
  return layout;
}

// Every parameter equals what the checkpoint holds for it, element by element.
void expect_loaded(bmt::Module& model, const ModelConfig& c, DType file_dtype, DType model_dtype,
                   const std::string& what, const std::string& gpt2_prefix = "transformer.") {
  const auto got = gathered(model);
  for (const auto& t : stored_tensors(c, gpt2_prefix)) {
    const auto it = got.find(t.parameter);
    ASSERT_NE(it, got.end()) << what << ": no parameter " << t.parameter;
    const auto& v = it->second;
    ASSERT_EQ(static_cast<std::int64_t>(v.size()), numel(t.shape)) << what << ": " << t.parameter;
    const std::int64_t rows = t.shape[0], cols = t.shape.size() > 1 ? t.shape[1] : 1;
    int wrong = 0;
    for (std::int64_t k = 0; k < numel(t.shape); ++k) {
      // A transposed parameter's element (o, i) is stored at (i, o).
      const std::int64_t stored = t.transposed ? (k % rows) * cols + k / rows : k;
      const float want = rounded(rounded(value(t.hub, stored), file_dtype), model_dtype);
      if (v[k] != want && wrong++ < 3)
        ADD_FAILURE() << what << ": " << t.parameter << "[" << k << "] is " << v[k] << ", expected " << want << " ("
                      << t.hub << "[" << stored << "])";
    }
  }
}

ModelConfig parsed(const std::string& dir) { return bmt::models::read_hf_config(dir); }

// ---- Loading ----------------------------------------------------------------------------------

TEST(HfCheckpoint, LoadsGpt2IntoAnyWorldSize) {
  SharedTempDir tmp;
  struct Case {
    WriteOptions write;
    DType model;
  };
  const Case cases[] = {
      {{DType::f32, 1}, DType::f32},
      {{DType::bf16, 1, "transformer.", true}, DType::f32},  // mask buffers are not weights
      {{DType::f32, 3, ""}, DType::bf16},                    // names as GPT2Model saved them; rounded
      {{DType::f16, 2}, DType::f32},
  };
  int n = 0;
  for (const auto& k : cases) {
    const std::string dir = tmp / ("gpt2-" + std::to_string(n++));
    write_checkpoint(dir, gpt2_config(), k.write);
    const ModelConfig c = parsed(dir);
    EXPECT_EQ(c.ffn, 40);
    Model model(c, k.model);
    bmt::init_parameters(model);
    bmt::io::load_hf_checkpoint(model, dir, mapping(c));
    expect_loaded(model, c, k.write.dtype, k.model, dir, k.write.gpt2_prefix);
  }
}

TEST(HfCheckpoint, LoadsLlamaWithGroupedQueryAttention) {
  SharedTempDir tmp;
  int n = 0;
  for (bool tied : {false, true})
    for (DType file : {DType::bf16, DType::f32})
      for (int files : {1, 4}) {
        const std::string dir = tmp / ("llama-" + std::to_string(n++));
        write_checkpoint(dir, llama_config(tied), {file, files});
        const ModelConfig c = parsed(dir);
        ASSERT_EQ(c.kv_heads, 2);
        ASSERT_EQ(c.tie_embeddings, tied);
        EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
        Model model(c, DType::f32);
        bmt::init_parameters(model);
        bmt::io::load_hf_checkpoint(model, dir, mapping(c));
        expect_loaded(model, c, file, DType::f32, dir);
      }
}

// ---- Exporting --------------------------------------------------------------------------------

// Load, export, and compare: each exported tensor holds the bytes the original file held (same
// dtype), the files are transformers' (names, index, metadata, config), and the export loads back.
// With `values_in_f32` the model holds its values in f32 as under an optimizer (AdamW's master
// weights) while it loads and exports.
void check_round_trip(const ModelConfig& base, DType dtype, std::uint64_t max_shard_bytes, bool sharded,
                      bool values_in_f32 = false) {
  SharedTempDir tmp;
  const std::string in = tmp / "in", out = tmp / "out";
  write_checkpoint(in, base, {dtype, 2});
  const ModelConfig c = parsed(in);
  Model model(c, dtype);
  bmt::init_parameters(model);
  if (values_in_f32)
    for (auto* s : bmt::sharded_storages(model)) s->hold_values_in_f32();
  bmt::io::load_hf_checkpoint(model, in, mapping(c));
  // A stale single file from an earlier export must not survive a sharded one (and vice versa).
  if (bmt::rank() == 0) {
    std::filesystem::create_directories(out);
    bmt::test::write_file(out + "/model.safetensors", "stale");
    bmt::test::write_file(out + "/model-00001-of-00009.safetensors", "stale");
  }
  bmt::test::barrier();
  bmt::io::save_hf_checkpoint(model, out, mapping(c), bmt::models::hf_config_json(c), {max_shard_bytes});

  std::map<std::string, RawTensor> original, exported;
  for (const auto& f : std::filesystem::directory_iterator(in))
    if (f.path().extension() == ".safetensors")
      for (auto& [name, t] : read_safetensors(f.path().string())) original[name] = t;
  std::vector<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(out))
    if (f.path().extension() == ".safetensors") files.push_back(f.path().filename().string());
  EXPECT_EQ(files.size() > 1, sharded) << files.size() << " files";
  Json weight_map;
  if (sharded) {
    const Json index = Json::parse(bmt::test::read_file(out + "/model.safetensors.index.json"));
    weight_map = index["weight_map"];
    std::uint64_t total = 0;
    for (const auto& [name, t] : original) total += t.bytes.size();
    EXPECT_EQ(index["metadata"]["total_size"].get<std::uint64_t>(), total);
  } else {
    EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});
    EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors.index.json"));
  }
  for (const auto& f : files) {
    const std::string file = bmt::test::read_file(out + "/" + f);
    std::uint64_t n = 0;
    std::memcpy(&n, file.data(), 8);
    EXPECT_EQ(Json::parse(file.substr(8, n))["__metadata__"]["format"], "pt") << f;
    const auto tensors = read_safetensors(out + "/" + f);
    std::uint64_t bytes = 0;
    for (auto& [name, t] : tensors) {
      if (sharded) EXPECT_EQ(weight_map.value(name, ""), f) << name;
      exported[name] = t;
      bytes += t.bytes.size();
    }
    // Within the limit, or one tensor larger than it alone.
    EXPECT_TRUE(bytes <= max_shard_bytes || tensors.size() == 1) << f << ": " << bytes << " bytes";
  }
  ASSERT_EQ(exported.size(), original.size());
  for (const auto& [name, t] : original) {
    ASSERT_TRUE(exported.count(name)) << name;
    EXPECT_EQ(exported[name].dtype, t.dtype) << name;
    EXPECT_EQ(exported[name].shape, t.shape) << name;
    EXPECT_TRUE(exported[name].bytes == t.bytes) << name << ": the exported bytes differ";
  }
  const Json config = Json::parse(bmt::test::read_file(out + "/config.json"));
  EXPECT_EQ(config["architectures"][0], c.arch == "gpt2" ? "GPT2LMHeadModel" : "LlamaForCausalLM");
  EXPECT_EQ(config["torch_dtype"], dtype == DType::bf16 ? "bfloat16" : "float32");
  EXPECT_EQ(config["vocab_size"], c.vocab);
  if (c.arch == "gpt2") EXPECT_EQ(config["bos_token_id"], 50256);  // kept from the source config
  if (c.arch == "llama") {
    EXPECT_EQ(config["num_key_value_heads"], c.kv_heads);
    EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  }
  // And the export loads back into a fresh model as the same values.
  const ModelConfig again = parsed(out);
  Model reloaded(again, dtype);
  bmt::init_parameters(reloaded);
  bmt::io::load_hf_checkpoint(reloaded, out, mapping(again));
  EXPECT_EQ(gathered(reloaded), gathered(model));
}

TEST(HfCheckpoint, ExportThenImportGivesTheSameBytes) {
  check_round_trip(gpt2_config(), DType::f32, 5'000'000'000, false);
  check_round_trip(gpt2_config(), DType::bf16, 2000, true);
  check_round_trip(gpt2_config(), DType::bf16, 2000, true, /*values_in_f32=*/true);
  check_round_trip(llama_config(false), DType::bf16, 5'000'000'000, false);
  check_round_trip(llama_config(true), DType::f32, 3000, true);
}

// ---- Broken and mismatched checkpoints --------------------------------------------------------

// Loading `dir` into a model of `c` fails on every rank with a message holding `expected`.
void expect_load_error(const std::string& dir, const ModelConfig& c, const std::string& expected) {
  Model model(c, DType::f32);
  bmt::init_parameters(model);
  EXPECT_THAT([&] { bmt::io::load_hf_checkpoint(model, dir, mapping(c)); },
              ThrowsMessage<bmt::Error>(HasSubstr(expected)))
      << dir;
}

TEST(HfCheckpoint, MismatchedCheckpointsNameTheTensor) {
  SharedTempDir tmp;
  const ModelConfig c = llama_config(false);
  // More layers on disk than the model has.
  ModelConfig deeper = c;
  deeper.layers = 3;
  write_checkpoint(tmp / "deeper", deeper, {});
  expect_load_error(tmp / "deeper", c,
                    "tensor 'model.layers.2.input_layernorm.weight' in model.safetensors: expected only the tensors "
                    "of a LlamaForCausalLM of 2 layers, found one it does not have");
  // Fewer.
  ModelConfig shallower = c;
  shallower.layers = 1;
  write_checkpoint(tmp / "shallower", shallower, {});
  expect_load_error(tmp / "shallower", c, "expected tensor 'model.layers.1.input_layernorm.weight'");
  // Another key/value head count: the k/v projections' shapes differ.
  ModelConfig mha = c;
  mha.kv_heads = 4;
  write_checkpoint(tmp / "mha", mha, {DType::f32, 3});
  expect_load_error(tmp / "mha", c,
                    "tensor 'model.layers.0.self_attn.k_proj.weight' in model-00001-of-00003.safetensors: expected "
                    "shape [8, 16] (for m.blocks.0.wk.weight), found [16, 16]");
  // A tied checkpoint into a model with its own head.
  write_checkpoint(tmp / "tied", llama_config(true), {});
  expect_load_error(tmp / "tied", c, "expected tensor 'lm_head.weight' (for m.lm_head");
}

TEST(HfCheckpoint, BrokenFilesEndWithOneLine) {
  SharedTempDir tmp;
  const ModelConfig c = gpt2_config();
  const std::string good = tmp / "good";
  write_checkpoint(good, c, {DType::f32, 2});
  auto variant = [&](const std::string& name, const std::function<void(const std::string&)>& damage) {
    const std::string dir = tmp / name;
    if (bmt::rank() == 0) {
      std::filesystem::copy(good, dir);
      damage(dir);
    }
    bmt::test::barrier();
    return dir;
  };
  // A file cut short.
  expect_load_error(variant("truncated",
                            [](const std::string& d) {
                              const std::string f = d + "/model-00002-of-00002.safetensors";
                              const std::string bytes = bmt::test::read_file(f);
                              bmt::test::write_file(f, bytes.substr(0, bytes.size() - 10));
                            }),
                    c, "model-00002-of-00002.safetensors");
  // An index naming a file that is not there.
  expect_load_error(variant("missing-file",
                            [](const std::string& d) {
                              std::filesystem::remove(d + "/model-00002-of-00002.safetensors");
                            }),
                    c, "model-00002-of-00002.safetensors': cannot open");
  // An index that places a tensor in the wrong file.
  expect_load_error(variant("wrong-file",
                            [](const std::string& d) {
                              Json index = Json::parse(bmt::test::read_file(d + "/model.safetensors.index.json"));
                              index["weight_map"]["transformer.ln_f.bias"] = "model-00001-of-00002.safetensors";
                              bmt::test::write_file(d + "/model.safetensors.index.json", index.dump());
                            }),
                    c, "expected tensor 'transformer.ln_f.bias' in model-00001-of-00002.safetensors (as "
                       "model.safetensors.index.json says), found no such tensor there");
  expect_load_error(variant("bad-index",
                            [](const std::string& d) {
                              bmt::test::write_file(d + "/model.safetensors.index.json", "{\"weight_map\": [");
                            }),
                    c, "model.safetensors.index.json': expected valid JSON");
  // No weights at all.
  expect_load_error(variant("empty",
                            [](const std::string& d) {
                              std::filesystem::remove(d + "/model.safetensors.index.json");
                              std::filesystem::remove(d + "/model-00001-of-00002.safetensors");
                              std::filesystem::remove(d + "/model-00002-of-00002.safetensors");
                            }),
                    c, "expected model.safetensors or model.safetensors.index.json, found neither");
  // A weight stored as integers.
  const std::string ints = tmp / "ints";
  if (bmt::rank() == 0) {
    std::filesystem::create_directories(ints);
    std::vector<RawTensor> tensors;
    for (const auto& t : stored_tensors(c)) {
      RawTensor r{t.hub, t.hub == "transformer.ln_f.weight" ? "I32" : "F32", t.shape, {}};
      r.bytes.assign(static_cast<std::size_t>(numel(t.shape)) * 4, '\0');
      tensors.push_back(r);
    }
    bmt::test::write_file(ints + "/model.safetensors", safetensors_bytes(tensors));
  }
  bmt::test::barrier();
  expect_load_error(ints, c, "tensor 'transformer.ln_f.weight' in model.safetensors: expected dtype F32, BF16 or F16, found I32");
}

// ---- config.json ------------------------------------------------------------------------------

TEST(HfConfig, ReleasedConfigs) {
  // openai-community/gpt2's config.json.
  const auto gpt2 = bmt::models::parse_hf_config(
      Json::parse(R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
        "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": true, "summary_type": "cls_index",
        "summary_use_proj": true, "vocab_size": 50257})"),
      "gpt2");
  EXPECT_EQ(gpt2.vocab, 50257);
  EXPECT_EQ(gpt2.ffn, 3072);  // n_inner absent: 4 n_embd
  EXPECT_EQ(gpt2.max_seq, 1024);
  EXPECT_TRUE(gpt2.tie_embeddings);
  // meta-llama/Llama-3.2-1B's.
  const auto llama = bmt::models::parse_hf_config(
      Json::parse(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
        "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
        "vocab_size": 128256})"),
      "llama");
  EXPECT_EQ(llama.kv_heads, 8);
  EXPECT_EQ(llama.head_dim(), 64);
  EXPECT_DOUBLE_EQ(llama.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(llama.rope.factor, 32.0);
  EXPECT_EQ(llama.rope.original_max_positions, 8192);
  EXPECT_TRUE(llama.tie_embeddings);
  EXPECT_EQ(llama.dtype, DType::bf16);
  // Written back: what from_pretrained reads, the source's other keys kept.
  const Json back = bmt::models::hf_config_json(llama);
  EXPECT_EQ(back["bos_token_id"], 128000);
  EXPECT_EQ(back["num_key_value_heads"], 8);
  EXPECT_EQ(bmt::models::parse_hf_config(back, "again").rope.factor, 32.0);
  // transformers 5 keeps rope_theta and the scaling in rope_parameters; an export keeps that form.
  Json v5 = Json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, "tie_word_embeddings": true,
    "dtype": "bfloat16"})");
  const auto five = bmt::models::parse_hf_config(v5, "v5");
  EXPECT_DOUBLE_EQ(five.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(five.rope.factor, 32.0);
  EXPECT_EQ(five.rope.original_max_positions, 8192);
  EXPECT_EQ(five.dtype, DType::bf16);
  const Json five_back = bmt::models::hf_config_json(five);
  EXPECT_EQ(five_back["rope_parameters"]["rope_theta"], 500000.0);
  EXPECT_EQ(five_back["rope_parameters"]["rope_type"], "llama3");
  EXPECT_FALSE(five_back.contains("rope_scaling"));
  EXPECT_EQ(five_back["dtype"], "bfloat16");
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  const auto plain = bmt::models::parse_hf_config(v5, "v5 default");
  EXPECT_DOUBLE_EQ(plain.rope.theta, 10000.0);
  EXPECT_EQ(plain.rope.factor, 0.0);
}

TEST(HfConfig, WhatBmtrainDoesNotComputeIsAnError) {
  const Json llama = llama_json(llama_config(false));
  auto fails = [](Json j, const std::string& expected) {
    EXPECT_THAT([&] { bmt::models::parse_hf_config(j, "config.json 'x'"); },
                ThrowsMessage<bmt::Error>(HasSubstr(expected)));
  };
  Json j = llama;
  j["attention_bias"] = true;
  fails(j, "config.json 'x': expected 'attention_bias' false (projections without biases), found true");
  j = llama;
  j["hidden_act"] = "gelu";
  fails(j, "expected hidden_act silu (SwiGLU), found 'gelu'");
  j = llama;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  fails(j, "rope_scaling: expected rope_type llama3 or default, found 'yarn'");
  j = llama;
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 10000.0}};
  fails(j, "rope_parameters: expected rope_type llama3 or default, found 'linear'");
  j = llama;
  j["num_key_value_heads"] = 3;
  fails(j, "expected key/value heads dividing the 4 heads, found 3");
  j = llama;
  j.erase("hidden_size");
  fails(j, "expected a positive integer 'hidden_size', found none");
  j = llama;
  j["vocab_size"] = "41";
  fails(j, "expected a positive integer 'vocab_size' of at most 16777216, found \"41\"");
  j = llama;
  j["vocab_size"] = std::int64_t{1} << 31;  // once taken, and past int32 in the token ids
  fails(j, "expected a positive integer 'vocab_size' of at most 16777216, found 2147483648");
  j = llama;
  j["num_hidden_layers"] = 1 << 24;  // each size within the cap, the parameter count not
  j["hidden_size"] = 1 << 24;
  j["intermediate_size"] = 1 << 24;
  fails(j, "model dimensions: expected at most 2^60 parameters, found up to");
  j = llama;
  j["model_type"] = "mistral";
  fails(j, "expected model_type gpt2 or llama (GPT2LMHeadModel, LlamaForCausalLM), found 'mistral'");
  j = gpt2_json(gpt2_config());
  j["activation_function"] = "relu";
  fails(j, "expected activation_function gelu_new (GELU, tanh form), found 'relu'");
  j = gpt2_json(gpt2_config());
  j["scale_attn_by_inverse_layer_idx"] = true;
  fails(j, "expected 'scale_attn_by_inverse_layer_idx' false");
}

}  // namespace
