// Per-tensor float8 scaling, the FP8 GEMM and float8_linear against common/float8_reference.hpp:
// codes and scales exactly; products of the same quantized values in double within f32 summation
// and the output's rounding; and the layer against the exact (unquantized) products in double
// within the FP8 error bound derived below.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/float8.hpp"
#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/float8_reference.hpp"
#include "common/gradcheck.hpp"
#include "common/host_reference.hpp"

namespace bmt {
namespace {

using testing::abt_reference;
using testing::float8_quantize;
using testing::Float8Reference;
using testing::kE4M3;
using testing::kE5M2;
using testing::random_floats;
using testing::rounded;
using testing::transpose_of;

// How far sums of exact products may be from their float64 value, relative to the sum of the
// terms' magnitudes: on the host an f32 sum (k 2^-24 for k terms); on Hopper FP8 tensor cores the
// partial sums inside an instruction (32 products of FP8 operands) keep about 14 mantissa bits
// before cuBLASLt adds them in f32, so each of those 32 additions may lose 2^-14 of the sum so far:
// 32 x 2^-14 = 2^-9 at most. Either is far below the FP8 rounding the tests look for (2^-4 and 2^-3
// of each operand).
constexpr double kAccumulation = 0x1p-9;

std::vector<std::uint8_t> codes_of(const Tensor& t) {
  std::vector<std::uint8_t> c(static_cast<std::size_t>(t.numel()));
  t.copy_to_host(c.data(), c.size());
  return c;
}

float scalar(const Tensor& t) { return t.to_host_floats().at(0); }

// Spread over several binades (as activations and gradients are), so that small values reach
// e4m3's subnormals once scaled.
std::vector<float> spread_floats(std::size_t n, std::uint32_t seed, float top) {
  auto v = random_floats(n, seed);
  const auto e = random_floats(n, seed + 1000, -12.0f, 0.0f);
  for (std::size_t i = 0; i < n; ++i) v[i] = top * v[i] * std::exp2(e[i]);
  return v;
}

TEST(Float8Scaling, AbsMaxAndScale) {
  EXPECT_EQ(scalar(kernels::abs_max(Tensor::from_floats({0.5f, -3.25f, 2.0f}, {3}))), 3.25f);
  EXPECT_EQ(scalar(kernels::abs_max(Tensor::from_floats({0.5f, -3.25f, 2.0f}, {3}, DType::bf16))), 3.25f);
  EXPECT_EQ(scalar(kernels::abs_max(Tensor::zeros({0}))), 0.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(scalar(kernels::abs_max(Tensor::from_floats({1.0f, nan, 2.0f}, {3}))), inf);
  EXPECT_EQ(scalar(kernels::abs_max(Tensor::from_floats({1.0f, -inf}, {2}))), inf);
  const auto big = random_floats(100000, 5, -7.0f, 7.0f);
  float want = 0.0f;
  for (float v : big) want = std::max(want, std::fabs(v));
  EXPECT_EQ(scalar(kernels::abs_max(Tensor::from_floats(big, {100000}))), want);
  // Odd lengths starting off a 16-byte boundary, in each dtype (the CUDA kernel's packed loads and
  // their tail), with the largest magnitude at either end.
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    auto v = random_floats(40003, 7, -3.0f, 3.0f);
    for (std::int64_t start : {0, 1, 5}) {
      for (std::size_t at : {static_cast<std::size_t>(start), v.size() - 1}) {
        auto w = v;
        w[at] = -6.5f;
        const Tensor part = Tensor::from_floats(w, {40003}, dt).slice(0, start, 40003);
        float m = 0.0f;
        for (float x : part.to_host_floats()) m = std::max(m, std::fabs(x));
        EXPECT_EQ(scalar(kernels::abs_max(part)), m) << dtype_name(dt) << " from " << start << ", largest at " << at;
        EXPECT_EQ(m, 6.5f);
      }
    }
  }

  EXPECT_EQ(kernels::float8_scale(0.0f, 448.0f), 1.0f);
  EXPECT_EQ(kernels::float8_scale(2.0f, 448.0f), 224.0f);
  EXPECT_EQ(kernels::float8_scale(3.0f, 57344.0f), 57344.0f / 3.0f);
  EXPECT_EQ(kernels::float8_scale(1e-38f, 448.0f), FLT_MAX);  // 448 / 1e-38 overflows float
  EXPECT_EQ(kernels::float8_scale(inf, 448.0f), 0.0f);
}

// Codes in both layouts and the inverse scale, exactly as the reference computes them, for both
// formats and three input dtypes; values read back through dequantize_float8.
TEST(Float8Scaling, QuantizeMatchesTheReference) {
  // 37 x 24 in single elements; 136 x 200 in packs of 8, with partial tiles at both edges.
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 24}, {136, 200}}) {
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      for (const auto* f : {&kE4M3, &kE5M2}) {
        const DType format = f == &kE4M3 ? DType::f8e4m3 : DType::f8e5m2;
        const auto xs = rounded(spread_floats(static_cast<std::size_t>(rows * cols), 11, 30.0f), dt);
        const Tensor x = Tensor::from_floats(xs, {rows, cols}, dt);
        const Float8Reference want = float8_quantize(*f, xs);
        const auto q = kernels::quantize_float8(x, cols, kernels::abs_max(x), format, true, true);
        const std::string what = std::string(dtype_name(dt)) + " into " + f->name;
        ASSERT_EQ(q.codes.dtype(), format);
        ASSERT_EQ(q.codes.shape(), (Shape{rows, cols}));
        ASSERT_EQ(q.transposed.shape(), (Shape{cols, rows}));
        EXPECT_EQ(scalar(q.scale_inv), want.scale_inv) << what;
        EXPECT_EQ(codes_of(q.codes), want.codes) << what;
        EXPECT_EQ(codes_of(q.transposed), transpose_of(want.codes, rows, cols)) << what;
        const auto back = kernels::dequantize_float8(q.codes, q.scale_inv, DType::f32).to_host_floats();
        for (std::size_t i = 0; i < back.size(); ++i)
          ASSERT_EQ(back[i], static_cast<float>(want.values[i])) << what << " element " << i;
        // The largest magnitude lands on the format's largest value.
        const auto codes = want.codes;
        EXPECT_NE(std::find_if(codes.begin(), codes.end(), [&](std::uint8_t c) {
                    return std::fabs(testing::float8_decode(*f, c)) == f->max;
                  }), codes.end()) << what;
      }
    }
  }
  // One layout only; and a given amax (a group's), larger than the tensor's own.
  const auto xs = random_floats(64, 3);
  const Tensor x = Tensor::from_floats(xs, {4, 16});
  const auto t_only = kernels::quantize_float8(x, 16, kernels::abs_max(x), DType::f8e4m3, false, true);
  EXPECT_FALSE(t_only.codes.defined());
  EXPECT_EQ(codes_of(t_only.transposed), transpose_of(float8_quantize(kE4M3, xs).codes, 4, 16));
  const auto wider = kernels::quantize_float8(x, 16, Tensor::from_floats({4.0f}, {}), DType::f8e4m3);
  EXPECT_EQ(scalar(wider.scale_inv), 1.0f / (448.0f / 4.0f));
  EXPECT_THROW(kernels::quantize_float8(x, 16, kernels::abs_max(x), DType::bf16), Error);
  EXPECT_THROW(kernels::quantize_float8(x, 5, kernels::abs_max(x), DType::f8e4m3), Error);
}

// bmt::cast to and from float8, unscaled: rounding and saturation as the format's, back exactly.
TEST(Float8Scaling, CastsToAndFromFloat8) {
  const std::vector<float> xs = {0.0f, 1.0625f, -1.1875f, 500.0f, -1e9f, 0.001f, 3.3f};
  for (const auto* f : {&kE4M3, &kE5M2}) {
    const DType format = f == &kE4M3 ? DType::f8e4m3 : DType::f8e5m2;
    const Tensor q = cast(Tensor::from_floats(xs, {7}), format);
    ASSERT_EQ(q.dtype(), format);
    const auto back = cast(q, DType::f32).to_host_floats();
    const auto also = q.to_host_floats();  // the tensor layer's element conversion
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double want = testing::float8_decode(*f, testing::float8_encode(*f, xs[i]));
      EXPECT_EQ(back[i], want) << f->name << " " << xs[i];
      EXPECT_EQ(also[i], want) << f->name << " " << xs[i];
    }
  }
  const Tensor e5 = cast(cast(Tensor::from_floats({1.125f}, {1}), DType::f8e4m3), DType::f8e5m2);
  EXPECT_EQ(e5.to_host_floats()[0], 1.0f);  // 1.125 is e4m3, and a tie in e5m2: to even
}

// The FP8 GEMM against the double product of the decoded codes times the scales: products are
// exact in f32, so only the sums (kAccumulation) and C's rounding differ. Accumulation into C, a
// bias, both operand mixes, bf16/f32/f16 C, a k that is not a multiple of 16, and fast
// accumulation, whose sums may each lose 2^-14 of the sum so far at every one of their k additions.
TEST(Float8Gemm, MatchesTheProductOfTheScaledCodes) {
  struct Case {
    std::int64_t m, n, k;
    DType a, b, c;
    bool accumulate, bias, fast = false;
  };
  const Case cases[] = {{16, 32, 48, DType::f8e4m3, DType::f8e4m3, DType::bf16, false, false},
                        {16, 32, 48, DType::f8e4m3, DType::f8e4m3, DType::bf16, false, true},
                        {33, 17, 64, DType::f8e5m2, DType::f8e4m3, DType::f32, true, false},
                        {8, 24, 19, DType::f8e4m3, DType::f8e5m2, DType::f32, false, false},
                        {5, 3, 7, DType::f8e4m3, DType::f8e4m3, DType::f16, true, true},
                        {32, 64, 512, DType::f8e4m3, DType::f8e4m3, DType::bf16, false, false, true},
                        {32, 64, 512, DType::f8e5m2, DType::f8e4m3, DType::bf16, true, true, true}};
  std::uint32_t seed = 40;
  for (const auto& c : cases) {
    const auto& fa = c.a == DType::f8e4m3 ? kE4M3 : kE5M2;
    const auto& fb = c.b == DType::f8e4m3 ? kE4M3 : kE5M2;
    const auto av = spread_floats(c.m * c.k, seed++, 3.0f), bv = spread_floats(c.n * c.k, seed++, 0.2f);
    const Float8Reference qa = float8_quantize(fa, av), qb = float8_quantize(fb, bv);
    const Tensor at = Tensor::from_floats(av, {c.m, c.k});
    const auto qa_t = kernels::quantize_float8(at, c.k, kernels::abs_max(at), c.a);
    const Tensor bt = Tensor::from_floats(bv, {c.n, c.k});
    const auto qb_t = kernels::quantize_float8(bt, c.k, kernels::abs_max(bt), c.b);
    ASSERT_EQ(codes_of(qa_t.codes), qa.codes);
    ASSERT_EQ(codes_of(qb_t.codes), qb.codes);
    const auto c0 = rounded(random_floats(c.m * c.n, seed++), c.c);
    Tensor out = Tensor::from_floats(c0, {c.m, c.n}, c.c);
    kernels::Float8GemmParams p;
    p.m = c.m, p.n = c.n, p.k = c.k;
    p.a = qa_t.codes.data(), p.a_dtype = c.a, p.a_scale = qa_t.scale_inv.data_as<float>();
    p.b = qb_t.codes.data(), p.b_dtype = c.b, p.b_scale = qb_t.scale_inv.data_as<float>();
    p.c = out.data(), p.c_dtype = c.c, p.ldc = c.n, p.accumulate = c.accumulate;
    p.fast_accumulation = c.fast;
    const auto bias_values = rounded(random_floats(c.n, seed++), c.c);
    const Tensor bias = Tensor::from_floats(bias_values, {c.n}, c.c);
    if (c.bias) p.bias = bias.data();
    kernels::gemm_float8(p);
    std::vector<double> want, abs_sum;
    abt_reference(qa.values, qb.values, c.m, c.k, c.n, &want, &abs_sum);
    const double unit = c.c == DType::bf16 ? 0x1p-8 : c.c == DType::f16 ? 0x1p-11 : 0x1p-24;
    const auto got = out.to_host_floats();
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double b = c.bias ? bias_values[i % static_cast<std::size_t>(c.n)] : 0.0;
      const double w = want[i] + (c.accumulate ? c0[i] : 0.0) + b;
      // cuBLASLt's bias epilogue may round the product before adding the bias: a second rounding.
      const double sums = c.fast ? static_cast<double>(c.k) * 0x1p-14 : kAccumulation;
      const double tol = sums * (abs_sum[i] + std::fabs(w)) + unit * (std::fabs(w) + std::fabs(w - b)) + 1e-30;
      ASSERT_NEAR(got[i], w, tol) << "m=" << c.m << " n=" << c.n << " k=" << c.k << (c.fast ? " fast" : "")
                                  << " element " << i;
    }
  }
  kernels::Float8GemmParams both_e5m2;
  both_e5m2.m = both_e5m2.n = both_e5m2.k = 16;
  both_e5m2.a_dtype = both_e5m2.b_dtype = DType::f8e5m2;
  EXPECT_THAT([&] { kernels::gemm_float8(both_e5m2); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("at most one f8e5m2 operand")));
  kernels::Float8GemmParams f32_bias = both_e5m2;
  f32_bias.b_dtype = DType::f8e4m3;
  f32_bias.c_dtype = DType::f32;
  const float one = 1.0f;
  f32_bias.a = f32_bias.b = f32_bias.bias = &one;
  f32_bias.c = &f32_bias;
  f32_bias.a_scale = f32_bias.b_scale = &one;
  f32_bias.ldc = 16;
  EXPECT_THAT([&] { kernels::gemm_float8(f32_bias); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected a bias with a bf16 or f16 C")));
}

// Which problems run on FP8 tensor cores: on a Hopper build (BMT_TEST_EXPECT_FP8_TENSOR_CORES)
// a block's aligned shapes must, or the FP8 layers would silently run at f32's rate; a k that is
// not a multiple of 16 never does, nor anything on the host build.
TEST(Float8Gemm, AlignedProblemsRunOnTensorCoresOnHopper) {
  const Tensor a = Tensor::zeros({64, 64}, DType::f8e4m3), b = Tensor::zeros({128, 64}, DType::f8e5m2);
  const Tensor odd = Tensor::zeros({64, 19}, DType::f8e4m3), odd_b = Tensor::zeros({128, 19}, DType::f8e4m3);
  const Tensor scale = Tensor::from_floats({1.0f}, {}), c = Tensor::zeros({64, 128}, DType::bf16);
  kernels::Float8GemmParams p;
  p.m = 64, p.n = 128, p.k = 64;
  p.a = a.data(), p.a_scale = scale.data_as<float>();
  p.b = b.data(), p.b_dtype = DType::f8e5m2, p.b_scale = scale.data_as<float>();
  p.c = c.data(), p.ldc = 128;
  kernels::Float8GemmParams unaligned = p;
  unaligned.k = 19;
  unaligned.a = odd.data(), unaligned.b = odd_b.data(), unaligned.b_dtype = DType::f8e4m3;
#ifdef BMT_TEST_EXPECT_FP8_TENSOR_CORES
  EXPECT_TRUE(kernels::gemm_float8_on_tensor_cores(p));
#else
  EXPECT_FALSE(kernels::gemm_float8_on_tensor_cores(p));
#endif
  EXPECT_FALSE(kernels::gemm_float8_on_tensor_cores(unaligned));
}

// float8_linear's forward and both gradients:
//  - against the same products of the reference's quantized values (x, W e4m3; dy e5m2) in double:
//    within the sums' accuracy and the output dtype's rounding (the layer computes exactly these);
//  - against the exact products in double, within the FP8 error bound. A quantized value is
//    v (1 + d) + s with |d| <= 2^-(p+1) for p mantissa bits (e4m3 2^-4, e5m2 2^-3) and |s| at most
//    half the subnormal quantum over the scale (2^-10 amax/448 for e4m3, 2^-17 amax/57344 for
//    e5m2), so a product a b is off by at most |a b| (da + db + da db) + |a| sb + |b| sa + sa sb,
//    summed over the k terms, plus the output's rounding.
struct Fp8Bound {
  double rel, sub;  // 2^-(p+1), and the subnormal half-quantum over the scale per unit amax
};
constexpr Fp8Bound kE4M3Bound{0x1p-4, 0x1p-10 / 448.0};
constexpr Fp8Bound kE5M2Bound{0x1p-3, 0x1p-17 / 57344.0};

double amax_of(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// |A B^T - exact| <= the bound above, A [m, k] of format fa, B [n, k] of format fb.
void expect_within_fp8_bound(const std::vector<float>& got, const std::vector<float>& a, const std::vector<float>& b,
                             std::int64_t m, std::int64_t k, std::int64_t n, Fp8Bound fa, Fp8Bound fb, double unit,
                             const std::string& what) {
  const double sa = fa.sub * amax_of(a), sb = fb.sub * amax_of(b);
  int reported = 0;
  double worst = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double exact = 0, bound = 0;
      for (std::int64_t t = 0; t < k; ++t) {
        const double x = a[static_cast<std::size_t>(i * k + t)], y = b[static_cast<std::size_t>(j * k + t)];
        exact += x * y;
        bound += std::fabs(x * y) * (fa.rel + fb.rel + fa.rel * fb.rel) + std::fabs(x) * sb + std::fabs(y) * sa + sa * sb;
      }
      bound = bound * (1 + 0x1p-20) + unit * (std::fabs(exact) + bound) + 1e-30;
      const double err = std::fabs(got[static_cast<std::size_t>(i * n + j)] - exact);
      worst = std::max(worst, err / bound);
      if (!(err <= bound) && reported++ < 5)
        ADD_FAILURE() << what << " (" << i << ", " << j << "): " << got[static_cast<std::size_t>(i * n + j)]
                      << " against exact " << exact << ", bound " << bound;
    }
  // The bound is not so loose that it could not fail: the errors use a fair part of it.
  EXPECT_GT(worst, 0.01) << what;
}

TEST(Float8Linear, ForwardAndGradientsMatchTheQuantizedProductsAndTheFp8Bound) {
  const std::int64_t rows = 48, in = 32, out = 40;
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string name = dtype_name(dt);
    const auto xv = rounded(spread_floats(rows * in, 61, 4.0f), dt);
    const auto wv = rounded(spread_floats(out * in, 62, 0.1f), dt);
    const auto bv = rounded(random_floats(out, 63), dt);
    const auto gv = rounded(spread_floats(rows * out, 64, 1e-3f), dt);
    Tensor x = Tensor::from_floats(xv, {2, rows / 2, in}, dt).set_requires_grad(true);
    Tensor w = Tensor::from_floats(wv, {out, in}, dt).set_requires_grad(true);
    Tensor b = Tensor::from_floats(bv, {out}, dt).set_requires_grad(true);
    Tensor y = float8_linear(x, w, b);
    ASSERT_EQ(y.shape(), (Shape{2, rows / 2, out}));
    ASSERT_EQ(y.dtype(), dt);
    y.backward(Tensor::from_floats(gv, {2, rows / 2, out}, dt));
    const auto yv = y.to_host_floats(), dxv = x.grad().to_host_floats(), dwv = w.grad().to_host_floats();
    const auto dbv = b.grad().to_host_floats();
    const double unit = dt == DType::bf16 ? 0x1p-8 : 0x1p-24;

    // The same products of the reference's quantized values.
    const Float8Reference qx = float8_quantize(kE4M3, xv), qw = float8_quantize(kE4M3, wv),
                          qg = float8_quantize(kE5M2, gv);
    std::vector<double> want, abs_sum;
    const auto check = [&](const std::vector<float>& got, const std::vector<double>& bias, const std::string& what) {
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double w_i = want[i] + (bias.empty() ? 0.0 : bias[i % bias.size()]);
        const double tol = kAccumulation * (abs_sum[i] + std::fabs(w_i)) + 2 * unit * (std::fabs(w_i) + abs_sum[i]) + 1e-30;
        ASSERT_NEAR(got[i], w_i, tol) << name << " " << what << " element " << i;
      }
    };
    abt_reference(qx.values, qw.values, rows, in, out, &want, &abs_sum);
    check(yv, std::vector<double>(bv.begin(), bv.end()), "y");
    abt_reference(qg.values, transpose_of(qw.values, out, in), rows, out, in, &want, &abs_sum);
    check(dxv, {}, "dx");
    abt_reference(transpose_of(qg.values, rows, out), transpose_of(qx.values, rows, in), out, rows, in, &want,
                  &abs_sum);
    check(dwv, {}, "dW");
    for (std::int64_t o = 0; o < out; ++o) {  // the bias gradient: column sums of dy, unquantized
      double s = 0;
      for (std::int64_t r = 0; r < rows; ++r) s += gv[static_cast<std::size_t>(r * out + o)];
      EXPECT_NEAR(dbv[static_cast<std::size_t>(o)], s, 1e-6 + 2 * unit * std::fabs(s)) << name << " db " << o;
    }

    // Against the exact products, within the FP8 bound (y without a bias).
    NoGradGuard no_grad;
    const auto y_nobias = float8_linear(x, w).to_host_floats();
    expect_within_fp8_bound(y_nobias, xv, wv, rows, in, out, kE4M3Bound, kE4M3Bound, unit, name + " y");
    expect_within_fp8_bound(dxv, gv, transpose_of(wv, out, in), rows, out, in, kE5M2Bound, kE4M3Bound, unit,
                            name + " dx");
    expect_within_fp8_bound(dwv, transpose_of(gv, rows, out), transpose_of(xv, rows, in), out, rows, in, kE5M2Bound,
                            kE4M3Bound, unit, name + " dW");
  }
}

// dW goes into a gradient the weight already has (beta 1), and dx into one x already has.
TEST(Float8Linear, GradientsAddToThoseAlreadyThere) {
  const auto xv = random_floats(16 * 32, 71), wv = random_floats(8 * 32, 72), gv = random_floats(16 * 8, 73);
  const auto run = [&](int uses) {
    Tensor x = Tensor::from_floats(xv, {16, 32}).set_requires_grad(true);
    Tensor w = Tensor::from_floats(wv, {8, 32}).set_requires_grad(true);
    Tensor g = Tensor::from_floats(gv, {16, 8});
    Tensor y = float8_linear(x, w);
    for (int i = 1; i < uses; ++i) y = add(y, float8_linear(x, w));
    y.backward(g);
    return std::make_pair(x.grad().to_host_floats(), w.grad().to_host_floats());
  };
  const auto once = run(1), twice = run(2);
  for (std::size_t i = 0; i < once.first.size(); ++i) EXPECT_NEAR(twice.first[i], 2 * once.first[i], 1e-5) << i;
  for (std::size_t i = 0; i < once.second.size(); ++i) EXPECT_NEAR(twice.second[i], 2 * once.second[i], 1e-5) << i;
}

// Under outputs on demand (a block's recompute) the forward GEMM runs when y is first used, with
// the codes prepare made: the same y; and backward gives the same gradients whether y is ever read.
TEST(Float8Linear, OutputsOnDemandGiveTheSameValuesAndGradients) {
  const auto xv = random_floats(16 * 32, 91), wv = random_floats(24 * 32, 92), bv = random_floats(24, 93);
  const auto gv = random_floats(16 * 24, 94);
  const auto run = [&](bool on_demand, bool read_y) {
    Tensor x = Tensor::from_floats(xv, {16, 32}).set_requires_grad(true);
    Tensor w = Tensor::from_floats(wv, {24, 32}).set_requires_grad(true);
    Tensor b = Tensor::from_floats(bv, {24}).set_requires_grad(true);
    Tensor y;
    {
      std::optional<autograd::OutputsOnDemandGuard> guard;
      if (on_demand) guard.emplace();
      y = float8_linear(x, w, b);
    }
    std::vector<float> values;
    if (read_y) values = y.to_host_floats();
    y.backward(Tensor::from_floats(gv, {16, 24}));
    return std::vector<std::vector<float>>{values, x.grad().to_host_floats(), w.grad().to_host_floats(),
                                           b.grad().to_host_floats()};
  };
  const auto plain = run(false, true), read = run(true, true), unread = run(true, false);
  EXPECT_EQ(read, plain);
  for (std::size_t i = 1; i < plain.size(); ++i) EXPECT_EQ(unread[i], plain[i]) << "gradient " << i;
}

// Every rounding case of the scaled cast against the reference, at scale 1 (amax the format's
// largest value): each finite code's value, the midpoints between neighbouring codes (a tie goes
// to the even code) and the floats either side of them, values beyond the largest (saturated),
// infinities (saturated too), NaN, and float subnormals, all of both signs. Two shapes: one the CUDA
// build casts in packs of 8 (both dimensions multiples of 8, partial 64 x 64 tiles at the edges),
// one in single elements.
TEST(Float8Scaling, QuantizeRoundsEveryCaseAsTheReference) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto* f : {&kE4M3, &kE5M2}) {
    const DType format = f == &kE4M3 ? DType::f8e4m3 : DType::f8e5m2;
    std::vector<float> cases;
    const auto codes = testing::float8_finite_positive_codes(*f);
    for (std::size_t i = 0; i < codes.size(); ++i) {
      const auto v = static_cast<float>(testing::float8_decode(*f, codes[i]));
      cases.push_back(v);
      if (i + 1 == codes.size()) break;
      const auto mid = static_cast<float>((v + testing::float8_decode(*f, codes[i + 1])) / 2);  // exact
      cases.insert(cases.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, inf)});
    }
    cases.insert(cases.end(), {std::nextafter(f->max, inf), f->max * 1.0625f, f->max * 1.25f, FLT_MAX, inf, nan,
                               FLT_MIN, 1e-40f, 0.0f});
    const std::size_t positive = cases.size();
    for (std::size_t i = 0; i < positive; ++i) cases.push_back(-cases[i]);
    for (const std::int64_t cols : {std::int64_t{72}, std::int64_t{7}}) {
      const std::int64_t rows = ((static_cast<std::int64_t>(cases.size()) + cols - 1) / cols + 7) / 8 * 8;
      std::vector<float> xs(cases);
      xs.resize(static_cast<std::size_t>(rows * cols), 0.0f);
      const Tensor x = Tensor::from_floats(xs, {rows, cols});
      const auto q = kernels::quantize_float8(x, cols, Tensor::from_floats({f->max}, {}), format, true, true);
      ASSERT_EQ(scalar(q.scale_inv), 1.0f);
      const auto got = codes_of(q.codes), got_t = codes_of(q.transposed);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto i = static_cast<std::size_t>(r * cols + c);
          const std::string what = std::string(f->name) + " of " + std::to_string(xs[i]) + " (" +
                                   std::to_string(cols) + " columns)";
          ASSERT_EQ(got_t[static_cast<std::size_t>(c * rows + r)], got[i]) << what;
          if (std::isnan(xs[i]))
            ASSERT_TRUE(std::isnan(testing::float8_decode(*f, got[i]))) << what;
          else
            ASSERT_EQ(got[i], testing::float8_encode(*f, xs[i])) << what;
        }
      }
    }
  }
}

// Codes transposed: element (r, c) of the input is element (c, r) of the output.
TEST(Float8Scaling, TransposesCodes) {
  // 7 x 13 in single codes; 136 x 200 in packs of 8 (the CUDA build's), partial tiles at the edges.
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{7, 13}, {136, 200}}) {
    const auto v = spread_floats(static_cast<std::size_t>(rows * cols), 95, 3.0f);
    const Tensor x = Tensor::from_floats(v, {rows, cols});
    const kernels::Float8Matrix q = kernels::quantize_float8(x, cols, kernels::abs_max(x), DType::f8e4m3, true, true);
    const Tensor t = kernels::transpose_float8(q.codes);
    ASSERT_EQ(t.shape(), (Shape{cols, rows}));
    ASSERT_EQ(t.dtype(), DType::f8e4m3);
    EXPECT_EQ(codes_of(t), codes_of(q.transposed));
    const auto c = codes_of(q.codes), ct = codes_of(t);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < cols; ++k)
        ASSERT_EQ(ct[static_cast<std::size_t>(k * rows + r)], c[static_cast<std::size_t>(r * cols + k)]) << r << "," << k;
  }
  const Tensor x = Tensor::from_floats(spread_floats(6, 95, 3.0f), {2, 3});
  EXPECT_THAT([&] { kernels::transpose_float8(x); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected contiguous f8e4m3 or f8e5m2 codes")));
}

// A weight quantized before the call (as a ZeRO block's float8 gather delivers it) gives the layer
// float8_linear's own results bit for bit: output, input, weight and bias gradients, in a recording
// forward, under outputs on demand (a recompute), and without a graph.
TEST(Float8Linear, PreQuantizedWeightGivesTheSameResultsBitForBit) {
  const std::int64_t rows = 24, in = 32, out = 40;
  for (DType dt : {DType::f32, DType::bf16}) {
    const auto xv = rounded(spread_floats(rows * in, 101, 4.0f), dt);
    const auto wv = rounded(spread_floats(out * in, 102, 0.1f), dt);
    const auto bv = rounded(random_floats(out, 103), dt);
    const auto gv = rounded(spread_floats(rows * out, 104, 1e-3f), dt);
    const auto run = [&](bool pre_quantized, bool on_demand) {
      Tensor x = Tensor::from_floats(xv, {2, rows / 2, in}, dt).set_requires_grad(true);
      Tensor w = Tensor::from_floats(wv, {out, in}, dt).set_requires_grad(true);
      Tensor b = Tensor::from_floats(bv, {out}, dt).set_requires_grad(true);
      Tensor y;
      {
        std::optional<autograd::OutputsOnDemandGuard> guard;
        if (on_demand) guard.emplace();
        if (pre_quantized) {
          const kernels::Float8Matrix q = kernels::quantize_float8(w, in, kernels::abs_max(w), DType::f8e4m3);
          y = float8_linear(x, w, [q] { return q; }, b);
        } else {
          y = float8_linear(x, w, b);
        }
      }
      const auto yv = y.to_host_floats();
      y.backward(Tensor::from_floats(gv, {2, rows / 2, out}, dt));
      return std::vector<std::vector<float>>{yv, x.grad().to_host_floats(), w.grad().to_host_floats(),
                                             b.grad().to_host_floats()};
    };
    const std::string name = dtype_name(dt);
    const auto own = run(false, false);
    EXPECT_EQ(run(true, false), own) << name;
    EXPECT_EQ(run(true, true), own) << name << " on demand";
    NoGradGuard no_grad;
    const Tensor x = Tensor::from_floats(xv, {rows, in}, dt), w = Tensor::from_floats(wv, {out, in}, dt);
    const kernels::Float8Matrix q = kernels::quantize_float8(w, in, kernels::abs_max(w), DType::f8e4m3);
    EXPECT_EQ(float8_linear(x, w, [q] { return q; }).to_host_floats(), float8_linear(x, w).to_host_floats())
        << name << " no graph";
    // The codes are what is multiplied, not the weight's values: another weight's codes give its product.
    const Tensor other = Tensor::from_floats(rounded(spread_floats(out * in, 105, 0.2f), dt), {out, in}, dt);
    const kernels::Float8Matrix qo = kernels::quantize_float8(other, in, kernels::abs_max(other), DType::f8e4m3);
    EXPECT_EQ(float8_linear(x, w, [qo] { return qo; }).to_host_floats(), float8_linear(x, other).to_host_floats())
        << name;
    // Codes of another shape than the weight's, or in e5m2, are refused.
    kernels::Float8Matrix wrong = q;
    wrong.codes = q.codes.view({in, out});
    EXPECT_THAT([&] { float8_linear(x, w, [wrong] { return wrong; }); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected the weight's codes in forward as contiguous")));
    wrong.codes = kernels::quantize_float8(w, in, kernels::abs_max(w), DType::f8e5m2).codes;
    EXPECT_THAT([&] { float8_linear(x, w, [wrong] { return wrong; }); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected the weight's codes in forward as contiguous")));
  }
}

// Backward asks for the weight's codes again (a ZeRO block gathers the weight again for it) and
// keeps nothing of them from forward: the input's gradient is the product with the codes given
// then, the forward's output with those given in forward, and a backward given none is refused.
TEST(Float8Linear, BackwardTakesTheWeightCodesGivenThen) {
  const std::int64_t rows = 16, in = 32, out = 48;
  const Tensor w = Tensor::from_floats(spread_floats(out * in, 111, 0.1f), {out, in}).set_requires_grad(true);
  const Tensor other = Tensor::from_floats(spread_floats(out * in, 112, 0.3f), {out, in}).set_requires_grad(true);
  const auto xv = spread_floats(rows * in, 113, 2.0f);
  const auto gv = spread_floats(rows * out, 114, 1e-2f);
  const kernels::Float8Matrix qw = kernels::quantize_float8(w, in, kernels::abs_max(w), DType::f8e4m3);
  const kernels::Float8Matrix qo = kernels::quantize_float8(other, in, kernels::abs_max(other), DType::f8e4m3);
  // dx of a layer whose weight is `weight` throughout.
  const auto dx_with = [&](const Tensor& weight) {
    Tensor x = Tensor::from_floats(xv, {rows, in}).set_requires_grad(true);
    float8_linear(x, weight).backward(Tensor::from_floats(gv, {rows, out}));
    return x.grad().to_host_floats();
  };
  int asked = 0;
  Tensor x = Tensor::from_floats(xv, {rows, in}).set_requires_grad(true);
  Tensor y = float8_linear(x, w, [&] { return ++asked == 1 ? qw : qo; });
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(y.to_host_floats(), float8_linear(x.detach(), w.detach()).to_host_floats());
  y.backward(Tensor::from_floats(gv, {rows, out}));
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(x.grad().to_host_floats(), dx_with(other));
  EXPECT_NE(dx_with(other), dx_with(w));

  Tensor x2 = Tensor::from_floats(xv, {rows, in}).set_requires_grad(true);
  bool given = true;
  Tensor y2 = float8_linear(x2, w, [&] { return given ? qw : kernels::Float8Matrix{}; });
  given = false;
  EXPECT_THAT([&] { y2.backward(Tensor::from_floats(gv, {rows, out})); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected the weight's codes in backward")));
}

// Products that read one input inside a Float8SharedInputs scope (Llama's q, k and v) give what
// they give apart, bit for bit, forward and backward, and keep one copy of its codes for backward
// between them instead of one each; an equal input elsewhere in memory is quantized for itself.
TEST(Float8Linear, SharedInputsAreQuantizedOnce) {
  const std::int64_t rows = 64, in = 96, out = 32;
  const auto xv = spread_floats(rows * in, 121, 3.0f);
  const auto gv = spread_floats(rows * out, 122, 1e-2f);
  const Tensor w1 = Tensor::from_floats(spread_floats(out * in, 123, 0.1f), {out, in}, DType::bf16);
  const Tensor w2 = Tensor::from_floats(spread_floats(out * in, 124, 0.2f), {out, in}, DType::bf16);
  struct Run {
    std::vector<float> y, dx, dw1, dw2;
    double kept = 0;  // bytes the forward leaves allocated for backward
  };
  const auto run = [&](bool shared) {
    Tensor x = Tensor::from_floats(xv, {rows, in}, DType::bf16).set_requires_grad(true);
    Tensor a = w1.detach().set_requires_grad(true), b = w2.detach().set_requires_grad(true);
    const auto before = memory_stats().allocated_bytes;
    Tensor y;
    {
      std::optional<Float8SharedInputs> scope;
      if (shared) scope.emplace();
      EXPECT_EQ(Float8SharedInputs::current() != nullptr, shared);
      y = add(float8_linear(x, a), float8_linear(x, b));
    }
    EXPECT_EQ(Float8SharedInputs::current(), nullptr);
    Run r;
    r.kept = static_cast<double>(memory_stats().allocated_bytes) - static_cast<double>(before);
    r.y = y.to_host_floats();
    y.backward(Tensor::from_floats(gv, {rows, out}, DType::bf16));
    r.dx = x.grad().to_host_floats();
    r.dw1 = a.grad().to_host_floats();
    r.dw2 = b.grad().to_host_floats();
    return r;
  };
  const Run apart = run(false), shared = run(true);
  EXPECT_EQ(shared.y, apart.y);
  EXPECT_EQ(shared.dx, apart.dx);
  EXPECT_EQ(shared.dw1, apart.dw1);
  EXPECT_EQ(shared.dw2, apart.dw2);
  // One [in, rows] copy of x's transposed codes fewer (1 byte an element) and of its scale (one
  // f32), each in 512-byte blocks.
  EXPECT_EQ(apart.kept - shared.kept, static_cast<double>((rows * in + 511) / 512 * 512 + 512));

  // Another input of the same shape, at another address, is quantized for itself.
  const Tensor x = Tensor::from_floats(xv, {rows, in}, DType::bf16);
  const Tensor other = Tensor::from_floats(spread_floats(rows * in, 125, 1.0f), {rows, in}, DType::bf16);
  const std::vector<float> own = float8_linear(other, w1).to_host_floats();
  Float8SharedInputs scope;
  const std::vector<float> first = float8_linear(x, w1).to_host_floats();
  EXPECT_EQ(float8_linear(other, w1).to_host_floats(), own);
  EXPECT_NE(own, first);
}

TEST(Float8Linear, EmptyShapesAndMisuse) {
  Tensor none = Tensor::zeros({0, 16}).set_requires_grad(true);
  Tensor w = Tensor::from_floats(random_floats(4 * 16, 81), {4, 16}).set_requires_grad(true);
  Tensor y = float8_linear(none, w);
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  y.backward(Tensor::zeros({0, 4}));
  for (float g : w.grad().to_host_floats()) EXPECT_EQ(g, 0.0f);
  const Tensor b = Tensor::from_floats({1, 2, 3}, {3});
  const Tensor wide = Tensor::zeros({2, 0});
  EXPECT_EQ(float8_linear(wide, Tensor::zeros({3, 0}), b).to_host_floats(), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  EXPECT_THAT([&] { float8_linear(Tensor::zeros({2, 5}), Tensor::zeros({3, 4})); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected input [..., in] and weight [out, in]")));
  EXPECT_THAT([&] { float8_linear(Tensor::zeros({2, 4}), Tensor::zeros({3, 4}, DType::bf16)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("of one floating dtype")));
}

}  // namespace
}  // namespace bmt
