#include "bmtrain/models/llama_block.hpp"

#include "bmtrain/nn/init.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/context.hpp"

namespace bmt::models {

LlamaBlock::LlamaBlock(const ModelConfig& cfg)
    : c(cfg),
      attn_norm(cfg.dim, cfg.dtype, cfg.norm_eps),
      ffn_norm(cfg.dim, cfg.dtype, cfg.norm_eps),
      wq(cfg.dim, cfg.dim, false, cfg.dtype, init::normal(cfg.init_std)),
      wo(cfg.dim, cfg.dim, false, cfg.dtype, residual_projection_init(cfg)),
      w1(cfg.dim, cfg.ffn, false, cfg.dtype, init::normal(cfg.init_std)),
      w3(cfg.dim, cfg.ffn, false, cfg.dtype, init::normal(cfg.init_std)),
      w2(cfg.ffn, cfg.dim, false, cfg.dtype, residual_projection_init(cfg)) {
  cfg.check_tensor_parallel(tp_size());
  const std::int64_t kv = cfg.kv_head_count() * cfg.head_dim();
  register_module("attention_norm", attn_norm);
  register_module("wq", wq);
  if (cfg.splits_kv_heads(tp_size())) {
    wk = std::make_unique<nn::ColumnParallelLinear>(cfg.dim, kv, false, cfg.dtype, init::normal(cfg.init_std));
    wv = std::make_unique<nn::ColumnParallelLinear>(cfg.dim, kv, false, cfg.dtype, init::normal(cfg.init_std));
    register_module("wk", *wk);
    register_module("wv", *wv);
  } else {
    wk_whole = std::make_unique<nn::ReplicatedLinear>(cfg.dim, kv, false, cfg.dtype, init::normal(cfg.init_std));
    wv_whole = std::make_unique<nn::ReplicatedLinear>(cfg.dim, kv, false, cfg.dtype, init::normal(cfg.init_std));
    register_module("wk", *wk_whole);
    register_module("wv", *wv_whole);
  }
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

void LlamaBlock::set_fp8(bool on) {
  wq.set_fp8(on);
  for (auto* l : {wk.get(), wv.get()})
    if (l) l->set_fp8(on);
  for (auto* l : {wk_whole.get(), wv_whole.get()})
    if (l) l->set_fp8(on);
  wo.set_fp8(on);
  w1.set_fp8(on);
  w2.set_fp8(on);
  w3.set_fp8(on);
}

Tensor LlamaBlock::forward(const Tensor& x, std::int64_t batch) const {
  return on_block_rows(x, batch, "LlamaBlock", [this](const Tensor& rows, std::int64_t b) { return forward_rows(rows, b); });
}

Tensor LlamaBlock::key_value(const std::unique_ptr<nn::ColumnParallelLinear>& split,
                             const std::unique_ptr<nn::ReplicatedLinear>& whole, const Tensor& x) const {
  if (split) return split->forward_gathered(x);
  // Fewer key/value heads than ranks: this rank's H/tp query heads all read kv head
  // (r * H/tp) / (H/Hk) = r * Hk / tp.
  const std::int64_t D = c.head_dim(), head = tp_rank() * c.kv_head_count() / tp_size();
  return whole->forward_gathered(x, head * D, D);
}

Tensor LlamaBlock::forward_rows(const Tensor& rows, std::int64_t batch) const {
  const std::int64_t tp = tp_size(), B = batch, T = rows.size(0) * tp / batch, D = c.head_dim();
  const std::int64_t H = c.heads / tp, Hk = c.local_kv_heads(static_cast<int>(tp));
  // q, k and v share one gather of the normed rows; their gradients meet before its reduce-scatter.
  // In FP8 they share one quantization of them too, as gate and up do of theirs.
  const Tensor h = gather_tokens(attn_norm.forward(rows));
  Tensor q, k, v;
  {
    Float8SharedInputs shared;
    q = rotary_embedding(reshape(wq.forward_gathered(h), {B, T, H, D}), 0, c.rope);
    k = rotary_embedding(reshape(key_value(wk, wk_whole, h), {B, T, Hk, D}), 0, c.rope);
    v = reshape(key_value(wv, wv_whole, h), {B, T, Hk, D});
  }
  Tensor y = attention_bthd(q, k, v, true);
  Tensor r = wo.forward_onto(rows, reshape(y, {B * T, H * D}));
  const Tensor f = gather_tokens(ffn_norm.forward(r));
  Tensor gate, up;
  {
    Float8SharedInputs shared;
    gate = w1.forward_gathered(f);
    up = w3.forward_gathered(f);
  }
  return w2.forward_onto(r, swiglu(gate, up));
}

}  // namespace bmt::models
