#pragma once
// The one description of a model bmtrain builds: GPT-2 (LayerNorm, GELU, learned positions, a head
// tied to the token embedding) or Llama (RMSNorm, SwiGLU, rotary embeddings with Llama 3's frequency
// scaling, grouped-query attention, a head of its own or tied). Presets name the usual shapes;
// a Hugging Face config.json reads into the same struct (hf_config.hpp), and a checkpoint records
// it as JSON (to_json / from_json below).
//
//   bmt::models::ModelConfig c = bmt::models::preset("gpt2-124m");
//   c.dtype = bmt::DType::bf16;
//   bmt::models::CausalLM model(c);
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bmtrain/nn/init.hpp"
#include "bmtrain/ops/rotary.hpp"
#include "bmtrain/runtime/dtype.hpp"

namespace bmt::models {

// The largest size (vocabulary, positions, layers, heads, width, MLP) a Hugging Face config.json or
// a bmt-train flag may give: far beyond any real model, and small enough that a product of two fits
// in 64 bits many times over and a token id below the vocabulary in 32. ModelConfig::validate
// holds the vocabulary to it and the parameter count to kMaxParameters.
constexpr std::int64_t kMaxModelSize = std::int64_t{1} << 24;
// The most parameters a configuration may have (2^60, far beyond any real model), so that
// parameter_count and the products it sums fit in 64 bits.
constexpr double kMaxParameters = 1152921504606846976.0;

struct ModelConfig {
  std::string arch = "gpt2";  // gpt2 | llama
  std::int64_t vocab = 50304;
  std::int64_t max_seq = 1024;  // positions: GPT-2's n_positions, Llama's max_position_embeddings
  std::int64_t layers = 12;
  std::int64_t heads = 12;
  std::int64_t kv_heads = 0;  // key/value heads (grouped-query attention, Llama); 0: as many as heads
  std::int64_t dim = 768;
  std::int64_t ffn = 3072;  // hidden size of the MLP
  float norm_eps = 1e-5f;
  RotaryFrequencies rope;      // Llama: theta, and Llama 3's frequency scaling when factor > 0
  bool tie_embeddings = true;  // the head is the token embedding
  float init_std = 0.02f;
  float dropout = 0.0f;
  DType dtype = DType::f32;  // the parameters' and the computation's
  float default_lr = 6e-4f;  // a peak learning rate known to train this size well
  // The config.json this model was read from (empty for a preset or a model made in code): its keys
  // that do not change the model's function (token ids, dropout rates, use_cache, ...) are written
  // back by an export (hf_config_json).
  nlohmann::json hf_source;

  std::int64_t head_dim() const { return dim / heads; }
  std::int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  // Under tensor parallelism over tp ranks the key/value heads are split when tp divides them, and
  // held whole by every rank when they divide tp (check_tensor_parallel refuses the rest).
  bool splits_kv_heads(int tp) const { return kv_head_count() % tp == 0; }
  // The key/value heads one of tp ranks attends with: its share, or the one its query heads read.
  std::int64_t local_kv_heads(int tp) const { return splits_kv_heads(tp) ? kv_head_count() / tp : 1; }
  // Parameters, counting a tied embedding once. At tp > 1: those one rank of the tensor-parallel
  // group holds, its parts of the split ones (1/tp) and the replicated ones whole (norms, biases of
  // row-parallel layers, GPT-2's positions, key/value projections when kv_heads < tp).
  std::int64_t parameter_count(int tp = 1) const;
  // Parameters of one transformer block (at tp > 1, as parameter_count says).
  std::int64_t block_parameter_count(int tp = 1) const;
  // Training FLOPs per token: 6N + 6 L C T (the attention scores and their use).
  double flops_per_token(std::int64_t seq) const {
    return 6.0 * static_cast<double>(parameter_count()) + 6.0 * static_cast<double>(layers * dim * seq);
  }
  // Throws bmt::Error naming the first field that is out of range or inconsistent with another.
  void validate() const;
  // Throws bmt::Error with one line naming heads, kv_heads, ffn, vocab and tp unless the model can
  // be split over `tp` tensor-parallel ranks: attention by heads (key/value heads split when
  // kv_heads % tp == 0, replicated when tp % kv_heads == 0), the MLP by its hidden size, the
  // vocabulary by rows.
  void check_tensor_parallel(int tp) const;
};

// The initializer of the projections that write into the residual stream (GPT-2's and Llama's
// attention output and MLP down projections): std / sqrt(2 L), which keeps the residual stream's
// variance flat over the blocks.
init::Fn residual_projection_init(const ModelConfig& config);

// Presets: tiny, the GPT-2 sizes, llama-1b and the released Llama shapes (tinyllama-1.1b,
// llama2-7b, llama3-8b, llama3.2-1b), in f32. Throws for other names, listing them.
ModelConfig preset(const std::string& name);
const std::vector<std::string>& preset_names();

// The model as a checkpoint records it: every field that defines the tensors and their values
// and the default learning rate (the Hugging Face source is not recorded). from_json checks every field
// and throws bmt::Error naming `where`, the field, what was expected and what was found.
nlohmann::json to_json(const ModelConfig& config);
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace bmt::models
