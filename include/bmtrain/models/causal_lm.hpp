#pragma once
// A decoder-only language model of GPT-2 or Llama blocks: the token embedding (and GPT-2's learned
// positions), a TransformerBlockList of the blocks, the final norm and the head (its own, or tied
// to the embedding); `loss` returns the mean next-token cross-entropy (targets of -100 are left
// out). A DistributedModule: bmt::init_parameters shards it over the ranks, the block list gathers
// each block's parameters ahead of use and recomputes it in backward.
//
//   auto config = bmt::models::read_hf_config("Llama-3.2-1B/");
//   config.dtype = bmt::DType::bf16;
//   bmt::models::CausalLM model(config);
//   bmt::init_parameters(model);
//   bmt::models::load_hf_checkpoint(model, "Llama-3.2-1B/");         // collective
//   ... train: model.loss(tokens, targets), OptimManager ...
//   bmt::models::save_hf_checkpoint(model, "fine-tuned/");           // collective
//
// With tensor parallelism (InitOptions::tp_size > 1) the embedding and an untied head are split by
// vocabulary rows over the tp group, the blocks by heads and MLP width (GPT2Block, LlamaBlock), and
// hidden states between them are sequence-parallel rows; the loss is the vocabulary-parallel
// cross-entropy (ops/vocab_parallel_cross_entropy.hpp), so no rank holds whole logits. Every rank
// of a tp group must be given the same tokens and targets. ModelConfig::check_tensor_parallel
// says which configurations split.
#include <cstdint>
#include <memory>
#include <string>

#include "bmtrain/io/hf_checkpoint.hpp"
#include "bmtrain/models/gpt2_block.hpp"
#include "bmtrain/models/llama_block.hpp"
#include "bmtrain/models/model_config.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"

namespace bmt::models {

// How the model runs its blocks and its loss. Only fp8 changes what it computes (within FP8's
// rounding); the rest changes where and when, not the numbers.
struct CausalLMOptions {
  int prefetch_depth = 1;         // blocks whose parameters are gathered ahead of use
  CheckpointOptions checkpoint;   // every block's, but for the last keep_blocks
  std::int64_t keep_blocks = 0;   // the last N blocks keep their activations instead of recomputing
  std::int64_t loss_chunk_rows = 0;  // > 0: the head and loss take that many token rows at a time
                                     // (bmt::linear_cross_entropy), never holding all the logits
  bool fp8 = false;  // every block's linear layers in FP8 (nn::Linear::set_fp8; at tp > 1 each rank
                     // scales its own part); the embedding, the final norm and the head stay in the
                     // model's dtype
};

class CausalLM : public DistributedModule {
 public:
  explicit CausalLM(const ModelConfig& config, const CausalLMOptions& options = {});

  Tensor loss(const Tensor& tokens, const Tensor& targets);
  // The next-token logits [batch, seq, vocab], in the model's dtype (tp 1 only: at tp > 1 no rank
  // holds a row's whole logits).
  Tensor logits(const Tensor& tokens);
  const ModelConfig& config() const { return c_; }
  const CausalLMOptions& options() const { return options_; }

 private:
  Tensor hidden(const Tensor& tokens);
  // This rank's sequence-parallel rows of the final hidden states (tp > 1).
  Tensor hidden_rows(const Tensor& tokens);
  Tensor head();
  ModelConfig c_;
  CausalLMOptions options_;
  DistributedParameter wte, wpe, lm_head;
  Tensor positions_;  // [1, T] position ids 0..T-1 for GPT-2's learned positions
  Tensor row_positions_;  // at tp > 1: the positions of this rank's rows, for sequences of
  std::int64_t row_positions_seq_ = 0;  // this length
  std::int64_t first_vocab_row_ = 0;  // the first row of the whole vocabulary this rank holds
  TransformerBlockList<GPT2Block> gpt2_blocks;
  TransformerBlockList<LlamaBlock> llama_blocks;
  std::unique_ptr<nn::SequenceParallelLayerNorm> ln_f;
  std::unique_ptr<nn::SequenceParallelRMSNorm> norm;
};

// Block i's checkpoint options under `options` for a model of `layers` blocks.
CheckpointOptions block_options(const CausalLMOptions& options, std::int64_t layers, std::int64_t i);

// The model's parameters and the tensors of transformers' GPT2LMHeadModel or LlamaForCausalLM
// that hold them: each block's own list (GPT2Block::hf_tensors, LlamaBlock::hf_tensors) under
// "transformer.h.N." or "model.layers.N.", and the embeddings, final norm and head. GPT-2:
// wte, wpe, ln_f <- transformer.{wte,wpe,ln_f} (also read without "transformer.", as the hub's
// original gpt2 files have them); Llama: wte <- model.embed_tokens, norm <- model.norm; an untied
// head: lm_head <- lm_head.weight. A load ignores GPT-2's attention mask buffers, Llama's
// rotary_emb.inv_freq, and lm_head.weight when the head is tied.
io::HfLayout hf_layout(const ModelConfig& config);

// Collective: the model's weights from a Hugging Face checkpoint directory of its shape, and back
// (config.json from hf_config_json).
void load_hf_checkpoint(CausalLM& model, const std::string& dir);
void save_hf_checkpoint(CausalLM& model, const std::string& dir, const io::HfExportOptions& options = {});

}  // namespace bmt::models
