// Cross-entropy: loss against a float64 reference (odd sizes, ignored rows, i32/i64 targets),
// gradients against finite differences and against softmax - onehot, bf16/f16 against f32,
// the all-ignored case, out-of-range targets, and the gradient written over logits nobody holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/cross_entropy.hpp"
#include "bmtrain/kernels/index_check.hpp"
#include "bmtrain/ops/cross_entropy.hpp"
#include "bmtrain/ops/matmul.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/gradcheck.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

using testing::expect_close;
using testing::random_floats;

std::vector<std::int64_t> random_targets(std::int64_t n, std::int64_t V, std::uint32_t seed, double ignore_rate,
                                         std::int64_t ignore_index = -100) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> cls(0, V - 1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::int64_t> t(n);
  for (auto& x : t) x = u(gen) < ignore_rate ? ignore_index : cls(gen);
  return t;
}

struct CeReference {
  double loss = 0;
  std::vector<double> grad;  // d loss / d logits
};

CeReference ce_reference(const std::vector<float>& x, const std::vector<std::int64_t>& t, std::int64_t V,
                         std::int64_t ignore_index = -100) {
  const std::size_t N = t.size();
  CeReference r;
  r.grad.assign(x.size(), 0.0);
  double total = 0;
  int count = 0;
  for (std::size_t i = 0; i < N; ++i)
    if (t[i] != ignore_index) ++count;
  for (std::size_t i = 0; i < N; ++i) {
    if (t[i] == ignore_index) continue;
    double m = x[i * V];
    for (std::int64_t j = 0; j < V; ++j) m = std::max(m, static_cast<double>(x[i * V + j]));
    double s = 0;
    for (std::int64_t j = 0; j < V; ++j) s += std::exp(x[i * V + j] - m);
    const double lse = m + std::log(s);
    total += lse - x[i * V + t[i]];
    for (std::int64_t j = 0; j < V; ++j)
      r.grad[i * V + j] = (std::exp(x[i * V + j] - lse) - (j == t[i] ? 1.0 : 0.0)) / count;
  }
  r.loss = count ? total / count : 0.0;
  return r;
}

TEST(CrossEntropy, LossMatchesFloat64Reference) {
  std::uint32_t seed = 1;
  for (std::int64_t N : {1, 7, 33}) {
    for (std::int64_t V : {1, 17, 100, 1001}) {
      for (DType index_dtype : {DType::i32, DType::i64}) {
        const auto xv = random_floats(N * V, seed++, -4.0f, 4.0f);
        const auto tv = random_targets(N, V, seed++, N > 1 ? 0.25 : 0.0);
        const Tensor loss = cross_entropy(Tensor::from_floats(xv, {N, V}), Tensor::from_ints(tv, {N}, index_dtype));
        EXPECT_EQ(loss.dtype(), DType::f32);
        EXPECT_EQ(loss.dim(), 0);
        const auto ref = ce_reference(xv, tv, V);
        expect_close(loss.to_host_floats(), std::vector<double>{ref.loss}, 1e-5, 1e-5,
                     "loss N=" + std::to_string(N) + " V=" + std::to_string(V));
      }
    }
  }
}

TEST(CrossEntropy, LeadingDimensionsAndCustomIgnoreIndex) {
  const std::int64_t B = 2, T = 5, V = 11;
  const auto xv = random_floats(B * T * V, 3, -3.0f, 3.0f);
  const auto tv = random_targets(B * T, V, 4, 0.3, /*ignore_index=*/0);
  const Tensor loss = cross_entropy(Tensor::from_floats(xv, {B, T, V}), Tensor::from_ints(tv, {B, T}), 0);
  expect_close(loss.to_host_floats(), std::vector<double>{ce_reference(xv, tv, V, 0).loss}, 1e-5, 1e-5, "loss");
}

TEST(CrossEntropy, GradientMatchesSoftmaxMinusOnehot) {
  const std::int64_t N = 9, V = 23;
  const auto xv = random_floats(N * V, 5, -3.0f, 3.0f);
  const auto tv = random_targets(N, V, 6, 0.3);
  const auto r = testing::forward_backward(
      [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); },
      {Tensor::from_floats(xv, {N, V}), Tensor::from_ints(tv, {N})}, {true, false}, {2.5f});
  auto ref = ce_reference(xv, tv, V);
  for (auto& g : ref.grad) g *= 2.5;  // the upstream gradient scales it
  expect_close(r.grads[0], ref.grad, 1e-6, 1e-5, "dlogits");
}

TEST(CrossEntropy, GradientsMatchFiniteDifferences) {
  for (auto [N, V] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 5}, {4, 7}, {6, 17}}) {
    const Tensor t = Tensor::from_ints(random_targets(N, V, 7, 0.3), {N});
    testing::gradcheck([](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); },
                       {testing::random_tensor({N, V}, 8, -2.0f, 2.0f), t}, {.step = 1e-2f, .rtol = 2e-2f, .atol = 1e-3f});
  }
}

TEST(CrossEntropy, EveryTargetIgnoredGivesZeroLossAndGradient) {
  const Tensor x = testing::random_tensor({4, 6}, 9);
  const auto r = testing::forward_backward(
      [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); },
      {x, Tensor::from_ints({-100, -100, -100, -100}, {4})}, {true, false}, {1.0f});
  EXPECT_EQ(r.output, std::vector<float>{0.0f});
  EXPECT_EQ(r.grads[0], std::vector<float>(24, 0.0f));
}

TEST(CrossEntropy, StableForLargeLogits) {
  const std::int64_t N = 3, V = 40;
  const auto xv = random_floats(N * V, 10, 3000.0f, 3010.0f);
  const std::vector<std::int64_t> tv = {1, 20, 39};
  const Tensor loss = cross_entropy(Tensor::from_floats(xv, {N, V}), Tensor::from_ints(tv, {N}));
  expect_close(loss.to_host_floats(), std::vector<double>{ce_reference(xv, tv, V).loss}, 1e-4, 1e-5, "loss");
}

// Documented tolerances (bf16/f16 logits, same rounded values in f32): loss within 1e-4 relative
// (the loss is accumulated in f32 either way); logit gradients within 2^-8 (bf16) / 2^-11 (f16) of
// the largest gradient magnitude, since each is rounded once to the logits' dtype.
TEST(CrossEntropy, HalfPrecisionMatchesFloat) {
  const std::int64_t N = 12, V = 77;
  const auto tv = random_targets(N, V, 11, 0.2);
  for (DType dt : {DType::bf16, DType::f16}) {
    const auto xv = testing::rounded_to(random_floats(N * V, 12, -6.0f, 6.0f), dt);
    auto run = [&](DType d) {
      return testing::forward_backward([](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); },
                                       {Tensor::from_floats(xv, {N, V}, d), Tensor::from_ints(tv, {N})},
                                       {true, false}, {1.0f});
    };
    const auto half = run(dt), full = run(DType::f32);
    expect_close(half.output, full.output, 0, 1e-4, std::string("loss ") + dtype_name(dt));
    float gmax = 0;
    for (float g : full.grads[0]) gmax = std::max(gmax, std::fabs(g));
    expect_close(half.grads[0], full.grads[0], gmax * (dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048), 0,
                 std::string("dlogits ") + dtype_name(dt));
  }
}

// Logits that nobody but the loss holds (a language model head's GEMM output) are overwritten by
// their gradient: the same gradients, bit for bit, as when the caller keeps the logits, and a
// backward peak lower by the logits' size.
TEST(CrossEntropy, GradientOverwritesLogitsNobodyElseHolds) {
  const std::int64_t N = 64, V = 1000, C = 8;
  const Tensor t = Tensor::from_ints(random_targets(N, V, 15, 0.2), {N});
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::size_t logits_bytes = static_cast<std::size_t>(N * V) * dtype_size(dt);
    auto run = [&](bool keep_logits, std::size_t* backward_peak) {
      Tensor h = Tensor::from_floats(random_floats(N * C, 16, -1.0f, 1.0f), {N, C}, dt);
      Tensor w = Tensor::from_floats(random_floats(V * C, 17, -1.0f, 1.0f), {V, C}, dt);
      h.set_requires_grad(true);
      w.set_requires_grad(true);
      Tensor kept, loss;
      {
        Tensor logits = linear(h, w);
        if (keep_logits) kept = logits;
        loss = cross_entropy(logits, t);
      }
      const std::size_t before = memory_stats().allocated_bytes;
      CachingAllocator::instance().reset_peak();
      loss.backward();
      *backward_peak = memory_stats().peak_allocated_bytes - before;
      std::vector<float> grads = h.grad().to_host_floats();
      for (float g : w.grad().to_host_floats()) grads.push_back(g);
      return grads;
    };
    std::size_t in_place = 0, kept = 0;
    const auto g_in_place = run(false, &in_place);
    const auto g_kept = run(true, &kept);
    EXPECT_EQ(g_in_place, g_kept) << dtype_name(dt);
    EXPECT_GE(kept, in_place + logits_bytes * 9 / 10)
        << dtype_name(dt) << ": backward's peak allocation " << in_place << " bytes overwriting the logits, " << kept
        << " keeping them, where the logits take " << logits_bytes;
  }
}

// The count linear_cross_entropy takes ahead of the logits: targets in [0, V) other than
// ignore_index, for i32 and i64 targets, a custom ignore_index, out-of-range ones and none at all.
TEST(CrossEntropy, CountTargetsCountsWhatTheLossIsAveragedOver) {
  const std::int64_t V = 9;
  auto count = [&](const Tensor& targets, std::int64_t ignore) {
    const Tensor c = Tensor::empty({}, DType::f32);
    kernels::count_targets(targets, V, ignore, c);
    return c.to_host_floats()[0];
  };
  std::vector<std::int64_t> t = random_targets(1000, V, 40, 0.3);
  t[3] = V;  // out of range: not counted
  t[4] = -7;
  float want = 0;
  for (std::int64_t x : t) want += x >= 0 && x < V ? 1.0f : 0.0f;
  EXPECT_EQ(count(Tensor::from_ints(t, {1000}), -100), want);
  EXPECT_EQ(count(Tensor::from_ints(t, {10, 100}, DType::i32), -100), want);
  EXPECT_EQ(count(Tensor::from_ints(t, {1000}), 2), want - static_cast<float>(std::count(t.begin(), t.end(), 2)));
  EXPECT_EQ(count(Tensor::from_ints({}, {0}), -100), 0.0f);
  // Its count is the one the loss's kernel arrives at.
  const Tensor logits = testing::random_tensor({1000, V}, 41);
  const Tensor lse = Tensor::empty({1000}, DType::f32), loss = Tensor::empty({}, DType::f32),
               forward_count = Tensor::empty({}, DType::f32);
  std::vector<std::int64_t> in_range = random_targets(1000, V, 42, 0.3);
  kernels::cross_entropy_forward(logits, Tensor::from_ints(in_range, {1000}), -100, lse, loss, forward_count);
  EXPECT_EQ(count(Tensor::from_ints(in_range, {1000}), -100), forward_count.to_host_floats()[0]);
}

// A gradient made for an upstream gradient of 1, scaled by the real one: written in f32 or rounded
// once to bf16, or added into what the output holds (bit for bit, in either rounding of a*b + c).
TEST(CrossEntropy, ScaleByGradLossWritesOrAdds) {
  const std::int64_t n = 777;
  const std::vector<float> g = random_floats(n, 43), before = random_floats(n, 44);
  const Tensor grad = Tensor::from_floats(g, {n}), grad_loss = Tensor::from_floats({-0.37f}, {});
  const Tensor f32_out = Tensor::empty({7, 111}, DType::f32);
  kernels::scale_by_grad_loss(grad, grad_loss, f32_out, false);
  const Tensor added = Tensor::from_floats(before, {n});
  kernels::scale_by_grad_loss(grad, grad_loss, added, true);
  const Tensor bf16_out = Tensor::empty({n}, DType::bf16);
  kernels::scale_by_grad_loss(grad, grad_loss, bf16_out, false);
  const std::vector<float> got = f32_out.to_host_floats(), got_added = added.to_host_floats(),
                           got_bf16 = bf16_out.to_host_floats(),
                           want_bf16 = cast(f32_out, DType::bf16).to_host_floats();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = -0.37f * g[i];
    ASSERT_EQ(got[i], v) << "at " << i;
    // The sum rounded once (a fused multiply-add, as CUDA compiles it) or after the product.
    const float fused = std::fma(-0.37f, g[i], before[i]);
    ASSERT_TRUE(got_added[i] == before[i] + v || got_added[i] == fused)
        << "at " << i << ": " << got_added[i] << ", expected " << before[i] + v << " or " << fused;
    ASSERT_EQ(got_bf16[i], want_bf16[i]) << "at " << i;
  }
  EXPECT_THROW(kernels::scale_by_grad_loss(bf16_out, grad_loss, f32_out, false), Error);
  EXPECT_THROW(kernels::scale_by_grad_loss(grad, grad_loss, Tensor::empty({n - 1}, DType::f32), false), Error);
}

TEST(CrossEntropy, RejectsOutOfRangeTargets) {
  // On by default on the host build; the CUDA build turns it on when asked.
  const bool was = index_validation();
  set_index_validation(true);
  struct Restore { bool on; ~Restore() { set_index_validation(on); } } restore{was};
  const Tensor x = testing::random_tensor({3, 5}, 13);
  try {
    cross_entropy(x, Tensor::from_ints({1, 5, 2}, {3}));
    FAIL() << "expected an error for target 5 with 5 classes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("found 5 at position 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cross_entropy(x, Tensor::from_ints({-1, 0, 2}, {3})), Error);
  EXPECT_THROW(cross_entropy(x, Tensor::from_ints({0, 1}, {2})), Error);       // wrong count
  EXPECT_THROW(cross_entropy(x, Tensor::from_floats({0, 1, 2}, {3})), Error);  // not an index dtype
}

TEST(CrossEntropy, OutOfRangeTargetsWithoutValidationAreLeftOut) {
  // With validation off (the CUDA default) a bad target neither faults nor counts.
  set_index_validation(false);
  const auto xv = random_floats(3 * 5, 14);
  const Tensor loss = cross_entropy(Tensor::from_floats(xv, {3, 5}), Tensor::from_ints({1, 7, 2}, {3}));
  set_index_validation(true);
  expect_close(loss.to_host_floats(), std::vector<double>{ce_reference(xv, {1, -100, 2}, 5).loss}, 1e-5, 1e-5, "loss");
}

}  // namespace
}  // namespace bmt
