#pragma once
// Llama's transformer block: x + attn(rms(x)) with rotary q/k (k and v with kv_heads heads:
// grouped-query attention), then x + W2(silu(W1 x) * W3 x). No biases. Written only with
// bmtrain's public layers; a TransformerBlockList shards, gathers and recomputes it.
//
// Tensor-parallel over the mesh's tp group (nn/tensor_parallel.hpp): q is split by heads; k and v
// are split by heads when kv_heads % tp == 0, and otherwise (tp % kv_heads == 0) replicated, each
// rank computing the one key/value head its query heads read. W1 and W3 are column-parallel on one
// gathered input, wo and W2 row-parallel, the norms replicated. At tp 1 it computes what the plain
// layers do, with the same parameter names.
#include <memory>
#include <vector>

#include "bmtrain/io/hf_checkpoint.hpp"
#include "bmtrain/models/block_rows.hpp"
#include "bmtrain/models/model_config.hpp"
#include "bmtrain/nn/tensor_parallel.hpp"

namespace bmt::models {

struct LlamaBlock : Module {
  ModelConfig c;
  nn::SequenceParallelRMSNorm attn_norm, ffn_norm;
  nn::ColumnParallelLinear wq;
  // k and v: column-parallel when split, replicated otherwise (exactly one of each pair is built).
  std::unique_ptr<nn::ColumnParallelLinear> wk, wv;
  std::unique_ptr<nn::ReplicatedLinear> wk_whole, wv_whole;
  nn::RowParallelLinear wo;
  nn::ColumnParallelLinear w1, w3;
  nn::RowParallelLinear w2;

  explicit LlamaBlock(const ModelConfig& cfg);

  // The block's parameters and the tensors of transformers' LlamaDecoderLayer that hold them,
  // both relative to the block ("wq.weight" <- "self_attn.q_proj.weight"). The q/k projections
  // keep transformers' layout: its rotary embedding pairs dimensions (i, i + D/2) of a head, as
  // bmt::rotary_embedding does.
  static std::vector<io::HfTensor> hf_tensors();

  // x [B, T, C] at tp 1, or this rank's sequence-parallel rows [B*T/tp, C] of a batch of `batch`
  // sequences; returns the same form.
  Tensor forward(const Tensor& x, std::int64_t batch = 0) const;

  // The block's matrix products (wq, wk, wv, wo, w1, w2, w3) in FP8 or not: what
  // CausalLMOptions::fp8 switches.
  void set_fp8(bool on);

 private:
  Tensor forward_rows(const Tensor& rows, std::int64_t batch) const;
  // k or v of this rank's query heads from the gathered rows x: [N, local kv heads * D].
  Tensor key_value(const std::unique_ptr<nn::ColumnParallelLinear>& split,
                   const std::unique_ptr<nn::ReplicatedLinear>& whole, const Tensor& x) const;
};

}  // namespace bmt::models
