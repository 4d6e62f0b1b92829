#include "model.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>

namespace bmt_train {

std::int64_t ModelConfig::parameter_count() const {
  const std::int64_t C = dim, F = ffn, L = layers, K = kv_head_count() * head_dim();
  std::int64_t block = 0, outside = 0;
  if (arch == "gpt2") {
    block = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (F * C + F) + (C * F + C);
    outside = vocab * C + max_seq * C + 2 * C;  // wte, wpe, ln_f
  } else {
    block = 2 * C + 2 * C * C + 2 * K * C + 3 * C * F;  // norms, q and o, k and v, the SwiGLU MLP
    outside = vocab * C + C;                             // embedding, final norm
  }
  if (!tie_embeddings) outside += vocab * C;  // a head of its own
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
  BMT_REQUIRE(kv_heads >= 0 && heads % kv_head_count() == 0,
              "model dimensions: expected key/value heads dividing the " << heads << " heads, found " << kv_heads);
  BMT_REQUIRE(arch == "llama" || kv_head_count() == heads,
              "gpt2: expected as many key/value heads as heads (grouped-query attention is Llama's), found "
                  << kv_heads << " and " << heads);
  BMT_REQUIRE(rope.theta > 0.0f && std::isfinite(rope.theta),
              "rope theta: expected a positive number, found " << rope.theta);
  BMT_REQUIRE(dropout >= 0.0f && dropout < 1.0f, "dropout: expected a probability in [0, 1), found " << dropout);
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names{"tiny",           "gpt2-124m", "gpt2-350m", "gpt2-774m",
                                              "gpt2-1.5b",      "llama-1b",  "tinyllama-1.1b", "llama2-7b",
                                              "llama3-8b",      "llama3.2-1b"};
  return names;
}

ModelConfig preset(const std::string& name) {
  ModelConfig c;
  // Llama shapes as released (config.json): vocabulary, width, blocks, heads, key/value heads,
  // context, SwiGLU width; RMSNorm epsilon 1e-5, an untied head.
  auto llama = [&](std::int64_t vocab, std::int64_t dim, std::int64_t layers, std::int64_t heads, std::int64_t kv_heads,
                   std::int64_t max_seq, std::int64_t ffn) {
    c.arch = "llama";
    c.vocab = vocab;
    c.dim = dim;
    c.layers = layers;
    c.heads = heads;
    c.kv_heads = kv_heads;
    c.max_seq = max_seq;
    c.ffn = ffn;
    c.norm_eps = 1e-5f;
    c.tie_embeddings = false;
    c.default_lr = 3e-4f;
  };
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
    llama(32000, 2048, 22, 16, 16, 2048, 5632);
  } else if (name == "tinyllama-1.1b") {  // TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T
    llama(32000, 2048, 22, 32, 4, 2048, 5632);
  } else if (name == "llama2-7b") {  // meta-llama/Llama-2-7b-hf
    llama(32000, 4096, 32, 32, 32, 4096, 11008);
  } else if (name == "llama3-8b") {  // meta-llama/Meta-Llama-3-8B
    llama(128256, 4096, 32, 32, 8, 8192, 14336);
    c.rope.theta = 500000.0f;
  } else if (name == "llama3.2-1b") {  // meta-llama/Llama-3.2-1B
    llama(128256, 2048, 16, 32, 8, 131072, 8192);
    c.rope = {500000.0f, 32.0f, 1.0f, 4.0f, 8192.0f};
    c.tie_embeddings = true;
  } else {
    std::string list;
    for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
    BMT_REQUIRE(false, "unknown model preset '" << name << "': expected one of " << list);
  }
  return c;
}

ModelConfig from_hf(const bmt::io::HfModelConfig& hf) {
  hf.validate();
  ModelConfig c;
  c.arch = hf.arch;
  c.vocab = hf.vocab;
  c.max_seq = hf.max_positions;
  c.layers = hf.layers;
  c.heads = hf.heads;
  c.kv_heads = hf.kv_heads;
  c.dim = hf.hidden;
  c.ffn = hf.intermediate;
  c.norm_eps = static_cast<float>(hf.norm_eps);
  c.rope.theta = static_cast<float>(hf.rope_theta);
  if (hf.rope_factor > 0.0)
    c.rope = {static_cast<float>(hf.rope_theta), static_cast<float>(hf.rope_factor),
              static_cast<float>(hf.rope_low_freq_factor), static_cast<float>(hf.rope_high_freq_factor),
              static_cast<float>(hf.rope_original_max_positions)};
  c.tie_embeddings = hf.tie_word_embeddings;
  c.default_lr = hf.arch == "gpt2" ? 6e-4f : 3e-4f;
  return c;
}

namespace {

// The shortest decimal that reads back as `f` (1e-5f -> 1e-05, not 9.99999975e-06), as a double:
// what a config.json should say of a float.
double shortest(float f) {
  char text[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(f));
    if (std::strtof(text, nullptr) == f) break;
  }
  return std::strtod(text, nullptr);
}

}  // namespace

bmt::io::HfModelConfig to_hf(const ModelConfig& c) {
  bmt::io::HfModelConfig hf;
  hf.arch = c.arch;
  hf.vocab = c.vocab;
  hf.hidden = c.dim;
  hf.layers = c.layers;
  hf.heads = c.heads;
  hf.kv_heads = c.kv_head_count();
  hf.intermediate = c.ffn;
  hf.max_positions = c.max_seq;
  hf.norm_eps = shortest(c.norm_eps);
  hf.rope_theta = shortest(c.rope.theta);
  if (c.rope.factor > 0.0f) {
    hf.rope_factor = shortest(c.rope.factor);
    hf.rope_low_freq_factor = shortest(c.rope.low_freq_factor);
    hf.rope_high_freq_factor = shortest(c.rope.high_freq_factor);
    hf.rope_original_max_positions = static_cast<std::int64_t>(c.rope.original_max_positions);
  }
  hf.tie_word_embeddings = c.tie_embeddings;
  hf.dtype = c.dtype;
  return hf;
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
  }
  if (!c.tie_embeddings) {
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

// GPT-2 ties the head to the token embedding; Llama has its own, or ties it too (Llama 3.2).
bmt::Tensor GPT::head() { return c_.tie_embeddings ? wte.gather() : lm_head.gather(); }

bmt::Tensor GPT::loss(const bmt::Tensor& tokens, const bmt::Tensor& targets) {
  bmt::Tensor h = hidden(tokens);
  if (loss_chunk_rows_ > 0) return bmt::linear_cross_entropy(h, head(), targets, loss_chunk_rows_);
  bmt::Tensor logits = bmt::linear(h, head());
  return bmt::cross_entropy(bmt::reshape(logits, {-1, c_.vocab}), bmt::reshape(targets, {-1}));
}

bmt::Tensor GPT::logits(const bmt::Tensor& tokens) { return bmt::linear(hidden(tokens), head()); }

}  // namespace bmt_train
