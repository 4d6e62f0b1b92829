// LayerNorm and RMSNorm share one kernel body: RMSNorm is LayerNorm without centering and without
// bias. One team per row computes the f32 statistics; the weight/bias gradients are column sums
// over rows, taken in row chunks (one chunk on the host, enough chunks to fill a GPU otherwise)
// and folded at the end, so no atomics are needed and the result does not depend on scheduling.
#include "bmtrain/kernels/norm.hpp"

#include <algorithm>

#include "memory_bound_seam.hpp"
#include "row_reduce.hpp"

namespace bmt::kernels {

namespace {

struct RowShape {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

RowShape row_shape(const Tensor& x, const char* op) {
  BMT_REQUIRE(x.defined() && x.dim() >= 1, op << ": expected a tensor with at least one dimension");
  RowShape s;
  s.cols = x.size(-1);
  s.rows = s.cols == 0 ? 0 : x.numel() / s.cols;
  return s;
}

void check_param(const Tensor& p, const Tensor& x, std::int64_t cols, const char* what, const char* op) {
  if (!p.defined()) return;
  BMT_REQUIRE(p.dim() == 1 && p.size(0) == cols,
              op << ": expected " << what << " of shape [" << cols << "], found " << to_string(p.shape()));
  BMT_REQUIRE(p.dtype() == x.dtype(), op << ": expected " << what << " of dtype " << dtype_name(x.dtype())
                                        << " (the input's), found " << dtype_name(p.dtype()));
}

// dweight/dbias: written or (accumulate) added into, in x's dtype or f32, both of one dtype.
void check_param_grads(const Tensor& dweight, const Tensor& dbias, const Tensor& x, std::int64_t cols,
                       bool accumulate, const char* op) {
  for (const Tensor* p : {&dweight, &dbias}) {
    if (!p->defined()) continue;
    const char* what = p == &dweight ? "weight gradient" : "bias gradient";
    BMT_REQUIRE(p->dim() == 1 && p->size(0) == cols,
                op << ": expected " << what << " of shape [" << cols << "], found " << to_string(p->shape()));
    BMT_REQUIRE(p->dtype() == x.dtype() || p->dtype() == DType::f32,
                op << ": expected " << what << (accumulate ? " to add into" : "") << " in " << dtype_name(x.dtype())
                   << " (the input's) or f32, found " << dtype_name(p->dtype()));
  }
  if (dweight.defined() && dbias.defined())
    BMT_REQUIRE(dweight.dtype() == dbias.dtype(), op << ": expected the weight and bias gradients in one dtype, found "
                                                     << dtype_name(dweight.dtype()) << " and "
                                                     << dtype_name(dbias.dtype()));
}

template <class T>
const T* data_or_null(const Tensor& t, const char* op) {
  return t.defined() ? view1<T>(t, op).data() : nullptr;
}

template <class T, bool kCentered>
void norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd, const char* op) {
  const RowShape s = row_shape(x, op);
  const std::int64_t C = s.cols;
  const float inv_c = 1.0f / static_cast<float>(C);
  const T* xp = view1<T>(x, op).data();
  T* yp = view1<T>(y, op).data();
  const T* wp = data_or_null<T>(weight, op);
  const T* bp = data_or_null<T>(bias, op);
  float* meanp = kCentered ? view1<float>(mean, op).data() : nullptr;
  float* rstdp = view1<float>(rstd, op).data();
  Kokkos::parallel_for(
      op, row_policy(s.rows, op), KOKKOS_LAMBDA(const Team& team) {
        const std::int64_t r = team.league_rank();
        const T* xr = xp + r * C;
        T* yr = yp + r * C;
        float mu = 0.0f;
        if (kCentered) mu = team_sum(team, C, [&](std::int64_t j) { return to_f32(xr[j]); }) * inv_c;
        const float var = team_sum(team, C, [&](std::int64_t j) {
                            const float d = to_f32(xr[j]) - mu;
                            return d * d;
                          }) * inv_c;
        const float rs = kmath::rsqrt(var + eps);
        auto store = [&](std::int64_t j, float v) { yr[j] = from_f32<T>(v); };
        if (wp && bp) {
          team_map(
              team, C, [&](std::int64_t j) { return (to_f32(xr[j]) - mu) * rs * to_f32(wp[j]) + to_f32(bp[j]); },
              store);
        } else if (wp) {
          team_map(team, C, [&](std::int64_t j) { return (to_f32(xr[j]) - mu) * rs * to_f32(wp[j]); }, store);
        } else {
          team_map(
              team, C, [&](std::int64_t j) { return (to_f32(xr[j]) - mu) * rs + (bp ? to_f32(bp[j]) : 0.0f); },
              store);
        }
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          if (meanp) meanp[r] = mu;
          rstdp[r] = rs;
        });
      });
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight, xhat = (x - mean) * rstd;
// without centering the mean(g) term drops out.
template <class T, bool kCentered>
void norm_backward_input(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, bool add_into_dx, const char* op) {
  const RowShape s = row_shape(x, op);
  const std::int64_t C = s.cols;
  const float inv_c = 1.0f / static_cast<float>(C);
  const T* dyp = view1<T>(dy, op).data();
  const T* xp = view1<T>(x, op).data();
  const T* wp = data_or_null<T>(weight, op);
  const float* meanp = kCentered ? view1<float>(mean, op).data() : nullptr;
  const float* rstdp = view1<float>(rstd, op).data();
  T* dxp = view1<T>(dx, op).data();
  Kokkos::parallel_for(
      op, row_policy(s.rows, op), KOKKOS_LAMBDA(const Team& team) {
        const std::int64_t r = team.league_rank();
        const T* xr = xp + r * C;
        const T* dyr = dyp + r * C;
        T* dxr = dxp + r * C;
        const float mu = kCentered ? meanp[r] : 0.0f;
        const float rs = rstdp[r];
        auto row = [&](auto g) {
          const float mean_g = kCentered ? team_sum(team, C, g) * inv_c : 0.0f;
          const float mean_gx =
              team_sum(team, C, [&](std::int64_t j) { return g(j) * (to_f32(xr[j]) - mu) * rs; }) * inv_c;
          team_map(
              team, C,
              [&](std::int64_t j) { return rs * (g(j) - mean_g - (to_f32(xr[j]) - mu) * rs * mean_gx); },
              [&](std::int64_t j, float v) { dxr[j] = from_f32<T>(add_into_dx ? v + to_f32(dxr[j]) : v); });
        };
        if (wp) {
          row([&](std::int64_t j) { return to_f32(dyr[j]) * to_f32(wp[j]); });
        } else {
          row([&](std::int64_t j) { return to_f32(dyr[j]); });
        }
      });
}

// How many row chunks the column sums use: one on the host (one pass, rows outer, streaming),
// enough on a GPU that the chunks times the columns fill the device.
std::int64_t column_chunks(std::int64_t rows) {
  const std::int64_t concurrency = space().concurrency();
  if (concurrency <= 1) return 1;
  return std::max<std::int64_t>(1, std::min<std::int64_t>({rows, concurrency / 256, 1024}));
}

// dweight[j] (+)= sum over chunks of pw[chunk, j], likewise dbias from pb; O is T or f32.
template <class O>
void finish_column_sums(const float* pw, const float* pb, std::int64_t chunks, std::int64_t C, const Tensor& dweight,
                        const Tensor& dbias, bool accumulate, const char* op) {
  O* dwp = dweight.defined() ? view1<O>(dweight, op).data() : nullptr;
  O* dbp = dbias.defined() ? view1<O>(dbias, op).data() : nullptr;
  Kokkos::parallel_for(
      op, Kokkos::RangePolicy<ExecSpace>(space(), 0, C), KOKKOS_LAMBDA(std::int64_t j) {
        float sw = 0.0f, sb = 0.0f;
        for (std::int64_t c = 0; c < chunks; ++c) {
          sw += pw[c * C + j];
          sb += pb[c * C + j];
        }
        if (dwp) dwp[j] = from_f32<O>(sw + (accumulate ? to_f32(dwp[j]) : 0.0f));
        if (dbp) dbp[j] = from_f32<O>(sb + (accumulate ? to_f32(dbp[j]) : 0.0f));
      });
}

// dweight = sum over rows of dy * xhat, dbias = sum over rows of dy, in f32 (added to them when
// accumulating).
template <class T, bool kCentered>
void norm_backward_params(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                          const Tensor& dweight, const Tensor& dbias, bool accumulate, const char* op) {
  if (!dweight.defined() && !dbias.defined()) return;
  const RowShape s = row_shape(x, op);
  const std::int64_t C = s.cols;
  const std::int64_t rows = s.rows;
  const std::int64_t chunks = column_chunks(rows);
  const std::int64_t rows_per_chunk = rows == 0 ? 0 : (rows + chunks - 1) / chunks;
  const T* dyp = view1<T>(dy, op).data();
  const T* xp = view1<T>(x, op).data();
  const float* meanp = kCentered ? view1<float>(mean, op).data() : nullptr;
  const float* rstdp = view1<float>(rstd, op).data();
  const bool want_w = dweight.defined();
  const bool want_b = dbias.defined();
  Tensor partial = Tensor::empty({2, chunks, C}, DType::f32);
  float* pw = partial.data_as<float>();
  float* pb = pw + chunks * C;
  Kokkos::parallel_for(
      op, TeamPolicy(space(), static_cast<int>(chunks), Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const std::int64_t c = team.league_rank();
        const std::int64_t r0 = c * rows_per_chunk;
        const std::int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
        float* aw = pw + c * C;
        float* ab = pb + c * C;
        // Each thread owns the same columns in every row (team_map splits every row the same way),
        // so the row loop needs no barrier.
        team_map(
            team, C, [&](std::int64_t) { return 0.0f; },
            [&](std::int64_t j, float v) {
              aw[j] = v;
              ab[j] = v;
            });
        for (std::int64_t r = r0; r < r1; ++r) {
          const T* xr = xp + r * C;
          const T* dyr = dyp + r * C;
          const float mu = kCentered ? meanp[r] : 0.0f;
          const float rs = rstdp[r];
          if (want_w)
            team_map(
                team, C, [&](std::int64_t j) { return aw[j] + to_f32(dyr[j]) * (to_f32(xr[j]) - mu) * rs; },
                [&](std::int64_t j, float v) { aw[j] = v; });
          if (want_b)
            team_map(
                team, C, [&](std::int64_t j) { return ab[j] + to_f32(dyr[j]); },
                [&](std::int64_t j, float v) { ab[j] = v; });
        }
      });
  const DType out = (want_w ? dweight : dbias).dtype();
  if (out == DType::f32) finish_column_sums<float>(pw, pb, chunks, C, dweight, dbias, accumulate, op);
  else finish_column_sums<T>(pw, pb, chunks, C, dweight, dbias, accumulate, op);
}

void check_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y, const Tensor& mean,
                   const Tensor& rstd, const char* op) {
  const RowShape s = row_shape(x, op);
  check_param(weight, x, s.cols, "weight", op);
  check_param(bias, x, s.cols, "bias", op);
  check_same_shape(y, x, op);
  check_dtype(y, x.dtype(), op);
  BMT_REQUIRE(rstd.numel() == s.rows, op << ": expected rstd with " << s.rows << " elements, found " << rstd.numel());
  if (mean.defined())
    BMT_REQUIRE(mean.numel() == s.rows, op << ": expected mean with " << s.rows << " elements, found " << mean.numel());
}

void check_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx, const Tensor& dweight,
                    const Tensor& dbias, bool accumulate, const char* op) {
  const RowShape s = row_shape(x, op);
  check_same_shape(dy, x, op);
  check_dtype(dy, x.dtype(), op);
  check_param(weight, x, s.cols, "weight", op);
  check_param_grads(dweight, dbias, x, s.cols, accumulate, op);
  if (dx.defined()) {
    check_same_shape(dx, x, op);
    check_dtype(dx, x.dtype(), op);
  }
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm";
  BMT_REQUIRE(mean.defined(), op << ": expected a mean tensor to save the row statistics in");
  check_forward(x, weight, bias, y, mean, rstd, op);
  if (x.numel() == 0) return;
  if (seam::norm_forward(x, weight, bias, eps, y, mean, rstd)) return;
  BMT_DISPATCH_FLOAT(x.dtype(), op, T, { norm_forward<T, true>(x, weight, bias, eps, y, mean, rstd, op); });
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         bool accumulate, bool add_into_dx) {
  const char* op = "layer_norm_backward";
  check_backward(dy, x, weight, dx, dweight, dbias, accumulate, op);
  if (x.numel() == 0) {
    if (dweight.defined() && !accumulate) dweight.zero_();
    if (dbias.defined() && !accumulate) dbias.zero_();
    return;
  }
  if (seam::norm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate, add_into_dx)) return;
  BMT_DISPATCH_FLOAT(x.dtype(), op, T, {
    if (dx.defined()) norm_backward_input<T, true>(dy, x, weight, mean, rstd, dx, add_into_dx, op);
    norm_backward_params<T, true>(dy, x, mean, rstd, dweight, dbias, accumulate, op);
  });
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, const Tensor& y, const Tensor& rstd) {
  const char* op = "rms_norm";
  check_forward(x, weight, Tensor(), y, Tensor(), rstd, op);
  if (x.numel() == 0) return;
  if (seam::norm_forward(x, weight, Tensor(), eps, y, Tensor(), rstd)) return;
  BMT_DISPATCH_FLOAT(x.dtype(), op, T, { norm_forward<T, false>(x, weight, Tensor(), eps, y, Tensor(), rstd, op); });
}

void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dx,
                       const Tensor& dweight, bool accumulate, bool add_into_dx) {
  const char* op = "rms_norm_backward";
  check_backward(dy, x, weight, dx, dweight, Tensor(), accumulate, op);
  if (x.numel() == 0) {
    if (dweight.defined() && !accumulate) dweight.zero_();
    return;
  }
  if (seam::norm_backward(dy, x, weight, Tensor(), rstd, dx, dweight, Tensor(), accumulate, add_into_dx)) return;
  BMT_DISPATCH_FLOAT(x.dtype(), op, T, {
    if (dx.defined()) norm_backward_input<T, false>(dy, x, weight, Tensor(), rstd, dx, add_into_dx, op);
    norm_backward_params<T, false>(dy, x, Tensor(), rstd, dweight, Tensor(), accumulate, op);
  });
}

}  // namespace bmt::kernels
