// Kept outputs (selective recompute): attention recorded into a KeptOutputs list and replayed
// returns what the forward computed without running again, with the same gradients; a replay
// that differs from the recording (other shapes, fewer or more calls) is an error that says so.
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
  KeptOutputs kept;
  Tensor recorded;
  {
    KeptOutputsScope record(kept, KeptOutputsScope::Mode::record);
    recorded = attention_bthd(q, k, v, true);
  }
  EXPECT_EQ(KeptOutputs::active(), nullptr);
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
  KeptOutputs kept;
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
  KeptOutputs kept;
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

}  // namespace
}  // namespace bmt
