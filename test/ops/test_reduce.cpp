// Reductions: sums and means against float64, f32 accumulation for 16-bit data, gradients, and
// the multi-tensor inf/nan and global-norm checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/reduce.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/ops/ops.hpp"
#include "common/gradcheck.hpp"
#include "common/host_reference.hpp"

namespace bmt {
namespace {

using testing::expect_near_all;
using testing::gradcheck;
using testing::random_floats;
using testing::random_tensor;

double host_sum(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s;
}

TEST(Reduce, SumAndMeanOfAllElements) {
  for (const Shape& shape : std::vector<Shape>{{1}, {3}, {17, 33}, {2, 3, 5}, {1000}}) {
    const auto v = random_floats(static_cast<std::size_t>(numel_of(shape)), 1);
    const Tensor x = Tensor::from_floats(v, shape);
    const Tensor s = sum(x), m = mean(x);
    EXPECT_EQ(s.shape(), Shape{});
    EXPECT_EQ(s.numel(), 1);
    EXPECT_EQ(s.dtype(), DType::f32);
    expect_near_all(s.to_host_floats(), {host_sum(v)}, 1e-5, 1e-5, "sum " + to_string(shape));
    expect_near_all(m.to_host_floats(), {host_sum(v) / v.size()}, 1e-6, 1e-5, "mean " + to_string(shape));
  }
  expect_near_all(sum(Tensor::zeros({0})).to_host_floats(), {0.0}, 0, 0, "sum of nothing");
}

TEST(Reduce, SumAndMeanOverEachDimension) {
  const Shape shape{3, 17, 5};
  const auto v = random_floats(3 * 17 * 5, 2);
  const Tensor x = Tensor::from_floats(v, shape);
  for (std::int64_t d = -3; d < 3; ++d) {
    const std::int64_t dim = d < 0 ? d + 3 : d;
    for (bool keepdim : {false, true}) {
      Shape out = shape;
      if (keepdim) out[dim] = 1;
      else out.erase(out.begin() + dim);
      std::vector<double> ref(static_cast<std::size_t>(numel_of(out)), 0.0);
      for (std::int64_t i = 0; i < 3; ++i)
        for (std::int64_t j = 0; j < 17; ++j)
          for (std::int64_t k = 0; k < 5; ++k) {
            const std::int64_t idx[3] = {i, j, k};
            std::int64_t o = 0;
            for (int a = 0; a < 3; ++a)
              if (a != dim) o = o * shape[a] + idx[a];
            ref[o] += v[(i * 17 + j) * 5 + k];
          }
      const std::string what = "dim " + std::to_string(d) + (keepdim ? " keepdim" : "");
      const Tensor s = sum(x, d, keepdim);
      EXPECT_EQ(s.shape(), out) << what;
      expect_near_all(s.to_host_floats(), ref, 1e-5, 1e-5, "sum " + what);
      for (auto& r : ref) r /= shape[dim];
      expect_near_all(mean(x, d, keepdim).to_host_floats(), ref, 1e-6, 1e-5, "mean " + what);
    }
  }
}

// Long columns (a bias gradient's shape) are summed in chunks of rows: odd lengths, several outer
// blocks, and the gradient flowing back.
TEST(Reduce, LongColumnSums) {
  for (const Shape& shape : std::vector<Shape>{{1000, 3}, {2, 777, 5}, {513, 1}, {4099, 17}}) {
    const auto v = random_floats(static_cast<std::size_t>(numel_of(shape)), 4);
    const std::int64_t outer = shape.size() == 3 ? shape[0] : 1, n = shape[shape.size() - 2], inner = shape.back();
    std::vector<double> ref(static_cast<std::size_t>(outer * inner), 0.0);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t i = 0; i < inner; ++i) ref[o * inner + i] += v[(o * n + j) * inner + i];
    const std::int64_t dim = static_cast<std::int64_t>(shape.size()) - 2;
    expect_near_all(sum(Tensor::from_floats(v, shape), dim).to_host_floats(), ref, 1e-4, 1e-5,
                    "sum over dim " + std::to_string(dim) + " of " + to_string(shape));
    const Tensor h = Tensor::from_floats(v, shape, DType::bf16);
    const auto hv = h.to_host_floats();
    std::vector<double> href(ref.size(), 0.0);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t i = 0; i < inner; ++i) href[o * inner + i] += hv[(o * n + j) * inner + i];
    expect_near_all(sum(h, dim).to_host_floats(), href, 1e-3, testing::roundoff(DType::bf16),
                    "bf16 sum over dim " + std::to_string(dim) + " of " + to_string(shape));
  }
  Tensor bias = random_tensor({7}, 5).set_requires_grad(true);
  sum(add(Tensor::zeros({600, 7}), bias)).backward();
  for (float g : bias.grad().to_host_floats()) EXPECT_EQ(g, 600.0f);
}

TEST(Reduce, SixteenBitDataAccumulatesInF32) {
  // 4096 ones: a bf16 running sum would stall at 256, an f16 one at 2048.
  for (DType dt : {DType::bf16, DType::f16}) {
    const Tensor x = full({4096}, 1.0f, dt);
    EXPECT_EQ(sum(x).dtype(), dt);
    EXPECT_EQ(sum(x).to_host_floats()[0], 4096.0f) << dtype_name(dt);
    EXPECT_EQ(sum(full({2, 4096}, 1.0f, dt), 1).to_host_floats(), (std::vector<float>{4096.0f, 4096.0f}));
    EXPECT_EQ(sum(full({4096, 2}, 1.0f, dt), 0).to_host_floats(), (std::vector<float>{4096.0f, 4096.0f}));
    EXPECT_FLOAT_EQ(mean(full({4096}, 0.5f, dt)).to_host_floats()[0], 0.5f);
  }
}

// A bias gradient put straight into a gradient buffer: added, earlier values plus the column sums,
// or written over a buffer holding NaN (one that holds no values yet), for short columns (one
// thread each) and long ones (row chunks), into f32 from 16-bit data without a 16-bit rounding,
// and into a buffer of the data's own dtype. Widths that are a multiple of 16 bytes take the CUDA
// build's 16-byte column kernel (264: a block of 256 bf16 columns and a part of one; 1600 over 70
// rows: one chunk); the others its portable one. No rows: written means zeros.
TEST(Reduce, ColumnSumsIntoAGradientBuffer) {
  std::uint32_t seed = 40;
  for (const Shape& shape : std::vector<Shape>{{5, 3}, {4099, 17}, {300, 1}, {5000, 264}, {70, 1600}})
    for (DType dt : {DType::f32, DType::bf16}) {
      const std::int64_t rows = shape[0], cols = shape[1];
      const Tensor x = Tensor::from_floats(random_floats(static_cast<std::size_t>(rows * cols), seed++), shape, dt);
      const auto xv = x.to_host_floats();
      const auto earlier = random_floats(static_cast<std::size_t>(cols), seed++);
      std::vector<double> ref(earlier.begin(), earlier.end());
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) ref[c] += xv[r * cols + c];
      const std::string what = std::string(dtype_name(dt)) + " " + to_string(shape);
      Tensor into_f32 = Tensor::from_floats(earlier, {cols});
      kernels::column_sums(x, into_f32, true);
      expect_near_all(into_f32.to_host_floats(), ref, 1e-4, 1e-5, what + " into f32");
      std::vector<double> sums(ref);
      for (std::int64_t c = 0; c < cols; ++c) sums[c] -= earlier[c];
      Tensor over_f32 = full({cols}, std::nanf(""));
      kernels::column_sums(x, over_f32, false);
      expect_near_all(over_f32.to_host_floats(), sums, 1e-4, 1e-5, what + " over f32");
      Tensor over_own = full({cols}, std::nanf(""), dt);
      kernels::column_sums(x, over_own, false);
      expect_near_all(over_own.to_host_floats(), sums, 1e-4, testing::roundoff(dt), what + " over " + dtype_name(dt));
      Tensor into_own = Tensor::from_floats(earlier, {cols}, dt);
      const auto own_earlier = into_own.to_host_floats();
      std::vector<double> own_ref(own_earlier.begin(), own_earlier.end());
      for (std::int64_t c = 0; c < cols; ++c) own_ref[c] += ref[c] - earlier[c];
      kernels::column_sums(x, into_own, true);
      expect_near_all(into_own.to_host_floats(), own_ref, 1e-4, testing::roundoff(dt), what + " into " + dtype_name(dt));
    }
  const Tensor x = random_tensor({5000, 264}, seed, -1.0f, 1.0f, DType::bf16);
  Tensor once = Tensor::zeros({264}), again = Tensor::zeros({264});
  kernels::column_sums(x, once, true);
  kernels::column_sums(x, again, true);
  EXPECT_EQ(again.to_host_floats(), once.to_host_floats()) << "a fixed summation order";
  Tensor none = full({264}, std::nanf(""));
  kernels::column_sums(Tensor::zeros({0, 264}, DType::bf16), none, false);
  EXPECT_EQ(none.to_host_floats(), std::vector<float>(264, 0.0f)) << "no rows, written";
  EXPECT_THAT([] { kernels::column_sums(Tensor::zeros({4, 3}), Tensor::zeros({4}), true); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected a contiguous [3] output")));
  EXPECT_THAT([] { kernels::column_sums(Tensor::zeros({4, 3}), Tensor::zeros({3}, DType::bf16), false); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("output in f32, found [3] in bf16")));
  EXPECT_THAT([] { kernels::column_sums(Tensor::zeros({12}), Tensor::zeros({12}), true); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("expected x of shape [rows, cols], found [12]")));
}

TEST(Reduce, Gradients) {
  const Tensor x = random_tensor({3, 4, 5}, 3);
  gradcheck([](const std::vector<Tensor>& in) { return sum(in[0]); }, {x});
  gradcheck([](const std::vector<Tensor>& in) { return mean(in[0]); }, {x});
  for (std::int64_t d : {0, 1, 2, -1})
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE("dim " + std::to_string(d));
      gradcheck([=](const std::vector<Tensor>& in) { return sum(in[0], d, keepdim); }, {x});
      gradcheck([=](const std::vector<Tensor>& in) { return mean(in[0], d, keepdim); }, {x});
    }
  // Through a transposed (non-contiguous) input.
  gradcheck([](const std::vector<Tensor>& in) { return sum(transpose(in[0], 0, 2), 1); }, {x});
}

TEST(Reduce, HasInfNanAcrossManyTensorsAndDtypes) {
  std::vector<Tensor> tensors;
  for (int i = 0; i < 40; ++i) {  // more than one launch's table of tensors per dtype
    const DType dt = i % 3 == 0 ? DType::f32 : i % 3 == 1 ? DType::bf16 : DType::f16;
    tensors.push_back(random_tensor({i % 5 + 1, 7}, 100 + i, -100.0f, 100.0f, dt));
  }
  tensors.push_back(random_tensor({4, 6}, 99).transpose(0, 1));  // strided
  tensors.push_back(Tensor::zeros({0}));
  EXPECT_FALSE(has_inf_nan(tensors));
  EXPECT_EQ(inf_nan_flag(tensors).dtype(), DType::i32);

  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, -inf, nan}) {
    for (std::size_t which : {std::size_t(0), std::size_t(20), std::size_t(38), tensors.size() - 2}) {
      auto poisoned = tensors;
      const Tensor& t = tensors[which];
      auto v = t.to_host_floats();
      v[v.size() - 1] = bad;
      poisoned[which] = Tensor::from_floats(v, t.shape(), t.dtype());
      EXPECT_TRUE(has_inf_nan(poisoned)) << "value " << bad << " in tensor " << which;
    }
  }
  // A finite f32 value beyond f16's range becomes inf once stored as f16.
  EXPECT_FALSE(has_inf_nan({Tensor::from_floats({70000.0f}, {1})}));
  EXPECT_TRUE(has_inf_nan({Tensor::from_floats({70000.0f}, {1}, DType::f16)}));
  EXPECT_FALSE(has_inf_nan({}));
  EXPECT_THROW(has_inf_nan({Tensor::zeros({2}, DType::i64)}), Error);
}

TEST(Reduce, GlobalL2NormMatchesFloat64) {
  std::vector<Tensor> tensors;
  double squares = 0;
  for (int i = 0; i < 70; ++i) {
    const DType dt = i % 3 == 0 ? DType::f32 : i % 3 == 1 ? DType::bf16 : DType::f16;
    const Tensor t = random_tensor({i % 7 + 1, 5}, 200 + i, -2.0f, 2.0f, dt);
    for (float x : t.to_host_floats()) squares += static_cast<double>(x) * x;
    tensors.push_back(t);
  }
  const Tensor norm = global_l2_norm(tensors);
  EXPECT_EQ(norm.shape(), Shape{});
  EXPECT_EQ(norm.dtype(), DType::f32);
  // f64 accumulation: only the final roundings to f32 and of the square root remain.
  EXPECT_NEAR(norm.to_host_floats()[0], std::sqrt(squares), 2e-7 * std::sqrt(squares));
  EXPECT_NEAR(global_sum_squares(tensors).to_host_floats()[0], squares, 6e-8 * squares);
  EXPECT_EQ(global_l2_norm({}).to_host_floats()[0], 0.0f);
  EXPECT_EQ(global_sum_squares({}).to_host_floats()[0], 0.0f);
  EXPECT_FLOAT_EQ(global_l2_norm({Tensor::from_floats({3, 4}, {2}).view({2, 1}).transpose(0, 1)}).to_host_floats()[0],
                  5.0f);
}

// Tensors spanning many blocks of the CUDA kernel (8192 elements each), one whose length is no
// multiple of the 16-byte pack and one that starts off the 16-byte alignment: the same norm as in
// float64 within f32 summation error, and the same bits on a second run.
TEST(Reduce, GlobalL2NormOfLargeTensorsMatchesFloat64AndRepeats) {
  const Tensor offset = random_tensor({50001}, 301, -1.0f, 1.0f, DType::bf16);
  const std::vector<Tensor> tensors = {random_tensor({100003}, 300, -2.0f, 2.0f),
                                       offset.slice(0, 1, 50001),  // 2 bytes past an aligned start
                                       random_tensor({3, 8192}, 302, -1.0f, 1.0f)};
  double squares = 0;
  for (const Tensor& t : tensors)
    for (float x : t.to_host_floats()) squares += static_cast<double>(x) * x;
  const float once = global_l2_norm(tensors).to_host_floats()[0];
  EXPECT_NEAR(once, std::sqrt(squares), 2e-7 * std::sqrt(squares));  // a missed block moves it ~1%
  EXPECT_EQ(global_l2_norm(tensors).to_host_floats()[0], once) << "a fixed summation order";
}

// A gradient norm over ZeRO shards: the sum of squares of a large tensor of small values (as a
// model's gradient: many millions of squares, each far below the running total's last bit in f32)
// equals the sum over its pieces, however it is cut, to within one rounding a piece. With an f32
// running sum the whole fell 1.6% short of the four quarters' total.
TEST(Reduce, SumOfSquaresDoesNotDependOnHowTheElementsAreSplit) {
  const std::int64_t n = 1 << 22;
  const Tensor whole = random_tensor({n}, 401, -1e-2f, 1e-2f);
  double squares = 0;
  for (float x : whole.to_host_floats()) squares += static_cast<double>(x) * x;
  const float all = global_sum_squares({whole}).to_host_floats()[0];
  EXPECT_NEAR(all, squares, 6e-8 * squares) << "within one f32 rounding of the exact sum";
  for (int pieces : {2, 3, 4, 7}) {
    float total = 0;  // as the ranks' sums are added
    for (int k = 0; k < pieces; ++k) {
      const Tensor piece = whole.slice(0, n * k / pieces, n * (k + 1) / pieces);
      total += global_sum_squares({piece}).to_host_floats()[0];
    }
    EXPECT_NEAR(total, squares, pieces * 6e-8 * squares) << pieces << " pieces";
  }
  // The same with the elements in many small tensors of mixed dtypes (one table per dtype).
  std::vector<Tensor> parts;
  double part_squares = 0;
  for (int i = 0; i < 90; ++i) {
    const DType dt = i % 3 == 0 ? DType::f32 : i % 3 == 1 ? DType::bf16 : DType::f16;
    parts.push_back(random_tensor({20000 + i}, 500 + i, -1e-2f, 1e-2f, dt));
    for (float x : parts.back().to_host_floats()) part_squares += static_cast<double>(x) * x;
  }
  EXPECT_NEAR(global_sum_squares(parts).to_host_floats()[0], part_squares, 6e-8 * part_squares);
}

TEST(Reduce, Misuse) {
  EXPECT_THAT([] { sum(Tensor::zeros({2, 3}), 2); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("[2, 3]")));
  EXPECT_THROW(mean(Tensor::zeros({2}, DType::i32)), Error);
}

}  // namespace
}  // namespace bmt
