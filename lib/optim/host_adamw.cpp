// AdamW's host update (host_adamw.hpp). The loops work on tiles of kTile elements: the values in
// the parameters' dtype go to a tile on the stack first and then out, so that `out` may lie over
// the gradient (whose tile has been read by then) while the loop itself sees arrays that do not
// alias (__restrict) and vectorizes. This file is compiled with -fno-math-errno, so that sqrt is
// an instruction rather than a call that may set errno.
#include "bmtrain/optim/host_adamw.hpp"

#include <cmath>
#include <cstring>

#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/half.hpp"

namespace bmt::optim {

namespace {

constexpr std::int64_t kTile = 2048;

// bf16_t::from_float without a branch: round to nearest even, NaN kept quiet.
inline std::uint16_t round_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float widen_bf16(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

struct ToF32 {
  using T = float;
  float operator()(float x) const { return x; }
  static float widen(float x) { return x; }
};
struct ToBf16 {
  using T = std::uint16_t;
  std::uint16_t operator()(float x) const { return round_bf16(x); }
  static float widen(std::uint16_t x) { return widen_bf16(x); }
};
struct ToF16 {
  using T = std::uint16_t;
  std::uint16_t operator()(float x) const { return f16_t::from_float(x); }
};

// The same expressions as the device kernel in adamw.cpp, with the per-step constants hoisted.
// Mo is the moments' conversion (ToF32 or ToBf16): the update reads the unrounded new moments.
template <class To, class Mo>
void update_tile(const float* __restrict g, float* __restrict w, typename Mo::T* __restrict m,
                 typename Mo::T* __restrict v, typename To::T* __restrict out, std::int64_t n, const HostAdamWStep& s) {
  const float scale = s.grad_scale, beta1 = s.beta1, beta2 = s.beta2, eps = s.eps, bias1 = s.bias1,
              bias2 = s.bias2, lr = s.lr;
  const float c1 = 1.0f - beta1, c2 = 1.0f - beta2, decay = 1.0f - s.lr * s.weight_decay;
  const To to;
  const Mo to_moment;
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * scale;
    const float mi = beta1 * Mo::widen(m[i]) + c1 * gi;
    const float vi = beta2 * Mo::widen(v[i]) + c2 * gi * gi;
    m[i] = to_moment(mi);
    v[i] = to_moment(vi);
    const float update = (mi / bias1) / (std::sqrt(vi / bias2) + eps);
    const float wi = w[i] * decay - lr * update;
    w[i] = wi;
    out[i] = to(wi);
  }
}

template <class To, class Mo>
void update(const float* g, float* w, void* m, void* v, void* out, std::int64_t n, const HostAdamWStep& s) {
  using T = typename To::T;
  using M = typename Mo::T;
  T tile[kTile];
  for (std::int64_t b = 0; b < n; b += kTile) {
    const std::int64_t k = n - b < kTile ? n - b : kTile;
    update_tile<To, Mo>(g + b, w + b, static_cast<M*>(m) + b, static_cast<M*>(v) + b, tile, k, s);
    std::memcpy(static_cast<T*>(out) + b, tile, static_cast<std::size_t>(k) * sizeof(T));
  }
}

template <class Mo>
void update_to(const float* g, float* w, void* m, void* v, void* out, DType out_dtype, std::int64_t n,
               const HostAdamWStep& s) {
  switch (out_dtype) {
    case DType::f32: return update<ToF32, Mo>(g, w, m, v, out, n, s);
    case DType::bf16: return update<ToBf16, Mo>(g, w, m, v, out, n, s);
    case DType::f16: return update<ToF16, Mo>(g, w, m, v, out, n, s);
    default: BMT_REQUIRE(false, "host_adamw_update: expected f32, bf16 or f16 values, found " << dtype_name(out_dtype));
  }
}

template <class To>
void round_all(const float* __restrict w, typename To::T* __restrict out, std::int64_t n) {
  const To to;
  for (std::int64_t i = 0; i < n; ++i) out[i] = to(w[i]);
}

}  // namespace

void host_adamw_update(const float* g, float* w, void* m, void* v, DType moments, void* out, DType out_dtype,
                       std::int64_t n, const HostAdamWStep& step) {
  switch (moments) {
    case DType::f32: return update_to<ToF32>(g, w, m, v, out, out_dtype, n, step);
    case DType::bf16: return update_to<ToBf16>(g, w, m, v, out, out_dtype, n, step);
    default: BMT_REQUIRE(false, "host_adamw_update: expected f32 or bf16 moments, found " << dtype_name(moments));
  }
}

void host_round(const float* w, void* out, DType out_dtype, std::int64_t n) {
  switch (out_dtype) {
    case DType::f32: return round_all<ToF32>(w, static_cast<float*>(out), n);
    case DType::bf16: return round_all<ToBf16>(w, static_cast<std::uint16_t*>(out), n);
    case DType::f16: return round_all<ToF16>(w, static_cast<std::uint16_t*>(out), n);
    default: BMT_REQUIRE(false, "host_round: expected f32, bf16 or f16 values, found " << dtype_name(out_dtype));
  }
}

}  // namespace bmt::optim
