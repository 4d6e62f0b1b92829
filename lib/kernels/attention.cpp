// One thread per query row (forward, dQ) or key row (dK, dV). Head vectors live in per-thread
// arrays sized by the head dimension: exact for the common sizes 64 and 128 (registers on GPUs,
// unrolled and vectorizable loops on CPUs), kMaxHeadDim-sized for the rest. Under grouped-query
// attention query head h reads key/value head h / group; a key row's thread walks the queries of
// every head of its group in turn, so dK and dV are summed over the group in a fixed order.
#include "bmtrain/kernels/attention.hpp"

#include "attention_seam.hpp"

#include <type_traits>

#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/math.hpp"

namespace bmt::kernels {

namespace {

using RowPolicy = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;

constexpr int kKeyBlock = 16;           // keys scored before one online-softmax rescale
constexpr float kNoScore = -3.0e38f;    // below every score: the running max before any key

// Rows of a [B, H, T, D] tensor with unit stride along D.
template <class T>
struct HeadRows {
  T* data = nullptr;
  std::int64_t sb = 0, sh = 0, st = 0;
  KOKKOS_INLINE_FUNCTION T* row(std::int64_t b, std::int64_t h, std::int64_t t) const {
    return data + b * sb + h * sh + t * st;
  }
};

struct Dims {
  std::int64_t b = 0, h = 0, hk = 0, tq = 0, tk = 0;  // hk: key/value heads, dividing h
  int d = 0;
  std::int64_t group() const { return hk > 0 ? h / hk : 1; }  // query heads per key/value head
  Shape queries() const { return {b, h, tq, d}; }             // q, out, dout, dq
  Shape keys() const { return {b, hk, tk, d}; }               // k, v, dk, dv
};

template <class T>
HeadRows<T> head_rows(const Tensor& t, DType dtype, const Shape& shape, const char* what, const char* op) {
  BMT_REQUIRE(t.defined() && t.shape() == shape, op << ": expected " << what << " of shape " << to_string(shape)
                                                    << ", found " << (t.defined() ? to_string(t.shape()) : "none"));
  BMT_REQUIRE(t.dtype() == dtype, op << ": expected " << what << " of dtype " << dtype_name(dtype) << ", found "
                                     << dtype_name(t.dtype()));
  BMT_REQUIRE(shape[3] <= 1 || t.strides()[3] == 1,
              op << ": expected " << what << " with unit stride along the head dimension, found stride "
                 << t.strides()[3]);
  HeadRows<T> r;
  r.data = static_cast<T*>(t.data());
  r.sb = t.strides()[0];
  r.sh = t.strides()[1];
  r.st = t.strides()[2];
  return r;
}

// q, k and v as rows of their heads, each checked against the problem's shapes and q's dtype.
template <class T>
struct QkvRows {
  HeadRows<const T> q, k, v;
  QkvRows(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Dims& n, const char* op)
      : q(head_rows<const T>(qt, qt.dtype(), n.queries(), "q", op)),
        k(head_rows<const T>(kt, qt.dtype(), n.keys(), "k", op)),
        v(head_rows<const T>(vt, qt.dtype(), n.keys(), "v", op)) {}
};

// sum of a[d] * b[d] in f32 with eight partial sums, so the additions do not form one dependency
// chain (and vectorize on CPUs).
template <class T>
KOKKOS_INLINE_FUNCTION float dot(const float* a, const T* b, int n) {
  float p[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int d = 0;
  for (; d + 8 <= n; d += 8)
    for (int k = 0; k < 8; ++k) p[k] += a[d + k] * to_f32(b[d + k]);
  float s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
  for (; d < n; ++d) s += a[d] * to_f32(b[d]);
  return s;
}

template <class T, int kD>
void forward_rows(const Dims& n, HeadRows<const T> q, HeadRows<const T> k, HeadRows<const T> v, HeadRows<T> o,
                  float* lse, bool causal, float scale) {
  const std::int64_t H = n.h, G = n.group(), Tq = n.tq, Tk = n.tk, shift = n.tk - n.tq;
  const int d_runtime = n.d;
  Kokkos::parallel_for(
      "bmt::attention_forward", RowPolicy(space(), 0, n.b * n.h * n.tq), KOKKOS_LAMBDA(std::int64_t idx) {
        constexpr int kCap = kD > 0 ? kD : kMaxHeadDim;
        const int D = kD > 0 ? kD : d_runtime;
        const std::int64_t i = idx % Tq, bh = idx / Tq, b = bh / H, h = bh % H, hk = h / G;
        float qv[kCap], acc[kCap];
        const T* qr = q.row(b, h, i);
        for (int d = 0; d < D; ++d) {
          qv[d] = to_f32(qr[d]) * scale;
          acc[d] = 0.0f;
        }
        const std::int64_t jend = causal ? i + shift + 1 : Tk;
        float m = kNoScore, l = 0.0f;
        for (std::int64_t j0 = 0; j0 < jend; j0 += kKeyBlock) {
          const int jn = jend - j0 < kKeyBlock ? static_cast<int>(jend - j0) : kKeyBlock;
          float s[kKeyBlock];
          float block_max = m;
          for (int jj = 0; jj < jn; ++jj) {
            s[jj] = dot(qv, k.row(b, hk, j0 + jj), D);
            block_max = s[jj] > block_max ? s[jj] : block_max;
          }
          if (block_max > m) {  // rescale what was accumulated against the old max
            const float corr = kmath::exp(m - block_max);
            l *= corr;
            for (int d = 0; d < D; ++d) acc[d] *= corr;
            m = block_max;
          }
          for (int jj = 0; jj < jn; ++jj) {
            const float p = kmath::exp(s[jj] - m);
            l += p;
            const T* vr = v.row(b, hk, j0 + jj);
            for (int d = 0; d < D; ++d) acc[d] += p * to_f32(vr[d]);
          }
        }
        const float inv = 1.0f / l;
        T* orow = o.row(b, h, i);
        for (int d = 0; d < D; ++d) orow[d] = from_f32<T>(acc[d] * inv);
        lse[idx] = m + kmath::log(l);
      });
}

// dQ, one thread per query row; also writes delta_i = rowsum(dO_i * O_i) for the key pass.
template <class T, int kD>
void backward_query_rows(const Dims& n, HeadRows<const T> q, HeadRows<const T> k, HeadRows<const T> v,
                         HeadRows<const T> o, HeadRows<const T> dout, const float* lse, float* delta,
                         HeadRows<T> dq, bool causal, float scale) {
  const std::int64_t H = n.h, G = n.group(), Tq = n.tq, Tk = n.tk, shift = n.tk - n.tq;
  const int d_runtime = n.d;
  Kokkos::parallel_for(
      "bmt::attention_backward_dq", RowPolicy(space(), 0, n.b * n.h * n.tq), KOKKOS_LAMBDA(std::int64_t idx) {
        constexpr int kCap = kD > 0 ? kD : kMaxHeadDim;
        const int D = kD > 0 ? kD : d_runtime;
        const std::int64_t i = idx % Tq, bh = idx / Tq, b = bh / H, h = bh % H, hk = h / G;
        float qv[kCap], dov[kCap], acc[kCap];
        const T* qr = q.row(b, h, i);
        const T* dor = dout.row(b, h, i);
        for (int d = 0; d < D; ++d) {
          qv[d] = to_f32(qr[d]) * scale;
          dov[d] = to_f32(dor[d]);
          acc[d] = 0.0f;
        }
        const float di = dot(dov, o.row(b, h, i), D);
        delta[idx] = di;
        const float li = lse[idx];
        const std::int64_t jend = causal ? i + shift + 1 : Tk;
        for (std::int64_t j = 0; j < jend; ++j) {
          const T* kr = k.row(b, hk, j);
          const float p = kmath::exp(dot(qv, kr, D) - li);
          const float ds = p * (dot(dov, v.row(b, hk, j), D) - di);
          for (int d = 0; d < D; ++d) acc[d] += ds * to_f32(kr[d]);
        }
        T* dqr = dq.row(b, h, i);
        for (int d = 0; d < D; ++d) dqr[d] = from_f32<T>(acc[d] * scale);
      });
}

// dK and dV, one thread per key row, summed over the query heads of its group.
template <class T, int kD>
void backward_key_rows(const Dims& n, HeadRows<const T> q, HeadRows<const T> k, HeadRows<const T> v,
                       HeadRows<const T> dout, const float* lse, const float* delta, HeadRows<T> dk, HeadRows<T> dv,
                       bool causal, float scale) {
  const std::int64_t H = n.h, HK = n.hk, G = n.group(), Tq = n.tq, Tk = n.tk, shift = n.tk - n.tq;
  const int d_runtime = n.d;
  Kokkos::parallel_for(
      "bmt::attention_backward_dkv", RowPolicy(space(), 0, n.b * n.hk * n.tk), KOKKOS_LAMBDA(std::int64_t idx) {
        constexpr int kCap = kD > 0 ? kD : kMaxHeadDim;
        const int D = kD > 0 ? kD : d_runtime;
        const std::int64_t j = idx % Tk, bhk = idx / Tk, b = bhk / HK, hk = bhk % HK;
        float kv[kCap], vv[kCap], dk_acc[kCap], dv_acc[kCap];
        const T* kr = k.row(b, hk, j);
        const T* vr = v.row(b, hk, j);
        for (int d = 0; d < D; ++d) {
          kv[d] = to_f32(kr[d]) * scale;
          vv[d] = to_f32(vr[d]);
          dk_acc[d] = 0.0f;
          dv_acc[d] = 0.0f;
        }
        const std::int64_t istart = causal ? (j - shift > 0 ? j - shift : 0) : 0;
        for (std::int64_t h = hk * G; h < (hk + 1) * G; ++h) {
          const float* lse_bh = lse + (b * H + h) * Tq;
          const float* delta_bh = delta + (b * H + h) * Tq;
          for (std::int64_t i = istart; i < Tq; ++i) {
            const T* qr = q.row(b, h, i);
            const T* dor = dout.row(b, h, i);
            const float p = kmath::exp(dot(kv, qr, D) - lse_bh[i]);
            const float ds = p * (dot(vv, dor, D) - delta_bh[i]);
            for (int d = 0; d < D; ++d) {
              dv_acc[d] += p * to_f32(dor[d]);
              dk_acc[d] += ds * to_f32(qr[d]);
            }
          }
        }
        T* dkr = dk.row(b, hk, j);
        T* dvr = dv.row(b, hk, j);
        for (int d = 0; d < D; ++d) {
          dkr[d] = from_f32<T>(dk_acc[d] * scale);
          dvr[d] = from_f32<T>(dv_acc[d]);
        }
      });
}

Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse, bool causal, const char* op) {
  BMT_REQUIRE(q.defined() && k.defined() && v.defined(), op << ": expected q, k and v tensors");
  BMT_REQUIRE(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              op << ": expected 4-dimensional q, k, v ([B, H, T, D]), found " << to_string(q.shape()) << ", "
                 << to_string(k.shape()) << ", " << to_string(v.shape()));
  Dims n;
  n.b = q.size(0);
  n.h = q.size(1);
  n.hk = k.size(1);
  n.tq = q.size(2);
  n.tk = k.size(2);
  n.d = static_cast<int>(q.size(3));
  BMT_REQUIRE(q.size(3) >= 1 && q.size(3) <= kMaxHeadDim,
              op << ": expected a head dimension in [1, " << kMaxHeadDim << "], found " << q.size(3));
  BMT_REQUIRE((n.hk >= 1 && n.h % n.hk == 0) || (n.h == 0 && n.hk == 0),
              op << ": expected a number of key/value heads dividing the " << n.h << " query heads, found "
                 << n.hk);
  BMT_REQUIRE(n.tk >= 1 || n.tq == 0, op << ": expected at least one key, found k of shape " << to_string(k.shape()));
  BMT_REQUIRE(!causal || n.tq <= n.tk, op << ": causal attention expected no more queries than keys, found Tq = "
                                          << n.tq << " and Tk = " << n.tk);
  BMT_REQUIRE(lse.defined() && lse.dtype() == DType::f32 && lse.is_contiguous() && lse.numel() == n.b * n.h * n.tq,
              op << ": expected a contiguous f32 lse of shape [" << n.b << ", " << n.h << ", " << n.tq << "]");
  return n;
}

// Calls f with std::integral_constant<int, D> for the head sizes with their own instantiation, 0 otherwise.
template <class F>
void with_head_dim(int d, F&& f) {
  if (d == 64) {
    f(std::integral_constant<int, 64>());
  } else if (d == 128) {
    f(std::integral_constant<int, 128>());
  } else {
    f(std::integral_constant<int, 0>());
  }
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale, const Tensor& out,
                       const Tensor& lse) {
  const char* op = "attention";
  const Dims n = check_inputs(q, k, v, lse, causal, op);
  BMT_DISPATCH_FLOAT(q.dtype(), op, T, {
    const QkvRows<T> in(q, k, v, n, op);
    const auto orows = head_rows<T>(out, q.dtype(), n.queries(), "out", op);
    if (q.numel() == 0) return;
    if (seam::tensor_core_attention_forward(q, k, v, causal, scale, out, lse)) return;
    with_head_dim(n.d, [&](auto dim) {
      forward_rows<T, decltype(dim)::value>(n, in.q, in.k, in.v, orows, lse.data_as<float>(), causal, scale);
    });
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, bool causal, float scale, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv) {
  const char* op = "attention_backward";
  const Dims n = check_inputs(q, k, v, lse, causal, op);
  BMT_DISPATCH_FLOAT(q.dtype(), op, T, {
    const QkvRows<T> in(q, k, v, n, op);
    const auto orows = head_rows<const T>(out, q.dtype(), n.queries(), "out", op);
    const auto dorows = head_rows<const T>(dout, q.dtype(), n.queries(), "dout", op);
    const auto dqr = head_rows<T>(dq, q.dtype(), n.queries(), "dq", op);
    const auto dkr = head_rows<T>(dk, q.dtype(), n.keys(), "dk", op);
    const auto dvr = head_rows<T>(dv, q.dtype(), n.keys(), "dv", op);
    if (n.b * n.h == 0 || n.d == 0) return;
    if (seam::tensor_core_attention_backward(q, k, v, out, dout, lse, causal, scale, dq, dk, dv)) return;
    Tensor delta = Tensor::empty({n.b, n.h, n.tq}, DType::f32);
    with_head_dim(n.d, [&](auto dim) {
      constexpr int kD = decltype(dim)::value;
      if (n.tq > 0)
        backward_query_rows<T, kD>(n, in.q, in.k, in.v, orows, dorows, lse.data_as<float>(), delta.data_as<float>(),
                                   dqr, causal, scale);
      backward_key_rows<T, kD>(n, in.q, in.k, in.v, dorows, lse.data_as<float>(), delta.data_as<float>(), dkr, dvr,
                               causal, scale);
    });
  });
}

}  // namespace bmt::kernels
