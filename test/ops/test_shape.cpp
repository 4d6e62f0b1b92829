// Shape ops and dtype conversion: views share storage, copies are exact, gradients flow back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/kernels/shape.hpp"
#include "bmtrain/ops/ops.hpp"
#include "common/gradcheck.hpp"
#include "common/host_reference.hpp"

namespace bmt {
namespace {

using testing::expect_near_all;
using testing::gradcheck;
using testing::random_floats;
using testing::random_tensor;

TEST(Shape, ReshapeIsAViewOfContiguousData) {
  const Tensor x = random_tensor({3, 4, 5}, 1);
  const Tensor y = reshape(x, {12, -1});
  EXPECT_EQ(y.shape(), (Shape{12, 5}));
  EXPECT_EQ(y.data(), x.data());
  EXPECT_EQ(y.to_host_floats(), x.to_host_floats());
  // A transposed input is copied into the new shape, in logical order.
  const Tensor t = x.transpose(0, 2);  // [5, 4, 3]
  const Tensor r = reshape(t, {60});
  EXPECT_NE(r.data(), x.data());
  EXPECT_EQ(r.to_host_floats(), t.to_host_floats());
  EXPECT_THAT([&] { reshape(x, {7, -1}); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("60")));
  gradcheck([](const std::vector<Tensor>& in) { return reshape(in[0], {4, 15}); }, {x});
  gradcheck([](const std::vector<Tensor>& in) { return reshape(transpose(in[0], 0, 1), {-1}); }, {x});
}

TEST(Shape, TransposeIsAView) {
  const auto v = random_floats(2 * 3 * 4, 2);
  const Tensor x = Tensor::from_floats(v, {2, 3, 4});
  const Tensor t = transpose(x, 0, -1);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.data(), x.data());
  const auto tv = t.to_host_floats();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(tv[(i * 3 + j) * 2 + k], v[(k * 3 + j) * 4 + i]);
  gradcheck([](const std::vector<Tensor>& in) { return mul(transpose(in[0], 1, 2), in[1]); },
            {x, random_tensor({2, 4, 3}, 3)});
  // The gradient handed upstream is contiguous.
  Tensor leaf = random_tensor({2, 3}, 4).set_requires_grad(true);
  Tensor h = scale(leaf, 2.0f);
  sum(mul(transpose(h, 0, 1), random_tensor({3, 2}, 5))).backward();
  EXPECT_TRUE(leaf.grad().is_contiguous());
}

TEST(Shape, SplitAndConcatAlongAnyDimension) {
  const Shape shape{3, 5, 7};
  const auto v = random_floats(3 * 5 * 7, 6);
  const Tensor x = Tensor::from_floats(v, shape);
  for (std::int64_t dim : {0, 1, 2, -1}) {
    const std::int64_t d = dim < 0 ? dim + 3 : dim;
    const std::int64_t n = shape[d];
    const std::vector<std::int64_t> sizes = {1, n - 3, 0, 2};
    const auto pieces = split(x, sizes, dim);
    ASSERT_EQ(pieces.size(), sizes.size());
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      Shape s = shape;
      s[d] = sizes[i];
      EXPECT_EQ(pieces[i].shape(), s);
      EXPECT_EQ(pieces[i].storage(), x.storage()) << "a piece is a slice of the input, not a copy";
      EXPECT_EQ(pieces[i].to_host_floats(), x.slice(d, offset, offset + sizes[i]).to_host_floats())
          << "piece " << i << " along " << dim;
      offset += sizes[i];
    }
    const Tensor joined = concat(pieces, dim);
    EXPECT_EQ(joined.shape(), shape);
    EXPECT_EQ(joined.to_host_floats(), v) << "concat along " << dim;
  }
  // Inputs of any strides, and integer tensors.
  const Tensor a = random_tensor({4, 3}, 7).transpose(0, 1), b = random_tensor({3, 2}, 8);
  const Tensor ab = concat({a, b}, 1);
  EXPECT_EQ(ab.to_host_floats(), kernels::concat({contiguous(a), b}, 1).to_host_floats());
  EXPECT_EQ(ab.slice(1, 0, 4).to_host_floats(), a.to_host_floats());
  const Tensor ids = concat({Tensor::from_ints({1, 2}, {1, 2}), Tensor::from_ints({3, 4}, {1, 2})}, 0);
  EXPECT_EQ(ids.to_host_ints(), (std::vector<std::int64_t>{1, 2, 3, 4}));
}

TEST(Shape, SplitAndConcatGradients) {
  const Tensor x = random_tensor({3, 4, 5}, 9);
  for (std::int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const std::int64_t n = x.size(dim);
    gradcheck([=](const std::vector<Tensor>& in) {
      auto p = split(in[0], {1, n - 1}, dim);
      return concat({p[1], p[0]}, dim);  // a rotation: every element moves
    }, {x});
    gradcheck([=](const std::vector<Tensor>& in) { return concat({in[0], in[1], in[0]}, dim); },
              {x, random_tensor(x.shape(), 10)});
  }
  // A piece nothing uses gets a zero gradient.
  Tensor leaf = random_tensor({2, 6}, 11).set_requires_grad(true);
  auto parts = split(leaf, {2, 4}, 1);
  sum(parts[1]).backward();
  EXPECT_EQ(leaf.grad().to_host_floats(), (std::vector<float>{0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}));
}

// A slice of a fused projection [B, T, 3C] reshapes to [B, T, H, D] as a view; a transposed tensor
// cannot merge its swapped dimensions, so reshape copies it and Tensor::view refuses.
TEST(Shape, ReshapeViewsWhatItsStridesAllow) {
  const Tensor x = random_tensor({2, 3, 12}, 21);
  const Tensor q = split(x, {4, 4, 4}, 2)[1];
  ASSERT_FALSE(q.is_contiguous());
  ASSERT_TRUE(q.can_view({2, 3, 2, 2}));
  const Tensor heads = reshape(q, {2, 3, 2, 2});
  EXPECT_EQ(heads.storage(), x.storage());
  EXPECT_EQ(heads.strides(), (Shape{36, 12, 2, 1}));
  EXPECT_EQ(heads.to_host_floats(), contiguous(q).to_host_floats());
  EXPECT_EQ(reshape(heads, {6, 4}).storage(), x.storage()) << "[B, T] and [H, D] merge back";
  EXPECT_FALSE(q.can_view({24})) << "rows 12 apart do not flatten";
  const Tensor t = x.transpose(0, 1);
  EXPECT_FALSE(t.can_view({6, 12}));
  EXPECT_THAT([&] { t.view({6, 12}); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("without a copy")));
  const Tensor flat = reshape(t, {6, 12});
  EXPECT_NE(flat.storage(), x.storage());
  EXPECT_EQ(flat.to_host_floats(), contiguous(t).to_host_floats());
  EXPECT_TRUE(t.can_view({3, 2, 3, 4})) << "splitting the last dimension keeps its chunk";
  gradcheck([](const std::vector<Tensor>& in) { return reshape(split(in[0], {3, 9}, 2)[1], {2, 3, 3, 3}); },
            {random_tensor({2, 3, 12}, 22)});
}

// as_strided: any layout over the storage, checked against its size.
TEST(Shape, AsStridedViewsTheStorageWithinItsBounds) {
  const Tensor x = Tensor::from_floats({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {12});
  const Tensor every_third = x.as_strided({2, 2}, {6, 3}, 1);  // elements 1, 4, 7, 10
  EXPECT_EQ(every_third.storage(), x.storage());
  EXPECT_EQ(every_third.to_host_floats(), (std::vector<float>{1, 4, 7, 10}));
  EXPECT_EQ(x.as_strided({0, 5}, {5, 1}, 12).numel(), 0) << "an empty view may start at the end";
  EXPECT_THAT([&] { x.as_strided({2, 2}, {6, 3}, 3); },
              ::testing::ThrowsMessage<Error>(::testing::AllOf(::testing::HasSubstr("within the storage's 12"),
                                                               ::testing::HasSubstr("reaching 13"))));
  EXPECT_THAT([&] { x.as_strided({2}, {1, 1}, 0); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("one stride per dimension")));
  EXPECT_THAT([&] { x.as_strided({2}, {-1}, 5); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("non-negative strides")));
  EXPECT_THAT([&] { x.as_strided({-2, 3}, {3, 1}, 0); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("non-negative sizes, found shape [-2, 3]")));
}

// Gradients that lie side by side in one buffer, as split would cut it, join without a copy;
// in any other arrangement they are concatenated.
TEST(Shape, SplitGradientsSideBySideJoinWithoutACopy) {
  const Tensor g = random_tensor({2, 3, 12}, 23);
  const auto expected = g.to_host_floats();
  for (bool in_order : {true, false}) {
    SCOPED_TRACE(in_order ? "side by side" : "out of order");
    Tensor x = random_tensor({2, 3, 12}, 24).set_requires_grad(true);
    const auto p = split(x, {4, 4, 4}, 2);
    std::vector<Tensor> grads{g.slice(2, 0, 4), g.slice(2, 4, 8), g.slice(2, 8, 12)};
    if (!in_order) std::swap(grads[0], grads[2]);
    const auto before = memory_stats().allocations;
    autograd::backward({p[0], p[1], p[2]}, grads);
    // Only the leaf's own copy of its gradient; more where the pieces are copied together.
    const auto allocations = memory_stats().allocations - before;
    if (in_order) EXPECT_EQ(allocations, 1u);
    else EXPECT_GT(allocations, 1u);
    if (in_order) EXPECT_EQ(x.grad().to_host_floats(), expected);
    EXPECT_EQ(x.grad().to_host_floats(), concat(grads, 2).to_host_floats());
  }
}

TEST(Shape, Misuse) {
  const Tensor x = Tensor::zeros({2, 3});
  EXPECT_THAT([&] { split(x, {1, 1}, 1); },
              ::testing::ThrowsMessage<Error>(::testing::AllOf(::testing::HasSubstr("3"), ::testing::HasSubstr("[1, 1]"))));
  EXPECT_THAT([&] { concat({x, Tensor::zeros({3, 3})}, 1); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("[3, 3]")));
  EXPECT_THROW(concat({x, Tensor::zeros({2, 3}, DType::bf16)}, 0), Error);
  EXPECT_THROW(concat({}, 0), Error);
  EXPECT_THROW(transpose(x, 0, 2), Error);
}

TEST(Cast, ToIsDifferentiable) {
  const auto v = random_floats(17, 12, -3.0f, 3.0f);
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = Tensor::from_floats(v, {17}).set_requires_grad(true);
    const Tensor y = to(x, dt);
    EXPECT_EQ(y.dtype(), dt);
    expect_near_all(y.to_host_floats(), testing::to_double(testing::rounded(v, dt)), 0, 0, "to");
    // d sum(3 * y) / dx = 3, in x's dtype.
    sum(scale(y, 3.0f)).backward();
    ASSERT_EQ(x.grad().dtype(), DType::f32);
    for (float g : x.grad().to_host_floats()) EXPECT_EQ(g, 3.0f);
    // And back: a bf16 leaf computed on in f32.
    Tensor h = Tensor::from_floats(v, {17}, dt).set_requires_grad(true);
    sum(mul(to(h, DType::f32), to(h, DType::f32))).backward();
    ASSERT_EQ(h.grad().dtype(), dt);
    const auto hv = h.to_host_floats();
    std::vector<double> ref(hv.size());
    for (std::size_t i = 0; i < hv.size(); ++i) ref[i] = 2.0 * hv[i];
    expect_near_all(h.grad().to_host_floats(), ref, 0, testing::roundoff(dt), "gradient of x^2 through to()");
  }
  gradcheck([](const std::vector<Tensor>& in) { return to(to(in[0], DType::f32), DType::f32); },
            {random_tensor({5}, 13)});
  EXPECT_THROW(to(Tensor::zeros({2}), DType::i32), Error);
}

TEST(Kernels, CopyStridedWritesIntoAnyLayout) {
  const auto v = random_floats(12, 14);
  const Tensor src = Tensor::from_floats(v, {3, 4});
  const Tensor dst_base = Tensor::zeros({4, 3}, DType::bf16);
  kernels::copy_strided(dst_base.transpose(0, 1), src);  // dst [3, 4] with strides [1, 3]
  expect_near_all(dst_base.transpose(0, 1).to_host_floats(), testing::to_double(testing::rounded(v, DType::bf16)), 0, 0,
                  "copy into a transposed bf16 view");
}

}  // namespace
}  // namespace bmt
