#pragma once
// The models bmt-train trains, written only with bmtrain's public API, as a user would:
// GPT-2 (LayerNorm, GELU, learned positions, tied embeddings) and Llama (RMSNorm, SwiGLU, rotary
// embeddings with Llama 3's frequency scaling, grouped-query attention, a head of its own or tied
// to the embedding). Each block is a plain bmt::Module; the model stacks them in a
// bmt::TransformerBlockList, so ZeRO-3 shards, gathers and recomputes them. Their parameter names
// are the ones bmt::io::hf_tensor_names maps to Hugging Face checkpoints.
#include <bmtrain/bmtrain.hpp>
#include <bmtrain/io/hf_config.hpp>

#include <cmath>
#include <string>

namespace bmt_train {

struct ModelConfig {
  std::string arch = "gpt2";  // gpt2 | llama
  std::int64_t vocab = 50304;
  std::int64_t max_seq = 1024;
  std::int64_t layers = 12;
  std::int64_t heads = 12;
  std::int64_t kv_heads = 0;  // key/value heads (grouped-query attention, Llama); 0: as many as heads
  std::int64_t dim = 768;
  std::int64_t ffn = 3072;    // hidden size of the MLP
  float norm_eps = 1e-5f;
  bmt::RotaryFrequencies rope;  // Llama: theta, and Llama 3's frequency scaling when factor > 0
  bool tie_embeddings = true;   // the head is the token embedding
  float init_std = 0.02f;
  float dropout = 0.0f;
  bmt::DType dtype = bmt::DType::f32;
  float default_lr = 6e-4f;  // a peak learning rate known to train this size well

  std::int64_t head_dim() const { return dim / heads; }
  std::int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  // Parameters, counting a tied embedding once.
  std::int64_t parameter_count() const;
  // Training FLOPs per token: 6N + 6 L C T (the attention scores and their use).
  double flops_per_token(std::int64_t seq) const {
    return 6.0 * static_cast<double>(parameter_count()) + 6.0 * static_cast<double>(layers * dim * seq);
  }
  // Throws bmt::Error naming the field that is out of range.
  void validate() const;
};

// Presets: tiny, the GPT-2 sizes, llama-1b and the released Llama shapes (tinyllama-1.1b,
// llama2-7b, llama3-8b, llama3.2-1b). Throws for other names.
ModelConfig preset(const std::string& name);
const std::vector<std::string>& preset_names();

// The model a Hugging Face config describes (in f32; the caller sets the dtype), and back.
ModelConfig from_hf(const bmt::io::HfModelConfig& hf);
bmt::io::HfModelConfig to_hf(const ModelConfig& config);

namespace detail {
inline bmt::init::Fn scaled_normal(const ModelConfig& c) {
  // GPT-2's residual projections: std / sqrt(2 L) keeps the residual stream's variance flat.
  return bmt::init::normal(c.init_std / std::sqrt(2.0f * static_cast<float>(c.layers)));
}
}  // namespace detail

using bmt::nn::LayerNorm;
using bmt::nn::Linear;
using bmt::nn::RMSNorm;

// Pre-norm GPT-2 block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
struct GPT2Block : bmt::Module {
  ModelConfig c;
  LayerNorm ln_1, ln_2;
  Linear c_attn, attn_proj, c_fc, mlp_proj;

  explicit GPT2Block(const ModelConfig& cfg)
      : c(cfg),
        ln_1(cfg.dim, cfg.dtype, cfg.norm_eps),
        ln_2(cfg.dim, cfg.dtype, cfg.norm_eps),
        c_attn(cfg.dim, 3 * cfg.dim, true, cfg.dtype, bmt::init::normal(cfg.init_std)),
        attn_proj(cfg.dim, cfg.dim, true, cfg.dtype, detail::scaled_normal(cfg)),
        c_fc(cfg.dim, cfg.ffn, true, cfg.dtype, bmt::init::normal(cfg.init_std)),
        mlp_proj(cfg.ffn, cfg.dim, true, cfg.dtype, detail::scaled_normal(cfg)) {
    register_module("ln_1", ln_1);
    register_module("attn", c_attn);  // attn.weight / attn.bias: the fused QKV projection
    register_module("attn_proj", attn_proj);
    register_module("ln_2", ln_2);
    register_module("mlp_fc", c_fc);
    register_module("mlp_proj", mlp_proj);
  }

  bmt::Tensor forward(const bmt::Tensor& x) const {
    const std::int64_t B = x.size(0), T = x.size(1), H = c.heads, D = c.head_dim();
    auto qkv = bmt::split(c_attn.forward(ln_1.forward(x)), {c.dim, c.dim, c.dim}, -1);
    bmt::Tensor y = bmt::attention_bthd(bmt::reshape(qkv[0], {B, T, H, D}), bmt::reshape(qkv[1], {B, T, H, D}),
                                        bmt::reshape(qkv[2], {B, T, H, D}), true);
    bmt::Tensor h = residual(x, attn_proj, bmt::reshape(y, {B, T, c.dim}));
    const bmt::Tensor m = ln_2.forward(h);
    // With no gradient to record (a recomputed block's first pass, evaluation) the GELU runs in the
    // first GEMM, saving a pass over the hidden activations. With one, it goes with the second GEMM,
    // whose backward takes its derivative in the GEMM that makes its gradient: that saves more.
    if (!bmt::autograd::grad_enabled()) return residual(h, mlp_proj, c_fc.forward_gelu(m));
    return residual(h, mlp_proj, c_fc.forward(m), /*gelu_first=*/true);
  }

  // x + dropout(proj(y)), or x + dropout(proj(gelu(y))).
  bmt::Tensor residual(const bmt::Tensor& x, const Linear& proj, const bmt::Tensor& y, bool gelu_first = false) const {
    if (c.dropout > 0.0f && is_training()) return bmt::residual_add(x, dropout(gelu_first ? proj.gelu_forward(y) : proj.forward(y)));
    return proj.forward_onto(x, y, gelu_first);
  }

  bmt::Tensor dropout(const bmt::Tensor& x) const {
    if (c.dropout <= 0.0f || !is_training()) return x;
    return bmt::dropout(x, c.dropout, bmt::random::next_key(), true);
  }
};

// Llama block: x + attn(rms(x)) with rotary q/k (k and v with kv_heads heads), then
// x + W2(silu(W1 x) * W3 x).
struct LlamaBlock : bmt::Module {
  ModelConfig c;
  RMSNorm attn_norm, ffn_norm;
  Linear wq, wk, wv, wo, w1, w2, w3;

  explicit LlamaBlock(const ModelConfig& cfg)
      : c(cfg),
        attn_norm(cfg.dim, cfg.dtype, cfg.norm_eps),
        ffn_norm(cfg.dim, cfg.dtype, cfg.norm_eps),
        wq(cfg.dim, cfg.dim, false, cfg.dtype, bmt::init::normal(cfg.init_std)),
        wk(cfg.dim, cfg.kv_head_count() * cfg.head_dim(), false, cfg.dtype, bmt::init::normal(cfg.init_std)),
        wv(cfg.dim, cfg.kv_head_count() * cfg.head_dim(), false, cfg.dtype, bmt::init::normal(cfg.init_std)),
        wo(cfg.dim, cfg.dim, false, cfg.dtype, detail::scaled_normal(cfg)),
        w1(cfg.dim, cfg.ffn, false, cfg.dtype, bmt::init::normal(cfg.init_std)),
        w2(cfg.ffn, cfg.dim, false, cfg.dtype, detail::scaled_normal(cfg)),
        w3(cfg.dim, cfg.ffn, false, cfg.dtype, bmt::init::normal(cfg.init_std)) {
    register_module("attention_norm", attn_norm);
    register_module("wq", wq);
    register_module("wk", wk);
    register_module("wv", wv);
    register_module("wo", wo);
    register_module("ffn_norm", ffn_norm);
    register_module("w1", w1);
    register_module("w2", w2);
    register_module("w3", w3);
  }

  bmt::Tensor forward(const bmt::Tensor& x) const {
    const std::int64_t B = x.size(0), T = x.size(1), H = c.heads, Hk = c.kv_head_count(), D = c.head_dim();
    bmt::Tensor h = attn_norm.forward(x);
    bmt::Tensor q = bmt::rotary_embedding(bmt::reshape(wq.forward(h), {B, T, H, D}), 0, c.rope);
    bmt::Tensor k = bmt::rotary_embedding(bmt::reshape(wk.forward(h), {B, T, Hk, D}), 0, c.rope);
    bmt::Tensor v = bmt::reshape(wv.forward(h), {B, T, Hk, D});
    bmt::Tensor y = bmt::attention_bthd(q, k, v, true);
    bmt::Tensor r = bmt::residual_add(x, wo.forward(bmt::reshape(y, {B, T, c.dim})));
    bmt::Tensor f = ffn_norm.forward(r);
    return bmt::residual_add(r, w2.forward(bmt::swiglu(w1.forward(f), w3.forward(f))));
  }
};

// The whole model: embeddings, the block list, final norm and head; forward returns the mean
// cross-entropy of the next-token targets (ignore_index -100).
class GPT : public bmt::DistributedModule {
 public:
  // loss_chunk_rows > 0: the head and loss take that many token rows at a time
  // (bmt::linear_cross_entropy) instead of all the logits at once. The last keep_blocks blocks
  // keep their activations (use_checkpoint off) whatever `checkpoint` says.
  explicit GPT(const ModelConfig& c, int prefetch_depth = 1, bmt::CheckpointOptions checkpoint = {},
               std::int64_t loss_chunk_rows = 0, std::int64_t keep_blocks = 0);
  bmt::Tensor loss(const bmt::Tensor& tokens, const bmt::Tensor& targets);
  // The next-token logits [batch, seq, vocab], in the model's dtype.
  bmt::Tensor logits(const bmt::Tensor& tokens);
  const ModelConfig& config() const { return c_; }

 private:
  bmt::Tensor hidden(const bmt::Tensor& tokens);
  bmt::Tensor head();
  ModelConfig c_;
  std::int64_t loss_chunk_rows_ = 0;
  bmt::DistributedParameter wte, wpe, lm_head;
  bmt::Tensor positions_;  // [1, T] position ids 0..T-1 for GPT-2's learned positions
  bmt::TransformerBlockList<GPT2Block> gpt2_blocks;
  bmt::TransformerBlockList<LlamaBlock> llama_blocks;
  std::unique_ptr<LayerNorm> ln_f;
  std::unique_ptr<RMSNorm> norm;
};

}  // namespace bmt_train
