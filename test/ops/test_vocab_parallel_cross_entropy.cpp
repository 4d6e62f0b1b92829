// The vocabulary-parallel fused linear cross-entropy (ops/vocab_parallel_cross_entropy.hpp) against
// linear_cross_entropy on the whole head: every rank builds the whole head, hidden rows and targets
// from one seed and takes its part; the loss must be the whole op's and the gradients its parts.
// Gradients also against finite differences of the group's loss. Registered at 1, 2 and 4 ranks,
// plain and under tp meshes (BMT_TEST_TP_SIZE).
#include <gtest/gtest.h>

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/kernels/index_check.hpp>
#include <bmtrain/ops/vocab_parallel_cross_entropy.hpp>

#include "../common/tensor_parallel_reference.hpp"

namespace {

using bmt::Tensor;
using bmt::testing::random_floats;
using bmt_test::expect_close;
using bmt_test::my_rows;

constexpr std::int64_t kIgnore = -100;

struct Problem {
  std::int64_t N, C, V;
  std::vector<float> h, w;
  std::vector<std::int64_t> targets;
};

// Targets over the whole vocabulary (every rank's part), every third one ignored unless `all_ignored`.
Problem problem(bool all_ignored = false) {
  Problem p{4 * bmt::tp_size(), 5, 3 * bmt::tp_size(), {}, {}, {}};
  p.h = random_floats(static_cast<std::size_t>(p.N * p.C), 1, -2.0f, 2.0f);
  p.w = random_floats(static_cast<std::size_t>(p.V * p.C), 2, -2.0f, 2.0f);
  for (std::int64_t i = 0; i < p.N; ++i) p.targets.push_back(all_ignored || i % 3 == 1 ? kIgnore : (i * 5 + 2) % p.V);
  return p;
}

// This rank's rows of the head.
std::vector<float> my_head(const Problem& p) { return my_rows(p.w, p.V, p.C); }

Tensor leaf(const std::vector<float>& values, const bmt::Shape& shape) {
  Tensor t = Tensor::from_floats(values, shape);
  t.set_requires_grad(true);
  return t;
}

void check_against_whole(const Problem& p, std::int64_t chunk) {
  SCOPED_TRACE("chunk " + std::to_string(chunk));
  const Tensor targets = Tensor::from_ints(p.targets, {p.N});
  Tensor h_whole = leaf(p.h, {p.N, p.C}), w_whole = leaf(p.w, {p.V, p.C});
  const Tensor want = bmt::linear_cross_entropy(h_whole, w_whole, targets, chunk, kIgnore);
  bmt::autograd::backward({want});

  const int tp = bmt::tp_size();
  Tensor rows = leaf(my_rows(p.h, p.N, p.C), {p.N / tp, p.C}), head = leaf(my_head(p), {p.V / tp, p.C});
  const Tensor got = bmt::vocab_parallel_cross_entropy(bmt::gather_tokens(rows), head, targets, chunk, kIgnore);
  bmt::autograd::backward({got});

  EXPECT_NEAR(got.to_host_floats()[0], want.to_host_floats()[0], 1e-5 * (1.0 + std::abs(want.to_host_floats()[0])));
  expect_close(head.grad().to_host_floats(), my_rows(w_whole.grad().to_host_floats(), p.V, p.C), 1e-5, "weight gradient");
  expect_close(rows.grad().to_host_floats(), my_rows(h_whole.grad().to_host_floats(), p.N, p.C), 1e-5, "hidden gradient");
}

TEST(VocabParallelCrossEntropy, MatchesTheWholeHeadsLossAndGradients) {
  const Problem p = problem();
  check_against_whole(p, 3);    // chunks that do not divide the rows
  check_against_whole(p, p.N);  // one chunk
}

// In bf16 both compute the same bf16 logits (the same rows times the same head rows) and differ in
// the order of their f32 sums; gradients are rounded to bf16.
TEST(VocabParallelCrossEntropy, Bf16MatchesTheWholeHeadInBf16) {
  const Problem p = problem();
  const Tensor targets = Tensor::from_ints(p.targets, {p.N});
  auto bf16_leaf = [](const std::vector<float>& v, const bmt::Shape& shape) {
    Tensor t = Tensor::from_floats(v, shape, bmt::DType::bf16);
    t.set_requires_grad(true);
    return t;
  };
  Tensor h_whole = bf16_leaf(p.h, {p.N, p.C}), w_whole = bf16_leaf(p.w, {p.V, p.C});
  const Tensor want = bmt::linear_cross_entropy(h_whole, w_whole, targets, 3, kIgnore);
  bmt::autograd::backward({want});
  const int tp = bmt::tp_size();
  Tensor rows = bf16_leaf(my_rows(p.h, p.N, p.C), {p.N / tp, p.C}), head = bf16_leaf(my_head(p), {p.V / tp, p.C});
  const Tensor got = bmt::vocab_parallel_cross_entropy(bmt::gather_tokens(rows), head, targets, 3, kIgnore);
  bmt::autograd::backward({got});
  EXPECT_NEAR(got.to_host_floats()[0], want.to_host_floats()[0], 1e-4 * (1.0 + std::abs(want.to_host_floats()[0])));
  expect_close(head.grad().to_host_floats(), my_rows(w_whole.grad().to_host_floats(), p.V, p.C), 1e-2, "weight gradient");
  expect_close(rows.grad().to_host_floats(), my_rows(h_whole.grad().to_host_floats(), p.N, p.C), 1e-2, "hidden gradient");
}

TEST(VocabParallelCrossEntropy, EveryTargetIgnoredGivesZeroLossAndGradients) {
  const Problem p = problem(/*all_ignored=*/true);
  check_against_whole(p, 3);
  const int tp = bmt::tp_size();
  Tensor head = leaf(my_head(p), {p.V / tp, p.C});
  const Tensor loss = bmt::vocab_parallel_cross_entropy(Tensor::from_floats(p.h, {p.N, p.C}), head,
                                                        Tensor::from_ints(p.targets, {p.N}), 4, kIgnore);
  EXPECT_EQ(loss.to_host_floats()[0], 0.0f);
  bmt::autograd::backward({loss});
  for (float g : head.grad().to_host_floats()) EXPECT_EQ(g, 0.0f);
}

TEST(VocabParallelCrossEntropy, GradientsMatchFiniteDifferencesOfTheGroupsLoss) {
  const Problem p = problem();
  const Tensor targets = Tensor::from_ints(p.targets, {p.N});
  const int tp = bmt::tp_size();
  // The hidden rows and head part are each rank's own; the loss is one value every rank computes.
  bmt_test::tp_gradcheck(
      [&](const std::vector<Tensor>& in) {
        return bmt::vocab_parallel_cross_entropy(bmt::gather_tokens(in[0]), in[1], targets, 3, kIgnore);
      },
      {Tensor::from_floats(my_rows(p.h, p.N, p.C), {p.N / tp, p.C}), Tensor::from_floats(my_head(p), {p.V / tp, p.C})},
      {1e-2f, 1e-2f, 1e-4f, {}}, {/*replicated_output=*/true, /*shared_inputs=*/false});
}

TEST(VocabParallelCrossEntropy, TargetsOutsideTheWholeVocabularyAreRefused) {
  if (!bmt::index_validation()) GTEST_SKIP() << "index validation is off";
  Problem p = problem();
  p.targets[2] = p.V;  // one past the whole vocabulary; ids of the other ranks' parts are fine
  try {
    bmt::vocab_parallel_cross_entropy(Tensor::from_floats(p.h, {p.N, p.C}),
                                      Tensor::from_floats(my_head(p), {p.V / bmt::tp_size(), p.C}),
                                      Tensor::from_ints(p.targets, {p.N}), 3, kIgnore);
    FAIL() << "expected an error";
  } catch (const bmt::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[0, " + std::to_string(p.V) + ")"), std::string::npos) << what;
    EXPECT_NE(what.find("found " + std::to_string(p.V)), std::string::npos) << what;
  }
}

}  // namespace
