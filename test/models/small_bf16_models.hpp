#pragma once
// Two small bf16 models the FP8 tests run: GPT-2 ("tiny", 2 blocks) and a grouped-query Llama
// (4 heads over 2 key/value heads, an untied head).
#include <bmtrain/models/models.hpp>

namespace bmt_test {

inline bmt::models::ModelConfig small_gpt2() {
  bmt::models::ModelConfig c = bmt::models::preset("tiny");
  c.layers = 2;
  c.dtype = bmt::DType::bf16;
  return c;
}

inline bmt::models::ModelConfig small_llama() {
  bmt::models::ModelConfig c;
  c.arch = "llama";
  c.vocab = 97;
  c.max_seq = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.dim = 32;
  c.ffn = 80;
  c.tie_embeddings = false;
  c.dtype = bmt::DType::bf16;
  return c;
}

}  // namespace bmt_test
