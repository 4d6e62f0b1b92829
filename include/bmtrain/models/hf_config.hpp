#pragma once
// Hugging Face model configurations (a checkpoint directory's config.json) of the two
// architectures bmtrain builds, GPT-2 (GPT2LMHeadModel) and Llama (LlamaForCausalLM, with
// grouped-query attention, rope_theta and Llama 3's rope_scaling), read into and written from the
// one ModelConfig.
//
//   bmt::models::ModelConfig c = bmt::models::read_hf_config("TinyLlama-1.1B/");  // reads config.json
//   nlohmann::json j = bmt::models::hf_config_json(c);                            // for an export
//
// Parsing is strict about what changes the numbers: a config that asks for something bmtrain does
// not compute (another activation, attention or MLP biases in Llama, another rope scaling, GPT-2's
// attention scaled by layer index) is an error naming the key, what was expected and what was
// found, never a model that silently computes something else. Keys that do not change the model's
// function (token ids, dropout rates, use_cache, ...) are kept in ModelConfig::hf_source and
// written back.
#include <nlohmann/json.hpp>
#include <string>

#include "bmtrain/models/model_config.hpp"

namespace bmt::models {

// Parses a config.json object; `where` names it in errors ("config.json 'dir/config.json'"). The
// dtype is the file's torch_dtype (the dtype its weights were saved in).
ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& where);

// Local: parses `dir`/config.json.
ModelConfig read_hf_config(const std::string& dir);

// The config.json transformers' from_pretrained reads for this model, torch_dtype the model's
// dtype: hf_source with every key that describes the model set from `config`.
nlohmann::json hf_config_json(const ModelConfig& config);

// "GPT2LMHeadModel" or "LlamaForCausalLM".
const char* hf_model_class(const ModelConfig& config);

}  // namespace bmt::models
