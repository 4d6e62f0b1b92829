// One team per row: the row maximum, the f32 sum of exp(x - max), then the normalized values.
// exp is evaluated twice per element rather than storing unnormalized values, so bf16/f16 outputs
// are rounded once.
#include "bmtrain/kernels/softmax.hpp"

#include "memory_bound_seam.hpp"
#include "row_reduce.hpp"

namespace bmt::kernels {

namespace {

template <class T>
void forward_kernel(const Tensor& x, const Tensor& y, std::int64_t rows, std::int64_t C) {
  const T* xp = view1<T>(x, "softmax").data();
  T* yp = view1<T>(y, "softmax").data();
  Kokkos::parallel_for(
      "bmt::softmax", row_policy(rows, "softmax"), KOKKOS_LAMBDA(const Team& team) {
        const std::int64_t r = team.league_rank();
        const T* xr = xp + r * C;
        T* yr = yp + r * C;
        const float m = team_max(team, C, [&](std::int64_t j) { return to_f32(xr[j]); });
        const float sum = team_sum(team, C, [&](std::int64_t j) { return kmath::exp(to_f32(xr[j]) - m); });
        const float inv = 1.0f / sum;
        team_map(
            team, C, [&](std::int64_t j) { return kmath::exp(to_f32(xr[j]) - m) * inv; },
            [&](std::int64_t j, float v) { yr[j] = from_f32<T>(v); });
      });
}

template <class T>
void backward_kernel(const Tensor& y, const Tensor& dy, const Tensor& dx, std::int64_t rows, std::int64_t C) {
  const T* yp = view1<T>(y, "softmax_backward").data();
  const T* dyp = view1<T>(dy, "softmax_backward").data();
  T* dxp = view1<T>(dx, "softmax_backward").data();
  Kokkos::parallel_for(
      "bmt::softmax_backward", row_policy(rows, "softmax_backward"), KOKKOS_LAMBDA(const Team& team) {
        const std::int64_t r = team.league_rank();
        const T* yr = yp + r * C;
        const T* dyr = dyp + r * C;
        T* dxr = dxp + r * C;
        const float dot = team_sum(team, C, [&](std::int64_t j) { return to_f32(dyr[j]) * to_f32(yr[j]); });
        team_map(
            team, C, [&](std::int64_t j) { return to_f32(yr[j]) * (to_f32(dyr[j]) - dot); },
            [&](std::int64_t j, float v) { dxr[j] = from_f32<T>(v); });
      });
}

void check_like(const Tensor& t, const Tensor& ref, const char* op) {
  check_same_shape(t, ref, op);
  check_dtype(t, ref.dtype(), op);
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y) {
  BMT_REQUIRE(x.defined() && x.dim() >= 1, "softmax: expected a tensor with at least one dimension");
  check_like(y, x, "softmax");
  if (x.numel() == 0) return;
  if (seam::softmax_forward(x, y)) return;
  const std::int64_t C = x.size(-1);
  BMT_DISPATCH_FLOAT(x.dtype(), "softmax", T, { forward_kernel<T>(x, y, x.numel() / C, C); });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  BMT_REQUIRE(y.defined() && y.dim() >= 1, "softmax_backward: expected a tensor with at least one dimension");
  check_like(dy, y, "softmax_backward");
  check_like(dx, y, "softmax_backward");
  if (y.numel() == 0) return;
  if (seam::softmax_backward(y, dy, dx)) return;
  const std::int64_t C = y.size(-1);
  BMT_DISPATCH_FLOAT(y.dtype(), "softmax_backward", T, { backward_kernel<T>(y, dy, dx, y.numel() / C, C); });
}

}  // namespace bmt::kernels
