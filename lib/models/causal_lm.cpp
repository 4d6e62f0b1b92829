#include "bmtrain/models/causal_lm.hpp"

#include <vector>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/models/hf_config.hpp"
#include "bmtrain/nn/init.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/ops/tensor_parallel.hpp"
#include "bmtrain/ops/vocab_parallel_cross_entropy.hpp"
#include "bmtrain/runtime/context.hpp"

namespace bmt::models {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Token ids [batch, seq] of at most the model's positions.
void check_tokens(const Tensor& tokens, const ModelConfig& c) {
  BMT_REQUIRE(tokens.dim() == 2, "model input: expected token ids [batch, seq], found " << to_string(tokens.shape()));
  const std::int64_t T = tokens.size(1);
  BMT_REQUIRE(T <= c.max_seq, "model input: expected a sequence of at most " << c.max_seq << " tokens, found " << T);
}

}  // namespace

CheckpointOptions block_options(const CausalLMOptions& options, std::int64_t layers, std::int64_t i) {
  CheckpointOptions o = options.checkpoint;
  if (i >= layers - options.keep_blocks) o.use_checkpoint = false;
  return o;
}

CausalLM::CausalLM(const ModelConfig& c, const CausalLMOptions& options)
    : c_(c), options_(options), gpt2_blocks(options.prefetch_depth), llama_blocks(options.prefetch_depth) {
  c.validate();
  c.check_tensor_parallel(tp_size());
  BMT_REQUIRE(options.keep_blocks >= 0, "CausalLM: expected keep_blocks >= 0, found " << options.keep_blocks);
  BMT_REQUIRE(options.loss_chunk_rows >= 0,
              "CausalLM: expected loss_chunk_rows >= 0, found " << options.loss_chunk_rows);
  // The vocabulary's rows are split over the tp group: the embedding's and an untied head's.
  const std::int64_t tp = tp_size(), vocab_rows = c.vocab / tp;
  first_vocab_row_ = tp_rank() * vocab_rows;
  wte = DistributedParameter({vocab_rows, c.dim}, c.dtype, init::normal(c.init_std));
  nn::split_over_tp(wte, 0, {c.vocab}, {c.vocab, c.dim});
  register_parameter("wte", wte);
  if (c.arch == "gpt2") {
    wpe = DistributedParameter({c.max_seq, c.dim}, c.dtype, init::normal(0.01f));
    register_parameter("wpe", wpe);
    for (std::int64_t i = 0; i < c.layers; ++i) gpt2_blocks.append(block_options(options, c.layers, i), c);
    register_module("blocks", gpt2_blocks);
    ln_f = std::make_unique<nn::SequenceParallelLayerNorm>(c.dim, c.dtype, c.norm_eps);
    register_module("ln_f", *ln_f);
  } else {
    for (std::int64_t i = 0; i < c.layers; ++i) llama_blocks.append(block_options(options, c.layers, i), c);
    register_module("blocks", llama_blocks);
    norm = std::make_unique<nn::SequenceParallelRMSNorm>(c.dim, c.dtype, c.norm_eps);
    register_module("norm", *norm);
  }
  if (options.fp8) {
    for (std::size_t i = 0; i < gpt2_blocks.size(); ++i) gpt2_blocks[i].block().set_fp8(true);
    for (std::size_t i = 0; i < llama_blocks.size(); ++i) llama_blocks[i].block().set_fp8(true);
  }
  if (!c.tie_embeddings) {
    lm_head = DistributedParameter({vocab_rows, c.dim}, c.dtype, init::normal(c.init_std));
    nn::split_over_tp(lm_head, 0, {c.vocab}, {c.vocab, c.dim});
    register_parameter("lm_head", lm_head);
  }
}

Tensor CausalLM::hidden(const Tensor& tokens) {
  check_tokens(tokens, c_);
  const std::int64_t T = tokens.size(1);
  Tensor x = embedding(tokens, wte.gather());
  if (c_.arch == "gpt2") {
    // Made once per length: a host-to-device copy waits for the device, which a step must not.
    if (!positions_.defined() || positions_.size(1) != T) {
      std::vector<std::int64_t> pos(static_cast<std::size_t>(T));
      for (std::int64_t t = 0; t < T; ++t) pos[t] = t;
      positions_ = Tensor::from_ints(pos, {1, T}, DType::i64);
    }
    x = add(x, embedding(positions_, wpe.gather()));
    return ln_f->forward(gpt2_blocks(x));
  }
  return norm->forward(llama_blocks(x));
}

// The same model on sequence-parallel rows. At tp 1 hidden() runs instead, with the plain lookup
// and the blocks on [B, T, C], so that the numbers are those of the model without tensor parallelism.
Tensor CausalLM::hidden_rows(const Tensor& tokens) {
  check_tokens(tokens, c_);
  const std::int64_t B = tokens.size(0), T = tokens.size(1), tp = tp_size();
  BMT_REQUIRE((B * T) % tp == 0, "model input: expected batch * seq divisible by tp " << tp << ", found " << B << " * "
                                                                                      << T);
  // Each rank looks up the ids of its vocabulary rows; the sum over the group lands in its rows.
  Tensor x = scatter_tokens(embedding_part(contiguous(tokens).view({B * T}), wte.gather(), first_vocab_row_));
  if (c_.arch == "gpt2") {
    const std::int64_t rows = B * T / tp, first = tp_rank() * rows;
    if (!row_positions_.defined() || row_positions_.size(0) != rows || row_positions_seq_ != T) {
      // Row i of this rank is token first + i of the [B*T] matrix: position (first + i) mod T.
      std::vector<std::int64_t> pos(static_cast<std::size_t>(rows));
      for (std::int64_t i = 0; i < rows; ++i) pos[i] = (first + i) % T;
      row_positions_ = Tensor::from_ints(pos, {rows}, DType::i64);
      row_positions_seq_ = T;
    }
    x = add(x, embedding(row_positions_, copy_tp(wpe.gather())));
    return ln_f->forward(gpt2_blocks(x, B));
  }
  return norm->forward(llama_blocks(x, B));
}

// GPT-2 ties the head to the token embedding; Llama has its own, or ties it too (Llama 3.2).
Tensor CausalLM::head() { return c_.tie_embeddings ? wte.gather() : lm_head.gather(); }

Tensor CausalLM::loss(const Tensor& tokens, const Tensor& targets) {
  if (tp_size() > 1) {
    BMT_REQUIRE(targets.numel() == tokens.numel(), "model targets: expected one per token ("
                                                       << to_string(tokens.shape()) << "), found "
                                                       << to_string(targets.shape()));
    const Tensor h = gather_tokens(hidden_rows(tokens));
    const std::int64_t chunk = options_.loss_chunk_rows > 0 ? options_.loss_chunk_rows : h.size(0);
    return vocab_parallel_cross_entropy(h, head(), contiguous(targets).view({targets.numel()}), chunk);
  }
  Tensor h = hidden(tokens);
  if (options_.loss_chunk_rows > 0) return linear_cross_entropy(h, head(), targets, options_.loss_chunk_rows);
  Tensor logits = linear(h, head());
  return cross_entropy(reshape(logits, {-1, c_.vocab}), reshape(targets, {-1}));
}

Tensor CausalLM::logits(const Tensor& tokens) {
  BMT_REQUIRE(tp_size() == 1, "CausalLM::logits: expected tp 1, found tp " << tp_size()
                                                                           << " (no rank holds whole logits; use loss)");
  return linear(hidden(tokens), head());
}

io::HfLayout hf_layout(const ModelConfig& c) {
  c.validate();
  io::HfLayout layout;
  layout.model = std::string(hf_model_class(c)) + " of " + std::to_string(c.layers) + " layers";
  auto add = [&](std::string parameter, std::string hub, bool transposed = false) {
    layout.tensors.push_back({std::move(parameter), std::move(hub), transposed});
  };
  const bool gpt2 = c.arch == "gpt2";
  const auto block_tensors = gpt2 ? GPT2Block::hf_tensors() : LlamaBlock::hf_tensors();
  const std::string hub_blocks = gpt2 ? "transformer.h." : "model.layers.";
  add("wte", gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight");
  if (gpt2) add("wpe", "transformer.wpe.weight");
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".", h = hub_blocks + std::to_string(l) + ".";
    for (const auto& t : block_tensors) add(b + t.parameter, h + t.hub, t.transposed);
  }
  if (gpt2) {
    add("ln_f.weight", "transformer.ln_f.weight");
    add("ln_f.bias", "transformer.ln_f.bias");
  } else {
    add("norm.weight", "model.norm.weight");
  }
  if (!c.tie_embeddings) add("lm_head", "lm_head.weight");
  if (gpt2) layout.optional_prefix = "transformer.";
  const bool tied = c.tie_embeddings;
  layout.ignored = [gpt2, tied](const std::string& hub) {
    if (hub == "lm_head.weight") return tied;
    if (gpt2) return ends_with(hub, ".attn.bias") || ends_with(hub, ".attn.masked_bias");
    return ends_with(hub, ".rotary_emb.inv_freq");
  };
  return layout;
}

void load_hf_checkpoint(CausalLM& model, const std::string& dir) {
  io::load_hf_checkpoint(model, dir, hf_layout(model.config()));
}

void save_hf_checkpoint(CausalLM& model, const std::string& dir, const io::HfExportOptions& options) {
  io::save_hf_checkpoint(model, dir, hf_layout(model.config()), hf_config_json(model.config()), options);
}

}  // namespace bmt::models
