#pragma once
// Hugging Face model configurations (a checkpoint directory's config.json) of the two
// architectures bmtrain reads and writes: GPT-2 (GPT2LMHeadModel) and Llama (LlamaForCausalLM,
// with grouped-query attention, rope_theta and Llama 3's rope_scaling).
//
//   bmt::io::HfModelConfig c = bmt::io::read_hf_config("TinyLlama-1.1B/");  // reads config.json
//   c.layers, c.heads, c.kv_heads, ...
//   nlohmann::json j = bmt::io::hf_config_json(c);                        // for an export
//
// Parsing is strict about what changes the numbers: a config that asks for something bmtrain does
// not compute (another activation, attention or MLP biases in Llama, another rope scaling, GPT-2's
// attention scaled by layer index) is an error naming the key, what was expected and what was
// found, never a model that silently computes something else. Keys that do not change the model's
// function (token ids, dropout rates, use_cache, ...) are kept in `source` and written back.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt::io {

struct HfModelConfig {
  std::string arch;  // "gpt2" or "llama"
  std::int64_t vocab = 0;
  std::int64_t hidden = 0;         // model width
  std::int64_t layers = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;       // key/value heads (GPT-2: = heads)
  std::int64_t intermediate = 0;   // MLP hidden size
  std::int64_t max_positions = 0;  // GPT-2's n_positions, Llama's max_position_embeddings
  double norm_eps = 1e-5;          // layer_norm_epsilon / rms_norm_eps
  double rope_theta = 10000.0;     // Llama
  // Llama 3's rope_scaling (rope_type "llama3"); rope_factor 0: none.
  double rope_factor = 0.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  std::int64_t rope_original_max_positions = 8192;
  bool tie_word_embeddings = true;  // the head is the token embedding
  DType dtype = DType::f32;         // torch_dtype: the dtype the weights were saved in
  // The file's JSON object as read (empty for a config made in code): hf_config_json starts from it.
  nlohmann::json source;

  std::int64_t head_dim() const { return heads > 0 ? hidden / heads : 0; }
  // Throws bmt::Error naming the first inconsistent field (heads not dividing the width, ...).
  void validate() const;
};

// Parses a config.json object; `where` names it in errors ("config.json 'dir/config.json'").
HfModelConfig parse_hf_config(const nlohmann::json& j, const std::string& where);

// Local: parses `dir`/config.json.
HfModelConfig read_hf_config(const std::string& dir);

// The config.json transformers' from_pretrained reads for this model: `source` with every field
// bmtrain models set from `config`, architectures and model_type included.
nlohmann::json hf_config_json(const HfModelConfig& config);

// "float32", "bfloat16", "float16" (torch's names) for a floating dtype.
const char* torch_dtype_name(DType dtype);

}  // namespace bmt::io
