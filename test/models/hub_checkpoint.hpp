#pragma once
// Small Hugging Face checkpoints for tests, written as transformers' save_pretrained writes them
// (config.json, the hub's tensor names and layouts, single-file or sharded with an index, f32,
// bf16 or f16) by code of the tests' own, so that the library's reader and writer are checked
// against something they did not produce. Values are a pure function of (tensor name, element).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bmtrain/models/models.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/half.hpp"
#include "common/io_test_util.hpp"

namespace hub_checkpoint {

using bmt::DType;
using bmt::models::ModelConfig;
using Json = nlohmann::json;

// A tensor of the hub checkpoint and the model parameter it holds, with the stored shape. The
// table is the test's own reading of transformers' GPT2LMHeadModel and LlamaForCausalLM.
struct Stored {
  std::string hub, parameter;
  std::vector<std::int64_t> shape;  // as stored
  bool transposed;                  // Conv1D: stored [in, out], the parameter is [out, in]
};

inline std::vector<Stored> stored_tensors(const ModelConfig& c, const std::string& gpt2_prefix = "transformer.") {
  const std::int64_t V = c.vocab, C = c.dim, F = c.ffn, D = c.dim / c.heads, K = c.kv_head_count() * D;
  std::vector<Stored> t;
  if (c.arch == "gpt2") {
    const std::string p = gpt2_prefix;
    t.push_back({p + "wte.weight", "wte", {V, C}, false});
    t.push_back({p + "wpe.weight", "wpe", {c.max_seq, C}, false});
    for (std::int64_t l = 0; l < c.layers; ++l) {
      const std::string h = p + "h." + std::to_string(l) + ".", b = "blocks." + std::to_string(l) + ".";
      t.push_back({h + "ln_1.weight", b + "ln_1.weight", {C}, false});
      t.push_back({h + "ln_1.bias", b + "ln_1.bias", {C}, false});
      t.push_back({h + "attn.c_attn.weight", b + "attn.weight", {C, 3 * C}, true});
      t.push_back({h + "attn.c_attn.bias", b + "attn.bias", {3 * C}, false});
      t.push_back({h + "attn.c_proj.weight", b + "attn_proj.weight", {C, C}, true});
      t.push_back({h + "attn.c_proj.bias", b + "attn_proj.bias", {C}, false});
      t.push_back({h + "ln_2.weight", b + "ln_2.weight", {C}, false});
      t.push_back({h + "ln_2.bias", b + "ln_2.bias", {C}, false});
      t.push_back({h + "mlp.c_fc.weight", b + "mlp_fc.weight", {C, F}, true});
      t.push_back({h + "mlp.c_fc.bias", b + "mlp_fc.bias", {F}, false});
      t.push_back({h + "mlp.c_proj.weight", b + "mlp_proj.weight", {F, C}, true});
      t.push_back({h + "mlp.c_proj.bias", b + "mlp_proj.bias", {C}, false});
    }
    t.push_back({p + "ln_f.weight", "ln_f.weight", {C}, false});
    t.push_back({p + "ln_f.bias", "ln_f.bias", {C}, false});
  } else {
    t.push_back({"model.embed_tokens.weight", "wte", {V, C}, false});
    for (std::int64_t l = 0; l < c.layers; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".", b = "blocks." + std::to_string(l) + ".";
      t.push_back({h + "input_layernorm.weight", b + "attention_norm.weight", {C}, false});
      t.push_back({h + "self_attn.q_proj.weight", b + "wq.weight", {C, C}, false});
      t.push_back({h + "self_attn.k_proj.weight", b + "wk.weight", {K, C}, false});
      t.push_back({h + "self_attn.v_proj.weight", b + "wv.weight", {K, C}, false});
      t.push_back({h + "self_attn.o_proj.weight", b + "wo.weight", {C, C}, false});
      t.push_back({h + "post_attention_layernorm.weight", b + "ffn_norm.weight", {C}, false});
      t.push_back({h + "mlp.gate_proj.weight", b + "w1.weight", {F, C}, false});
      t.push_back({h + "mlp.up_proj.weight", b + "w3.weight", {F, C}, false});
      t.push_back({h + "mlp.down_proj.weight", b + "w2.weight", {C, F}, false});
    }
    t.push_back({"model.norm.weight", "norm.weight", {C}, false});
  }
  if (!c.tie_embeddings) t.push_back({"lm_head.weight", "lm_head", {V, C}, false});
  return t;
}

inline std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// The value written at element k of hub tensor `name`, before rounding to the file's dtype.
inline float value(const std::string& name, std::int64_t k) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  h ^= static_cast<std::uint64_t>(k) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<double>(h % 2000001) / 1000000.0 - 1.0);  // [-1, 1]
}

inline float rounded(float v, DType dtype) {
  if (dtype == DType::bf16) return bmt::bf16_t::to_float(bmt::bf16_t::from_float(v));
  if (dtype == DType::f16) return bmt::f16_t::to_float(bmt::f16_t::from_float(v));
  return v;
}

inline const char* code_of(DType dtype) { return dtype == DType::bf16 ? "BF16" : dtype == DType::f16 ? "F16" : "F32"; }

inline void append_value(std::string& data, float v, DType dtype) {
  if (dtype == DType::f32) {
    data.append(reinterpret_cast<const char*>(&v), 4);
  } else if (dtype == DType::bf16) {
    const auto b = bmt::bf16_t::from_float(v);
    data.append(reinterpret_cast<const char*>(&b), 2);
  } else {
    const auto b = bmt::f16_t::from_float(v);
    data.append(reinterpret_cast<const char*>(&b), 2);
  }
}

// One safetensors file: the JSON header (8-byte aligned), then the tensors in order.
struct RawTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};
inline std::string safetensors_bytes(const std::vector<RawTensor>& tensors) {
  Json header = {{"__metadata__", {{"format", "pt"}}}};
  std::uint64_t offset = 0;
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
    data += t.bytes;
  }
  std::string json = header.dump();
  while ((8 + json.size()) % 8) json += ' ';
  const std::uint64_t n = json.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + json + data;
}

// The tensors of a safetensors file by name (the test's own reading of the format).
inline std::map<std::string, RawTensor> read_safetensors(const std::string& path) {
  const std::string file = bmt::test::read_file(path);
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const Json header = Json::parse(file.substr(8, n));
  std::map<std::string, RawTensor> out;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const auto begin = t["data_offsets"][0].get<std::uint64_t>(), end = t["data_offsets"][1].get<std::uint64_t>();
    out[name] = {name, t["dtype"].get<std::string>(), t["shape"].get<std::vector<std::int64_t>>(),
                 file.substr(8 + n + begin, end - begin)};
  }
  return out;
}

inline Json gpt2_json(const ModelConfig& c) {
  return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"},   {"vocab_size", c.vocab},
          {"n_embd", c.dim},                   {"n_layer", c.layers},     {"n_head", c.heads},
          {"n_inner", c.ffn},            {"n_positions", c.max_seq}, {"n_ctx", c.max_seq},
          {"layer_norm_epsilon", 1e-5},           {"activation_function", "gelu_new"},
          {"bos_token_id", 50256},                {"eos_token_id", 50256},   {"torch_dtype", "float32"}};
}

inline Json llama_json(const ModelConfig& c) {
  Json j = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", c.vocab},
            {"hidden_size", c.dim},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", c.kv_head_count()},
            {"intermediate_size", c.ffn},
            {"max_position_embeddings", c.max_seq},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 500000.0},
            {"rope_scaling",
             {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
              {"original_max_position_embeddings", 64}}},
            {"tie_word_embeddings", c.tie_embeddings},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"torch_dtype", "bfloat16"}};
  return j;
}

inline ModelConfig gpt2_config() {
  ModelConfig c;
  c.arch = "gpt2";
  c.vocab = 37;  // a multiple of nothing
  c.dim = 16;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 2;
  c.ffn = 40;
  c.max_seq = 12;
  return c;
}

inline ModelConfig llama_config(bool tied) {
  ModelConfig c;
  c.arch = "llama";
  c.vocab = 41;
  c.dim = 16;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;  // grouped-query
  c.ffn = 24;
  c.max_seq = 32;
  c.tie_embeddings = tied;
  return c;
}

struct WriteOptions {
  DType dtype = DType::f32;
  int files = 1;  // > 1: sharded with an index
  std::string gpt2_prefix = "transformer.";
  bool gpt2_mask_buffers = false;  // h.N.attn.bias, as the hub's original gpt2 files hold
  float scale = 1.0f;              // values scale * value(name, k)
};

// Rank 0 writes the checkpoint; every rank returns once it is on disk.
inline void write_checkpoint(const std::string& dir, const ModelConfig& c, const WriteOptions& o) {
  if (bmt::rank() == 0) {
    std::filesystem::create_directories(dir);
    bmt::test::write_file(dir + "/config.json", (c.arch == "gpt2" ? gpt2_json(c) : llama_json(c)).dump(2));
    std::vector<std::vector<RawTensor>> files(static_cast<std::size_t>(o.files));
    Json weight_map = Json::object();
    std::size_t i = 0;
    auto file_name = [&](std::size_t f) {
      if (o.files == 1) return std::string("model.safetensors");
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05d.safetensors", f + 1, o.files);
      return std::string(name);
    };
    for (const auto& t : stored_tensors(c, o.gpt2_prefix)) {
      RawTensor r{t.hub, code_of(o.dtype), t.shape, {}};
      for (std::int64_t k = 0; k < numel(t.shape); ++k) append_value(r.bytes, o.scale * value(t.hub, k), o.dtype);
      const std::size_t f = i++ % files.size();
      weight_map[t.hub] = file_name(f);
      files[f].push_back(std::move(r));
    }
    if (o.gpt2_mask_buffers)
      for (std::int64_t l = 0; l < c.layers; ++l) {
        RawTensor mask{o.gpt2_prefix + "h." + std::to_string(l) + ".attn.bias", "F32", {1, 1, 4, 4}, {}};
        for (int k = 0; k < 16; ++k) append_value(mask.bytes, 1.0f, DType::f32);
        weight_map[mask.name] = file_name(0);
        files[0].push_back(std::move(mask));
      }
    for (std::size_t f = 0; f < files.size(); ++f) bmt::test::write_file(dir + "/" + file_name(f), safetensors_bytes(files[f]));
    if (o.files > 1)
      bmt::test::write_file(dir + "/model.safetensors.index.json",
                            Json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
  }
  bmt::test::barrier();
}

}  // namespace hub_checkpoint
