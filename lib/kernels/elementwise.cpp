// Elementwise kernels. Each loads its operands as float, computes in float and stores in the
// storage type, so bf16/f16 tensors get one rounding per output element.
#include "bmtrain/kernels/elementwise.hpp"

#include "activation_math.hpp"
#include "memory_bound_seam.hpp"
#include "index_math.hpp"

namespace bmt::kernels {

namespace {

using namespace ewise;

void require_floating_pair(const Tensor& a, const Tensor& b, const char* op) {
  BMT_REQUIRE(a.defined() && b.defined(), op << ": expected two defined tensors");
  BMT_REQUIRE(a.dtype() == b.dtype(), op << ": expected operands of one dtype, found " << dtype_name(a.dtype())
                                         << " " << to_string(a.shape()) << " and " << dtype_name(b.dtype()) << " "
                                         << to_string(b.shape()));
}

template <class T, class Op>
void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  T* o = view1<T>(out, "binary").data();
  const T* pa = view1<T>(a, "binary").data();
  const T* pb = view1<T>(b, "binary").data();
  const OffsetMap ia = broadcast_map(a.shape(), out.shape());
  const OffsetMap ib = broadcast_map(b.shape(), out.shape());
  Kokkos::parallel_for("bmt::binary", flat_range(out.numel()), KOKKOS_LAMBDA(std::int64_t i) {
    o[i] = from_f32<T>(op(to_f32(pa[ia(i)]), to_f32(pb[ib(i)])));
  });
}

template <class T, class Act>
void activation_forward_kernel(const Tensor& out, const Tensor& x, Act act) {
  T* o = view1<T>(out, "activation").data();
  const T* px = view1<T>(x, "activation").data();
  Kokkos::parallel_for("bmt::activation_forward", flat_range(x.numel()), KOKKOS_LAMBDA(std::int64_t i) {
    o[i] = from_f32<T>(act.forward(to_f32(px[i])));
  });
}

template <class T, class Act>
void activation_backward_kernel(const Tensor& out, const Tensor& x, const Tensor& grad, Act act) {
  T* o = view1<T>(out, "activation backward").data();
  const T* px = view1<T>(x, "activation backward").data();
  const T* pg = view1<T>(grad, "activation backward").data();
  Kokkos::parallel_for("bmt::activation_backward", flat_range(x.numel()), KOKKOS_LAMBDA(std::int64_t i) {
    o[i] = from_f32<T>(act.backward(to_f32(px[i]), to_f32(pg[i])));
  });
}

template <class Act>
Tensor run_activation(Activation kind, const Act& act, const Tensor& x, const Tensor* grad) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  if (x.numel() == 0) return out;
  if (grad ? seam::activation_backward(kind, out, x, *grad) : seam::activation_forward(kind, out, x)) return out;
  BMT_DISPATCH_FLOAT(x.dtype(), "activation", T, {
    if (grad)
      activation_backward_kernel<T>(out, x, *grad, act);
    else
      activation_forward_kernel<T>(out, x, act);
  });
  return out;
}

}  // namespace

Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  const std::size_t nd = std::max(a.size(), b.size());
  Shape out(nd, 1);
  for (std::size_t i = 0; i < nd; ++i) {
    const std::int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const std::int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    BMT_REQUIRE(da == db || da == 1 || db == 1, op << ": expected shapes that broadcast (equal, or 1, in each "
                                                      "trailing-aligned dimension), found "
                                                   << to_string(a) << " and " << to_string(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

const char* binary_name(BinaryOp op) { return op == BinaryOp::add ? "add" : op == BinaryOp::sub ? "sub" : "mul"; }

Tensor binary_output(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  require_floating_pair(a, b, name);
  return Tensor::empty(broadcast_shape(a.shape(), b.shape(), name), a.dtype());
}

void binary_into(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = binary_name(op);
  require_floating_pair(a, b, name);
  BMT_REQUIRE(out.dtype() == a.dtype() && out.is_contiguous() &&
                  out.shape() == broadcast_shape(a.shape(), b.shape(), name),
              name << ": expected a contiguous " << dtype_name(a.dtype()) << " output of shape "
                   << to_string(broadcast_shape(a.shape(), b.shape(), name)) << ", found "
                   << dtype_name(out.dtype()) << " " << to_string(out.shape()));
  if (out.numel() == 0) return;
  if (seam::binary(op, out, a, b)) return;
  BMT_DISPATCH_FLOAT(a.dtype(), name, T, {
    switch (op) {
      case BinaryOp::add: binary_kernel<T>(out, a, b, AddOp{}); break;
      case BinaryOp::sub: binary_kernel<T>(out, a, b, SubOp{}); break;
      case BinaryOp::mul: binary_kernel<T>(out, a, b, MulOp{}); break;
    }
  });
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = binary_output(op, a, b);
  binary_into(op, a, b, out);
  return out;
}

void residual_add_into(const Tensor& residual, const Tensor& x, const Tensor& bias, const Tensor& out) {
  const char* op = "residual_add";
  require_floating_pair(residual, x, op);
  BMT_REQUIRE(residual.shape() == x.shape() && x.dim() >= 1,
              op << ": expected a residual and an input of one shape, found " << to_string(residual.shape()) << " and "
                 << to_string(x.shape()));
  BMT_REQUIRE(out.dtype() == x.dtype() && out.shape() == x.shape() && out.is_contiguous() && x.is_contiguous() &&
                  residual.is_contiguous(),
              op << ": expected contiguous operands and a contiguous " << dtype_name(x.dtype()) << " "
                 << to_string(x.shape()) << " output, found " << dtype_name(out.dtype()) << " "
                 << to_string(out.shape()));
  const std::int64_t c = x.size(-1);
  BMT_REQUIRE(!bias.defined() || (bias.dtype() == x.dtype() && bias.shape() == Shape{c} && bias.is_contiguous()),
              op << ": expected a contiguous bias [" << c << "] in " << dtype_name(x.dtype()) << ", found "
                 << dtype_name(bias.dtype()) << " " << to_string(bias.shape()));
  if (out.numel() == 0 || seam::residual_add(out, residual, x, bias)) return;
  BMT_DISPATCH_FLOAT(x.dtype(), op, T, {
    T* o = view1<T>(out, op).data();
    const T* pr = view1<T>(residual, op).data();
    const T* px = view1<T>(x, op).data();
    const T* pb = bias.defined() ? view1<T>(bias, op).data() : nullptr;
    Kokkos::parallel_for("bmt::residual_add", flat_range(out.numel()), KOKKOS_LAMBDA(std::int64_t i) {
      o[i] = from_f32<T>(to_f32(pr[i]) + to_f32(px[i]) + (pb ? to_f32(pb[i % c]) : 0.0f));
    });
  });
}

Tensor affine(const Tensor& x, float alpha, float beta) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  if (x.numel() == 0) return out;
  if (seam::affine(out, x, alpha, beta)) return out;
  BMT_DISPATCH_FLOAT(x.dtype(), "affine", T, {
    T* o = view1<T>(out, "affine").data();
    const T* px = view1<T>(x, "affine").data();
    Kokkos::parallel_for("bmt::affine", flat_range(x.numel()), KOKKOS_LAMBDA(std::int64_t i) {
      o[i] = from_f32<T>(alpha * to_f32(px[i]) + beta);
    });
  });
  return out;
}

Tensor activation_forward(Activation act, const Tensor& x) {
  switch (act) {
    case Activation::gelu: return run_activation(act, Gelu{}, x, nullptr);
    case Activation::silu: return run_activation(act, Silu{}, x, nullptr);
    case Activation::relu: return run_activation(act, Relu{}, x, nullptr);
  }
  return Tensor();
}

Tensor activation_backward(Activation act, const Tensor& x, const Tensor& grad) {
  check_same_shape(x, grad, "activation backward");
  require_floating_pair(x, grad, "activation backward");
  switch (act) {
    case Activation::gelu: return run_activation(act, Gelu{}, x, &grad);
    case Activation::silu: return run_activation(act, Silu{}, x, &grad);
    case Activation::relu: return run_activation(act, Relu{}, x, &grad);
  }
  return Tensor();
}

Tensor swiglu_forward(const Tensor& gate, const Tensor& up) {
  check_same_shape(gate, up, "swiglu");
  require_floating_pair(gate, up, "swiglu");
  Tensor out = Tensor::empty(gate.shape(), gate.dtype());
  if (out.numel() == 0) return out;
  if (seam::swiglu_forward(out, gate, up)) return out;
  BMT_DISPATCH_FLOAT(gate.dtype(), "swiglu", T, {
    T* o = view1<T>(out, "swiglu").data();
    const T* pg = view1<T>(gate, "swiglu").data();
    const T* pu = view1<T>(up, "swiglu").data();
    Kokkos::parallel_for("bmt::swiglu_forward", flat_range(out.numel()), KOKKOS_LAMBDA(std::int64_t i) {
      o[i] = from_f32<T>(Silu{}.forward(to_f32(pg[i])) * to_f32(pu[i]));
    });
  });
  return out;
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& grad, Tensor* d_gate, Tensor* d_up) {
  check_same_shape(gate, up, "swiglu backward");
  check_same_shape(gate, grad, "swiglu backward");
  require_floating_pair(gate, grad, "swiglu backward");
  const bool want_gate = d_gate != nullptr, want_up = d_up != nullptr;
  Tensor dg = want_gate ? Tensor::empty(gate.shape(), gate.dtype()) : Tensor();
  Tensor du = want_up ? Tensor::empty(up.shape(), up.dtype()) : Tensor();
  if (gate.numel() > 0 && (want_gate || want_up) && !seam::swiglu_backward(gate, up, grad, dg, du)) {
    BMT_DISPATCH_FLOAT(gate.dtype(), "swiglu backward", T, {
      const T* pg = view1<T>(gate, "swiglu backward").data();
      const T* pu = view1<T>(up, "swiglu backward").data();
      const T* pgr = view1<T>(grad, "swiglu backward").data();
      T* odg = want_gate ? dg.data_as<T>() : nullptr;
      T* odu = want_up ? du.data_as<T>() : nullptr;
      Kokkos::parallel_for("bmt::swiglu_backward", flat_range(gate.numel()), KOKKOS_LAMBDA(std::int64_t i) {
        const float g = to_f32(pg[i]), u = to_f32(pu[i]), gr = to_f32(pgr[i]);
        if (odg) odg[i] = from_f32<T>(Silu{}.backward(g, gr * u));
        if (odu) odu[i] = from_f32<T>(gr * Silu{}.forward(g));
      });
    });
  }
  if (d_gate) *d_gate = dg;
  if (d_up) *d_up = du;
}

}  // namespace bmt::kernels
