#include "model.hpp"

#include <map>

namespace bmt_train {

std::int64_t ModelConfig::parameter_count() const {
  const std::int64_t C = dim, F = ffn, L = layers;
  std::int64_t block = 0, outside = 0;
  if (arch == "gpt2") {
    block = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (F * C + F) + (C * F + C);
    outside = vocab * C + max_seq * C + 2 * C;  // wte (tied head), wpe, ln_f
  } else {
    block = 2 * C + 4 * C * C + 3 * C * F;
    outside = 2 * vocab * C + C;  // embedding, untied head, final norm
  }
  return L * block + outside;
}

void ModelConfig::validate() const {
  BMT_REQUIRE(arch == "gpt2" || arch == "llama", "model arch: expected gpt2 or llama, found '" << arch << "'");
  BMT_REQUIRE(vocab > 0 && max_seq > 0 && layers > 0 && heads > 0 && dim > 0 && ffn > 0,
              "model dimensions: expected positive vocab, seq, layers, heads, dim and ffn, found vocab " << vocab
                  << ", seq " << max_seq << ", layers " << layers << ", heads " << heads << ", dim " << dim
                  << ", ffn " << ffn);
  BMT_REQUIRE(dim % heads == 0, "model dimensions: expected dim divisible by heads, found dim " << dim << " and "
                                                                                              << heads << " heads");
  BMT_REQUIRE(arch != "llama" || head_dim() % 2 == 0,
              "llama: expected an even head dimension for rotary embeddings, found " << head_dim());
  BMT_REQUIRE(dropout >= 0.0f && dropout < 1.0f, "dropout: expected a probability in [0, 1), found " << dropout);
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names{"tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b", "llama-1b"};
  return names;
}

ModelConfig preset(const std::string& name) {
  ModelConfig c;
  auto gpt2 = [&](std::int64_t layers, std::int64_t heads, std::int64_t dim) {
    c.arch = "gpt2";
    c.vocab = 50304;  // GPT-2's 50257 padded to a multiple of 128
    c.max_seq = 1024;
    c.layers = layers;
    c.heads = heads;
    c.dim = dim;
    c.ffn = 4 * dim;
  };
  if (name == "tiny") {
    gpt2(2, 4, 64);
    c.vocab = 256;
    c.max_seq = 128;
    c.default_lr = 1e-2f;
  } else if (name == "gpt2-124m") {
    gpt2(12, 12, 768);
  } else if (name == "gpt2-350m") {
    gpt2(24, 16, 1024);
  } else if (name == "gpt2-774m") {
    gpt2(36, 20, 1280);
  } else if (name == "gpt2-1.5b") {
    gpt2(48, 25, 1600);
  } else if (name == "llama-1b") {
    c.arch = "llama";
    c.vocab = 32000;
    c.max_seq = 2048;
    c.layers = 22;
    c.heads = 16;
    c.dim = 2048;
    c.ffn = 5632;
    c.norm_eps = 1e-5f;
    c.default_lr = 3e-4f;
  } else {
    std::string list;
    for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
    BMT_REQUIRE(false, "unknown model preset '" << name << "': expected one of " << list);
  }
  return c;
}

GPT::GPT(const ModelConfig& c, int prefetch_depth, bmt::CheckpointOptions checkpoint, std::int64_t loss_chunk_rows,
         std::int64_t keep_blocks)
    : c_(c), loss_chunk_rows_(loss_chunk_rows), gpt2_blocks(prefetch_depth), llama_blocks(prefetch_depth) {
  c.validate();
  BMT_REQUIRE(keep_blocks >= 0, "GPT: expected keep_blocks >= 0, found " << keep_blocks);
  // Block i's options: the last keep_blocks blocks keep their activations.
  const auto options = [&](std::int64_t i) {
    bmt::CheckpointOptions o = checkpoint;
    if (i >= c.layers - keep_blocks) o.use_checkpoint = false;
    return o;
  };
  wte = bmt::DistributedParameter({c.vocab, c.dim}, c.dtype, bmt::init::normal(c.init_std));
  register_parameter("wte", wte);
  if (c.arch == "gpt2") {
    wpe = bmt::DistributedParameter({c.max_seq, c.dim}, c.dtype, bmt::init::normal(0.01f));
    register_parameter("wpe", wpe);
    for (std::int64_t i = 0; i < c.layers; ++i) gpt2_blocks.append(options(i), c);
    register_module("blocks", gpt2_blocks);
    ln_f = std::make_unique<LayerNorm>(c.dim, c.dtype, c.norm_eps);
    register_module("ln_f", *ln_f);
  } else {
    for (std::int64_t i = 0; i < c.layers; ++i) llama_blocks.append(options(i), c);
    register_module("blocks", llama_blocks);
    norm = std::make_unique<RMSNorm>(c.dim, c.dtype, c.norm_eps);
    register_module("norm", *norm);
    lm_head = bmt::DistributedParameter({c.vocab, c.dim}, c.dtype, bmt::init::normal(c.init_std));
    register_parameter("lm_head", lm_head);
  }
}

bmt::Tensor GPT::hidden(const bmt::Tensor& tokens) {
  BMT_REQUIRE(tokens.dim() == 2, "model input: expected token ids [batch, seq], found " << bmt::to_string(tokens.shape()));
  const std::int64_t T = tokens.size(1);
  BMT_REQUIRE(T <= c_.max_seq, "model input: expected a sequence of at most " << c_.max_seq << " tokens, found " << T);
  bmt::Tensor x = bmt::embedding(tokens, wte.gather());
  if (c_.arch == "gpt2") {
    // Made once per length: a host-to-device copy waits for the device, which a step must not.
    if (!positions_.defined() || positions_.size(1) != T) {
      std::vector<std::int64_t> pos(static_cast<std::size_t>(T));
      for (std::int64_t t = 0; t < T; ++t) pos[t] = t;
      positions_ = bmt::Tensor::from_ints(pos, {1, T}, bmt::DType::i64);
    }
    x = bmt::add(x, bmt::embedding(positions_, wpe.gather()));
    return ln_f->forward(gpt2_blocks(x));
  }
  return norm->forward(llama_blocks(x));
}

bmt::Tensor GPT::loss(const bmt::Tensor& tokens, const bmt::Tensor& targets) {
  bmt::Tensor h = hidden(tokens);
  // GPT-2 ties the head to the token embedding; Llama has its own.
  bmt::Tensor head = c_.arch == "gpt2" ? wte.gather() : lm_head.gather();
  if (loss_chunk_rows_ > 0) return bmt::linear_cross_entropy(h, head, targets, loss_chunk_rows_);
  bmt::Tensor logits = bmt::linear(h, head);
  return bmt::cross_entropy(bmt::reshape(logits, {-1, c_.vocab}), bmt::reshape(targets, {-1}));
}

}  // namespace bmt_train
