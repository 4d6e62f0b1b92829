// GEMM and memory-bound elementwise kernels, each next to the ceiling it should approach.
//
//   bench_kernels [--benchmark_filter=...]
//
// Counters are rates: TFLOP=x/s and GB=x/s.
// GEMM: TFLOP/s (2 m n k per product) of bmt::matmul, next to a direct vendor call of the same
// shape and dtype with no library in between: cblas_sgemm on the host build, cublasLtMatmul on
// CUDA. The gap is the library's overhead (16-bit widening on the host, plan lookup on CUDA).
// Linear: forward and backward, the forward alone (what the bias epilogue costs), and the
// weight-gradient GEMM written new or added into an f32 buffer, TFLOP/s at the XL block's shapes.
// Head and loss: a language model's head (linear to the vocabulary) and cross-entropy, forward and
// backward, as linear then cross_entropy (chunk 0) or as linear_cross_entropy in row chunks, at
// GPT-2 XL's shape on a GPU: TFLOP/s of the 3 head GEMMs (the chunked op runs a fourth, not
// counted, so the rates compare time for the same result) and `peak_MiB`, the most memory the
// pass allocated beyond what it started with.
// Bias gradient: GB/s of dy read by its sum over tokens.
// Elementwise: GB/s of compulsory traffic, next to memory::copy moving the same number of bytes:
// GELU reads x and writes y, the cast reads 4 and writes 2 bytes per element, add reads two
// operands and writes one.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/kernels/reduce.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/tensor/memory.hpp"

#ifdef BMT_ENABLE_CUDA
#include "bmtrain/runtime/cuda_check.hpp"
#else
#include <cblas.h>
#endif

#include "bench_common.hpp"

namespace {

using namespace bmt;
using namespace bmt::bench;

void report_flops(benchmark::State& state, double flops_per_iter, DType dtype) {
  state.counters["TFLOP"] = benchmark::Counter(flops_per_iter * static_cast<double>(state.iterations()) * 1e-12,
                                                 benchmark::Counter::kIsRate);
  state.SetLabel(dtype_name(dtype));
}

void report_bytes(benchmark::State& state, double bytes_per_iter, const char* label) {
  state.counters["GB"] = benchmark::Counter(bytes_per_iter * static_cast<double>(state.iterations()) * 1e-9,
                                              benchmark::Counter::kIsRate);
  state.SetLabel(label);
}

// ---- GEMM -------------------------------------------------------------------------------------

// C [m, n] = A [m, k] B [k, n] through the library.
void BM_Matmul(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const DType dt = dtype_arg(state.range(3));
  const Tensor a = random_tensor({m, k}, dt, 1), b = random_tensor({k, n}, dt, 2);
  NoGradGuard no_grad;
  matmul(a, b);  // warm-up: output block cached, plans made
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    benchmark::DoNotOptimize(c.data());
    sync();
  }
  report_flops(state, 2.0 * m * n * k, dt);
}

// y = x W^T (+ b) with W [n, k]: the weight read through a transpose flag, as every Linear layer
// does; the fifth argument adds a bias (its gradient is a column sum of dy).
void BM_LinearForwardBackward(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const DType dt = dtype_arg(state.range(3));
  Tensor x = random_tensor({m, k}, dt, 1), w = random_tensor({n, k}, dt, 2);
  Tensor b = state.range(4) ? random_tensor({n}, dt, 4) : Tensor();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  if (b.defined()) b.set_requires_grad(true);
  const Tensor dy = random_tensor({m, n}, dt, 3);
  auto clear_grads = [&] {
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    if (b.defined()) b.set_grad(Tensor());
  };
  autograd::backward({linear(x, w, b)}, {dy});  // warm-up
  clear_grads();
  for (auto _ : state) {
    Tensor y = linear(x, w, b);
    autograd::backward({y}, {dy});
    clear_grads();
    sync();
  }
  report_flops(state, 3 * 2.0 * m * n * k, dt);  // forward, dx, dW
}

// rows, dim, vocab, dtype, chunk rows (0: linear then cross_entropy).
void BM_HeadAndLoss(benchmark::State& state) {
  const std::int64_t rows = state.range(0), dim = state.range(1), vocab = state.range(2);
  const DType dt = dtype_arg(state.range(3));
  const std::int64_t chunk = state.range(4);
  Tensor h = random_tensor({rows, dim}, dt, 1), w = random_tensor({vocab, dim}, dt, 2);
  h.set_requires_grad(true);
  w.set_requires_grad(true);
  std::vector<std::int64_t> targets(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int64_t>(i * 7919) % vocab;
  const Tensor t = Tensor::from_ints(targets, {rows});
  auto pass = [&] {
    const Tensor loss = chunk > 0 ? linear_cross_entropy(h, w, t, chunk) : cross_entropy(linear(h, w), t);
    loss.backward();
    h.set_grad(Tensor());
    w.set_grad(Tensor());
  };
  pass();  // warm-up: plans made, buffers cached
  sync();
  const std::size_t before = memory_stats().allocated_bytes;
  CachingAllocator::instance().reset_peak();
  for (auto _ : state) {
    pass();
    sync();
  }
  state.counters["peak_MiB"] = static_cast<double>(memory_stats().peak_allocated_bytes - before) / (1 << 20);
  report_flops(state, 3 * 2.0 * rows * dim * vocab, dt);
}

// The forward alone, y = x W^T (+ b): what the bias epilogue costs the GEMM.
void BM_LinearForward(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const DType dt = dtype_arg(state.range(3));
  const Tensor x = random_tensor({m, k}, dt, 1), w = random_tensor({n, k}, dt, 2);
  const Tensor b = state.range(4) ? random_tensor({n}, dt, 4) : Tensor();
  NoGradGuard no_grad;
  linear(x, w, b);  // warm-up
  for (auto _ : state) {
    Tensor y = linear(x, w, b);
    benchmark::DoNotOptimize(y.data());
    sync();
  }
  report_flops(state, 2.0 * m * n * k, dt);
}

// An MLP's first layer with no gradient recorded (a recomputed block's first pass), two ways:
// gelu(linear(x, W, b)), a GELU pass over the rounded product, or linear_gelu, the GELU in the
// GEMM's epilogue.
void BM_LinearGeluForward(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const DType dt = dtype_arg(state.range(3));
  const bool fused = state.range(4) != 0;
  const Tensor x = random_tensor({m, k}, dt, 1), w = random_tensor({n, k}, dt, 2), b = random_tensor({n}, dt, 4);
  NoGradGuard no_grad;
  const auto pass = [&] { return fused ? linear_gelu(x, w, b) : gelu(linear(x, w, b)); };
  pass();  // warm-up
  for (auto _ : state) {
    Tensor y = pass();
    benchmark::DoNotOptimize(y.data());
    sync();
  }
  report_flops(state, 2.0 * m * n * k, dt);
}

// A Linear's weight gradient dW [n, k] = dy^T [n, m] x [m, k] (m tokens) as the GEMM alone, two
// ways: written as a new tensor of the operands' dtype (beta 0), or added into an f32 gradient
// buffer (f32 output, beta 1), which is how a ZeRO block's layers take theirs.
void BM_WeightGradient(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const DType dt = dtype_arg(state.range(3));
  const bool into_f32 = state.range(4) != 0;
  const Tensor x = random_tensor({m, k}, dt, 1), dy = random_tensor({m, n}, dt, 2);
  const Tensor dw = into_f32 ? Tensor::zeros({n, k}, DType::f32) : Tensor::empty({n, k}, dt);
  kernels::GemmParams p;
  p.dtype = dt;
  p.m = n;
  p.n = k;
  p.k = m;
  p.a = {dy.data(), n, true, 0};  // dy stored [m, n]: read as its transpose
  p.b = {x.data(), k, false, 0};
  p.c = dw.data();
  p.ldc = k;
  p.beta = into_f32 ? 1.0f : 0.0f;
  p.f32_output = into_f32 && dt != DType::f32;
  kernels::gemm(p);  // warm-up: plan made
  for (auto _ : state) {
    kernels::gemm(p);
    sync();
  }
  report_flops(state, 2.0 * m * n * k, dt);
  state.SetLabel(std::string(dtype_name(dt)) + (into_f32 ? ", added into f32" : ", new"));
}

#ifdef BMT_ENABLE_CUDA
cudaDataType_t cuda_type(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : t == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
}

// The same product straight through cuBLASLt (row-major C = column-major C^T = B^T A^T), letting
// cuBLASLt pick the algorithm (null algo).
void BM_VendorGemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const DType dt = dtype_arg(state.range(3));
  const Tensor a = random_tensor({m, k}, dt, 1), b = random_tensor({k, n}, dt, 2), c = Tensor::empty({m, n}, dt);
  const cudaDataType_t type = cuda_type(dt);
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t lb, la, lc;
  BMT_CUBLAS_CHECK(cublasLtCreate(&handle));
  BMT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  BMT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, type, n, k, n));
  BMT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, type, k, m, k));
  BMT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, type, n, m, n));
  const std::size_t workspace_bytes = std::size_t(32) << 20;
  void* workspace = nullptr;
  BMT_CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  const float alpha = 1.0f, beta = 0.0f;
  cudaStream_t stream = context().compute_stream().native();
  BMT_CUBLAS_CHECK(cublasLtMatmul(handle, desc, &alpha, b.data(), lb, a.data(), la, &beta, c.data(), lc, c.data(), lc,
                                  nullptr, workspace, workspace_bytes, stream));  // warm-up
  for (auto _ : state) {
    BMT_CUBLAS_CHECK(cublasLtMatmul(handle, desc, &alpha, b.data(), lb, a.data(), la, &beta, c.data(), lc, c.data(),
                                    lc, nullptr, workspace, workspace_bytes, stream));
    sync();
  }
  BMT_CUDA_CHECK(cudaFree(workspace));
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
  report_flops(state, 2.0 * m * n * k, dt);
}
#else
// The same f32 product straight through OpenBLAS.
void BM_VendorGemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  if (state.range(3) != 0) {
    state.SkipWithError("the host BLAS has f32 only");
    return;
  }
  const Tensor a = random_tensor({m, k}, DType::f32, 1), b = random_tensor({k, n}, DType::f32, 2);
  const Tensor c = Tensor::zeros({m, n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a.data_as<float>(), static_cast<int>(k), b.data_as<float>(),
                static_cast<int>(n), 0.0f, c.data_as<float>(), static_cast<int>(n));
    benchmark::DoNotOptimize(c.data());
  }
  report_flops(state, 2.0 * m * n * k, DType::f32);
}
#endif

// ---- memory-bound -----------------------------------------------------------------------------

// memory::copy of `bytes` bytes: reads and writes them (2 * bytes of traffic).
void BM_Copy(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const Tensor a = Tensor::zeros({static_cast<std::int64_t>(bytes)}, DType::u8);
  const Tensor b = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::u8);
  memory::copy(b.data(), a.data(), bytes);  // warm-up: pages mapped
  for (auto _ : state) {
    memory::copy(b.data(), a.data(), bytes);
    sync();
  }
  report_bytes(state, 2.0 * static_cast<double>(bytes), "copy");
}

void BM_Gelu(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const DType dt = dtype_arg(state.range(1));
  const Tensor x = random_tensor({n}, dt, 1);
  NoGradGuard no_grad;
  gelu(x);  // warm-up
  for (auto _ : state) {
    Tensor y = gelu(x);
    benchmark::DoNotOptimize(y.data());
    sync();
  }
  report_bytes(state, 2.0 * static_cast<double>(x.nbytes()), dtype_name(dt));
}

void BM_CastF32ToBf16(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const Tensor x = random_tensor({n}, DType::f32, 1);
  NoGradGuard no_grad;
  to(x, DType::bf16);  // warm-up
  for (auto _ : state) {
    Tensor y = to(x, DType::bf16);
    benchmark::DoNotOptimize(y.data());
    sync();
  }
  report_bytes(state, 6.0 * static_cast<double>(n), "f32->bf16");
}

void BM_Add(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const DType dt = dtype_arg(state.range(1));
  const Tensor a = random_tensor({n}, dt, 1), b = random_tensor({n}, dt, 2);
  NoGradGuard no_grad;
  add(a, b);  // warm-up
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.data());
    sync();
  }
  report_bytes(state, 3.0 * static_cast<double>(a.nbytes()), dtype_name(dt));
}

// Square products, and the shapes of a GPT-2 small MLP (4096 tokens, 768 -> 3072).
void gemm_shapes(benchmark::internal::Benchmark* b) {
  const bool host = memory::is_host();
  const std::vector<std::int64_t> dtypes = host ? std::vector<std::int64_t>{0, 1} : std::vector<std::int64_t>{0, 1, 2};
  for (std::int64_t dt : dtypes) {
    for (std::int64_t s : host ? std::vector<std::int64_t>{256, 1024} : std::vector<std::int64_t>{1024, 4096, 8192})
      b->Args({s, s, s, dt});
    b->Args({host ? 512 : 4096, 768, 3072, dt});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void vendor_shapes(benchmark::internal::Benchmark* b) {
  const bool host = memory::is_host();
  for (std::int64_t dt : host ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{0, 1, 2}) {
    for (std::int64_t s : host ? std::vector<std::int64_t>{256, 1024} : std::vector<std::int64_t>{1024, 4096, 8192})
      b->Args({s, s, s, dt});
    b->Args({host ? 512 : 4096, 768, 3072, dt});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// A bias gradient added into an f32 gradient buffer: dy [rows, cols] summed over its rows
// (kernels::column_sums, as a Linear layer's backward in a ZeRO block does). GB/s of dy read.
void BM_BiasGradient(benchmark::State& state) {
  const std::int64_t rows = state.range(0), cols = state.range(1);
  const DType dt = dtype_arg(state.range(2));
  const Tensor dy = random_tensor({rows, cols}, dt, 1), grad = Tensor::zeros({cols});
  kernels::column_sums(dy, grad, true);  // warm-up
  for (auto _ : state) {
    kernels::column_sums(dy, grad, true);
    sync();
  }
  report_bytes(state, static_cast<double>(dy.nbytes()), dtype_name(dt));
}

// The GPT-2 XL block's bias widths at batch 16 x 1024 in bf16 (a small pair on the host).
void bias_shapes(benchmark::internal::Benchmark* b) {
  if (memory::is_host()) b->Args({4096, 768, 1});
  else
    for (std::int64_t cols : {1600, 4800, 6400}) b->Args({16 * 1024, cols, 1});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// GPT-2 small's MLP; on a GPU also the four projections of a GPT-2 XL block at batch 16 x 1024
// (QKV, attention output, MLP in, MLP out) in bf16 with their biases.
void linear_shapes(benchmark::internal::Benchmark* b) {
  const bool host = memory::is_host();
  for (std::int64_t dt : {0, 1}) b->Args({host ? 512 : 4096, 768, 3072, dt, 0});
  if (!host) {
    const std::int64_t tokens = 16 * 1024, C = 1600;
    for (const auto& kn : std::vector<std::pair<std::int64_t, std::int64_t>>{{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}})
      for (std::int64_t bias : {0, 1}) b->Args({tokens, kn.first, kn.second, 1, bias});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// GPT-2's first MLP layers: a small one on the host; on a GPU 124M's at batch 32 and XL's at
// batch 16 x 1024 tokens. Args: tokens, in, out, dtype, fused.
void mlp_in_shapes(benchmark::internal::Benchmark* b) {
  const bool host = memory::is_host();
  const std::vector<std::vector<std::int64_t>> shapes =
      host ? std::vector<std::vector<std::int64_t>>{{512, 768, 3072}}
           : std::vector<std::vector<std::int64_t>>{{32 * 1024, 768, 3072}, {16 * 1024, 1600, 6400}};
  for (const auto& s : shapes)
    for (std::int64_t fused : {0, 1}) b->Args({s[0], s[1], s[2], 1, fused});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// GPT-2's vocabulary as bmt-train pads it (50304, a multiple of 64: an odd row length costs the
// GEMMs their fast kernels): a small head on the host; on a GPU GPT-2 XL's at batch 16 x 1024,
// whole and in chunks of 1024, 2048 and 4096 rows.
void head_shapes(benchmark::internal::Benchmark* b) {
  const bool host = memory::is_host();
  const std::int64_t rows = host ? 256 : 16 * 1024, dim = host ? 64 : 1600, vocab = 50304;
  for (std::int64_t chunk : {0, 1024, 2048, 4096})
    if (chunk < rows) b->Args({rows, dim, vocab, host ? 0 : 1, chunk});
  if (host) b->Args({rows, dim, vocab, 0, 64});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// tokens, in, out, dtype, and 0 = a new gradient of the operands' dtype, 1 = added into an f32
// buffer: the XL block's four weight shapes on a GPU.
void weight_gradient_shapes(benchmark::internal::Benchmark* b) {
  const bool host = memory::is_host();
  for (std::int64_t into_f32 : {0, 1}) b->Args({host ? 512 : 4096, 768, 3072, 1, into_f32});
  if (!host) {
    const std::int64_t tokens = 16 * 1024, C = 1600;
    for (const auto& kn : std::vector<std::pair<std::int64_t, std::int64_t>>{{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}})
      for (std::int64_t into_f32 : {0, 1}) b->Args({tokens, kn.first, kn.second, 1, into_f32});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// Elements per tensor: 4 MiB and 64 MiB of f32.
void element_counts(benchmark::internal::Benchmark* b) {
  for (std::int64_t dt : {0, 1})
    for (std::int64_t n : {std::int64_t(1) << 20, std::int64_t(1) << 24}) b->Args({n, dt});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// Copies with each kernel's traffic (copy moves 2x its bytes): GELU 2n bf16 / 4n f32, cast 3n,
// add 3n bf16 / 6n f32 bytes.
void copy_bytes(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {std::int64_t(1) << 20, std::int64_t(1) << 24})
    for (std::int64_t per_element : {2, 3, 4, 6}) b->Arg(n * per_element);
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_Matmul)->Apply(gemm_shapes);
BENCHMARK(BM_VendorGemm)->Apply(vendor_shapes);
BENCHMARK(BM_LinearForwardBackward)->Apply(linear_shapes);
BENCHMARK(BM_LinearForward)->Apply(linear_shapes);
BENCHMARK(BM_LinearGeluForward)->Apply(mlp_in_shapes);
BENCHMARK(BM_WeightGradient)->Apply(weight_gradient_shapes);
BENCHMARK(BM_HeadAndLoss)->Apply(head_shapes);
BENCHMARK(BM_BiasGradient)->Apply(bias_shapes);
BENCHMARK(BM_Copy)->Apply(copy_bytes);
BENCHMARK(BM_Gelu)->Apply(element_counts);
BENCHMARK(BM_CastF32ToBf16)->Arg(std::int64_t(1) << 20)->Arg(std::int64_t(1) << 24)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Add)->Apply(element_counts);

}  // namespace

int main(int argc, char** argv) { return bmt::bench::run_benchmarks(argc, argv); }
