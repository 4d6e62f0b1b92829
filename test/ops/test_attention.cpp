// Fused attention: output and gradients against a naive float64 reference (explicit scores,
// softmax, products), both layouts and fused-QKV views, finite differences, bf16/f16 against f32,
// and the memory bound: no [T, T] buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "bmtrain/kernels/attention.hpp"
#include "bmtrain/ops/attention.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "common/attention_reference.hpp"
#include "common/gradcheck.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

using testing::expect_close;
using testing::random_floats;

using Sizes = testing::AttentionSizes;
using testing::attention_reference;
using testing::expected_tensor_core_kernel;
using testing::swap_heads_and_time;

void check_against_reference(const Sizes& s, bool causal, std::uint32_t seed, double tol) {
  const auto q = random_floats(s.queries(), seed, -1.5f, 1.5f);
  const auto k = random_floats(s.keys(), seed + 1, -1.5f, 1.5f);
  const auto v = random_floats(s.keys(), seed + 2);
  const auto dout = random_floats(s.queries(), seed + 3);
  const double scale = 1.0 / std::sqrt(double(s.D));
  const auto ref = attention_reference(s, q, k, v, dout, causal, scale);
  const std::string what = s.describe() + (causal ? " causal" : "");
  const auto r = testing::forward_backward(
      [causal](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], causal); },
      {Tensor::from_floats(q, {s.B, s.H, s.Tq, s.D}), Tensor::from_floats(k, {s.B, s.kv_heads(), s.Tk, s.D}),
       Tensor::from_floats(v, {s.B, s.kv_heads(), s.Tk, s.D})},
      {true, true, true}, dout);
  expect_close(r.output, ref.out, tol, tol, what + " out");
  expect_close(r.grads[0], ref.dq, tol, tol, what + " dq");
  expect_close(r.grads[1], ref.dk, tol, tol, what + " dk");
  expect_close(r.grads[2], ref.dv, tol, tol, what + " dv");
}

TEST(Attention, MatchesNaiveFloat64Reference) {
  std::uint32_t seed = 1;
  for (std::int64_t T : {1, 7, 33})
    for (std::int64_t D : {8, 16})
      for (bool causal : {true, false}) check_against_reference({2, 3, T, T, D}, causal, seed += 4, 2e-5);
}

TEST(Attention, SpecializedAndOddHeadDimensions) {
  // 64 and 128 run their own instantiations; 5 exercises the remainder of the blocked dot product.
  for (std::int64_t D : {64, 128, 5}) {
    check_against_reference({1, 2, 19, 19, D}, true, 100 + D, 2e-5);
    check_against_reference({1, 1, 6, 6, D}, false, 200 + D, 2e-5);
  }
}

TEST(Attention, MoreKeysThanQueries) {
  check_against_reference({2, 2, 5, 9, 8}, true, 300, 2e-5);
  check_against_reference({1, 2, 9, 4, 8}, false, 310, 2e-5);
  check_against_reference({1, 1, 1, 17, 16}, true, 320, 2e-5);  // one query sees every key
}

// Grouped-query attention against the multi-head reference with each key/value head repeated for
// the query heads of its group: groups of 2, 3 and 4 heads, one key/value head (multi-query), more
// keys than queries, the head sizes with their own instantiations, and Hk = H given explicitly.
TEST(Attention, GroupedQueryMatchesRepeatedKeyValueHeads) {
  std::uint32_t seed = 400;
  for (bool causal : {true, false}) {
    check_against_reference({2, 4, 9, 9, 8, 2}, causal, seed += 4, 2e-5);
    check_against_reference({1, 6, 7, 7, 16, 2}, causal, seed += 4, 2e-5);
    check_against_reference({1, 6, 7, 7, 16, 3}, causal, seed += 4, 2e-5);
    check_against_reference({2, 4, 5, 11, 8, 1}, causal, seed += 4, 2e-5);
    check_against_reference({1, 4, 19, 19, 64, 2}, causal, seed += 4, 2e-5);
    check_against_reference({1, 2, 6, 6, 128, 1}, causal, seed += 4, 2e-5);
    check_against_reference({1, 3, 6, 6, 5, 3}, causal, seed += 4, 2e-5);
  }
}

// A grouped-query backward sums each key/value head's gradient over its group in a fixed order:
// two runs give the same bits.
TEST(Attention, GroupedQueryGradientsAreTheSameOnEveryRun) {
  const Sizes s{2, 8, 67, 67, 64, 2};
  for (DType dt : {DType::f32, DType::bf16}) {
    auto run = [&] {
      return testing::forward_backward(
          [](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2]); },
          {testing::random_tensor({s.B, s.H, s.Tq, s.D}, 450, -1, 1, dt),
           testing::random_tensor({s.B, s.kv_heads(), s.Tk, s.D}, 451, -1, 1, dt),
           testing::random_tensor({s.B, s.kv_heads(), s.Tk, s.D}, 452, -1, 1, dt)},
          {true, true, true}, random_floats(s.queries(), 453));
    };
    const auto a = run(), b = run();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << dtype_name(dt) << " gradient " << i;
  }
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  for (bool causal : {true, false}) {
    testing::gradcheck(
        [causal](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], causal); },
        {testing::random_tensor({1, 2, 5, 4}, 11), testing::random_tensor({1, 2, 5, 4}, 12),
         testing::random_tensor({1, 2, 5, 4}, 13)});
  }
  // A custom scale, BTHD layout.
  testing::gradcheck(
      [](const std::vector<Tensor>& in) { return attention_bthd(in[0], in[1], in[2], true, 0.7f); },
      {testing::random_tensor({2, 4, 2, 3}, 14), testing::random_tensor({2, 4, 2, 3}, 15),
       testing::random_tensor({2, 4, 2, 3}, 16)});
  // Grouped-query: two query heads a key/value head, and one key/value head for all (BTHD).
  for (bool causal : {true, false})
    testing::gradcheck(
        [causal](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], causal); },
        {testing::random_tensor({1, 4, 5, 4}, 17), testing::random_tensor({1, 2, 5, 4}, 18),
         testing::random_tensor({1, 2, 5, 4}, 19)});
  testing::gradcheck(
      [](const std::vector<Tensor>& in) { return attention_bthd(in[0], in[1], in[2]); },
      {testing::random_tensor({2, 4, 3, 3}, 20), testing::random_tensor({2, 4, 1, 3}, 21),
       testing::random_tensor({2, 4, 1, 3}, 22)});
}

TEST(Attention, CustomScale) {
  const Sizes s{1, 2, 6, 6, 8};
  const auto q = random_floats(96, 21), k = random_floats(96, 22), v = random_floats(96, 23);
  const auto ref = attention_reference(s, q, k, v, std::vector<float>(96, 0.0f), true, 0.25);
  const Tensor o = attention(Tensor::from_floats(q, {1, 2, 6, 8}), Tensor::from_floats(k, {1, 2, 6, 8}),
                             Tensor::from_floats(v, {1, 2, 6, 8}), true, 0.25f);
  expect_close(o.to_host_floats(), ref.out, 1e-5, 1e-5, "scale 0.25");
}

TEST(Attention, BthdLayoutAndFusedQkvViews) {
  const std::int64_t B = 2, T = 7, H = 3, D = 8;
  const auto qkv = random_floats(B * T * 3 * H * D, 31);
  const Tensor fused = Tensor::from_floats(qkv, {B, T, 3, H, D});
  const Tensor q = fused.select(2, 0), k = fused.select(2, 1), v = fused.select(2, 2);  // strided [B, T, H, D]
  ASSERT_FALSE(q.is_contiguous());
  const Tensor o = attention_bthd(q, k, v);
  EXPECT_EQ(o.shape(), (Shape{B, T, H, D}));
  EXPECT_TRUE(o.is_contiguous());
  // Reference: the same data rearranged to [B, H, T, D].
  auto bhtd = [&](const Tensor& t) { return swap_heads_and_time(t.to_host_floats(), B, T, H, D); };
  const auto ref = attention_reference({B, H, T, T, D}, bhtd(q), bhtd(k), bhtd(v), std::vector<float>(B * H * T * D),
                                       true, 1.0 / std::sqrt(8.0));
  expect_close(swap_heads_and_time(o.to_host_floats(), B, T, H, D), ref.out, 2e-5, 2e-5, "bthd out");
  // And the [B, H, T, D] entry point on a transposed view agrees exactly.
  const Tensor o2 = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
  EXPECT_EQ(o2.to_host_floats(), swap_heads_and_time(o.to_host_floats(), B, T, H, D));
}

// A fused QKV projection [B, T, 3C], split and reshaped to heads as bmt-train's GPT-2 block does:
// no copy on the way in, and the gradient that reaches the projection equals the one of three
// separate contiguous inputs.
TEST(Attention, FusedProjectionSplitIntoHeads) {
  const std::int64_t B = 2, T = 9, H = 2, D = 8, C = H * D;
  const auto qkv = random_floats(B * T * 3 * C, 35);
  const auto w = random_floats(B * T * C, 36);
  Tensor fused = Tensor::from_floats(qkv, {B, T, 3 * C}).set_requires_grad(true);
  const auto p = split(fused, {C, C, C}, -1);
  std::vector<Tensor> heads;
  for (const Tensor& t : p) heads.push_back(reshape(t, {B, T, H, D}));
  for (const Tensor& t : heads) EXPECT_EQ(t.storage(), fused.storage());
  const Tensor weights = Tensor::from_floats(w, {B, T, H, D});
  sum(mul(attention_bthd(heads[0], heads[1], heads[2]), weights)).backward();

  std::vector<Tensor> separate;
  for (const Tensor& t : p) separate.push_back(contiguous(t.detach()).view({B, T, H, D}).set_requires_grad(true));
  sum(mul(attention_bthd(separate[0], separate[1], separate[2]), weights)).backward();
  const Tensor joined = concat({separate[0].grad().view({B, T, C}), separate[1].grad().view({B, T, C}),
                                separate[2].grad().view({B, T, C})}, -1);
  EXPECT_EQ(fused.grad().to_host_floats(), joined.to_host_floats());
}

// A grouped-query projection [B, T, (H + 2 Hk) D], as a Llama block makes it, split into q, k and
// v of different widths: no copy on the way in, and one gradient buffer for the three on the way
// back, equal to the gradients of separate inputs.
TEST(Attention, GroupedQueryProjectionSplitIntoHeads) {
  const std::int64_t B = 2, T = 9, H = 4, Hk = 2, D = 8, C = H * D, Ck = Hk * D;
  const auto qkv = random_floats(B * T * (C + 2 * Ck), 37);
  const auto w = random_floats(B * T * C, 38);
  Tensor fused = Tensor::from_floats(qkv, {B, T, C + 2 * Ck}).set_requires_grad(true);
  const auto p = split(fused, {C, Ck, Ck}, -1);
  const std::vector<Tensor> heads{reshape(p[0], {B, T, H, D}), reshape(p[1], {B, T, Hk, D}),
                                  reshape(p[2], {B, T, Hk, D})};
  for (const Tensor& t : heads) EXPECT_EQ(t.storage(), fused.storage());
  const Tensor weights = Tensor::from_floats(w, {B, T, H, D});
  sum(mul(attention_bthd(heads[0], heads[1], heads[2]), weights)).backward();

  std::vector<Tensor> separate;
  for (std::size_t i = 0; i < 3; ++i)
    separate.push_back(contiguous(heads[i].detach()).set_requires_grad(true));
  sum(mul(attention_bthd(separate[0], separate[1], separate[2]), weights)).backward();
  const Tensor joined = concat({separate[0].grad().view({B, T, C}), separate[1].grad().view({B, T, Ck}),
                                separate[2].grad().view({B, T, Ck})}, -1);
  EXPECT_EQ(fused.grad().to_host_floats(), joined.to_host_floats());
}

// Documented tolerances (bf16/f16 inputs, same rounded values in f32): outputs and gradients
// within 2^-6 (bf16) / 2^-9 (f16) of max(1, |value|): each is rounded once, but gradients pass
// through rounded intermediate inputs (dO, O) as well.
TEST(Attention, HalfPrecisionMatchesFloat) {
  const std::int64_t B = 1, H = 2, T = 33, D = 16;
  for (DType dt : {DType::bf16, DType::f16}) {
    const double tol = dt == DType::bf16 ? 1.0 / 64 : 1.0 / 512;
    const auto q = testing::rounded_to(random_floats(B * H * T * D, 41, -1.5f, 1.5f), dt);
    const auto k = testing::rounded_to(random_floats(B * H * T * D, 42, -1.5f, 1.5f), dt);
    const auto v = testing::rounded_to(random_floats(B * H * T * D, 43), dt);
    const auto w = testing::rounded_to(random_floats(B * H * T * D, 44), dt);
    auto run = [&](DType d) {
      return testing::forward_backward(
          [](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2]); },
          {Tensor::from_floats(q, {B, H, T, D}, d), Tensor::from_floats(k, {B, H, T, D}, d),
           Tensor::from_floats(v, {B, H, T, D}, d)},
          {true, true, true}, w);
    };
    const auto half = run(dt), full = run(DType::f32);
    const std::string name = std::string("attention ") + dtype_name(dt);
    expect_close(half.output, full.output, tol, tol, name + " out");
    for (int i = 0; i < 3; ++i) expect_close(half.grads[i], full.grads[i], tol, tol, name + " grad " + std::to_string(i));
  }
}

// The fused path keeps O(B H T D) memory: at T = 2048 one [T, T] f32 score matrix would be 16 MiB,
// 128 times the 128 KiB of each of q, k, v.
TEST(Attention, MemoryDoesNotGrowWithTSquared) {
  const std::int64_t T = 2048, D = 16;
  const Tensor q = testing::random_tensor({1, 1, T, D}, 51);
  const Tensor k = testing::random_tensor({1, 1, T, D}, 52);
  const Tensor v = testing::random_tensor({1, 1, T, D}, 53);
  const Tensor w = testing::random_tensor({1, 1, T, D}, 54);
  Tensor qg = q.detach().set_requires_grad(true);
  CachingAllocator::instance().reset_peak();
  const std::size_t before = memory_stats().allocated_bytes;
  {
    const Tensor o = attention(qg, k, v);
    autograd::backward({o}, {w});
  }
  const std::size_t peak = memory_stats().peak_allocated_bytes - before;
  const std::size_t tensor_bytes = T * D * sizeof(float);  // 128 KiB
  EXPECT_LT(peak, 8 * tensor_bytes) << "peak " << peak << " bytes";
  EXPECT_LT(peak, T * T * sizeof(float) / 16);
  EXPECT_TRUE(qg.grad().defined());
}

// The inputs of the CUDA build's tensor-core kernels (bf16/f16, D = 64 and 128, rows aligned to
// 16 bytes) against the float64 reference on the same rounded values: partial tiles (T not a
// multiple of 64), several 128-query blocks, one query, more keys than queries, and a fused QKV
// projection's strided [B, T, H, D] views. The CUDA build must take the tensor-core path for each of them. Tolerances:
// the outputs are rounded once, the probabilities and dS once more before their products.
TEST(Attention, TensorCoreShapes) {
  struct Case {
    Sizes s;
    bool causal;
  };
  const Case cases[] = {{{1, 2, 64, 64, 64}, true},    {{2, 1, 100, 100, 64}, true}, {{1, 2, 37, 130, 64}, false},
                        {{1, 1, 300, 300, 64}, true},  {{1, 1, 70, 200, 64}, true},  {{1, 1, 70, 200, 128}, true},
                        {{1, 1, 1, 65, 128}, true},    {{2, 2, 129, 129, 128}, false},
                        {{1, 2, 300, 300, 128}, true}, {{1, 2, 37, 130, 128}, false},
                        // grouped-query attention: dK/dV walk the query tiles of 2, 4 or 8 heads
                        {{2, 4, 100, 100, 64, 2}, true}, {{1, 8, 70, 200, 64, 1}, true},
                        {{1, 4, 129, 129, 128, 2}, false}, {{2, 6, 65, 65, 128, 3}, true},
                        {{2, 8, 100, 100, 128, 2}, true}};
  std::uint32_t seed = 600;
  for (DType dt : {DType::bf16, DType::f16}) {
    const double tol = dt == DType::bf16 ? 1.0 / 32 : 1.0 / 256;
    for (const Case& c : cases) {
      const Sizes& s = c.s;
      const auto q = testing::rounded_to(random_floats(s.queries(), seed++, -1.5f, 1.5f), dt);
      const auto k = testing::rounded_to(random_floats(s.keys(), seed++, -1.5f, 1.5f), dt);
      const auto v = testing::rounded_to(random_floats(s.keys(), seed++), dt);
      const auto w = testing::rounded_to(random_floats(s.queries(), seed++), dt);
      const Tensor qt = Tensor::from_floats(q, {s.B, s.H, s.Tq, s.D}, dt);
      const Tensor kt = Tensor::from_floats(k, {s.B, s.kv_heads(), s.Tk, s.D}, dt);
      const Tensor vt = Tensor::from_floats(v, {s.B, s.kv_heads(), s.Tk, s.D}, dt);
#ifdef BMT_ENABLE_CUDA
      ASSERT_TRUE(kernels::attention_uses_tensor_cores(qt, kt, vt));
      ASSERT_EQ(std::string(kernels::attention_kernel_name(qt, kt, vt)), expected_tensor_core_kernel(s.D));
#else
      ASSERT_EQ(std::string(kernels::attention_kernel_name(qt, kt, vt)), "portable");
#endif
      const auto ref = attention_reference(s, q, k, v, w, c.causal, 1.0 / std::sqrt(double(s.D)));
      const auto r = testing::forward_backward(
          [&](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], c.causal); }, {qt, kt, vt},
          {true, true, true}, w);
      const std::string what = std::string(dtype_name(dt)) + " " + s.describe();
      expect_close(r.output, ref.out, tol, tol, what + " out");
      expect_close(r.grads[0], ref.dq, tol, tol, what + " dq");
      expect_close(r.grads[1], ref.dk, tol, tol, what + " dk");
      expect_close(r.grads[2], ref.dv, tol, tol, what + " dv");
    }
  }
  // GPT-2's layout: q, k, v are strided views of one [B, T, 3, H, D] projection.
  const std::int64_t B = 2, T = 80, H = 3, D = 64;
  const auto qkv = testing::rounded_to(random_floats(B * T * 3 * H * D, seed++, -1.5f, 1.5f), DType::bf16);
  const Tensor fused = Tensor::from_floats(qkv, {B, T, 3, H, D}, DType::bf16);
  const Tensor q = fused.select(2, 0), k = fused.select(2, 1), v = fused.select(2, 2);
#ifdef BMT_ENABLE_CUDA
  ASSERT_TRUE(kernels::attention_uses_tensor_cores(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)));
#endif
  const Tensor o = attention_bthd(q, k, v);
  auto bhtd = [&](const Tensor& t) { return swap_heads_and_time(t.to_host_floats(), B, T, H, D); };
  const auto ref = attention_reference({B, H, T, T, D}, bhtd(q), bhtd(k), bhtd(v), std::vector<float>(B * H * T * D),
                                       true, 1.0 / std::sqrt(double(D)));
  expect_close(swap_heads_and_time(o.to_host_floats(), B, T, H, D), ref.out, 1.0 / 32, 1.0 / 32, "fused qkv out");
}

// A negative scale reverses which score is a row's largest; the CUDA build's forward then takes
// the portable kernel (its running max assumes scale > 0), the backward the tensor-core kernels of
// the head size, and the result must not change.
void check_negative_scale(const Sizes& s) {
  const DType dt = DType::bf16;
  // Scores spread over about +-100 at every head size, so a running max taken the wrong way
  // overflows 2^x.
  const float range = 4.0f * std::sqrt(64.0f / static_cast<float>(s.D));
  const auto q = testing::rounded_to(random_floats(s.B * s.H * s.Tq * s.D, 700, -range, range), dt);
  const auto k = testing::rounded_to(random_floats(s.B * s.H * s.Tk * s.D, 701, -range, range), dt);
  const auto v = testing::rounded_to(random_floats(s.B * s.H * s.Tk * s.D, 702), dt);
  const auto w = testing::rounded_to(random_floats(s.B * s.H * s.Tq * s.D, 703), dt);
  const float scale = -1.0f;
  const auto ref = attention_reference(s, q, k, v, w, true, scale);
  const auto r = testing::forward_backward(
      [&](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], true, scale); },
      {Tensor::from_floats(q, {s.B, s.H, s.Tq, s.D}, dt), Tensor::from_floats(k, {s.B, s.H, s.Tk, s.D}, dt),
       Tensor::from_floats(v, {s.B, s.H, s.Tk, s.D}, dt)},
      {true, true, true}, w);
  const double tol = 1.0 / 32;
  const std::string what = "negative scale " + s.describe();
  expect_close(r.output, ref.out, tol, tol, what + " out");
  expect_close(r.grads[2], ref.dv, tol, tol, what + " dv");
  // Rows this peaked make dS = P (dP - D) a small difference of rounded terms: a looser bound.
  expect_close(r.grads[0], ref.dq, 4 * tol, 4 * tol, what + " dq");
  expect_close(r.grads[1], ref.dk, 4 * tol, 4 * tol, what + " dk");
}

TEST(Attention, NegativeScaleAtTensorCoreShapes) {
  for (std::int64_t D : {64, 128}) check_negative_scale({1, 2, 70, 70, D});
}

TEST(Attention, RejectsBadShapes) {
  const Tensor a = Tensor::zeros({1, 1, 4, 8});
  EXPECT_THROW(attention(Tensor::zeros({1, 1, 5, 8}), a, a), Error);  // causal with Tq > Tk
  EXPECT_THROW(attention(a, Tensor::zeros({1, 1, 4, 7}), a), Error);  // head dims differ
  EXPECT_THROW(attention(a, a, Tensor::zeros({1, 1, 4, 8}, DType::bf16)), Error);
  EXPECT_THROW(attention(Tensor::zeros({1, 4, 8}), a, a), Error);
  const Tensor big = Tensor::zeros({1, 1, 2, 512});
  EXPECT_THROW(attention(big, big, big), Error);
  // Key/value heads must divide the query heads, and k and v agree on them.
  const Tensor q4 = Tensor::zeros({1, 4, 4, 8});
  EXPECT_THROW(attention(q4, Tensor::zeros({1, 3, 4, 8}), Tensor::zeros({1, 3, 4, 8})), Error);
  EXPECT_THROW(attention(q4, Tensor::zeros({1, 2, 4, 8}), Tensor::zeros({1, 1, 4, 8})), Error);
  EXPECT_THROW(attention(q4, Tensor::zeros({1, 8, 4, 8}), Tensor::zeros({1, 8, 4, 8})), Error);
}

}  // namespace
}  // namespace bmt
