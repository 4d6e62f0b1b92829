// Host side of the GEMM seam: OpenBLAS sgemm. bf16/f16 operands are widened to f32 scratch
// matrices, multiplied, and the f32 result (plus bias, times a GELU derivative or through a GELU)
// is rounded once into C, so every dtype gets f32 products and sums.
#include <cblas.h>

#include "activation_math.hpp"
#include "bmtrain/kernels/gemm.hpp"
#include "gemm_check.hpp"
#include "gemm_float8.hpp"
#include "index_math.hpp"

namespace bmt::kernels {

namespace {

// A batch of row-major matrices [rows, cols] with a leading dimension and a batch stride.
template <class T>
struct Matrices {
  T* data;
  std::int64_t ld, batch_stride;
};

// dst = src elementwise (converting dtype), plus bias[c] on every row when bias is given, times
// gelu'(x) when GELU inputs x (laid out like dst) are given; with gelu, through a GELU, the value
// before it written to pre when pre is given.
template <class D, class S, class B = float>
void convert(Matrices<D> dst, Matrices<const S> src, std::int64_t batch, std::int64_t rows, std::int64_t cols,
             const B* bias = nullptr, const D* gelu_input = nullptr, bool gelu = false, D* pre = nullptr) {
  const std::int64_t per = rows * cols;
  Kokkos::parallel_for("bmt::gemm_convert", flat_range(batch * per), KOKKOS_LAMBDA(std::int64_t i) {
    const std::int64_t b = i / per, r = (i % per) / cols, c = i % cols;
    const std::int64_t at = b * dst.batch_stride + r * dst.ld + c;
    float v = to_f32(src.data[b * src.batch_stride + r * src.ld + c]);
    if (bias) v += to_f32(bias[c]);
    if (gelu_input) v = ewise::Gelu().backward(to_f32(gelu_input[at]), v);
    if (pre) pre[at] = from_f32<D>(v);
    if (gelu) v = ewise::Gelu().forward(v);
    dst.data[at] = from_f32<D>(v);
  });
}

template <class T>
void add_bias(float* c, std::int64_t ldc, std::int64_t rows, std::int64_t cols, const T* bias) {
  Kokkos::parallel_for("bmt::gemm_bias", flat_range(rows * cols), KOKKOS_LAMBDA(std::int64_t i) {
    const std::int64_t r = i / cols, j = i % cols;
    c[r * ldc + j] += to_f32(bias[j]);
  });
}

void sgemm_batch(const GemmParams& p, const float* a, std::int64_t lda, std::int64_t sa, const float* b,
                 std::int64_t ldb, std::int64_t sb, float* c, std::int64_t ldc, std::int64_t sc) {
  for (std::int64_t i = 0; i < p.batch; ++i)
    cblas_sgemm(CblasRowMajor, p.a.trans ? CblasTrans : CblasNoTrans, p.b.trans ? CblasTrans : CblasNoTrans,
                static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), p.alpha, a + i * sa,
                static_cast<int>(lda), b + i * sb, static_cast<int>(ldb), p.beta, c + i * sc, static_cast<int>(ldc));
}

// A widened f32 copy of a stored operand, packed (ld = stored columns, batch stride = one matrix).
template <class T>
Tensor widen(const GemmOperand& op, std::int64_t batch, std::int64_t rows, std::int64_t cols) {
  Tensor out = Tensor::empty({batch, rows, cols}, DType::f32);
  convert<float, T>({out.data_as<float>(), cols, rows * cols},
                    {static_cast<const T*>(op.data), op.ld, op.batch_stride}, batch, rows, cols);
  return out;
}

template <class T>
void gemm_widened(const GemmParams& p) {
  const std::int64_t ar = p.a.trans ? p.k : p.m, ac = p.a.trans ? p.m : p.k;
  const std::int64_t br = p.b.trans ? p.n : p.k, bc = p.b.trans ? p.k : p.n;
  const Tensor a = widen<T>(p.a, p.batch, ar, ac);
  const Tensor b = widen<T>(p.b, p.batch, br, bc);
  if (p.f32_output) {  // straight into the f32 C
    sgemm_batch(p, a.data_as<float>(), ac, ar * ac, b.data_as<float>(), bc, br * bc, static_cast<float*>(p.c), p.ldc,
                p.c_batch_stride);
    return;
  }
  T* c = static_cast<T*>(p.c);
  const Matrices<T> c_stored{c, p.ldc, p.c_batch_stride};
  Tensor cf = Tensor::empty({p.batch, p.m, p.n}, DType::f32);
  const Matrices<float> c_wide{cf.data_as<float>(), p.n, p.m * p.n};
  if (p.beta != 0.0f)
    convert<float, T>(c_wide, {c, p.ldc, p.c_batch_stride}, p.batch, p.m, p.n);
  sgemm_batch(p, a.data_as<float>(), ac, ar * ac, b.data_as<float>(), bc, br * bc, c_wide.data, p.n, p.m * p.n);
  convert<T, float, T>(c_stored, {c_wide.data, p.n, p.m * p.n}, p.batch, p.m, p.n, static_cast<const T*>(p.bias),
                       static_cast<const T*>(p.gelu_input), p.gelu_output, static_cast<T*>(p.gelu_pre));
}

}  // namespace

void gemm(const GemmParams& p) {
  check_gemm(p);
  if (p.dtype == DType::f32) {
    sgemm_batch(p, static_cast<const float*>(p.a.data), p.a.ld, p.a.batch_stride, static_cast<const float*>(p.b.data),
                p.b.ld, p.b.batch_stride, static_cast<float*>(p.c), p.ldc, p.c_batch_stride);
    if (p.bias) add_bias(static_cast<float*>(p.c), p.ldc, p.m, p.n, static_cast<const float*>(p.bias));
    if (p.gelu_input) {
      float* c = static_cast<float*>(p.c);
      const float* x = static_cast<const float*>(p.gelu_input);
      const std::int64_t n = p.n, ldc = p.ldc;
      Kokkos::parallel_for("bmt::gemm_gelu_backward", flat_range(p.m * n), KOKKOS_LAMBDA(std::int64_t i) {
        const std::int64_t at = (i / n) * ldc + i % n;
        c[at] = ewise::Gelu().backward(x[at], c[at]);
      });
    }
    if (p.gelu_output) {
      float* c = static_cast<float*>(p.c);
      float* pre = static_cast<float*>(p.gelu_pre);
      const std::int64_t n = p.n, ldc = p.ldc;
      Kokkos::parallel_for("bmt::gemm_gelu", flat_range(p.m * n), KOKKOS_LAMBDA(std::int64_t i) {
        const std::int64_t at = (i / n) * ldc + i % n;
        if (pre) pre[at] = c[at];
        c[at] = ewise::Gelu().forward(c[at]);
      });
    }
    return;
  }
  BMT_DISPATCH_FLOAT(p.dtype, "gemm", T, { gemm_widened<T>(p); });
}

// OpenBLAS has no float8: the codes widen exactly to f32 (gemm_float8.hpp).
void gemm_float8(const Float8GemmParams& p) {
  check_gemm_float8(p);
  gemm_float8_widened(p);
}

bool gemm_float8_on_tensor_cores(const Float8GemmParams& p) {
  check_gemm_float8(p);
  return false;
}

bool gemm_fuses_gelu(const GemmParams& p) {
  check_gemm(p);
  return true;
}

bool gemm_autotune() { return false; }  // OpenBLAS has no candidates to choose from

}  // namespace bmt::kernels
