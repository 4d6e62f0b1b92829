// One team per (batch, position): each thread takes frequency indices i, computes cos/sin once and
// rotates that pair in every head.
#include "bmtrain/kernels/rotary.hpp"

#include "bmtrain/kernels/index_check.hpp"
#include "row_reduce.hpp"

namespace bmt::kernels {

namespace {

struct Rope4 {
  std::int64_t b, t, h, d;  // extents or strides, by role
};

Rope4 by_role(const Shape& v, int seq_dim) {
  return seq_dim == 1 ? Rope4{v[0], v[1], v[2], v[3]} : Rope4{v[0], v[2], v[1], v[3]};
}

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  std::int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

template <class T, class I>
void rotary_kernel(const Tensor& x, const I* pos, bool pos_per_batch, std::int64_t offset,
                   const RotaryFrequencies& frequencies, int seq_dim, bool inverse, const Tensor& y) {
  const Rope4 n = by_role(x.shape(), seq_dim);
  const Rope4 xs = by_role(x.strides(), seq_dim);
  const Rope4 ys = by_role(contiguous_strides(x.shape()), seq_dim);
  const std::int64_t half = n.d / 2;
  const std::int64_t T_ = n.t, H = n.h;
  const float sign = inverse ? -1.0f : 1.0f;
  const std::int64_t D = n.d;
  const RotaryFrequencies f = frequencies;
  const T* xp = static_cast<const T*>(x.data());
  T* yp = view1<T>(y, "rotary_embedding").data();
  Kokkos::parallel_for(
      "bmt::rotary_embedding", row_policy(n.b * n.t, "rotary_embedding"), KOKKOS_LAMBDA(const Team& team) {
        const std::int64_t bt = team.league_rank();
        const std::int64_t b = bt / T_, t = bt % T_;
        const float p = pos ? static_cast<float>(pos[pos_per_batch ? bt : t]) : static_cast<float>(offset + t);
        const T* xbt = xp + b * xs.b + t * xs.t;
        T* ybt = yp + b * ys.b + t * ys.t;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, half), [&](std::int64_t i) {
          const float angle = p * f.frequency(i, D);
          const float c = kmath::cos(angle);
          const float s = sign * kmath::sin(angle);
          for (std::int64_t h = 0; h < H; ++h) {
            const float x1 = to_f32(xbt[h * xs.h + i * xs.d]);
            const float x2 = to_f32(xbt[h * xs.h + (i + half) * xs.d]);
            ybt[h * ys.h + i * ys.d] = from_f32<T>(x1 * c - x2 * s);
            ybt[h * ys.h + (i + half) * ys.d] = from_f32<T>(x2 * c + x1 * s);
          }
        });
      });
}

}  // namespace

void rotary_apply(const Tensor& x, const Tensor& positions, std::int64_t offset, const RotaryFrequencies& frequencies,
                  int seq_dim, bool inverse, const Tensor& y) {
  const char* op = "rotary_embedding";
  BMT_REQUIRE(seq_dim == 1 || seq_dim == 2, op << ": expected the position dimension to be 1 ([B, T, H, D]) or 2 "
                                                  "([B, H, T, D]), found "
                                               << seq_dim);
  BMT_REQUIRE(x.defined() && x.dim() == 4, op << ": expected a 4-dimensional input ("
                                              << (seq_dim == 1 ? "[B, T, H, D]" : "[B, H, T, D]") << "), found "
                                              << (x.defined() ? to_string(x.shape()) : "none"));
  BMT_REQUIRE(x.size(3) % 2 == 0, op << ": expected an even head dimension, found " << x.size(3));
  BMT_REQUIRE(frequencies.theta > 0.0f, op << ": expected a positive theta, found " << frequencies.theta);
  const RotaryFrequencies& f = frequencies;
  BMT_REQUIRE(!(f.factor > 0.0f) || (f.low_freq_factor > 0.0f && f.high_freq_factor > f.low_freq_factor &&
                                      f.original_max_positions > 0.0f),
              op << ": expected a frequency scaling with 0 < low_freq_factor < high_freq_factor and a positive "
                    "original_max_positions, found "
                 << f.low_freq_factor << ", " << f.high_freq_factor << " and " << f.original_max_positions);
  check_same_shape(y, x, op);
  check_dtype(y, x.dtype(), op);
  BMT_REQUIRE(y.is_contiguous(), op << ": expected a contiguous output");
  const std::int64_t B = x.size(0), T = x.size(seq_dim);
  bool per_batch = false;
  if (positions.defined()) {
    per_batch = positions.dim() == 2;
    BMT_REQUIRE(positions.is_contiguous() && ((positions.dim() == 1 && positions.size(0) == T) ||
                                              (per_batch && positions.size(0) == B && positions.size(1) == T)),
                op << ": expected contiguous positions of shape [" << T << "] or [" << B << ", " << T << "], found "
                   << to_string(positions.shape()));
  }
  if (x.numel() == 0) return;
  BMT_DISPATCH_FLOAT(x.dtype(), op, T_, {
    if (!positions.defined()) {
      rotary_kernel<T_, std::int64_t>(x, nullptr, false, offset, frequencies, seq_dim, inverse, y);
    } else {
      BMT_DISPATCH_INDEX(positions.dtype(), op, I, {
        rotary_kernel<T_, I>(x, positions.data_as<I>(), per_batch, offset, frequencies, seq_dim, inverse, y);
      });
    }
  });
}

}  // namespace bmt::kernels
