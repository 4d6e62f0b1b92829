#include "bmtrain/kernels/dropout.hpp"

#include "bmtrain/kernels/common.hpp"

namespace bmt::kernels {

namespace {

template <class T>
void apply_kernel(const Tensor& x, float p, std::uint64_t key, const Tensor& y, std::uint64_t first) {
  const T* xp = view1<T>(x, "dropout").data();
  T* yp = view1<T>(y, "dropout").data();
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  Kokkos::parallel_for(
      "bmt::dropout", Kokkos::RangePolicy<ExecSpace>(space(), 0, x.numel()), KOKKOS_LAMBDA(std::int64_t i) {
        const bool keep = dropout_keeps(key, first + static_cast<std::uint64_t>(i), p);
        yp[i] = from_f32<T>(keep ? to_f32(xp[i]) * scale : 0.0f);
      });
}

}  // namespace

void dropout_apply(const Tensor& x, float p, std::uint64_t key, const Tensor& y, std::uint64_t first) {
  BMT_REQUIRE(p >= 0.0f && p <= 1.0f, "dropout: expected a probability p in [0, 1], found " << p);
  BMT_REQUIRE(x.defined() && y.defined(), "dropout: expected defined input and output tensors");
  check_same_shape(y, x, "dropout");
  check_dtype(y, x.dtype(), "dropout");
  if (x.numel() == 0) return;
  BMT_DISPATCH_FLOAT(x.dtype(), "dropout", T, { apply_kernel<T>(x, p, key, y, first); });
}

}  // namespace bmt::kernels
