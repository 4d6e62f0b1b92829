// float8_linear: forward and backward as FP8 GEMMs (ops/float8_linear.hpp). FP8 tensor cores read
// both operands with the reduced dimension contiguous, so each product takes the layout it needs
// from the quantizing pass, which writes a tensor's codes row-major, transposed or both: x and W
// row-major for y = x W^T; dy row-major and W transposed ([in, out]) for dx = dy W; dy and x
// transposed ([out, rows], [in, rows]) for dW = dy^T x. Forward keeps only what backward reads:
// x's transposed codes (1 byte an element) and W's, with their scales (and the row-major codes
// until the forward GEMM has run, which under outputs on demand may be later, or never). A weight
// whose codes a ZeRO block gathers keeps nothing: backward asks for the codes of the block's
// backward gather and transposes them then, so that a step that keeps every block's activations
// does not also hold every block's weight in between.
#include "bmtrain/ops/float8_linear.hpp"

#include <algorithm>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/kernels/float8.hpp"
#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bias_gradient.hpp"

namespace bmt {

namespace {

// out ([m, n], leading dimension n) = A B^T (+ out) (+ bias) with A [m, k] and B [n, k] in float8.
void float8_product(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                    const Tensor& out, bool accumulate, const void* bias = nullptr) {
  kernels::Float8GemmParams p;
  p.m = a.size(0);
  p.k = a.size(1);
  p.n = b.size(0);
  p.a = a.data();
  p.a_dtype = a.dtype();
  p.a_scale = a_scale_inv.data_as<float>();
  p.b = b.data();
  p.b_dtype = b.dtype();
  p.b_scale = b_scale_inv.data_as<float>();
  p.c = out.data();
  p.c_dtype = out.dtype();
  p.ldc = p.n;
  p.accumulate = accumulate;
  p.bias = bias;
  kernels::gemm_float8(p);
}

// x's codes under current scaling: its own absolute maximum now, in `format`, in the layouts asked.
kernels::Float8Matrix current_codes(const Tensor& x, std::int64_t cols, DType format, bool row_major,
                                    bool transposed) {
  return kernels::quantize_float8(x, cols, kernels::abs_max(x), format, row_major, transposed);
}

// A DeferrableFunction: prepare quantizes (backward needs the transposed codes), write runs the
// forward GEMM, so that in a block's recompute a product whose output nobody reads is never made.
class Float8Linear final : public autograd::DeferrableFunction {
 public:
  Float8Linear() = default;
  // The weight's codes made already (a ZeRO block's float8 gather): used in place of quantizing it.
  explicit Float8Linear(Float8WeightCodes weight_codes) : weight_codes_(std::move(weight_codes)) {}

  std::string name() const override { return "float8_linear"; }
  bool prepare_queues_work() const override { return true; }

  std::vector<Tensor> prepare(const std::vector<Tensor>& in) override {
    const Tensor &x = in[0], &w = in[1], &bias = in[2];
    BMT_REQUIRE(x.defined() && w.defined() && is_floating(x.dtype()) && x.dtype() == w.dtype(),
                "float8_linear: expected input and weight of one floating dtype, found "
                    << (x.defined() ? dtype_name(x.dtype()) : "none") << " and "
                    << (w.defined() ? dtype_name(w.dtype()) : "none"));
    BMT_REQUIRE(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
                "float8_linear: expected input [..., in] and weight [out, in] with matching in, found input "
                    << to_string(x.shape()) << " and weight " << to_string(w.shape()));
    if (bias.defined()) {
      BMT_REQUIRE(bias.dtype() == w.dtype() && bias.dim() == 1 && bias.size(0) == w.size(0),
                  "float8_linear: expected bias [" << w.size(0) << "] in " << dtype_name(w.dtype()) << ", found "
                                                   << to_string(bias.shape()) << " in " << dtype_name(bias.dtype()));
    }
    x_shape_ = x.shape();
    in_ = w.size(1);
    out_ = w.size(0);
    rows_ = 1;
    for (std::int64_t d = 0; d + 1 < x.dim(); ++d) rows_ *= x.shape()[d];
    Shape y_shape = x.shape();
    y_shape.back() = out_;
    const Tensor y = Tensor::empty(y_shape, x.dtype());
    if (y.numel() == 0 || in_ == 0) return {y};
    const bool keep = is_recording();
    const Tensor xc = contiguous(x.detach());
    // Backward reads x transposed (for dW) and W transposed (for dx), and only those. (The graph's
    // edges are made after forward: which gradients it will want is read off the inputs.)
    Float8SharedInputs* shared = Float8SharedInputs::current();
    const kernels::Float8Matrix qx =
        shared ? shared->quantize(xc, in_, keep && w.requires_grad())
               : current_codes(xc, in_, DType::f8e4m3, true, keep && w.requires_grad());
    x_codes_ = qx.codes;
    x_scale_inv_ = qx.scale_inv;
    if (keep) x_t_ = qx.transposed;
    if (weight_codes_) {
      const kernels::Float8Matrix given = checked_weight_codes("forward");
      // The codes are a gather buffer's: held no longer than the forward's GEMM.
      w_codes_ = given.codes;
      w_scale_inv_ = given.scale_inv;
      gathered_ = true;
      if (!(keep && x.requires_grad())) weight_codes_ = nullptr;
      return {y};
    }
    const Tensor wc = contiguous(w.detach());
    const kernels::Float8Matrix qw = current_codes(wc, in_, DType::f8e4m3, true,
                                                              keep && x.requires_grad());
    w_codes_ = qw.codes;
    w_scale_inv_ = qw.scale_inv;
    if (keep) w_t_ = qw.transposed;
    return {y};
  }

  void write(const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const Tensor& y = out[0];
    if (y.numel() == 0) return;
    const Tensor bias = in[2].defined() ? contiguous(in[2]) : Tensor();
    if (in_ == 0) {  // an empty sum: y is the bias on every row
      y.zero_();
      if (bias.defined()) y.copy_(kernels::binary(kernels::BinaryOp::add, y, bias));
      return;
    }
    // An f32 y takes its bias in a pass of its own (the FP8 GEMM's bias is bf16/f16 only).
    const bool bias_in_gemm = bias.defined() && y.dtype() != DType::f32;
    float8_product(x_codes_, x_scale_inv_, w_codes_, w_scale_inv_, y.view({rows_, out_}), false,
                   bias_in_gemm ? bias.data() : nullptr);
    x_codes_ = w_codes_ = Tensor();  // the forward's codes are done with
    if (gathered_) w_scale_inv_ = Tensor();  // a gather buffer's too
    if (bias.defined() && !bias_in_gemm) y.copy_(kernels::binary(kernels::BinaryOp::add, y, bias));
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor g = contiguous(grads[0]);
    const DType dtype = g.dtype();
    Tensor dx, dw, db;
    const bool want_dx = needs_input_grad(0), want_dw = needs_input_grad(1);
    if (rows_ == 0 || out_ == 0 || in_ == 0) {  // an empty product: zero gradients
      if (want_dx) dx = Tensor::zeros(x_shape_, dtype);
      if (want_dw) dw = Tensor::zeros({out_, in_}, dtype);
    } else if (want_dx || want_dw) {
      const kernels::Float8Matrix qg = current_codes(g, out_, DType::f8e5m2, want_dx, want_dw);
      if (want_dx) {
        // Added (accumulate) into the gradient x's other consumers already gave it, when there is one.
        const Tensor partial = partial_gradient(0);
        const bool into_partial = partial.defined() && partial.shape() == x_shape_ && partial.dtype() == dtype &&
                                  partial.is_contiguous();
        const Tensor target = into_partial ? partial : Tensor::empty(x_shape_, dtype);
        if (weight_codes_) {  // the block's backward gather, used before the block lets it go
          const kernels::Float8Matrix given = checked_weight_codes("backward");
          w_t_ = kernels::transpose_float8(given.codes);
          w_scale_inv_ = given.scale_inv;
        }
        float8_product(qg.codes, qg.scale_inv, w_t_, w_scale_inv_, target.view({rows_, in_}), into_partial);
        if (!into_partial) dx = target;
      }
      if (want_dw) {
        // Straight into the weight's gradient buffer when it has one (ZeRO blocks do, in f32):
        // written over a buffer that holds no values yet, else added.
        const Tensor target = leaf_gradient(1, /*will_claim=*/true);
        if (target.defined() && (target.dtype() == dtype || target.dtype() == DType::f32) && target.is_contiguous()) {
          float8_product(qg.transposed, qg.scale_inv, x_t_, x_scale_inv_, target.view({out_, in_}),
                         /*accumulate=*/!claim_leaf_gradient(1));
        } else {
          dw = Tensor::empty({out_, in_}, dtype);
          float8_product(qg.transposed, qg.scale_inv, x_t_, x_scale_inv_, dw, false);
        }
      }
    }
    if (needs_input_grad(2)) db = bias_gradient(*this, 2, g.view({rows_, out_}));
    return {dx, dw, db};
  }

  void release_saved() override {
    x_codes_ = w_codes_ = x_t_ = x_scale_inv_ = w_t_ = w_scale_inv_ = Tensor();
    weight_codes_ = nullptr;
  }

 private:
  // The weight's codes from weight_codes_, checked against the weight's shape.
  kernels::Float8Matrix checked_weight_codes(const char* pass) const {
    const kernels::Float8Matrix m = weight_codes_();
    BMT_REQUIRE(m.codes.defined() && m.codes.dtype() == DType::f8e4m3 && m.codes.shape() == (Shape{out_, in_}) &&
                    m.codes.is_contiguous() && m.scale_inv.defined() && m.scale_inv.dtype() == DType::f32 &&
                    m.scale_inv.numel() == 1,
                "float8_linear: expected the weight's codes in " << pass << " as contiguous f8e4m3 [" << out_ << ", "
                    << in_ << "] with one f32 inverse scale, found "
                    << (m.codes.defined() ? std::string(m.codes.is_contiguous() ? "contiguous " : "strided ") +
                                                dtype_name(m.codes.dtype()) + " " + to_string(m.codes.shape())
                                          : std::string("no codes"))
                    << " with " << (m.scale_inv.defined() ? std::to_string(m.scale_inv.numel()) + " " +
                                                                dtype_name(m.scale_inv.dtype()) + " inverse scale(s)"
                                                          : std::string("no inverse scale")));
    return m;
  }

  Float8WeightCodes weight_codes_;  // where the weight's codes come from, when made before the call
  bool gathered_ = false;           // the forward's weight codes and scale were weight_codes_'
  Shape x_shape_;
  std::int64_t in_ = 0, out_ = 0, rows_ = 0;
  Tensor x_codes_, w_codes_;  // the forward's e4m3 codes, [rows, in] and [out, in], until write
  Tensor x_t_, x_scale_inv_;  // x's codes transposed, [in, rows], and their 1 / scale
  Tensor w_t_, w_scale_inv_;  // W's codes transposed, [in, out]
};

}  // namespace

namespace {
thread_local Float8SharedInputs* innermost_shared_inputs = nullptr;
}  // namespace

Float8SharedInputs::Float8SharedInputs() : outer_(innermost_shared_inputs) { innermost_shared_inputs = this; }

Float8SharedInputs::~Float8SharedInputs() { innermost_shared_inputs = outer_; }

Float8SharedInputs* Float8SharedInputs::current() { return innermost_shared_inputs; }

kernels::Float8Matrix Float8SharedInputs::quantize(const Tensor& x, std::int64_t cols, bool transposed) {
  const auto same = [&](const Entry& e) {
    return e.x.data() == x.data() && e.x.shape() == x.shape() && e.x.dtype() == x.dtype() &&
           e.codes.codes.size(-1) == cols;
  };
  const auto it = std::find_if(entries_.begin(), entries_.end(), same);
  if (it != entries_.end() && (it->codes.transposed.defined() || !transposed)) return it->codes;
  // New, or made without the transposed codes this product's backward needs: made (again) whole.
  const kernels::Float8Matrix q = current_codes(x, cols, DType::f8e4m3, true, transposed);
  if (it != entries_.end())
    it->codes = q;
  else
    entries_.push_back({x, q});
  return q;
}

Tensor float8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return autograd::call<Float8Linear>({x, weight, bias})[0];
}

Tensor float8_linear(const Tensor& x, const Tensor& weight, Float8WeightCodes weight_codes, const Tensor& bias) {
  BMT_REQUIRE(weight_codes != nullptr, "float8_linear: expected where the weight's codes come from, found none");
  return autograd::call<Float8Linear>({x, weight, bias}, std::move(weight_codes))[0];
}

}  // namespace bmt
