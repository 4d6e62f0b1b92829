#include "bmtrain/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/autograd/kept_outputs.hpp"
#include "bmtrain/kernels/attention.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "upstream_grad.hpp"

namespace bmt {

namespace {

// Uninitialized gradient buffers laid out like q, k and v. When those are views that exactly tile
// one buffer (the fused QKV projection, split and reshaped), the gradients are the same views of
// one new buffer, so that split's backward joins them with no copy. Separate buffers otherwise.
std::vector<Tensor> empty_like_inputs(const std::vector<Tensor>& in) {
  bool tiled = true;
  std::size_t lo = SIZE_MAX, hi = 0, total = 0;
  for (const Tensor& t : in) {
    tiled = tiled && t.storage() && t.storage() == in[0].storage() && t.dtype() == in[0].dtype() && t.numel() > 0;
    if (!tiled) break;
    std::size_t last = t.impl()->offset;
    for (std::int64_t d = 0; d < t.dim(); ++d) {
      tiled = tiled && t.strides()[d] >= 0;
      last += static_cast<std::size_t>((t.size(d) - 1) * t.strides()[d]);
    }
    lo = std::min(lo, t.impl()->offset);
    hi = std::max(hi, last + 1);
    total += static_cast<std::size_t>(t.numel());
  }
  std::vector<Tensor> out;
  if (!tiled || hi - lo != total) {
    for (const Tensor& t : in) out.push_back(Tensor::empty(t.shape(), t.dtype()));
    return out;
  }
  const Tensor base = Tensor::empty({static_cast<std::int64_t>(total)}, in[0].dtype());
  for (const Tensor& t : in) out.push_back(base.as_strided(t.shape(), t.strides(), t.impl()->offset - lo));
  return out;
}

// Inputs: q, k, v, in the op's layout ([B, H, T, D], or [B, T, H, D] when bthd).
class AttentionFn final : public autograd::Function {
 public:
  AttentionFn(bool causal, std::optional<float> scale, bool bthd) : causal_(causal), scale_(scale), bthd_(bthd) {}
  std::string name() const override { return "Attention"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const char* layout = bthd_ ? "[B, T, H, D]" : "[B, H, T, D]";
    for (int i = 0; i < 3; ++i)
      BMT_REQUIRE(in[i].defined() && in[i].dim() == 4, "attention: expected 4-dimensional q, k, v ("
                                                           << layout << "), found "
                                                           << (in[i].defined() ? to_string(in[i].shape()) : "none"));
    q_ = unit_head_stride(in[0]).detach();
    k_ = unit_head_stride(in[1]).detach();
    v_ = unit_head_stride(in[2]).detach();
    const float scale = scale_ ? *scale_ : 1.0f / std::sqrt(static_cast<float>(q_.size(3)));
    scale_ = scale;
    const Tensor qh = heads_first(q_);
    const Shape lse_shape{qh.size(0), qh.size(1), qh.size(2)};
    Tensor out;
    autograd::KeptOutputs* kept = autograd::KeptOutputs::active("attention");
    if (kept && kept->replaying()) {
      // A recompute whose forward kept this call's output and logsumexp: the same values.
      const auto taken = kept->take("attention", {{q_.shape(), q_.dtype()}, {lse_shape, DType::f32}});
      out = taken[0];
      lse_ = taken[1];
    } else {
      out = Tensor::empty(q_.shape(), q_.dtype());
      lse_ = Tensor::empty(lse_shape, DType::f32);
      kernels::attention_forward(qh, heads_first(k_), heads_first(v_), causal_, scale, heads_first(out), lse_);
      if (kept) kept->put({out, lse_});
    }
    out_ = out.detach();
    return {out};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor dout = upstream_grad(g[0], out_, name());
    const std::vector<Tensor> grads = empty_like_inputs({q_, k_, v_});
    const Tensor &dq = grads[0], &dk = grads[1], &dv = grads[2];
    kernels::attention_backward(heads_first(q_), heads_first(k_), heads_first(v_), heads_first(out_),
                                heads_first(dout), lse_, causal_, *scale_, heads_first(dq), heads_first(dk),
                                heads_first(dv));
    return {dq, dk, dv};
  }

  void release_saved() override { q_ = k_ = v_ = out_ = lse_ = Tensor(); }

 private:
  // The kernel's [B, H, T, D] view of a tensor in the op's layout (no copy).
  Tensor heads_first(const Tensor& t) const { return bthd_ ? t.transpose(1, 2) : t; }
  static Tensor unit_head_stride(const Tensor& t) { return t.size(3) <= 1 || t.strides()[3] == 1 ? t : contiguous(t); }

  bool causal_;
  std::optional<float> scale_;
  bool bthd_;
  Tensor q_, k_, v_, out_, lse_;
};

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, std::optional<float> scale) {
  return autograd::call<AttentionFn>({q, k, v}, causal, scale, false)[0];
}

Tensor attention_bthd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, std::optional<float> scale) {
  return autograd::call<AttentionFn>({q, k, v}, causal, scale, true)[0];
}

}  // namespace bmt
