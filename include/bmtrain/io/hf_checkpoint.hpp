#pragma once
// Hugging Face checkpoint directories in and out, in parallel, with no rank ever holding the
// whole model: a directory with config.json and either model.safetensors or the sharded
// model-0000N-of-0000M.safetensors with model.safetensors.index.json, in the hub's tensor names
// and layouts, as transformers' save_pretrained writes and from_pretrained reads them.
//
//   const auto config = bmt::io::read_hf_config("gpt2/");
//   ... build a model of that shape, bmt::init_parameters(model) ...
//   bmt::io::load_hf_checkpoint(model, "gpt2/", config);          // collective
//   bmt::io::save_hf_checkpoint(model, "export/", config);        // collective
//
// The model side: bmtrain's reference GPT-2 and Llama, the parameter names bmt-train's models use
// (hf_tensor_names lists them). Any model with those names and shapes loads and exports; other
// models pass their own list of HfTensor to the functions taking one.
//
// Reading: every rank opens the checkpoint's files (rank 0 reads each header and shares it) and
// reads only the elements of its own shards, converting bf16/f16/f32 on disk to the model's dtype
// (rounding where the model's is narrower). A GPT-2 Conv1D weight is stored [in, out] for the
// model's [out, in]; a rank reads, of each stored row, the run of columns its shard covers (at
// most two model rows more than its shard). Before reading, the whole checkpoint is checked
// against the model on every rank alike: a missing or unexpected tensor, another shape or a
// non-floating dtype ends the load with one line naming the tensor, what was expected and what
// was found; so do a missing or invalid config, index or safetensors file.
//
// Writing: one file, or files of at most max_shard_bytes each (a larger tensor alone in its file)
// with the index, each written by all ranks at once through MPI-IO (each rank its own elements);
// config.json from hf_config_json. Files of an earlier export that this one does not write are
// removed, so that from_pretrained cannot pick them up.
#include <cstdint>
#include <string>
#include <vector>

#include "bmtrain/io/hf_config.hpp"
#include "bmtrain/nn/module.hpp"

namespace bmt::io {

// One model parameter and the hub tensor that holds it.
struct HfTensor {
  std::string parameter;    // the model's dotted name: "blocks.0.attn.weight"
  std::string hub;          // the checkpoint's: "transformer.h.0.attn.c_attn.weight"
  bool transposed = false;  // stored [in, out] for the parameter's [out, in] (GPT-2's Conv1D)
};

// The tensors of `config`'s model, in the order an export writes them. GPT-2 ("transformer."
// names, as GPT2LMHeadModel saves them):
//   wte <- transformer.wte.weight, wpe <- transformer.wpe.weight, ln_f.{weight,bias};
//   blocks.N.{ln_1,ln_2}.{weight,bias} <- transformer.h.N.{ln_1,ln_2}.*,
//   blocks.N.attn <- h.N.attn.c_attn (fused Q, K, V), blocks.N.attn_proj <- h.N.attn.c_proj,
//   blocks.N.mlp_fc <- h.N.mlp.c_fc, blocks.N.mlp_proj <- h.N.mlp.c_proj (weights transposed).
// Llama ("model." names):
//   wte <- model.embed_tokens.weight, norm.weight <- model.norm.weight,
//   blocks.N.attention_norm <- model.layers.N.input_layernorm,
//   blocks.N.{wq,wk,wv,wo} <- model.layers.N.self_attn.{q,k,v,o}_proj,
//   blocks.N.ffn_norm <- model.layers.N.post_attention_layernorm,
//   blocks.N.{w1,w3,w2} <- model.layers.N.mlp.{gate,up,down}_proj.
// An untied head: lm_head <- lm_head.weight. The q/k projections keep transformers' layout: its
// rotary embedding pairs dimensions (i, i + D/2) of a head, as bmt::rotary_embedding does.
std::vector<HfTensor> hf_tensor_names(const HfModelConfig& config);

// Whether a checkpoint of `config`'s model may hold `hub` without it being a weight of the model:
// GPT-2's attention mask buffers (h.N.attn.bias, h.N.attn.masked_bias), Llama's rotary_emb.inv_freq,
// and lm_head.weight when the head is tied to the embedding.
bool hf_ignored_tensor(const HfModelConfig& config, const std::string& hub);

// Collective. Fills every parameter of `model` from the checkpoint in `dir` (config.json is not
// read: `config` describes the model). GPT-2 names are accepted with or without "transformer.".
void load_hf_checkpoint(Module& model, const std::string& dir, const HfModelConfig& config);
void load_hf_checkpoint(Module& model, const std::string& dir, const HfModelConfig& config,
                        const std::vector<HfTensor>& tensors);

struct HfExportOptions {
  std::uint64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size, "5GB"
};

// Collective. Writes `dir` (created if needed): config.json (hf_config_json(config), with the
// model's dtype as torch_dtype) and the weights in the model's dtype. An earlier export's
// config.json is removed first and the new one written last, so a directory with a config.json
// holds a whole export.
void save_hf_checkpoint(Module& model, const std::string& dir, const HfModelConfig& config,
                        const HfExportOptions& options = {});
void save_hf_checkpoint(Module& model, const std::string& dir, const HfModelConfig& config,
                        const std::vector<HfTensor>& tensors, const HfExportOptions& options = {});

}  // namespace bmt::io
