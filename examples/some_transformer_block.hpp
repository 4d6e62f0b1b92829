#pragma once
// SomeTransformerBlock: the block of the quick start's examples (steps 2 and 3), a small pre-norm
// GPT-style transformer block written with the library's differentiable ops:
//
//   h = x + s * out(attention(qkv(layer_norm(x))))
//   y = h + s * down(gelu(up(layer_norm(h))))          s = 1 / sqrt(2 * depth)
//
// It is a plain bmt::Module: its parameters are DistributedParameters, used inside forward as
// ordinary tensors. Wrapped in bmt::CheckpointBlock (or appended to a bmt::TransformerBlockList),
// ZeRO-3 shards them, gathers them just before forward runs, and recomputes forward in backward.
//
// forward(x, batch, heads, depth) is the quick start's `module(x, 1, 2, 3)`. x is the only tensor
// argument, so it is the block's autograd input; the three ints are extra non-tensor arguments:
// CheckpointBlock keeps a copy of them so that backward's recompute sees the same values.
//   batch  x (any shape, batch * T * dim elements, such as the [1024] parameter of the quick start)
//          is read as `batch` sequences of T positions of `dim` features;
//   heads  attention heads: the same weights serve any head count that divides dim;
//   depth  blocks in the stack: each block adds two residual branches, scaled by 1/sqrt(2 depth)
//          so that the residual stream's variance does not grow with the depth of the stack.
// The output has x's shape, so blocks chain: x = block(x, 1, 2, 3).
#include <bmtrain/bmtrain.hpp>

#include <cmath>
#include <cstdint>

namespace example {

// Its layers are the library's: bmt::nn::Linear (W [out, in] ~ N(0, 1/in), so unit-variance
// inputs give unit-variance outputs) and bmt::nn::LayerNorm.
using bmt::nn::LayerNorm;
using bmt::nn::Linear;

class SomeTransformerBlock : public bmt::Module {
 public:
  SomeTransformerBlock(std::int64_t dim, std::int64_t ffn)
      : dim_(dim), attn_norm_(dim), qkv_(dim, 3 * dim), attn_out_(dim, dim), mlp_norm_(dim), mlp_up_(dim, ffn),
        mlp_down_(ffn, dim) {
    // Names as a checkpoint shows them: "module_list.0.qkv.weight", ...
    register_module("attn_norm", attn_norm_);
    register_module("qkv", qkv_);
    register_module("attn_out", attn_out_);
    register_module("mlp_norm", mlp_norm_);
    register_module("mlp_up", mlp_up_);
    register_module("mlp_down", mlp_down_);
  }

  bmt::Tensor forward(const bmt::Tensor& x, int batch, int heads, int depth) const {
    BMT_REQUIRE(batch > 0 && x.numel() % (batch * dim_) == 0,
                "SomeTransformerBlock: expected " << batch << " sequences of " << dim_ << " features (a multiple of "
                                                  << batch * dim_ << " elements), found x of shape "
                                                  << bmt::to_string(x.shape()));
    BMT_REQUIRE(heads > 0 && dim_ % heads == 0,
                "SomeTransformerBlock: expected a head count that divides " << dim_ << ", found " << heads);
    BMT_REQUIRE(depth > 0, "SomeTransformerBlock: expected a positive stack depth, found " << depth);
    const std::int64_t B = batch, T = x.numel() / (batch * dim_), H = heads, D = dim_ / heads;
    const float branch = 1.0f / std::sqrt(2.0f * static_cast<float>(depth));

    bmt::Tensor h = bmt::reshape(x, {B, T, dim_});
    // Attention reads q, k and v in the [B, T, H, D] layout the fused projection produces: no copy.
    auto qkv = bmt::split(qkv_.forward(attn_norm_.forward(h)), {dim_, dim_, dim_}, -1);
    bmt::Tensor a = bmt::attention_bthd(bmt::reshape(qkv[0], {B, T, H, D}), bmt::reshape(qkv[1], {B, T, H, D}),
                                        bmt::reshape(qkv[2], {B, T, H, D}), /*causal=*/true);
    h = bmt::add(h, bmt::scale(attn_out_.forward(bmt::reshape(a, {B, T, dim_})), branch));
    bmt::Tensor m = mlp_down_.forward(bmt::gelu(mlp_up_.forward(mlp_norm_.forward(h))));
    h = bmt::add(h, bmt::scale(m, branch));
    return bmt::reshape(h, x.shape());
  }

 private:
  std::int64_t dim_;
  LayerNorm attn_norm_;
  Linear qkv_, attn_out_;
  LayerNorm mlp_norm_;
  Linear mlp_up_, mlp_down_;
};

}  // namespace example
