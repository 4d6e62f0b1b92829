// The tensor-parallel collectives (ops/tensor_parallel.hpp): values against every rank's inputs
// rebuilt on the host from their seeds, gradients against finite differences of the group's summed
// loss. Registered at 1, 2 and 4 ranks, plain and under tp meshes (BMT_TEST_TP_SIZE).
#include <gtest/gtest.h>

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/ops/tensor_parallel.hpp>

#include "../common/tensor_parallel_reference.hpp"

namespace {

using bmt::Tensor;
using bmt::testing::random_floats;

constexpr std::int64_t kCols = 3;

// Rank r's input: `rows` x kCols values from a seed of its own.
std::vector<float> input_of(int r, std::int64_t rows) {
  return random_floats(static_cast<std::size_t>(rows * kCols), 100u + static_cast<std::uint32_t>(r));
}
Tensor my_input(std::int64_t rows) { return Tensor::from_floats(input_of(bmt::tp_rank(), rows), {rows, kCols}); }

// The sum over the group's ranks of their inputs.
std::vector<float> group_sum(std::int64_t rows) {
  std::vector<float> sum(static_cast<std::size_t>(rows * kCols), 0.0f);
  for (int r = 0; r < bmt::tp_size(); ++r) {
    const auto x = input_of(r, rows);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
  }
  return sum;
}

TEST(TensorParallel, GatherTokensConcatenatesTheRanksRowsInRankOrder) {
  std::vector<float> want;
  for (int r = 0; r < bmt::tp_size(); ++r) {
    const auto x = input_of(r, 2);
    want.insert(want.end(), x.begin(), x.end());
  }
  const Tensor y = bmt::gather_tokens(my_input(2));
  EXPECT_EQ(y.shape(), (bmt::Shape{2 * bmt::tp_size(), kCols}));
  EXPECT_EQ(y.to_host_floats(), want);
}

TEST(TensorParallel, ScatterTokensGivesThisRanksRowsOfTheSum) {
  const std::int64_t rows = 2 * bmt::tp_size();
  const Tensor y = bmt::scatter_tokens(my_input(rows));
  EXPECT_EQ(y.shape(), (bmt::Shape{2, kCols}));
  bmt_test::expect_close(y.to_host_floats(), bmt_test::my_rows(group_sum(rows), rows, kCols), 1e-6, "scatter_tokens");
}

TEST(TensorParallel, ReduceTpSumsAndCopyTpPassesTheValueThrough) {
  bmt_test::expect_close(bmt::reduce_tp(my_input(3)).to_host_floats(), group_sum(3), 1e-6, "reduce_tp");
  EXPECT_EQ(bmt::copy_tp(my_input(3)).to_host_floats(), input_of(bmt::tp_rank(), 3));
}

TEST(TensorParallel, GradientsMatchFiniteDifferencesOfTheGroupsLoss) {
  const bmt::testing::GradcheckOptions opt{1e-2f, 1e-2f, 1e-3f, {}};
  // Each op on x * x, so that the gradient depends on the input. The ops whose outputs each rank
  // uses in its own way get output gradients of each rank's own; reduce_tp's sum is replicated;
  // copy_tp's input is one value every rank holds.
  auto squared = [](Tensor (*op)(const Tensor&, bmt::Communicator*)) {
    return [op](const std::vector<Tensor>& in) { return op(bmt::mul(in[0], in[0]), nullptr); };
  };
  SCOPED_TRACE("tp " + std::to_string(bmt::tp_size()));
  {
    SCOPED_TRACE("gather_tokens");
    bmt_test::tp_gradcheck(squared(bmt::gather_tokens), {my_input(2)}, opt);
  }
  {
    SCOPED_TRACE("scatter_tokens");
    bmt_test::tp_gradcheck(squared(bmt::scatter_tokens), {my_input(2 * bmt::tp_size())}, opt);
  }
  {
    SCOPED_TRACE("copy_tp");
    bmt_test::tp_gradcheck(squared(bmt::copy_tp), {Tensor::from_floats(input_of(0, 2), {2, kCols})}, opt,
                           {/*replicated_output=*/false, /*shared_inputs=*/true});
  }
  {
    SCOPED_TRACE("reduce_tp");
    bmt_test::tp_gradcheck(squared(bmt::reduce_tp), {my_input(2)}, opt, {/*replicated_output=*/true, /*shared_inputs=*/false});
  }
}

// copy_tp's gradient is the group's sum: a rank's own gradient alone would be a 1/tp share of it.
TEST(TensorParallel, CopyTpGradientIsTheSumOverTheGroup) {
  Tensor x = my_input(2).detach();
  x.set_requires_grad(true);
  const Tensor y = bmt::copy_tp(x);
  bmt::autograd::backward({y}, {Tensor::from_floats(input_of(bmt::tp_rank() + 50, 2), {2, kCols})});
  std::vector<float> want(static_cast<std::size_t>(2 * kCols), 0.0f);
  for (int r = 0; r < bmt::tp_size(); ++r) {
    const auto g = input_of(r + 50, 2);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += g[i];
  }
  bmt_test::expect_close(x.grad().to_host_floats(), want, 1e-6, "copy_tp gradient");
}

TEST(TensorParallel, AGroupOfOneIsTheIdentityWithNoCopy) {
  if (bmt::tp_size() != 1) GTEST_SKIP() << "tp " << bmt::tp_size();
  const Tensor x = my_input(3);
  EXPECT_EQ(bmt::gather_tokens(x).impl(), x.impl());
  EXPECT_EQ(bmt::scatter_tokens(x).impl(), x.impl());
  EXPECT_EQ(bmt::reduce_tp(x).impl(), x.impl());
  EXPECT_EQ(bmt::copy_tp(x).impl(), x.impl());
}

TEST(TensorParallel, RowsThatDoNotDivideAreRefused) {
  if (bmt::tp_size() == 1) GTEST_SKIP() << "every row count divides by 1";
  const std::int64_t rows = 2 * bmt::tp_size() + 1;
  try {
    bmt::scatter_tokens(my_input(rows));
    FAIL() << "expected an error";
  } catch (const bmt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected rows divisible by tp " + std::to_string(bmt::tp_size()) +
                                         ", found " + std::to_string(rows)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
