#include "bmtrain/models/gpt2_block.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/random.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/context.hpp"

namespace bmt::models {

GPT2Block::GPT2Block(const ModelConfig& cfg)
    : c(cfg),
      ln_1(cfg.dim, cfg.dtype, cfg.norm_eps),
      ln_2(cfg.dim, cfg.dtype, cfg.norm_eps),
      c_attn(cfg.dim, 3 * cfg.dim, true, cfg.dtype, init::normal(cfg.init_std), {cfg.dim, cfg.dim, cfg.dim}),
      c_fc(cfg.dim, cfg.ffn, true, cfg.dtype, init::normal(cfg.init_std)),
      attn_proj(cfg.dim, cfg.dim, true, cfg.dtype, residual_projection_init(cfg)),
      mlp_proj(cfg.ffn, cfg.dim, true, cfg.dtype, residual_projection_init(cfg)) {
  cfg.check_tensor_parallel(tp_size());
  register_module("ln_1", ln_1);
  register_module("attn", c_attn);  // attn.weight / attn.bias: the fused QKV projection
  register_module("attn_proj", attn_proj);
  register_module("ln_2", ln_2);
  register_module("mlp_fc", c_fc);
  register_module("mlp_proj", mlp_proj);
}

std::vector<io::HfTensor> GPT2Block::hf_tensors() {
  return {{"ln_1.weight", "ln_1.weight"},
          {"ln_1.bias", "ln_1.bias"},
          {"attn.weight", "attn.c_attn.weight", true},
          {"attn.bias", "attn.c_attn.bias"},
          {"attn_proj.weight", "attn.c_proj.weight", true},
          {"attn_proj.bias", "attn.c_proj.bias"},
          {"ln_2.weight", "ln_2.weight"},
          {"ln_2.bias", "ln_2.bias"},
          {"mlp_fc.weight", "mlp.c_fc.weight", true},
          {"mlp_fc.bias", "mlp.c_fc.bias"},
          {"mlp_proj.weight", "mlp.c_proj.weight", true},
          {"mlp_proj.bias", "mlp.c_proj.bias"}};
}

void GPT2Block::set_fp8(bool on) {
  c_attn.set_fp8(on);
  attn_proj.set_fp8(on);
  c_fc.set_fp8(on);
  mlp_proj.set_fp8(on);
}

Tensor GPT2Block::forward(const Tensor& x, std::int64_t batch) const {
  return on_block_rows(x, batch, "GPT2Block", [this](const Tensor& rows, std::int64_t b) { return forward_rows(rows, b); });
}

Tensor GPT2Block::forward_rows(const Tensor& x, std::int64_t batch) const {
  const std::int64_t tp = tp_size(), B = batch, T = x.size(0) * tp / batch, H = c.heads / tp, D = c.head_dim();
  const std::int64_t local = c.dim / tp;
  // [N, 3C/tp]: this rank's heads of q, then of k, then of v.
  auto qkv = split(c_attn.forward(ln_1.forward(x)), {local, local, local}, -1);
  Tensor y = attention_bthd(reshape(qkv[0], {B, T, H, D}), reshape(qkv[1], {B, T, H, D}),
                            reshape(qkv[2], {B, T, H, D}), true);
  Tensor h = residual(x, attn_proj, reshape(y, {B * T, local}));
  const Tensor m = ln_2.forward(h);
  // With no gradient to record (a recomputed block's first pass, evaluation) the GELU runs in the
  // first GEMM, saving a pass over the hidden activations. With one, it goes with the second GEMM,
  // whose backward takes its derivative in the GEMM that makes its gradient: that saves more.
  if (!autograd::grad_enabled()) return residual(h, mlp_proj, c_fc.forward_gelu(m));
  return residual(h, mlp_proj, c_fc.forward(m), /*gelu_first=*/true);
}

Tensor GPT2Block::residual(const Tensor& x, const nn::RowParallelLinear& proj, const Tensor& y,
                           bool gelu_first) const {
  if (c.dropout > 0.0f && is_training())
    return residual_add(x, dropout(gelu_first ? proj.gelu_forward(y) : proj.forward(y)));
  return proj.forward_onto(x, y, gelu_first);
}

Tensor GPT2Block::dropout(const Tensor& x) const {
  if (c.dropout <= 0.0f || !is_training()) return x;
  // x is this rank's rows of the group's [N, C]: their mask is the whole matrix's from its first row.
  const auto first = static_cast<std::uint64_t>(tp_rank()) * static_cast<std::uint64_t>(x.numel());
  return bmt::dropout(x, c.dropout, random::next_key(), true, first);
}

}  // namespace bmt::models
