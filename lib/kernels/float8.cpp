// Float8 scaling kernels: the tensor's absolute maximum (abs_max_on's, on the compute stream), the
// scaled cast into one or both layouts, its inverse, and unscaled casts. Portable Kokkos; on CUDA
// the absolute maximum and the scaled cast are first offered to float8_cuda.cpp (float8_seam.hpp),
// which must produce the same values.
#include "bmtrain/kernels/float8.hpp"

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/gather_packing.hpp"
#include "float8_seam.hpp"
#include "index_math.hpp"

namespace bmt::kernels {

namespace {

void require_floating(const Tensor& x, const char* op) {
  BMT_REQUIRE(x.defined() && is_floating(x.dtype()), op << ": expected an f32, bf16 or f16 tensor, found "
                                                         << (x.defined() ? dtype_name(x.dtype()) : "none"));
  BMT_REQUIRE(x.is_contiguous(), op << ": expected a contiguous tensor, found strides of shape "
                                    << to_string(x.shape()));
}

void require_scalar_f32(const Tensor& t, const char* op, const char* what) {
  BMT_REQUIRE(t.defined() && t.dtype() == DType::f32 && t.numel() == 1,
              op << ": expected " << what << " as one f32, found "
                 << (t.defined() ? std::string(dtype_name(t.dtype())) + " " + to_string(t.shape()) : "none"));
}

template <class F, class T>
void quantize_kernel(const T* x, std::int64_t rows, std::int64_t cols, const float* amax, std::uint8_t* out,
                     std::uint8_t* out_t, float* scale_inv) {
  Kokkos::parallel_for("bmt::quantize_float8", flat_range(rows * cols), KOKKOS_LAMBDA(std::int64_t i) {
    const float scale = float8_scale(amax[0], F::max());
    const std::uint8_t q = F::from_float(to_f32(x[i]) * scale);
    if (out) out[i] = q;
    if (out_t) out_t[(i % cols) * rows + i / cols] = q;
    if (i == 0) scale_inv[0] = 1.0f / scale;
  });
}

template <class D, class S>
void convert_kernel(D* dst, const S* src, std::int64_t n, const float* scale) {
  Kokkos::parallel_for("bmt::convert_float8", flat_range(n), KOKKOS_LAMBDA(std::int64_t i) {
    dst[i] = from_f32<D>(scale ? to_f32(src[i]) * scale[0] : to_f32(src[i]));
  });
}

}  // namespace

Tensor abs_max(const Tensor& x) {
  require_floating(x, "abs_max");
  Tensor out = Tensor::empty({}, DType::f32);
  if (x.numel() == 0) {
    fill_(out, 0.0f);
    return out;
  }
  abs_max_on(space(), x.data(), x.dtype(), x.numel(), out.data_as<float>());
  return out;
}

Float8Matrix quantize_float8(const Tensor& x, std::int64_t cols, const Tensor& amax, DType format, bool row_major,
                             bool transposed) {
  require_floating(x, "quantize_float8");
  require_scalar_f32(amax, "quantize_float8", "amax");
  BMT_REQUIRE(is_float8(format), "quantize_float8: expected format f8e4m3 or f8e5m2, found " << dtype_name(format));
  BMT_REQUIRE(row_major || transposed, "quantize_float8: expected at least one layout, found none asked for");
  BMT_REQUIRE(cols > 0 && x.numel() % cols == 0,
              "quantize_float8: expected rows of " << cols << " elements to tile " << to_string(x.shape()));
  const std::int64_t rows = x.numel() / cols;
  Float8Matrix m;
  m.scale_inv = Tensor::empty({}, DType::f32);
  if (row_major) m.codes = Tensor::empty({rows, cols}, format);
  if (transposed) m.transposed = Tensor::empty({cols, rows}, format);
  auto* out = row_major ? static_cast<std::uint8_t*>(m.codes.data()) : nullptr;
  auto* out_t = transposed ? static_cast<std::uint8_t*>(m.transposed.data()) : nullptr;
  float* scale_inv = m.scale_inv.data_as<float>();
  const float* pa = amax.data_as<float>();
  if (rows == 0) {  // no elements: the scale is still amax's
    BMT_DISPATCH_FLOAT8(format, "quantize_float8", F, {
      Kokkos::parallel_for("bmt::float8_scale", flat_range(1), KOKKOS_LAMBDA(std::int64_t) {
        scale_inv[0] = 1.0f / float8_scale(pa[0], F::max());
      });
    });
    return m;
  }
  if (seam::quantize_float8(x, rows, cols, pa, format, out, out_t, scale_inv)) return m;
  BMT_DISPATCH_FLOAT8(format, "quantize_float8", F, {
    BMT_DISPATCH_FLOAT(x.dtype(), "quantize_float8", T,
                       { quantize_kernel<F, T>(x.data_as<T>(), rows, cols, pa, out, out_t, scale_inv); });
  });
  return m;
}

Tensor transpose_float8(const Tensor& codes) {
  BMT_REQUIRE(codes.defined() && is_float8(codes.dtype()) && codes.is_contiguous() && codes.dim() == 2,
              "transpose_float8: expected contiguous f8e4m3 or f8e5m2 codes [rows, cols], found "
                  << (codes.defined() ? std::string(dtype_name(codes.dtype())) + " " + to_string(codes.shape())
                                      : std::string("none")));
  const std::int64_t rows = codes.size(0), cols = codes.size(1);
  Tensor out = Tensor::empty({cols, rows}, codes.dtype());
  if (out.numel() == 0) return out;
  const auto* in = static_cast<const std::uint8_t*>(codes.data());
  auto* o = static_cast<std::uint8_t*>(out.data());
  if (seam::transpose_float8(in, rows, cols, o)) return out;
  // Indexed by the output, so that its writes are contiguous.
  Kokkos::parallel_for("bmt::transpose_float8", flat_range(rows * cols), KOKKOS_LAMBDA(std::int64_t i) {
    o[i] = in[(i % rows) * cols + i / rows];
  });
  return out;
}

Tensor dequantize_float8(const Tensor& codes, const Tensor& scale_inv, DType dtype) {
  BMT_REQUIRE(codes.defined() && is_float8(codes.dtype()) && codes.is_contiguous(),
              "dequantize_float8: expected contiguous f8e4m3 or f8e5m2 codes, found "
                  << (codes.defined() ? dtype_name(codes.dtype()) : "none"));
  require_scalar_f32(scale_inv, "dequantize_float8", "the inverse scale");
  Tensor out = Tensor::empty(codes.shape(), dtype);
  if (out.numel() == 0) return out;
  const float* s = scale_inv.data_as<float>();
  BMT_DISPATCH_FLOAT8(codes.dtype(), "dequantize_float8", F, {
    BMT_DISPATCH_FLOAT(dtype, "dequantize_float8", D,
                       { convert_kernel<D, F>(out.data_as<D>(), codes.data_as<F>(), out.numel(), s); });
  });
  return out;
}

void convert_float8(const Tensor& dst, const Tensor& src) {
  BMT_REQUIRE(dst.defined() && src.defined() && dst.shape() == src.shape(),
              "convert_float8: expected tensors of one shape");
  BMT_REQUIRE(dst.is_contiguous() && src.is_contiguous(), "convert_float8: expected contiguous tensors of shape "
                                                              << to_string(src.shape()));
  const bool to8 = is_float8(dst.dtype()) && is_floating(src.dtype());
  const bool from8 = is_floating(dst.dtype()) && is_float8(src.dtype());
  BMT_REQUIRE(to8 || from8 || (is_float8(dst.dtype()) && is_float8(src.dtype())),
              "convert_float8: expected a float8 tensor and a floating one, found " << dtype_name(src.dtype())
                                                                                   << " into "
                                                                                   << dtype_name(dst.dtype()));
  if (dst.numel() == 0) return;
  const std::int64_t n = dst.numel();
  if (to8) {
    BMT_DISPATCH_FLOAT8(dst.dtype(), "cast", D, {
      BMT_DISPATCH_FLOAT(src.dtype(), "cast", S,
                         { convert_kernel<D, S>(dst.data_as<D>(), src.data_as<S>(), n, nullptr); });
    });
  } else if (from8) {
    BMT_DISPATCH_FLOAT(dst.dtype(), "cast", D, {
      BMT_DISPATCH_FLOAT8(src.dtype(), "cast", S,
                          { convert_kernel<D, S>(dst.data_as<D>(), src.data_as<S>(), n, nullptr); });
    });
  } else {  // one float8 format into the other, through float (exact), then rounded
    BMT_DISPATCH_FLOAT8(dst.dtype(), "cast", D, {
      BMT_DISPATCH_FLOAT8(src.dtype(), "cast", S,
                          { convert_kernel<D, S>(dst.data_as<D>(), src.data_as<S>(), n, nullptr); });
    });
  }
}

}  // namespace bmt::kernels
