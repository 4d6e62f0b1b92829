#include "bmtrain/models/causal_lm.hpp"

#include <vector>

#include "bmtrain/models/hf_config.hpp"
#include "bmtrain/nn/init.hpp"
#include "bmtrain/ops/ops.hpp"

namespace bmt::models {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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
  BMT_REQUIRE(options.keep_blocks >= 0, "CausalLM: expected keep_blocks >= 0, found " << options.keep_blocks);
  BMT_REQUIRE(options.loss_chunk_rows >= 0,
              "CausalLM: expected loss_chunk_rows >= 0, found " << options.loss_chunk_rows);
  wte = DistributedParameter({c.vocab, c.dim}, c.dtype, init::normal(c.init_std));
  register_parameter("wte", wte);
  if (c.arch == "gpt2") {
    wpe = DistributedParameter({c.max_seq, c.dim}, c.dtype, init::normal(0.01f));
    register_parameter("wpe", wpe);
    for (std::int64_t i = 0; i < c.layers; ++i) gpt2_blocks.append(block_options(options, c.layers, i), c);
    register_module("blocks", gpt2_blocks);
    ln_f = std::make_unique<nn::LayerNorm>(c.dim, c.dtype, c.norm_eps);
    register_module("ln_f", *ln_f);
  } else {
    for (std::int64_t i = 0; i < c.layers; ++i) llama_blocks.append(block_options(options, c.layers, i), c);
    register_module("blocks", llama_blocks);
    norm = std::make_unique<nn::RMSNorm>(c.dim, c.dtype, c.norm_eps);
    register_module("norm", *norm);
  }
  if (options.fp8) {
    for (std::size_t i = 0; i < gpt2_blocks.size(); ++i)
      for (nn::Linear* l : gpt2_blocks[i].block().linear_layers()) l->set_fp8(true);
    for (std::size_t i = 0; i < llama_blocks.size(); ++i)
      for (nn::Linear* l : llama_blocks[i].block().linear_layers()) l->set_fp8(true);
  }
  if (!c.tie_embeddings) {
    lm_head = DistributedParameter({c.vocab, c.dim}, c.dtype, init::normal(c.init_std));
    register_parameter("lm_head", lm_head);
  }
}

Tensor CausalLM::hidden(const Tensor& tokens) {
  BMT_REQUIRE(tokens.dim() == 2, "model input: expected token ids [batch, seq], found " << to_string(tokens.shape()));
  const std::int64_t T = tokens.size(1);
  BMT_REQUIRE(T <= c_.max_seq, "model input: expected a sequence of at most " << c_.max_seq << " tokens, found " << T);
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

// GPT-2 ties the head to the token embedding; Llama has its own, or ties it too (Llama 3.2).
Tensor CausalLM::head() { return c_.tie_embeddings ? wte.gather() : lm_head.gather(); }

Tensor CausalLM::loss(const Tensor& tokens, const Tensor& targets) {
  Tensor h = hidden(tokens);
  if (options_.loss_chunk_rows > 0) return linear_cross_entropy(h, head(), targets, options_.loss_chunk_rows);
  Tensor logits = linear(h, head());
  return cross_entropy(reshape(logits, {-1, c_.vocab}), reshape(targets, {-1}));
}

Tensor CausalLM::logits(const Tensor& tokens) { return linear(hidden(tokens), head()); }

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
