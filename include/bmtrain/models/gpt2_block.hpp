#pragma once
// GPT-2's transformer block, pre-norm: x + attn(ln_1(x)), then x + mlp(ln_2(x)), with the fused
// QKV projection, GELU (tanh form) and learned biases. Written only with bmtrain's public layers,
// as a user's block would be; a TransformerBlockList shards, gathers and recomputes it.
#include <vector>

#include "bmtrain/io/hf_checkpoint.hpp"
#include "bmtrain/models/model_config.hpp"
#include "bmtrain/nn/layers.hpp"

namespace bmt::models {

struct GPT2Block : Module {
  ModelConfig c;
  nn::LayerNorm ln_1, ln_2;
  nn::Linear c_attn, attn_proj, c_fc, mlp_proj;

  explicit GPT2Block(const ModelConfig& cfg);

  // The block's parameters and the tensors of transformers' GPT2Block that hold them, both
  // relative to the block ("ln_1.weight" <- "ln_1.weight"); the projections are Conv1D there,
  // stored [in, out].
  static std::vector<io::HfTensor> hf_tensors();

  Tensor forward(const Tensor& x) const;

  // The block's matrix products (c_attn, attn_proj, c_fc, mlp_proj): what CausalLMOptions::fp8 runs in FP8.
  std::vector<nn::Linear*> linear_layers() { return {&c_attn, &attn_proj, &c_fc, &mlp_proj}; }

 private:
  // x + dropout(proj(y)), or x + dropout(proj(gelu(y))).
  Tensor residual(const Tensor& x, const nn::Linear& proj, const Tensor& y, bool gelu_first = false) const;
  Tensor dropout(const Tensor& x) const;
};

}  // namespace bmt::models
