#pragma once
// Float8 computed without float8.hpp, for the conversion, scaling and FP8 linear tests: a code's
// value from its bit fields with ldexp in double; encoding as the nearest entry of the table of
// decoded values (a tie to the even code, beyond the largest finite value saturated); per-tensor
// current scaling and the FP8 linear layer's three products in double from those.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace bmt::testing {

struct Float8Format {
  const char* name;
  int exp_bits, man_bits;
  bool ieee_specials;  // the top exponent is infinities and NaNs (e5m2); else only S.1111.111 is NaN
  float max;           // the largest finite value
};
inline constexpr Float8Format kE4M3{"e4m3", 4, 3, false, 448.0f};
inline constexpr Float8Format kE5M2{"e5m2", 5, 2, true, 57344.0f};

// The value of a code, from its fields.
inline double float8_decode(const Float8Format& f, std::uint8_t b) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const int top = (1 << f.exp_bits) - 1;
  const bool neg = b >> 7;
  const int e = (b >> f.man_bits) & top;
  const int m = b & ((1 << f.man_bits) - 1);
  double v;
  if (f.ieee_specials && e == top) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (!f.ieee_specials && e == top && m == (1 << f.man_bits) - 1) v = std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) v = std::ldexp(m, 1 - bias - f.man_bits);
  else v = std::ldexp((1 << f.man_bits) + m, e - bias - f.man_bits);
  return neg ? -v : v;
}

// The positive finite codes in increasing order of value (code order is value order there).
inline std::vector<std::uint8_t> float8_finite_positive_codes(const Float8Format& f) {
  std::vector<std::uint8_t> codes;
  for (int c = 0; c < 128; ++c)
    if (std::isfinite(float8_decode(f, static_cast<std::uint8_t>(c)))) codes.push_back(static_cast<std::uint8_t>(c));
  return codes;
}

// The code a non-NaN x rounds to: the nearest finite value, a tie to the even code, saturated at
// the largest.
inline std::uint8_t float8_encode(const Float8Format& f, double x) {
  static const std::vector<std::uint8_t> e4m3 = float8_finite_positive_codes(kE4M3);
  static const std::vector<std::uint8_t> e5m2 = float8_finite_positive_codes(kE5M2);
  const auto& codes = f.ieee_specials ? e5m2 : e4m3;
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  std::uint8_t best = codes.back();  // beyond the largest: saturate
  for (std::size_t i = 0; i + 1 < codes.size(); ++i) {
    const double lo = float8_decode(f, codes[i]), hi = float8_decode(f, codes[i + 1]);
    if (a > hi) continue;
    const double mid = (lo + hi) / 2;  // exact in double
    if (a < mid) best = codes[i];
    else if (a > mid) best = codes[i + 1];
    else best = (codes[i] & 1) ? codes[i + 1] : codes[i];
    break;
  }
  return static_cast<std::uint8_t>(sign | best);
}

// A tensor under per-tensor current scaling, as the spec defines it: amax = max |x|, scale =
// max / amax in float (1 for amax 0), codes = encode(x * scale) with the product rounded to
// float, and each element standing for value(code) * (1 / scale) (that inverse in float).
struct Float8Reference {
  float scale = 1.0f, scale_inv = 1.0f;
  std::vector<std::uint8_t> codes;
  std::vector<double> values;  // what each element stands for
};

inline Float8Reference float8_quantize(const Float8Format& f, const std::vector<float>& x) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  Float8Reference q;
  q.scale = amax == 0.0f ? 1.0f : std::min(f.max / amax, std::numeric_limits<float>::max());
  q.scale_inv = 1.0f / q.scale;
  for (float v : x) {
    const std::uint8_t c = float8_encode(f, static_cast<float>(v * q.scale));
    q.codes.push_back(c);
    q.values.push_back(float8_decode(f, c) * static_cast<double>(q.scale_inv));
  }
  return q;
}

// C [m, n] = A [m, k] B^T (B [n, k]) in double, with the sum of |terms| beside it (for bounds).
inline void abt_reference(const std::vector<double>& a, const std::vector<double>& b, std::int64_t m,
                          std::int64_t k, std::int64_t n, std::vector<double>* c, std::vector<double>* abs_sum) {
  c->assign(static_cast<std::size_t>(m * n), 0.0);
  abs_sum->assign(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t t = 0; t < k; ++t) {
        const double p = a[static_cast<std::size_t>(i * k + t)] * b[static_cast<std::size_t>(j * k + t)];
        (*c)[static_cast<std::size_t>(i * n + j)] += p;
        (*abs_sum)[static_cast<std::size_t>(i * n + j)] += std::fabs(p);
      }
}

// Row-major [cols, rows] of row-major [rows, cols].
template <class T>
std::vector<T> transpose_of(const std::vector<T>& v, std::int64_t rows, std::int64_t cols) {
  std::vector<T> t(v.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) t[static_cast<std::size_t>(j * rows + i)] = v[static_cast<std::size_t>(i * cols + j)];
  return t;
}

}  // namespace bmt::testing
