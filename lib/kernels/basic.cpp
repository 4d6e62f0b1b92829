#include "bmtrain/kernels/basic.hpp"

#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/float8.hpp"
#include "bmtrain/tensor/memory.hpp"
#include "memory_bound_seam.hpp"

namespace bmt {

namespace {

using namespace kernels;

constexpr int kMaxDims = 8;

// Strides of a tensor in a form a kernel can copy by value.
struct Layout {
  int ndim = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};

  explicit Layout(const Tensor& t) {
    BMT_REQUIRE(t.dim() <= kMaxDims, "strided kernels: expected at most " << kMaxDims << " dimensions, found "
                                         << t.dim());
    ndim = static_cast<int>(t.dim());
    for (int d = 0; d < ndim; ++d) {
      shape[d] = t.shape()[d];
      strides[d] = t.strides()[d];
    }
  }
  // Storage offset of the i-th element in row-major logical order.
  KOKKOS_INLINE_FUNCTION std::int64_t offset(std::int64_t i) const {
    std::int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      off += (i % shape[d]) * strides[d];
      i /= shape[d];
    }
    return off;
  }
};

template <class T>
void fill_kernel(const Tensor& t, float value) {
  auto v = view1<T>(t, "fill_");
  const T x = from_f32<T>(value);
  Kokkos::parallel_for("bmt::fill", Kokkos::RangePolicy<ExecSpace>(space(), 0, v.extent(0)),
                       KOKKOS_LAMBDA(std::size_t i) { v(i) = x; });
}

template <class D, class S>
void copy_kernel(const Tensor& dst, const Tensor& src, float alpha, bool accumulate) {
  auto d = view1<D>(dst, "copy_into");
  const S* s = static_cast<const S*>(src.data());
  const Layout layout(src);
  const bool contiguous = src.is_contiguous();
  Kokkos::parallel_for(
      "bmt::copy", Kokkos::RangePolicy<ExecSpace>(space(), 0, d.extent(0)), KOKKOS_LAMBDA(std::size_t i) {
        const std::int64_t j = contiguous ? static_cast<std::int64_t>(i) : layout.offset(static_cast<std::int64_t>(i));
        const float x = alpha * to_f32(s[j]);
        d(i) = from_f32<D>(accumulate ? to_f32(d(i)) + x : x);
      });
}

void copy_dispatch(const Tensor& dst, const Tensor& src, float alpha, bool accumulate, const char* op) {
  check_same_shape(dst, src, op);
  if (is_floating(dst.dtype()) && is_floating(src.dtype()) && seam::copy(dst, src, alpha, accumulate)) return;
  BMT_DISPATCH_FLOAT(dst.dtype(), op, D, {
    BMT_DISPATCH_FLOAT(src.dtype(), op, S, { copy_kernel<D, S>(dst, src, alpha, accumulate); });
  });
}

}  // namespace

void fill_(const Tensor& t, float value) {
  if (t.numel() == 0) return;
  if (is_floating(t.dtype())) {
    if (seam::fill(t, value)) return;
    BMT_DISPATCH_FLOAT(t.dtype(), "fill_", T, { fill_kernel<T>(t, value); });
    return;
  }
  BMT_REQUIRE(value == 0.0f, "fill_: expected a floating dtype for value " << value << ", found "
                                 << dtype_name(t.dtype()));
  t.zero_();
}

Tensor full(const Shape& shape, float value, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_(t, value);
  return t;
}
Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0f, dtype); }
Tensor full_like(const Tensor& t, float value) { return full(t.shape(), value, t.dtype()); }
Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype()); }

void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    check_same_shape(dst, src, "copy_into");
    memory::copy(dst.data(), src.data(), dst.nbytes());
    return;
  }
  BMT_REQUIRE(!is_float8(src.dtype()) && !is_float8(dst.dtype()),
              "copy_into: expected contiguous float8 tensors of one format, found " << dtype_name(src.dtype())
                                                                                   << " into " << dtype_name(dst.dtype())
                                                                                   << " of shape "
                                                                                   << to_string(src.shape()));
  if (!is_floating(src.dtype())) {
    BMT_REQUIRE(src.dtype() == dst.dtype(), "copy_into: expected matching integer dtypes, found "
                                                << dtype_name(src.dtype()) << " into " << dtype_name(dst.dtype()));
    // Integer data with strides: gather on the host (rare: index tensors are built contiguous).
    check_same_shape(dst, src, "copy_into");
    const Tensor packed = Tensor::from_ints(src.to_host_ints(), src.shape(), src.dtype());
    memory::copy(dst.data(), packed.data(), dst.nbytes());
    return;
  }
  copy_dispatch(dst, src, 1.0f, false, "copy_into");
}

Tensor clone(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  copy_into(out, t);
  return out;
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }

Tensor cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  if (is_float8(dtype) || is_float8(t.dtype())) {
    kernels::convert_float8(out, contiguous(t));
    return out;
  }
  copy_dispatch(out, t, 1.0f, false, "cast");
  return out;
}

void add_(const Tensor& dst, const Tensor& src, float alpha) {
  if (dst.numel() == 0) return;
  copy_dispatch(dst, src, alpha, true, "add_");
}

void scale_(const Tensor& t, float alpha) {
  if (t.numel() == 0) return;
  if (is_floating(t.dtype()) && seam::copy(t, t, alpha, false)) return;
  BMT_DISPATCH_FLOAT(t.dtype(), "scale_", T, {
    auto v = view1<T>(t, "scale_");
    Kokkos::parallel_for("bmt::scale", Kokkos::RangePolicy<ExecSpace>(space(), 0, v.extent(0)),
                         KOKKOS_LAMBDA(std::size_t i) { v(i) = from_f32<T>(alpha * to_f32(v(i))); });
  });
}

}  // namespace bmt
