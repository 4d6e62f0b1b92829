#pragma once
// Float64 host references for the elementwise, matmul and reduction op tests, and the comparison
// that reports the first mismatching elements.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt::testing {

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// |actual - expected| <= atol + rtol * |expected| element by element.
inline void expect_near_all(const std::vector<float>& actual, const std::vector<double>& expected, double atol,
                            double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what << ": element count";
  int reported = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double tol = atol + rtol * std::fabs(expected[i]);
    if (!(std::fabs(actual[i] - expected[i]) <= tol) && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected " << expected[i]
                    << " (tolerance " << tol << ")";
  }
}

// Values as `dtype` stores them (so a reference can start from the same rounded inputs).
inline std::vector<float> rounded(const std::vector<float>& v, DType dtype) {
  return Tensor::from_floats(v, {static_cast<std::int64_t>(v.size())}, dtype).to_host_floats();
}

// Unit roundoff of a dtype's storage.
inline double roundoff(DType dtype) {
  return dtype == DType::bf16 ? 1.0 / 256 : dtype == DType::f16 ? 1.0 / 2048 : 1.2e-7;
}

// NumPy broadcasting on the host: f(a[ia], b[ib]) over the broadcast shape.
template <class F>
std::vector<double> broadcast_reference(const std::vector<float>& a, const Shape& as, const std::vector<float>& b,
                                        const Shape& bs, const Shape& out, F f) {
  const std::size_t nd = out.size();
  std::vector<double> r(static_cast<std::size_t>(numel_of(out)));
  for (std::size_t i = 0; i < r.size(); ++i) {
    std::int64_t rest = static_cast<std::int64_t>(i), ia = 0, ib = 0, sa = 1, sb = 1;
    for (std::size_t d = nd; d-- > 0;) {
      const std::int64_t idx = rest % out[d];
      rest /= out[d];
      const std::size_t k = nd - 1 - d;  // position from the end
      if (k < as.size()) {
        const std::int64_t n = as[as.size() - 1 - k];
        ia += (n == 1 ? 0 : idx) * sa;
        sa *= n;
      }
      if (k < bs.size()) {
        const std::int64_t n = bs[bs.size() - 1 - k];
        ib += (n == 1 ? 0 : idx) * sb;
        sb *= n;
      }
    }
    r[i] = f(static_cast<double>(a[static_cast<std::size_t>(ia)]), static_cast<double>(b[static_cast<std::size_t>(ib)]));
  }
  return r;
}

// C[b] = A[b] B[b] for row-major A [batch, m, k], B [batch, k, n] (b_batch false: one B for all).
inline std::vector<double> matmul_reference(const std::vector<float>& a, const std::vector<float>& b,
                                            std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n,
                                            bool b_batched) {
  std::vector<double> c(static_cast<std::size_t>(batch * m * n), 0.0);
  for (std::int64_t t = 0; t < batch; ++t)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p)
          s += static_cast<double>(a[t * m * k + i * k + p]) * b[(b_batched ? t * k * n : 0) + p * n + j];
        c[t * m * n + i * n + j] = s;
      }
  return c;
}

}  // namespace bmt::testing
