#include "bmtrain/models/llama_block.hpp"

#include "bmtrain/nn/init.hpp"
#include "bmtrain/ops/ops.hpp"

namespace bmt::models {

LlamaBlock::LlamaBlock(const ModelConfig& cfg)
    : c(cfg),
      attn_norm(cfg.dim, cfg.dtype, cfg.norm_eps),
      ffn_norm(cfg.dim, cfg.dtype, cfg.norm_eps),
      wq(cfg.dim, cfg.dim, false, cfg.dtype, init::normal(cfg.init_std)),
      wk(cfg.dim, cfg.kv_head_count() * cfg.head_dim(), false, cfg.dtype, init::normal(cfg.init_std)),
      wv(cfg.dim, cfg.kv_head_count() * cfg.head_dim(), false, cfg.dtype, init::normal(cfg.init_std)),
      wo(cfg.dim, cfg.dim, false, cfg.dtype, residual_projection_init(cfg)),
      w1(cfg.dim, cfg.ffn, false, cfg.dtype, init::normal(cfg.init_std)),
      w2(cfg.ffn, cfg.dim, false, cfg.dtype, residual_projection_init(cfg)),
      w3(cfg.dim, cfg.ffn, false, cfg.dtype, init::normal(cfg.init_std)) {
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

std::vector<io::HfTensor> LlamaBlock::hf_tensors() {
  return {{"attention_norm.weight", "input_layernorm.weight"},
          {"wq.weight", "self_attn.q_proj.weight"},
          {"wk.weight", "self_attn.k_proj.weight"},
          {"wv.weight", "self_attn.v_proj.weight"},
          {"wo.weight", "self_attn.o_proj.weight"},
          {"ffn_norm.weight", "post_attention_layernorm.weight"},
          {"w1.weight", "mlp.gate_proj.weight"},
          {"w3.weight", "mlp.up_proj.weight"},
          {"w2.weight", "mlp.down_proj.weight"}};
}

Tensor LlamaBlock::forward(const Tensor& x) const {
  const std::int64_t B = x.size(0), T = x.size(1), H = c.heads, Hk = c.kv_head_count(), D = c.head_dim();
  Tensor h = attn_norm.forward(x);
  Tensor q = rotary_embedding(reshape(wq.forward(h), {B, T, H, D}), 0, c.rope);
  Tensor k = rotary_embedding(reshape(wk.forward(h), {B, T, Hk, D}), 0, c.rope);
  Tensor v = reshape(wv.forward(h), {B, T, Hk, D});
  Tensor y = attention_bthd(q, k, v, true);
  Tensor r = residual_add(x, wo.forward(reshape(y, {B, T, c.dim})));
  Tensor f = ffn_norm.forward(r);
  return residual_add(r, w2.forward(swiglu(w1.forward(f), w3.forward(f))));
}

}  // namespace bmt::models
