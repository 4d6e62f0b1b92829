// matmul and linear over the GEMM seam, forward and backward. For C = A B:
//   dA = dC B^T,  dB = A^T dC,
// each one GEMM in which a saved operand is read with its transpose flag flipped, so neither a
// transposed view nor a saved operand is ever copied for backward.
#include "bmtrain/ops/matmul.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/kernels/reduce.hpp"

namespace bmt {

namespace {

using kernels::GemmOperand;
using kernels::GemmParams;

// A tensor read as a batch of matrices: its last two dimensions [rows, cols], the leading ones
// flattened into the batch. `tensor` keeps the memory alive (a copy when the layout needed one).
struct MatrixBatch {
  Tensor tensor;
  GemmOperand op;
  std::int64_t batch = 1, rows = 0, cols = 0;

  MatrixBatch transposed() const {
    MatrixBatch t = *this;
    t.op.trans = !op.trans;
    std::swap(t.rows, t.cols);
    return t;
  }
};

// Reads t [B..., rows, cols] in place when each matrix has unit stride along one of its
// dimensions and the leading dimensions step uniformly; copies it to contiguous memory otherwise.
MatrixBatch as_matrices(const Tensor& t) {
  const std::int64_t nd = t.dim();
  MatrixBatch m;
  m.rows = t.size(-2);
  m.cols = t.size(-1);
  for (std::int64_t d = 0; d + 2 < nd; ++d) m.batch *= t.shape()[d];
  const Shape& st = t.strides();
  const std::int64_t r = m.rows, c = m.cols, sr = st[nd - 2], sc = st[nd - 1];
  // The stride of a size-1 dimension carries no meaning, so it never rules a layout out.
  const bool row_major = (c == 1 || sc == 1) && (r == 1 || sr >= c);
  const bool col_major = (r == 1 || sr == 1) && (c == 1 || sc >= r);  // a transposed view
  bool direct = row_major || col_major;
  if (row_major)
    m.op = {t.data(), r == 1 ? std::max<std::int64_t>(c, 1) : std::max<std::int64_t>(sr, 1), false, 0};
  else if (col_major)
    m.op = {t.data(), c == 1 ? std::max<std::int64_t>(r, 1) : std::max<std::int64_t>(sc, 1), true, 0};
  // The batch dimensions must collapse into one stride.
  std::int64_t batch_stride = r * c, expected = -1;  // expected: the next outer dimension's stride
  for (std::int64_t d = nd - 3; direct && d >= 0; --d) {
    if (t.shape()[d] == 1) continue;
    if (expected < 0) batch_stride = st[d];
    else direct = st[d] == expected;
    expected = st[d] * t.shape()[d];
  }
  if (!direct) {
    const Tensor packed = contiguous(t);
    m.tensor = packed;
    m.op = {packed.data(), std::max<std::int64_t>(c, 1), false, r * c};
    return m;
  }
  m.tensor = t;
  m.op.batch_stride = batch_stride;
  return m;
}

// out (contiguous [batch, m, n]) = op(A) op(B) (+ bias) (+ out when accumulating), then the
// epilogue (kernels/gemm.hpp) with its aux matrix and bias gradient.
void multiply(const MatrixBatch& a, const MatrixBatch& b, const Tensor& out, const void* bias = nullptr,
              bool accumulate = false, kernels::Epilogue epilogue = kernels::Epilogue::none, void* aux = nullptr,
              void* bias_grad = nullptr) {
  GemmParams p;
  p.dtype = out.dtype();
  p.m = a.rows;
  p.n = b.cols;
  p.k = a.cols;
  p.batch = a.batch;
  p.a = a.op;
  p.b = b.op;
  p.c = out.data();
  p.ldc = p.n;
  p.c_batch_stride = p.m * p.n;
  p.bias = bias;
  p.beta = accumulate ? 1.0f : 0.0f;
  p.epilogue = epilogue;
  p.aux = aux;
  p.bias_grad = bias_grad;
  kernels::gemm(p);
}

Tensor product(const MatrixBatch& a, const MatrixBatch& b, const Shape& shape, DType dtype) {
  Tensor out = Tensor::empty(shape, dtype);
  if (out.numel() == 0) return out;
  if (a.cols == 0) {  // an empty sum
    out.zero_();
    return out;
  }
  multiply(a, b, out);
  return out;
}

// a [..., K] as a matrix [M, K] (M = product of the leading dimensions).
MatrixBatch as_rows(const Tensor& a) {
  if (a.dim() == 2) return as_matrices(a);
  const std::int64_t k = a.size(-1);
  std::int64_t rows = 1;
  for (std::int64_t d = 0; d + 1 < a.dim(); ++d) rows *= a.shape()[d];
  return as_matrices(contiguous(a).view({rows, k}));
}

// The gradient of the weight read as `w` in y = x w^T: dy^T x, added straight into the weight's
// gradient buffer when it has one (ZeRO blocks do; the result is then undefined).
Tensor weight_gradient(const autograd::Function& fn, std::size_t input, const MatrixBatch& dy, const MatrixBatch& x,
                       const MatrixBatch& w, DType dtype) {
  const Tensor target = fn.leaf_gradient(input);
  if (target.defined() && target.dtype() == dtype && dy.rows > 0) {
    multiply(dy.transposed(), x, target, nullptr, /*accumulate=*/true);
    return Tensor();
  }
  return product(dy.transposed(), x, {w.rows, w.cols}, dtype);
}

void require_pair(const Tensor& a, const Tensor& b, const char* op, const char* a_name, const char* b_name) {
  BMT_REQUIRE(a.defined() && b.defined(), op << ": expected defined " << a_name << " and " << b_name);
  BMT_REQUIRE(is_floating(a.dtype()) && a.dtype() == b.dtype(),
              op << ": expected " << a_name << " and " << b_name << " of one floating dtype, found "
                 << dtype_name(a.dtype()) << " " << to_string(a.shape()) << " and " << dtype_name(b.dtype()) << " "
                 << to_string(b.shape()));
}

void require_bias(const Tensor& bias, const Tensor& w, const char* op, const char* name) {
  if (!bias.defined()) return;
  BMT_REQUIRE(bias.dtype() == w.dtype() && bias.dim() == 1 && bias.size(0) == w.size(0),
              op << ": expected " << name << " [" << w.size(0) << "] in " << dtype_name(w.dtype()) << ", found "
                 << to_string(bias.shape()) << " in " << dtype_name(bias.dtype()));
}

class Matmul final : public autograd::Function {
 public:
  std::string name() const override { return "matmul"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor &a = in[0], &b = in[1];
    require_pair(a, b, "matmul", "a", "b");
    BMT_REQUIRE(a.dim() >= 2 && b.dim() >= 2,
                "matmul: expected a [..., M, K] and b [..., K, N] of at least 2 dimensions, found a "
                    << to_string(a.shape()) << " and b " << to_string(b.shape()));
    BMT_REQUIRE(a.size(-1) == b.size(-2), "matmul: expected a [..., M, K] and b [K, N] with matching K, found a "
                                              << to_string(a.shape()) << " and b " << to_string(b.shape()));
    a_shape_ = a.shape();
    b_shape_ = b.shape();
    Shape out_shape = a.shape();
    out_shape.back() = b.size(-1);
    if (b.dim() == 2) {
      a_ = as_rows(a.detach());
    } else {
      bool same_batch = a.dim() == b.dim();
      for (std::int64_t d = 0; same_batch && d + 2 < a.dim(); ++d) same_batch = a.shape()[d] == b.shape()[d];
      BMT_REQUIRE(same_batch, "matmul: expected a [B..., M, K] and b [B..., K, N] with equal leading dimensions "
                              "(or b 2-D), found a "
                                  << to_string(a.shape()) << " and b " << to_string(b.shape()));
      a_ = as_matrices(a.detach());
    }
    b_ = as_matrices(b.detach());
    return {product(a_, b_, out_shape, a.dtype())};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor()};
    const Tensor g = contiguous(grads[0]);
    MatrixBatch dc = b_shape_.size() == 2 ? as_rows(g) : as_matrices(g);
    Tensor da, db;
    if (needs_input_grad(0)) da = product(dc, b_.transposed(), a_shape_, g.dtype());
    if (needs_input_grad(1)) db = product(a_.transposed(), dc, b_shape_, g.dtype());
    return {da, db};
  }
  void release_saved() override { a_ = b_ = MatrixBatch(); }

 private:
  Shape a_shape_, b_shape_;
  MatrixBatch a_, b_;
};

class Linear final : public autograd::Function {
 public:
  std::string name() const override { return "linear"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor &x = in[0], &w = in[1], &bias = in[2];
    require_pair(x, w, "linear", "input", "weight");
    BMT_REQUIRE(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
                "linear: expected input [..., in] and weight [out, in] with matching in, found input "
                    << to_string(x.shape()) << " and weight " << to_string(w.shape()));
    require_bias(bias, w, "linear", "bias");
    x_shape_ = x.shape();
    x_ = as_rows(x.dim() == 1 ? contiguous(x.detach()).view({1, x.size(0)}) : x.detach());
    w_ = as_matrices(w.detach());
    Shape out_shape = x.shape();
    out_shape.back() = w.size(0);
    Tensor y = Tensor::empty(out_shape, x.dtype());
    if (y.numel() == 0) return {y};
    const Tensor b = bias.defined() ? contiguous(bias) : Tensor();
    if (x_.cols == 0) {  // no inputs: y is the bias on every row
      y.zero_();
      if (b.defined()) y = kernels::binary(kernels::BinaryOp::add, y, b);
      return {y};
    }
    multiply(x_, w_.transposed(), y, b.defined() ? b.data() : nullptr);
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor g = contiguous(grads[0]);
    const MatrixBatch dy = as_rows(g.dim() == 1 ? g.view({1, g.size(0)}) : g);
    Tensor dx, dw, db;
    if (needs_input_grad(0)) dx = product(dy, w_, x_shape_, g.dtype());
    if (needs_input_grad(1)) dw = weight_gradient(*this, 1, dy, x_, w_, g.dtype());
    if (needs_input_grad(2)) db = kernels::sum_dim(g.view({dy.rows, w_.rows}), 0, false);
    return {dx, dw, db};
  }
  void release_saved() override { x_ = w_ = MatrixBatch(); }

 private:
  Shape x_shape_;
  MatrixBatch x_, w_;
};


// Inputs: x, w1, b1, w2, b2. Saves x, the weights, the pre-activation (the first GEMM's aux) and
// the activation (the second GEMM's input).
class GeluMlp final : public autograd::Function {
 public:
  std::string name() const override { return "gelu_mlp"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor &x = in[0], &w1 = in[1], &b1 = in[2], &w2 = in[3], &b2 = in[4];
    require_pair(x, w1, "gelu_mlp", "input", "w1");
    require_pair(x, w2, "gelu_mlp", "input", "w2");
    BMT_REQUIRE(w1.dim() == 2 && w2.dim() == 2 && x.dim() >= 1 && x.size(-1) == w1.size(1) &&
                    w2.size(1) == w1.size(0),
                "gelu_mlp: expected input [..., in], w1 [hidden, in] and w2 [out, hidden], found input "
                    << to_string(x.shape()) << ", w1 " << to_string(w1.shape()) << " and w2 " << to_string(w2.shape()));
    require_bias(b1, w1, "gelu_mlp", "b1");
    require_bias(b2, w2, "gelu_mlp", "b2");
    x_shape_ = x.shape();
    x_ = as_rows(x.dim() == 1 ? contiguous(x.detach()).view({1, x.size(0)}) : x.detach());
    w1_ = as_matrices(w1.detach());
    w2_ = as_matrices(w2.detach());
    const std::int64_t rows = x_.rows, hidden = w1.size(0);
    Shape out_shape = x.shape();
    out_shape.back() = w2.size(0);
    Tensor y = Tensor::empty(out_shape, x.dtype());
    if (y.numel() == 0 || rows * hidden == 0 || x_.cols == 0) {  // degenerate sizes: the plain ops
      const Tensor h = contiguous(linear(x.detach(), w1.detach(), b1.defined() ? b1.detach() : Tensor()));
      pre_ = h.view({rows, hidden});
      act_ = kernels::activation_forward(kernels::Activation::gelu, pre_);
      act_rows_ = as_matrices(act_);
      return {linear(act_.view(with_last(x_shape_, hidden)), w2.detach(), b2.defined() ? b2.detach() : Tensor())};
    }
    pre_ = Tensor::empty({rows, hidden}, x.dtype());
    act_ = Tensor::empty({rows, hidden}, x.dtype());
    const Tensor bias1 = b1.defined() ? contiguous(b1) : Tensor();
    multiply(x_, w1_.transposed(), act_, bias1.defined() ? bias1.data() : nullptr, false, kernels::Epilogue::gelu_aux,
             pre_.data());
    act_rows_ = as_matrices(act_);
    const Tensor bias2 = b2.defined() ? contiguous(b2) : Tensor();
    multiply(act_rows_, w2_.transposed(), y, bias2.defined() ? bias2.data() : nullptr);
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    std::vector<Tensor> result(5);
    if (!grads[0].defined()) return result;
    const Tensor g = contiguous(grads[0]);
    const std::int64_t out = w2_.rows, hidden = w1_.rows;
    const MatrixBatch dy = as_rows(g.dim() == 1 ? g.view({1, g.size(0)}) : g);
    if (dy.rows == 0 || hidden == 0 || out == 0 || x_.cols == 0) return degenerate_backward(g);
    if (needs_input_grad(3)) result[3] = weight_gradient(*this, 3, dy, act_rows_, w2_, g.dtype());
    if (needs_input_grad(4)) result[4] = kernels::sum_dim(g.view({dy.rows, out}), 0, false);
    if (!needs_input_grad(0) && !needs_input_grad(1) && !needs_input_grad(2)) return result;
    // d(pre) = (dy w2) * gelu'(pre), with b1's gradient (its column sums) from the same epilogue.
    const Tensor d_pre = Tensor::empty({dy.rows, hidden}, g.dtype());
    const Tensor db1 = needs_input_grad(2) ? Tensor::empty({hidden}, g.dtype()) : Tensor();
    multiply(dy, w2_, d_pre, nullptr, false, kernels::Epilogue::dgelu_bgrad, pre_.data(),
             db1.defined() ? db1.data() : nullptr);
    result[2] = db1;
    const MatrixBatch dh = as_matrices(d_pre);
    if (needs_input_grad(1)) result[1] = weight_gradient(*this, 1, dh, x_, w1_, g.dtype());
    if (needs_input_grad(0)) result[0] = product(dh, w1_, x_shape_, g.dtype());
    return result;
  }
  void release_saved() override {
    x_ = w1_ = w2_ = act_rows_ = MatrixBatch();
    pre_ = act_ = Tensor();
  }

 private:
  static Shape with_last(Shape s, std::int64_t last) {
    s.back() = last;
    return s;
  }
  // Empty token, hidden or input sizes: gradients of matching shapes, zeros where a sum is empty.
  std::vector<Tensor> degenerate_backward(const Tensor& g) const {
    const std::int64_t out = w2_.rows, hidden = w1_.rows, in = w1_.cols;
    std::vector<Tensor> r(5);
    if (needs_input_grad(0)) r[0] = Tensor::zeros(x_shape_, g.dtype());
    if (needs_input_grad(1)) r[1] = Tensor::zeros({hidden, in}, g.dtype());
    if (needs_input_grad(2)) r[2] = Tensor::zeros({hidden}, g.dtype());
    if (needs_input_grad(3)) r[3] = product(as_rows(g).transposed(), act_rows_, {out, hidden}, g.dtype());
    if (needs_input_grad(4)) r[4] = kernels::sum_dim(g.view({-1, out}), 0, false);
    return r;
  }

  Shape x_shape_;
  MatrixBatch x_, w1_, w2_, act_rows_;
  Tensor pre_, act_;
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return autograd::call<Matmul>({a, b})[0]; }

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return autograd::call<Linear>({x, weight, bias})[0];
}

Tensor gelu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  return autograd::call<GeluMlp>({x, w1, b1, w2, b2})[0];
}

}  // namespace bmt
