// Throughput of the row-wise nn kernels (LayerNorm, RMSNorm, softmax, cross-entropy: forward then
// backward, as training runs them) in GB/s of bytes read and written, next to a plain device copy
// of the same bytes (the bandwidth ceiling), and the time of the fused attention forward.
//
//   bench_nn_kernels [--benchmark_filter=...]
//
// GB/s counts each kernel's compulsory traffic: LayerNorm/RMSNorm forward reads x and writes y,
// backward reads x and dy and writes dx (5 tensors); softmax likewise (x, y | y, dy, dx); cross-entropy
// reads the logits in forward and reads them and writes their gradient in backward (3). Row
// statistics and per-column weight gradients are small and not counted.
#include <benchmark/benchmark.h>

#include <cmath>

#include "bmtrain/kernels/attention.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/cross_entropy.hpp"
#include "bmtrain/kernels/norm.hpp"
#include "bmtrain/kernels/softmax.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/tensor/memory.hpp"

namespace {

using namespace bmt;

DType dtype_arg(std::int64_t a) { return a == 0 ? DType::f32 : DType::bf16; }

void sync() { context().compute_stream().synchronize(); }

Tensor random_like(const Shape& shape, DType dtype, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(numel_of(shape)));
  std::uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<std::int64_t>(s >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
  }
  return Tensor::from_floats(v, shape, dtype);
}

void report(benchmark::State& state, double bytes_per_iter, DType dtype) {
  state.counters["GB/s"] = benchmark::Counter(bytes_per_iter * static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(dtype_name(dtype));
}

// memory::copy of `tensors` tensors' worth of bytes: reads + writes, the same accounting as the kernels.
void BM_Copy(benchmark::State& state) {
  const std::int64_t rows = state.range(0), cols = state.range(1);
  const DType dt = dtype_arg(state.range(2));
  const std::size_t bytes = static_cast<std::size_t>(rows * cols) * dtype_size(dt);
  const Tensor a = random_like({rows, cols}, dt, 1), b = Tensor::empty({rows, cols}, dt);
  auto step = [&] {
    memory::copy(b.data(), a.data(), bytes);
  };
  step();  // first touch of fresh buffers (page faults) stays out of the timing
  sync();
  for (auto _ : state) {
    step();
    sync();
  }
  report(state, 2.0 * bytes, dt);
}

void BM_LayerNorm(benchmark::State& state) {
  const std::int64_t rows = state.range(0), C = state.range(1);
  const DType dt = dtype_arg(state.range(2));
  const Tensor x = random_like({rows, C}, dt, 1), w = random_like({C}, dt, 2), b = random_like({C}, dt, 3);
  const Tensor dy = random_like({rows, C}, dt, 4);
  const Tensor y = Tensor::empty({rows, C}, dt), dx = Tensor::empty({rows, C}, dt);
  const Tensor dw = Tensor::empty({C}, dt), db = Tensor::empty({C}, dt);
  const Tensor mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  auto step = [&] {
    kernels::layer_norm_forward(x, w, b, 1e-5f, y, mean, rstd);
    kernels::layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db);
  };
  step();  // first touch of fresh buffers (page faults) stays out of the timing
  sync();
  for (auto _ : state) {
    step();
    sync();
  }
  report(state, 5.0 * static_cast<double>(x.nbytes()), dt);
}

void BM_RmsNorm(benchmark::State& state) {
  const std::int64_t rows = state.range(0), C = state.range(1);
  const DType dt = dtype_arg(state.range(2));
  const Tensor x = random_like({rows, C}, dt, 1), w = random_like({C}, dt, 2), dy = random_like({rows, C}, dt, 4);
  const Tensor y = Tensor::empty({rows, C}, dt), dx = Tensor::empty({rows, C}, dt), dw = Tensor::empty({C}, dt);
  const Tensor rstd = Tensor::empty({rows});
  auto step = [&] {
    kernels::rms_norm_forward(x, w, 1e-6f, y, rstd);
    kernels::rms_norm_backward(dy, x, w, rstd, dx, dw);
  };
  step();  // first touch of fresh buffers (page faults) stays out of the timing
  sync();
  for (auto _ : state) {
    step();
    sync();
  }
  report(state, 5.0 * static_cast<double>(x.nbytes()), dt);
}

void BM_Softmax(benchmark::State& state) {
  const std::int64_t rows = state.range(0), C = state.range(1);
  const DType dt = dtype_arg(state.range(2));
  const Tensor x = random_like({rows, C}, dt, 1), dy = random_like({rows, C}, dt, 2);
  const Tensor y = Tensor::empty({rows, C}, dt), dx = Tensor::empty({rows, C}, dt);
  auto step = [&] {
    kernels::softmax_forward(x, y);
    kernels::softmax_backward(y, dy, dx);
  };
  step();  // first touch of fresh buffers (page faults) stays out of the timing
  sync();
  for (auto _ : state) {
    step();
    sync();
  }
  report(state, 5.0 * static_cast<double>(x.nbytes()), dt);
}

void BM_CrossEntropy(benchmark::State& state) {
  const std::int64_t N = state.range(0), V = state.range(1);
  const DType dt = dtype_arg(state.range(2));
  const Tensor logits = random_like({N, V}, dt, 1);
  std::vector<std::int64_t> t(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i) t[i] = (i * 7919) % V;
  const Tensor targets = Tensor::from_ints(t, {N});
  const Tensor lse = Tensor::empty({N}), loss = Tensor::empty({}), count = Tensor::empty({});
  const Tensor one = full({}, 1.0f), dlogits = Tensor::empty({N, V}, dt);
  auto step = [&] {
    kernels::cross_entropy_forward(logits, targets, -100, lse, loss, count);
    kernels::cross_entropy_backward(logits, targets, -100, lse, count, one, dlogits);
  };
  step();  // first touch of fresh buffers (page faults) stays out of the timing
  sync();
  for (auto _ : state) {
    step();
    sync();
  }
  report(state, 3.0 * static_cast<double>(logits.nbytes()), dt);
}

// Causal attention forward, [B, H, T, D]; reports the matmul FLOP rate (4 B H T^2 D / 2 causal).
void BM_AttentionForward(benchmark::State& state) {
  const std::int64_t B = 1, H = state.range(0), T = state.range(1), D = state.range(2);
  const DType dt = dtype_arg(state.range(3));
  const Tensor q = random_like({B, H, T, D}, dt, 1), k = random_like({B, H, T, D}, dt, 2);
  const Tensor v = random_like({B, H, T, D}, dt, 3), out = Tensor::empty({B, H, T, D}, dt);
  const Tensor lse = Tensor::empty({B, H, T});
  auto step = [&] {
    kernels::attention_forward(q, k, v, true, 1.0f / std::sqrt(static_cast<float>(D)), out, lse);
  };
  step();  // first touch of fresh buffers (page faults) stays out of the timing
  sync();
  for (auto _ : state) {
    step();
    sync();
  }
  const double flops = 4.0 * B * H * static_cast<double>(T) * T * D / 2.0;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(dtype_name(dt));
}

// rows, columns, dtype (0 = f32, 1 = bf16): GPT-2 small/XL widths and a Llama width.
void row_sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t dt : {0, 1})
    for (std::int64_t C : {768, 1600, 4096}) b->Args({4096, C, dt});
  b->Unit(benchmark::kMicrosecond);
}

void vocab_sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t dt : {0, 1}) b->Args({256, 50304, dt});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Copy)->Apply(row_sizes);
BENCHMARK(BM_LayerNorm)->Apply(row_sizes);
BENCHMARK(BM_RmsNorm)->Apply(row_sizes);
BENCHMARK(BM_Softmax)->Apply(row_sizes);
BENCHMARK(BM_Copy)->Apply(vocab_sizes);
BENCHMARK(BM_CrossEntropy)->Apply(vocab_sizes);
BENCHMARK(BM_AttentionForward)
    ->Args({12, 256, 64, 0})
    ->Args({12, 1024, 64, 0})
    ->Args({12, 1024, 64, 1})
    ->Args({32, 512, 128, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  bmt::DistributedGuard runtime(&argc, &argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
