// CUDA side of the elementwise kernels (memory_bound_seam.hpp): grid-stride loops over 16-byte packs of
// every operand (8 bf16/f16 or 4 f32 elements per load), with the arithmetic of
// activation_math.hpp, so values are those of the portable kernels compiled for the GPU (GELU uses
// the hardware exp and reciprocal there). Contiguous operands only; a
// broadcast operand is taken when it repeats along the leading dimensions (a bias row).
#include "activation_math.hpp"
#include "cuda_common.hpp"
#include "memory_bound_seam.hpp"
#include "index_math.hpp"

namespace bmt::kernels::seam {

namespace {

using namespace cuda;
using namespace ewise;

// Reads operand elements [i, i + M) of an operand that is either the output's layout or a
// contiguous block of `period` elements repeated (period % M == 0 on the vector path, so a pack
// never wraps).
template <class T>
struct Operand {
  const T* p;
  std::int64_t period;  // 0: same layout as the output

  template <int M>
  __device__ __forceinline__ void read(std::int64_t i, float (&f)[M]) const {
    load<M>(p + (period ? i % period : i), f);
  }
};

template <class T, class Op>
struct BinaryF {
  T* o;
  Operand<T> a, b;
  Op op;
  template <int M>
  __device__ __forceinline__ void apply(std::int64_t i) const {
    float x[M], y[M];
    a.template read<M>(i, x);
    b.template read<M>(i, y);
#pragma unroll
    for (int k = 0; k < M; ++k) x[k] = op(x[k], y[k]);
    store<M>(o + i, x);
  }
};

template <class T>
struct ResidualAddF {
  T* o;
  const T* residual;
  const T* x;
  Operand<T> bias;  // bias.p null: none
  template <int M>
  __device__ __forceinline__ void apply(std::int64_t i) const {
    float r[M], v[M];
    load<M>(residual + i, r);
    load<M>(x + i, v);
#pragma unroll
    for (int k = 0; k < M; ++k) r[k] += v[k];
    if (bias.p) {
      bias.template read<M>(i, v);
#pragma unroll
      for (int k = 0; k < M; ++k) r[k] += v[k];
    }
    store<M>(o + i, r);
  }
};

template <class T>
struct AffineF {
  T* o;
  const T* x;
  float alpha, beta;
  template <int M>
  __device__ __forceinline__ void apply(std::int64_t i) const {
    float v[M];
    load<M>(x + i, v);
#pragma unroll
    for (int k = 0; k < M; ++k) v[k] = alpha * v[k] + beta;
    store<M>(o + i, v);
  }
};

template <class T, class Act>
struct ActivationF {
  T* o;
  const T* x;
  const T* grad;  // null: forward
  template <int M>
  __device__ __forceinline__ void apply(std::int64_t i) const {
    float v[M];
    load<M>(x + i, v);
    if (grad) {
      float g[M];
      load<M>(grad + i, g);
#pragma unroll
      for (int k = 0; k < M; ++k) v[k] = Act{}.backward(v[k], g[k]);
    } else {
#pragma unroll
      for (int k = 0; k < M; ++k) v[k] = Act{}.forward(v[k]);
    }
    store<M>(o + i, v);
  }
};

template <class T>
struct SwigluF {
  T* o;
  const T* gate;
  const T* up;
  template <int M>
  __device__ __forceinline__ void apply(std::int64_t i) const {
    float g[M], u[M];
    load<M>(gate + i, g);
    load<M>(up + i, u);
#pragma unroll
    for (int k = 0; k < M; ++k) g[k] = Silu{}.forward(g[k]) * u[k];
    store<M>(o + i, g);
  }
};

template <class T>
struct SwigluBackwardF {
  const T* gate;
  const T* up;
  const T* grad;
  T* d_gate;  // either may be null
  T* d_up;
  template <int M>
  __device__ __forceinline__ void apply(std::int64_t i) const {
    float g[M], u[M], gr[M], out[M];
    load<M>(gate + i, g);
    load<M>(up + i, u);
    load<M>(grad + i, gr);
    if (d_gate) {
#pragma unroll
      for (int k = 0; k < M; ++k) out[k] = Silu{}.backward(g[k], gr[k] * u[k]);
      store<M>(d_gate + i, out);
    }
    if (d_up) {
#pragma unroll
      for (int k = 0; k < M; ++k) out[k] = gr[k] * Silu{}.forward(g[k]);
      store<M>(d_up + i, out);
    }
  }
};

bool all_aligned(std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (p && !aligned(p, 16)) return false;
  return true;
}

bool contiguous_same_shape(const Tensor& ref, std::initializer_list<const Tensor*> ts) {
  if (!ref.is_contiguous()) return false;
  for (const Tensor* t : ts)
    if (t->defined() && (!t->is_contiguous() || t->shape() != ref.shape() || t->dtype() != ref.dtype())) return false;
  return true;
}

// The operand's period when it is the output's layout (0) or a contiguous block repeated along the
// leading dimensions; -1 for any other broadcast.
std::int64_t period_of(const Tensor& operand, const Tensor& out) {
  const OffsetMap m = broadcast_map(operand.shape(), out.shape());
  if (m.mode == OffsetMap::identity) return 0;
  if (m.mode == OffsetMap::period) return m.divisor;
  return -1;
}

template <class T, class Op>
void binary_typed(const Tensor& out, const Tensor& a, const Tensor& b, std::int64_t pa, std::int64_t pb, Op op) {
  constexpr int N = vec_of<T>();
  const BinaryF<T, Op> f{static_cast<T*>(out.data()),
                         {static_cast<const T*>(a.data()), pa},
                         {static_cast<const T*>(b.data()), pb},
                         op};
  const bool vector = all_aligned({out.data(), a.data(), b.data()}) && pa % N == 0 && pb % N == 0;
  launch_apply<N>(out.numel(), vector, f);
}

template <class Act>
bool run_activation(const Tensor& out, const Tensor& x, const Tensor* grad) {
  BMT_DISPATCH_FLOAT(x.dtype(), "activation", T, {
    const ActivationF<T, Act> f{static_cast<T*>(out.data()), static_cast<const T*>(x.data()),
                                grad ? static_cast<const T*>(grad->data()) : nullptr};
    launch_apply<vec_of<T>()>(x.numel(), all_aligned({f.o, f.x, f.grad}), f);
  });
  return true;
}

}  // namespace

bool binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (!available() || !contiguous_same_shape(out, {}) || !a.is_contiguous() || !b.is_contiguous()) return false;
  if (a.dtype() != out.dtype() || b.dtype() != out.dtype()) return false;
  const std::int64_t pa = period_of(a, out), pb = period_of(b, out);
  if (pa < 0 || pb < 0) return false;
  BMT_DISPATCH_FLOAT(out.dtype(), "binary", T, {
    switch (op) {
      case BinaryOp::add: binary_typed<T>(out, a, b, pa, pb, AddOp{}); break;
      case BinaryOp::sub: binary_typed<T>(out, a, b, pa, pb, SubOp{}); break;
      case BinaryOp::mul: binary_typed<T>(out, a, b, pa, pb, MulOp{}); break;
    }
  });
  return true;
}

bool residual_add(const Tensor& out, const Tensor& residual, const Tensor& x, const Tensor& bias) {
  if (!available() || !contiguous_same_shape(out, {&residual, &x})) return false;
  const std::int64_t period = bias.defined() ? bias.numel() : 0;
  BMT_DISPATCH_FLOAT(x.dtype(), "residual_add", T, {
    constexpr int N = vec_of<T>();
    const ResidualAddF<T> f{static_cast<T*>(out.data()),
                            static_cast<const T*>(residual.data()),
                            static_cast<const T*>(x.data()),
                            {bias.defined() ? static_cast<const T*>(bias.data()) : nullptr, period}};
    launch_apply<N>(x.numel(), all_aligned({f.o, f.residual, f.x, f.bias.p}) && period % N == 0, f);
  });
  return true;
}

bool affine(const Tensor& out, const Tensor& x, float alpha, float beta) {
  if (!available() || !contiguous_same_shape(out, {&x})) return false;
  BMT_DISPATCH_FLOAT(x.dtype(), "affine", T, {
    const AffineF<T> f{static_cast<T*>(out.data()), static_cast<const T*>(x.data()), alpha, beta};
    launch_apply<vec_of<T>()>(x.numel(), all_aligned({f.o, f.x}), f);
  });
  return true;
}

bool activation_forward(Activation act, const Tensor& out, const Tensor& x) {
  if (!available() || !contiguous_same_shape(out, {&x})) return false;
  switch (act) {
    case Activation::gelu: return run_activation<Gelu>(out, x, nullptr);
    case Activation::silu: return run_activation<Silu>(out, x, nullptr);
    case Activation::relu: return run_activation<Relu>(out, x, nullptr);
  }
  return false;
}

bool activation_backward(Activation act, const Tensor& out, const Tensor& x, const Tensor& grad) {
  if (!available() || !contiguous_same_shape(out, {&x, &grad})) return false;
  switch (act) {
    case Activation::gelu: return run_activation<Gelu>(out, x, &grad);
    case Activation::silu: return run_activation<Silu>(out, x, &grad);
    case Activation::relu: return run_activation<Relu>(out, x, &grad);
  }
  return false;
}

bool swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  if (!available() || !contiguous_same_shape(out, {&gate, &up})) return false;
  BMT_DISPATCH_FLOAT(out.dtype(), "swiglu", T, {
    const SwigluF<T> f{static_cast<T*>(out.data()), static_cast<const T*>(gate.data()),
                       static_cast<const T*>(up.data())};
    launch_apply<vec_of<T>()>(out.numel(), all_aligned({f.o, f.gate, f.up}), f);
  });
  return true;
}

bool swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& grad, const Tensor& d_gate,
                     const Tensor& d_up) {
  if (!available() || !contiguous_same_shape(gate, {&up, &grad, &d_gate, &d_up})) return false;
  BMT_DISPATCH_FLOAT(gate.dtype(), "swiglu backward", T, {
    const SwigluBackwardF<T> f{static_cast<const T*>(gate.data()), static_cast<const T*>(up.data()),
                               static_cast<const T*>(grad.data()), mut_ptr_or_null<T>(d_gate),
                               mut_ptr_or_null<T>(d_up)};
    launch_apply<vec_of<T>()>(gate.numel(), all_aligned({f.gate, f.up, f.grad, f.d_gate, f.d_up}), f);
  });
  return true;
}

}  // namespace bmt::kernels::seam
