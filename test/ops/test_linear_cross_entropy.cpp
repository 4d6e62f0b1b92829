// linear_cross_entropy: loss and gradients against linear then cross_entropy at every chunking
// (one row, uneven chunks, one chunk for all), against finite differences, half precision against
// f32, all rows ignored, a weight gradient added into an existing f32 buffer, the position named for
// a bad target in a later chunk, bad arguments, a peak allocation one chunk's logits wide, and
// gradients made in forward only when a backward may follow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "bmtrain/kernels/index_check.hpp"
#include "bmtrain/ops/cross_entropy.hpp"
#include "bmtrain/ops/linear_cross_entropy.hpp"
#include "bmtrain/ops/matmul.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "common/gradcheck.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

using testing::expect_close;
using testing::random_floats;

std::vector<std::int64_t> random_targets(std::int64_t n, std::int64_t V, std::uint32_t seed, double ignore_rate) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> cls(0, V - 1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::int64_t> t(n);
  for (auto& x : t) x = u(gen) < ignore_rate ? -100 : cls(gen);
  return t;
}

struct Outcome {
  std::vector<float> loss, dh, dw;
};

// Loss and gradients (upstream gradient `seed`) of the fused op (chunk > 0) or of linear then
// cross_entropy (chunk == 0).
Outcome run(const Tensor& h0, const Tensor& w0, const Tensor& targets, std::int64_t chunk, float seed = 1.0f) {
  Tensor h = h0.detach().set_requires_grad(true);
  Tensor w = w0.detach().set_requires_grad(true);
  const Tensor loss = chunk > 0 ? linear_cross_entropy(h, w, targets, chunk) : cross_entropy(linear(h, w), targets);
  autograd::backward({loss}, {Tensor::from_floats({seed}, {})});
  return {loss.to_host_floats(), h.grad().to_host_floats(), w.grad().to_host_floats()};
}

TEST(LinearCrossEntropy, MatchesLinearThenCrossEntropyAtEveryChunking) {
  const std::int64_t N = 13, C = 8, V = 37;
  const Tensor h = testing::random_tensor({N, C}, 1, -1.0f, 1.0f);
  const Tensor w = testing::random_tensor({V, C}, 2, -1.0f, 1.0f);
  const Tensor t = Tensor::from_ints(random_targets(N, V, 3, 0.25), {N});
  const Outcome ref = run(h, w, t, 0, 1.7f);
  for (std::int64_t chunk : {1, 3, 4, 13, 100}) {
    const Outcome got = run(h, w, t, chunk, 1.7f);
    const std::string at = " at chunk_rows " + std::to_string(chunk);
    expect_close(got.loss, ref.loss, 1e-6, 1e-6, "loss" + at);
    expect_close(got.dh, ref.dh, 1e-6, 1e-5, "dh" + at);
    expect_close(got.dw, ref.dw, 1e-6, 1e-5, "dweight" + at);
  }
}

TEST(LinearCrossEntropy, LeadingDimensionsKeepTheirShape) {
  const std::int64_t B = 2, T = 5, C = 4, V = 9;
  Tensor h = testing::random_tensor({B, T, C}, 4).set_requires_grad(true);
  const Tensor w = testing::random_tensor({V, C}, 5);
  const Tensor t = Tensor::from_ints(random_targets(B * T, V, 6, 0.2), {B, T});
  const Tensor loss = linear_cross_entropy(h, w, t, 3);
  loss.backward();
  EXPECT_EQ(h.grad().shape(), (Shape{B, T, C}));
  const Tensor h_rows = h.detach().view({B * T, C});
  expect_close(loss.to_host_floats(), cross_entropy(linear(h_rows, w), t.view({B * T})).to_host_floats(), 1e-6, 1e-6,
               "loss");
}

TEST(LinearCrossEntropy, GradientsMatchFiniteDifferences) {
  const std::int64_t N = 5, C = 3, V = 7;
  const Tensor t = Tensor::from_ints(random_targets(N, V, 7, 0.2), {N});
  testing::gradcheck([&](const std::vector<Tensor>& in) { return linear_cross_entropy(in[0], in[1], t, 2); },
                     {testing::random_tensor({N, C}, 8, -1.0f, 1.0f), testing::random_tensor({V, C}, 9, -1.0f, 1.0f)},
                     {.step = 1e-2f, .rtol = 2e-2f, .atol = 1e-3f});
}

// bf16/f16: against linear then cross_entropy in the same dtype, which rounds the logits, their
// gradient, dh and dweight to it as the chunks do. A GEMM may sum a row in another order for
// another number of rows, so a value may land one rounding away: the loss within one rounding
// (relative), the gradients within two roundings of the largest.
TEST(LinearCrossEntropy, HalfPrecisionMatchesTheUnfusedOpsInTheSameDtype) {
  const std::int64_t N = 24, C = 16, V = 50;
  const Tensor t = Tensor::from_ints(random_targets(N, V, 10, 0.2), {N});
  for (DType dt : {DType::bf16, DType::f16}) {
    const Tensor h = testing::random_tensor({N, C}, 11, -1.0f, 1.0f, dt);
    const Tensor w = testing::random_tensor({V, C}, 12, -1.0f, 1.0f, dt);
    const Outcome fused = run(h, w, t, 5), unfused = run(h, w, t, 0);
    const double eps = dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
    expect_close(fused.loss, unfused.loss, 0, eps, std::string("loss ") + dtype_name(dt));
    for (auto [got, want, what] :
         {std::tuple{&fused.dh, &unfused.dh, "dh"}, std::tuple{&fused.dw, &unfused.dw, "dweight"}}) {
      float gmax = 0;
      for (float g : *want) gmax = std::max(gmax, std::fabs(g));
      expect_close(*got, *want, 2 * eps * gmax, 0, std::string(what) + " " + dtype_name(dt));
    }
  }
}

TEST(LinearCrossEntropy, EveryTargetIgnoredGivesZeroLossAndGradients) {
  const Outcome r = run(testing::random_tensor({4, 3}, 13), testing::random_tensor({6, 3}, 14),
                    Tensor::from_ints({-100, -100, -100, -100}, {4}), 3);
  EXPECT_EQ(r.loss, std::vector<float>{0.0f});
  EXPECT_EQ(r.dh, std::vector<float>(12, 0.0f));
  EXPECT_EQ(r.dw, std::vector<float>(18, 0.0f));
}

// A weight that already has an f32 gradient (a ZeRO block's parameter, or micro-batches being
// accumulated) gets this one added into that buffer, chunk by chunk.
TEST(LinearCrossEntropy, WeightGradientAddsIntoItsF32Buffer) {
  const std::int64_t N = 10, C = 4, V = 12;
  const Tensor h = testing::random_tensor({N, C}, 15);
  const Tensor w0 = testing::random_tensor({V, C}, 16);
  const Tensor t = Tensor::from_ints(random_targets(N, V, 17, 0.1), {N});
  const Outcome ref = run(h, w0, t, 0);
  Tensor w = w0.detach().set_requires_grad(true);
  const auto before = random_floats(V * C, 18);
  w.set_grad(Tensor::from_floats(before, {V, C}));
  const void* buffer = w.grad().data();
  linear_cross_entropy(h, w, t, 3).backward();
  EXPECT_EQ(w.grad().data(), buffer) << "the gradient went to a new buffer";
  std::vector<float> want(before.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = before[i] + ref.dw[i];
  expect_close(w.grad().to_host_floats(), want, 1e-6, 1e-5, "dweight added into the buffer");
}

TEST(LinearCrossEntropy, BadTargetIsNamedAtItsRowInTheWholeInput) {
  const bool was = index_validation();
  set_index_validation(true);
  struct Restore { bool on; ~Restore() { set_index_validation(on); } } restore{was};
  std::vector<std::int64_t> tv(11, 1);
  tv[9] = 40;  // the third chunk of 4 rows, its second row
  try {
    linear_cross_entropy(testing::random_tensor({11, 3}, 19), testing::random_tensor({7, 3}, 20),
                         Tensor::from_ints(tv, {11}), 4);
    FAIL() << "expected an error for target 40 with 7 classes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("found 40 at position 9"), std::string::npos) << e.what();
  }
}

TEST(LinearCrossEntropy, RejectsBadArguments) {
  const Tensor h = testing::random_tensor({4, 3}, 21), w = testing::random_tensor({5, 3}, 22);
  const Tensor t = Tensor::from_ints({0, 1, 2, 3}, {4});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { linear_cross_entropy(h, w, t, 0); }).find("expected chunk_rows > 0, found 0"),
            std::string::npos);
  EXPECT_NE(message([&] { linear_cross_entropy(h, testing::random_tensor({5, 2}, 23), t, 2); })
                .find("expected h [..., C] and weight [V, C]"),
            std::string::npos);
  EXPECT_NE(message([&] { linear_cross_entropy(h, w, Tensor::from_ints({0, 1}, {2}), 2); })
                .find("expected 4 targets"),
            std::string::npos);
  EXPECT_NE(message([&] { linear_cross_entropy(h, testing::random_tensor({5, 3}, 24, -1.0f, 1.0f, DType::bf16), t, 2); })
                .find("of one floating dtype"),
            std::string::npos);
}

// The point of the op: forward and backward together never hold more than one chunk's logits.
TEST(LinearCrossEntropy, PeakMemoryIsOneChunkOfLogits) {
  const std::int64_t N = 256, C = 8, V = 1000, chunk = 32;
  const Tensor h = testing::random_tensor({N, C}, 25);
  const Tensor w = testing::random_tensor({V, C}, 26);
  const Tensor t = Tensor::from_ints(random_targets(N, V, 27, 0.1), {N});
  auto peak_of = [&](std::int64_t rows) {
    const std::size_t before = memory_stats().allocated_bytes;
    CachingAllocator::instance().reset_peak();
    run(h, w, t, rows);
    return memory_stats().peak_allocated_bytes - before;
  };
  const std::size_t logits_bytes = static_cast<std::size_t>(N * V) * sizeof(float);
  const std::size_t unfused = peak_of(0), chunked = peak_of(chunk);
  EXPECT_LE(chunked + logits_bytes * 3 / 4, unfused)
      << "peak " << chunked << " bytes in chunks of " << chunk << " rows, " << unfused << " through whole logits of "
      << logits_bytes;
}

// With a backward to follow, forward makes the gradients (an f32 [V, C] buffer for the weight's);
// for a loss alone (no grad mode, or inputs needing no gradient) it makes none.
TEST(LinearCrossEntropy, ForwardMakesGradientsOnlyWhenABackwardMayFollow) {
  const std::int64_t N = 64, C = 64, V = 2000, chunk = 8;
  const Tensor h = testing::random_tensor({N, C}, 28);
  const Tensor w = testing::random_tensor({V, C}, 29);
  const Tensor t = Tensor::from_ints(random_targets(N, V, 30, 0.1), {N});
  const std::size_t weight_gradient = static_cast<std::size_t>(V * C) * sizeof(float);
  auto forward_peak = [&](bool grad_mode, bool inputs_need_grad) {
    const Tensor hi = h.detach().set_requires_grad(inputs_need_grad), wi = w.detach().set_requires_grad(inputs_need_grad);
    const std::size_t before = memory_stats().allocated_bytes;
    CachingAllocator::instance().reset_peak();
    {
      const autograd::NoGradGuard no_grad;
      if (grad_mode) {
        const autograd::EnableGradGuard on;
        linear_cross_entropy(hi, wi, t, chunk);
      } else {
        linear_cross_entropy(hi, wi, t, chunk);
      }
    }
    return memory_stats().peak_allocated_bytes - before;
  };
  EXPECT_GE(forward_peak(true, true), weight_gradient);
  EXPECT_LT(forward_peak(false, true), weight_gradient / 2);
  EXPECT_LT(forward_peak(true, false), weight_gradient / 2);
}

}  // namespace
}  // namespace bmt
