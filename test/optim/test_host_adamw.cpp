// The offloaded AdamW's host update against the update written out element by element (the same
// expressions as the device kernel) and its values against the 16-bit conversions of
// runtime/half.hpp, for every output dtype, written apart and over the gradient as the offloaded
// optimizer does, with f32 and bf16 moments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "bmtrain/optim/host_adamw.hpp"
#include "bmtrain/runtime/half.hpp"

namespace {

float as_float(const void* out, bmt::DType dtype, std::int64_t i) {
  if (dtype == bmt::DType::f32) return static_cast<const float*>(out)[i];
  const std::uint16_t bits = static_cast<const std::uint16_t*>(out)[i];
  return dtype == bmt::DType::bf16 ? bmt::bf16_t::to_float(bits) : bmt::f16_t::to_float(bits);
}

float rounded(float x, bmt::DType dtype) {
  if (dtype == bmt::DType::f32) return x;
  return dtype == bmt::DType::bf16 ? bmt::bf16_t::to_float(bmt::bf16_t::from_float(x))
                                   : bmt::f16_t::to_float(bmt::f16_t::from_float(x));
}

TEST(HostAdamW, MatchesTheElementwiseUpdateForEveryDtypeAndOverTheGradient) {
  const std::int64_t n = 5003;  // tiles of 2048 and a remainder
  for (bmt::DType dtype : {bmt::DType::f32, bmt::DType::bf16, bmt::DType::f16})
    for (bool over_gradient : {false, true}) {
      std::vector<float> g(n), w(n), m(n), v(n);
      for (std::int64_t i = 0; i < n; ++i) {
        g[i] = std::sin(0.37f * i) * 3.0f;
        w[i] = std::cos(0.11f * i) * 70000.0f / (1 + i % 97);  // beyond f16's range for some
        m[i] = 0.01f * std::sin(0.5f * i);
        v[i] = 0.001f * (1 + std::cos(0.3f * i));
      }
      const bmt::optim::HostAdamWStep s{0.01f, 0.5f, 0.9f, 0.95f, 1e-8f, 0.19f, 0.0975f, 0.1f};
      std::vector<float> rw = w, rm = m, rv = v, rg = g;
      std::vector<float> out_buffer(n);
      void* out = over_gradient ? static_cast<void*>(g.data()) : static_cast<void*>(out_buffer.data());
      bmt::optim::host_adamw_update(g.data(), w.data(), m.data(), v.data(), bmt::DType::f32, out, dtype, n, s);
      for (std::int64_t i = 0; i < n; ++i) {
        const float gi = rg[i] * s.grad_scale;
        const float mi = s.beta1 * rm[i] + (1.0f - s.beta1) * gi;
        const float vi = s.beta2 * rv[i] + (1.0f - s.beta2) * gi * gi;
        const float update = (mi / s.bias1) / (std::sqrt(vi / s.bias2) + s.eps);
        const float wi = rw[i] * (1.0f - s.lr * s.weight_decay) - s.lr * update;
        // Equal on x86-64; within a rounding where the compiler may fuse multiply-adds (aarch64).
        ASSERT_NEAR(m[i], mi, 1e-6 * std::fabs(mi)) << i;
        ASSERT_NEAR(v[i], vi, 1e-6 * std::fabs(vi)) << i;
        ASSERT_NEAR(w[i], wi, 1e-6 * std::fabs(wi)) << i;
        const float got = as_float(out, dtype, i), want = rounded(w[i], dtype);
        ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want)))
            << bmt::dtype_name(dtype) << " over gradient " << over_gradient << " element " << i << ": " << got
            << " vs " << want;
      }
    }
}

// bf16 moments: read widened, updated in f32, stored rounded to nearest even; the master weights
// take the unrounded new moments. The stored bits equal bf16_t::from_float of the f32 update (but
// where a fused multiply-add moves the f32 value across a rounding boundary: one bf16 step).
TEST(HostAdamW, Bf16MomentsAreWidenedUpdatedInF32AndRoundedToNearestEven) {
  const std::int64_t n = 5003;
  for (bmt::DType dtype : {bmt::DType::f32, bmt::DType::bf16}) {
    std::vector<float> g(n), w(n);
    std::vector<std::uint16_t> m(n), v(n);
    for (std::int64_t i = 0; i < n; ++i) {
      g[i] = std::sin(0.37f * i) * 3.0f;
      w[i] = std::cos(0.11f * i);
      m[i] = bmt::bf16_t::from_float(0.01f * std::sin(0.5f * i));
      v[i] = bmt::bf16_t::from_float(0.001f * (1 + std::cos(0.3f * i)));
    }
    const bmt::optim::HostAdamWStep s{0.01f, 0.5f, 0.9f, 0.95f, 1e-8f, 0.19f, 0.0975f, 0.1f};
    const std::vector<float> rw = w, rg = g;
    const std::vector<std::uint16_t> rm = m, rv = v;
    std::vector<float> out(n);
    bmt::optim::host_adamw_update(g.data(), w.data(), m.data(), v.data(), bmt::DType::bf16, out.data(), dtype, n, s);
    std::int64_t exact = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const float gi = rg[i] * s.grad_scale;
      const float mi = s.beta1 * bmt::bf16_t::to_float(rm[i]) + (1.0f - s.beta1) * gi;
      const float vi = s.beta2 * bmt::bf16_t::to_float(rv[i]) + (1.0f - s.beta2) * gi * gi;
      const float update = (mi / s.bias1) / (std::sqrt(vi / s.bias2) + s.eps);
      const float wi = rw[i] * (1.0f - s.lr * s.weight_decay) - s.lr * update;
      ASSERT_NEAR(w[i], wi, 1e-6 * std::fabs(wi) + 1e-7) << i;
      const std::uint16_t want_m = bmt::bf16_t::from_float(mi), want_v = bmt::bf16_t::from_float(vi);
      ASSERT_LE(std::abs(static_cast<int>(m[i]) - static_cast<int>(want_m)), 1) << "exp_avg " << i;
      ASSERT_LE(std::abs(static_cast<int>(v[i]) - static_cast<int>(want_v)), 1) << "exp_avg_sq " << i;
      exact += m[i] == want_m && v[i] == want_v;
      ASSERT_EQ(as_float(out.data(), dtype, i), rounded(w[i], dtype)) << i;
    }
    EXPECT_GE(exact, n - n / 1000) << "moments rounded otherwise than to nearest even";
  }
}

TEST(HostAdamW, RoundsLikeTheHalfConversionsNaNAndInfinityIncluded) {
  std::vector<float> w = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.0048828125f, -3.3e38f, 65519.0f, 65520.0f, 1e-8f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN()};
  for (int i = 0; i < 3000; ++i) w.push_back(std::ldexp(std::sin(1.7f * i), i % 60 - 30));
  const auto n = static_cast<std::int64_t>(w.size());
  for (bmt::DType dtype : {bmt::DType::bf16, bmt::DType::f16}) {
    std::vector<std::uint16_t> out(w.size());
    bmt::optim::host_round(w.data(), out.data(), dtype, n);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint16_t want =
          dtype == bmt::DType::bf16 ? bmt::bf16_t::from_float(w[i]) : bmt::f16_t::from_float(w[i]);
      ASSERT_EQ(out[i], want) << bmt::dtype_name(dtype) << " " << w[i];
    }
  }
  std::vector<float> out(w.size());
  bmt::optim::host_round(w.data(), out.data(), bmt::DType::f32, n);
  EXPECT_EQ(0, std::memcmp(out.data(), w.data(), w.size() * sizeof(float)));
}

}  // namespace
