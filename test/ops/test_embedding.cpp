// Embedding: lookup against the table, scatter-add gradients with repeated ids against a float64
// reference, finite differences, 16-bit weights, and out-of-range ids.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "bmtrain/kernels/index_check.hpp"
#include "bmtrain/ops/embedding.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/gradcheck.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

using testing::expect_close;
using testing::random_floats;

std::vector<std::int64_t> random_ids(std::int64_t n, std::int64_t V, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> d(0, V - 1);
  std::vector<std::int64_t> ids(n);
  for (auto& i : ids) i = d(gen);
  return ids;
}

TEST(Embedding, LookupCopiesRows) {
  std::uint32_t seed = 1;
  for (const Shape& ids_shape : std::vector<Shape>{{7}, {2, 5}, {3, 1, 4}, {1}}) {
    for (std::int64_t C : {1, 8, 33}) {
      for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
        for (DType it : {DType::i32, DType::i64}) {
          const std::int64_t V = 17;
          const auto table = testing::rounded_to(random_floats(V * C, seed++), dt);
          const auto ids = random_ids(numel_of(ids_shape), V, seed++);
          const Tensor y = embedding(Tensor::from_ints(ids, ids_shape, it), Tensor::from_floats(table, {V, C}, dt));
          Shape expected_shape = ids_shape;
          expected_shape.push_back(C);
          EXPECT_EQ(y.shape(), expected_shape);
          EXPECT_EQ(y.dtype(), dt);
          std::vector<float> ref;
          for (auto id : ids) ref.insert(ref.end(), table.begin() + id * C, table.begin() + (id + 1) * C);
          EXPECT_EQ(y.to_host_floats(), ref) << to_string(ids_shape) << " C=" << C << " " << dtype_name(dt);
        }
      }
    }
  }
}

// Many repeats of few ids: the gradient rows are sums over every occurrence.
TEST(Embedding, GradientScatterAddsRepeatedIds) {
  const std::int64_t V = 5, C = 7, N = 200;
  const auto ids = random_ids(N, V - 1, 2);  // id V-1 never occurs: its gradient row must be zero
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const auto dy = testing::rounded_to(random_floats(N * C, 3), dt);
    std::vector<double> ref(V * C, 0.0);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < C; ++c) ref[ids[n] * C + c] += dy[n * C + c];
    const auto r = testing::forward_backward(
        [](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); },
        {Tensor::from_ints(ids, {N}), Tensor::from_floats(random_floats(V * C, 4), {V, C}, dt)}, {false, true}, dy);
    // Summed in f32, rounded once to the weight's dtype: within half an ulp of the exact sum.
    const double rel = dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
    expect_close(r.grads[1], ref, 1e-5, rel, std::string("dweight ") + dtype_name(dt));
    for (std::int64_t c = 0; c < C; ++c) EXPECT_EQ(r.grads[1][(V - 1) * C + c], 0.0f);
  }
}

TEST(Embedding, GradientsMatchFiniteDifferences) {
  const Tensor ids = Tensor::from_ints({3, 0, 3, 1, 3, 2}, {2, 3}, DType::i32);
  testing::gradcheck([](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); },
                     {ids, testing::random_tensor({4, 5}, 5)});
}

TEST(Embedding, RejectsOutOfRangeIds) {
  // On by default on the host build; the CUDA build turns it on when asked.
  const bool was = index_validation();
  set_index_validation(true);
  struct Restore { bool on; ~Restore() { set_index_validation(on); } } restore{was};
  const Tensor w = testing::random_tensor({6, 4}, 6);
  try {
    embedding(Tensor::from_ints({0, 5, 6, 2}, {4}), w);
    FAIL() << "expected an error for id 6 with 6 rows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("found 6 at position 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(embedding(Tensor::from_ints({-1}, {1}), w), Error);
  EXPECT_THROW(embedding(Tensor::from_floats({1.0f}, {1}), w), Error);
  EXPECT_THROW(embedding(Tensor::from_ints({1}, {1}), Tensor::zeros({6})), Error);
}

TEST(Embedding, OutOfRangeIdsWithoutValidationGiveZeroRows) {
  set_index_validation(false);
  const auto table = random_floats(3 * 2, 7);
  const Tensor y = embedding(Tensor::from_ints({1, 9}, {2}), Tensor::from_floats(table, {3, 2}));
  set_index_validation(true);
  EXPECT_EQ(y.to_host_floats(), (std::vector<float>{table[2], table[3], 0.0f, 0.0f}));
}

}  // namespace
}  // namespace bmt
