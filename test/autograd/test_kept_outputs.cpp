// Kept outputs (selective recompute): attention or residual_add recorded into a KeptOutputs list
// and replayed returns what the forward computed without running again, with the same gradients
// (a replayed residual_add leaves the GEMM it adds unrun under outputs on demand); a list keeps
// only the ops it names; a replay that differs from the recording (other shapes, fewer or more
// calls) is an error that says so.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/autograd/kept_outputs.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt {
namespace {

using autograd::KeptOutputs;
using autograd::KeptOutputsScope;

constexpr std::int64_t B = 2, T = 5, H = 3, D = 4;

Tensor input(int seed, std::int64_t t = T) {
  std::vector<float> x(static_cast<std::size_t>(B * t * H * D));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i) + static_cast<float>(seed));
  return Tensor::from_floats(x, {B, t, H, D});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KeptOutputs, ReplayedAttentionReturnsTheRecordedValuesWithoutRunning) {
  const Tensor q = input(1), k = input(2), v = input(3);
  KeptOutputs kept({"attention"});
  Tensor recorded;
  {
    KeptOutputsScope record(kept, KeptOutputsScope::Mode::record);
    recorded = attention_bthd(q, k, v, true);
  }
  EXPECT_EQ(KeptOutputs::active("attention"), nullptr);
  EXPECT_EQ(kept.bytes(), static_cast<std::size_t>(B * T * H * D * 4 + B * H * T * 4));  // output and lse, f32
  const std::vector<float> values = recorded.to_host_floats();
  // Overwrite the kept output: a replay that ran the kernel would compute the values again.
  fill_(recorded, 7.0f);
  Tensor replayed;
  {
    KeptOutputsScope replay(kept, KeptOutputsScope::Mode::replay);
    replayed = attention_bthd(q, k, v, true);
  }
  kept.check_all_taken();
  EXPECT_EQ(replayed.to_host_floats(), std::vector<float>(values.size(), 7.0f));
}

TEST(KeptOutputs, ReplayedAttentionHasTheSameGradients) {
  std::vector<std::vector<float>> grads[2];
  KeptOutputs kept({"attention"});
  {
    KeptOutputsScope record(kept, KeptOutputsScope::Mode::record);
    NoGradGuard forward_only;  // as a checkpointed block's forward runs
    attention_bthd(input(1), input(2), input(3), true);
  }
  for (int replayed = 0; replayed < 2; ++replayed) {
    Tensor q = input(1).set_requires_grad(true), k = input(2).set_requires_grad(true),
           v = input(3).set_requires_grad(true);
    Tensor out;
    {
      std::optional<KeptOutputsScope> replay;
      if (replayed) replay.emplace(kept, KeptOutputsScope::Mode::replay);
      out = attention_bthd(q, k, v, true);
    }
    out.backward(input(4));
    for (const Tensor* t : {&q, &k, &v}) grads[replayed].push_back(t->grad().to_host_floats());
  }
  kept.check_all_taken();
  EXPECT_EQ(grads[1], grads[0]);
}

TEST(KeptOutputs, AReplayThatDiffersFromTheRecordingIsAnError) {
  KeptOutputs kept({"attention"});
  {
    KeptOutputsScope record(kept, KeptOutputsScope::Mode::record);
    attention_bthd(input(1), input(2), input(3), true);
  }
  {  // other shapes
    KeptOutputsScope replay(kept, KeptOutputsScope::Mode::replay);
    const std::string e = error_of([&] { attention_bthd(input(1, 6), input(2, 6), input(3, 6), true); });
    EXPECT_NE(e.find("attention: the recompute's output 0 is f32 [2, 6, 3, 4], the forward kept f32 [2, 5, 3, 4]"),
              std::string::npos)
        << e;
  }
  {  // more calls
    KeptOutputsScope replay(kept, KeptOutputsScope::Mode::replay);
    attention_bthd(input(1), input(2), input(3), true);
    const std::string e = error_of([&] { attention_bthd(input(1), input(2), input(3), true); });
    EXPECT_NE(e.find("attention: the recompute calls it more often than the forward did (call 2, 1 kept)"),
              std::string::npos)
        << e;
  }
  {  // fewer calls
    KeptOutputsScope replay(kept, KeptOutputsScope::Mode::replay);
  }
  const std::string e = error_of([&] { kept.check_all_taken(); });
  EXPECT_NE(e.find("the recompute took back 0 of the 1 op calls the forward kept"), std::string::npos) << e;
}

Tensor weight(int seed) {
  std::vector<float> w(static_cast<std::size_t>(H * D * H * D));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.3f * std::cos(1.3f * static_cast<float>(i) + static_cast<float>(seed));
  return Tensor::from_floats(w, {H * D, H * D});
}

Tensor bias(int seed) {
  std::vector<float> b(static_cast<std::size_t>(H * D));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * std::sin(2.1f * static_cast<float>(i) + static_cast<float>(seed));
  return Tensor::from_floats(b, {H * D});
}

// x + linear(attention(...)) + bias, as a transformer block's attention branch ends.
Tensor attention_branch(const Tensor& x, const Tensor& w, const Tensor& b) {
  const Tensor y = attention_bthd(reshape(x, {B, T, H, D}), reshape(x, {B, T, H, D}), reshape(x, {B, T, H, D}), true);
  return residual_add(x, linear(reshape(y, {B, T, H * D}), w), b);
}

TEST(KeptOutputs, ReplayedResidualAddLeavesTheGemmItAddsUnrun) {
  const Tensor x = reshape(input(1), {B, T, H * D}), w = weight(2), b = bias(3);
  KeptOutputs kept({"residual_add"});
  Tensor recorded;
  {
    KeptOutputsScope record(kept, KeptOutputsScope::Mode::record);
    EXPECT_EQ(KeptOutputs::active("attention"), nullptr) << "the list keeps residual_add only";
    recorded = attention_branch(x, w, b);
  }
  EXPECT_EQ(kept.bytes(), static_cast<std::size_t>(B * T * H * D * 4));
  const std::vector<float> values = recorded.to_host_floats();
  fill_(recorded, 7.0f);  // a replay that added again would give the sum, not 7
  Tensor replayed, projection;
  {
    autograd::OutputsOnDemandGuard on_demand;  // as a block's recompute runs
    KeptOutputsScope replay(kept, KeptOutputsScope::Mode::replay);
    const Tensor y = attention_bthd(reshape(x, {B, T, H, D}), reshape(x, {B, T, H, D}), reshape(x, {B, T, H, D}), true);
    projection = linear(reshape(y, {B, T, H * D}), w);
    replayed = residual_add(x, projection, b);
  }
  kept.check_all_taken();
  EXPECT_EQ(replayed.to_host_floats(), std::vector<float>(values.size(), 7.0f));
  EXPECT_TRUE(projection.storage()->has_pending_write()) << "nothing read the projection: its GEMM never ran";
  // Without the kept list the same replay writes the projection (the sum reads it).
  autograd::OutputsOnDemandGuard on_demand;
  const Tensor y = attention_bthd(reshape(x, {B, T, H, D}), reshape(x, {B, T, H, D}), reshape(x, {B, T, H, D}), true);
  projection = linear(reshape(y, {B, T, H * D}), w);
  const std::vector<float> again = residual_add(x, projection, b).to_host_floats();
  EXPECT_FALSE(projection.storage()->has_pending_write());
  EXPECT_EQ(again, values);
}

TEST(KeptOutputs, ReplayedResidualAddAndAttentionHaveTheSameGradients) {
  std::vector<std::vector<float>> grads[2];
  KeptOutputs kept({"attention", "residual_add"});
  {
    KeptOutputsScope record(kept, KeptOutputsScope::Mode::record);
    NoGradGuard forward_only;
    attention_branch(reshape(input(1), {B, T, H * D}), weight(2), bias(3));
  }
  for (int replayed = 0; replayed < 2; ++replayed) {
    Tensor x = reshape(input(1), {B, T, H * D}).detach().set_requires_grad(true);
    Tensor w = weight(2).set_requires_grad(true), b = bias(3).set_requires_grad(true);
    Tensor out;
    {
      autograd::OutputsOnDemandGuard on_demand;
      std::optional<KeptOutputsScope> replay;
      if (replayed) replay.emplace(kept, KeptOutputsScope::Mode::replay);
      out = attention_branch(x, w, b);
    }
    out.backward(reshape(input(4), {B, T, H * D}));
    for (const Tensor* t : {&x, &w, &b}) grads[replayed].push_back(t->grad().to_host_floats());
  }
  kept.check_all_taken();
  ASSERT_EQ(grads[0].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(grads[1][i], grads[0][i]) << "input " << i;
    EXPECT_GT(std::abs(grads[0][i][1]) + std::abs(grads[0][i][5]), 0.0f) << "input " << i << " got a gradient";
  }
}

}  // namespace
}  // namespace bmt
