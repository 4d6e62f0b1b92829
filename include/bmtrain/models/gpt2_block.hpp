#pragma once
// GPT-2's transformer block, pre-norm: x + attn(ln_1(x)), then x + mlp(ln_2(x)), with the fused
// QKV projection, GELU (tanh form) and learned biases. Written only with bmtrain's public layers,
// as a user's block would be; a TransformerBlockList shards, gathers and recomputes it.
//
// Tensor-parallel over the mesh's tp group (nn/tensor_parallel.hpp): the fused QKV projection is
// column-parallel in parts {C, C, C}, so each rank holds its heads of q, k and v; the MLP's first
// projection is column-parallel, both output projections row-parallel, the norms replicated. At
// tp 1 it computes what the plain layers do, with the same parameter names.
#include <vector>

#include "bmtrain/io/hf_checkpoint.hpp"
#include "bmtrain/models/block_rows.hpp"
#include "bmtrain/models/model_config.hpp"
#include "bmtrain/nn/tensor_parallel.hpp"

namespace bmt::models {

struct GPT2Block : Module {
  ModelConfig c;
  nn::SequenceParallelLayerNorm ln_1, ln_2;
  nn::ColumnParallelLinear c_attn, c_fc;
  nn::RowParallelLinear attn_proj, mlp_proj;

  explicit GPT2Block(const ModelConfig& cfg);

  // The block's parameters and the tensors of transformers' GPT2Block that hold them, both
  // relative to the block ("ln_1.weight" <- "ln_1.weight"); the projections are Conv1D there,
  // stored [in, out].
  static std::vector<io::HfTensor> hf_tensors();

  // x [B, T, C] at tp 1, or this rank's sequence-parallel rows [B*T/tp, C] of a batch of `batch`
  // sequences; returns the same form.
  Tensor forward(const Tensor& x, std::int64_t batch = 0) const;

  // The block's matrix products (c_attn, attn_proj, c_fc, mlp_proj) in FP8 or not: what
  // CausalLMOptions::fp8 switches.
  void set_fp8(bool on);

 private:
  Tensor forward_rows(const Tensor& rows, std::int64_t batch) const;
  // x + dropout(proj(y)), or x + dropout(proj(gelu(y))).
  Tensor residual(const Tensor& x, const nn::RowParallelLinear& proj, const Tensor& y, bool gelu_first = false) const;
  Tensor dropout(const Tensor& x) const;
};

}  // namespace bmt::models
