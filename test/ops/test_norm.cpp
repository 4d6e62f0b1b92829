// LayerNorm and RMSNorm: forward against float64 references, saved statistics, gradients against
// finite differences, and bf16/f16 against f32.
#include <gtest/gtest.h>

#include <cmath>

#include "bmtrain/kernels/norm.hpp"
#include "bmtrain/ops/norm.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/gradcheck.hpp"
#include "common/host_reference.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

using testing::expect_close;
using testing::random_floats;
using testing::random_tensor;

struct NormReference {
  std::vector<double> y, mean, rstd;
};

// centered: LayerNorm; otherwise RMSNorm. w, b may be empty.
NormReference norm_reference(const std::vector<float>& x, std::int64_t C, const std::vector<float>& w,
                             const std::vector<float>& b, double eps, bool centered) {
  NormReference r;
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / C;
  for (std::int64_t i = 0; i < rows; ++i) {
    double mu = 0;
    if (centered) {
      for (std::int64_t j = 0; j < C; ++j) mu += x[i * C + j];
      mu /= C;
    }
    double var = 0;
    for (std::int64_t j = 0; j < C; ++j) var += (x[i * C + j] - mu) * (x[i * C + j] - mu);
    var /= C;
    const double rs = 1.0 / std::sqrt(var + eps);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
    for (std::int64_t j = 0; j < C; ++j) {
      double v = (x[i * C + j] - mu) * rs;
      if (!w.empty()) v *= w[j];
      if (!b.empty()) v += b[j];
      r.y.push_back(v);
    }
  }
  return r;
}

const std::vector<Shape> kShapes = {{1, 1}, {3, 7}, {2, 5, 33}, {4, 17}, {2, 64}, {1, 1000}};

TEST(LayerNorm, ForwardMatchesFloat64Reference) {
  std::uint32_t seed = 1;
  for (const Shape& shape : kShapes) {
    for (int affine = 0; affine < 3; ++affine) {  // none, weight only, weight and bias
      const std::int64_t C = shape.back();
      // An offset mean checks that the variance is not computed as E[x^2] - E[x]^2.
      const auto xv = random_floats(numel_of(shape), seed++, 2.0f, 4.0f);
      const auto wv = affine >= 1 ? random_floats(C, seed++, 0.5f, 1.5f) : std::vector<float>();
      const auto bv = affine >= 2 ? random_floats(C, seed++) : std::vector<float>();
      const Tensor x = Tensor::from_floats(xv, shape);
      const Tensor w = affine >= 1 ? Tensor::from_floats(wv, {C}) : Tensor();
      const Tensor b = affine >= 2 ? Tensor::from_floats(bv, {C}) : Tensor();
      const Tensor y = layer_norm(x, w, b, 1e-5f);
      EXPECT_EQ(y.shape(), shape);
      const auto ref = norm_reference(xv, C, wv, bv, 1e-5, true);
      expect_close(y.to_host_floats(), ref.y, 2e-5, 2e-5, "layer_norm " + to_string(shape));
    }
  }
}

TEST(LayerNorm, KernelSavesRowStatistics) {
  const Shape shape = {5, 33};
  const auto xv = random_floats(numel_of(shape), 11, -3.0f, 5.0f);
  const Tensor x = Tensor::from_floats(xv, shape);
  const Tensor y = Tensor::empty(shape), mean = Tensor::empty({5}), rstd = Tensor::empty({5});
  kernels::layer_norm_forward(x, Tensor(), Tensor(), 1e-5f, y, mean, rstd);
  const auto ref = norm_reference(xv, 33, {}, {}, 1e-5, true);
  expect_close(mean.to_host_floats(), ref.mean, 1e-5, 1e-5, "mean");
  expect_close(rstd.to_host_floats(), ref.rstd, 1e-5, 1e-5, "rstd");
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  for (const Shape& shape : std::vector<Shape>{{3, 7}, {2, 2, 5}, {1, 16}}) {
    const std::int64_t C = shape.back();
    const Tensor x = random_tensor(shape, 21, -2.0f, 2.0f);
    const Tensor w = random_tensor({C}, 22, 0.5f, 1.5f);
    const Tensor b = random_tensor({C}, 23);
    testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2]); }, {x, w, b},
                       {.step = 1e-2f, .rtol = 2e-2f, .atol = 2e-3f});
    testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0]); }, {x});
  }
}

TEST(LayerNorm, WeightGradientsReduceOverManyRows) {
  // Enough rows that a column sum in bf16 or a lost row chunk would show.
  const std::int64_t rows = 300, C = 9;
  const auto xv = random_floats(rows * C, 31, -2.0f, 2.0f);
  const auto dyv = random_floats(rows * C, 32);
  const auto wv = random_floats(C, 33, 0.5f, 1.5f);
  const auto r = testing::forward_backward(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2]); },
      {Tensor::from_floats(xv, {rows, C}), Tensor::from_floats(wv, {C}), Tensor::zeros({C})}, {false, true, true},
      dyv);
  const auto ref = norm_reference(xv, C, {}, {}, 1e-5, true);  // xhat
  std::vector<double> dw(C, 0.0), db(C, 0.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < C; ++j) {
      dw[j] += dyv[i * C + j] * ref.y[i * C + j];
      db[j] += dyv[i * C + j];
    }
  expect_close(r.grads[1], dw, 1e-4, 1e-4, "dweight");
  expect_close(r.grads[2], db, 1e-4, 1e-4, "dbias");
}

// Parameters with f32 gradient buffers (as inside a ZeRO block) get their column sums added there
// in place, never rounded to bf16; when only the weight has one, the backward falls back to new
// bf16 gradients, and the weight's is then added into its buffer by the graph.
TEST(Norms, ParameterGradientsAddIntoExistingF32Buffers) {
  const std::int64_t rows = 300, C = 24;
  const Tensor x = random_tensor({rows, C}, 34, -2.0f, 2.0f, DType::bf16);
  const Tensor dy = random_tensor({rows, C}, 35, -1.0f, 1.0f, DType::bf16);
  const auto g0w = random_floats(C, 36), g0b = random_floats(C, 37);
  const auto xv = x.to_host_floats(), dyv = dy.to_host_floats();
  for (bool centered : {true, false}) {
    const auto xhat = norm_reference(xv, C, {}, {}, 1e-5, centered).y;
    std::vector<double> dw(g0w.begin(), g0w.end()), db(g0b.begin(), g0b.end());
    for (std::int64_t i = 0; i < rows * C; ++i) {
      dw[i % C] += dyv[i] * xhat[i];
      db[i % C] += dyv[i];
    }
    for (bool bias_buffer : {true, false}) {
      if (!centered && !bias_buffer) continue;
      const std::string what = std::string(centered ? "layer_norm" : "rms_norm") +
                               (bias_buffer ? "" : ", bias without a buffer");
      Tensor w = random_tensor({C}, 38, 0.5f, 1.5f, DType::bf16).set_requires_grad(true);
      Tensor b = random_tensor({C}, 39, -1.0f, 1.0f, DType::bf16).set_requires_grad(true);
      w.set_grad(Tensor::from_floats(g0w, {C}, DType::f32));
      if (bias_buffer) b.set_grad(Tensor::from_floats(g0b, {C}, DType::f32));
      const void* w_before = w.grad().data();
      (centered ? layer_norm(x, w, b) : rms_norm(x, w)).backward(dy);
      EXPECT_EQ(w.grad().dtype(), DType::f32) << what;
      EXPECT_EQ(w.grad().data(), w_before) << what << ": weight gradient in place";
      // Added in f32: within f32 noise (a bf16 rounding of these sums, of size ~10, would be ~0.04
      // off); through a bf16 gradient: within one bf16 rounding of sums below 32.
      const double atol = bias_buffer ? 1e-4 : 32 * testing::roundoff(DType::bf16);
      const double rtol = bias_buffer ? 1e-4 : testing::roundoff(DType::bf16);
      expect_close(w.grad().to_host_floats(), dw, atol, rtol, what + " dweight");
      if (!centered) continue;
      if (bias_buffer) {
        expect_close(b.grad().to_host_floats(), db, 1e-4, 1e-4, what + " dbias");
      } else {
        EXPECT_EQ(b.grad().dtype(), DType::bf16) << what;
        std::vector<double> fresh = db;
        for (std::int64_t j = 0; j < C; ++j) fresh[j] -= g0b[j];
        expect_close(b.grad().to_host_floats(), fresh, atol, rtol, what + " dbias");
      }
    }
  }
  // The kernel refuses a buffer of a third dtype, and buffers of two dtypes.
  const Tensor mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  EXPECT_THROW(kernels::layer_norm_backward(dy, x, Tensor(), mean, rstd, Tensor(), Tensor::zeros({C}, DType::f16),
                                            Tensor(), true),
               Error);
  EXPECT_THROW(kernels::layer_norm_backward(dy, x, Tensor(), mean, rstd, Tensor(), Tensor::zeros({C}, DType::f16),
                                            Tensor()),
               Error);
  EXPECT_THROW(kernels::layer_norm_backward(dy, x, Tensor(), mean, rstd, Tensor(), Tensor::zeros({C}),
                                            Tensor::zeros({C}, DType::bf16), true),
               Error);
}

// Buffers lent as holding no values yet (a ZeRO block's, TensorImpl::grad_unwritten, here full of
// NaN) get the column sums written over them: both, or, when only the weight's holds none, that
// one zeroed and both added (the bias's earlier values kept). Either way they count as written.
TEST(Norms, ParameterGradientsWriteOverUnwrittenBuffers) {
  const std::int64_t rows = 300, C = 24;
  const Tensor x = random_tensor({rows, C}, 44, -2.0f, 2.0f, DType::bf16);
  const Tensor dy = random_tensor({rows, C}, 45, -1.0f, 1.0f, DType::bf16);
  const auto g0b = random_floats(C, 47);
  const auto xv = x.to_host_floats(), dyv = dy.to_host_floats();
  const auto xhat = norm_reference(xv, C, {}, {}, 1e-5, true).y;
  std::vector<double> dw(C, 0.0), db(C, 0.0);
  for (std::int64_t i = 0; i < rows * C; ++i) {
    dw[i % C] += dyv[i] * xhat[i];
    db[i % C] += dyv[i];
  }
  for (bool bias_unwritten : {true, false}) {
    const std::string what = bias_unwritten ? "both unwritten" : "bias written";
    Tensor w = random_tensor({C}, 48, 0.5f, 1.5f, DType::bf16).set_requires_grad(true);
    Tensor b = random_tensor({C}, 49, -1.0f, 1.0f, DType::bf16).set_requires_grad(true);
    w.set_grad(full({C}, std::nanf("")));
    w.impl()->grad_unwritten = true;
    b.set_grad(bias_unwritten ? full({C}, std::nanf("")) : Tensor::from_floats(g0b, {C}));
    b.impl()->grad_unwritten = bias_unwritten;
    layer_norm(x, w, b).backward(dy);
    std::vector<double> want_b = db;
    if (!bias_unwritten)
      for (std::int64_t j = 0; j < C; ++j) want_b[j] += g0b[j];
    expect_close(w.grad().to_host_floats(), dw, 1e-4, 1e-4, what + " dweight");
    expect_close(b.grad().to_host_floats(), want_b, 1e-4, 1e-4, what + " dbias");
    EXPECT_FALSE(w.impl()->grad_unwritten || b.impl()->grad_unwritten) << what;
  }
}

TEST(RmsNorm, ForwardMatchesFloat64Reference) {
  std::uint32_t seed = 100;
  for (const Shape& shape : kShapes) {
    for (int affine = 0; affine < 2; ++affine) {
      const std::int64_t C = shape.back();
      const auto xv = random_floats(numel_of(shape), seed++, -2.0f, 3.0f);
      const auto wv = affine ? random_floats(C, seed++, 0.5f, 1.5f) : std::vector<float>();
      const Tensor y = rms_norm(Tensor::from_floats(xv, shape), affine ? Tensor::from_floats(wv, {C}) : Tensor(), 1e-6f);
      const auto ref = norm_reference(xv, C, wv, {}, 1e-6, false);
      expect_close(y.to_host_floats(), ref.y, 2e-5, 2e-5, "rms_norm " + to_string(shape));
    }
  }
}

TEST(RmsNorm, GradientsMatchFiniteDifferences) {
  for (const Shape& shape : std::vector<Shape>{{3, 7}, {2, 2, 5}, {1, 16}}) {
    const Tensor x = random_tensor(shape, 41, -2.0f, 2.0f);
    const Tensor w = random_tensor({shape.back()}, 42, 0.5f, 1.5f);
    testing::gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1]); }, {x, w});
    testing::gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0]); }, {x});
  }
}

// bf16 and f16 storage: inputs rounded to the dtype, computed with f32 statistics, are within the
// output's own rounding (plus a little) of the f32 result on the same rounded inputs.
// Documented tolerances: bf16 2^-7 relative, f16 2^-10 relative, of max(1, |value|).
TEST(Norms, HalfPrecisionMatchesFloat) {
  const std::int64_t rows = 6, C = 40;
  for (DType dt : {DType::bf16, DType::f16}) {
    const double tol = dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    const auto xv = testing::rounded_to(random_floats(rows * C, 51, -2.0f, 2.0f), dt);
    const auto wv = testing::rounded_to(random_floats(C, 52, 0.5f, 1.5f), dt);
    const auto bv = testing::rounded_to(random_floats(C, 53), dt);
    const auto dyv = testing::rounded_to(random_floats(rows * C, 54), dt);
    for (bool centered : {true, false}) {
      auto fn = [centered](const std::vector<Tensor>& in) {
        return centered ? layer_norm(in[0], in[1], in[2]) : rms_norm(in[0], in[1]);
      };
      auto run = [&](DType d) {
        return testing::forward_backward(
            fn, {Tensor::from_floats(xv, {rows, C}, d), Tensor::from_floats(wv, {C}, d), Tensor::from_floats(bv, {C}, d)},
            {true, true, centered}, dyv);
      };
      const auto half = run(dt);
      const auto full = run(DType::f32);
      const std::string what = std::string(centered ? "layer_norm " : "rms_norm ") + dtype_name(dt);
      expect_close(half.output, full.output, tol, tol, what + " output");
      expect_close(half.grads[0], full.grads[0], tol, tol, what + " dx");
      // dweight/dbias sum over rows: the f32 sum is rounded once at the end.
      expect_close(half.grads[1], full.grads[1], tol, tol, what + " dweight");
      if (centered) expect_close(half.grads[2], full.grads[2], tol, tol, what + " dbias");
    }
  }
}

TEST(Norms, RejectsMismatchedParameters) {
  const Tensor x = Tensor::zeros({2, 4});
  EXPECT_THROW(layer_norm(x, Tensor::zeros({3})), Error);
  EXPECT_THROW(layer_norm(x, Tensor::zeros({4}, DType::bf16)), Error);
  EXPECT_THROW(rms_norm(x, Tensor::zeros({2, 4})), Error);
}

}  // namespace
}  // namespace bmt
