// Copies behind the shape ops (concat and split take tensors of any dtype). concat and split move rectangular blocks: around dimension d a
// contiguous tensor is [outer, size(d) * inner], and each piece is a column block of that matrix.
#include "bmtrain/kernels/shape.hpp"

#include "bmtrain/kernels/basic.hpp"
#include "index_math.hpp"

namespace bmt::kernels {

namespace {

std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  const std::int64_t d = dim < 0 ? dim + ndim : dim;
  BMT_REQUIRE(d >= 0 && d < ndim, op << ": expected a dimension in [" << -ndim << ", " << ndim << "), found " << dim);
  return d;
}

// dst[r * dst_ld + c] = src[r * src_ld + c] for r < rows, c < cols.
template <class T>
void copy_block(T* dst, std::int64_t dst_ld, const T* src, std::int64_t src_ld, std::int64_t rows,
                std::int64_t cols) {
  if (rows == 0 || cols == 0) return;
  Kokkos::parallel_for("bmt::copy_block", flat_range(rows * cols), KOKKOS_LAMBDA(std::int64_t i) {
    const std::int64_t r = i / cols, c = i % cols;
    dst[r * dst_ld + c] = src[r * src_ld + c];
  });
}

template <class D, class S>
void copy_strided_kernel(const Tensor& dst, const Tensor& src) {
  D* d = static_cast<D*>(dst.data());
  const S* s = static_cast<const S*>(src.data());
  const OffsetMap dmap = strided_map(dst), smap = strided_map(src);
  Kokkos::parallel_for("bmt::copy_strided", flat_range(dst.numel()), KOKKOS_LAMBDA(std::int64_t i) {
    d[dmap(i)] = from_f32<D>(to_f32(s[smap(i)]));
  });
}

// copy_block moves bytes, so any dtype goes through the unsigned type of its size.
template <class F>
void with_element_type(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1: f(std::uint8_t{}); break;
    case 2: f(std::uint16_t{}); break;
    case 4: f(std::uint32_t{}); break;
    default: f(std::uint64_t{}); break;
  }
}

std::int64_t product(const Shape& s, std::int64_t begin, std::int64_t end) {
  std::int64_t p = 1;
  for (std::int64_t i = begin; i < end; ++i) p *= s[static_cast<std::size_t>(i)];
  return p;
}

}  // namespace

void copy_strided(const Tensor& dst, const Tensor& src) {
  check_same_shape(dst, src, "copy_strided");
  if (dst.numel() == 0) return;
  BMT_DISPATCH_FLOAT(dst.dtype(), "copy_strided", D, {
    BMT_DISPATCH_FLOAT(src.dtype(), "copy_strided", S, { copy_strided_kernel<D, S>(dst, src); });
  });
}

Tensor concat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  BMT_REQUIRE(!tensors.empty(), "concat: expected at least one tensor, found none");
  const Tensor& first = tensors[0];
  BMT_REQUIRE(first.defined(), "concat: expected defined tensors, found an empty Tensor() at position 0");
  const std::int64_t d = wrap_dim(dim, first.dim(), "concat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    BMT_REQUIRE(t.defined(), "concat: expected defined tensors, found an empty Tensor() at position " << i);
    BMT_REQUIRE(t.dtype() == first.dtype(), "concat: expected every tensor in " << dtype_name(first.dtype())
                                                << ", found " << dtype_name(t.dtype()) << " at position " << i);
    bool match = t.dim() == first.dim();
    for (std::int64_t k = 0; match && k < t.dim(); ++k) match = k == d || t.shape()[k] == first.shape()[k];
    BMT_REQUIRE(match, "concat: expected shapes equal to " << to_string(first.shape()) << " except in dimension "
                                                           << d << ", found " << to_string(t.shape())
                                                           << " at position " << i);
    shape[d] += t.shape()[d];
  }
  Tensor out = Tensor::empty(shape, first.dtype());
  if (out.numel() == 0) return out;
  const std::int64_t outer = product(shape, 0, d), inner = product(shape, d + 1, first.dim());
  const std::int64_t out_ld = shape[d] * inner;
  std::int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const Tensor src = contiguous(t);
    const std::int64_t cols = t.shape()[d] * inner;
    with_element_type(t.dtype(), [&](auto element) {
      using T = decltype(element);
      copy_block<T>(out.data_as<T>() + offset, out_ld, src.data_as<T>(), cols, outer, cols);
    });
    offset += cols;
  }
  return out;
}

std::int64_t split_dimension(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  BMT_REQUIRE(x.defined(), "split: expected a defined tensor");
  const std::int64_t d = wrap_dim(dim, x.dim(), "split");
  std::int64_t total = 0;
  for (auto s : sizes) {
    BMT_REQUIRE(s >= 0, "split: expected non-negative sizes, found " << to_string(sizes));
    total += s;
  }
  BMT_REQUIRE(total == x.shape()[d], "split: expected sizes summing to " << x.shape()[d] << " (dimension " << d
                                         << " of " << to_string(x.shape()) << "), found " << to_string(sizes)
                                         << " summing to " << total);
  return d;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  const std::int64_t d = split_dimension(x, sizes, dim);
  const Tensor src = contiguous(x);
  const std::int64_t outer = product(x.shape(), 0, d), inner = product(x.shape(), d + 1, x.dim());
  const std::int64_t src_ld = x.shape()[d] * inner;
  std::vector<Tensor> pieces;
  std::int64_t offset = 0;
  for (auto s : sizes) {
    Shape shape = x.shape();
    shape[d] = s;
    Tensor piece = Tensor::empty(shape, x.dtype());
    const std::int64_t cols = s * inner;
    if (piece.numel() > 0) {
      with_element_type(x.dtype(), [&](auto element) {
        using T = decltype(element);
        copy_block<T>(piece.data_as<T>(), cols, src.data_as<T>() + offset, src_ld, outer, cols);
      });
    }
    offset += cols;
    pieces.push_back(piece);
  }
  return pieces;
}

}  // namespace bmt::kernels
