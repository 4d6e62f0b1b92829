#pragma once
// Llama's transformer block: x + attn(rms(x)) with rotary q/k (k and v with kv_heads heads:
// grouped-query attention), then x + W2(silu(W1 x) * W3 x). No biases. Written only with
// bmtrain's public layers; a TransformerBlockList shards, gathers and recomputes it.
#include <vector>

#include "bmtrain/io/hf_checkpoint.hpp"
#include "bmtrain/models/model_config.hpp"
#include "bmtrain/nn/layers.hpp"

namespace bmt::models {

struct LlamaBlock : Module {
  ModelConfig c;
  nn::RMSNorm attn_norm, ffn_norm;
  nn::Linear wq, wk, wv, wo, w1, w2, w3;

  explicit LlamaBlock(const ModelConfig& cfg);

  // The block's parameters and the tensors of transformers' LlamaDecoderLayer that hold them,
  // both relative to the block ("wq.weight" <- "self_attn.q_proj.weight"). The q/k projections
  // keep transformers' layout: its rotary embedding pairs dimensions (i, i + D/2) of a head, as
  // bmt::rotary_embedding does.
  static std::vector<io::HfTensor> hf_tensors();

  Tensor forward(const Tensor& x) const;

  // The block's matrix products (wq, wk, wv, wo, w1, w2, w3): what CausalLMOptions::fp8 runs in FP8.
  std::vector<nn::Linear*> linear_layers() { return {&wq, &wk, &wv, &wo, &w1, &w2, &w3}; }
};

}  // namespace bmt::models
