#pragma once
// A naive float64 attention (explicit scores, softmax and products) for the attention tests, and
// grouped-query attention as that reference sees it: each key/value head repeated for the query
// heads of its group, and the gradients of the repeats summed back into their head.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef BMT_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

#include "bmtrain/runtime/environment.hpp"

namespace bmt::testing {

// q [B, H, Tq, D]; k, v [B, Hk, Tk, D] with Hk = kv_heads() (0: as many as q).
struct AttentionSizes {
  std::int64_t B, H, Tq, Tk, D, Hk = 0;
  std::int64_t kv_heads() const { return Hk ? Hk : H; }
  std::int64_t queries() const { return B * H * Tq * D; }
  std::int64_t keys() const { return B * kv_heads() * Tk * D; }
  std::string describe() const {
    return "B=" + std::to_string(B) + " H=" + std::to_string(H) + " Hk=" + std::to_string(kv_heads()) +
           " Tq=" + std::to_string(Tq) + " Tk=" + std::to_string(Tk) + " D=" + std::to_string(D);
  }
};

struct AttentionReference {
  std::vector<double> out, dq, dk, dv;
};

// Multi-head attention (k and v with H heads); dout like q.
inline AttentionReference multi_head_reference(const AttentionSizes& s, const std::vector<float>& q,
                                               const std::vector<float>& k, const std::vector<float>& v,
                                               const std::vector<float>& dout, bool causal, double scale) {
  AttentionReference r;
  r.out.assign(q.size(), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  const std::int64_t D = s.D;
  for (std::int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const float* Q = q.data() + bh * s.Tq * D;
    const float* K = k.data() + bh * s.Tk * D;
    const float* V = v.data() + bh * s.Tk * D;
    const float* dO = dout.data() + bh * s.Tq * D;
    for (std::int64_t i = 0; i < s.Tq; ++i) {
      const std::int64_t jend = causal ? i + (s.Tk - s.Tq) + 1 : s.Tk;
      std::vector<double> p(jend);
      double m = -1e300;
      for (std::int64_t j = 0; j < jend; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += double(Q[i * D + d]) * K[j * D + d];
        p[j] = dot * scale;
        m = std::max(m, p[j]);
      }
      double sum = 0;
      for (auto& x : p) sum += (x = std::exp(x - m));
      for (auto& x : p) x /= sum;
      // out, dV, and dP = dO V^T
      std::vector<double> dp(jend, 0.0);
      double delta = 0;
      for (std::int64_t j = 0; j < jend; ++j)
        for (std::int64_t d = 0; d < D; ++d) {
          r.out[(bh * s.Tq + i) * D + d] += p[j] * V[j * D + d];
          r.dv[(bh * s.Tk + j) * D + d] += p[j] * dO[i * D + d];
          dp[j] += double(dO[i * D + d]) * V[j * D + d];
        }
      for (std::int64_t j = 0; j < jend; ++j) delta += p[j] * dp[j];
      for (std::int64_t j = 0; j < jend; ++j) {
        const double ds = p[j] * (dp[j] - delta) * scale;
        for (std::int64_t d = 0; d < D; ++d) {
          r.dq[(bh * s.Tq + i) * D + d] += ds * K[j * D + d];
          r.dk[(bh * s.Tk + j) * D + d] += ds * Q[i * D + d];
        }
      }
    }
  }
  return r;
}

// Any number of key/value heads dividing H: the multi-head reference on k and v with each head
// repeated H / Hk times (query head h sees repeat h of head h / (H / Hk)), its dK and dV summed
// over each head's repeats.
inline AttentionReference attention_reference(const AttentionSizes& s, const std::vector<float>& q,
                                              const std::vector<float>& k, const std::vector<float>& v,
                                              const std::vector<float>& dout, bool causal, double scale) {
  const std::int64_t Hk = s.kv_heads(), group = s.H / Hk, rows = s.Tk * s.D;
  if (group == 1) return multi_head_reference(s, q, k, v, dout, causal, scale);
  auto repeat = [&](const std::vector<float>& x) {
    std::vector<float> y(static_cast<std::size_t>(s.B * s.H * rows));
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t h = 0; h < s.H; ++h)
        std::copy_n(x.begin() + (b * Hk + h / group) * rows, rows, y.begin() + (b * s.H + h) * rows);
    return y;
  };
  AttentionSizes mha = s;
  mha.Hk = 0;
  AttentionReference r = multi_head_reference(mha, q, repeat(k), repeat(v), dout, causal, scale);
  auto fold = [&](const std::vector<double>& y) {
    std::vector<double> x(static_cast<std::size_t>(s.B * Hk * rows), 0.0);
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t h = 0; h < s.H; ++h)
        for (std::int64_t e = 0; e < rows; ++e) x[(b * Hk + h / group) * rows + e] += y[(b * s.H + h) * rows + e];
    return x;
  };
  r.dk = fold(r.dk);
  r.dv = fold(r.dv);
  return r;
}

// [B, A, C, D] <-> [B, C, A, D]
inline std::vector<float> swap_heads_and_time(const std::vector<float>& x, std::int64_t B, std::int64_t A,
                                              std::int64_t C, std::int64_t D) {
  std::vector<float> y(x.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t a = 0; a < A; ++a)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t d = 0; d < D; ++d) y[((b * C + c) * A + a) * D + d] = x[((b * A + a) * C + c) * D + d];
  return y;
}

// The kernel family a tensor-core shape must take here: "wgmma" for a 64- or 128-wide head when the build
// has Hopper code and runs on a Hopper device (unless BMT_ATTENTION_NO_WGMMA turns it off), else
// "mma.sync". A build whose sm_90a code silently failed to load would run the mma.sync kernels
// and leave the wgmma ones untested; this catches it.
inline std::string expected_tensor_core_kernel(std::int64_t D) {
#if defined(BMT_ENABLE_CUDA) && defined(BMT_TEST_EXPECT_WGMMA)
  int device = 0, major = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major == 9 &&
      (D == 64 || D == 128) && !bmt::environment().attention_no_wgmma)
    return "wgmma";
#else
  (void)D;
#endif
  return "mma.sync";
}

}  // namespace bmt::testing
