// The memory-bound kernels at the sizes and layouts that select each of their code paths, against
// float64 host references, in f32, bf16 and f16. On the CUDA build these reach the raw CUDA kernels
// behind lib/kernels/memory_bound_seam.hpp: 16-byte packs (widths divisible by 8), element-wise loads (odd
// widths, operands that start off a 16-byte boundary), one warp or a wider team per row, rows too
// wide for registers (the portable kernels), a vocabulary row that starts anywhere (50257), and the
// deterministic embedding gradient (bitwise equal on a second run). Grouped-query attention at
// the inputs of each attention kernel family (wgmma, mma.sync, portable). On the host build the
// same checks hold for the portable kernels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "bmtrain/kernels/attention.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/cross_entropy.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/kernels/embedding.hpp"
#include "bmtrain/kernels/norm.hpp"
#include "bmtrain/kernels/softmax.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/attention_reference.hpp"
#include "common/gradcheck.hpp"
#include "common/reference_check.hpp"

namespace bmt {
namespace {

using testing::random_floats;
using testing::rounded_to;

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// A contiguous tensor holding `v` whose first element sits `offset` elements into its storage, so
// that offset 1 starts off a 16-byte boundary.
Tensor make(const std::vector<float>& v, const Shape& shape, DType dt, std::int64_t offset = 0) {
  std::vector<float> padded(static_cast<std::size_t>(offset), 0.0f);
  padded.insert(padded.end(), v.begin(), v.end());
  const std::int64_t n = static_cast<std::int64_t>(v.size());
  return Tensor::from_floats(padded, {n + offset}, dt).slice(0, offset, offset + n).view(shape);
}

// An uninitialized contiguous tensor of `shape` starting `offset` elements into its storage.
Tensor make_empty(const Shape& shape, DType dt, std::int64_t offset = 0) {
  const std::int64_t n = numel_of(shape);
  return Tensor::empty({n + offset}, dt).slice(0, offset, offset + n).view(shape);
}

// Every element within tol = atol + rtol * |expected|, with atol relative to the root mean square
// of the expected values: f32 results carry f32 rounding, bf16 ones one rounding to 8 bits.
void check(const Tensor& t, const std::vector<double>& expected, DType dt, const std::string& what) {
  double ms = 0;
  for (double e : expected) ms += e * e;
  const double rms = expected.empty() ? 0.0 : std::sqrt(ms / static_cast<double>(expected.size()));
  const double rel = dt == DType::f32 ? 2e-5 : 1e-2;
  testing::expect_close(t.to_host_floats(), expected, rel * rms + 1e-30, rel, what + " " + dtype_name(dt));
}

std::string describe(std::int64_t rows, std::int64_t C, std::int64_t offset = 0) {
  return "[" + std::to_string(rows) + ", " + std::to_string(C) + "]" + (offset ? " offset " + std::to_string(offset) : "");
}

// ---- LayerNorm / RMSNorm ----------------------------------------------------------------------

struct NormRef {
  std::vector<double> y, dx, dw, db;
};

NormRef norm_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                 const std::vector<float>& dy, std::int64_t C, double eps, bool centered) {
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / C;
  NormRef r;
  r.dw.assign(C, 0.0);
  r.db.assign(C, 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* xr = &x[i * C];
    const float* gr = &dy[i * C];
    double mu = 0, var = 0;
    if (centered) {
      for (std::int64_t j = 0; j < C; ++j) mu += xr[j];
      mu /= C;
    }
    for (std::int64_t j = 0; j < C; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    const double rs = 1.0 / std::sqrt(var / C + eps);
    double mean_g = 0, mean_gx = 0;
    std::vector<double> g(C), xh(C);
    for (std::int64_t j = 0; j < C; ++j) {
      xh[j] = (xr[j] - mu) * rs;
      r.y.push_back(xh[j] * (w.empty() ? 1.0 : w[j]) + (b.empty() ? 0.0 : b[j]));
      g[j] = gr[j] * (w.empty() ? 1.0 : w[j]);
      mean_g += g[j];
      mean_gx += g[j] * xh[j];
      r.dw[j] += gr[j] * xh[j];
      r.db[j] += gr[j];
    }
    mean_g = centered ? mean_g / C : 0.0;
    mean_gx /= C;
    for (std::int64_t j = 0; j < C; ++j) r.dx.push_back(rs * (g[j] - mean_g - xh[j] * mean_gx));
  }
  return r;
}

// How a norm test calls the kernels. add_into_f32: the parameter gradients are added into f32
// buffers holding earlier values (a ZeRO block's gradient buffer), and must come out as those
// values plus the sums, never rounded to x's dtype on the way. add_into_dx: dx holds the gradient
// the residual branch already gave x, and comes out as that plus the norm's (a block's backward).
struct NormCall {
  bool affine = true;
  std::int64_t offset = 0;
  bool want_dx = true;
  bool add_into_f32 = false;
  bool add_into_dx = false;

  NormCall& without_affine() { return affine = false, *this; }
  NormCall& at_offset(std::int64_t elements) { return offset = elements, *this; }
  NormCall& without_dx() { return want_dx = false, *this; }
  NormCall& into_f32() { return add_into_f32 = true, *this; }
  NormCall& into_dx() { return add_into_dx = true, *this; }
};

void run_norm(bool centered, std::int64_t rows, std::int64_t C, DType dt, std::uint32_t seed, NormCall call = {}) {
  const std::string what = std::string(centered ? "layer_norm " : "rms_norm ") + describe(rows, C, call.offset) +
                           (call.affine ? "" : " no affine") + (call.want_dx ? "" : " no dx") +
                           (call.add_into_f32 ? " added into f32" : "") + (call.add_into_dx ? " added into dx" : "");
  // An offset mean checks that the variance is not E[x^2] - E[x]^2.
  const auto xv = rounded_to(random_floats(rows * C, seed, 1.0f, 3.0f), dt);
  const auto wv = call.affine ? rounded_to(random_floats(C, seed + 1, 0.5f, 1.5f), dt) : std::vector<float>();
  const auto bv = call.affine && centered ? rounded_to(random_floats(C, seed + 2), dt) : std::vector<float>();
  const auto gv = rounded_to(random_floats(rows * C, seed + 3), dt);
  const auto dx_before = rounded_to(random_floats(rows * C, seed + 6), dt);
  const Tensor x = make(xv, {rows, C}, dt, call.offset), dy = make(gv, {rows, C}, dt, call.offset);
  const Tensor w = call.affine ? make(wv, {C}, dt) : Tensor(), b = bv.empty() ? Tensor() : make(bv, {C}, dt);
  const Tensor y = make_empty({rows, C}, dt, call.offset);
  Tensor dx;
  if (call.want_dx) dx = call.add_into_dx ? make(dx_before, {rows, C}, dt, call.offset) : make_empty({rows, C}, dt, call.offset);
  const Tensor mean = centered ? Tensor::empty({rows}) : Tensor(), rstd = Tensor::empty({rows});
  const auto earlier_w = random_floats(C, seed + 4), earlier_b = random_floats(C, seed + 5);
  auto param_grad = [&](bool wanted, const std::vector<float>& earlier) {
    if (!wanted) return Tensor();
    return call.add_into_f32 ? Tensor::from_floats(earlier, {C}) : Tensor::empty({C}, dt);
  };
  const Tensor dw = param_grad(call.affine, earlier_w), db = param_grad(!bv.empty(), earlier_b);
  if (centered) {
    kernels::layer_norm_forward(x, w, b, 1e-5f, y, mean, rstd);
    kernels::layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db, call.add_into_f32, call.add_into_dx);
  } else {
    kernels::rms_norm_forward(x, w, 1e-5f, y, rstd);
    kernels::rms_norm_backward(dy, x, w, rstd, dx, dw, call.add_into_f32, call.add_into_dx);
  }
  NormRef ref = norm_ref(xv, wv, bv, gv, C, 1e-5, centered);
  if (call.add_into_f32)
    for (std::int64_t j = 0; j < C; ++j) {
      ref.dw[j] += earlier_w[j];
      ref.db[j] += earlier_b[j];
    }
  if (call.add_into_dx)
    for (std::size_t i = 0; i < ref.dx.size(); ++i) ref.dx[i] += dx_before[i];
  check(y, ref.y, dt, what + " y");
  if (call.want_dx) check(dx, ref.dx, dt, what + " dx");
  const DType param_dt = call.add_into_f32 ? DType::f32 : dt;
  if (dw.defined()) check(dw, ref.dw, param_dt, what + " dweight");
  if (db.defined()) check(db, ref.db, param_dt, what + " dbias");
}

TEST(KernelPaths, NormsAtEveryRowWidth) {
  std::uint32_t seed = 10;
  // 768/1600/2048: GPT-2 widths (bf16 forward: 32, 64 and 64 threads a row; backward: 96 threads of
  // one pack, 128 and 128 of two); 2560: teams that are not a power of two in both (96 and 160
  // threads); 8192: the widest row kept in registers in backward; 12000: forward in registers,
  // backward portable; 20000: portable; 100 and 7: widths that take element-wise loads.
  for (DType dt : kDtypes)
    for (std::int64_t C : {768, 1600, 2048, 2560, 8192, 12000, 20000, 100, 7})
      for (bool centered : {true, false}) run_norm(centered, 37, C, dt, seed++);
}

TEST(KernelPaths, NormsWithoutAffineOffsetOrDx) {
  std::uint32_t seed = 100;
  for (DType dt : kDtypes)
    for (bool centered : {true, false}) {
      run_norm(centered, 70, 768, dt, seed++, NormCall().without_affine());    // no weight, no bias
      run_norm(centered, 70, 768, dt, seed++, NormCall().at_offset(1));        // rows off a 16-byte boundary
      run_norm(centered, 70, 768, dt, seed++, NormCall().without_dx());   // parameter gradients only
      run_norm(centered, 1, 1600, dt, seed++);                       // a single row
      run_norm(centered, 3000, 64, dt, seed++);   // many rows: many blocks' column sums
      run_norm(centered, 20000, 64, dt, seed++);  // more rows than resident teams: each walks several
    }
}

TEST(KernelPaths, NormParameterGradientsAddIntoF32Buffers) {
  std::uint32_t seed = 150;
  const NormCall into_f32 = NormCall().into_f32();
  for (DType dt : kDtypes)
    for (bool centered : {true, false}) {
      // One warp a row, element-wise loads, the portable backward.
      for (std::int64_t C : {1600, 100, 12000}) run_norm(centered, 37, C, dt, seed++, into_f32);
      run_norm(centered, 3000, 64, dt, seed++, NormCall().without_dx().into_f32());  // many blocks' column sums
    }
}

// As a transformer block's backward calls it: dx added into, the parameter gradients into f32. At
// GPT-2 widths in 2-byte types (where the CUDA kernel loads the dx it adds into ahead of the row's
// reductions) with rows enough that every team of an H200 walks about six of them and the blocks'
// partial rows (660 at 768 wide) outnumber the column-sum pass's 64 lanes many times over;
// element-wise rows and the portable kernel too.
TEST(KernelPaths, NormsAddIntoDxAsABlockDoes) {
  std::uint32_t seed = 170;
  const NormCall block = NormCall().into_f32().into_dx();
  for (DType dt : kDtypes)
    for (bool centered : {true, false}) {
      if (dtype_size(dt) == 2) {
        run_norm(centered, 8000, 768, dt, seed++, block);
        run_norm(centered, 3000, 1600, dt, seed++, block);
      }
      run_norm(centered, 300, 768, dt, seed++, block);
      for (std::int64_t C : {100, 12000}) run_norm(centered, 37, C, dt, seed++, block);
      run_norm(centered, 70, 768, dt, seed++, NormCall().at_offset(1).into_f32().into_dx());
      run_norm(centered, 70, 768, dt, seed++, NormCall().without_affine().into_dx());
    }
}

// The column sums (dW, db) and dx come out with the same bits on a second call: the partial rows
// are added in a fixed order, with no atomics. Widths of one and several teams a block, and rows
// enough for many blocks' partial rows.
TEST(KernelPaths, NormGradientsAreTheSameOnEveryRun) {
  for (DType dt : {DType::f32, DType::bf16})
    for (std::int64_t C : {768, 1600}) {
      const std::int64_t rows = 3000;
      const std::string what = "layer_norm " + describe(rows, C) + " " + dtype_name(dt);
      const Tensor x = make(rounded_to(random_floats(rows * C, 7, 1.0f, 3.0f), dt), {rows, C}, dt);
      const Tensor dy = make(rounded_to(random_floats(rows * C, 8), dt), {rows, C}, dt);
      const Tensor w = make(rounded_to(random_floats(C, 9, 0.5f, 1.5f), dt), {C}, dt);
      const Tensor b = make(rounded_to(random_floats(C, 10), dt), {C}, dt);
      const Tensor y = make_empty({rows, C}, dt), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
      kernels::layer_norm_forward(x, w, b, 1e-5f, y, mean, rstd);
      std::vector<std::vector<float>> runs;
      for (int run = 0; run < 2; ++run) {
        const Tensor dx = make_empty({rows, C}, dt), dw = Tensor::zeros({C}), db = Tensor::zeros({C});
        kernels::layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db, /*accumulate=*/true);
        for (const Tensor* t : {&dx, &dw, &db}) runs.push_back(t->to_host_floats());
      }
      for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(runs[k], runs[k + 3]) << what << ": output " << k << " differs";
    }
}

// ---- softmax ----------------------------------------------------------------------------------

TEST(KernelPaths, SoftmaxAtEveryRowWidth) {
  std::uint32_t seed = 200;
  // 20000 rows of 64: more rows than resident teams, so each team walks several; 1600 (GPT-2 XL's
  // width) takes teams of two warps, which reduce through shared memory; 2560 three warps.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{19, 1024}, {19, 4000}, {19, 50}, {19, 20000},
                                                                     {20000, 64}, {300, 1600}, {300, 2560}};
  for (DType dt : kDtypes)
    for (const auto& [rows, C] : shapes) {
      const auto xv = rounded_to(random_floats(rows * C, seed++, -4.0f, 4.0f), dt);
      const auto gv = rounded_to(random_floats(rows * C, seed++), dt);
      const Tensor x = make(xv, {rows, C}, dt), y = make_empty({rows, C}, dt);
      kernels::softmax_forward(x, y);
      // Backward from the kernel's own y (as autograd runs it), against float64 math on that y.
      const auto yv = y.to_host_floats();
      const Tensor dy = make(gv, {rows, C}, dt), dx = make_empty({rows, C}, dt);
      kernels::softmax_backward(y, dy, dx);
      std::vector<double> ref_y, ref_dx;
      for (std::int64_t i = 0; i < rows; ++i) {
        double m = -1e300, s = 0, dot = 0;
        for (std::int64_t j = 0; j < C; ++j) m = std::max(m, static_cast<double>(xv[i * C + j]));
        for (std::int64_t j = 0; j < C; ++j) s += std::exp(xv[i * C + j] - m);
        for (std::int64_t j = 0; j < C; ++j) ref_y.push_back(std::exp(xv[i * C + j] - m) / s);
        for (std::int64_t j = 0; j < C; ++j) dot += static_cast<double>(gv[i * C + j]) * yv[i * C + j];
        for (std::int64_t j = 0; j < C; ++j) ref_dx.push_back(yv[i * C + j] * (gv[i * C + j] - dot));
      }
      check(y, ref_y, dt, "softmax " + describe(rows, C));
      check(dx, ref_dx, dt, "softmax backward " + describe(rows, C));
    }
}

// ---- cross-entropy ----------------------------------------------------------------------------

TEST(KernelPaths, CrossEntropyAtGpt2Vocabulary) {
  std::uint32_t seed = 300;
  for (DType dt : kDtypes)
    for (std::int64_t V : {50257, 1000, 3})
      for (DType it : {DType::i64, DType::i32})
        for (std::int64_t offset : {0, 1}) {  // offset: dlogits off the logits' 16-byte phase
          const std::int64_t N = 24;
          const std::string what = "cross_entropy " + describe(N, V, offset) + " " + dtype_name(it);
          const auto xv = rounded_to(random_floats(N * V, seed++, -6.0f, 6.0f), dt);
          std::vector<std::int64_t> t(N);
          for (std::int64_t i = 0; i < N; ++i) t[i] = i % 5 == 3 ? -100 : (i * 7919 + 13) % V;
          const Tensor logits = make(xv, {N, V}, dt), targets = Tensor::from_ints(t, {N}, it);
          const Tensor lse = Tensor::empty({N}), loss = Tensor::empty({}), count = Tensor::empty({});
          kernels::cross_entropy_forward(logits, targets, -100, lse, loss, count);
          const Tensor grad = full({}, 1.5f), dlogits = make_empty({N, V}, dt, offset);
          kernels::cross_entropy_backward(logits, targets, -100, lse, count, grad, dlogits);
          std::vector<double> ref_lse, ref_dx;
          double total = 0, n = 0;
          for (std::int64_t i = 0; i < N; ++i) {
            double m = -1e300, s = 0;
            for (std::int64_t j = 0; j < V; ++j) m = std::max(m, static_cast<double>(xv[i * V + j]));
            for (std::int64_t j = 0; j < V; ++j) s += std::exp(xv[i * V + j] - m);
            ref_lse.push_back(m + std::log(s));
            if (t[i] != -100) {
              total += ref_lse.back() - xv[i * V + t[i]];
              n += 1;
            }
          }
          for (std::int64_t i = 0; i < N; ++i)
            for (std::int64_t j = 0; j < V; ++j)
              ref_dx.push_back(t[i] == -100 ? 0.0
                                            : 1.5 / n * (std::exp(xv[i * V + j] - ref_lse[i]) - (j == t[i] ? 1.0 : 0.0)));
          check(lse, ref_lse, DType::f32, what + " lse");
          check(loss, {total / n}, DType::f32, what + " loss");
          check(count, {n}, DType::f32, what + " count");
          check(dlogits, ref_dx, dt, what + " dlogits");
        }
}

// ---- elementwise ------------------------------------------------------------------------------

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double gelu_grad_ref(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(KernelPaths, ElementwiseAtEveryLengthAndPhase) {
  std::uint32_t seed = 400;
  // 1000003: packs and a tail; 8: one pack; 7: tail only. Offset 1 takes element-wise loads.
  for (DType dt : kDtypes)
    for (std::int64_t n : {1000003, 8, 7})
      for (std::int64_t offset : {0, 1}) {
        const std::string what = "n " + std::to_string(n) + " offset " + std::to_string(offset);
        const auto av = rounded_to(random_floats(n, seed++, -3.0f, 3.0f), dt);
        const auto bv = rounded_to(random_floats(n, seed++, -3.0f, 3.0f), dt);
        const Tensor a = make(av, {n}, dt, offset), b = make(bv, {n}, dt);
        std::vector<double> add, sub, mul, aff, gelu, dgelu, silu, dsilu, relu, drelu, swi, dgate, dup;
        for (std::int64_t i = 0; i < n; ++i) {
          const double x = av[i], y = bv[i], s = sigmoid(x);
          add.push_back(x + y);
          sub.push_back(x - y);
          mul.push_back(x * y);
          aff.push_back(0.5 * x - 2.0);
          gelu.push_back(gelu_ref(x));
          dgelu.push_back(y * gelu_grad_ref(x));
          silu.push_back(x * s);
          dsilu.push_back(y * s * (1 + x * (1 - s)));
          relu.push_back(x > 0 ? x : 0);
          drelu.push_back(x > 0 ? y : 0);
          swi.push_back(x * s * y);
          dgate.push_back(1.5 * y * s * (1 + x * (1 - s)));  // grad 1.5 everywhere
          dup.push_back(1.5 * x * s);
        }
        check(kernels::binary(kernels::BinaryOp::add, a, b), add, dt, "add " + what);
        check(kernels::binary(kernels::BinaryOp::sub, a, b), sub, dt, "sub " + what);
        check(kernels::binary(kernels::BinaryOp::mul, a, b), mul, dt, "mul " + what);
        check(kernels::affine(a, 0.5f, -2.0f), aff, dt, "affine " + what);
        check(kernels::activation_forward(kernels::Activation::gelu, a), gelu, dt, "gelu " + what);
        check(kernels::activation_backward(kernels::Activation::gelu, a, b), dgelu, dt, "gelu backward " + what);
        check(kernels::activation_forward(kernels::Activation::silu, a), silu, dt, "silu " + what);
        check(kernels::activation_backward(kernels::Activation::silu, a, b), dsilu, dt, "silu backward " + what);
        check(kernels::activation_forward(kernels::Activation::relu, a), relu, dt, "relu " + what);
        check(kernels::activation_backward(kernels::Activation::relu, a, b), drelu, dt, "relu backward " + what);
        check(kernels::swiglu_forward(a, b), swi, dt, "swiglu " + what);
        Tensor dg, du;
        kernels::swiglu_backward(a, b, full_like(a, 1.5f), &dg, &du);
        check(dg, dgate, dt, "swiglu d_gate " + what);
        check(du, dup, dt, "swiglu d_up " + what);
        Tensor only_up;
        kernels::swiglu_backward(a, b, full_like(a, 1.5f), nullptr, &only_up);
        check(only_up, dup, dt, "swiglu d_up alone " + what);
      }
}

TEST(KernelPaths, BroadcastRowOperand) {
  std::uint32_t seed = 500;
  for (DType dt : kDtypes)
    for (std::int64_t C : {768, 100}) {  // 100: a period that is not a whole number of packs
      const std::int64_t rows = 33;
      const auto av = rounded_to(random_floats(rows * C, seed++), dt), bv = rounded_to(random_floats(C, seed++), dt);
      const Tensor a = make(av, {rows, C}, dt), b = make(bv, {C}, dt);
      std::vector<double> sum, diff;
      for (std::int64_t i = 0; i < rows * C; ++i) {
        sum.push_back(static_cast<double>(av[i]) + bv[i % C]);
        diff.push_back(static_cast<double>(bv[i % C]) - av[i]);
      }
      check(kernels::binary(kernels::BinaryOp::add, a, b), sum, dt, "row broadcast add " + describe(rows, C));
      check(kernels::binary(kernels::BinaryOp::sub, b, a), diff, dt, "row broadcast sub " + describe(rows, C));
    }
}

TEST(KernelPaths, FillCastAccumulateScale) {
  std::uint32_t seed = 600;
  for (std::int64_t n : {1000003, 5})
    for (std::int64_t offset : {0, 1}) {
      const std::string what = "n " + std::to_string(n) + " offset " + std::to_string(offset);
      const auto v = random_floats(n, seed++, -2.0f, 2.0f), u = random_floats(n, seed++, -2.0f, 2.0f);
      const auto vb = rounded_to(v, DType::bf16);
      std::vector<double> filled(n, 0.25), acc, scaled;
      for (std::int64_t i = 0; i < n; ++i) {
        acc.push_back(static_cast<double>(u[i]) + 0.5 * static_cast<double>(vb[i]));
        scaled.push_back(-3.0 * static_cast<double>(v[i]));
      }
      const Tensor f32 = make(v, {n}, DType::f32, offset);
      const Tensor to_bf16 = make_empty({n}, DType::bf16, offset);
      copy_into(to_bf16, f32);  // f32 -> bf16: 8-element packs
      EXPECT_EQ(to_bf16.to_host_floats(), vb) << "cast to bf16 " << what;
      const Tensor back = make_empty({n}, DType::f32, 1 - offset);
      copy_into(back, to_bf16);  // bf16 -> f32, the other phase
      EXPECT_EQ(back.to_host_floats(), vb) << "cast to f32 " << what;
      const Tensor sum = make(u, {n}, DType::f32, offset);
      add_(sum, to_bf16, 0.5f);
      check(sum, acc, DType::f32, "add_ " + what);
      const Tensor s = make(v, {n}, DType::f32, offset);
      scale_(s, -3.0f);
      check(s, scaled, DType::f32, "scale_ " + what);
      const Tensor fb = make_empty({n}, DType::bf16, offset);
      fill_(fb, 0.25f);
      check(fb, filled, DType::bf16, "fill_ " + what);
      EXPECT_EQ(cast(f32, DType::bf16).to_host_floats(), vb) << "cast " << what;
    }
}

// ---- embedding --------------------------------------------------------------------------------

// The forward's rows and the backward's sums against float64 references, and the backward again:
// bitwise the same.
void check_embedding(std::int64_t V, const std::vector<std::int64_t>& ids, std::int64_t C, DType dt, DType grad_dt,
                     DType it, std::uint32_t& seed) {
  const std::int64_t tokens = static_cast<std::int64_t>(ids.size());
  const std::string what = "embedding V " + std::to_string(V) + " tokens " + std::to_string(tokens) + " C " +
                           std::to_string(C) + " " + dtype_name(dt) + " grad " + dtype_name(grad_dt) + " ids " +
                           dtype_name(it);
  const auto table = rounded_to(random_floats(V * C, seed++), dt);
  const auto gv = rounded_to(random_floats(tokens * C, seed++), dt);
  const Tensor id_t = Tensor::from_ints(ids, {tokens}, it);
  const Tensor out = Tensor::empty({tokens, C}, dt);
  kernels::embedding_forward(id_t, make(table, {V, C}, dt), out);
  std::vector<double> ref_out, ref_grad(static_cast<std::size_t>(V * C), 0.0);
  for (std::int64_t i = 0; i < tokens; ++i)
    for (std::int64_t c = 0; c < C; ++c) {
      ref_out.push_back(table[ids[i] * C + c]);
      ref_grad[ids[i] * C + c] += gv[i * C + c];
    }
  EXPECT_EQ(out.to_host_floats(), std::vector<float>(ref_out.begin(), ref_out.end())) << what;
  const Tensor grad_out = make(gv, {tokens, C}, dt);
  // Start from values that are not zero, so rows left unwritten show.
  const std::vector<float> stale(static_cast<std::size_t>(V * C), 7.0f);
  const Tensor g1 = make(stale, {V, C}, grad_dt), g2 = make(stale, {V, C}, grad_dt);
  const Tensor g3 = make(stale, {V, C}, grad_dt);
  kernels::embedding_backward(id_t, grad_out, g1);
  // Again from an index made ahead (as the op does at the forward), used twice.
  const kernels::EmbeddingIndex index = kernels::embedding_index(id_t, V);
  kernels::embedding_backward(id_t, grad_out, g2, index);
  kernels::embedding_backward(id_t, grad_out, g3, index);
  // Long runs of one id sum in f32: allow its rounding.
  check(g1, ref_grad, grad_dt == DType::f32 && dt == DType::f32 ? DType::f32 : DType::bf16, what);
  EXPECT_EQ(g1.to_host_floats(), g2.to_host_floats()) << what << ": with an index made ahead, the sums differ";
  EXPECT_EQ(g1.to_host_floats(), g3.to_host_floats()) << what << ": the index used again, the sums differ";
}

TEST(KernelPaths, EmbeddingGradientIsExactAndRepeatable) {
  std::uint32_t seed = 700;
  const std::int64_t V = 1000, tokens = 4099;
  // Half of the tokens share one id (a long run to add), the rest spread over the table.
  std::vector<std::int64_t> ids(tokens);
  for (std::int64_t i = 0; i < tokens; ++i) ids[i] = i % 2 ? 7 : (i * 7919 + 3) % V;
  for (std::int64_t C : {768, 100})
    for (DType dt : kDtypes)
      for (DType grad_dt : {DType::f32, DType::bf16})
        for (DType it : {DType::i32, DType::i64}) check_embedding(V, ids, C, dt, grad_dt, it, seed);
}

// Batches shorter than one chunk of sorted entries, runs that fill chunks exactly, one id for
// every token, and runs that end where a chunk ends.
TEST(KernelPaths, EmbeddingGradientOfRunsAtChunkEdges) {
  std::uint32_t seed = 800;
  const std::int64_t V = 50;
  std::vector<std::vector<std::int64_t>> batches = {{3}, {4, 4, 1, 4, 0}, std::vector<std::int64_t>(64, 9),
                                                    std::vector<std::int64_t>(3000, 49)};
  // ids 0..5, 32, 31, 33, 64, 1 and 95 tokens of each: once sorted, runs that fill a chunk, end
  // one short of its end, cross it and end on the next edge, ...; the tokens shuffled, so each
  // run's positions are out of order before the sort.
  std::vector<std::int64_t> edges;
  for (auto [id, n] : {std::pair{0, 32}, {1, 31}, {2, 33}, {3, 64}, {4, 1}, {5, 95}})
    for (int k = 0; k < n; ++k) edges.push_back(id);
  for (std::size_t i = 0; i < edges.size(); ++i) std::swap(edges[i], edges[(i * 97) % edges.size()]);
  batches.push_back(edges);
  for (const auto& ids : batches) {
    check_embedding(V, ids, 40, DType::bf16, DType::f32, DType::i32, seed);
    check_embedding(V, ids, 37, DType::bf16, DType::bf16, DType::i64, seed);  // rows of 74 bytes
  }
}

// A GPT-2-sized vocabulary: far more (row, slice) items than warps, so each warp walks many rows
// in turn (the CUDA kernel loads its next rows' places while it sums this one), most rows no token
// looked up, a few looked up often.
TEST(KernelPaths, EmbeddingGradientOfALargeVocabulary) {
  std::uint32_t seed = 900;
  const std::int64_t V = 50257, tokens = 3000;
  std::vector<std::int64_t> ids(tokens);
  for (std::int64_t i = 0; i < tokens; ++i) ids[i] = i % 5 == 0 ? 50256 : i % 7 == 0 ? 11 : (i * 7919 + 13) % V;
  check_embedding(V, ids, 64, DType::bf16, DType::f32, DType::i32, seed);
}

TEST(KernelPaths, EmbeddingIndexMustMatchTheIds) {
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  const Tensor ids = Tensor::from_ints({1, 2, 1}, {3}, DType::i32);
  const Tensor grad_out = ones({3, 4}), grad_weight = full({5, 4}, 7.0f);
  const Tensor two_ids = Tensor::from_ints({1, 2}, {2}, DType::i32);
  EXPECT_THAT([&] { kernels::embedding_backward(ids, grad_out, grad_weight, kernels::embedding_index(two_ids, 5)); },
              ThrowsMessage<Error>(HasSubstr("expected an index of 3 ids into 5 rows, found one of 2 ids into 5 rows")));
  EXPECT_THAT([&] { kernels::embedding_backward(ids, grad_out, grad_weight, kernels::embedding_index(ids, 6)); },
              ThrowsMessage<Error>(HasSubstr("found one of 3 ids into 6 rows")));
  EXPECT_THAT([] { kernels::embedding_index(Tensor::zeros({3}), 5); },
              ThrowsMessage<Error>(HasSubstr("expected i32 or i64 ids, found f32")));
  EXPECT_THAT([&] { kernels::embedding_index(ids, 0); },
              ThrowsMessage<Error>(HasSubstr("expected a table of at least one row, found 0")));
  // A matching index is taken: id 1 twice, id 2 once, every other row zero.
  kernels::embedding_backward(ids, grad_out, grad_weight, kernels::embedding_index(ids, 5));
  std::vector<float> want(20, 0.0f);
  for (int c = 0; c < 4; ++c) {
    want[4 + c] = 2.0f;
    want[8 + c] = 1.0f;
  }
  EXPECT_EQ(grad_weight.to_host_floats(), want);
}

// ---- Grouped-query attention ------------------------------------------------------------------

// The attention kernels called directly on a grouped-query problem in the layout a Llama block
// gives them: q, k and v are [B, T, heads, D] views of one [B, T, (H + 2 Hk) D] projection, read
// as [B, heads, T, D] through their strides. `offset` shifts the projection by that many elements
// (one puts every row off a 16-byte boundary, which the tensor-core kernels decline). Checked
// against the reference that repeats each key/value head for its group, and, for the
// deterministic sums over a group, against a second run bit for bit.
void check_grouped_query(const testing::AttentionSizes& s, DType dt, std::int64_t offset, const char* family,
                         std::uint32_t seed) {
  ASSERT_EQ(s.Tq, s.Tk);
  const std::int64_t B = s.B, T = s.Tq, H = s.H, Hk = s.kv_heads(), D = s.D, width = (H + 2 * Hk) * D;
  const std::string what = s.describe() + " " + dtype_name(dt) + (offset ? " unaligned" : "");
  const auto qkv = rounded_to(random_floats(B * T * width, seed, -1.5f, 1.5f), dt);
  const auto dout_bthd = rounded_to(random_floats(B * T * H * D, seed + 1), dt);
  const Tensor fused = make(qkv, {B, T, width}, dt, offset);
  auto heads = [&](std::int64_t first, std::int64_t n) {
    return fused.slice(2, first * D, (first + n) * D).view({B, T, n, D}).transpose(1, 2);
  };
  const Tensor q = heads(0, H), k = heads(H, Hk), v = heads(H + Hk, Hk);
  const Tensor dout = make(dout_bthd, {B, T, H, D}, dt).transpose(1, 2);
#ifdef BMT_ENABLE_CUDA
  ASSERT_EQ(std::string(kernels::attention_kernel_name(q, k, v)), family) << what;
#else
  (void)family;
  ASSERT_EQ(std::string(kernels::attention_kernel_name(q, k, v)), "portable") << what;
#endif
  const Tensor out = Tensor::empty({B, H, T, D}, dt), lse = Tensor::empty({B, H, T});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  kernels::attention_forward(q, k, v, true, scale, out, lse);
  auto backward = [&] {
    std::vector<Tensor> g{Tensor::empty({B, H, T, D}, dt), Tensor::empty({B, Hk, T, D}, dt),
                          Tensor::empty({B, Hk, T, D}, dt)};
    kernels::attention_backward(q, k, v, out, dout, lse, true, scale, g[0], g[1], g[2]);
    return g;
  };
  const std::vector<Tensor> grads = backward(), again = backward();
  // The reference in [B, heads, T, D].
  auto bhtd = [&](const Tensor& t) { return contiguous(t).to_host_floats(); };
  const auto ref = testing::attention_reference(s, bhtd(q), bhtd(k), bhtd(v), bhtd(dout), true, scale);
  // Tolerances: f32 to its rounding; 16-bit results rounded once, probabilities and dS once more.
  const double tol = dt == DType::f32 ? 2e-5 : dt == DType::bf16 ? 1.0 / 32 : 1.0 / 256;
  testing::expect_close(out.to_host_floats(), ref.out, tol, tol, what + " out");
  testing::expect_close(grads[0].to_host_floats(), ref.dq, tol, tol, what + " dq");
  testing::expect_close(grads[1].to_host_floats(), ref.dk, tol, tol, what + " dk");
  testing::expect_close(grads[2].to_host_floats(), ref.dv, tol, tol, what + " dv");
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(grads[i].to_host_floats(), again[i].to_host_floats()) << what << ": gradient " << i << " differs";
}

TEST(KernelPaths, GroupedQueryAttentionOnEveryPath) {
  const std::string wgmma_or_mma = testing::expected_tensor_core_kernel(64);
  const std::string wgmma_or_mma_128 = testing::expected_tensor_core_kernel(128);
  check_grouped_query({2, 8, 130, 130, 64, 2}, DType::bf16, 0, wgmma_or_mma.c_str(), 1000);
  check_grouped_query({1, 4, 97, 97, 64, 1}, DType::f16, 0, wgmma_or_mma.c_str(), 1010);
  // Llama's heads: 128 wide, four query heads to a key/value head, lengths off the 64-row tiles.
  check_grouped_query({1, 6, 70, 70, 128, 2}, DType::bf16, 0, wgmma_or_mma_128.c_str(), 1020);
  check_grouped_query({1, 8, 150, 150, 128, 2}, DType::f16, 0, wgmma_or_mma_128.c_str(), 1025);
  check_grouped_query({1, 4, 33, 33, 64, 2}, DType::bf16, 1, "portable", 1030);
  check_grouped_query({2, 6, 21, 21, 16, 3}, DType::f32, 0, "portable", 1040);
}

}  // namespace
}  // namespace bmt
