// matmul and linear: values against float64 host products, transposed views read without copies,
// gradients against finite differences, bf16/f16 against f32, gelu_linear against gelu then linear,
// linear_gelu against float64 and against linear then gelu, and misuse messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/tensor/memory.hpp"
#include "common/gradcheck.hpp"
#include "common/host_reference.hpp"

namespace bmt {
namespace {

using testing::expect_near_all;
using testing::gradcheck;
using testing::matmul_reference;
using testing::random_floats;
using testing::random_tensor;

struct Mkn {
  std::int64_t m, k, n;
};
const std::vector<Mkn> kShapes = {{1, 1, 1}, {3, 17, 5}, {33, 8, 17}, {17, 33, 1}, {1, 65, 3}, {64, 64, 64}};

// Row-major [cols, rows] data of the transpose of row-major [rows, cols] data.
std::vector<float> transposed(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(v.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) t[j * rows + i] = v[i * cols + j];
  return t;
}

TEST(Matmul, MatchesFloat64) {
  std::uint32_t seed = 1;
  for (const auto& s : kShapes) {
    const auto av = random_floats(s.m * s.k, seed++), bv = random_floats(s.k * s.n, seed++);
    const Tensor c = matmul(Tensor::from_floats(av, {s.m, s.k}), Tensor::from_floats(bv, {s.k, s.n}));
    ASSERT_EQ(c.shape(), (Shape{s.m, s.n}));
    expect_near_all(c.to_host_floats(), matmul_reference(av, bv, 1, s.m, s.k, s.n, false), 1e-5, 1e-5,
                    "matmul m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) + " n=" + std::to_string(s.n));
  }
}

TEST(Matmul, TransposedViewsAreReadInPlace) {
  for (const auto& s : kShapes) {
    const auto at = random_floats(s.k * s.m, 3), bt = random_floats(s.n * s.k, 4);  // stored [k, m], [n, k]
    const Tensor a = Tensor::from_floats(at, {s.k, s.m}).transpose(0, 1);
    const Tensor b = Tensor::from_floats(bt, {s.n, s.k}).transpose(0, 1);
    const auto ref = matmul_reference(transposed(at, s.k, s.m), transposed(bt, s.n, s.k), 1, s.m, s.k, s.n, false);
    const auto before = memory_stats().allocations;
    const Tensor c = matmul(a, b);
    // f32 on the host build allocates the output and nothing else: no operand was copied.
    if (memory::is_host()) EXPECT_EQ(memory_stats().allocations - before, 1u);
    expect_near_all(c.to_host_floats(), ref, 1e-5, 1e-5, "matmul of transposed views");
  }
}

TEST(Matmul, ColumnSlicesAndStridedOperands) {
  // A column slice has unit stride along rows and a leading dimension wider than its width.
  const auto v = random_floats(6 * 10, 5), w = random_floats(4 * 3, 6);
  const Tensor wide = Tensor::from_floats(v, {6, 10});
  const Tensor a = wide.slice(1, 2, 6);  // [6, 4]
  std::vector<float> packed;
  for (int i = 0; i < 6; ++i)
    for (int j = 2; j < 6; ++j) packed.push_back(v[i * 10 + j]);
  expect_near_all(matmul(a, Tensor::from_floats(w, {4, 3})).to_host_floats(),
                  matmul_reference(packed, w, 1, 6, 4, 3, false), 1e-5, 1e-5, "column slice");
  // Every other row: neither row- nor column-major, so it is copied, still correct.
  const Tensor rows = wide.view({3, 2, 10}).select(1, 0).slice(1, 0, 4);  // [3, 4] with stride 20
  std::vector<float> picked;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) picked.push_back(v[i * 20 + j]);
  expect_near_all(matmul(rows, Tensor::from_floats(w, {4, 3})).to_host_floats(),
                  matmul_reference(picked, w, 1, 3, 4, 3, false), 1e-5, 1e-5, "strided rows");
}

TEST(Matmul, LeadingDimensionsFlattenOrBatch) {
  // a [2, 3, 5, 4] x b [4, 7]: leading dimensions flattened into the rows.
  const auto av = random_floats(2 * 3 * 5 * 4, 7), bv = random_floats(4 * 7, 8);
  const Tensor c = matmul(Tensor::from_floats(av, {2, 3, 5, 4}), Tensor::from_floats(bv, {4, 7}));
  EXPECT_EQ(c.shape(), (Shape{2, 3, 5, 7}));
  expect_near_all(c.to_host_floats(), matmul_reference(av, bv, 1, 30, 4, 7, false), 1e-5, 1e-5, "flattened");
  // a [3, 5, 4] x b [3, 4, 7]: one product per batch index.
  const auto bb = random_floats(3 * 4 * 7, 9);
  const auto av3 = random_floats(3 * 5 * 4, 10);
  const Tensor cb = matmul(Tensor::from_floats(av3, {3, 5, 4}), Tensor::from_floats(bb, {3, 4, 7}));
  EXPECT_EQ(cb.shape(), (Shape{3, 5, 7}));
  expect_near_all(cb.to_host_floats(), matmul_reference(av3, bb, 3, 5, 4, 7, true), 1e-5, 1e-5, "batched");
  // Batched with a transposed view of the last two dimensions (q k^T in attention).
  const auto kv = random_floats(3 * 7 * 4, 11), qv = random_floats(3 * 5 * 4, 12);
  const Tensor kt = Tensor::from_floats(kv, {3, 7, 4}).transpose(1, 2);  // [3, 4, 7], column-major
  std::vector<float> kt_packed;
  for (int t = 0; t < 3; ++t) {
    const auto one = transposed(std::vector<float>(kv.begin() + t * 28, kv.begin() + (t + 1) * 28), 7, 4);
    kt_packed.insert(kt_packed.end(), one.begin(), one.end());
  }
  const auto before = memory_stats().allocations;
  const Tensor scores = matmul(Tensor::from_floats(qv, {3, 5, 4}), kt);
  if (memory::is_host()) EXPECT_EQ(memory_stats().allocations - before, 2u);  // q's upload and the result
  expect_near_all(scores.to_host_floats(), matmul_reference(qv, kt_packed, 3, 5, 4, 7, true), 1e-5, 1e-5,
                  "batched transposed");
}

TEST(Matmul, EmptyInnerDimensionGivesZeros) {
  const Tensor c = matmul(Tensor::zeros({3, 0}), Tensor::zeros({0, 4}));
  ASSERT_EQ(c.shape(), (Shape{3, 4}));
  for (float x : c.to_host_floats()) EXPECT_EQ(x, 0.0f);
}

TEST(Matmul, Gradients) {
  gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
            {random_tensor({3, 5}, 20), random_tensor({5, 4}, 21)});
  gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
            {random_tensor({1, 1}, 22), random_tensor({1, 3}, 23)});
  // Through transposed views on both sides.
  gradcheck([](const std::vector<Tensor>& in) { return matmul(transpose(in[0], 0, 1), transpose(in[1], 0, 1)); },
            {random_tensor({5, 3}, 24), random_tensor({4, 5}, 25)});
  // Flattened leading dimensions and batched products.
  gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
            {random_tensor({2, 3, 4}, 26), random_tensor({4, 5}, 27)});
  gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
            {random_tensor({2, 3, 4}, 28), random_tensor({2, 4, 5}, 29)});
  gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], transpose(in[1], 1, 2)); },
            {random_tensor({2, 3, 4}, 30), random_tensor({2, 5, 4}, 31)});
}

TEST(Linear, MatchesFloat64) {
  for (const auto& s : kShapes) {
    const auto xv = random_floats(2 * s.m * s.k, 40), wv = random_floats(s.n * s.k, 41), bv = random_floats(s.n, 42);
    const Tensor x = Tensor::from_floats(xv, {2, s.m, s.k});
    const Tensor w = Tensor::from_floats(wv, {s.n, s.k});
    auto ref = matmul_reference(xv, transposed(wv, s.n, s.k), 1, 2 * s.m, s.k, s.n, false);
    expect_near_all(linear(x, w).to_host_floats(), ref, 1e-5, 1e-5, "linear without bias");
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += bv[i % s.n];
    const Tensor y = linear(x, w, Tensor::from_floats(bv, {s.n}));
    EXPECT_EQ(y.shape(), (Shape{2, s.m, s.n}));
    expect_near_all(y.to_host_floats(), ref, 1e-5, 1e-5, "linear with bias");
  }
  // A 1-D input is one row.
  const Tensor y1 = linear(Tensor::from_floats({1, 2}, {2}), Tensor::from_floats({1, 0, 0, 1, 1, 1}, {3, 2}),
                           Tensor::from_floats({10, 20, 30}, {3}));
  EXPECT_EQ(y1.shape(), (Shape{3}));
  expect_near_all(y1.to_host_floats(), {11, 22, 33}, 0, 0, "linear of a vector");
}

// Row r of x [rows, in] times row o of w [out, in], in float64: linear's product before its bias.
double row_product(const std::vector<float>& xv, const std::vector<float>& wv, std::int64_t r, std::int64_t o,
                   std::int64_t in) {
  double sum = 0;
  for (std::int64_t k = 0; k < in; ++k) sum += static_cast<double>(xv[r * in + k]) * wv[o * in + k];
  return sum;
}

// bf16/f16 linear with a bias against float64 from the same stored inputs, at widths whose rows are
// and are not whole 16-byte units. The seam's sums are f32, but cuBLASLt's bias epilogue rounds the
// product to the dtype before adding the bias for some problems (seen on an H200 in bf16 at 5-wide
// rows), so the bound is two roundings: the product's and the result's. A dropped or misplaced bias
// is off by the bias itself, far outside it.
TEST(Linear, HalfPrecisionWithABiasMatchesFloat64) {
  const std::int64_t rows = 24, in = 40;
  for (DType dt : {DType::bf16, DType::f16})
    for (std::int64_t out : {5, 8, 24, 40}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " out=" + std::to_string(out));
      const Tensor x = random_tensor({rows, in}, 90, -1, 1, dt), w = random_tensor({out, in}, 91, -0.5f, 0.5f, dt);
      const Tensor b = random_tensor({out}, 92, -1, 1, dt);
      const auto xv = x.to_host_floats(), wv = w.to_host_floats(), bv = b.to_host_floats();
      const auto y = linear(x, w, b).to_host_floats();
      const double u = testing::roundoff(dt);
      int reported = 0;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t o = 0; o < out; ++o) {
          const double product = row_product(xv, wv, r, o, in);
          const double ref = product + bv[o], tol = u * (std::fabs(product) + std::fabs(ref)) + 1e-6;
          const float got = y[static_cast<std::size_t>(r * out + o)];
          if (!(std::fabs(got - ref) <= tol) && reported++ < 5)
            ADD_FAILURE() << "row " << r << " column " << o << " is " << got << ", expected " << ref << " (product "
                          << product << ", tolerance " << tol << ")";
        }
    }
}

TEST(Linear, Gradients) {
  gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
            {random_tensor({3, 5}, 50), random_tensor({4, 5}, 51), random_tensor({4}, 52)});
  gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); },
            {random_tensor({2, 3, 5}, 53), random_tensor({1, 5}, 54)});
  gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
            {random_tensor({1, 1}, 55), random_tensor({3, 1}, 56), random_tensor({3}, 57)});
}

TEST(GeluLinear, Gradients) {
  gradcheck([](const std::vector<Tensor>& in) { return gelu_linear(in[0], in[1], in[2]); },
            {random_tensor({3, 5}, 70, -2, 2), random_tensor({4, 5}, 71), random_tensor({4}, 72)});
  gradcheck([](const std::vector<Tensor>& in) { return gelu_linear(in[0], in[1]); },
            {random_tensor({2, 3, 8}, 73, -3, 3), random_tensor({6, 8}, 74)});
}

// gelu_linear is gelu then linear: the same values and weight and bias gradients, bit for bit; the
// input gradient too in f32, and within three roundings of the input's dtype in bf16/f16 (the fused
// derivative multiplies the f32 product, the separate ops its rounded value).
// With odd_offset, x starts one element into its memory (a view), so the GELU's input is not
// 16-byte aligned.
void expect_gelu_linear_matches_gelu_then_linear(DType dt, std::int64_t rows, std::int64_t in, std::int64_t out,
                                                 bool odd_offset = false) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " in=" + std::to_string(in) + (odd_offset ? " at an odd offset" : ""));
  std::vector<std::vector<float>> results[2];
  for (int fused = 0; fused < 2; ++fused) {
    const std::int64_t skip = odd_offset ? 1 : 0;
    Tensor base = random_tensor({skip + rows * in}, 75, -3, 3, dt).set_requires_grad(true);
    Tensor x = odd_offset ? reshape(split(base, {skip, rows * in}, 0)[1], {rows, in}) : reshape(base, {rows, in});
    Tensor w = random_tensor({out, in}, 76, -1, 1, dt).set_requires_grad(true);
    Tensor b = random_tensor({out}, 77, -1, 1, dt).set_requires_grad(true);
    Tensor y = fused ? gelu_linear(x, w, b) : linear(gelu(x), w, b);
    y.backward(random_tensor({rows, out}, 78, -1, 1, dt));
    results[fused] = {y.to_host_floats(), w.grad().to_host_floats(), b.grad().to_host_floats(),
                      base.grad().to_host_floats()};
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(results[1][i], results[0][i]) << "output, dW, db: " << i;
  const auto &fused = results[1][3], separate = results[0][3];
  float largest = 0;
  for (float g : separate) largest = std::max(largest, std::fabs(g));
  // Three roundings apart at most: the separate ops round the product and then the gradient, the
  // fused op only the gradient (gelu' reaches 1.13, so a rounding of the product can grow). In f32
  // the CUDA epilogue may differ from the kernel's float arithmetic by a few ulp.
  const double tol = dt == DType::f32 ? 1e-5 * largest : 3 * testing::roundoff(dt) * largest;
  for (std::size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], separate[i], tol) << "dx element " << i;
}

TEST(GeluLinear, MatchesGeluThenLinear) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) expect_gelu_linear_matches_gelu_then_linear(dt, 24, 40, 16);
}

// Input gradients [rows, in] whose rows are not a multiple of 16 bytes, or whose GELU input is not
// 16-byte aligned, for which cuBLASLt may have no DGELU kernel: the seam then applies the
// derivative after the GEMM, with the same result. Which path each case took is printed; aligned
// rows of a multiple of 16 bytes use the epilogue.
TEST(GeluLinear, MatchesGeluThenLinearAtNarrowWidthsAndOddOffsets) {
  const std::int64_t rows = 24, out = 16;
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (std::int64_t in : {3, 5, 13, 24})
      for (bool odd_offset : {false, true}) {
        expect_gelu_linear_matches_gelu_then_linear(dt, rows, in, out, odd_offset);
        const Tensor dy = Tensor::empty({rows, out}, dt), w = Tensor::empty({out, in}, dt);
        const Tensor dx = Tensor::empty({rows, in}, dt), pre = Tensor::empty({1 + rows * in}, dt);
        kernels::GemmParams p;  // dx = dy W, as linear's backward computes it
        p.dtype = dt;
        p.m = rows, p.n = in, p.k = out;
        p.a = {dy.data(), out};
        p.b = {w.data(), in};
        p.c = dx.data();
        p.ldc = in;
        p.gelu_input = static_cast<const char*>(pre.data()) + (odd_offset ? dtype_size(dt) : 0);
        const bool epilogue = kernels::gemm_fuses_gelu(p);
        std::cout << "[ info     ] " << dtype_name(dt) << " in=" << in << (odd_offset ? " odd offset" : "")
                  << ": GELU backward " << (epilogue ? "in the GEMM's epilogue" : "in a pass after the GEMM") << "\n";
        if (!odd_offset && in * static_cast<std::int64_t>(dtype_size(dt)) % 16 == 0)
          EXPECT_TRUE(epilogue) << dtype_name(dt) << " in=" << in;
      }
}

double gelu_reference(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

// linear_gelu against gelu(x W^T + b) in float64 from the same stored inputs, with and without a
// gradient recorded (when one is, the GEMM also writes the GELU's input for backward). In f32, as
// exact as bmt::gelu and the same with or without; in bf16/f16 (on a GPU, cuBLASLt's epilogue where
// rows are whole 16-byte units) within three roundings of the output and one of the GELU's input
// (gelu' is below 1.13), which is up to two roundings off: the product's and, as cuBLASLt's bias
// epilogue does for some problems, the product's plus the bias's. The 5-wide rows take the pass on
// a GPU: the epilogue's kernels for them were measured several times further off.
void expect_linear_gelu_matches_float64(DType dt, std::int64_t out, bool with_bias) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " out=" + std::to_string(out) + (with_bias ? " with" : " without") +
               " a bias");
  const std::int64_t rows = 24, in = 40;
  const Tensor x = random_tensor({rows, in}, 80, -1, 1, dt), w = random_tensor({out, in}, 81, -0.5f, 0.5f, dt);
  const Tensor b = with_bias ? random_tensor({out}, 82, -1, 1, dt) : Tensor();
  const auto xv = x.to_host_floats(), wv = w.to_host_floats();
  const auto bv = with_bias ? b.to_host_floats() : std::vector<float>(static_cast<std::size_t>(out), 0.0f);
  Tensor xg = reshape(x, {2, rows / 2, in}).detach();  // a leading dimension too
  xg.set_requires_grad(true);
  const Tensor y = linear_gelu(xg, w, b);
  EXPECT_EQ(y.shape(), (Shape{2, rows / 2, out}));
  const auto recorded = y.to_host_floats(), plain = linear_gelu(x, w, b).to_host_floats();
  if (dt == DType::f32) EXPECT_EQ(plain, recorded);
  const double u = testing::roundoff(dt);
  int reported = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      const double product = row_product(xv, wv, r, o, in);
      const double v = product + bv[o], ref = gelu_reference(v);
      const double input_error = u * (std::fabs(product) + std::fabs(v));
      const double tol =
          dt == DType::f32 ? 1e-5 * (1 + std::fabs(ref)) : 3 * u * std::fabs(ref) + 1.13 * input_error + 1e-5;
      const std::size_t i = static_cast<std::size_t>(r * out + o);
      for (float got : {plain[i], recorded[i]})
        if (!(std::fabs(got - ref) <= tol) && reported++ < 5)
          ADD_FAILURE() << "element " << i << " is " << got << ", expected " << ref << " (tolerance " << tol << ")";
    }
}

TEST(LinearGelu, MatchesFloat64WithAndWithoutAGradient) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (std::int64_t out : {16, 24, 5})
      for (bool with_bias : {true, false}) expect_linear_gelu_matches_float64(dt, out, with_bias);
}

TEST(LinearGelu, Gradients) {
  gradcheck([](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], in[2]); },
            {random_tensor({3, 5}, 83, -2, 2), random_tensor({4, 5}, 84), random_tensor({4}, 85)});
  gradcheck([](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1]); },
            {random_tensor({2, 3, 8}, 86, -2, 2), random_tensor({6, 8}, 87)});
}

// Edge shapes: no rows (an empty output and empty gradients), no inputs (the GELU of the bias on
// every row, its gradient the column sums of dy times gelu'(bias)), one row given as a vector.
TEST(LinearGelu, EdgeShapes) {
  Tensor none = Tensor::zeros({0, 3}).set_requires_grad(true);
  Tensor w = random_tensor({4, 3}, 92).set_requires_grad(true);
  Tensor y = linear_gelu(none, w);
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  y.backward(Tensor::zeros({0, 4}));
  EXPECT_EQ(none.grad().shape(), (Shape{0, 3}));
  for (float g : w.grad().to_host_floats()) EXPECT_EQ(g, 0.0f);

  const std::vector<float> bv = {-1.5f, -0.25f, 0.5f, 2.0f};
  Tensor b = Tensor::from_floats(bv, {4}).set_requires_grad(true);
  Tensor empty_in = linear_gelu(Tensor::zeros({2, 0}), Tensor::zeros({4, 0}), b);
  std::vector<double> ref;
  for (int r = 0; r < 2; ++r)
    for (float v : bv) ref.push_back(gelu_reference(v));
  expect_near_all(empty_in.to_host_floats(), ref, 1e-6, 1e-6, "linear_gelu with no inputs");
  empty_in.backward(Tensor::from_floats({1, 1, 1, 1, 1, 1, 1, 1}, {2, 4}));
  const auto db = b.grad().to_host_floats();
  for (std::size_t o = 0; o < bv.size(); ++o) {
    const double v = bv[o], h = 1e-4;
    const double slope = (gelu_reference(v + h) - gelu_reference(v - h)) / (2 * h);
    EXPECT_NEAR(db[o], 2 * slope, 1e-4) << "bias gradient " << o;
  }

  const Tensor x1 = Tensor::from_floats({1, -2, 0.5f}, {3});
  const Tensor one = linear_gelu(x1, w.detach());
  EXPECT_EQ(one.shape(), (Shape{4}));
  EXPECT_EQ(one.to_host_floats(), reshape(linear_gelu(reshape(x1, {1, 3}), w.detach()), {4}).to_host_floats());
}

// linear_gelu is linear then gelu up to the rounding of the GELU's input: outputs within two
// roundings of the dtype, and gradients close (backward takes the derivative at the rounded input,
// as gelu's backward does). Rows that are not a multiple of 16 bytes, and f32, take a GELU pass
// after the GEMM on a GPU (the same values as the separate ops); which path each case took is
// printed, and checked where it is certain.
TEST(LinearGelu, MatchesLinearThenGelu) {
  const std::int64_t rows = 24, in = 16;
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (std::int64_t out : {3, 5, 13, 24, 40}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " out=" + std::to_string(out));
      std::vector<std::vector<float>> results[2];
      for (int fused = 0; fused < 2; ++fused) {
        Tensor x = random_tensor({rows, in}, 88, -2, 2, dt).set_requires_grad(true);
        Tensor w = random_tensor({out, in}, 89, -1, 1, dt).set_requires_grad(true);
        Tensor b = random_tensor({out}, 90, -1, 1, dt).set_requires_grad(true);
        Tensor y = fused ? linear_gelu(x, w, b) : gelu(linear(x, w, b));
        y.backward(random_tensor({rows, out}, 91, -1, 1, dt));
        results[fused] = {y.to_host_floats(), x.grad().to_host_floats(), w.grad().to_host_floats(),
                          b.grad().to_host_floats()};
      }
      const char* what[] = {"output", "dx", "dW", "db"};
      for (int i = 0; i < 4; ++i) {
        float largest = 0;
        for (float v : results[0][i]) largest = std::max(largest, std::fabs(v));
        // A rounding of the GELU's input moves its output by up to 1.13 of it; the gradients sum
        // a few such differences.
        const double unit = dt == DType::f32 ? 1e-5 : (i == 0 ? 2 : 4) * testing::roundoff(dt);
        const double tol = unit * std::max(largest, 1.0f);
        for (std::size_t k = 0; k < results[0][i].size(); ++k)
          EXPECT_NEAR(results[1][i][k], results[0][i][k], tol) << what[i] << " element " << k;
      }
      const Tensor xs = Tensor::empty({rows, in}, dt), ws = Tensor::empty({out, in}, dt);
      const Tensor ys = Tensor::empty({rows, out}, dt), pre = Tensor::empty({rows, out}, dt);
      kernels::GemmParams p;  // y = gelu(x W^T), as linear_gelu computes it while recording
      p.dtype = dt;
      p.m = rows, p.n = out, p.k = in;
      p.a = {xs.data(), in};
      p.b = {ws.data(), in, true};
      p.c = ys.data();
      p.ldc = out;
      p.gelu_output = true;
      p.gelu_pre = pre.data();
      const bool fused = kernels::gemm_fuses_gelu(p);
      std::cout << "[ info     ] " << dtype_name(dt) << " out=" << out << ": GELU "
                << (fused ? "in the GEMM's epilogue" : "in a pass after the GEMM") << "\n";
      if (!memory::is_host() && (dt == DType::f32 || out * static_cast<std::int64_t>(dtype_size(dt)) % 16 != 0))
        EXPECT_FALSE(fused);
    }
}

// A weight whose gradient buffer already exists (as inside a ZeRO block) gets dW added to it in
// place by the GEMM; one that has none gets a buffer of its own. Both equal G0 + dy^T x.
TEST(Linear, WeightGradientAccumulatesIntoAnExistingBuffer) {
  const std::int64_t m = 6, k = 5, n = 4;
  const auto xv = random_floats(m * k, 60), wv = random_floats(n * k, 61), dyv = random_floats(m * n, 62);
  const auto g0 = random_floats(n * k, 63);
  const auto dw = matmul_reference(transposed(dyv, m, n), xv, 1, n, m, k, false);
  for (bool existing : {true, false}) {
    SCOPED_TRACE(existing ? "existing buffer" : "no buffer");
    Tensor x = Tensor::from_floats(xv, {m, k});
    Tensor w = Tensor::from_floats(wv, {n, k}).set_requires_grad(true);
    if (existing) w.set_grad(Tensor::from_floats(g0, {n, k}));
    const Tensor dy = Tensor::from_floats(dyv, {m, n});
    const void* before = existing ? w.grad().data() : nullptr;
    const auto allocations = memory_stats().allocations;
    linear(x, w).backward(dy);
    std::vector<double> expected = dw;
    if (existing) {
      for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += g0[i];
      EXPECT_EQ(w.grad().data(), before) << "accumulated in place";
      EXPECT_EQ(memory_stats().allocations - allocations, 1u) << "only the output y: no dW buffer";
    }
    expect_near_all(w.grad().to_host_floats(), expected, 1e-5, 1e-5, "weight gradient");
  }
}

// bf16 operands added into an f32 gradient buffer (a ZeRO block's): one f32 GEMM with beta = 1,
// so dW is never rounded to bf16 on the way.
TEST(Linear, Bf16WeightGradientAccumulatesIntoF32Buffer) {
  const std::int64_t m = 16, k = 8, n = 8;
  const Tensor x = random_tensor({m, k}, 64, -1, 1, DType::bf16), dy = random_tensor({m, n}, 65, -1, 1, DType::bf16);
  Tensor w = random_tensor({n, k}, 66, -1, 1, DType::bf16).set_requires_grad(true);
  const auto g0 = random_floats(n * k, 67);
  w.set_grad(Tensor::from_floats(g0, {n, k}, DType::f32));
  const void* before = w.grad().data();
  linear(x, w).backward(dy);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().data(), before);
  auto expected = matmul_reference(transposed(dy.to_host_floats(), m, n), x.to_host_floats(), 1, n, m, k, false);
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += g0[i];
  expect_near_all(w.grad().to_host_floats(), expected, 1e-5, 1e-5, "f32 weight gradient");
}

// The bias likewise: its column sums added into its f32 gradient buffer in place, with no [n]
// gradient of its own; without a buffer it gets one, in its dtype. Both equal G0 + sum of dy's rows.
TEST(Linear, BiasGradientAccumulatesIntoAnExistingF32Buffer) {
  const std::int64_t m = 300, k = 8, n = 8;  // enough rows for the column sums' row chunks
  const Tensor x = random_tensor({m, k}, 70, -1, 1, DType::bf16), dy = random_tensor({m, n}, 71, -1, 1, DType::bf16);
  const Tensor w = random_tensor({n, k}, 72, -1, 1, DType::bf16);
  const auto g0 = random_floats(n, 73);
  const auto dyv = dy.to_host_floats();
  std::vector<double> sums(n, 0.0);
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t c = 0; c < n; ++c) sums[c] += dyv[r * n + c];
  for (bool existing : {true, false}) {
    SCOPED_TRACE(existing ? "existing f32 buffer" : "no buffer");
    Tensor b = random_tensor({n}, 74, -1, 1, DType::bf16).set_requires_grad(true);
    if (existing) b.set_grad(Tensor::from_floats(g0, {n}, DType::f32));
    const void* before = existing ? b.grad().data() : nullptr;
    linear(x, w, b).backward(dy);
    std::vector<double> expected = sums;
    if (existing) {
      for (std::int64_t c = 0; c < n; ++c) expected[c] += g0[c];
      EXPECT_EQ(b.grad().dtype(), DType::f32);
      EXPECT_EQ(b.grad().data(), before) << "accumulated in place";
      expect_near_all(b.grad().to_host_floats(), expected, 1e-4, 1e-5, "f32 bias gradient");
    } else {
      EXPECT_EQ(b.grad().dtype(), DType::bf16);
      expect_near_all(b.grad().to_host_floats(), expected, 1e-3, testing::roundoff(DType::bf16), "bf16 bias gradient");
    }
  }
}

// bf16/f16 inputs, f32 accumulation: the error is one output rounding plus f32 noise, measured
// against the scale of the products (sum of |a||b|), not the possibly-cancelled result.
// Problems large enough that BMT_GEMM_AUTOTUNE=1 (the ops_matmul_autotune run of this file
// on a CUDA build) times several kernels on their first call: the forward (bias epilogue), dx,
// and dW added into an f32 buffer, twice, at sampled elements against float64. Trial runs that
// added into the real buffer would leave G0 + more than two dW there.
TEST(Linear, LargeProblemsAtSampledElements) {
  const std::int64_t m = 1024, k = 1024, n = 1536;
  const Tensor x = random_tensor({m, k}, 80, -1, 1, DType::bf16), dy = random_tensor({m, n}, 81, -1, 1, DType::bf16);
  Tensor w = random_tensor({n, k}, 82, -1, 1, DType::bf16).set_requires_grad(true);
  const Tensor b = random_tensor({n}, 83, -1, 1, DType::bf16);
  Tensor xg = x.detach();
  xg.set_requires_grad(true);
  const auto g0 = random_floats(n * k, 84);
  w.set_grad(Tensor::from_floats(g0, {n, k}, DType::f32));
  const auto xv = x.to_host_floats(), dyv = dy.to_host_floats(), wv = w.to_host_floats(), bv = b.to_host_floats();
  std::vector<std::pair<std::int64_t, std::int64_t>> samples;
  std::uint32_t state = 85;
  auto next = [&](std::int64_t bound) {
    state = state * 1664525u + 1013904223u;
    return static_cast<std::int64_t>(state >> 8) % bound;
  };
  for (int i = 0; i < 256; ++i) samples.push_back({next(1 << 20), next(1 << 20)});
  // Elements within a few bf16 roundings of outputs whose size is about sqrt(k) = 32.
  const double atol = 32 * 4 * testing::roundoff(DType::bf16), rtol = 4 * testing::roundoff(DType::bf16);
  for (int pass = 1; pass <= 2; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    xg.set_grad(Tensor());
    const Tensor y = linear(xg, w, b);
    y.backward(dy);
    const auto yv = y.to_host_floats(), dxv = xg.grad().to_host_floats(), dwv = w.grad().to_host_floats();
    for (const auto& [r0, c0] : samples) {
      const std::int64_t i = r0 % m, j = c0 % n, kk = c0 % k;
      double yr = bv[j], dxr = 0, dwr = g0[j * k + kk];
      for (std::int64_t t = 0; t < k; ++t) yr += double(xv[i * k + t]) * wv[j * k + t];
      for (std::int64_t t = 0; t < n; ++t) dxr += double(dyv[i * n + t]) * wv[t * k + kk];
      for (std::int64_t t = 0; t < m; ++t) dwr += pass * double(dyv[t * n + j]) * xv[t * k + kk];
      EXPECT_NEAR(yv[i * n + j], yr, atol + rtol * std::abs(yr)) << "y[" << i << ", " << j << "]";
      EXPECT_NEAR(dxv[i * k + kk], dxr, atol + rtol * std::abs(dxr)) << "dx[" << i << ", " << kk << "]";
      EXPECT_NEAR(dwv[j * k + kk], dwr, 1e-3 + 1e-5 * std::abs(dwr)) << "dW[" << j << ", " << kk << "] (f32)";
    }
  }
}

// The switch the autotuning follows (and bmt-train's banner reports): the environment on a CUDA
// build, never on the host build.
TEST(Gemm, AutotuneFollowsTheEnvironmentOnCuda) {
  const char* v = std::getenv("BMT_GEMM_AUTOTUNE");
  const bool asked = v && std::string(v) == "1";
#ifdef BMT_ENABLE_CUDA
  EXPECT_EQ(kernels::gemm_autotune(), asked);
#else
  (void)asked;
  EXPECT_FALSE(kernels::gemm_autotune());
#endif
}

TEST(Matmul, HalfPrecisionMatchesF32Path) {
  const std::int64_t m = 9, k = 129, n = 17;
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor a16 = random_tensor({m, k}, 60, -1, 1, dt), b16 = random_tensor({k, n}, 61, -1, 1, dt);
    const Tensor bias16 = random_tensor({n}, 62, -1, 1, dt), w16 = random_tensor({n, k}, 63, -1, 1, dt);
    const auto a = a16.to_host_floats(), b = b16.to_host_floats();
    std::vector<float> abs_a(a.size()), abs_b(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) abs_a[i] = std::fabs(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) abs_b[i] = std::fabs(b[i]);
    const auto scale = matmul_reference(abs_a, abs_b, 1, m, k, n, false);
    const auto c16 = matmul(a16, b16), c32 = matmul(cast(a16, DType::f32), cast(b16, DType::f32));
    ASSERT_EQ(c16.dtype(), dt);
    const auto h = c16.to_host_floats(), f = c32.to_host_floats();
    for (std::size_t i = 0; i < h.size(); ++i)
      EXPECT_NEAR(h[i], f[i], testing::roundoff(dt) * (std::fabs(f[i]) + 1e-2 * scale[i]) + 1e-6) << "element " << i;
    const auto y16 = linear(a16, w16, bias16).to_host_floats();
    const auto y32 = linear(cast(a16, DType::f32), cast(w16, DType::f32), cast(bias16, DType::f32)).to_host_floats();
    expect_near_all(y16, testing::to_double(y32), 2e-2, 2 * testing::roundoff(dt), "linear");

    // Gradients in the input's dtype.
    Tensor x = a16.detach().set_requires_grad(true), w = w16.detach().set_requires_grad(true);
    Tensor bias = bias16.detach().set_requires_grad(true);
    sum(linear(x, w, bias)).backward();
    EXPECT_EQ(x.grad().dtype(), dt);
    EXPECT_EQ(w.grad().dtype(), dt);
    EXPECT_EQ(bias.grad().dtype(), dt);
    for (float g : bias.grad().to_host_floats()) EXPECT_NEAR(g, static_cast<float>(m), 0.0f);
  }
}

TEST(Matmul, MisuseNamesBothShapes) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  EXPECT_THAT([&] { matmul(a, b); }, ::testing::ThrowsMessage<Error>(::testing::AllOf(
                                          ::testing::HasSubstr("[2, 3]"), ::testing::HasSubstr("[4, 5]"))));
  EXPECT_THAT([&] { matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 4})); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("leading dimensions")));
  EXPECT_THAT([&] { matmul(a, Tensor::zeros({3, 4}, DType::bf16)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("bf16")));
  EXPECT_THAT([&] { linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); },
              ::testing::ThrowsMessage<Error>(::testing::AllOf(::testing::HasSubstr("[2, 3]"),
                                                               ::testing::HasSubstr("[4, 5]"))));
  EXPECT_THAT([&] { linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}), Tensor::zeros({5})); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("bias [4]")));
  EXPECT_THROW(matmul(Tensor::zeros({3}), Tensor::zeros({3, 2})), Error);
  EXPECT_THAT([&] { linear_gelu(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); },
              ::testing::ThrowsMessage<Error>(::testing::AllOf(::testing::HasSubstr("[2, 3]"),
                                                               ::testing::HasSubstr("[4, 5]"))));
}

// The GEMM seam refuses a GELU it cannot apply: into an accumulated or f32 C, or with its input
// kept but no GELU asked for.
TEST(Gemm, GeluMisuseIsNamed) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 4}), c = Tensor::zeros({2, 4});
  kernels::GemmParams p;
  p.m = 2, p.n = 4, p.k = 3;
  p.a = {a.data(), 3};
  p.b = {b.data(), 4};
  p.c = c.data();
  p.ldc = 4;
  p.gelu_output = true;
  p.beta = 1.0f;
  EXPECT_THAT([&] { kernels::gemm(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("beta 1")));
  p.beta = 0.0f;
  p.gelu_output = false;
  p.gelu_pre = c.data();
  EXPECT_THAT([&] { kernels::gemm(p); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("gelu_pre only with gelu_output")));
}

}  // namespace
}  // namespace bmt
