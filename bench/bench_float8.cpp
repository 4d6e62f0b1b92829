// FP8 matrix products next to bf16 at the shapes of the transformer blocks they would run in.
//
//   bench_float8 [--benchmark_filter=...]
//
// Counters are rates: TFLOP=x/s (2 m n k per product) and GB=x/s.
// Gemm: C [m, n] bf16 = A [m, k] B^T with B [n, k] (a Linear layer's forward: W read through its
// transpose), as the GEMM alone: kernels::gemm_float8 on e4m3 operands with per-tensor scales
// (cuBLASLt's FP8 matmul on an H200), with and without fast accumulation, against kernels::gemm on
// bf16. On a GPU m = 8192 tokens and
// (k, n) every pair of the 6.65B GPT-2 shape's and Llama 3 8B's block widths (4096, 14336, 16384);
// a small product on the host, where the FP8 GEMM is the f32 product of widened codes.
// LinearForwardBackward: float8_linear against linear, forward and both gradients (3 products),
// quantization passes included: what a layer gains end to end.
// Quantize: abs max and the scaled cast of a bf16 [8192, 4096] tensor into both layouts, GB/s
// of x read (twice: the max, then the cast) and codes written (twice).
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/float8.hpp"
#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/tensor/memory.hpp"

#include "bench_common.hpp"

namespace {

using namespace bmt;
using namespace bmt::bench;

void report_flops(benchmark::State& state, double flops_per_iter, const std::string& label) {
  state.counters["TFLOP"] = benchmark::Counter(flops_per_iter * static_cast<double>(state.iterations()) * 1e-12,
                                                 benchmark::Counter::kIsRate);
  state.SetLabel(label);
}

// m, k, n, and 0 for bf16, 1 for e4m3 operands, 2 for e4m3 with fast accumulation.
void BM_Gemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const bool fp8 = state.range(3) != 0, fast = state.range(3) == 2;
  const Tensor a = random_tensor({m, k}, DType::bf16, 1), b = random_tensor({n, k}, DType::bf16, 2);
  const Tensor c = Tensor::empty({m, n}, DType::bf16);
  kernels::Float8Matrix qa, qb;
  kernels::Float8GemmParams f;
  kernels::GemmParams g;
  if (fp8) {
    qa = kernels::quantize_float8(a, k, kernels::abs_max(a), DType::f8e4m3);
    qb = kernels::quantize_float8(b, k, kernels::abs_max(b), DType::f8e4m3);
    f.m = m, f.n = n, f.k = k;
    f.a = qa.codes.data(), f.a_scale = qa.scale_inv.data_as<float>();
    f.b = qb.codes.data(), f.b_scale = qb.scale_inv.data_as<float>();
    f.c = c.data(), f.c_dtype = DType::bf16, f.ldc = n;
    f.fast_accumulation = fast;
  } else {
    g.dtype = DType::bf16;
    g.m = m, g.n = n, g.k = k;
    g.a = {a.data(), k, false, 0};
    g.b = {b.data(), k, true, 0};
    g.c = c.data();
    g.ldc = n;
  }
  const auto run = [&] { fp8 ? kernels::gemm_float8(f) : kernels::gemm(g); };
  run();  // warm-up: the plan made
  sync();
  for (auto _ : state) {
    run();
    sync();
  }
  report_flops(state, 2.0 * m * n * k, fast ? "e4m3 x e4m3 -> bf16, fast accumulation" : fp8 ? "e4m3 x e4m3 -> bf16" : "bf16");
}

// m, k, n, and 1 for float8_linear, 0 for linear, in bf16.
void BM_LinearForwardBackward(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const bool fp8 = state.range(3) != 0;
  Tensor x = random_tensor({m, k}, DType::bf16, 1), w = random_tensor({n, k}, DType::bf16, 2);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  const Tensor dy = random_tensor({m, n}, DType::bf16, 3);
  const auto pass = [&] {
    autograd::backward({fp8 ? float8_linear(x, w) : linear(x, w)}, {dy});
    x.set_grad(Tensor());
    w.set_grad(Tensor());
  };
  pass();  // warm-up
  sync();
  for (auto _ : state) {
    pass();
    sync();
  }
  report_flops(state, 3 * 2.0 * m * n * k, fp8 ? "float8_linear" : "linear, bf16");
}

void BM_Quantize(benchmark::State& state) {
  const std::int64_t rows = state.range(0), cols = state.range(1);
  const Tensor x = random_tensor({rows, cols}, DType::bf16, 1);
  const auto pass = [&] {
    return kernels::quantize_float8(x, cols, kernels::abs_max(x), DType::f8e4m3, true, true);
  };
  pass();
  sync();
  for (auto _ : state) {
    const auto q = pass();
    benchmark::DoNotOptimize(q.codes.data());
    sync();
  }
  const double bytes = static_cast<double>(rows * cols) * (2 * 2 + 2 * 1);
  state.counters["GB"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()) * 1e-9,
                                              benchmark::Counter::kIsRate);
}

// m, k, n, and each of `formats` for every (k, n) pair of the block widths; one small product on
// the host.
void block_shapes_of(benchmark::internal::Benchmark* b, const std::vector<std::int64_t>& formats) {
  if (memory::is_host()) {
    for (std::int64_t f : formats) b->Args({256, 256, 512, f});
  } else {
    const std::vector<std::pair<std::int64_t, std::int64_t>> kn = {
        {4096, 4096}, {4096, 16384}, {16384, 4096}, {4096, 14336}, {14336, 4096}};
    for (const auto& [k, n] : kn)
      for (std::int64_t f : formats) b->Args({8192, k, n, f});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void block_shapes(benchmark::internal::Benchmark* b) { block_shapes_of(b, {0, 1}); }
void gemm_shapes(benchmark::internal::Benchmark* b) { block_shapes_of(b, {0, 1, 2}); }

void quantize_shapes(benchmark::internal::Benchmark* b) {
  if (memory::is_host()) b->Args({256, 256});
  else b->Args({8192, 4096});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_Gemm)->Apply(gemm_shapes);
BENCHMARK(BM_LinearForwardBackward)->Apply(block_shapes);
BENCHMARK(BM_Quantize)->Apply(quantize_shapes);

}  // namespace

int main(int argc, char** argv) { return bmt::bench::run_benchmarks(argc, argv); }
